/* rule_easgd: asynchronous elastic averaging SGD (Zhang et al. 2015). Every λ local steps a
 * worker sends its local x; center and worker move toward each other by the same d. */
#include <stddef.h>

#include "base/err.h"
#include "rules/impl.h"

/* d = α(x − θ) ; θ ← θ + d ; reply d (the worker sets x ← x − d) */
RULE_NOINLINE static void rule_easgd_move(float *restrict theta, const float *restrict x,
					  float *restrict d, size_t n, float alpha)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++) {
			d[i + j] = alpha * (x[i + j] - theta[i + j]);
			theta[i + j] += d[i + j];
		}
	for (; i < n; i++) {
		d[i] = alpha * (x[i] - theta[i]);
		theta[i] += d[i];
	}
}

/* 1 if d and θ + d are finite */
RULE_NOINLINE static int rule_easgd_finite(const float *restrict theta, const float *restrict x,
					   size_t n, float alpha)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), d = alpha * (rule_load4(x + i) - t), u = t + d;
		acc |= (rule_i4)((d - d) + (u - u));
	}
	for (; i < n; i++) {
		float d = alpha * (x[i] - theta[i]), u = theta[i] + d;
		tail += (d - d) + (u - u);
	}
	return rule_finite4(acc, tail);
}

static float rule_easgd_alpha(const struct rule *r)
{
	/* α = 0.9/n: n is the configured nworkers, else the workers joined now */
	int n = r->c.nworkers > 0 ? r->c.nworkers : r->nactive;
	return r->c.alpha > 0 ? r->c.alpha : 0.9f / (float)n;
}

static int rule_easgd_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			    const float *theta)
{
	(void)w, (void)tau;
	return rule_easgd_finite(theta, in, r->n, rule_easgd_alpha(r));
}

static int rule_easgd_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			     float *theta, float *reply, struct rule_stats *st, char *err)
{
	float alpha = rule_easgd_alpha(r);
	(void)w, (void)tau, (void)st;
	if (!reply)
		return gem_errf(err, GEM_EUSAGE, "easgd: no reply buffer for the elastic difference");
	rule_easgd_move(theta, in, reply, r->n, alpha);
	return RULE_APPLIED;
}

const struct rule_ops rule_easgd_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"easgd", "window alpha", 10, RULE_SENDS_X, 1, 0, 0, 0},
	.sent_vec = -1,
	.check = rule_easgd_check,
	.commit = rule_easgd_commit,
};
