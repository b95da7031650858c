/* rule_sync: synchronous momentum SGD over n workers, the proxy GEM matches and the AllReduce
 * baseline. A round collects one update per worker, all computed at the same version.
 * The rounds are round.c's; this is what a complete round does. */
#include <stddef.h>

#include "base/err.h"
#include "rules/impl.h"

/* v ← μv + mean(Δ) ; θ ← θ + v ; sum ← 0 */
RULE_NOINLINE static void rule_sync_step(float *restrict theta, float *restrict v,
					 float *restrict sum, size_t n, float mu, float k)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++) {
			v[i + j] = mu * v[i + j] + sum[i + j] / k;
			theta[i + j] += v[i + j];
			sum[i + j] = 0;
		}
	for (; i < n; i++) {
		v[i] = mu * v[i] + sum[i] / k;
		theta[i] += v[i];
		sum[i] = 0;
	}
}

/* the step with sum s = sum + in: v' = μv + s/k and θ + v' finite */
RULE_NOINLINE static int rule_sync_finite(const float *restrict theta, const float *restrict v,
					  const float *restrict sum, const float *restrict in,
					  size_t n, float mu, float k)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 s = rule_load4(sum + i) + rule_load4(in + i);
		rule_v4 vj = mu * rule_load4(v + i) + s / k, t = rule_load4(theta + i) + vj;
		acc |= (rule_i4)((s - s) + (vj - vj) + (t - t));
	}
	for (; i < n; i++) {
		float s = sum[i] + in[i], vi = mu * v[i] + s / k, t = theta[i] + vi;
		tail += (s - s) + (vi - vi) + (t - t);
	}
	return rule_finite4(acc, tail);
}

static int rule_sync_round_check(const struct rule *r, const float *theta, const float *in, float k)
{
	return rule_sync_finite(theta, r->global[0], r->global[1], in, r->n, r->c.momentum, k);
}

static void rule_sync_close(struct rule *r, float *theta)
{
	rule_sync_step(theta, r->global[0], r->global[1], r->n, r->c.momentum, (float)r->ncontrib);
}

const struct rule_ops rule_sync_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"sync", "", 1, RULE_SENDS_STEP, 0, 1, 0, 0},
	.round_sum = 1,
	.round_close = rule_sync_close,
	.round_check = rule_sync_round_check,
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.check = rule_round_check,
	.commit = rule_round_commit,
	.join = rule_round_join,
	.leave = rule_round_leave,
};
