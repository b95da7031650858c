#include "rules/local.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int rule_local_init(struct rule_local *l, const struct rule_config *c, size_t n, float lr,
		    float momentum, float wd, int nesterov, char *err)
{
	int rc;
	memset(l, 0, sizeof *l);
	if (!(l->d = rule_describe(c->name)))
		return rule_err_unknown(err, c->name);
	l->n = n;
	l->lr = lr;
	/* rules without a "window" field keep their descriptor's λ = 1 in c */
	l->window = c->window > 1 ? c->window : 1;
	l->x0 = malloc(sizeof(float) * n);
	l->delta = malloc(sizeof(float) * n);
	if (l->d->sends == RULE_SENDS_CYCLE)
		l->xg = malloc(sizeof(float) * n);
	if (!l->x0 || !l->delta || (l->d->sends == RULE_SENDS_CYCLE && !l->xg)) {
		rule_local_free(l);
		return gem_errf(err, GEM_ENOMEM, "out of memory for the worker's %zu floats", n);
	}
	if (l->d->sends == RULE_SENDS_CYCLE &&
	    (rc = sgd_init(&l->opt, n, lr, momentum, wd, nesterov, err)) < 0) {
		rule_local_free(l);
		return rc;
	}
	return 0;
}

void rule_local_free(struct rule_local *l)
{
	free(l->x0);
	free(l->delta);
	free(l->xg);
	sgd_free(&l->opt);
	memset(l, 0, sizeof *l);
}

void rule_local_start(struct rule_local *l, const float *x)
{
	if (l->d->sends != RULE_SENDS_CYCLE)
		return;
	/* x_w = x_w^init = X_0, momentum from 0 */
	memcpy(l->x0, x, sizeof(float) * l->n);
	memcpy(l->xg, x, sizeof(float) * l->n);
	sgd_reset(&l->opt);
}

void rule_local_begin(struct rule_local *l, const float *x)
{
	if (l->d->sends == RULE_SENDS_STEP && l->window > 1)
		memcpy(l->x0, x, sizeof(float) * l->n);
}

void rule_local_step(struct rule_local *l, float *x, const float *g)
{
	const float lr = l->lr;
	size_t n = l->n;
	if (l->d->sends == RULE_SENDS_CYCLE) {
		sgd_step(&l->opt, x, g);
	} else if (l->d->sends == RULE_SENDS_STEP && l->window == 1) {
		/* Δθ = −η∇L at the θ received; x stays where the server put it */
		for (size_t i = 0; i < n; i++)
			l->delta[i] = -lr * g[i];
	} else {
		for (size_t i = 0; i < n; i++)
			x[i] -= lr * g[i];
	}
}

const float *rule_local_commit(struct rule_local *l, float *x)
{
	size_t n = l->n;
	switch (l->d->sends) {
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
	case RULE_SENDS_STEP:
		if (l->window > 1)
			for (size_t i = 0; i < n; i++)
				l->delta[i] = x[i] - l->x0[i];
		return l->delta;
	}
	return l->delta;
}

void rule_local_reply(struct rule_local *l, float *x, const float *v, int elastic)
{
	size_t n = l->n;
	if (l->d->sends == RULE_SENDS_CYCLE) {
		memcpy(l->xg, v, sizeof(float) * n);
	} else if (elastic) {
		/* x ← x − d: the worker keeps its own x, pulled towards the center */
		for (size_t i = 0; i < n; i++)
			x[i] -= v[i];
	} else if (v != x) {
		memcpy(x, v, sizeof(float) * n);
	}
}
