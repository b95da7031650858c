/* rule: the engine common to every rule: its workers, buffers of θ, versions, commits and
 * leaves (configs: rule_config.c; checkpoints: rule_state.c); the rules' arithmetic lives in
 * lib/rules/<name>.c behind struct rule_ops (rules/impl.h), each with its descriptor. */
#include "rules/rule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpulevel.h"
#include "base/err.h"
#include "rules/impl.h"

/* Worker ids are small integers the server hands out; this bounds the worker table. */
#define RULE_MAX_WORKER (1 << 20)

static int rule_forced = -1; /* tests: a level forced; -1 asks the CPU */

static int rule_simd_available(void)
{
#ifdef RULE_X86
	return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
	return 0;
#endif
}

int rule_simd(int level)
{
	return cpulevel_force(&rule_forced, rule_simd_available(), level);
}

int rule_avx2(void)
{
	return cpulevel_get(&rule_forced, rule_simd_available()) == 1;
}

/* Bytes of an element of the per-worker vectors. */
static size_t rule_vec_size(const struct rule *r)
{
	return r->ops->bf16_state ? sizeof(uint16_t) : sizeof(float);
}

/* A new buffer of θ, referenced by no one (NULL: no memory). */
static struct rule_snap *rule_snap_new(size_t n)
{
	struct rule_snap *s = calloc(1, sizeof *s);
	if (s && !(s->v = malloc(n * sizeof(float)))) {
		free(s);
		return NULL;
	}
	return s;
}

static void rule_snap_free(struct rule_snap *s)
{
	if (s)
		free(s->v);
	free(s);
}

/* One more buffer of θ, free (a worker's sent vector will reference one): 0 or GEM_ENOMEM. */
static int rule_snap_add(struct rule *r)
{
	struct rule_snap *s, **f = r->free;
	if (r->nsnap + 1 > r->free_cap) {
		int cap = r->free_cap ? 2 * r->free_cap : 4;
		if (!(f = realloc(r->free, (size_t)cap * sizeof *f)))
			return GEM_ENOMEM;
		r->free = f;
		r->free_cap = cap;
	}
	if (!(s = rule_snap_new(r->n)))
		return GEM_ENOMEM;
	r->free[r->nfree++] = s;
	r->nsnap++;
	return 0;
}

/* The free buffer a commit writes θ′ into, taken (referenced by no one yet). */
struct rule_snap *rule_snap_pop(struct rule *r)
{
	return r->free[--r->nfree];
}

static void rule_snap_unref(struct rule *r, struct rule_snap *s)
{
	if (s && --s->refs == 0)
		r->free[r->nfree++] = s;
}

/* Worker w's sent vector is now s. */
void rule_sent_set(struct rule *r, struct rule_worker *w, struct rule_snap *s)
{
	s->refs++;
	rule_snap_unref(r, w->sent);
	w->sent = s;
	w->vec[r->ops->sent_vec] = s->v;
}

void rule_take_theta(struct rule *r, const struct rule_span *sp, struct rule_worker *w)
{
	struct rule_snap *old = r->theta, *next;
	/* a fragment moves its slice of θ in place: the rules with fragments keep no θ sent */
	if (sp->len < r->n) {
		memcpy(old->v + sp->off, rule_theta_next(r) + sp->off, sp->len * sizeof(float));
		return;
	}
	next = rule_snap_pop(r);
	next->refs = 1;
	r->theta = next;
	if (w && r->ops->sent_vec >= 0)
		rule_sent_set(r, w, r->ops->sent_before && r->ops->sent_before(r) ? old : next);
	rule_snap_unref(r, old);
}

const float *rule_theta(const struct rule *r)
{
	return r->theta->v;
}

int rule_create(const struct rule_config *c, const struct layout *l, const float *theta,
		struct rule **out, char *err)
{
	struct rule *r;
	size_t at = 0;
	int rc;

