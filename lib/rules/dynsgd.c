/* rule_dynsgd: adaptive staleness (DynSGD, Jiang et al. 2017): a commit computed τ central
 * updates ago counts 1/(τ+1). */
#include <stddef.h>

#include "rules/impl.h"

/* θ ← θ + Δ/(τ+1) */
RULE_NOINLINE static void rule_dynsgd_add(float *restrict theta, const float *restrict d, size_t n,
					  float k)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++)
			theta[i + j] += d[i + j] / k;
	for (; i < n; i++)
		theta[i] += d[i] / k;
}

RULE_NOINLINE static int rule_dynsgd_finite(const float *restrict theta, const float *restrict d,
					    size_t n, float k)
{
	float acc[RULE_BLOCK] = {0};
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++)
			RULE_FINITE_ADD(acc[j], theta[i + j] + d[i + j] / k);
	for (; i < n; i++)
		RULE_FINITE_ADD(acc[0], theta[i] + d[i] / k);
	return rule_finite(acc);
}

static int rule_dynsgd_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			     const float *theta)
{
	(void)w;
	return rule_dynsgd_finite(theta, in, r->n, (float)tau + 1.0f);
}

static int rule_dynsgd_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			      float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)w, (void)reply, (void)st, (void)err;
	rule_dynsgd_add(theta, in, r->n, (float)tau + 1.0f);
	return RULE_APPLIED;
}

const struct rule_ops rule_dynsgd_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"dynsgd", "", 1, RULE_SENDS_STEP, 0, 0, 0, 0},
	.sent_vec = -1,
	.check = rule_dynsgd_check,
	.commit = rule_dynsgd_commit,
};
