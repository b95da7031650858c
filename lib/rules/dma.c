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

#include "base/err.h"
#include "rules/impl.h"

/* X ← X + sum / W ; sum ← 0 */
RULE_NOINLINE static void rule_dma_average(float *restrict theta, float *restrict sum, size_t n,
					   float nw)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++) {
			theta[i + j] += sum[i + j] / nw;
			sum[i + j] = 0;
		}
	for (; i < n; i++) {
		theta[i] += sum[i] / nw;
		sum[i] = 0;
	}
}

/* the average with sum s = sum + in: s and X + s/W finite */
RULE_NOINLINE static int rule_dma_finite(const float *restrict theta, const float *restrict sum,
					 const float *restrict in, size_t n, float nw)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 s = rule_load4(sum + i) + rule_load4(in + i), t = rule_load4(theta + i) + s / nw;
		acc |= (rule_i4)((s - s) + (t - t));
	}
	for (; i < n; i++) {
		float s = sum[i] + in[i], t = theta[i] + s / nw;
		tail += (s - s) + (t - t);
	}
	return rule_finite4(acc, tail);
}

static int rule_dma_round_check(const struct rule *r, const float *theta, const float *in, float k)
{
	return rule_dma_finite(theta, r->global[0], in, r->n, k);
}

static void rule_dma_close(struct rule *r, float *theta)
{
	rule_dma_average(theta, r->global[0], r->n, (float)r->ncontrib);
}

const struct rule_ops rule_dma_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"dma", "window", 4, RULE_SENDS_CYCLE, 0, 1, 1, 0},
	.round_sum = 0,
	.round_close = rule_dma_close,
	.round_check = rule_dma_round_check,
	.sent_vec = -1,
	.nglobal = 1,
	.global = {"sum"},
	.check = rule_round_check,
	.commit = rule_round_commit,
	.join = rule_round_join,
	.leave = rule_round_leave,
};
