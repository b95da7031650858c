#include "run/runlog.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "rules/rule.h"
#include "run/run.h"

/* ---- writing ---- */

static void log_floats(FILE *f, const char *key, const struct rule_stats *st, size_t off)
{
	fprintf(f, "\"%s\":[", key);
	for (int i = 0; i < st->ntensors; i++) {
		const float *v = (const float *)((const char *)&st->t[i] + off);
		if (isfinite(*v))
			fprintf(f, "%s%.4g", i ? "," : "", (double)*v);
		else
			fprintf(f, "%snull", i ? "," : "");
	}
	fputc(']', f);
}

static void log_gossip(FILE *f, const struct run_log_gossip *g)
{
	fprintf(f, ",\"w\":%.9g,\"msgs\":%d,\"wait\":%.4f", g->w, g->msgs, g->wait);
	if (g->peer >= 0)
		fprintf(f, ",\"peer\":%d,\"dist\":%.6g", g->peer, g->dist);
}

void run_log_update(FILE *f, const struct run_log_update *u)
{
	const struct rule_stats *st = u->st;
	fprintf(f, "{\"time\":%.3f,\"elapsed\":%.3f,", u->time, u->elapsed);
	if (u->vtime >= 0)
		fprintf(f, "\"vtime\":%.6f,", u->vtime);
	fprintf(f, "\"version\":%llu,\"worker\":%d,\"tau\":%llu,", (unsigned long long)u->version,
		u->worker, (unsigned long long)u->tau);
	if (isfinite(u->loss))
		fprintf(f, "\"loss\":" RUN_LOG_LOSS_FORMAT ",", u->loss);
	else
		fputs("\"loss\":null,", f);
	fprintf(f, "\"samples\":%llu", (unsigned long long)u->samples);
	if (u->has_n)
		fprintf(f, ",\"n\":%llu", (unsigned long long)u->n);
	if (u->by_leave)
		fputs(",\"by\":\"leave\"", f);
	if (u->bytes_in || u->bytes_out)
		fprintf(f, ",\"bytes_in\":%llu,\"bytes_out\":%llu", (unsigned long long)u->bytes_in,
			(unsigned long long)u->bytes_out);
	if (u->gossip)
		log_gossip(f, u->gossip);
	if (st && st->ntensors > 0) {
		fputs(",\"pi\":{", f);
		log_floats(f, "median", st, offsetof(struct rule_tensor_stats, pi_median));
		fputc(',', f);
		log_floats(f, "mean", st, offsetof(struct rule_tensor_stats, pi_mean));
		fputc(',', f);
		log_floats(f, "zero", st, offsetof(struct rule_tensor_stats, clamped0));
		fputc(',', f);
		log_floats(f, "scale", st, offsetof(struct rule_tensor_stats, scale));
		fprintf(f, isfinite(st->all.scale) ? "},\"scale\":%.4g" : "},\"scale\":null",
			(double)st->all.scale);
	}
	fputs("}\n", f);
}

