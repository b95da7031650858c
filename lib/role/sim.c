#include "role/sim.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "base/rng.h"
#include "nn/data.h"
#include "role/ps.h"
#include "role/trainer.h"
#include "role/vworker.h"
#include "run/runlog.h"
#include "run/shard.h"

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
	if (o->shards < 0 || o->shards > SHARD_MAX)
		return gem_errf(err, GEM_EUSAGE, "shards: between 1 and %d", SHARD_MAX);
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

/* One virtual worker: a gem-work (vworker) and its timing. */
struct simw {
	struct vworker v;
	int open, started, joined, ended, pending;
	int state;
	double start_at, die_at, send_at;
	double slow;             /* step-time factor: the straggler factor or 1 */
	int nsteps;              /* local steps of the next commit */
	int crc;                 /* its computing's result: 0, or GEM_ENOMEM */
	uint64_t planned, steps; /* samples and local steps of the commits planned so far */
	uint64_t target;         /* its budget of samples (UINT64_MAX with --steps) */
	size_t shadow_pos;       /* the data position within an epoch as the planning sees it */
	uint64_t ready_seq;      /* its entry in sim.ready, made when it last became READY */
	struct rng timing;
};

struct helper_arg {
	struct sim *s;
	int i;
};

struct sim {
	const struct sim_opts *o;
	struct ps *ps;             /* shard 0's core: the version, the log's sim events, progress */
	struct ps *core[SHARD_MAX]; /* --shards K: a core per shard of θ, each on its slice */
	struct shard cut[SHARD_MAX];
	int ncores;
	const struct run *run;
	size_t n;
	float *reply;
	struct dataset ds;
	struct simw *w;
	int nw;
	struct heap q;
	/* with helper threads: the READY workers by send_at (an event's t; its seq the worker's
	 * ready_seq, its worker the index), entries of workers since taken left until popped */
	struct heap ready;
	uint64_t ready_seq;
	uint64_t seq;
	double server_free, vnow, t0, last_progress, last_flush;
	int ndone;
	int total_set;            /* the progress's total, known once a worker has joined */
	struct sim_summary sum;

	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	int nthreads, nhelpers, stop_threads;
	pthread_t *tid;
	struct helper_arg *args;
	struct trainer *tr; /* one model instance per gradient thread */
	struct vwire *wire; /* and its messages' codec scratch (the main thread's: [0]) */

	float loss_ring[LOSS_TAIL];
	int ring_n, ring_i;
	float *pi_meds;
	size_t npi, pi_cap;
	double scale_sum, zero_sum, tau_sum;
	uint64_t scale_n;

	/* the server model: when each shard host's link in, link out and CPU are next free, and
	 * for how long each has been busy; the staleness of each update, each commit's wait */
	double link_in[SHARD_MAX], link_out[SHARD_MAX], cpu[SHARD_MAX];
	double busy_in[SHARD_MAX], busy_out[SHARD_MAX], busy_cpu[SHARD_MAX];
	uint64_t *taus;
	size_t ntau, tau_cap;
	double *waits, wait_sum;
	size_t nwait, wait_cap;
};

/* a (capacity *cap elements of size elem) with room for need, its capacity doubled as it
 * grows; NULL (a untouched) when out of memory. */
static void *grow(void *a, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 1024;
	void *b;
	if (need <= *cap)
		return a;
	while (c < need)
		c *= 2;
	if (!(b = realloc(a, c * elem)))
		return NULL;
	*cap = c;
	return b;
}

static int push(struct sim *s, int kind, double t, int worker, int done)
{
	struct event e = {.t = t, .seq = s->seq++, .kind = kind, .worker = worker, .done = done};
	return heap_push(&s->q, e);
}

static double step_time(struct sim *s, struct simw *w)
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

/* The batch sizes the worker's feed will return, without touching the data. */
static uint64_t shadow_next(struct simw *w)
{
	const struct batcher *b = &w->v.f.b;
	size_t k;
	if (w->shadow_pos >= b->count)
		w->shadow_pos = 0;
	k = b->count - w->shadow_pos < (size_t)b->batch ? b->count - w->shadow_pos : (size_t)b->batch;
	w->shadow_pos += k;
	return k;
}

/* ---- gradients: the only costly part, and the part threads share ---- */

