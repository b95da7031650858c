#include "role/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void progress_start(struct progress *p, uint64_t version, uint64_t samples, uint64_t total,
		    double now)
{
	memset(p, 0, sizeof *p);
	p->total = total;
	p->version = p->version0 = p->last_version = version;
	p->samples = p->samples0 = p->last_samples = samples;
	p->t0 = p->last_t = now;
	p->ups = p->sps = -1;
}

void progress_set_total(struct progress *p, uint64_t total)
{
	p->total = total;
}

/* rate moved toward the rate measured over the last dt seconds, with time constant
 * PROGRESS_RATE_TAU (the first measure is taken as it is). */
static double smooth_rate(double rate, double measured, double dt)
{
	if (rate < 0)
		return measured;
	return rate + (1 - exp(-dt / PROGRESS_RATE_TAU)) * (measured - rate);
}

/* The rates as a measure at now would make them. */
static void rates_at(const struct progress *p, double now, double *ups, double *sps)
{
	double dt = now - p->last_t;
	*ups = p->ups;
	*sps = p->sps;
	if (dt < PROGRESS_RATE_DT)
		return;
	*ups = smooth_rate(p->ups, (double)(p->version - p->last_version) / dt, dt);
	*sps = smooth_rate(p->sps, (double)(p->samples - p->last_samples) / dt, dt);
}

void progress_resume(struct progress *p, double now)
{
	if (p->ups < 0) {
		/* no rate measured yet: the session's mean starts now */
		p->t0 = now;
		p->version0 = p->version;
		p->samples0 = p->samples;
	}
	p->last_t = now;
	p->last_version = p->version;
	p->last_samples = p->samples;
}

void progress_at(struct progress *p, uint64_t version, uint64_t samples, double now)
{
	p->version = version;
	p->samples = samples;
	if (now - p->last_t < PROGRESS_RATE_DT)
		return;
	rates_at(p, now, &p->ups, &p->sps);
	p->last_t = now;
	p->last_version = version;
	p->last_samples = samples;
}

void progress_loss(struct progress *p, double loss)
{
	if (!isfinite(loss))
		return;
	/* an exponential average, divided by its weight so that the first updates are not pulled
	 * toward 0 */
	p->loss_acc += PROGRESS_LOSS_ALPHA * (loss - p->loss_acc);
	p->loss_w += PROGRESS_LOSS_ALPHA * (1 - p->loss_w);
}

void progress_get(const struct progress *p, double now, struct progress_now *n)
{
	double s = now - p->t0, ups, sps;
	memset(n, 0, sizeof *n);
	/* the time since the last measure counts: a job that stalls slows down */
	rates_at(p, now, &ups, &sps);
	n->version = p->version;
	n->samples = p->samples;
	n->total = p->total;
	n->seconds = s > 0 ? s : 0;
	/* until a rate is measured, the session's mean */
	n->updates_per_s = ups >= 0 ? ups : s > 0 ? (double)(p->version - p->version0) / s : 0;
	n->samples_per_s = sps >= 0 ? sps : s > 0 ? (double)(p->samples - p->samples0) / s : 0;
	n->loss = p->loss_w > 0 ? p->loss_acc / p->loss_w : NAN;
	n->fraction = n->eta = -1;
	if (!p->total)
		return;
	n->fraction = p->samples >= p->total ? 1 : (double)p->samples / (double)p->total;
	if (p->samples >= p->total)
		n->eta = 0;
	else if (n->samples_per_s > 0)
		n->eta = (double)(p->total - p->samples) / n->samples_per_s;
}

char *progress_hms(double t, char *out, size_t cap)
{
	unsigned long long s;
	if (!(t >= 0) || t > 1e12) {
		snprintf(out, cap, "?");
		return out;
	}
	s = (unsigned long long)(t + 0.5);
	if (s >= 86400)
		snprintf(out, cap, "%llud %llu:%02llu:%02llu", s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
	else if (s >= 3600)
		snprintf(out, cap, "%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
	else
		snprintf(out, cap, "%llu:%02llu", s / 60, s % 60);
	return out;
}

char *progress_line(const struct progress_now *n, char *line, size_t cap)
{
	char eta[32];
	size_t len;
	int k;
	if (n->total)
		k = snprintf(line, cap, "version %llu  %llu/%llu samples (%.1f%%)  %.1f updates/s  ETA %s",
			     (unsigned long long)n->version, (unsigned long long)n->samples,
			     (unsigned long long)n->total, 100 * n->fraction, n->updates_per_s,
			     progress_hms(n->eta, eta, sizeof eta));
	else
		k = snprintf(line, cap, "version %llu  %llu samples  %.1f updates/s",
			     (unsigned long long)n->version, (unsigned long long)n->samples,
			     n->updates_per_s);
	len = k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
	if (isfinite(n->loss) && len < cap)
		snprintf(line + len, cap - len, "  loss %.4f", n->loss);
	return line;
}

int progress_show_init(struct progress_show *sh, const char *env, int tty, int quiet, char *err)
{
	double every = PROGRESS_LINES_EVERY;
	char *end;
	memset(sh, 0, sizeof *sh);
	sh->last = -1;
	sh->every = 0.25;
	if (!env || !*env)
		sh->mode = tty ? PROGRESS_TTY : PROGRESS_OFF;
	else if (!strcmp(env, "tty"))
		sh->mode = PROGRESS_TTY;
	else if (!strcmp(env, "off"))
		sh->mode = PROGRESS_OFF;
	else if (!strncmp(env, "lines", 5) && (!env[5] || env[5] == ':')) {
		if (env[5] && (every = strtod(env + 6, &end), end == env + 6 || *end || !(every >= 0) ||
			       every > 1e7))
			return gem_errf(err, GEM_EUSAGE,
					"GEM_PROGRESS=%s: after lines: a number of seconds", env);
		sh->mode = PROGRESS_LINES;
		sh->every = every;
	} else {
		return gem_errf(err, GEM_EUSAGE,
				"GEM_PROGRESS=%s: want tty, lines, lines:SECONDS or off", env);
	}
	if (quiet)
		sh->mode = PROGRESS_OFF;
	return 0;
}

int progress_show_due(struct progress_show *sh, double now)
{
	if (sh->mode == PROGRESS_OFF || (sh->last >= 0 && now - sh->last < sh->every))
		return 0;
	if (sh->last < 0 && sh->mode == PROGRESS_LINES) {
		/* the first plain line after `every` seconds, not at once */
		sh->last = now;
		return 0;
	}
	sh->last = now;
	return 1;
}

char *progress_show_text(struct progress_show *sh, const char *prog, const char *line, char *out,
			 size_t cap)
{
	if (sh->mode == PROGRESS_TTY) {
		snprintf(out, cap, "\r%s: %s\033[K", prog, line);
		sh->shown = 1;
	} else {
		snprintf(out, cap, "%s: %s\n", prog, line);
	}
	return out;
}

const char *progress_show_end(struct progress_show *sh)
{
	int shown = sh->shown;
	sh->shown = 0;
	return shown ? "\n" : "";
}