void run_log_json(FILE *f, json_t *obj)
{
	if (obj)
		json_dumpf(obj, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	fputc('\n', f);
}

void run_log_event(FILE *f, const char *event, double vtime, int worker, uint64_t version,
		   const char *extra)
{
	fprintf(f, "{\"event\":\"%s\",\"time\":%.3f", event, clock_wall());
	if (vtime >= 0)
		fprintf(f, ",\"vtime\":%.6f", vtime);
	if (worker >= 0)
		fprintf(f, ",\"worker\":%d", worker);
	fprintf(f, ",\"version\":%llu%s%s}\n", (unsigned long long)version, extra && *extra ? "," : "",
		extra ? extra : "");
}

void run_log_start(FILE *f, const struct run *r, const char *rule, const char *url, uint64_t version,
		   const struct layout *l)
{
	run_log_start_x(f, r, rule, url, version, l, NULL);
}

void run_log_start_x(FILE *f, const struct run *r, const char *rule, const char *url,
		     uint64_t version, const struct layout *l, json_t *more)
{
	json_t *names = json_array(), *ev;
	for (int i = 0; i < l->ntensors; i++)
		json_array_append_new(names, json_string(l->t[i].name));
	ev = json_pack("{s:s, s:f, s:I, s:s, s:s, s:o}", "event", "start", "time", clock_wall(), "version", (json_int_t)version, "rule",
		       rule, "model", r->spec.model_name, "tensors", names);
	if (ev && url)
		json_object_set_new(ev, "url", json_string(url));
	if (ev && more)
		json_object_update(ev, more);
	if (ev)
		json_dumpf(ev, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(13));
	fputc('\n', f);
	fflush(f);
	json_decref(ev);
}

/* ---- cutting back at a restart ---- */

/* The version a log line records (its first "version" member: every writer here puts it before
 * any free text), or -1 for a line with none. */
static long long line_version(const char *line)
{
	const char *v = strstr(line, "\"version\":");
	char *end;
	unsigned long long n;
	if (!v)
		return -1;
	errno = 0;
	n = strtoull(v + 10, &end, 10);
	return end == v + 10 || errno || n > (unsigned long long)LLONG_MAX ? -1 : (long long)n;
}

/* Copy the lines of in that stay (whole, of a version <= version) to path, atomically. */
static int log_rewrite(FILE *in, const char *path, uint64_t version, char *err)
{
	char tmp[PATH_MAX + 32];
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	FILE *out;
	int bad = 0;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (!(out = fopen(tmp, "w")))
		return gem_errf(err, GEM_EFAIL, "%s: %s", tmp, strerror(errno));
	rewind(in);
	while ((len = getline(&line, &cap, in)) > 0) {
		long long v = line_version(line);
		if (line[len - 1] == '\n' && (v < 0 || (uint64_t)v <= version))
			bad |= fwrite(line, 1, (size_t)len, out) != (size_t)len;
	}
	free(line);
	bad |= fflush(out) != 0 || fsync(fileno(out)) != 0;
	bad |= fclose(out) != 0;
	if (bad || rename(tmp, path) < 0) {
		unlink(tmp);
		return gem_errf(err, GEM_EFAIL, "%s: cannot cut the log back: %s", path, strerror(errno));
	}
	return 0;
}

/* Cut the log at path back to the checkpoint of version: the lines of later versions (what a
 * crash lost of θ, and would be logged again) and a torn last line go. Usually they are the
 * log's tail, which is truncated; else the log is rewritten without them. */
static int log_cut(const char *path, uint64_t version, char *err)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	off_t pos = 0, cut = -1;
	long long dropped = 0;
	int kept_after = 0, rc = 0;
	if (!f)
		return errno == ENOENT ? 0 : gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	while ((len = getline(&line, &cap, f)) > 0) {
		long long v = line_version(line);
		int drop = line[len - 1] != '\n' || (v >= 0 && (uint64_t)v > version);
		dropped += drop;
		if (drop && cut < 0)
			cut = pos;
		else if (!drop && cut >= 0)
			kept_after = 1;
		pos += len;
	}
	free(line);
	if (cut >= 0 && !kept_after && truncate(path, cut) < 0)
		rc = gem_errf(err, GEM_EFAIL, "%s: cannot cut the log back: %s", path, strerror(errno));
	else if (cut >= 0 && kept_after)
		rc = log_rewrite(f, path, version, err);
	if (cut >= 0 && rc == 0)
		log_info("%s: cut back to the checkpoint (version %llu): %lld line%s of later versions "
			 "or torn dropped", path, (unsigned long long)version, dropped, dropped == 1 ? "" : "s");
	fclose(f);
	return rc;
}

int run_log_open(const struct run *r, uint64_t version, FILE **out, char *err)
{
	char path[PATH_MAX + 16];
	int rc;
	run_file(r, RUN_LOG, path, sizeof path);
	if ((rc = log_cut(path, version, err)) < 0)
		return rc;
	*out = fopen(path, "a");
	if (!*out)
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	return 0;
}

