/* rule_dma: delayed model averaging (the ICLR 2019 submission "Asynchronous SGD without gradient
 * delay"), the server's half. Worker w runs cycles of β local steps; at boundary j it sends
 * Δ_w^j = x_w − x_w^init computed on top of X_j (base version j) and carries on without
 * waiting. The server averages one cycle's deltas into the next global model, with no momentum:
 *
 *     X_{j+1} = X_j + (1/W)·Σ_w Δ_w^j            once all W deltas of cycle j are in
 *
 * and answers every commit of the round with X_{j+1} (version j + 1), which the worker folds in
 * at its next boundary (lib/role/work.c). The rounds are round.c's, as for sync: a leave lowers
 * the round's target and the round completes with the deltas of those remaining; W is the
 * number of deltas the round holds. */
#include <stddef.h>

#include "rules/impl.h"

/* s = sum + in (in NULL: sum) ; X′ = X + s/W. With close: X′ → t2 and q (unless NULL), 0 → s2;
 * else s → s2. 1 if s and X′ are finite. */
RULE_NOINLINE static int rule_dma_pass(const float *restrict theta, const float *restrict sum,
				       const float *restrict in, float *restrict t2,
				       float *restrict s2, float *restrict q, size_t n, float nw,
				       int close)
{
	const rule_v4 zero = {0};
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 s = in ? rule_load4(sum + i) + rule_load4(in + i) : rule_load4(sum + i);
		rule_v4 t = rule_load4(theta + i) + s / nw;
		RULE_FINITE(acc, s);
		RULE_FINITE(acc, t);
		if (!close) {
			rule_store4(s2 + i, s);
			continue;
		}
		rule_store4(t2 + i, t);
		rule_store4(s2 + i, zero);
		if (q)
			rule_store4(q + i, t);
	}
	for (; i < n; i++) {
		float s = in ? sum[i] + in[i] : sum[i], t = theta[i] + s / nw;
		tail += (s - s) + (t - t);
		if (!close) {
			s2[i] = s;
			continue;
		}
		t2[i] = t;
		s2[i] = 0;
		if (q)
			q[i] = t;
	}
	return rule_finite(&acc, 4, tail);
}

static int rule_dma_round(struct rule *r, const struct rule_span *sp, const float *in, float *reply,
			  float k, int close)
{
	(void)sp; /* θ whole: a rule without fragments */
	return rule_dma_pass(rule_theta(r), r->global[0], in, rule_theta_next(r), r->gspare[0],
			     reply, r->n, k, close);
}

const struct rule_ops rule_dma_ops = {
	.desc = {.name = "dma", .fields = "window", .window = 4, .sends = RULE_SENDS_CYCLE,
		 .rounds = 1, .background = 1},
	.sent_vec = -1,
	.nglobal = 1,
	.global = {"sum"},
	.round_sum = 0,
	.round_pass = rule_dma_round,
};
