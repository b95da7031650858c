#include "role/sim.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "nn/data.h"
#include "base/err.h"
#include "base/log.h"
#include "nn/model.h"
#include "base/rng.h"
#include "rules/rule.h"
#include "run/run.h"

#define LOSS_TAIL 100

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
	if (o->nworkers < 0 || o->nworkers + o->njoins < 1 ||
	    o->nworkers + o->njoins > SIM_MAX_WORKERS)
		return gem_errf(err, GEM_EUSAGE, "workers: between 1 and %d in all (with the joins)",
				SIM_MAX_WORKERS);
	if (!(o->step.a >= 0 && o->step.b >= 0) || !isfinite(o->step.a) || !isfinite(o->step.b) ||
	    o->step.kind < SIM_CONST || o->step.kind > SIM_LOGNORMAL)
		return gem_errf(err, GEM_EUSAGE, "step-time: a distribution with finite parameters >= 0");
	if (!(o->jitter >= 0 && o->jitter < 1))
		return gem_errf(err, GEM_EUSAGE, "jitter: not in [0, 1)");
	if (o->stragglers < 0 || o->stragglers > o->nworkers)
		return gem_errf(err, GEM_EUSAGE, "stragglers: %d of %d workers", o->stragglers, o->nworkers);
	if (!(o->straggler_factor >= 1) || !isfinite(o->straggler_factor))
		return gem_errf(err, GEM_EUSAGE, "stragglers: the factor must be a number >= 1");
	if (!(o->latency >= 0) || !isfinite(o->latency))
		return gem_errf(err, GEM_EUSAGE, "latency: not a number of seconds >= 0");
	if (!(o->server_time >= 0) || !isfinite(o->server_time))
		return gem_errf(err, GEM_EUSAGE, "server-time: not a number of seconds >= 0");
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

/* ---- the event queue: a binary heap ordered by (time, sequence number) ---- */

enum { EV_JOIN, EV_COMMIT, EV_LEAVE, EV_DIE };

struct event {
	double t;
	uint64_t seq; /* ties go in the order the events were made: deterministic, and FIFO */
	int kind, worker, done;
};

struct heap {
	struct event *a;
	size_t n, cap;
};

static int ev_before(const struct event *x, const struct event *y)
{
	return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int heap_push(struct heap *h, struct event e)
{
	size_t i;
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct event *a = realloc(h->a, cap * sizeof *a);
		if (!a)
			return -1;
		h->a = a;
		h->cap = cap;
	}
	for (i = h->n++; i > 0 && ev_before(&e, &h->a[(i - 1) / 2]); i = (i - 1) / 2)
		h->a[i] = h->a[(i - 1) / 2];
	h->a[i] = e;
	return 0;
}

static struct event heap_pop(struct heap *h)
{
	struct event top = h->a[0], last = h->a[--h->n];
	size_t i = 0, c;
	while ((c = 2 * i + 1) < h->n) {
		if (c + 1 < h->n && ev_before(&h->a[c + 1], &h->a[c]))
			c++;
		if (!ev_before(&h->a[c], &last))
			break;
		h->a[i] = h->a[c];
		i = c;
	}
	if (h->n)
		h->a[i] = last;
	return top;
}

/* ---- the simulation ---- */

/* Where a worker's next commit stands. Guarded by sim.mu once threads run. */
enum { W_WAIT, W_READY, W_RUNNING, W_DONE };

/* One virtual worker: what a gem-work process holds, plus its timing. */
struct vworker {
	int id;
	int started, joined, ended, pending;
	int state;
	double start_at, die_at, send_at;
	double slow;         /* step-time factor: the straggler factor or 1 */
	uint64_t base;       /* version of the θ it holds */
	float *theta;        /* θ received (easgd: its own x) */
	float *delta;        /* the commit computed from it (easgd: x after the local steps) */
	float loss;
	int finite;          /* every element of the commit is finite */
	uint64_t got;        /* samples of the computed commit */
	int nsteps;          /* local steps of the next commit */
	uint64_t planned, steps; /* samples and local steps of the commits planned so far */
	uint64_t target;     /* its budget of samples (UINT64_MAX with --steps) */
	size_t shadow_pos;   /* the batcher's position as the planning sees it */
	struct batcher b;
	struct rng drop, timing;
};

