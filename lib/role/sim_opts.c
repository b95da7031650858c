/* sim_opts: gem-sim's options (role/sim.h): their defaults and checks, the timing presets and
 * the server's cost, the step-time distributions, stragglers and deaths as written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "role/sim_impl.h"

/* ---- options ---- */

void sim_opts_default(struct sim_opts *o)
{
	memset(o, 0, sizeof *o);
	o->nworkers = 1;
	o->step = (struct sim_dist){SIM_CONST, 1, 0};
	o->straggler_factor = 1;
	o->threads = 1;
}

int sim_opts_check(const struct sim_opts *o, char *err)
{
	if (o->slices < 0 || o->slices > SLICE_MAX)
		return gem_errf(err, GEM_EUSAGE, "slices: between 1 and %d", SLICE_MAX);
	if (o->codec && blob_codec_check(o->codec, err) < 0)
		return gem_errprefix(err, "codec: "), GEM_EUSAGE;
	if (o->nworkers < 0 || o->nworkers + o->njoins < 1 ||
	    o->nworkers + o->njoins > SIM_MAX_WORKERS)
		return gem_errf(err, GEM_EUSAGE, "workers: between 1 and %d in all (with the joins)",
				SIM_MAX_WORKERS);
	/* lognormal's μ may be negative: a step of e^μ seconds */
	if (!((o->step.a >= 0 || o->step.kind == SIM_LOGNORMAL) && o->step.b >= 0) ||
	    !isfinite(o->step.a) || !isfinite(o->step.b) ||
	    o->step.kind < SIM_CONST || o->step.kind > SIM_LOGNORMAL)
		return gem_errf(err, GEM_EUSAGE, "step-time: a distribution with finite parameters >= 0");
	if (!(o->jitter >= 0 && o->jitter < 1))
		return gem_errf(err, GEM_EUSAGE, "jitter: not in [0, 1)");
	if (!(o->speed_spread >= 0 && o->speed_spread <= 10))
		return gem_errf(err, GEM_EUSAGE, "speed-spread: not in [0, 10]");
	if (o->stragglers < 0 || o->stragglers > o->nworkers)
		return gem_errf(err, GEM_EUSAGE, "stragglers: %d of %d workers", o->stragglers, o->nworkers);
	if (!(o->straggler_factor >= 1) || !isfinite(o->straggler_factor))
		return gem_errf(err, GEM_EUSAGE, "stragglers: the factor must be a number >= 1");
	if (!(o->latency >= 0) || !isfinite(o->latency))
		return gem_errf(err, GEM_EUSAGE, "latency: not a number of seconds >= 0");
	if (!(o->server_time >= 0) || !isfinite(o->server_time))
		return gem_errf(err, GEM_EUSAGE, "server-time: not a number of seconds >= 0");
	if (!(o->cost_a >= 0 && o->cost_b >= 0) || !isfinite(o->cost_a) || !isfinite(o->cost_b))
		return gem_errf(err, GEM_EUSAGE, "server-cost: not two numbers of seconds >= 0");
	if (!(o->bandwidth >= 0) || !isfinite(o->bandwidth))
		return gem_errf(err, GEM_EUSAGE, "bandwidth: not a number of bytes/s >= 0");
	for (int i = 0; i < o->ndeaths; i++)
		if (o->deaths[i].worker < 0 || o->deaths[i].worker >= o->nworkers + o->njoins ||
		    !(o->deaths[i].at >= 0) || !isfinite(o->deaths[i].at))
			return gem_errf(err, GEM_EUSAGE, "die: no worker %d (workers 0..%d)", o->deaths[i].worker,
					o->nworkers + o->njoins - 1);
	for (int i = 0; i < o->njoins; i++)
		if (!(o->joins[i] >= 0) || !isfinite(o->joins[i]))
			return gem_errf(err, GEM_EUSAGE, "join: not a time >= 0");
	if (o->threads < 1 || o->threads > 256)
		return gem_errf(err, GEM_EUSAGE, "threads: not in [1, 256]");
	return 0;
}

/* The measured preset: the cnn rows of share/gem/experiments/calibrate.sh on this project's
 * 2-core test machine (N = 4, 8, 16 real workers: σ 0.65, 0.55, 0.45; σ_w 0.06, 0.02, 0.03). */
#define MEASURED_SIGMA 0.55
#define MEASURED_SPREAD 0.04

int sim_timing_preset(const char *name, struct sim_opts *o, char *err)
{
	if (!strcmp(name, "roundrobin")) {
		o->step = (struct sim_dist){SIM_CONST, 1, 0};
		o->speed_spread = 0;
	} else if (!strcmp(name, "measured")) {
		o->step = (struct sim_dist){SIM_LOGNORMAL, 0, MEASURED_SIGMA};
		o->speed_spread = MEASURED_SPREAD;
	} else {
		return gem_errf(err, GEM_EUSAGE, "no timing preset \"%s\" (roundrobin, measured)", name);
	}
	o->jitter = 0;
	return 0;
}