	*out = NULL;
	if ((rc = rule_config_check(c, err)) < 0)
		return rc;
	if (l->ntensors < 1 || l->ntensors > LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "layout: %d tensors", l->ntensors);
	/* the rules walk θ tensor by tensor: the tensors must tile it */
	for (int i = 0; i < l->ntensors; i++) {
		if (l->t[i].offset != at || l->t[i].size == 0)
			return gem_errf(err, GEM_EUSAGE, "layout: tensor %s at %zu (size %zu), expected at %zu",
					l->t[i].name, l->t[i].offset, l->t[i].size, at);
		at += l->t[i].size;
	}
	if (at != l->total)
		return gem_errf(err, GEM_EUSAGE, "layout: tensors hold %zu floats, total says %zu", at,
				l->total);
	if ((size_t)c->fragments > l->total)
		return gem_errf(err, GEM_EUSAGE, "fragments: %d is more than the %zu floats of θ",
				c->fragments, l->total);
	if (!(r = calloc(1, sizeof *r)))
		return gem_errf(err, GEM_ENOMEM, "rule: out of memory");
	r->c = *c;
	r->ops = rule_all[rule_index(c->name)];
	if (c->state_precision == RULE_STATE_BF16 && r->ops->bf16)
		r->ops = r->ops->bf16;
	r->l = *l;
	r->n = l->total;
	r->target = c->nworkers;
	if (rule_snap_add(r) < 0 || rule_snap_add(r) < 0)
		goto nomem;
	r->theta = rule_snap_pop(r);
	r->theta->refs = 1;
	memcpy(r->theta->v, theta, r->n * sizeof(float));
	for (int i = 0; i < r->ops->nglobal; i++)
		if (!(r->global[i] = calloc(r->n, sizeof(float))) ||
		    !(r->gspare[i] = malloc(r->n * sizeof(float))))
			goto nomem;
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec && !(r->spare[i] = malloc(r->n * rule_vec_size(r))))
			goto nomem;
	if (r->ops->desc.scratch &&
	    !(r->scratch = malloc((size_t)r->ops->desc.scratch * r->n * sizeof(float))))
		goto nomem;
	*out = r;
	return 0;
nomem:
	rule_destroy(r);
	return gem_errf(err, GEM_ENOMEM, "rule: out of memory for %zu floats", l->total);
}

/* Free what worker w holds: its vectors, and the buffer of θ the pool kept for its sent one. */
void rule_worker_free(struct rule *r, struct rule_worker *w)
{
	for (int i = 0; i < 2; i++) {
		if (i != r->ops->sent_vec)
			free(w->vec[i]);
		w->vec[i] = NULL;
	}
	if (w->active && r->ops->sent_vec >= 0) {
		rule_snap_unref(r, w->sent);
		w->sent = NULL;
		rule_snap_free(rule_snap_pop(r));
		r->nsnap--;
	}
	w->active = w->committed = 0;
}

void rule_destroy(struct rule *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->cap; i++)
		rule_worker_free(r, &r->w[i]);
	free(r->w);
	rule_snap_free(r->theta);
	for (int i = 0; i < r->nfree; i++)
		rule_snap_free(r->free[i]);
	free(r->free);
	for (int i = 0; i < 2; i++) {
		free(r->global[i]);
		free(r->gspare[i]);
		free(r->spare[i]);
	}
	free(r->scratch);
	free(r);
}

/* OR the bits of x − x of blocks of 32 floats into four accumulators: no chain of float
 * additions bounds the loop. */
static inline __attribute__((always_inline)) int rule_finite_in(const float *v, size_t n)
{
	rule_i8 acc[4] = {{0}};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 * RULE_BLOCK <= n; i += 4 * RULE_BLOCK)
		for (int q = 0; q < 4; q++) {
			rule_v8 x;
			memcpy(&x, v + i + q * RULE_BLOCK, sizeof x);
			RULE_FINITE(acc[q], x);
		}
	for (; i < n; i++)
		tail += v[i] - v[i];
	acc[0] |= acc[1] | acc[2] | acc[3];
	return rule_finite(&acc[0], 8, tail);
}

RULE_NOINLINE static int rule_finite_c(const float *v, size_t n)
{
	return rule_finite_in(v, n);
}

#ifdef RULE_X86
RULE_NOINLINE RULE_AVX2 static int rule_finite_avx2(const float *v, size_t n)
{
	return rule_finite_in(v, n);
}
#endif

int rule_vec_finite(const float *v, size_t n)
{
#ifdef RULE_X86
	if (rule_avx2())
		return rule_finite_avx2(v, n);
#endif
	return rule_finite_c(v, n);
}

