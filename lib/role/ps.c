#include "role/ps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "nn/data.h"
#include "nn/model.h"
#include "role/progress.h"
#include "run/runlog.h"
#include "wire/msg.h"

/* One worker as the server sees it. */
struct ps_worker {
	int id;
	int active;  /* connected: joined, and not left or gone */
	int in_rule; /* the rule holds its state (kept while it is away after a stop) */
	int away;    /* of an earlier session, stopped before its budget was spent (not left done):
		      * the run waits for it to come back (or to be declared gone, ps_liveness) */
	int done, waiting;
	int diverged; /* left saying its loss was not finite (this session only) */
	int anew;     /* its record started over for a new worker, not joined since (ps_forget) */
	uint64_t commits, samples, refused, tau_sum, tau_min, tau_max, last_seq;
	uint64_t held; /* θ's version + 1 when its commit last_seq was held for a round (0: none
			* since its join): that commit waits while the version has not moved on */
	uint64_t session; /* its joins so far: a held commit waits for its round only while its
			   * session lasts (ps_session) */
	double joined_at, last_contact, loss_sum;
	uint64_t joined_samples; /* samples at its last join: its rate is of this session */
	uint64_t target; /* its samples when the session ends, as it said (ps_plan); 0: the budget */
	double idle; /* seconds the worker says it waited for the server (dma) */
	int part_i, part_n;
	/* dynamic local updates: the inner steps it was told to take, when it was sent θ last
	 * (virtual seconds in gem-sim), and its inner steps per second over its last commit (0:
	 * not measured in this session) */
	int window;
	double reply_at, rate;
};

struct ps {
	struct run run;
	struct ps_opts o;
	struct layout layout;
	size_t n;
	struct rule *rule; /* it holds θ */
	const struct rule_desc *desc;
	struct run_progress prog; /* version, samples; elapsed as of the start */
	double started, last_commit;
	/* training time: only while a worker is joined (an idle server trains nothing) */
	double busy, busy_since;  /* seconds of this session with workers; since when (nactive > 0) */
	double vtime;
	FILE *log;
	struct ps_worker *w[PS_MAX_WORKERS];
	int nslots, nactive, ndone, nknown, ndiverged;
	int fresh; /* every id below it has been had (a record, never freed before ps_close) */
	const char *stop_why;
	char stop_buf[128]; /* a stop reason made up here */
	int failed;
	struct run_end end;   /* how the run ended (decided at its stop); who diverged first */
	uint64_t applied_since_start;
	struct rule_stats st; /* of the last applied update */
	struct progress meter; /* rates, ETA, smoothed loss of this session */
	uint64_t budget;       /* samples of one worker's budget (0: unknown); total: ps_total */
	uint64_t nsamples;     /* of the training set (0: unknown) */
	uint64_t total;        /* the total the caller knows (ps_set_total); 0: the run's */
	/* bytes on the wire of the commits and their replies: in this session, and since the
	 * last update line (which logs them) */
	uint64_t bytes_in, bytes_out, line_in, line_out;
	struct run_ckpt ck;   /* ps_checkpoint's snapshot buffers */
};

const char *ps_status_code(int status)
{
	switch (status) {
	case PS_E_STOPPING: return "stopping";
	case PS_E_FULL: return "full";
	case PS_E_UNKNOWN: return "unknown_worker";
	case PS_E_REFUSED: return "refused";
	case PS_E_NON_FINITE: return "non_finite";
	case PS_E_NOMEM: return "busy";
	case PS_E_NON_FINITE_RESULT: return "non_finite_result";
	case PS_E_RESENT: return "resent";
	case PS_E_REJOINED: return "rejoined";
	case PS_STALE: return "stale";
	case PS_DUPLICATE: return "duplicate";
	case PS_PENDING: return "held";
	case PS_RESENT: return "resent";
	}
	return "ok";
}

static double elapsed_of(const struct ps *s)
{
	return s->prog.elapsed + s->busy + (s->nactive > 0 ? clock_mono() - s->busy_since : 0);
}

/* A worker more (+1) or less (-1) joined: the training clock runs while there is one. */
static void active_add(struct ps *s, int d)
{
	if (d > 0 && s->nactive++ == 0) {
		s->busy_since = clock_mono();
		progress_resume(&s->meter, s->busy_since);
	} else if (d < 0 && --s->nactive == 0) {
		s->busy += clock_mono() - s->busy_since;
	}
}

static void log_event(struct ps *s, const char *event, int worker, const char *extra)
{
	run_log_event(s->log, event, s->vtime, worker, s->prog.version, extra);
}

/* An update line: of a commit c, or (c NULL) of a round a leave closed; with the bytes that
 * went over the wire since the line before. */
static void log_update(struct ps *s, int worker, const struct ps_commit *c)
{
	run_log_update(s->log, &(struct run_log_update){.time = clock_wall(), .elapsed = elapsed_of(s),
			.vtime = s->vtime, .version = s->prog.version, .worker = worker,
			.tau = s->st.staleness, .loss = c ? c->loss : NAN, .samples = s->prog.samples,
			.has_n = c != NULL, .n = c ? c->samples : 0, .by_leave = !c, .st = &s->st,
			.bytes_in = s->line_in, .bytes_out = s->line_out});
	s->line_in = s->line_out = 0;
}

/* ---- workers ---- */

/* The server's clock: virtual seconds in gem-sim (so that a simulation decides as its replay
 * of itself would), else the monotonic clock. */