/* The READY worker whose commit is due first (caller holds mu), out of s->ready. */
static struct simw *pick_ready(struct sim *s)
{
	while (s->ready.n > 0) {
		struct event e = heap_pop(&s->ready);
		struct simw *w = &s->w[e.worker];
		if (w->state == W_READY && w->ready_seq == e.seq)
			return w;
	}
	return NULL;
}

static void *helper_main(void *arg)
{
	struct sim *s = ((struct helper_arg *)arg)->s;
	struct trainer *t = &s->tr[((struct helper_arg *)arg)->i];
	char err[GEM_ERRMAX];
	pthread_mutex_lock(&s->mu);
	while (!s->stop_threads) {
		struct simw *v = pick_ready(s);
		if (!v) {
			pthread_cond_wait(&s->work_cv, &s->mu);
			continue;
		}
		v->state = W_RUNNING;
		pthread_mutex_unlock(&s->mu);
		v->crc = vworker_compute(&v->v, t, &s->wire[((struct helper_arg *)arg)->i], v->nsteps, 0,
					 err);
		pthread_mutex_lock(&s->mu);
		v->state = W_DONE;
		pthread_cond_broadcast(&s->done_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Make w's commit ready. While a helper computes it, this thread computes another one.
 * GEM_ENOMEM: w's could not be computed. */
static int ensure_computed(struct sim *s, struct simw *w, char *err)
{
	pthread_mutex_lock(&s->mu);
	while (w->state != W_DONE) {
		struct simw *v = w->state == W_READY ? w : s->nhelpers ? pick_ready(s) : NULL;
		if (!v) {
			pthread_cond_wait(&s->done_cv, &s->mu);
			continue;
		}
		v->state = W_RUNNING;
		pthread_mutex_unlock(&s->mu);
		v->crc = vworker_compute(&v->v, &s->tr[0], &s->wire[0], v->nsteps, 0, err);
		pthread_mutex_lock(&s->mu);
		v->state = W_DONE;
		pthread_cond_broadcast(&s->done_cv);
	}
	w->state = W_WAIT;
	pthread_mutex_unlock(&s->mu);
	return w->crc < 0 ? gem_errf(err, w->crc, "worker %d: out of memory for its data's order",
				     w->v.id)
			  : 0;
}

/* -1: out of memory. */
static int set_ready(struct sim *s, struct simw *w)
{
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	w->state = W_READY;
	if (s->nhelpers) {
		w->ready_seq = s->ready_seq++;
		rc = heap_push(&s->ready, (struct event){.t = w->send_at, .seq = w->ready_seq,
							  .worker = (int)(w - s->w)});
	}
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Tell the caller where the run stands (o->progress; it limits how often it shows it). */
static void sim_progress(struct sim *s)
{
	struct ps_now now;
	s->last_progress = clock_mono();
	ps_now(s->ps, &now);
	s->o->progress(s->o->progress_ctx, &now, s->vnow);
}

/* ---- the summary ---- */

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
	ev = json_pack("{s:s, s:f, s:f, s:I, s:i, s:I, s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:o, s:o}", "event",
		       "sim", "time", clock_wall(), "vtime", 0.0, "version", (json_int_t)ps_version(s->ps),
		       "workers", o->nworkers, "steps", (json_int_t)o->steps, "step_time", step, "jitter",
		       o->jitter, "speed_spread", o->speed_spread, "stragglers", o->stragglers, "straggler_factor", o->straggler_factor,
		       "latency", o->latency, "server_time", o->server_time, "die", deaths, "join", joins);
	if (ev && (o->cost_a > 0 || o->cost_b > 0 || o->bandwidth > 0)) /* the server model: on */
		json_object_update_new(ev, json_pack("{s:f, s:f, s:f}", "server_cost_a", o->cost_a,
						     "server_cost_b", o->cost_b, "bandwidth", o->bandwidth));
	run_log_json(ps_log(s->ps), ev);
	json_decref(ev);
}

/* The figures the summary keeps of an applied update. */
static int summary_add(struct sim *s, float loss, const struct rule_stats *st)
{
	uint64_t *taus;
	s->sum.updates++;
	s->tau_sum += (double)st->staleness;
	if (!(taus = grow(s->taus, &s->tau_cap, s->ntau + 1, sizeof *taus)))
		return -1;
	s->taus = taus;
	s->taus[s->ntau++] = st->staleness;
	if (st->staleness > s->sum.tau_max)
		s->sum.tau_max = st->staleness;
	if (isfinite(loss)) {
		s->loss_ring[s->ring_i] = loss;
		s->ring_i = (s->ring_i + 1) % LOSS_TAIL;
		if (s->ring_n < LOSS_TAIL)
			s->ring_n++;
	}
	if (st->ntensors > 0) {
		float *a = grow(s->pi_meds, &s->pi_cap, s->npi + (size_t)st->ntensors, sizeof *a);
		if (!a)
			return -1;
		s->pi_meds = a;
		for (int i = 0; i < st->ntensors; i++)
			s->pi_meds[s->npi++] = st->t[i].pi_median;
		s->scale_sum += st->all.scale;
		s->zero_sum += st->all.clamped0;
		s->scale_n++;
	}
	return 0;
}

/* ---- what the workers do between messages ---- */

/* The reply reaches worker w at time tr: it leaves when its budget is spent, else it plans its
 * next commit (local steps, samples, when it is sent) and becomes READY to compute it. With an
 * overlap T the worker went on from its commit's sending: its first T steps run while the
 * reply travels, and it waits for the reply only if it has not come by then. */
static int worker_reply(struct sim *s, struct simw *w, double tr)
{
	const struct sim_opts *o = s->o;
	double d = 0, d_held = -1;
	uint64_t got = 0;
	if (w->ended || tr >= w->die_at)
		return 0; /* it dies first: its death sends the leave */
	if (w->planned >= w->target || (o->steps && w->steps >= o->steps)) {
		w->ended = 1;
		s->sum.finished++;
		return push(s, EV_LEAVE, tr + o->latency, w->v.id, 1);
	}
	/* the local steps of gem-work's window loop (its window, or as the server said: dynamic
	 * local updates); their times make the commit's */
	w->nsteps = 0;
	while (w->nsteps < w->v.l.window && w->planned + got < w->target) {
		got += shadow_next(w);
		d += step_time(s, w);
		if (++w->nsteps == w->v.l.overlap)
			d_held = d;
	}
	w->planned += got;
	w->steps += (uint64_t)w->nsteps;
	if (!w->v.l.holding) {
		w->send_at = tr + d;
	} else {
		/* from its last sending; the reply is mixed in after T steps, or at the commit */
		double held = d_held >= 0 ? d_held : d;
		w->send_at = fmax(w->send_at + held, tr) + (d - held);
	}
	if (w->send_at > w->die_at)
		return 0; /* never sent */
	if (push(s, EV_COMMIT, w->send_at + o->latency, w->v.id, 0) < 0)
		return -1;
	return set_ready(s, w);
}

/* ---- the cores: one, or one per shard of θ, asked the same things in the same order ---- */

static void cores_vtime(struct sim *s, double t)
{
	for (int k = 0; k < s->ncores; k++)
		ps_set_vtime(s->core[k], t);
}

/* The header of each shard's reply whose header is base (taken over): with the slice of θ it
 * carries when θ is cut, as gem-serve adds it. heads[k] are new references, all NULL when out of
 * memory (the reply is then not measured). */
static void reply_heads(struct sim *s, json_t *base, json_t **heads)
{
	/* base is shard 0's, the last: the others are copies of it */
	for (int k = s->ncores - 1; k >= 0; k--) {
		heads[k] = k && base ? json_deep_copy(base) : base;
		if (ps_reply_sliced(s->core[k], heads[k]) < 0) {
			json_decref(heads[k]);
			heads[k] = NULL;
		}
	}
	for (int k = 0; k < s->ncores; k++)
		if (!heads[k]) {
			for (int i = 0; i < s->ncores; i++)
				json_decref(heads[i]);
			memset(heads, 0, sizeof *heads * (size_t)s->ncores);
			return;
		}
}

/* Worker w has taken a reply measured under heads (released): each shard's slice of it goes
 * out of that shard's server. */
static void cores_sent(struct sim *s, const struct simw *w, json_t **heads)
{
	for (int k = 0; k < s->ncores; k++) {
		ps_sent(s->core[k], w->v.reply_bytes[k]);
		json_decref(heads[k]);
	}
}

/* The reply of the commits held for the round that just closed, into s->reply; shard 0's r. */
static void cores_reply_held(struct sim *s, struct ps_reply *r)
{
	for (int k = 0; k < s->ncores; k++) {
		struct ps_reply rk;
		ps_reply_held(s->core[k], s->reply + s->cut[k].off, k ? &rk : r);
	}
}

static int cores_join(struct sim *s, int id, struct ps_joined *j, char *err)
{
	for (int k = 0; k < s->ncores; k++) {
		struct ps_joined jk;
		int rc = ps_join(s->core[k], id, s->o->codec, s->reply + s->cut[k].off, k ? &jk : j,
				 err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Worker id leaves every core (how: PS_LEFT_*; loss: a diverged worker's). */
static int cores_leave(struct sim *s, int id, int how, float loss, struct ps_reply *r, char *err)
{
	for (int k = 0; k < s->ncores; k++) {
		struct ps_reply rk;
		int rc = ps_leave(s->core[k], id, how, loss, 0, k ? &rk : r, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Commit c to every core, each its slice of the update; shard 0's answer in *r. The shards see
 * the same commits in the same order, so they decide alike: else the run stops. */
static int cores_commit(struct sim *s, const struct ps_commit *c, const uint64_t *bytes,
			struct ps_reply *r, char *err)
{
	int st = 0;
	for (int k = 0; k < s->ncores; k++) {
		struct ps_commit ck = *c;
		struct ps_reply rk;
		int stk;
		ck.update = c->update + s->cut[k].off;
		ck.bytes = bytes[k];
		stk = ps_commit(s->core[k], &ck, s->reply + s->cut[k].off, k ? &rk : r, err);
		if (k == 0)
			st = stk;
		else if (stk != st)
			return gem_errf(err, GEM_EFAIL, "shard %d answered %s, shard 0 %s", k,
					ps_status_code(stk), ps_status_code(st));
	}
	return st;
}

/* ---- the server model: each shard's host a link in, a CPU and a link out, each FIFO ---- */

/* Seconds a message of bytes takes through a link. */
static double link_time(const struct sim *s, uint64_t bytes)
{
	return s->o->bandwidth > 0 ? (double)bytes / s->o->bandwidth : 0;
}

/* A commit whose slices are bytes[k] (as encoded) arrives at the servers at t: when the last
 * shard is done with it (*start: when the last one started on it; *wait: the longest it waited
 * in a shard's queues). */
static double server_take(struct sim *s, double t, const uint64_t *bytes, double *start,
			  double *wait)
{
	double done = t;
	*start = t;
	*wait = 0;
	for (int k = 0; k < s->ncores; k++) {
		double x = link_time(s, bytes[k]), in = t > s->link_in[k] ? t : s->link_in[k];
		double at = in + x, st = at > s->cpu[k] ? at : s->cpu[k];
		double svc = s->o->server_time + s->o->cost_a * (double)s->cut[k].len + s->o->cost_b;
		s->link_in[k] = at;
		s->cpu[k] = st + svc;
		s->busy_in[k] += x;
		s->busy_cpu[k] += svc;
		if (st > *start)
			*start = st;
		if (s->cpu[k] > done)
			done = s->cpu[k];
		if ((in - t) + (st - at) > *wait)
			*wait = (in - t) + (st - at);
	}
	if (done > s->server_free)
		s->server_free = done;
	return done;
}

/* A join or a leave at t: the servers take it when every shard is free (it costs them no time). */
static double server_next(struct sim *s, double t)
{
	if (t < s->server_free)
		t = s->server_free;
	for (int k = 0; k < s->ncores; k++)
		s->cpu[k] = t;
	return s->server_free = t;
}

/* Worker w's reply (θ, or its slices), encoded (vworker_reply, vworker_joined), leaves the
 * servers at t: when it reaches w. */
static double reply_at(struct sim *s, const struct simw *w, double t)
{
	double r = t;
	for (int k = 0; k < s->ncores; k++) {
		double x = link_time(s, w->v.reply_bytes[k]),
		       out = t > s->link_out[k] ? t : s->link_out[k];
		s->link_out[k] = out + x;
		s->busy_out[k] += x;
		if (s->link_out[k] > r)
			r = s->link_out[k];
	}
	return r + s->o->latency;
}

/* A round closed at t: every worker held in it gets its reply. */
static int release_round(struct sim *s, double t, char *err)
{
	struct ps_reply r = {0};
	cores_reply_held(s, &r);
	for (int i = 0; i < s->nw; i++) {
		struct simw *w = &s->w[i];
		json_t *heads[SHARD_MAX];
		int rc;
		if (!w->pending)
			continue;
		w->pending = 0;
		if (!w->joined)
			continue;
		/* a held commit's reply: τ 0, as a round refuses a stale one */
		reply_heads(s, ps_commit_reply_head(&r, 1), heads);
		rc = vworker_reply(&w->v, &s->wire[0], s->reply, r.elastic, 0, r.version,
				   heads[0] ? heads : NULL, err);
		cores_sent(s, w, heads);
		if (rc < 0)
			return GEM_EFAIL;
		if (worker_reply(s, w, reply_at(s, w, t)) < 0)
			return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	return 0;
}

/* ---- the server: the core, asked in order of arrival ---- */

static int serve_join(struct sim *s, struct simw *w, double t, char *err)
{
	struct ps_joined j;
	json_t *heads[SHARD_MAX];
	int rc;
	cores_vtime(s, t);
	if ((rc = cores_join(s, w->v.id, &j, err)) < 0) {
		gem_errprefix(err, "worker %d: join refused: ", w->v.id);
		return GEM_EFAIL;
	}
	reply_heads(s, ps_join_reply_head(&j), heads);
	rc = vworker_joined(&w->v, s->run, &s->ds, &j, s->reply, &s->wire[0],
			    heads[0] ? heads : NULL, err);
	cores_sent(s, w, heads);
	if (rc < 0)
		return rc;
	w->shadow_pos = j.samples % feed_epoch(&w->v.f);
	w->planned = j.samples;
	w->target = s->o->steps ? UINT64_MAX : run_budget(s->run, feed_epoch(&w->v.f));
	w->joined = 1;
	if (!s->total_set++) {
		/* every worker spends what is left of a budget like this one's, from where θ stands */
		uint64_t left = s->o->steps ? s->o->steps * (uint64_t)s->run->spec.train.batch
			      : w->target > j.samples ? w->target - j.samples : 0;
		ps_set_total(s->ps, ps_progress(s->ps).samples + (uint64_t)s->nw * left);
	}
	return worker_reply(s, w, reply_at(s, w, t)) < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory")
							     : 0;
}

static int serve_leave(struct sim *s, struct simw *w, int how, double t, char *err)
{
	struct ps_reply r;
	int rc;
	if (!w->joined)
		return 0;
	cores_vtime(s, t);
	if ((rc = cores_leave(s, w->v.id, how, w->v.loss, &r, err)) < 0) {
		gem_errprefix(err, "worker %d: leave refused: ", w->v.id);
		return GEM_EFAIL;
	}
	w->joined = 0;
	w->pending = 0;
	s->ndone += how == PS_LEFT_DONE;
	if (r.round_closed && summary_add(s, NAN, r.st) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return r.round_closed ? release_round(s, t, err) : 0;
}

/* Worker w stops on its own (as gem-work does) at t: it leaves after its message's way. */
static int worker_fails(struct sim *s, struct simw *w, double t, const char *why, char *err)
{
	log_warn("worker %d: %s at version %llu", w->v.id, why, (unsigned long long)w->v.base);
	w->ended = 1;
	s->sum.failed++;
	return push(s, EV_LEAVE, t, w->v.id, 0) < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory") : 0;
}

/* Worker w's commit (computed: ensure_computed), started on at t by the servers and done with
 * at tout. */
static int serve_commit(struct sim *s, struct simw *w, double t, double tout, char *err)
{
	struct ps_commit c = {.worker = w->v.id, .idle = -1};
	struct ps_reply r;
	json_t *heads[SHARD_MAX];
	int st, rc;

	if (w->v.diverged) {
		/* gem-work stops before it sends: its leave comes instead of the commit */
		char l[16];
		/* the first one: the others' say the same (the summary counts them) */
		if (!s->sum.diverged++)
			log_warn("worker %d: the loss is %s at version %llu: diverged", w->v.id,
				 num_format(l, sizeof l, "%g", (double)w->v.loss),
				 (unsigned long long)w->v.base);
		w->ended = 1;
		s->sum.failed++;
		return serve_leave(s, w, PS_LEFT_DIVERGED, t, err);
	}
	if (!w->joined)
		return 0;
	if (!w->v.update) /* gem-work's encoder refused it: it fails without sending */
		return worker_fails(s, w, t, "its update is not finite: cannot be encoded", err);
	c.base = w->v.base;
	c.samples = w->v.got;
	c.loss = w->v.loss;
	c.update = w->v.update + w->v.l.off; /* its fragment: all of it but for fragments */
	c.fragment = w->v.l.sent;
	cores_vtime(s, tout);
	st = cores_commit(s, &c, w->v.commit_bytes, &r, err);
	s->sum.commits++;
	if (st == PS_E_NON_FINITE || st == PS_E_NON_FINITE_RESULT) /* refused: it gives up, leaves */
		return worker_fails(s, w, t + 2 * s->o->latency, "its update is not finite: refused", err);
	if (st < 0) {
		gem_errprefix(err, "worker %d: commit refused: ", w->v.id);
		return GEM_EFAIL;
	}
	if (st == PS_PENDING) {
		w->pending = 1;
		return 0;
	}
	if (st == PS_APPLIED && summary_add(s, w->v.loss, r.st) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	reply_heads(s, ps_commit_reply_head(&r, st == PS_APPLIED), heads);
	rc = vworker_reply(&w->v, &s->wire[0], s->reply, r.elastic, 0, r.version,
			   heads[0] ? heads : NULL, err);
	cores_sent(s, w, heads);
	if (rc < 0)
		return GEM_EFAIL;
	if (r.window > 0) /* as gem-work takes it from the reply */
		w->v.l.window = r.window;
	if (worker_reply(s, w, reply_at(s, w, tout)) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return r.round_closed ? release_round(s, tout, err) : 0;
}

/* One event. Requests to the server start when it is free (FIFO: they are popped in order of
 * arrival); a commit occupies its links and CPUs (server_take). */
static int step_event(struct sim *s, const struct event *e, char *err)
{
	static const uint64_t unsent[SHARD_MAX];
	struct simw *w = &s->w[e->worker];
	double t, tout, wait, *waits;
	int rc;
	switch (e->kind) {
	case EV_DIE:
		if (e->t > s->vnow)
			s->vnow = e->t;
		if (!w->started || w->ended)
			return 0;
		w->ended = 1;
		s->sum.died++;
		return push(s, EV_LEAVE, e->t + s->o->latency, w->v.id, 0) < 0
			       ? gem_errf(err, GEM_ENOMEM, "out of memory")
			       : 0;
	case EV_JOIN:
		s->vnow = t = server_next(s, e->t);
		return serve_join(s, w, t, err);
	case EV_LEAVE:
		s->vnow = t = server_next(s, e->t);
		return serve_leave(s, w, e->done ? PS_LEFT_DONE : PS_LEFT_PAUSED, t, err);
	case EV_COMMIT:
		/* the links carry the commit as encoded; one the worker does not send, nothing */
		if ((rc = ensure_computed(s, w, err)) < 0)
			return rc;
		tout = server_take(s, e->t, w->v.diverged || !w->v.update ? unsent : w->v.commit_bytes,
				   &t, &wait);
		s->vnow = t;
		if (!(waits = grow(s->waits, &s->wait_cap, s->nwait + 1, sizeof *waits)))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		s->waits = waits;
		s->waits[s->nwait++] = wait;
		s->wait_sum += wait;
		return serve_commit(s, w, t, tout, err);
	}
	return 0;
}

/* ---- set-up and tear-down ---- */

static int threads_start(struct sim *s, char *err)
{
	int rc;
	s->tr = calloc((size_t)s->nthreads, sizeof *s->tr);
	s->wire = calloc((size_t)s->nthreads, sizeof *s->wire);
	s->args = calloc((size_t)s->nthreads, sizeof *s->args);
	if (!s->tr || !s->wire || !s->args)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int i = 0; i < s->nthreads; i++)
		if ((rc = trainer_open(&s->tr[i], s->run, err)) < 0 ||
		    (rc = vwire_open(&s->wire[i], s->n, err)) < 0)
			return rc;
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
	for (int i = 0; s->tr && i < s->nthreads; i++)
		trainer_close(&s->tr[i]);
	for (int i = 0; s->wire && i < s->nthreads; i++)
		vwire_close(&s->wire[i]);
	free(s->tr);
	free(s->wire);
	free(s->tid);
	free(s->args);
	s->tr = NULL;
	s->wire = NULL;
	s->tid = NULL;
	s->args = NULL;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The q-quantile of n sorted elements (the nearest rank at or below): its index. */
static size_t rank(size_t n, double q)
{
	return (size_t)(q * (double)(n - 1));
}

/* The summary's figures of the server model: staleness quantiles, waits, the busiest shard. */
static void summarise_queue(struct sim *s)
{
	struct sim_summary *m = &s->sum;
	if (s->ntau) {
		qsort(s->taus, s->ntau, sizeof *s->taus, cmp_u64);
		m->tau_p50 = s->taus[rank(s->ntau, 0.5)];
		m->tau_p99 = s->taus[rank(s->ntau, 0.99)];
	}
	if (s->nwait) {
		qsort(s->waits, s->nwait, sizeof *s->waits, cmp_double);
		m->wait_mean = s->wait_sum / (double)s->nwait;
		m->wait_p99 = s->waits[rank(s->nwait, 0.99)];
	}
	for (int k = 0; k < s->ncores; k++) {
		double l = s->busy_in[k] > s->busy_out[k] ? s->busy_in[k] : s->busy_out[k];
		if (s->busy_cpu[k] > m->busy)
			m->busy = s->busy_cpu[k];
		if (l > m->link_busy)
			m->link_busy = l;
	}
}

static void summarise(struct sim *s)
{
	struct sim_summary *m = &s->sum;
	struct run_progress p = ps_progress(s->ps);
	double l = 0;
	m->version = p.version;
	m->samples = p.samples;
	m->vtime = s->vnow;
	m->seconds = clock_mono() - s->t0;
	m->bytes_in = m->bytes_out = 0;
	for (int k = 0; k < s->ncores; k++) {
		struct ps_now now;
		ps_now(s->core[k], &now);
		m->bytes_in += now.bytes_in;
		m->bytes_out += now.bytes_out;
	}
	for (int i = 0; i < s->ring_n; i++)
		l += s->loss_ring[i];
	m->loss_tail = s->ring_n ? l / s->ring_n : NAN;
	m->tau_mean = m->updates ? s->tau_sum / (double)m->updates : 0;
	m->pi_median = m->scale_mean = m->zero_mean = NAN;
	if (s->npi) {
		qsort(s->pi_meds, s->npi, sizeof *s->pi_meds, cmp_float);
		m->pi_median = s->npi % 2 ? s->pi_meds[s->npi / 2]
					  : 0.5 * ((double)s->pi_meds[s->npi / 2 - 1] + s->pi_meds[s->npi / 2]);
		m->scale_mean = s->scale_sum / (double)s->scale_n;
		m->zero_mean = s->zero_sum / (double)s->scale_n;
	}
	summarise_queue(s);
}

/* The workers: 0..N−1 at time 0, then the joiners in time order; their timing; their first
 * events. */
static int workers_setup(struct sim *s, char *err)
{
	const struct sim_opts *o = s->o;
	double *joins = malloc(sizeof *joins * (size_t)(o->njoins ? o->njoins : 1));
	int rc = 0;
	if (!joins)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	memcpy(joins, o->joins, sizeof *joins * (size_t)o->njoins);
	qsort(joins, (size_t)o->njoins, sizeof *joins, cmp_double);
	for (int i = 0; i < s->nw && rc == 0; i++) {
		struct simw *w = &s->w[i];
		if ((rc = vworker_open(&w->v, i, s->run, model_layout(s->tr[0].m), err)) < 0)
			break;
		w->open = 1;
		if ((rc = vworker_codec(&w->v, s->run, o->codec, NULL, s->cut, s->ncores, err)) < 0)
			break;
		w->start_at = i < o->nworkers ? 0 : joins[i - o->nworkers];
		w->die_at = INFINITY;
		w->slow = i < o->stragglers ? o->straggler_factor : 1;
		rng_seed(&w->timing, s->run->spec.train.seed, RNG_SIM_TIMING + (uint64_t)i);
		if (o->speed_spread > 0) /* the worker's speed: its timing stream's first draw */
			w->slow *= exp(o->speed_spread * rng_normal(&w->timing));
	}
	free(joins);
	if (rc < 0)
		return rc;
	for (int i = 0; i < o->ndeaths; i++) {
		struct simw *w = &s->w[o->deaths[i].worker];
		if (o->deaths[i].at < w->die_at)
			w->die_at = o->deaths[i].at;
	}
	for (int i = 0; i < s->nw && rc == 0; i++) {
		struct simw *w = &s->w[i];
		if (w->start_at >= w->die_at)
			continue; /* dead before it starts: never starts */
		w->started = 1;
		s->sum.workers++;
		rc = push(s, EV_JOIN, w->start_at + o->latency, i, 0);
		if (rc == 0 && isfinite(w->die_at))
			rc = push(s, EV_DIE, w->die_at, i, 0);
	}
	return rc < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory") : 0;
}

/* Open the run through the core, its data, the workers and the threads. */
static int sim_setup(struct sim *s, const char *rundir, char *err)
{
	/* the simulation ends when its events do: a late joiner finds the server still there */
	struct ps_opts po = {.max_staleness = -1, .keep_running = 1};
	int rc;
	s->ncores = s->o->shards > 1 ? s->o->shards : 1;
	for (int k = 0; k < s->ncores; k++) {
		po.slice_i = k;
		po.slice_k = s->ncores > 1 ? s->ncores : 0;
		if ((rc = ps_open(rundir, &po, &s->core[k], err)) < 0)
			return rc;
		s->cut[k] = ps_run(s->core[k])->shard;
		s->cut[k].len = ps_nparams(s->core[k]);
		s->n += ps_nparams(s->core[k]);
	}
	s->ps = s->core[0];
	s->run = ps_run(s->ps);
	if (ps_version(s->ps) > 0)
		log_warn("%s is at version %llu already: the simulated workers train a full budget from "
			 "there (a simulation is not resumed)", rundir, (unsigned long long)ps_version(s->ps));
	if (rule_describe(s->run->spec.rule.name)->background)
		/* dma's worker commits in the background and carries on: not modelled yet */
		return gem_errf(err, GEM_EUSAGE, "rule %s is not simulated (use gem-serve and gem-work)",
				s->run->spec.rule.name);
	s->nw = s->o->nworkers + s->o->njoins;
	s->reply = malloc(sizeof(float) * s->n);
	s->w = calloc((size_t)s->nw, sizeof *s->w);
	if (!s->reply || !s->w)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if ((rc = run_data_load(s->run, NULL, "train", &s->ds, err)) < 0 ||
	    (rc = threads_start(s, err)) < 0 || (rc = workers_setup(s, err)) < 0)
		return rc;
	for (int k = 0; k < s->ncores; k++)
		ps_log_start(s->core[k], NULL);
	log_sim(s);
	return 0;
}

static void sim_free(struct sim *s)
{
	threads_stop(s);
	for (int i = 0; i < s->nw; i++)
		if (s->w[i].open)
			vworker_close(&s->w[i].v);
	free(s->w);
	for (int k = 0; k < s->ncores; k++)
		ps_close(s->core[k]);
	dataset_free(&s->ds);
	free(s->reply);
	free(s->q.a);
	free(s->ready.a);
	free(s->pi_meds);
	free(s->taus);
	free(s->waits);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	free(s);
}

/* Push the logs to their files once every `period` seconds of wall time, so that a long run can
 * be followed with tail -f as a served one can (gem-serve flushes its log as often). */
static void logs_flush(struct sim *s, double period)
{
	double now = clock_mono();
	if (now - s->last_flush < period)
		return;
	for (int k = 0; k < s->ncores; k++)
		fflush(ps_log(s->core[k]));
	s->last_flush = now;
}

int sim_run(const char *rundir, const struct sim_opts *o, struct sim_summary *sum, char *err)
{
	struct sim *s;
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
	s->t0 = s->last_progress = s->last_flush = clock_mono();
	if ((rc = sim_setup(s, rundir, err)) < 0)
		goto out;
	while (s->q.n > 0 && !(o->stop && *o->stop)) {
		struct event e = heap_pop(&s->q);
		if ((rc = step_event(s, &e, err)) < 0)
			goto out;
		if (o->progress && clock_mono() - s->last_progress >= 0.05)
			sim_progress(s);
		logs_flush(s, 1.0);
	}
	if (o->progress)
		sim_progress(s); /* where it ended: the caller decides whether to show it */
	threads_stop(s);
	cores_vtime(s, s->vnow);
	for (int k = 0; k < s->ncores; k++) {
		ps_log_stop(s->core[k], s->q.n ? "stopped by a signal"
					: s->ndone ? "every worker has finished"
						   : "every worker has left");
		if ((rc = ps_checkpoint(s->core[k], err)) < 0)
			goto out;
	}
	summarise(s);
	if (sum)
		*sum = s->sum;
out:
	sim_free(s);
	return rc;
}
