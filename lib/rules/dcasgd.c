/* rule_dcasgd: delay-compensated asynchronous SGD (Zheng et al. 2017, DC-ASGD-c: constant λ).
 * A stale gradient is corrected by a cheap diagonal Hessian approximation λ·g⊙g times how far θ
 * moved since the worker's copy w_bak was sent. */
#include <stddef.h>

#include "rules/impl.h"

/* With g = −Δ/η:  θ′ = θ − η(g + λ·g⊙g⊙(θ − w_bak)) = θ + Δ − (λ/η)·Δ⊙Δ⊙(θ − w_bak) into t2
 * and q (unless NULL); 1 if θ′ is finite. w_bak ← θ′, the θ the worker gets back, is the rule's
 * sent vector. */
RULE_NOINLINE static int rule_dcasgd_pass(const float *restrict theta, const float *restrict bak,
					  const float *restrict d, float *restrict t2,
					  float *restrict q, size_t n, float c)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), dj = rule_load4(d + i);
		t = t + dj - c * dj * dj * (t - rule_load4(bak + i));
		rule_store4(t2 + i, t);
		if (q)
			rule_store4(q + i, t);
		RULE_FINITE(acc, t);
	}
	for (; i < n; i++) {
		float t = theta[i] + d[i] - c * d[i] * d[i] * (theta[i] - bak[i]);
		t2[i] = t;
		if (q)
			q[i] = t;
		tail += t - t;
	}
	return rule_finite(&acc, 4, tail);
}

static int rule_dcasgd_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	(void)sp; /* θ whole: a rule without fragments */
	(void)tau, (void)st;
	return rule_dcasgd_pass(rule_theta(r), w->vec[0], in, rule_theta_next(r), reply, r->n,
				r->c.lambda_dc / r->c.lr);
}

const struct rule_ops rule_dcasgd_ops = {
	.desc = {.name = "dcasgd", .fields = "lambda_dc", .window = 1, .sends = RULE_SENDS_STEP},
	.nvec = 1,
	.vec = {"bak"},
	.sent_vec = 0,
	.pass = rule_dcasgd_commit,
};