static double ps_now_seconds(const struct ps *s)
{
	return s->vtime >= 0 ? s->vtime : clock_mono();
}

/* Dynamic local updates (rule_dynamic_window): w's inner steps per second over the commit
 * that just came (the steps it was told, since θ was sent to it), and the steps it is to take
 * next, whose θ goes now; 0 (none said) when the rule does not have them. */
static int next_window(struct ps *s, struct ps_worker *w)
{
	const struct rule_config *c = rule_config_of(s->rule);
	double now = ps_now_seconds(s), fastest = 0;
	if (!c->dynamic_local_updates)
		return 0;
	if (now > w->reply_at)
		w->rate = w->window / (now - w->reply_at);
	for (int i = 0; i < PS_MAX_WORKERS; i++)
		if (s->w[i] && s->w[i]->active && s->w[i]->rate > fastest)
			fastest = s->w[i]->rate;
	w->window = rule_dynamic_window(c, w->rate, fastest);
	w->reply_at = now;
	return w->window;
}

static struct ps_worker *worker_get(const struct ps *s, int id)
{
	return id >= 0 && id < PS_MAX_WORKERS ? s->w[id] : NULL;
}

static struct ps_worker *worker_add(struct ps *s, int id)
{
	struct ps_worker *w = s->w[id];
	if (w)
		return w;
	if (!(w = calloc(1, sizeof *w)))
		return NULL;
	w->id = id;
	w->tau_min = UINT64_MAX;
	s->w[id] = w;
	s->nknown++;
	if (id >= s->nslots)
		s->nslots = id + 1;
	return w;
}

static json_t *workers_json(const struct ps *s)
{
	json_t *a = json_array();
	for (int i = 0; i < s->nslots; i++) {
		const struct ps_worker *w = s->w[i];
		if (!w)
			continue;
		json_array_append_new(
			a, json_pack("{s:i, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "id", w->id,
				     "in_rule", w->in_rule, "done", w->done, "commits", (json_int_t)w->commits,
				     "samples", (json_int_t)w->samples, "refused", (json_int_t)w->refused,
				     "tau_sum", (json_int_t)w->tau_sum, "tau_min", (json_int_t)w->tau_min,
				     "tau_max", (json_int_t)w->tau_max, "last_seq", (json_int_t)w->last_seq,
				     "loss_sum", w->loss_sum));
	}
	return a;
}

static void workers_restore(struct ps *s, const json_t *workers)
{
	size_t i;
	json_t *o;
	json_array_foreach(workers, i, o) {
		long long id;
		struct ps_worker *w;
		if (jget_int(o, "id", 0, PS_MAX_WORKERS - 1, &id) != JGET_OK || !(w = worker_add(s, (int)id)))
			continue;
		w->commits = (uint64_t)jget_int_or(o, "commits", 0, INT64_MAX, 0);
		w->samples = (uint64_t)jget_int_or(o, "samples", 0, INT64_MAX, 0);
		w->refused = (uint64_t)jget_int_or(o, "refused", 0, INT64_MAX, 0);
		w->tau_sum = (uint64_t)jget_int_or(o, "tau_sum", 0, INT64_MAX, 0);
		w->tau_min = (uint64_t)jget_int_or(o, "tau_min", 0, INT64_MAX, 0);
		w->tau_max = (uint64_t)jget_int_or(o, "tau_max", 0, INT64_MAX, 0);
		w->last_seq = (uint64_t)jget_int_or(o, "last_seq", 0, INT64_MAX, 0);
		w->loss_sum = json_number_value(json_object_get(o, "loss_sum"));
		w->done = json_is_true(json_object_get(o, "done"));
		s->ndone += w->done;
		/* the rule kept this worker's state: it may come back under its id and carry on */
		w->in_rule = json_is_true(json_object_get(o, "in_rule"));
		w->last_contact = clock_mono();
	}
}

/* ---- progress ---- */

/* The run splits its data (run.json "part_data"): each worker sees its part of the training set. */
static int data_in_parts(const struct ps *s)
{
	return s->run.spec.part_data;
}

/* One worker's budget of samples: the run's epochs or steps of the training set (when the run
 * splits its data, of every worker's part together: its epochs make one pass of them all), if the
 * data is here to count. */
static void budget_of(struct ps *s)
{
	char err[GEM_ERRMAX];
	struct data_source src;
	uint64_t n, nw = s->run.spec.rule.nworkers > 0 ? (uint64_t)s->run.spec.rule.nworkers : 1;
	run_data_source(&s->run, NULL, &src);
	if (dataset_count(&src, "train", &n, err) < 0) {
		log_debug("no total for the progress: %s", err);
		return;
	}
	s->nsamples = n;
	s->budget = data_in_parts(s) && s->run.spec.train.steps ? run_budget(&s->run, n / nw) * nw
							   : run_budget(&s->run, n);
}

/* Worker w has spent the run's budget: it has the samples (when the server knows the budget and
 * the data is not split), else it left done from a session that trained to the budget (not to
 * a worker's --steps or --epochs, ps_plan). */
static int spent(const struct ps *s, const struct ps_worker *w)
{
	return s->budget && !data_in_parts(s) ? w->samples >= s->budget : w->done && !w->target;
}

/* One worker's part of the run's budget of samples; 0: unknown. */
static uint64_t each_budget(const struct ps *s)
{
	uint64_t nw = s->run.spec.rule.nworkers > 0 ? (uint64_t)s->run.spec.rule.nworkers : 1;
	return data_in_parts(s) ? s->budget / nw : s->budget;
}

