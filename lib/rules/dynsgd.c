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
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 x = rule_load4(theta + i) + rule_load4(d + i) / k;
		acc |= (rule_i4)(x - x);
	}
	for (; i < n; i++) {
		float x = theta[i] + d[i] / k;
		tail += x - x;
	}
	return rule_finite4(acc, tail);
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