/* ---- reading ---- */

/* A count of an update line (version, worker, tau, samples): an integer, or an integral real. */
static int need_count(const json_t *o, const char *key, long long *out, char *why, size_t cap)
{
	int rc = jget_integral(o, key, LLONG_MIN, LLONG_MAX, out);
	if (rc == JGET_MISSING)
		snprintf(why, cap, "missing \"%s\"", key);
	else if (rc != JGET_OK)
		snprintf(why, cap, "\"%s\" is not an integer", key);
	return rc;
}

/* An optional number >= 0 into *out (left as it is when missing); -1 when bad. */
static int opt_seconds(const json_t *o, const char *key, double *out, char *why, size_t cap)
{
	int rc = jget_num(o, key, 0, HUGE_VAL, out);
	if (rc < 0)
		snprintf(why, cap, "\"%s\" is %s", key, rc == JGET_TYPE ? "not a number" : "negative");
	return rc < 0 ? -1 : 0;
}

/* The times of an update line: vtime when it has one, else elapsed, which it must have. */
static int update_times(const json_t *o, struct run_log_update *u, char *why, size_t cap)
{
	int rc;
	if (opt_seconds(o, "time", &u->time, why, cap) < 0 ||
	    opt_seconds(o, "vtime", &u->vtime, why, cap) < 0)
		return -1;
	if ((rc = jget_num(o, "elapsed", -HUGE_VAL, HUGE_VAL, &u->elapsed)) == JGET_OK || u->vtime >= 0)
		return 0;
	if (rc == JGET_MISSING)
		snprintf(why, cap, "missing \"elapsed\"");
	else
		snprintf(why, cap, "\"elapsed\" is not a number");
	return -1;
}

/* What only a server's update line has: the commit's samples, or the leave that closed it, and
 * the bytes on the wire since the line before. */
static int update_server(const json_t *o, struct run_log_update *u, char *why, size_t cap)
{
	long long n, in = 0, out = 0;
	const char *by;
	int rc = jget_int(o, "n", 0, (long long)1 << 40, &n);
	if (rc < 0) {
		snprintf(why, cap, "\"n\" is not a count of samples");
		return -1;
	}
	if (jget_int(o, "bytes_in", 0, LLONG_MAX, &in) < 0 ||
	    jget_int(o, "bytes_out", 0, LLONG_MAX, &out) < 0) {
		snprintf(why, cap, "\"bytes_in\" or \"bytes_out\" is not a count of bytes");
		return -1;
	}
	u->bytes_in = (uint64_t)in;
	u->bytes_out = (uint64_t)out;
	u->has_n = rc == JGET_OK;
	u->n = u->has_n ? (uint64_t)n : 0;
	if ((rc = jget_str(o, "by", 0, &by)) < 0 || (rc == JGET_OK && strcmp(by, "leave"))) {
		snprintf(why, cap, "\"by\" is not \"leave\"");
		return -1;
	}
	u->by_leave = rc == JGET_OK;
	return 0;
}

static int parse_update(const json_t *o, struct run_log_update *u, char *why, size_t cap)
{
	static const char *const keys[] = {"version", "worker", "tau", "samples"};
	long long v[4];
	json_t *loss;
	for (int i = 0; i < 4; i++)
		if (need_count(o, keys[i], &v[i], why, cap) != JGET_OK)
			return -1;
	if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
		snprintf(why, cap, "negative %s", v[0] < 0 ? "version" : v[1] < 0 ? "worker"
						   : v[2] < 0 ? "tau" : "samples");
		return -1;
	}
	if (v[1] > INT_MAX) {
		snprintf(why, cap, "\"worker\" is out of range");
		return -1;
	}
	/* τ updates came between the version computed on and this one: τ < version */
	if (v[2] > v[0]) {
		snprintf(why, cap, "\"tau\" greater than \"version\"");
		return -1;
	}
	if (update_times(o, u, why, cap) < 0)
		return -1;
	if (!(loss = json_object_get(o, "loss"))) {
		snprintf(why, cap, "missing \"loss\"");
		return -1;
	}
	if (!json_is_null(loss) && !json_is_number(loss)) {
		snprintf(why, cap, "\"loss\" is neither a number nor null");
		return -1;
	}
	u->version = (uint64_t)v[0];
	u->worker = (int)v[1];
	u->tau = (uint64_t)v[2];
	u->samples = (uint64_t)v[3];
	u->loss = json_is_null(loss) ? NAN : json_number_value(loss);
	return update_server(o, u, why, cap);
}