RULE_NOINLINE int rule_add_div(const float *restrict theta, const float *restrict d, float k,
				float *restrict out, float *restrict q, size_t n)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), x = rule_load4(d + i);
		/* x/1 is x: the division only where it can change something */
		t = k == 1 ? t + x : t + x / k;
		rule_store4(out + i, t);
		if (q)
			rule_store4(q + i, t);
		RULE_FINITE(acc, t);
	}
	for (; i < n; i++) {
		float t = theta[i] + d[i] / k;
		out[i] = t;
		if (q)
			q[i] = t;
		tail += t - t;
	}
	return rule_finite(&acc, 4, tail);
}

size_t rule_nparams(const struct rule *r)
{
	return r->n;
}

/* Float vectors a worker holds of its own, besides the buffer of θ its sent vector shares. */
static size_t rule_own_vecs(const struct rule *r)
{
	return (size_t)(r->ops->nvec - (r->ops->sent_vec >= 0));
}

size_t rule_state_bytes(const struct rule *r)
{
	/* each worker's own vectors and the spares of one; two of each global; the buffers of θ */
	size_t own = rule_own_vecs(r) * ((size_t)r->nactive + 1) * rule_vec_size(r);
	size_t f32 = 2 * (size_t)r->ops->nglobal + (size_t)r->nsnap + (size_t)r->ops->desc.scratch;
	return (own + f32 * sizeof(float)) * r->n;
}

size_t rule_join_bytes(const struct rule *r)
{
	return (size_t)r->ops->nvec * r->n * rule_vec_size(r);
}

const struct rule_desc *rule_desc_of(const struct rule *r)
{
	return &r->ops->desc;
}

const struct rule_config *rule_config_of(const struct rule *r)
{
	return &r->c;
}

static struct rule_worker *rule_worker(struct rule *r, int worker)
{
	if (worker < 0 || worker >= r->cap || !r->w[worker].active)
		return NULL;
	return &r->w[worker];
}

/* Make room for worker id and allocate its vectors (zero). */
int rule_worker_add(struct rule *r, int worker, char *err)
{
	struct rule_worker *w;
	if (worker < 0 || worker >= RULE_MAX_WORKER)
		return gem_errf(err, GEM_EUSAGE, "worker id %d out of range [0, %d)", worker,
				RULE_MAX_WORKER);
	if (worker >= r->cap) {
		int cap = r->cap ? r->cap : 8;
		while (cap <= worker)
			cap *= 2;
		if (!(w = realloc(r->w, (size_t)cap * sizeof *w)))
			return gem_errf(err, GEM_ENOMEM, "rule: out of memory for %d workers", cap);
		memset(w + r->cap, 0, (size_t)(cap - r->cap) * sizeof *w);
		r->w = w;
		r->cap = cap;
	}
	w = &r->w[worker];
	if (w->active)
		return gem_errf(err, GEM_EUSAGE, "worker %d has already joined", worker);
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec && !(w->vec[i] = calloc(r->n, rule_vec_size(r)))) {
			rule_worker_free(r, w);
			return gem_errf(err, GEM_ENOMEM, "rule: out of memory for worker %d", worker);
		}
	if (r->ops->sent_vec >= 0 && rule_snap_add(r) < 0) {
		rule_worker_free(r, w);
		return gem_errf(err, GEM_ENOMEM, "rule: out of memory for worker %d", worker);
	}
	w->active = 1;
	w->committed = 0;
	r->nactive++;
	return 0;
}

int rule_join(struct rule *r, int worker, char *err)
{
	int rc;
	if (worker >= 0 && worker < r->cap && r->w[worker].active)
		return gem_errf(err, GEM_EUSAGE, "worker %d has already joined", worker);
	if (r->ops->desc.rounds && (rc = rule_round_join(r, err)) < 0)
		return rc;
	if ((rc = rule_worker_add(r, worker, err)) < 0)
		return rc;
	rule_sent(r, worker);
	return 0;
}

void rule_sent(struct rule *r, int worker)
{
	struct rule_worker *w = rule_worker(r, worker);
	if (w && r->ops->sent)
		r->ops->sent(r, w);
	else if (w && r->ops->sent_vec >= 0)
		rule_sent_set(r, w, r->theta);
}

