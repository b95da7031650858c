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

static void rule_sync_close(struct rule *r, float *theta)
{
	rule_sync_step(theta, r->global[0], r->global[1], r->n, r->c.momentum, (float)r->ncontrib);
}

const struct rule_ops rule_sync_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"sync", "", 1, RULE_SENDS_STEP, 0, 1, 0, 0},
	.round_sum = 1,
	.round_close = rule_sync_close,
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.commit = rule_round_commit,
	.join = rule_round_join,
	.leave = rule_round_leave,
};