/* An event's common fields, each optional; an event named by other than a string is one of a
 * kind no reader knows (""). */
static int parse_event(struct run_log_line *l, char *why, size_t cap)
{
	const json_t *o = l->json;
	long long v;
	int rc;
	l->event = jget_str_or(o, "event", "");
	if (opt_seconds(o, "time", &l->u.time, why, cap) < 0 ||
	    opt_seconds(o, "vtime", &l->u.vtime, why, cap) < 0)
		return -1;
	if ((rc = jget_integral(o, "worker", 0, INT_MAX, &v)) < 0) {
		snprintf(why, cap, "\"worker\" is not a worker's number");
		return -1;
	}
	l->u.worker = rc == JGET_OK ? (int)v : -1;
	if ((rc = jget_integral(o, "version", 0, LLONG_MAX, &v)) < 0) {
		snprintf(why, cap, "\"version\" is not a version");
		return -1;
	}
	l->has_version = rc == JGET_OK;
	l->u.version = l->has_version ? (uint64_t)v : 0;
	return 0;
}

int run_log_parse(const char *text, size_t len, struct run_log_line *l, char *why, size_t cap)
{
	json_error_t je;
	memset(l, 0, sizeof *l);
	l->u.time = l->u.elapsed = l->u.loss = NAN;
	l->u.vtime = -1;
	l->u.worker = -1;
	if (!(l->json = json_loadb(text, len, 0, &je)))
		snprintf(why, cap, "not JSON");
	else if (!json_is_object(l->json))
		snprintf(why, cap, "not a JSON object");
	else if (json_object_get(l->json, "event") ? parse_event(l, why, cap) == 0
						    : parse_update(l->json, &l->u, why, cap) == 0)
		return 0;
	return GEM_EUSAGE;
}

void run_log_line_free(struct run_log_line *l)
{
	json_decref(l->json);
	l->json = NULL;
}

int run_log_reader_open(struct run_log_reader *rd, const char *path, int follow, char *err)
{
	memset(rd, 0, sizeof *rd);
	rd->follow = follow;
	if (!strcmp(path, "-")) {
		rd->f = stdin;
		rd->name = "stdin";
		return 0;
	}
	rd->name = path;
	if (!(rd->f = fopen(path, "r")))
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	return 0;
}

int run_log_next(struct run_log_reader *rd, const struct run_log_line **l, const char **why,
		 char *err)
{
	ssize_t len;
	run_log_line_free(&rd->cur);
	*l = NULL;
	*why = NULL;
	while ((len = getline(&rd->buf, &rd->cap, rd->f)) > 0) {
		/* a growing log's last line may be half written: it is read next time */
		if (rd->follow && rd->buf[len - 1] != '\n')
			return 0;
		rd->line++;
		while (len && (rd->buf[len - 1] == '\n' || rd->buf[len - 1] == '\r' || rd->buf[len - 1] == ' '))
			len--;
		if (len == 0)
			continue;
		if (run_log_parse(rd->buf, (size_t)len, &rd->cur, rd->why, sizeof rd->why) < 0)
			*why = rd->why;
		else
			*l = &rd->cur;
		return 1;
	}
	if (ferror(rd->f))
		return gem_errf(err, GEM_EFAIL, "%s: %s", rd->name, strerror(errno));
	return 0;
}

