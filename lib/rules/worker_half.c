#include "rules/worker_half.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* 1 if the rule's local steps are the run's optimiser's, momentum and weight decay included
 * (dma's cycles, the inner steps of diloco and of gem with a window), 0 if the server keeps
 * the momentum */
static int rule_half_optimises(enum rule_sends sends)
{
	return sends == RULE_SENDS_CYCLE || sends == RULE_SENDS_OUTER;
}

int rule_half_init(struct rule_half *l, const struct rule_config *c, const struct layout *lo,
		   const struct optim_config *oc, char *err)
{
	struct optim_config mine = *oc;
	size_t n = lo->total;
	int rc;
	memset(l, 0, sizeof *l);
	if (!(l->d = rule_describe(c->name)))
		return rule_err_unknown(err, c->name);
	l->sends = rule_sends_of(c);
	l->n = n;
	l->lr = oc->lr;
	if (!rule_half_optimises(l->sends) && mine.kind == OPTIM_SGD) {
		mine.momentum = 0;
		mine.nesterov = 0;
		mine.weight_decay = 0;
	}
	l->plain = mine.kind == OPTIM_SGD && mine.momentum == 0 && mine.weight_decay == 0 && !mine.warmup &&
		   mine.schedule == LR_CONSTANT && mine.clip == 0 && !rule_half_optimises(l->sends);
	/* rules without a "window" field keep their descriptor's λ = 1 in c */
	l->window = c->window > 1 ? c->window : 1;
	/* P fragments in turn, one every H/P steps: each fragment is synchronised every H */
	l->nfrag = c->fragments > 1 ? c->fragments : 1;
	l->mix = c->mix;
	l->overlap = c->overlap;
	l->streams = l->sends == RULE_SENDS_OUTER && (l->nfrag > 1 || l->mix > 0 || l->overlap > 0);
	l->window /= l->nfrag;
	l->len = n;
	l->x0 = malloc(sizeof(float) * n);
	l->delta = malloc(sizeof(float) * n);
	if (l->sends == RULE_SENDS_CYCLE)
		l->xg = malloc(sizeof(float) * n);
	/* the longest fragment: layout_slice's differ by one float at most */
	if (l->streams && l->overlap > 0)
		l->held = malloc(sizeof(float) * (n / (size_t)l->nfrag + 1));
	if (!l->x0 || !l->delta || (l->sends == RULE_SENDS_CYCLE && !l->xg) ||
	    (l->streams && l->overlap > 0 && !l->held)) {
		rule_half_free(l);
		return gem_errf(err, GEM_ENOMEM, "out of memory for the worker's %zu floats", n);
	}
	if (!l->plain && (rc = optim_init(&l->opt, &mine, lo, err)) < 0) {
		rule_half_free(l);
		return rc;
	}
	return 0;
}

void rule_half_free(struct rule_half *l)
{
	free(l->x0);
	free(l->delta);
	free(l->xg);
	free(l->held);
	optim_free(&l->opt);
	memset(l, 0, sizeof *l);
}

void rule_half_start(struct rule_half *l, const float *x, uint64_t step, uint64_t total)
{
	if (!l->plain)
		optim_restart(&l->opt, step, total);
	if (l->streams) {
		/* every fragment's θ as received: x */
		memcpy(l->x0, x, sizeof(float) * l->n);
		l->frag = 0;
		l->holding = 0;
	}
	if (l->sends != RULE_SENDS_CYCLE)
		return;
	/* x_w = x_w^init = X_0, momentum from 0 */
	memcpy(l->x0, x, sizeof(float) * l->n);
	memcpy(l->xg, x, sizeof(float) * l->n);
}

void rule_half_schedule(struct rule_half *l, uint64_t version)
{
	if (l->d->rounds)
		l->frag = (int)(version % (uint64_t)l->nfrag);
}

void rule_half_begin(struct rule_half *l, const float *x)
{
	/* streaming keeps x0 itself: x moved on from θ (α > 0), and x0 is each fragment's θ */
	if ((l->sends == RULE_SENDS_STEP && l->window > 1) ||
	    (l->sends == RULE_SENDS_OUTER && !l->streams))
		memcpy(l->x0, x, sizeof(float) * l->n);
	l->k = 0;
}

/* Streaming DiLoCo's mix of fragment θ[p] = v into x[p]: x0[p] ← v, x[p] ← α·x[p] + (1 − α)·v
 * (α = 0: x[p] ← v, its bits) over the fragment's l->len floats. */
static void rule_half_mix(const struct rule_half *l, float *x, float *x0, const float *v)
{
	const float a = l->mix, b = 1 - l->mix;
	memcpy(x0, v, sizeof(float) * l->len);
	if (a == 0) {
		memcpy(x, v, sizeof(float) * l->len);
		return;
	}
	for (size_t i = 0; i < l->len; i++)
		x[i] = a * x[i] + b * v[i];
}

/* Mix the reply held into x (an overlap's, after its T local steps). */
static void rule_half_unhold(struct rule_half *l, float *x)
{
	rule_half_mix(l, x + l->off, l->x0 + l->off, l->held);
	l->holding = 0;
}

void rule_half_step(struct rule_half *l, float *x, float *g)
{
	const float lr = l->lr;
	size_t n = l->n;
	if (!l->plain && l->sends == RULE_SENDS_STEP && l->window == 1) {
		/* Δθ = the optimiser's step from the θ received; x stays where the server put it */
		memcpy(l->x0, x, sizeof(float) * n);
		optim_step(&l->opt, l->x0, g);
		for (size_t i = 0; i < n; i++)
			l->delta[i] = l->x0[i] - x[i];
	} else if (!l->plain) {
		optim_step(&l->opt, x, g);
	} else if (l->sends == RULE_SENDS_STEP && l->window == 1) {
		/* Δθ = −η∇L at the θ received; x stays where the server put it */
		for (size_t i = 0; i < n; i++)
			l->delta[i] = -lr * g[i];
	} else {
		for (size_t i = 0; i < n; i++)
			x[i] -= lr * g[i];
	}
	if (++l->k == l->overlap && l->holding)
		rule_half_unhold(l, x);
}

int rule_half_due(const struct rule_half *l)
{
	return l->streams && l->overlap > 0 && l->k == l->overlap;
}

/* The commit of the fragment due: u[p] = x[p] − x0[p], its slice of delta; the next is due
 * after it. */
static const float *rule_half_fragment(struct rule_half *l, const float *x)
{
	float *u;
	l->sent = l->frag;
	layout_slice(l->n, l->sent, l->nfrag, &l->off, &l->len);
	u = l->delta + l->off;
	for (size_t i = 0; i < l->len; i++)
		u[i] = x[l->off + i] - l->x0[l->off + i];
	l->frag = (l->frag + 1) % l->nfrag;
	return u;
}

const float *rule_half_commit(struct rule_half *l, float *x)
{
	size_t n = l->n;
	if (l->holding) /* a window shorter than the overlap */
		rule_half_unhold(l, x);
	/* the overlap's T steps count from this commit: its reply is held until then */
	l->k = 0;
	switch (l->sends) {
	case RULE_SENDS_X:
		return x;
	case RULE_SENDS_CYCLE:
		/* Δ_w = x_w − x_w^init ; x_w = x_w^init = X_j + Δ_w */
		for (size_t i = 0; i < n; i++) {
			float d = x[i] - l->x0[i];
			l->delta[i] = d;
			x[i] = l->x0[i] = l->xg[i] + d;
		}
		return l->delta;
	case RULE_SENDS_OUTER:
		if (l->streams)
			return rule_half_fragment(l, x);
		/* fall through */
	case RULE_SENDS_STEP:
		if (l->window > 1 || l->sends == RULE_SENDS_OUTER)
			for (size_t i = 0; i < n; i++)
				l->delta[i] = x[i] - l->x0[i];
		return l->delta;
	}
	return l->delta;
}

void rule_half_reply(struct rule_half *l, float *x, const float *v, int elastic)
{
	size_t n = l->n;
	if (l->streams && l->overlap > 0 && l->k < l->overlap) {
		memcpy(l->held, v, sizeof(float) * l->len);
		l->holding = 1;
	} else if (l->streams) {
		rule_half_mix(l, x + l->off, l->x0 + l->off, v);
	} else if (l->sends == RULE_SENDS_CYCLE) {
		memcpy(l->xg, v, sizeof(float) * n);
	} else if (elastic) {
		/* x ← x − d: the worker keeps its own x, pulled towards the center */
		for (size_t i = 0; i < n; i++)
			x[i] -= v[i];
	} else if (v != x) {
		memcpy(x, v, sizeof(float) * n);
	}
}