/* Server CPU per commit, a seconds per parameter and b per commit, per codec: the fit of
 * t/perf/bench-sim-server.sh (gem-serve, rule gem, 4 workers, mlp and cnn; doc/scale.md). */
#define COST_RAW_A 3.8e-9
#define COST_RAW_B 557e-6
#define COST_FP16_A 2.5e-9
#define COST_FP16_B 838e-6
#define COST_INT8_A 2.5e-9
#define COST_INT8_B 913e-6

/* The server model's codecs: the server's CPU per commit, a·n + b, fitted by
 * t/perf/bench-sim-server.sh (int4 not measured: int8's). A codec not listed (zlib,
 * zlib+shuffle, topk) costs as raw. Their bytes on the links are those of each message as the
 * virtual workers encode it. */
static const struct {
	const char *name;
	double a, b;
} wire_codecs[] = {
	{.name = "raw", .a = COST_RAW_A, .b = COST_RAW_B},
	{.name = "fp16", .a = COST_FP16_A, .b = COST_FP16_B},
	{.name = "int8", .a = COST_INT8_A, .b = COST_INT8_B},
	{.name = "int4", .a = COST_INT8_A, .b = COST_INT8_B},
};

static int wire_codec(const char *codec)
{
	for (size_t i = 0; codec && i < sizeof wire_codecs / sizeof *wire_codecs; i++)
		if (!strcmp(codec, wire_codecs[i].name))
			return (int)i;
	return 0;
}

void sim_server_cost(const char *codec, double *a, double *b)
{
	*a = wire_codecs[wire_codec(codec)].a;
	*b = wire_codecs[wire_codec(codec)].b;
}

/* A whole string as a finite number >= 0. */
static int parse_num(const char *s, const char *end, double *out)
{
	char buf[64], *e;
	size_t len = (size_t)(end - s);
	if (len == 0 || len >= sizeof buf)
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	*out = strtod(buf, &e);
	return *e || !isfinite(*out) || *out < 0 ? -1 : 0;
}

int sim_parse_dist(const char *s, struct sim_dist *d, char *err)
{
	const char *colon = strchr(s, ':'), *comma;
	double a, b = 0;
	int kind;
	if (!colon)
		goto bad;
	if (!strncmp(s, "const:", 6))
		kind = SIM_CONST;
	else if (!strncmp(s, "normal:", 7))
		kind = SIM_NORMAL;
	else if (!strncmp(s, "lognormal:", 10))
		kind = SIM_LOGNORMAL;
	else
		goto bad;
	comma = strchr(colon + 1, ',');
	if (kind == SIM_CONST) {
		if (comma || parse_num(colon + 1, colon + 1 + strlen(colon + 1), &a))
			goto bad;
	} else if (!comma || parse_num(colon + 1, comma, &a) || parse_num(comma + 1, comma + 1 + strlen(comma + 1), &b)) {
		/* lognormal's μ may be negative: a step of e^μ seconds */
		char *e;
		if (kind != SIM_LOGNORMAL || !comma)
			goto bad;
		a = strtod(colon + 1, &e);
		if (e != comma || !isfinite(a) || parse_num(comma + 1, comma + 1 + strlen(comma + 1), &b))
			goto bad;
	}
	d->kind = kind;
	d->a = a;
	d->b = b;
	return 0;
bad:
	return gem_errf(err, GEM_EUSAGE,
			"not a step-time distribution: \"%s\" (const:T, normal:MEAN,SD or lognormal:MU,SIGMA)", s);
}

int sim_parse_stragglers(const char *s, int *k, double *f, char *err)
{
	const char *colon = strchr(s, ':');
	double kk;
	if (!colon || parse_num(s, colon, &kk) || kk != floor(kk) || kk > SIM_MAX_WORKERS ||
	    parse_num(colon + 1, colon + 1 + strlen(colon + 1), f) || *f < 1)
		return gem_errf(err, GEM_EUSAGE, "not K:F (K workers F >= 1 times slower): \"%s\"", s);
	*k = (int)kk;
	return 0;
}

int sim_parse_death(const char *s, struct sim_death *d, char *err)
{
	const char *at = strchr(s, '@');
	double w;
	if (!at || parse_num(s, at, &w) || w != floor(w) || w >= SIM_MAX_WORKERS ||
	    parse_num(at + 1, at + 1 + strlen(at + 1), &d->at))
		return gem_errf(err, GEM_EUSAGE, "not W@T (worker W dies at time T): \"%s\"", s);
	d->worker = (int)w;
	return 0;
}