int run_log_bytes_open(struct run_log_bytes *b, const char *path, char *err)
{
	memset(b, 0, sizeof *b);
	return run_log_reader_open(&b->rd, path, 1, err);
}

/* A line's bytes_out, and its bytes_in too when with_in (see run_log_line_bytes). */
static uint64_t line_bytes(const struct run_log_line *l, int with_in)
{
	long long in = 0, out = 0;
	if (!l->event)
		return (with_in ? l->u.bytes_in : 0) + l->u.bytes_out;
	if (strcmp(l->event, "stop"))
		return 0;
	if (with_in)
		jget_int(l->json, "bytes_in", 0, LLONG_MAX, &in);
	jget_int(l->json, "bytes_out", 0, LLONG_MAX, &out);
	return (uint64_t)in + (uint64_t)out;
}

uint64_t run_log_line_bytes(const struct run_log_line *l)
{
	return line_bytes(l, 1);
}

int run_log_bytes_sent(const char *path, uint64_t *out, char *err)
{
	struct run_log_reader rd;
	const struct run_log_line *l;
	const char *why;
	int rc = run_log_reader_open(&rd, path, 0, err);
	*out = 0;
	while (rc == 0 && (rc = run_log_next(&rd, &l, &why, err)) > 0) {
		if (l)
			*out += line_bytes(l, 0);
		rc = 0;
	}
	if (rd.f)
		run_log_reader_close(&rd);
	return rc;
}

int run_log_bytes_at(struct run_log_bytes *b, uint64_t version, uint64_t *bytes, char *err)
{
	const struct run_log_line *l;
	const char *why;
	int rc;
	if (b->ahead && b->ahead_version <= version) {
		b->total += b->ahead_bytes;
		b->ahead = 0;
	}
	/* a log still written: what was at its end last time may have grown */
	clearerr(b->rd.f);
	while (!b->ahead && (rc = run_log_next(&b->rd, &l, &why, err)) != 0) {
		if (rc < 0)
			return rc;
		if (!l || !(l->event ? l->has_version : 1))
			continue;
		if (l->u.version <= version)
			b->total += run_log_line_bytes(l);
		else
			b->ahead = 1, b->ahead_version = l->u.version, b->ahead_bytes = run_log_line_bytes(l);
	}
	*bytes = b->total;
	return 0;
}

void run_log_bytes_close(struct run_log_bytes *b)
{
	if (b->rd.f)
		run_log_reader_close(&b->rd);
	memset(b, 0, sizeof *b);
}

void run_log_reader_close(struct run_log_reader *rd)
{
	run_log_line_free(&rd->cur);
	if (rd->f && rd->f != stdin)
		fclose(rd->f);
	free(rd->buf);
	memset(rd, 0, sizeof *rd);
}

/* ---- how the run ended ---- */

void run_log_end(FILE *f, double vtime, const struct run_end *e)
{
	char extra[64], loss[24];
	if (e->how == RUN_DIVERGED)
		snprintf(extra, sizeof extra, "\"how\":\"diverged\",\"loss\":%s",
			 num_json(loss, sizeof loss, e->loss));
	else
		snprintf(extra, sizeof extra, "\"how\":\"complete\"");
	run_log_event(f, "end", vtime, e->how == RUN_DIVERGED ? e->worker : -1, e->version, extra);
}