/* The budget went up from old samples a worker: one that left done having spent the old one has
 * more to do, and the run waits for it as for one that stopped short. */
static void budget_raised(struct ps *s, uint64_t old)
{
	uint64_t now = each_budget(s);
	for (int i = 0; i < s->nslots && old && now > old; i++) {
		struct ps_worker *w = s->w[i];
		if (w && w->done && w->samples >= old && w->samples < now) {
			w->done = 0;
			s->ndone--;
		}
	}
}

/* The run's total of samples: every worker expected (gem-init --workers, or those that came)
 * spends its budget, or trains what it said it would (ps_plan); 0: unknown. */
static uint64_t ps_total(const struct ps *s)
{
	int n = s->run.spec.rule.nworkers > s->nknown ? s->run.spec.rule.nworkers : s->nknown;
	uint64_t each = data_in_parts(s) ? s->budget / (uint64_t)n : s->budget;
	uint64_t t = data_in_parts(s) ? s->budget : s->budget * (uint64_t)n;
	if (s->total)
		return s->total;
	for (int i = 0; i < s->nslots && t; i++)
		if (s->w[i] && s->w[i]->target)
			t = t - each + s->w[i]->target;
	return t;
}

/* θ moved: the meter learns where it stands, and the loss when the update had one. */
static void meter_update(struct ps *s, float loss)
{
	progress_loss(&s->meter, loss);
	progress_at(&s->meter, s->prog.version, s->prog.samples, clock_mono());
}

void ps_plan(struct ps *s, int worker, uint64_t steps, uint64_t epochs)
{
	struct ps_worker *w = worker_get(s, worker);
	int n = s->run.spec.rule.nworkers > s->nknown ? s->run.spec.rule.nworkers : s->nknown;
	uint64_t epoch = s->nsamples / (data_in_parts(s) ? (uint64_t)n : 1);
	if (!w)
		return;
	w->target = steps    ? w->samples + steps * (uint64_t)s->run.spec.train.batch
		    : epochs ? w->samples + epochs * epoch
			     : 0;
	progress_set_total(&s->meter, ps_total(s));
}

void ps_set_total(struct ps *s, uint64_t total)
{
	s->total = total;
	progress_set_total(&s->meter, total);
}

/* ---- life cycle ---- */

static int ps_load(struct ps *s, char *err)
{
	struct run_end ended;
	struct model *m = NULL;
	json_t *workers = NULL;
	int rc;
	/* a fragment of a server's slice is not the workers' fragment of θ */
	if (s->run.spec.rule.fragments > 1 && s->o.slice_k > 0)
		return gem_errf(err, GEM_EUSAGE, "rule.fragments: %d fragments need one server, not "
				"slices (gem-serve --slice)", s->run.spec.rule.fragments);
	if ((rc = model_from_json(s->run.spec.model, &m, err)) < 0)
		return rc;
	s->layout = *model_layout(m);
	s->n = model_nparams(m);
	model_free(m);
	if ((rc = run_slices(s->run.dir, err)) < 0)
		return rc;
	if (rc > 0 && rc != s->o.slice_k)
		return gem_errf(err, GEM_EUSAGE, "%s is served by %d slices (gem-serve --slice I/%d)",
				s->run.dir, rc, rc);
	if (s->o.slice_k > 0) {
		/* a slice server: its slice of θ, of the layout and of every rule state, its own files */
		struct layout full = s->layout;
		if ((rc = run_set_slice(&s->run, s->o.slice_i, s->o.slice_k, s->n, err)) < 0)
			return rc;
		slice_layout(&full, &s->run.slice, &s->layout);
		s->n = s->run.slice.len;
	}
	if ((rc = run_lock(&s->run, err)) < 0)
		return rc;
	/* a run that diverged would diverge again: refused, with why */
	if ((rc = run_end_read(s->run.fdir[0] ? s->run.fdir : s->run.dir, &ended, err)) < 0)
		return rc;
	if ((rc = run_ckpt_load(&s->run, &s->layout, &s->rule, &s->prog, &workers, err)) < 0)
		return rc;
	s->desc = rule_desc_of(s->rule);
	if (rc == 0 && err[0])
		log_warn("%s: the rule's state starts afresh", err);
	if (rc == 1) {
		workers_restore(s, workers);
		log_info("resumed the rule's state and %d worker%s", s->nknown, GEM_S(s->nknown));
	}
	json_decref(workers);
	budget_of(s);
	/* a budget given is the run's from now on, and a resume keeps it */
	if (s->o.steps) {
		uint64_t old = each_budget(s);
		if ((rc = run_set_steps(&s->run, s->o.steps, err)) < 0)
			return rc;
		budget_of(s);
		budget_raised(s, old);
	}
	/* one that left done (its own --steps or --epochs) said it will not come back */
	for (int i = 0; i < s->nslots; i++)
		if (s->w[i])
			s->w[i]->away = !s->w[i]->done && !spent(s, s->w[i]);
	progress_start(&s->meter, s->prog.version, s->prog.samples, ps_total(s), clock_mono());
	return run_log_open(&s->run, s->prog.version, &s->log, err);
}

