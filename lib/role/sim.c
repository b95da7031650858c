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
#include "run/slice.h"
#include "role/sim_impl.h"

/* ---- the simulation ---- */

static int push(struct sim *s, int kind, double t, int worker, int done)
{
	struct event e = {.t = t, .seq = s->seq++, .kind = kind, .worker = worker, .done = done};
	return sim_heap_push(&s->q, e);
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
		struct event e = sim_heap_pop(&s->ready);
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
		rc = sim_heap_push(&s->ready, (struct event){.t = w->send_at, .seq = w->ready_seq,
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

/* ---- the cores: one, or one per slice of θ, asked the same things in the same order ---- */

static void cores_vtime(struct sim *s, double t)
{
	for (int k = 0; k < s->ncores; k++)
		ps_set_vtime(s->core[k], t);
}

/* The header of each slice's reply whose header is base (taken over): with the slice of θ it
 * carries when θ is cut, as gem-serve adds it. heads[k] are new references, all NULL when out of
 * memory (the reply is then not measured). */
static void reply_heads(struct sim *s, json_t *base, json_t **heads)
{
	/* base is slice 0's, the last: the others are copies of it */
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

/* Worker w has taken a reply measured under heads (released): each server's slice of it goes
 * out of that slice's server. */
static void cores_sent(struct sim *s, const struct simw *w, json_t **heads)
{
	for (int k = 0; k < s->ncores; k++) {
		ps_sent(s->core[k], w->v.reply_bytes[k]);
		json_decref(heads[k]);
	}
}

/* The reply of the commits held for the round that just closed, into s->reply; slice 0's r. */
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

/* Commit c to every core, each its slice of the update; slice 0's answer in *r. The slices see
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
			return gem_errf(err, GEM_EFAIL, "slice %d answered %s, slice 0 %s", k,
					ps_status_code(stk), ps_status_code(st));
	}
	return st;
}

/* ---- the server: the core, asked in order of arrival ---- */

/* A round closed at t: every worker held in it gets its reply. */
static int release_round(struct sim *s, double t, char *err)
{
	struct ps_reply r = {0};
	cores_reply_held(s, &r);
	for (int i = 0; i < s->nw; i++) {
		struct simw *w = &s->w[i];
		json_t *heads[SLICE_MAX];
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
		if (worker_reply(s, w, sim_reply_at(s, w, t)) < 0)
			return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	return 0;
}

static int serve_join(struct sim *s, struct simw *w, double t, char *err)
{
	struct ps_joined j;
	json_t *heads[SLICE_MAX];
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
	return worker_reply(s, w, sim_reply_at(s, w, t)) < 0 ? gem_errf(err, GEM_ENOMEM, "out of memory")
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
	if (r.round_closed && sim_summary_add(s, NAN, r.st) < 0)
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
	json_t *heads[SLICE_MAX];
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
	if (st == PS_APPLIED && sim_summary_add(s, w->v.loss, r.st) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	reply_heads(s, ps_commit_reply_head(&r, st == PS_APPLIED), heads);
	rc = vworker_reply(&w->v, &s->wire[0], s->reply, r.elastic, 0, r.version,
			   heads[0] ? heads : NULL, err);
	cores_sent(s, w, heads);
	if (rc < 0)
		return GEM_EFAIL;
	if (r.window > 0) /* as gem-work takes it from the reply */
		w->v.l.window = r.window;
	if (worker_reply(s, w, sim_reply_at(s, w, tout)) < 0)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return r.round_closed ? release_round(s, tout, err) : 0;
}

/* One event. Requests to the server start when it is free (FIFO: they are popped in order of
 * arrival); a commit occupies its links and CPUs (sim_server_take). */
static int step_event(struct sim *s, const struct event *e, char *err)
{
	static const uint64_t unsent[SLICE_MAX];
	struct simw *w = &s->w[e->worker];
	double t, tout, wait;
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
		s->vnow = t = sim_server_next(s, e->t);
		return serve_join(s, w, t, err);
	case EV_LEAVE:
		s->vnow = t = sim_server_next(s, e->t);
		return serve_leave(s, w, e->done ? PS_LEFT_DONE : PS_LEFT_PAUSED, t, err);
	case EV_COMMIT:
		/* the links carry the commit as encoded; one the worker does not send, nothing */
		if ((rc = ensure_computed(s, w, err)) < 0)
			return rc;
		tout = sim_server_take(s, e->t, w->v.diverged || !w->v.update ? unsent : w->v.commit_bytes,
				   &t, &wait);
		s->vnow = t;
		if (grow_array(&s->waits, &s->wait_cap, s->nwait + 1, sizeof *s->waits, 1024) < 0)
			return gem_errf(err, GEM_ENOMEM, "out of memory");
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
	s->ncores = s->o->slices > 1 ? s->o->slices : 1;
	for (int k = 0; k < s->ncores; k++) {
		po.slice_i = k;
		po.slice_k = s->ncores > 1 ? s->ncores : 0;
		if ((rc = ps_open(rundir, &po, &s->core[k], err)) < 0)
			return rc;
		s->cut[k] = ps_run(s->core[k])->slice;
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
	sim_log_options(s);
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
		struct event e = sim_heap_pop(&s->q);
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
	sim_summarise(s);
	if (sum)
		*sum = s->sum;
out:
	sim_free(s);
	return rc;
}