/* The end a pair of lines says: an "end" (prev) and the "stop" after it (last). */
static void end_of_lines(const char *prev, const char *last, struct run_end *e)
{
	struct run_log_line a = {0}, b = {0};
	char why[64];
	const char *how = NULL;
	double loss;
	if (run_log_parse(last, strlen(last), &b, why, sizeof why) == 0 && b.event &&
	    !strcmp(b.event, "stop") && run_log_parse(prev, strlen(prev), &a, why, sizeof why) == 0 &&
	    a.event && !strcmp(a.event, "end") && a.has_version &&
	    jget_str(a.json, "how", 0, &how) == JGET_OK) {
		e->version = a.u.version;
		if (!strcmp(how, "complete")) {
			e->how = RUN_COMPLETE;
		} else if (!strcmp(how, "diverged")) {
			e->how = RUN_DIVERGED;
			e->worker = a.u.worker;
			if (jget_num_nonfinite(a.json, "loss", &loss) == JGET_OK)
				e->loss = (float)loss;
		}
	}
	run_log_line_free(&a);
	run_log_line_free(&b);
}

/* How the log in dir ended: its last line a "stop", the line before it an "end". Only the tail
 * is read: both lines are short. */
static int log_end(const char *dir, struct run_end *e, char *err)
{
	char path[PATH_MAX + 16], buf[4096], *last, *prev;
	size_t n;
	long size;
	FILE *f;

	*e = (struct run_end){.how = RUN_GOING, .worker = -1, .loss = NAN};
	if (run_dir_file(dir, RUN_LOG, path, sizeof path) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	if (!(f = fopen(path, "r")))
		return errno == ENOENT ? 0 : gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) < 0 || (size = ftell(f)) < 0 ||
	    fseek(f, size > (long)sizeof buf - 1 ? size - ((long)sizeof buf - 1) : 0, SEEK_SET) < 0) {
		fclose(f);
		return gem_errf(err, GEM_EFAIL, "%s: cannot seek", path);
	}
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	if (n < 2 || buf[n - 1] != '\n')
		return 0; /* empty, or a torn last line: not an end */
	buf[n - 1] = 0;
	if (!(last = strrchr(buf, '\n')))
		return 0;
	*last++ = 0;
	prev = strrchr(buf, '\n');
	prev = prev ? prev + 1 : size < (long)sizeof buf ? buf : NULL;
	if (prev)
		end_of_lines(prev, last, e);
	return 0;
}

/* The options that scale a step of the rule of the run in dir (a slice's directory: the run's,
 * one up), for the message of a divergence (rule_step_options); "a lower --lr" when its
 * run.json cannot be read. */
static const char *step_options(const char *dir)
{
	const char *out = "a lower --lr";
	char err[GEM_ERRMAX];
	struct run_peek pk;
	struct rule_config c;
	if (run_peek(dir, &pk, err) == 0 &&
	    rule_config_from_json(json_object_get(pk.json, "rule"), &c, NULL) == 0)
		out = rule_step_options(&c);
	run_peek_free(&pk);
	return out;
}

int run_end_read(const char *dir, struct run_end *e, char *err)
{
	char name[64], sub[PATH_MAX + 16], loss[16];
	struct run_end q;
	int k = run_slices(dir, err), rc = 0;
	if (k < 0)
		return k;
	if (k == 0)
		rc = log_end(dir, e, err);
	for (int i = 0; i < k && rc == 0; i++) {
		run_slice_dir(dir, i, k, name, sizeof name);
		if (run_dir_file(dir, name, sub, sizeof sub) < 0)
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
		if ((rc = log_end(sub, &q, err)) < 0)
			break;
		/* diverged if one slice says so; complete if every slice does; at the least version */
		if (i == 0 || (q.how == RUN_DIVERGED && e->how != RUN_DIVERGED))
			*e = q;
		else if (q.how == RUN_GOING && e->how == RUN_COMPLETE)
			e->how = RUN_GOING;
		else if (q.how == e->how && q.version < e->version)
			e->version = q.version;
	}
	if (rc == 0 && e->how == RUN_DIVERGED)
		rc = gem_errf(err, GEM_EUSAGE, "%s: diverged at version %llu (loss %s); resuming will not "
				"help: make the run again with %s", dir,
				(unsigned long long)e->version, num_format(loss, sizeof loss, "%g", e->loss),
				step_options(dir));
	return rc;
}