int ps_open(const char *rundir, const struct ps_opts *o, struct ps **out, char *err)
{
	struct ps *s = calloc(1, sizeof *s);
	int rc;
	*out = NULL;
	if (!s)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->o = *o;
	s->vtime = -1;
	s->end = (struct run_end){.how = RUN_GOING, .worker = -1, .loss = NAN};
	s->started = s->last_commit = clock_mono();
	if ((rc = run_open(rundir, &s->run, err)) < 0) {
		free(s);
		return rc;
	}
	err[0] = 0;
	if ((rc = ps_load(s, err)) < 0) {
		ps_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void ps_close(struct ps *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nslots; i++)
		free(s->w[i]);
	rule_destroy(s->rule);
	run_ckpt_free(&s->ck);
	if (s->log)
		fclose(s->log);
	run_close(&s->run);
	free(s);
}

const struct run *ps_run(const struct ps *s) { return &s->run; }
size_t ps_nparams(const struct ps *s) { return s->n; }
uint64_t ps_version(const struct ps *s) { return s->prog.version; }
void ps_set_vtime(struct ps *s, double vtime) { s->vtime = vtime; }
FILE *ps_log(struct ps *s) { return s->log; }
int ps_failed(const struct ps *s) { return s->failed; }
int ps_active(const struct ps *s) { return s->nactive; }
const char *ps_stopping(const struct ps *s) { return s->stop_why; }

struct run_progress ps_progress(const struct ps *s)
{
	struct run_progress p = s->prog;
	p.elapsed = elapsed_of(s);
	return p;
}

void ps_copy_theta(const struct ps *s, float *out)
{
	memcpy(out, rule_theta(s->rule), sizeof(float) * s->n);
}

void ps_waiting(struct ps *s, int worker, int waiting)
{
	struct ps_worker *w = worker_get(s, worker);
	if (w) {
		w->waiting = waiting;
		w->last_contact = clock_mono();
	}
}

void ps_stop(struct ps *s, const char *why)
{
	if (!s->stop_why)
		s->stop_why = why;
}

void ps_log_start(struct ps *s, const char *url)
{
	/* the options that decide what is applied, for a replay */
	json_t *o = json_pack("{s:I, s:I, s:b}", "max_updates", (json_int_t)s->o.max_updates,
			      "max_staleness", (json_int_t)s->o.max_staleness, "keep_running",
			      s->o.keep_running);
	if (o && s->o.reply_codec)
		json_object_set_new(o, "reply_codec", json_string(s->o.reply_codec));
	if (o && s->run.slice.k > 0)
		json_object_set_new(o, "slice", json_pack("{s:i, s:i, s:I, s:I}", "i", s->run.slice.i, "k",
							  s->run.slice.k, "offset", (json_int_t)s->run.slice.off,
							  "count", (json_int_t)s->run.slice.len));
	run_log_start_x(s->log, &s->run, s->run.spec.rule.name, url, s->prog.version, &s->layout,
			o);
	json_decref(o);
}

/* Every worker the run expects has come and spent the run's budget. */
static int budgets_spent(const struct ps *s)
{
	if (s->nknown == 0 || s->nknown < s->run.spec.rule.nworkers)
		return 0;
	for (int i = 0; i < s->nslots; i++)
		if (s->w[i] && !spent(s, s->w[i]))
			return 0;
	return 1;
}

void ps_log_stop(struct ps *s, const char *reason)
{
	/* the replies to the last update went out after its line */
	json_t *j = s->line_in || s->line_out
		? json_pack("{s:s, s:I, s:I}", "reason", reason, "bytes_in", (json_int_t)s->line_in,
			    "bytes_out", (json_int_t)s->line_out)
		: json_pack("{s:s}", "reason", reason);
	char *extra = j ? json_dumps(j, JSON_COMPACT) : NULL;
	/* the run is over, whoever stops it, once no worker is left and one diverged, or every one
	 * expected has spent its budget */
	if (s->nactive == 0 && s->ndiverged > 0)
		s->end.how = RUN_DIVERGED;
	else if (s->nactive == 0 && budgets_spent(s))
		s->end.how = RUN_COMPLETE;
	if (s->end.how != RUN_GOING) {
		s->end.version = s->prog.version;
		run_log_end(s->log, s->vtime, &s->end);
	}
	/* {"reason":"…"} without its braces */
	if (extra) {
		extra[strlen(extra) - 1] = 0;
		log_event(s, "stop", -1, extra + 1);
	} else {
		log_event(s, "stop", -1, NULL);
	}
	free(extra);
	json_decref(j);
	fflush(s->log);
}

int ps_checkpoint_take(struct ps *s, struct run_ckpt *ck, char *err)
{
	struct run_progress p = ps_progress(s);
	fflush(s->log);
	return run_ckpt_take(s->rule, workers_json(s), rule_theta(s->rule), s->n, &p, ck, err);
}

int ps_checkpoint_write(const struct ps *s, const struct run_ckpt *ck, char *err)
{
	return run_ckpt_write(&s->run, ck, err);
}

int ps_checkpoint(struct ps *s, char *err)
{
	int rc = ps_checkpoint_take(s, &s->ck, err);
	return rc < 0 ? rc : ps_checkpoint_write(s, &s->ck, err);
}

/* ---- requests ---- */

/* A worker of an earlier session, its budget not spent, has not come back in this one. */
static int awaited(const struct ps *s)
{
	for (int i = 0; i < s->nslots; i++)
		if (s->w[i] && s->w[i]->away)
			return 1;
	return 0;
}

/* Worker w leaves (event "leave") or is declared gone ("gone"). Its rule state is released, so
 * that rules that count workers go on with the others; once the run is stopping the state stays
 * for the checkpoint, and the worker may come back to it later. */
static int worker_release(struct ps *s, struct ps_worker *w, const char *event, int how,
			  float loss)
{
	char extra[80], lbuf[24];
	int closed = 0;
	if (w->in_rule && !s->stop_why) {
		if (rule_leave(s->rule, w->id, &s->prog.version, &s->st, NULL) == 1) {
			/* the worker's leave completed a round */
			s->applied_since_start++;
			log_update(s, w->id, NULL);
			meter_update(s, NAN);
			closed = 1;
		}
		w->in_rule = 0;
	}
	if (w->active) {
		w->active = 0;
		active_add(s, -1);
	}
	w->away = 0;
	if (how == PS_LEFT_DONE && !w->done) {
		w->done = 1;
		s->ndone++;
	}
	if (how == PS_LEFT_DIVERGED && !w->diverged) {
		w->diverged = 1;
		s->ndiverged++;
		if (s->end.worker < 0) {
			s->end.worker = w->id;
			s->end.loss = loss;
		}
	}
	if (how == PS_LEFT_DIVERGED)
		snprintf(extra, sizeof extra, "\"done\":false,\"diverged\":true,\"loss\":%s",
			 num_json(lbuf, sizeof lbuf, loss));
	else
		snprintf(extra, sizeof extra, "\"done\":%s%s", w->done ? "true" : "false",
			 w->diverged ? ",\"diverged\":true" : "");
	log_event(s, event, w->id, extra);
	/* the run is over once no worker is left, one at least finished or diverged, and as many
	 * as the run expects (gem-init --workers) have come: a fast worker done before a slow one
	 * joined does not end it, nor does one done before a resumed run's unfinished one came
	 * back; a dead one does not hold it up (past --worker-timeout); one that diverged will
	 * not come back to a better θ, so it fails the run */
	if (s->nactive == 0 && s->ndone + s->ndiverged > 0 &&
	    s->nknown >= s->run.spec.rule.nworkers && !s->o.keep_running &&
	    (s->ndiverged > 0 || !awaited(s))) {
		if (s->ndiverged > 0) {
			snprintf(s->stop_buf, sizeof s->stop_buf,
				 "every worker has left, %d diverged (a loss that was not finite), "
				 "%d of %d finished", s->ndiverged, s->ndone, s->nknown);
			s->failed = 1;
			ps_stop(s, s->stop_buf);
		} else if (s->ndone == s->nknown) {
			ps_stop(s, "every worker has finished");
		} else {
			snprintf(s->stop_buf, sizeof s->stop_buf, "every worker has left, %d of %d finished",
				 s->ndone, s->nknown);
			ps_stop(s, s->stop_buf);
		}
	}
	return closed;
}

/* The data part of worker id when the run splits its data (run.json "part_data"). */
static void worker_part(const struct ps *s, struct ps_worker *w)
{
	if (data_in_parts(s)) {
		int n = s->run.spec.rule.nworkers > 0 ? s->run.spec.rule.nworkers : 1;
		w->part_i = w->id % n;
		w->part_n = n;
	}
}

/* The rule takes worker w: back after a stop or a restart of the server, it finds the state
 * the rule kept; a restarted worker's old state goes. */
static int worker_enter_rule(struct ps *s, struct ps_worker *w, char *err)
{
	if (w->in_rule && !w->active) {
		rule_sent(s->rule, w->id);
		return 0;
	}
	if (w->in_rule && rule_leave(s->rule, w->id, &s->prog.version, &s->st, NULL) == 1) {
		/* its old state's leave closed a round */
		s->applied_since_start++;
		log_update(s, w->id, NULL);
	}
	w->in_rule = 0;
	if (rule_join(s->rule, w->id, err) < 0)
		return PS_E_REFUSED;
	w->in_rule = 1;
	return 0;
}

/* The id of a new worker: the first no worker has had; once every one has been had, the id of
 * the worker, gone or left with the rule's state of it released, that was heard from longest
 * ago (*reused set: its record is to start over), so that an open server does not run out of
 * ids however many workers come and go. -1 when every id is held. */
static int new_worker_id(struct ps *s, int *reused)
{
	int id = -1;
	/* the ids had are all those below fresh, and some above (a worker that came back under its
	 * id): a join passes each id once, not every id ever given */
	while (s->fresh < PS_MAX_WORKERS && s->w[s->fresh])
		s->fresh++;
	if (s->fresh < PS_MAX_WORKERS)
		return s->fresh;
	for (int i = 0; i < PS_MAX_WORKERS; i++) {
		const struct ps_worker *w = s->w[i];
		if (!w->active && !w->in_rule && (id < 0 || w->last_contact < s->w[id]->last_contact))
			id = i;
	}
	*reused = id >= 0;
	return id;
}

/* Worker w's record starts over, as a new worker's (counters, sequence numbers, how it left). */
static void worker_forget(struct ps *s, struct ps_worker *w)
{
	int id = w->id;
	s->ndone -= w->done;
	s->ndiverged -= w->diverged;
	*w = (struct ps_worker){.id = id, .tau_min = UINT64_MAX, .anew = 1};
}

int ps_forget(struct ps *s, int worker, char *err)
{
	struct ps_worker *w = worker_get(s, worker);
	if (w && (w->active || w->in_rule))
		return gem_errf(err, PS_E_REFUSED, "worker %d is still in the run", worker);
	if (w)
		worker_forget(s, w);
	return 0;
}

int ps_join(struct ps *s, int id, const char *codec, float *theta_out, struct ps_joined *j,
	    char *err)
{
	struct ps_worker *w;
	char extra[80];
	int rc, reused = 0;
	if (s->stop_why)
		return gem_errf(err, PS_E_STOPPING, "the server is stopping");
	if (id >= PS_MAX_WORKERS)
		return gem_errf(err, PS_E_UNKNOWN, "worker: an integer in [0, %d)", PS_MAX_WORKERS);
	if (id < 0 && (id = new_worker_id(s, &reused)) < 0)
		return gem_errf(err, PS_E_FULL, "%d workers is the limit, and none has left",
				PS_MAX_WORKERS);
	if (reused)
		worker_forget(s, s->w[id]);
	if (!(w = worker_add(s, id)))
		return gem_errf(err, PS_E_NOMEM, "out of memory for worker %d", id);
	if ((rc = worker_enter_rule(s, w, err)) < 0)
		return rc;
	if (!w->active)
		active_add(s, +1);
	if (w->done)
		s->ndone--;
	if (w->diverged)
		s->ndiverged--;
	w->active = 1;
	w->away = 0;
	w->done = 0;
	w->diverged = 0;
	w->joined_at = w->last_contact = clock_mono();
	/* a new session: a commit of the old one held for its round waits no more (ps_session);
	 * it is answered PS_E_REJOINED, its update staying in the round as a leaving worker's
	 * does, and the round goes on with the workers it has, this one in a new seat
	 * (worker_enter_rule) */
	w->held = 0;
	w->waiting = 0;
	w->session++;
	w->joined_samples = w->samples;
	/* it takes H inner steps until its speed is known */
	w->window = rule_config_of(s->rule)->window;
	w->reply_at = ps_now_seconds(s);
	w->rate = 0;
	worker_part(s, w);
	progress_set_total(&s->meter, ps_total(s));
	/* a codec name holds no character JSON escapes (blob_codec_known) */
	snprintf(extra, sizeof extra, "\"rejoin\":%s%s%s%.*s%s", w->commits ? "true" : "false",
		 w->anew ? ",\"new\":true" : "", codec ? ",\"codec\":\"" : "", BLOB_CODEC_MAX,
		 codec ? codec : "", codec ? "\"" : "");
	log_event(s, "join", id, extra);
	w->anew = 0;
	*j = (struct ps_joined){.worker = id, .rejoin = w->commits > 0, .version = s->prog.version,
				.seq = w->last_seq, .commits = w->commits, .samples = w->samples,
				.part_i = w->part_i, .part_n = w->part_n,
				.window = rule_config_of(s->rule)->dynamic_local_updates ? w->window : 0};
	if (theta_out)
		ps_copy_theta(s, theta_out);
	return PS_APPLIED;
}

size_t ps_rule_bytes(const struct ps *s)
{
	return rule_state_bytes(s->rule);
}

size_t ps_join_bytes(const struct ps *s, int id)
{
	const struct ps_worker *w = worker_get(s, id);
	return w && w->in_rule ? 0 : rule_join_bytes(s->rule);
}

int ps_check_update(const float *u, size_t n, char *err)
{
	size_t i;
	if (rule_vec_finite(u, n))
		return PS_APPLIED;
	for (i = 0; i < n; i++)
		if (!isfinite(u[i]))
			break;
	return gem_errf(err, PS_E_NON_FINITE, "element %zu of the update is %g", i, (double)u[i]);
}

void ps_refused(struct ps *s, int worker, const char *reason)
{
	char extra[96];
	struct ps_worker *w = worker_get(s, worker);
	if (w)
		w->refused++;
	snprintf(extra, sizeof extra, "\"reason\":\"%s\"", reason);
	log_event(s, "refused", w ? worker : -1, extra);
}

uint64_t ps_session(const struct ps *s, int worker)
{
	const struct ps_worker *w = worker_get(s, worker);
	return w ? w->session : 0;
}

int ps_held_resend(const struct ps *s, int worker, uint64_t seq)
{
	const struct ps_worker *w = worker_get(s, worker);
	return w && w->active && seq && seq == w->last_seq && w->held == s->prog.version + 1;
}

/* What is applied of commit c by active worker w: a resend, a commit too stale, or the rule's
 * update (its fragment's, at off in θ). */
static int commit_decide(struct ps *s, struct ps_worker *w, const struct ps_commit *c, uint64_t tau,
			 size_t off, float *out, char *err)
{
	char extra[96];
	if (ps_held_resend(s, w->id, c->seq)) {
		/* sent again while the first is held for its open round: it waits for the round in
		 * the first one's place, so that the one reply the round makes goes where the
		 * worker listens now */
		log_event(s, "resent", w->id, NULL);
		return PS_RESENT;
	}
	if (c->seq && c->seq <= w->last_seq) {
		/* a commit sent again after a lost reply: answer with θ, apply nothing */
		log_event(s, "duplicate", w->id, NULL);
		return PS_DUPLICATE;
	}
	if (s->o.max_staleness >= 0 && !s->desc->rounds && tau > (uint64_t)s->o.max_staleness) {
		/* bounded staleness: not applied; the worker recomputes at the current θ */
		w->refused++;
		snprintf(extra, sizeof extra, "\"reason\":\"stale\",\"tau\":%llu,\"n\":%llu",
			 (unsigned long long)tau, (unsigned long long)c->samples);
		log_event(s, "refused", w->id, extra);
		return PS_STALE;
	}
	int rc = rule_commit_fragment(s->rule, w->id, c->fragment, c->update, c->base,
				      &s->prog.version, out ? out + off : NULL, &s->st, err);
	if (rc == RULE_E_NON_FINITE) {
		/* the rule took none of the result: θ and its state are as they were */
		ps_refused(s, w->id, ps_status_code(PS_E_NON_FINITE_RESULT));
		return PS_E_NON_FINITE_RESULT;
	}
	if (rc < 0) {
		ps_refused(s, w->id, "refused");
		return PS_E_REFUSED;
	}
	return rc == RULE_PENDING ? PS_PENDING : PS_APPLIED;
}

/* Count the commit in the worker's record and θ's progress. */
static void commit_count(struct ps *s, struct ps_worker *w, const struct ps_commit *c, int status,
			 uint64_t tau)
{
	int again = status == PS_DUPLICATE || status == PS_RESENT;
	uint64_t samples = again ? 0 : c->samples;
	if (c->seq && !again)
		w->last_seq = c->seq;
	if (!again)
		w->commits++;
	if (status == PS_PENDING)
		w->held = s->prog.version + 1;
	w->samples += samples; /* the worker's data position, also for a refused stale commit */
	if (isfinite(c->loss) && samples)
		w->loss_sum += c->loss;
	if (status == PS_STALE)
		return;
	s->prog.samples += samples;
	if (status != PS_APPLIED)
		return;
	s->applied_since_start++;
	w->tau_sum += tau;
	if (tau < w->tau_min)
		w->tau_min = tau;
	if (tau > w->tau_max)
		w->tau_max = tau;
}

int ps_commit(struct ps *s, const struct ps_commit *c, float *out, struct ps_reply *r, char *err)
{
	struct ps_worker *w = worker_get(s, c->worker);
	uint64_t before = s->prog.version;
	char nfield[32];
	size_t off, len;
	int status;

	memset(r, 0, sizeof r[0]);
	r->version = before;
	if (!w || !w->active) {
		ps_refused(s, -1, ps_status_code(PS_E_UNKNOWN));
		return r->status = gem_errf(err, PS_E_UNKNOWN, "join first (POST /v1/join)");
	}
	w->last_contact = s->last_commit = clock_mono();
	s->bytes_in += c->bytes;
	s->line_in += c->bytes;
	if (c->idle >= 0)
		w->idle = c->idle;
	if (s->stop_why)
		return r->status = gem_errf(err, PS_E_STOPPING, "the server is stopping");
	if (c->fragment < 0 || c->fragment >= s->run.spec.rule.fragments) {
		ps_refused(s, w->id, ps_status_code(PS_E_REFUSED));
		return r->status = gem_errf(err, PS_E_REFUSED, "fragment %d is not one of the %d of θ",
					    c->fragment, s->run.spec.rule.fragments);
	}
	layout_slice(s->n, c->fragment, s->run.spec.rule.fragments, &off, &len);
	if (!c->checked && (status = ps_check_update(c->update, len, err)) < 0) {
		ps_refused(s, w->id, ps_status_code(status));
		return r->status = status;
	}
	r->tau = c->base <= before ? before - c->base : 0;
	/* the commit's samples, which a replay needs to redo the worker's steps */
	snprintf(nfield, sizeof nfield, "\"n\":%llu", (unsigned long long)c->samples);
	status = commit_decide(s, w, c, r->tau, off, out, err);
	if (status < 0)
		return r->status = status;
	commit_count(s, w, c, status, r->tau);
	r->status = status;
	r->version = s->prog.version;
	if (status == PS_RESENT) {
		/* the window the first one was told */
		r->window = rule_config_of(s->rule)->dynamic_local_updates ? w->window : 0;
		return status;
	}
	r->window = next_window(s, w);
	if (status == PS_APPLIED) {
		r->st = &s->st;
		r->elastic = s->desc->reply_elastic;
		/* a round of a rule with rounds closes on its last commit */
		r->round_closed = s->desc->rounds;
		log_update(s, w->id, c);
		meter_update(s, c->loss);
		if (s->o.max_updates && s->prog.version >= s->o.max_updates)
			ps_stop(s, "reached --max-updates");
	} else if (status == PS_PENDING) {
		log_event(s, "held", w->id, nfield);
		return status;
	}
	/* an applied commit's rule wrote the reply in its pass; a duplicate or a stale commit
	 * gets θ as it is */
	if (status != PS_APPLIED)
		ps_copy_theta(s, out);
	return status;
}

void ps_reply_held(const struct ps *s, float *out, struct ps_reply *r)
{
	ps_copy_theta(s, out);
	r->version = s->prog.version;
	r->elastic = 0;
}

void ps_sent(struct ps *s, uint64_t bytes)
{
	s->bytes_out += bytes;
	s->line_out += bytes;
}

json_t *ps_commit_reply_head(const struct ps_reply *r, int applied)
{
	struct proto_commit_reply h = {.version = r->version, .tau = r->tau, .applied = applied,
				       .window = r->window};
	return proto_commit_reply_to_json(&h);
}

int ps_reply_sliced(const struct ps *s, json_t *head)
{
	struct proto_slice sl;
	ps_slice(s, &sl);
	return proto_slice_add(head, &sl);
}

json_t *ps_join_reply_head(const struct ps_joined *j)
{
	struct proto_join_reply h = {.worker = j->worker, .version = j->version, .seq = j->seq,
				     .commits = j->commits, .samples = j->samples,
				     .part_i = j->part_i, .part_n = j->part_n,
				     .window = j->window};
	return proto_join_reply_to_json(&h);
}

int ps_leave(struct ps *s, int worker, int how, float loss, int gone, struct ps_reply *r,
	     char *err)
{
	struct ps_worker *w = worker_get(s, worker);
	memset(r, 0, sizeof r[0]);
	if (!w)
		return r->status = gem_errf(err, PS_E_UNKNOWN, "no such worker");
	if (w->active)
		r->round_closed = worker_release(s, w, gone ? "gone" : "leave", how, loss);
	r->st = &s->st;
	r->version = s->prog.version;
	return r->status = PS_APPLIED;
}

void ps_liveness(struct ps *s, void (*gone)(void *ctx, int worker, double silent), void *ctx)
{
	double now = clock_mono();
	if (s->o.worker_timeout > 0 && !s->stop_why) {
		for (int i = 0; i < s->nslots; i++) {
			struct ps_worker *w = s->w[i];
			if (!w || w->waiting || !(w->in_rule || w->away) ||
			    now - w->last_contact < s->o.worker_timeout)
				continue;
			if (gone)
				gone(ctx, w->id, now - w->last_contact);
			worker_release(s, w, "gone", PS_LEFT_PAUSED, NAN);
		}
	}
	if (s->o.idle_timeout > 0 && !s->stop_why && now - s->last_commit >= s->o.idle_timeout) {
		s->failed = 1;
		ps_stop(s, "no commit arrived for --idle-timeout seconds");
	}
}

/* ---- what the server tells about itself ---- */

json_t *ps_health_json(const struct ps *s)
{
	struct proto_health h = {.version = s->prog.version, .workers = s->nactive,
				 .stopping = s->stop_why != NULL};
	ps_slice(s, &h.slice);
	return proto_health_to_json(&h);
}

void ps_slice(const struct ps *s, struct proto_slice *out)
{
	const struct slice *sh = &s->run.slice;
	*out = (struct proto_slice){.i = sh->i, .k = sh->k, .off = sh->off, .len = sh->len};
}

static void worker_stats(const struct ps_worker *w, double now, struct proto_worker_stats *st)
{
	/* a worker that has left worked from its join to its last contact */
	double alive = (w->active ? now : w->last_contact) - w->joined_at;
	double c = w->commits ? (double)w->commits : 1;
	*st = (struct proto_worker_stats){
		.worker = w->id, .active = w->active, .done = w->done, .commits = w->commits,
		.samples = w->samples, .refused = w->refused, .tau_mean = (double)w->tau_sum / c,
		.tau_min = w->commits ? w->tau_min : 0, .tau_max = w->tau_max,
		.samples_per_s = alive > 0 ? (double)w->samples / alive : 0.0,
		.loss_mean = w->loss_sum / c, .since_contact = now - w->last_contact,
		.idle = w->idle};
}

void ps_now(const struct ps *s, struct ps_now *st)
{
	double now = clock_mono();
	memset(st, 0, sizeof *st);
	progress_get(&s->meter, now, &st->p);
	st->elapsed = elapsed_of(s);
	st->updates = s->applied_since_start;
	st->active = s->nactive;
	st->known = s->nknown;
	st->done = s->ndone;
	st->bytes_in = s->bytes_in;
	st->bytes_out = s->bytes_out;
	st->slowest = -1;
	for (int i = 0; i < s->nslots; i++) {
		const struct ps_worker *w = s->w[i];
		double rate;
		/* a worker's rate means something after a second */
		if (!w || !w->active || now - w->joined_at < 1)
			continue;
		rate = (double)(w->samples - w->joined_samples) / (now - w->joined_at);
		if (st->slowest < 0 || rate < st->slowest_rate) {
			st->slowest = w->id;
			st->slowest_rate = rate;
		}
	}
}

json_t *ps_stats_json(const struct ps *s)
{
	double now = clock_mono(), up = now - s->started;
	struct proto_worker_stats *ws = calloc((size_t)s->nslots + 1, sizeof *ws);
	struct proto_stats st = {.version = s->prog.version, .samples = s->prog.samples,
				 .uptime = up, .elapsed = elapsed_of(s),
				 .updates_per_s = up > 0 ? (double)s->applied_since_start / up : 0.0,
				 .rule = s->run.spec.rule.name, .active = s->nactive,
				 .workers = ws};
	struct ps_now pn;
	char line[256];
	json_t *j;
	if (!ws)
		return NULL;
	for (int i = 0; i < s->nslots; i++)
		if (s->w[i])
			worker_stats(s->w[i], now, &ws[st.nworkers++]);
	/* ps_now, with its line in words */
	ps_now(s, &pn);
	progress_line(&pn.p, line, sizeof line);
	st.progress = (struct proto_progress){
		.samples = pn.p.samples, .total = pn.p.total, .fraction = pn.p.fraction,
		.updates_per_s = pn.p.updates_per_s, .samples_per_s = pn.p.samples_per_s,
		.eta = pn.p.eta, .slowest = pn.slowest, .slowest_samples_per_s = pn.slowest_rate,
		.line = line, .loss = pn.p.loss};
	j = proto_stats_to_json(&st);
	free(ws);
	return j;
}
