#include "role/replay.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/jget.h"
#include "role/ps.h"
#include "role/trainer.h"
#include "role/vworker.h"
#include "run/runlog.h"
#include "run/spec.h"

struct replay {
	const char *newrun;
	struct ps *ps;
	const struct run *run; /* the core's */
	size_t n;
	float *reply;
	struct dataset ds;
	int has_data;
	struct trainer t;
	int has_trainer;
	struct vworker *w[PS_MAX_WORKERS];
	struct vwire wire;     /* the messages' codec scratch */
	int has_wire;
	char reply_codec[BLOB_CODEC_MAX]; /* the server's --codec; "": none */
	unsigned char joined[PS_MAX_WORKERS], pending[PS_MAX_WORKERS];
	int stopped;   /* the log's server stopped cleanly: a "start" reopens the run */
	double t0;     /* the log's first time: the replay's vtime is the log's time since then */
	struct replay_summary sum;
};

/* The codec an event line names in member key into out ("" when absent); GEM_EUSAGE if it is
 * not one a sender can name. */
static int log_codec(const json_t *j, const char *key, char *out, char *err)
{
	int rc;
	out[0] = 0;
	if ((rc = jget_strcpy(j, key, out, BLOB_CODEC_MAX)) == JGET_MISSING)
		return 0;
	if (rc != JGET_OK || blob_codec_check(out, err) < 0)
		return gem_errf(err, GEM_EUSAGE, "a bad \"%s\"", key);
	return 0;
}

/* ---- the run and its first parameters ---- */

/* newrun as the log's run was made: its run.json, θ₀ from its seed. */
static int make_newrun(const char *logpath, const char *newrun, char *err)
{
	char copy[PATH_MAX];
	struct run r;
	int rc;

	snprintf(copy, sizeof copy, "%s", logpath);
	if ((rc = run_open(dirname(copy), &r, err)) < 0) {
		gem_errprefix(err, "the log's run, to make %s from: ", newrun);
		return rc;
	}
	rc = run_make(newrun, &r.spec, 0, err);
	run_close(&r);
	return rc;
}

/* The log's server started (again): open newrun through the core with the server's options. */
static int server_start(struct replay *p, const struct run_log_line *l, char *err)
{
	struct ps_opts po = {.max_staleness = -1};
	const json_t *j = l->json;
	const char *rule = jget_str_or(j, "rule", NULL);
	long long v = 0, staleness = -1;
	int rc;

	if (p->ps && !p->stopped)
		return gem_errf(err, GEM_EUSAGE,
				"the log's server started again without stopping (killed?): its lost "
				"commits cannot be replayed");
	if (!rule || !rule_describe(rule))
		return gem_errf(err, GEM_EUSAGE, "a log of %s, not of gem-serve or gem-sim",
				rule ? rule : "no rule");
	if (rule_describe(rule)->background)
		return gem_errf(err, GEM_EUSAGE,
				"rule %s: its workers commit in the background, which a replay does not model",
				rule);
	if (jget_int(j, "max_updates", 0, INT64_MAX, &v) < 0 ||
	    jget_int(j, "max_staleness", -1, LONG_MAX, &staleness) < 0)
		return gem_errf(err, GEM_EUSAGE, "bad server options in the start event");
	po.max_updates = (uint64_t)v;
	po.max_staleness = (long)staleness;
	po.keep_running = json_is_true(json_object_get(j, "keep_running"));
	if ((rc = log_codec(j, "reply_codec", p->reply_codec, err)) < 0)
		return rc;
	po.reply_codec = p->reply_codec[0] ? p->reply_codec : NULL;
	if (p->ps) {
		ps_close(p->ps);
		p->ps = NULL;
	}
	if ((rc = ps_open(p->newrun, &po, &p->ps, err)) < 0)
		return rc;
	p->run = ps_run(p->ps);
	p->stopped = 0;
	if (l->u.version != ps_version(p->ps))
		return gem_errf(err, GEM_EUSAGE, "the log's server starts at version %llu, %s is at %llu",
				(unsigned long long)l->u.version, p->newrun,
				(unsigned long long)ps_version(p->ps));
	ps_log_start(p->ps, NULL);
	return 0;
}