/* The statistics of a call that applied nothing yet. */
static void rule_stats_start(struct rule_stats *st, uint64_t tau, uint64_t version)
{
	if (!st)
		return;
	st->staleness = tau;
	st->version = version;
	st->ntensors = 0;
	memset(&st->all, 0, sizeof st->all);
}

/* A commit of a rule without rounds: its pass, then θ′ and w's new vectors taken. */
static int rule_apply(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		      const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	if (!r->ops->pass(r, sp, w, in, tau, reply, st))
		return RULE_E_NON_FINITE;
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec)
			rule_swap(&w->vec[i], &r->spare[i]);
	if (r->ops->take)
		r->ops->take(r, sp);
	rule_take_theta(r, sp, w);
	return RULE_APPLIED;
}

int rule_commit(struct rule *r, int worker, const float *in, uint64_t base_version,
		uint64_t *version, float *reply, struct rule_stats *st, char *err)
{
	return rule_commit_fragment(r, worker, 0, in, base_version, version, reply, st, err);
}

/* The slice of θ of fragment p of the commit or the round at version, into sp. */
static int rule_fragment_set(const struct rule *r, int p, uint64_t version, struct rule_span *sp,
			     char *err)
{
	int np = r->c.fragments;
	if (p < 0 || p >= np)
		return gem_errf(err, GEM_EUSAGE, "%s: fragment %d is not one of the %d of θ",
				r->ops->desc.name, p, np);
	/* the rounds go through the fragments in turn, one a version */
	if (r->ops->desc.rounds && (uint64_t)p != version % (uint64_t)np)
		return gem_errf(err, GEM_EUSAGE, "%s: the round at version %llu synchronises "
				"fragment %d, not %d", r->ops->desc.name, (unsigned long long)version,
				(int)(version % (uint64_t)np), p);
	layout_slice(r->n, p, np, &sp->off, &sp->len);
	return 0;
}

int rule_commit_fragment(struct rule *r, int worker, int p, const float *in, uint64_t base_version,
			 uint64_t *version, float *reply, struct rule_stats *st, char *err)
{
	struct rule_worker *w = rule_worker(r, worker);
	struct rule_span sp;
	uint64_t tau;
	int rc;

	if ((rc = rule_fragment_set(r, p, *version, &sp, err)) < 0)
		return rc;
	if (!w)
		return gem_errf(err, GEM_EUSAGE, "worker %d has not joined", worker);
	if (base_version > *version)
		return gem_errf(err, GEM_EUSAGE, "base version %llu is ahead of version %llu",
				(unsigned long long)base_version, (unsigned long long)*version);
	if (!reply && r->ops->desc.reply_elastic)
		return gem_errf(err, GEM_EUSAGE, "%s: no reply buffer for the elastic difference",
				r->ops->desc.name);
	tau = *version - base_version;
	rule_stats_start(st, tau, *version);
	rc = r->ops->desc.rounds ? rule_round_commit(r, &sp, w, in, tau, reply, err)
				 : rule_apply(r, &sp, w, in, tau, reply, st);
	if (rc == RULE_E_NON_FINITE) {
		rule_stats_start(st, tau, *version);
		return gem_errf(err, RULE_E_NON_FINITE,
				"%s: worker %d's update would make the parameters or the rule's state "
				"non-finite (an overflow): refused, nothing changed",
				r->ops->desc.name, worker);
	}
	if (rc == RULE_APPLIED)
		++*version;
	if (st)
		st->version = *version;
	return rc;
}

int rule_leave(struct rule *r, int worker, uint64_t *version, struct rule_stats *st, char *err)
{
	struct rule_worker *w = rule_worker(r, worker);
	struct rule_span sp = {0, r->n};
	int rc = 0;

	if (!w)
		return gem_errf(err, GEM_EUSAGE, "worker %d has not joined", worker);
	r->nactive--;
	rule_stats_start(st, 0, *version);
	/* a leave closes the open round: the fragment of its version */
	if (r->ops->desc.rounds)
		layout_slice(r->n, (int)(*version % (uint64_t)r->c.fragments), r->c.fragments,
			     &sp.off, &sp.len);
	if (r->ops->desc.rounds && (rc = rule_round_leave(r, &sp, w)) == 1) {
		++*version;
		if (st)
			st->version = *version;
	}
	rule_worker_free(r, w);
	return rc;
}