/* One gradient thread's model instance (activations) and batch buffers. */
struct compute_ctx {
	struct model *m;
	float *x;
	uint8_t *y;
};

struct helper_arg {
	struct sim *s;
	int i;
};

struct sim {
	const struct sim_opts *o;
	struct run run;
	struct layout layout;
	size_t n;
	float *theta, *reply;
	struct rule *rule;
	struct run_progress prog;
	FILE *log;
	struct dataset ds;
	int window, easgd, sync;
	float lr;
	struct vworker *w;
	int nw;
	struct heap q;
	uint64_t seq;
	double server_free, vnow, t0, last_progress;
	int nactive, ndone;
	struct rule_stats st;
	struct sim_summary sum;

	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	int nthreads, nhelpers, stop_threads;
	pthread_t *tid;
	struct helper_arg *args;
	struct compute_ctx *ctx;

	float loss_ring[LOSS_TAIL];
	int ring_n, ring_i;
	float *pi_meds;
	size_t npi, pi_cap;
	double scale_sum, tau_sum;
	uint64_t scale_n;
};

static int push(struct sim *s, int kind, double t, int worker, int done)
{
	struct event e = {.t = t, .seq = s->seq++, .kind = kind, .worker = worker, .done = done};
	return heap_push(&s->q, e);
}

static double step_time(struct sim *s, struct vworker *w)
{
	const struct sim_dist *d = &s->o->step;
	double t = d->a;
	if (d->kind == SIM_NORMAL) {
		t = d->a + d->b * rng_normal(&w->timing);
		if (t < 0)
			t = 0;
	} else if (d->kind == SIM_LOGNORMAL) {
		t = exp(d->a + d->b * rng_normal(&w->timing));
	}
	if (s->o->jitter > 0)
		t *= 1 + s->o->jitter * (2 * (double)rng_float(&w->timing) - 1);
	return t * w->slow;
}

/* The batch sizes batcher_next will return, without touching the data. */
static uint64_t shadow_next(struct vworker *w)
{
	size_t k;
	if (w->shadow_pos >= w->b.count)
		w->shadow_pos = 0;
	k = w->b.count - w->shadow_pos < (size_t)w->b.batch ? w->b.count - w->shadow_pos : (size_t)w->b.batch;
	w->shadow_pos += k;
	return k;
}

/* ---- gradients: the only costly part, and the part threads share ---- */

/* Whether a float is NaN or ±Inf, from its exponent bits (a loop of these vectorises). */
static inline uint32_t nonfinite(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (u & 0x7f800000u) == 0x7f800000u;
}

/* What gem-work computes between receiving θ and committing (lib/work.c, exactly): λ local
 * steps of plain SGD from the θ received; Δθ = −η∇L for λ = 1, else x_λ − x_0; easgd sends x. */
static void compute(const struct sim *s, struct compute_ctx *c, struct vworker *w)
{
	float *p = model_params(c->m);
	const float *g;
	const float lr = s->lr;
	double lsum = 0;
	uint64_t got = 0;
	uint32_t bad = 0;
	int k;
	memcpy(p, w->theta, sizeof(float) * s->n);
	for (k = 0; k < w->nsteps; k++) {
		int nb = batcher_next(&w->b, c->x, c->y);
		lsum += model_train_step(c->m, c->x, c->y, nb, &w->drop);
		got += (uint64_t)nb;
		g = model_grads(c->m);
		if (s->window == 1 && !s->easgd) {
			/* the server's check of the commit, fused with making it */
			for (size_t i = 0; i < s->n; i++) {
				float d = -lr * g[i];
				w->delta[i] = d;
				bad |= nonfinite(d);
			}
		} else {
			for (size_t i = 0; i < s->n; i++)
				p[i] -= lr * g[i];
		}
	}
	if (s->easgd) {
		for (size_t i = 0; i < s->n; i++) {
			w->delta[i] = p[i];
			bad |= nonfinite(p[i]);
		}
	} else if (s->window > 1) {
		for (size_t i = 0; i < s->n; i++) {
			float d = p[i] - w->theta[i];
			w->delta[i] = d;
			bad |= nonfinite(d);
		}
	}
	w->finite = !bad;
	w->loss = (float)(lsum / (k ? k : 1));
	w->got = got;
}

