/* rule_sync: synchronous momentum SGD over n workers, the proxy GEM matches and the AllReduce
 * baseline. A round collects one update per worker, all computed at the same version.
 * The rounds are round.c's; this is what a round's commit computes. */
#include <stddef.h>

#include "rules/impl.h"

/* s = sum + in (in NULL: sum) ; v′ = μv + s/k ; θ′ = θ + v′. With close: v′ → v2, θ′ → t2 and q
 * (unless NULL), 0 → s2; else s → s2. 1 if s, v′ and θ′ are finite. */
RULE_NOINLINE static int rule_sync_pass(const float *restrict theta, const float *restrict v,
					const float *restrict sum, const float *restrict in,
					float *restrict t2, float *restrict v2, float *restrict s2,
					float *restrict q, size_t n, float mu, float k, int close)
{
	const rule_v4 zero = {0};
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 s = in ? rule_load4(sum + i) + rule_load4(in + i) : rule_load4(sum + i);
		rule_v4 vv = mu * rule_load4(v + i) + s / k, t = rule_load4(theta + i) + vv;
		RULE_FINITE(acc, s);
		RULE_FINITE(acc, vv);
		RULE_FINITE(acc, t);
		if (!close) {
			rule_store4(s2 + i, s);
			continue;
		}
		rule_store4(v2 + i, vv);
		rule_store4(t2 + i, t);
		rule_store4(s2 + i, zero);
		if (q)
			rule_store4(q + i, t);
	}
	for (; i < n; i++) {
		float s = in ? sum[i] + in[i] : sum[i], vi = mu * v[i] + s / k, t = theta[i] + vi;
		tail += (s - s) + (vi - vi) + (t - t);
		if (!close) {
			s2[i] = s;
			continue;
		}
		v2[i] = vi;
		t2[i] = t;
		s2[i] = 0;
		if (q)
			q[i] = t;
	}
	return rule_finite(&acc, 4, tail);
}

static int rule_sync_round(struct rule *r, const struct rule_span *sp, const float *in,
			   float *reply, float k, int close)
{
	(void)sp; /* θ whole: a rule without fragments */
	return rule_sync_pass(rule_theta(r), r->global[0], r->global[1], in, rule_theta_next(r),
			      r->gspare[0], r->gspare[1], reply, r->n, r->c.momentum, k, close);
}

const struct rule_ops rule_sync_ops = {
	.desc = {.name = "sync", .fields = "", .window = 1, .sends = RULE_SENDS_STEP, .rounds = 1},
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.round_sum = 1,
	.round_pass = rule_sync_round,
};
