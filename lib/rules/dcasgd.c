/* rule_dcasgd: delay-compensated asynchronous SGD (Zheng et al. 2017, DC-ASGD-c: constant λ).
 * A stale gradient is corrected by a cheap diagonal Hessian approximation λ·g⊙g times how far θ
 * moved since the worker's copy w_bak was sent. */
#include <stddef.h>

#include "rules/impl.h"

/* With g = −Δ/η:  θ ← θ − η(g + λ·g⊙g⊙(θ − w_bak)) = θ + Δ − (λ/η)·Δ⊙Δ⊙(θ − w_bak) ;
 * then w_bak ← θ, the θ the worker gets back. */
RULE_NOINLINE static void rule_dcasgd_apply(float *restrict theta, float *restrict bak,
					    const float *restrict d, size_t n, float c)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++) {
			float t = theta[i + j];
			float dj = d[i + j];
			t = t + dj - c * dj * dj * (t - bak[i + j]);
			theta[i + j] = t;
			bak[i + j] = t;
		}
	for (; i < n; i++) {
		float t = theta[i];
		t = t + d[i] - c * d[i] * d[i] * (t - bak[i]);
		theta[i] = t;
		bak[i] = t;
	}
}

RULE_NOINLINE static int rule_dcasgd_finite(const float *restrict theta, const float *restrict bak,
					    const float *restrict d, size_t n, float c)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), dj = rule_load4(d + i);
		rule_v4 u = t + dj - c * dj * dj * (t - rule_load4(bak + i));
		acc |= (rule_i4)(u - u);
	}
	for (; i < n; i++) {
		float t = theta[i], u = t + d[i] - c * d[i] * d[i] * (t - bak[i]);
		tail += u - u;
	}
	return rule_finite4(acc, tail);
}

static int rule_dcasgd_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			     const float *theta)
{
	(void)tau;
	return rule_dcasgd_finite(theta, w->vec[0], in, r->n, r->c.lambda_dc / r->c.lr);
}

static int rule_dcasgd_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			      float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)tau, (void)reply, (void)st, (void)err;
	rule_dcasgd_apply(theta, w->vec[0], in, r->n, r->c.lambda_dc / r->c.lr);
	return RULE_APPLIED;
}

const struct rule_ops rule_dcasgd_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"dcasgd", "lambda_dc", 1, RULE_SENDS_STEP, 0, 0, 0, 0},
	.nvec = 1,
	.vec = {"bak"},
	.sent_vec = 0,
	.check = rule_dcasgd_check,
	.commit = rule_dcasgd_commit,
};