/* Data, a model and a reply buffer, once the run is known. */
static int ensure_ready(struct replay *p, char *err)
{
	int rc;
	if (!p->ps)
		return gem_errf(err, GEM_EUSAGE, "the log does not begin with a start event");
	if (p->has_trainer)
		return 0;
	p->n = ps_nparams(p->ps);
	if (!(p->reply = malloc(sizeof(float) * p->n)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if ((rc = run_data_load(p->run, NULL, "train", &p->ds, err)) < 0)
		return rc;
	p->has_data = 1;
	if ((rc = trainer_open(&p->t, p->run, err)) < 0)
		return rc;
	p->has_trainer = 1;
	if ((rc = vwire_open(&p->wire, p->n, err)) < 0)
		return rc;
	p->has_wire = 1;
	return 0;
}

/* ---- the workers' side ---- */

/* Worker w takes the reply v whose header is head (taken over; NULL: not measured) as
 * vworker_reply does, and its bytes go out as gem-serve's would. */
static int reply_to(struct replay *p, struct vworker *w, const float *v, int elastic, int whole,
		    uint64_t version, json_t *head, char *err)
{
	int rc;
	if (ps_reply_sliced(p->ps, head) < 0) {
		json_decref(head);
		head = NULL;
	}
	rc = vworker_reply(w, &p->wire, v, elastic, whole, version, head ? &head : NULL, err);
	ps_sent(p->ps, w->reply_bytes[0]);
	json_decref(head);
	return rc;
}

/* A round closed: the workers held in it get θ (τ 0: a round refuses a stale commit). */
static int release_round(struct replay *p, char *err)
{
	struct ps_reply r = {0};
	ps_reply_held(p->ps, p->reply, &r);
	for (int i = 0; i < PS_MAX_WORKERS; i++)
		if (p->pending[i]) {
			p->pending[i] = 0;
			if (reply_to(p, p->w[i], p->reply, r.elastic, 0, r.version,
				     ps_commit_reply_head(&r, 1), err) < 0)
				return GEM_EFAIL;
		}
	return 0;
}

/* Worker id joins, committing in the codec its join event names (none: raw, as a log from
 * before the codecs were logged has only lossless ones). */
static int do_join(struct replay *p, int id, const json_t *line, char *err)
{
	struct ps_joined j;
	char codec[BLOB_CODEC_MAX];
	json_t *head;
	int rc;
	/* a new worker given the id of one long gone: nothing of the old one is carried over */
	if (json_is_true(json_object_get(line, "new"))) {
		if ((rc = ps_forget(p->ps, id, err)) < 0)
			return GEM_EFAIL;
		if (p->w[id]) {
			vworker_close(p->w[id]);
			free(p->w[id]);
			p->w[id] = NULL;
		}
	}
	if (!p->w[id]) {
		if (!(p->w[id] = calloc(1, sizeof *p->w[id])))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		if ((rc = vworker_open(p->w[id], id, p->run, model_layout(p->t.m), err)) < 0) {
			free(p->w[id]);
			p->w[id] = NULL;
			return rc;
		}
		p->sum.workers++;
	}
	if ((rc = log_codec(line, "codec", codec, err)) < 0 ||
	    (rc = vworker_codec(p->w[id], p->run, codec[0] ? codec : NULL,
				p->reply_codec[0] ? p->reply_codec : NULL, NULL, 0, err)) < 0)
		return rc;
	if ((rc = ps_join(p->ps, id, codec[0] ? codec : NULL, p->reply, &j, err)) < 0) {
		gem_errprefix(err, "the join of worker %d was refused: ", id);
		return GEM_EFAIL;
	}
	p->joined[id] = 1;
	p->pending[id] = 0;
	if ((head = ps_join_reply_head(&j)) && ps_reply_sliced(p->ps, head) < 0) {
		json_decref(head);
		head = NULL;
	}
	rc = vworker_joined(p->w[id], p->run, &p->ds, &j, p->reply, &p->wire, head ? &head : NULL,
			    err);
	ps_sent(p->ps, p->w[id]->reply_bytes[0]);
	json_decref(head);
	return rc;
}

/* Worker id leaves as the log's line j says (a diverged worker: with the loss it saw). */
static int do_leave(struct replay *p, int id, int how, const json_t *j, int gone, char *err)
{
	struct ps_reply r;
	double l = NAN;
	jget_num_nonfinite(j, "loss", &l);
	if (ps_leave(p->ps, id, how, (float)l, gone, &r, err) < 0) {
		gem_errprefix(err, "the leave of worker %d was refused: ", id);
		return GEM_EFAIL;
	}
	p->joined[id] = 0;
	p->pending[id] = 0;
	if (r.round_closed)
		return release_round(p, err);
	return 0;
}

/* Whether a loss is the one the log wrote, to the digits it writes (RUN_LOG_LOSS_FORMAT). */
static int same_loss(double logged, float loss)
{
	char a[32], b[32];
	snprintf(a, sizeof a, RUN_LOG_LOSS_FORMAT, logged);
	snprintf(b, sizeof b, RUN_LOG_LOSS_FORMAT, (double)loss);
	return !strcmp(a, b);
}

/* Worker id computes its next commit of n samples and sends it; the core must decide `want`.
 * logged: the loss the log has for it (NAN: none), which the replay's must be bit for bit: a
 * model that computes something else for the same batch (an external one that is not
 * deterministic, gem-exec(7)) is found at its first commit. */
static int do_commit(struct replay *p, int id, uint64_t n, int want, double logged, char *err)
{
	struct vworker *w = p->w[id];
	struct ps_commit c = {.worker = id, .idle = -1};
	struct ps_reply r;
	int st;

	if (!w || !p->joined[id] || n == 0)
		return gem_errf(err, GEM_EFAIL, "worker %d commits %llu samples, not joined", id,
				(unsigned long long)n);
	if ((st = vworker_compute(w, &p->t, &p->wire, 0, n, err)) < 0)
		return st;
	if (w->diverged || w->got != n)
		return gem_errf(err, GEM_EFAIL, "worker %d computed %llu samples%s, the log says %llu", id,
				(unsigned long long)w->got, w->diverged ? " and diverged" : "",
				(unsigned long long)n);
	if (!w->update)
		return gem_errf(err, GEM_EFAIL, "worker %d's update cannot be encoded in %s (not "
				"finite), the log says it was sent", id, w->fb.codec);
	if (!isnan(logged) && !same_loss(logged, w->loss))
		return gem_errf(err, GEM_EFAIL, "worker %d's commit has the loss %.9g here, %g in the log: "
				"the replay went another way than the run (a model that is not deterministic, or "
				"a log that does not say all the run did)",
				id, (double)w->loss, logged);
	c.base = w->base;
	c.samples = w->got;
	c.loss = w->loss;
	c.update = w->update + w->l.off; /* its fragment: all of it but for fragments */
	c.fragment = w->l.sent;
	c.bytes = w->commit_bytes[0];
	p->sum.commits++;
	st = ps_commit(p->ps, &c, p->reply, &r, err);
	if (st != want && st < 0) {
		gem_errprefix(err, "worker %d's commit was %s here, %s in the log: ", id,
			      ps_status_code(st), ps_status_code(want));
		return GEM_EFAIL;
	}
	if (st != want)
		return gem_errf(err, GEM_EFAIL, "worker %d's commit was %s here, %s in the log", id,
				ps_status_code(st), ps_status_code(want));
	if (st == PS_PENDING) {
		p->pending[id] = 1;
		return 0;
	}
	if (reply_to(p, w, p->reply, r.elastic, 0, r.version,
		     ps_commit_reply_head(&r, st == PS_APPLIED), err) < 0)
		return GEM_EFAIL;
	if (r.round_closed)
		return release_round(p, err);
	return 0;
}

/* ---- one line ---- */

static int do_event(struct replay *p, const struct run_log_line *l, char *err)
{
	const char *ev = l->event, *reason = jget_str_or(l->json, "reason", NULL);
	const json_t *j = l->json;
	long long n = jget_int_or(j, "n", 1, (long long)1 << 40, 0);
	int id = l->u.worker;
	if (!strcmp(ev, "held"))
		return do_commit(p, id, (uint64_t)n, PS_PENDING, NAN, err);
	if (!strcmp(ev, "refused") && reason && !strcmp(reason, "stale"))
		return do_commit(p, id, (uint64_t)n, PS_STALE, NAN, err);
	if (!strcmp(ev, "refused")) {
		/* refused before the core saw an update (a bad message, a dropped one): told as such */
		ps_refused(p->ps, id, reason ? reason : "refused");
		return 0;
	}
	if (!strcmp(ev, "duplicate")) {
		/* a commit sent again: the worker takes θ as it is now, whole */
		ps_copy_theta(p->ps, p->reply);
		if (p->w[id] &&
		    vworker_reply(p->w[id], &p->wire, p->reply, 0, 1, ps_version(p->ps), NULL, err) < 0)
			return GEM_EFAIL;
		return 0;
	}
	if (!strcmp(ev, "join"))
		return do_join(p, id, j, err);
	if (!strcmp(ev, "leave") || !strcmp(ev, "gone"))
		return do_leave(p, id,
				json_is_true(json_object_get(j, "diverged")) ? PS_LEFT_DIVERGED
				: json_is_true(json_object_get(j, "done"))   ? PS_LEFT_DONE
									     : PS_LEFT_PAUSED,
				j, !strcmp(ev, "gone"), err);
	if (!strcmp(ev, "stop")) {
		ps_stop(p->ps, reason ? reason : "stopped");
		p->stopped = 1;
		ps_log_stop(p->ps, reason ? reason : "stopped");
		return ps_checkpoint(p->ps, err);
	}
	return 0; /* "sim" and anything newer: nothing the server decided */
}

static int replay_line(struct replay *p, const struct run_log_line *l, char *err)
{
	const struct run_log_update *u = &l->u;
	int rc;

	if (l->event && !strcmp(l->event, "start"))
		return server_start(p, l, err);
	if ((rc = ensure_ready(p, err)) < 0)
		return rc;
	if (u->worker >= PS_MAX_WORKERS || (!l->event && u->worker < 0))
		return gem_errf(err, GEM_EFAIL, "a bad \"worker\"");
	if (!isnan(u->time))
		ps_set_vtime(p->ps, u->time - p->t0);
	if (!l->event && u->by_leave)
		return 0; /* a round a leave closed: the leave that follows closes it here */
	rc = l->event ? do_event(p, l, err) : do_commit(p, u->worker, u->n, PS_APPLIED, u->loss, err);
	if (rc < 0)
		return rc;
	if ((!l->event || l->has_version) && u->version != ps_version(p->ps))
		return gem_errf(err, GEM_EFAIL, "the replay is at version %llu, the log at %llu",
				(unsigned long long)ps_version(p->ps), (unsigned long long)u->version);
	return 0;
}

/* ---- the whole log ---- */

static int replay_lines(struct replay *p, struct run_log_reader *rd, prog_stop_flag *stop,
			char *err)
{
	const struct run_log_line *l;
	const char *why;
	int rc = 0, first = 1;
	while (!(stop && *stop) && (rc = run_log_next(rd, &l, &why, err)) > 0) {
		p->sum.lines = (uint64_t)rd->line;
		if (why) {
			rc = gem_errf(err, GEM_EFAIL, "%s", why);
		} else {
			/* the replay's vtime is the log's time since its first line */
			if (first)
				p->t0 = isnan(l->u.time) ? 0 : l->u.time;
			first = 0;
			rc = replay_line(p, l, err);
		}
		if (rc < 0) {
			gem_errprefix(err, "line %ld: ", rd->line);
			return rc;
		}
	}
	return rc;
}

static void replay_free(struct replay *p)
{
	for (int i = 0; i < PS_MAX_WORKERS; i++)
		if (p->w[i]) {
			vworker_close(p->w[i]);
			free(p->w[i]);
		}
	if (p->has_trainer)
		trainer_close(&p->t);
	if (p->has_wire)
		vwire_close(&p->wire);
	if (p->has_data)
		dataset_free(&p->ds);
	free(p->reply);
	ps_close(p->ps);
	free(p);
}

int replay_run(const char *logpath, const char *newrun, prog_stop_flag *stop,
	       struct replay_summary *sum, char *err)
{
	struct run_log_reader rd;
	struct replay *p;
	struct stat st;
	char runjson[PATH_MAX + 16];
	int rc;

	if (run_log_reader_open(&rd, logpath, 0, err) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: cannot read", logpath);
	run_dir_file(newrun, RUN_JSON, runjson, sizeof runjson);
	if (stat(runjson, &st) != 0 && (rc = make_newrun(logpath, newrun, err)) < 0) {
		run_log_reader_close(&rd);
		return rc;
	}
	if (!(p = calloc(1, sizeof *p))) {
		run_log_reader_close(&rd);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	p->newrun = newrun;
	p->sum.seconds = clock_mono();
	rc = replay_lines(p, &rd, stop, err);
	run_log_reader_close(&rd);
	if (rc == 0 && p->ps && !p->stopped) {
		ps_log_stop(p->ps, stop && *stop ? "stopped by a signal" : "the log ends here");
		rc = ps_checkpoint(p->ps, err);
	}
	if (rc == 0 && !p->ps)
		rc = gem_errf(err, GEM_EUSAGE, "%s: no start event: not a log of gem-serve", logpath);
	if (p->ps) {
		struct run_progress pr = ps_progress(p->ps);
		p->sum.version = pr.version;
		p->sum.samples = pr.samples;
	}
	p->sum.seconds = clock_mono() - p->sum.seconds;
	if (sum)
		*sum = p->sum;
	replay_free(p);
	return rc;
}