/* The READY worker whose commit is due first (caller holds mu). */
static struct vworker *pick_ready(struct sim *s)
{
	struct vworker *best = NULL;
	for (int i = 0; i < s->nw; i++) {
		struct vworker *w = &s->w[i];
		if (w->state == W_READY && (!best || w->send_at < best->send_at))
			best = w;
	}
	return best;
}

static void *helper_main(void *arg)
{
	struct sim *s = ((struct helper_arg *)arg)->s;
	struct compute_ctx *c = &s->ctx[((struct helper_arg *)arg)->i];
	pthread_mutex_lock(&s->mu);
	while (!s->stop_threads) {
		struct vworker *v = pick_ready(s);
		if (!v) {
			pthread_cond_wait(&s->work_cv, &s->mu);
			continue;
		}
		v->state = W_RUNNING;
		pthread_mutex_unlock(&s->mu);
		compute(s, c, v);
		pthread_mutex_lock(&s->mu);
		v->state = W_DONE;
		pthread_cond_broadcast(&s->done_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Make w's commit ready. While a helper computes it, this thread computes another one. */
static void ensure_computed(struct sim *s, struct vworker *w)
{
	pthread_mutex_lock(&s->mu);
	while (w->state != W_DONE) {
		struct vworker *v = w->state == W_READY ? w : s->nhelpers ? pick_ready(s) : NULL;
		if (!v) {
			pthread_cond_wait(&s->done_cv, &s->mu);
			continue;
		}
		v->state = W_RUNNING;
		pthread_mutex_unlock(&s->mu);
		compute(s, &s->ctx[0], v);
		pthread_mutex_lock(&s->mu);
		v->state = W_DONE;
		pthread_cond_broadcast(&s->done_cv);
	}
	w->state = W_WAIT;
	pthread_mutex_unlock(&s->mu);
}

static void set_ready(struct sim *s, struct vworker *w)
{
	pthread_mutex_lock(&s->mu);
	w->state = W_READY;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- the log, as gem-serve writes it, with virtual times ---- */

static double elapsed_of(const struct sim *s)
{
	return s->prog.elapsed + (cli_now() - s->t0);
}

static void log_event(struct sim *s, const char *event, int worker, double vtime, const char *extra)
{
	fprintf(s->log, "{\"event\":\"%s\",\"time\":%.3f,\"vtime\":%.6f", event, cli_wall(), vtime);
	if (worker >= 0)
		fprintf(s->log, ",\"worker\":%d", worker);
	fprintf(s->log, ",\"version\":%llu%s%s}\n", (unsigned long long)s->prog.version,
		extra && *extra ? "," : "", extra ? extra : "");
}

/* The options of the simulation, as an event line (threads left out: they change nothing). */
static void log_sim(struct sim *s)
{
	const struct sim_opts *o = s->o;
	static const char *kinds[] = {"const", "normal", "lognormal"};
	char step[96];
	json_t *ev, *deaths = json_array(), *joins = json_array();
	if (o->step.kind == SIM_CONST)
		snprintf(step, sizeof step, "const:%.17g", o->step.a);
	else
		snprintf(step, sizeof step, "%s:%.17g,%.17g", kinds[o->step.kind], o->step.a, o->step.b);
	for (int i = 0; i < o->ndeaths; i++)
		json_array_append_new(deaths, json_pack("{s:i, s:f}", "worker", o->deaths[i].worker, "at",
							 o->deaths[i].at));
	for (int i = 0; i < o->njoins; i++)
		json_array_append_new(joins, json_real(o->joins[i]));
	ev = json_pack("{s:s, s:f, s:f, s:I, s:i, s:I, s:s, s:f, s:i, s:f, s:f, s:f, s:o, s:o}", "event",
		       "sim", "time", cli_wall(), "vtime", 0.0, "version", (json_int_t)s->prog.version,
		       "workers", o->nworkers, "steps", (json_int_t)o->steps, "step_time", step, "jitter",
		       o->jitter, "stragglers", o->stragglers, "straggler_factor", o->straggler_factor,
		       "latency", o->latency, "server_time", o->server_time, "die", deaths, "join", joins);
	if (ev)
		json_dumpf(ev, s->log, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	fputc('\n', s->log);
	json_decref(ev);
}

/* An update line, and the figures the summary keeps of it. */
static int log_update(struct sim *s, int worker, float loss, double vtime)
{
	const struct rule_stats *st = &s->st;
	run_log_update(s->log, cli_wall(), elapsed_of(s), vtime, s->prog.version, worker, st->staleness,
		       loss, s->prog.samples, st);
	s->sum.updates++;
	s->tau_sum += (double)st->staleness;
	if (st->staleness > s->sum.tau_max)
		s->sum.tau_max = st->staleness;
	if (isfinite(loss)) {
		s->loss_ring[s->ring_i] = loss;
		s->ring_i = (s->ring_i + 1) % LOSS_TAIL;
		if (s->ring_n < LOSS_TAIL)
			s->ring_n++;
	}
	if (st->ntensors > 0) {
		if (s->npi + (size_t)st->ntensors > s->pi_cap) {
			size_t cap = s->pi_cap ? 2 * s->pi_cap : 4096;
			float *a;
			while (cap < s->npi + (size_t)st->ntensors)
				cap *= 2;
			if (!(a = realloc(s->pi_meds, cap * sizeof *a)))
				return -1;
			s->pi_meds = a;
			s->pi_cap = cap;
		}
		for (int i = 0; i < st->ntensors; i++)
			s->pi_meds[s->npi++] = st->t[i].pi_median;
		s->scale_sum += st->all.scale;
		s->scale_n++;
	}
	return 0;
}

/* ---- what the workers do between messages ---- */

/* The reply reaches worker w at time tr: it leaves when its budget is spent, else it plans its
 * next commit (local steps, samples, when it is sent) and becomes READY to compute it. */
static int worker_reply(struct sim *s, struct vworker *w, double tr)
{
	const struct sim_opts *o = s->o;
	double d = 0;
	uint64_t got = 0;
	if (w->ended || tr >= w->die_at)
		return 0; /* it dies first: its death sends the leave */
	if (w->planned >= w->target || (o->steps && w->steps >= o->steps)) {
		w->ended = 1;
		s->sum.finished++;
		return push(s, EV_LEAVE, tr + o->latency, w->id, 1);
	}
	/* the local steps of gem-work's window loop; their times make the commit's */
	w->nsteps = 0;
	while (w->nsteps < s->window && w->planned + got < w->target) {
		got += shadow_next(w);
		d += step_time(s, w);
		w->nsteps++;
	}
	w->planned += got;
	w->steps += (uint64_t)w->nsteps;
	w->send_at = tr + d;
	if (w->send_at > w->die_at)
		return 0; /* never sent */
	if (push(s, EV_COMMIT, w->send_at + o->latency, w->id, 0) < 0)
		return -1;
	set_ready(s, w);
	return 0;
}

/* θ (or easgd's elastic difference) goes back to w; it arrives at tr. */
static int reply_to(struct sim *s, struct vworker *w, double tr)
{
	if (s->easgd) {
		/* x ← x − d: the worker keeps its own x, pulled towards the center */
		for (size_t i = 0; i < s->n; i++)
			w->theta[i] = w->delta[i] - s->reply[i];
	} else {
		memcpy(w->theta, s->theta, sizeof(float) * s->n);
	}
	w->base = s->prog.version;
	return worker_reply(s, w, tr);
}

/* sync: the round is complete; every worker waiting in it gets θ. */
static int release_round(struct sim *s, double tr)
{
	for (int i = 0; i < s->nw; i++) {
		struct vworker *w = &s->w[i];
		if (w->pending) {
			w->pending = 0;
			if (w->joined && reply_to(s, w, tr) < 0)
				return -1;
		}
	}
	return 0;
}

/* ---- the server, applying requests in order of arrival ---- */

static int serve_join(struct sim *s, struct vworker *w, double t, char *err)
{
	int rc;
	if (!(w->theta = malloc(sizeof(float) * s->n)) || !(w->delta = malloc(sizeof(float) * s->n)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for worker %d", w->id);
	/* as gem-work: its own shuffled copy of the data, its own dropout stream */
	if ((rc = batcher_init(&w->b, &s->ds, s->run.train.batch, s->run.train.seed, 1 + (uint64_t)w->id, 0,
			       1, s->run.mean, s->run.std, err)) < 0)
		return rc;
	if (json_is_true(json_object_get(s->run.json, "shard")) ||
	    json_is_true(json_object_get(json_object_get(s->run.json, "train"), "shard"))) {
		int sn = s->run.rule.nworkers > 0 ? s->run.rule.nworkers : 1;
		batcher_free(&w->b);
		if ((rc = batcher_init(&w->b, &s->ds, s->run.train.batch, s->run.train.seed,
				       1 + (uint64_t)w->id, w->id % sn, sn, s->run.mean, s->run.std, err)) < 0)
			return rc;
	}
	rng_seed(&w->drop, s->run.train.seed, 0x776f726bULL + (uint64_t)w->id);
	w->target = s->o->steps ? UINT64_MAX : (uint64_t)s->run.train.epochs * w->b.count;
	if ((rc = rule_join(s->rule, w->id, s->theta, err)) < 0)
		return rc;
	w->joined = 1;
	s->nactive++;
	log_event(s, "join", w->id, t, "\"rejoin\":false");
	memcpy(w->theta, s->theta, sizeof(float) * s->n);
	w->base = s->prog.version;
	return worker_reply(s, w, t + s->o->latency) < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory") : 0;
}

static int serve_leave(struct sim *s, struct vworker *w, int done, double t, char *err)
{
	int rc;
	if (!w->joined)
		return 0;
	rc = rule_leave(s->rule, w->id, s->theta, &s->prog.version, &s->st, err);
	if (rc < 0)
		return rc;
	if (rc == 1 && (log_update(s, w->id, NAN, t) < 0 || release_round(s, t + s->o->latency) < 0))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	w->joined = 0;
	w->pending = 0;
	s->nactive--;
	if (done)
		s->ndone++;
	log_event(s, "leave", w->id, t, done ? "\"done\":true" : "\"done\":false");
	return 0;
}

static int serve_commit(struct sim *s, struct vworker *w, double t, char *err)
{
	int rc;
	double tout;
	ensure_computed(s, w);
	if (!isfinite(w->loss)) {
		/* gem-work stops before it sends: its leave comes instead of the commit */
		log_warn("worker %d: the loss is %g at version %llu: diverged", w->id, (double)w->loss,
			 (unsigned long long)w->base);
		w->ended = 1;
		s->sum.failed++;
		return serve_leave(s, w, 0, t, err);
	}
	if (!w->joined)
		return 0;
	if (!w->finite) {
		/* gem-serve refuses it; the worker gives up and leaves */
		log_event(s, "refused", w->id, t, "\"reason\":\"non_finite\"");
		log_warn("worker %d: its update at version %llu is not finite: refused", w->id,
			 (unsigned long long)w->base);
		w->ended = 1;
		s->sum.failed++;
		return push(s, EV_LEAVE, t + 2 * s->o->latency, w->id, 0) < 0
			       ? gem_errf(err, GEM_ENOMEM, "out of memory")
			       : 0;
	}
	rc = rule_commit(s->rule, w->id, w->delta, w->base, s->theta, &s->prog.version, s->reply, &s->st,
			 err);
	if (rc < 0)
		return rc;
	s->prog.samples += w->got;
	tout = t + s->o->server_time;
	s->server_free = tout;
	if (rc == RULE_PENDING) {
		w->pending = 1;
		return 0;
	}
	if (log_update(s, w->id, w->loss, tout) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	rc = reply_to(s, w, tout + s->o->latency);
	if (rc == 0 && s->sync)
		rc = release_round(s, tout + s->o->latency);
	return rc < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory") : 0;
}

/* One event. Requests to the server start when it is free (FIFO: they are popped in order of
 * arrival); a commit occupies it for server_time. */
static int step_event(struct sim *s, const struct event *e, char *err)
{
	struct vworker *w = &s->w[e->worker];
	double t = e->t > s->server_free ? e->t : s->server_free;
	switch (e->kind) {
	case EV_DIE:
		if (e->t > s->vnow)
			s->vnow = e->t;
		if (!w->started || w->ended)
			return 0;
		w->ended = 1;
		s->sum.died++;
		return push(s, EV_LEAVE, e->t + s->o->latency, w->id, 0) < 0
			       ? gem_errf(err, GEM_ENOMEM, "out of memory")
			       : 0;
	case EV_JOIN:
		s->vnow = s->server_free = t;
		return serve_join(s, w, t, err);
	case EV_LEAVE:
		s->vnow = s->server_free = t;
		return serve_leave(s, w, e->done, t, err);
	case EV_COMMIT:
		s->vnow = s->server_free = t;
		return serve_commit(s, w, t, err);
	}
	return 0;
}

/* ---- set-up and tear-down ---- */

static int threads_start(struct sim *s, char *err)
{
	int rc;
	s->ctx = calloc((size_t)s->nthreads, sizeof *s->ctx);
	s->args = calloc((size_t)s->nthreads, sizeof *s->args);
	if (!s->ctx || !s->args)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int i = 0; i < s->nthreads; i++) {
		struct compute_ctx *c = &s->ctx[i];
		if ((rc = model_from_json(s->run.model, &c->m, err)) < 0 ||
		    (rc = model_reserve(c->m, s->run.train.batch, err)) < 0)
			return rc;
		c->x = malloc(sizeof(float) * (size_t)s->run.train.batch * model_input_size(c->m));
		c->y = malloc((size_t)s->run.train.batch);
		if (!c->x || !c->y)
			return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	if (s->nthreads > 1 && !(s->tid = calloc((size_t)s->nthreads, sizeof *s->tid)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int i = 1; i < s->nthreads; i++) {
		s->args[i] = (struct helper_arg){s, i};
		if (pthread_create(&s->tid[i], NULL, helper_main, &s->args[i]) != 0)
			return gem_errf(err, GEM_EFAIL, "cannot start a thread");
		s->nhelpers++;
	}
	return 0;
}

static void threads_stop(struct sim *s)
{
	pthread_mutex_lock(&s->mu);
	s->stop_threads = 1;
	pthread_cond_broadcast(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	for (int i = 1; i <= s->nhelpers; i++)
		pthread_join(s->tid[i], NULL);
	s->nhelpers = 0;
	if (s->ctx)
		for (int i = 0; i < s->nthreads; i++) {
			model_free(s->ctx[i].m);
			free(s->ctx[i].x);
			free(s->ctx[i].y);
		}
	free(s->ctx);
	free(s->tid);
	free(s->args);
	s->ctx = NULL;
	s->tid = NULL;
	s->args = NULL;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static void summarise(struct sim *s)
{
	struct sim_summary *m = &s->sum;
	double l = 0;
	m->version = s->prog.version;
	m->samples = s->prog.samples;
	m->vtime = s->vnow;
	m->seconds = cli_now() - s->t0;
	for (int i = 0; i < s->ring_n; i++)
		l += s->loss_ring[i];
	m->loss_tail = s->ring_n ? l / s->ring_n : NAN;
	m->tau_mean = m->updates ? s->tau_sum / (double)m->updates : 0;
	m->pi_median = m->scale_mean = NAN;
	if (s->npi) {
		qsort(s->pi_meds, s->npi, sizeof *s->pi_meds, cmp_float);
		m->pi_median = s->npi % 2 ? s->pi_meds[s->npi / 2]
					  : 0.5 * ((double)s->pi_meds[s->npi / 2 - 1] + s->pi_meds[s->npi / 2]);
		m->scale_mean = s->scale_sum / (double)s->scale_n;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int sim_run(const char *rundir, const struct sim_opts *o, struct sim_summary *sum, char *err)
{
	struct sim *s;
	struct model *m = NULL;
	double *joins = NULL;
	int rc;

	if ((rc = sim_opts_check(o, err)) < 0)
		return rc;
	if (!(s = calloc(1, sizeof *s)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->o = o;
	s->nthreads = o->threads;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	s->t0 = s->last_progress = cli_now();
	if ((rc = run_open(rundir, &s->run, err)) < 0) {
		s->run.lock_fd = -1;
		goto out_nrun;
	}
	if ((rc = run_lock(&s->run, err)) < 0 || (rc = model_from_json(s->run.model, &m, err)) < 0)
		goto out;
	s->layout = *model_layout(m);
	s->n = model_nparams(m);
	model_free(m);
	s->nw = o->nworkers + o->njoins;
	s->theta = malloc(sizeof(float) * s->n);
	s->reply = malloc(sizeof(float) * s->n);
	s->w = calloc((size_t)s->nw, sizeof *s->w);
	joins = malloc(sizeof *joins * (size_t)(o->njoins ? o->njoins : 1));
	if (!s->theta || !s->reply || !s->w || !joins) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto out;
	}
	if (!strcmp(s->run.rule.name, "dma")) {
		/* dma's worker commits in the background and carries on: not modelled yet */
		rc = gem_errf(err, GEM_EUSAGE, "rule dma is not simulated (use gem-serve and gem-work)");
		goto out;
	}
	if ((rc = run_params_load(&s->run, NULL, s->theta, s->n, &s->prog, err)) < 0 ||
	    (rc = rule_create(&s->run.rule, &s->layout, &s->rule, err)) < 0 ||
	    (rc = dataset_load(s->run.data_dir, "train", &s->ds, err)) < 0)
		goto out;
	s->easgd = !strcmp(s->run.rule.name, "easgd");
	s->sync = !strcmp(s->run.rule.name, "sync");
	s->window = (s->easgd || !strcmp(s->run.rule.name, "downpour")) && s->run.rule.window > 1
			    ? s->run.rule.window
			    : 1;
	s->lr = s->run.train.lr;
	if ((rc = threads_start(s, err)) < 0)
		goto out;

	/* the workers: 0..N−1 at time 0, then the joiners in time order */
	memcpy(joins, o->joins, sizeof *joins * (size_t)o->njoins);
	qsort(joins, (size_t)o->njoins, sizeof *joins, cmp_double);
	for (int i = 0; i < s->nw; i++) {
		struct vworker *w = &s->w[i];
		w->id = i;
		w->start_at = i < o->nworkers ? 0 : joins[i - o->nworkers];
		w->die_at = INFINITY;
		w->slow = i < o->stragglers ? o->straggler_factor : 1;
		rng_seed(&w->timing, s->run.train.seed, RNG_SIM_TIMING + (uint64_t)i);
	}
	for (int i = 0; i < o->ndeaths; i++) {
		struct vworker *w = &s->w[o->deaths[i].worker];
		if (o->deaths[i].at < w->die_at)
			w->die_at = o->deaths[i].at;
	}
	if ((rc = run_log_open(&s->run, &s->log, err)) < 0)
		goto out;
	run_log_start(s->log, &s->run, s->run.rule.name, NULL, s->prog.version, &s->layout);
	log_sim(s);
	rc = 0;
	for (int i = 0; i < s->nw && rc == 0; i++) {
		struct vworker *w = &s->w[i];
		if (w->start_at >= w->die_at)
			continue; /* dead before it starts: never starts */
		w->started = 1;
		rc = push(s, EV_JOIN, w->start_at + o->latency, i, 0);
		if (rc == 0 && isfinite(w->die_at))
			rc = push(s, EV_DIE, w->die_at, i, 0);
	}
	if (rc < 0) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < s->nw; i++)
		s->sum.workers += s->w[i].started;

	while (s->q.n > 0 && !(o->stop && *o->stop)) {
		struct event e = heap_pop(&s->q);
		if ((rc = step_event(s, &e, err)) < 0)
			goto out;
		if (o->progress && cli_now() - s->last_progress >= 0.25) {
			s->last_progress = cli_now();
			o->progress(o->progress_ctx, s->prog.version, s->vnow, s->nactive);
		}
	}
	threads_stop(s);
	s->prog.elapsed = elapsed_of(s);
	log_event(s, "stop", -1, s->vnow,
		  s->q.n ? "\"reason\":\"stopped by a signal\""
		  : s->ndone ? "\"reason\":\"every worker has finished\""
			     : "\"reason\":\"every worker has left\"");
	if ((rc = run_params_save(&s->run, s->theta, s->n, &s->prog, err)) < 0)
		goto out;
	summarise(s);
	if (sum)
		*sum = s->sum;
out:
	threads_stop(s);
	if (s->log && fclose(s->log) != 0 && rc == 0)
		rc = gem_errf(err, GEM_EFAIL, "%s/log.jsonl: cannot write", rundir);
	run_close(&s->run);
out_nrun:
	for (int i = 0; i < s->nw; i++) {
		free(s->w[i].theta);
		free(s->w[i].delta);
		batcher_free(&s->w[i].b);
	}
	free(s->w);
	free(joins);
	rule_destroy(s->rule);
	dataset_free(&s->ds);
	free(s->theta);
	free(s->reply);
	free(s->q.a);
	free(s->pi_meds);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	free(s);
	return rc;
}
