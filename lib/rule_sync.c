/* rule_sync: synchronous momentum SGD over n workers, the proxy GEM matches and the AllReduce
 * baseline. A round collects one update per worker, all computed at the same version.
 *
 * Round bookkeeping: target is the number of commits a round waits for. It starts at nworkers;
 * a worker leaving lowers it (the round completes with those remaining), a worker joining while
 * fewer than target are active takes a free seat, one joining when all active workers fill the
 * target raises it back, up to nworkers. A departed worker's commit stays in its round. */
#include <stddef.h>
#include <string.h>

#include "err.h"
#include "rule_impl.h"

/* sum ← sum + Δ */
RULE_NOINLINE static void rule_sync_add(float *restrict sum, const float *restrict d, size_t n)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++)
			sum[i + j] += d[i + j];
	for (; i < n; i++)
		sum[i] += d[i];
}

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

static void rule_sync_complete(struct rule *r, float *theta)
{
	rule_sync_step(theta, r->global[0], r->global[1], r->n, r->c.momentum, (float)r->ncontrib);
	for (int i = 0; i < r->cap; i++)
		r->w[i].committed = 0;
	r->ncommitted = r->ncontrib = 0;
}

static int rule_sync_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			    float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)reply, (void)st;
	if (w->committed)
		return gem_errf(err, GEM_EUSAGE, "sync: worker %d already committed in this round",
				(int)(w - r->w));
	if (tau)
		return gem_errf(err, GEM_EUSAGE,
				"sync: worker %d committed an update %llu versions old to the round",
				(int)(w - r->w), (unsigned long long)tau);
	rule_sync_add(r->global[1], in, r->n);
	w->committed = 1;
	r->ncommitted++;
	r->ncontrib++;
	if (r->ncommitted < r->target)
		return RULE_PENDING;
	rule_sync_complete(r, theta);
	return RULE_APPLIED;
}

static int rule_sync_join(struct rule *r, char *err)
{
	if (r->nactive >= r->c.nworkers)
		return gem_errf(err, GEM_EUSAGE, "sync: the %d workers of a round have joined",
				r->c.nworkers);
	if (r->nactive >= r->target)
		r->target++;
	return 0;
}

static int rule_sync_leave(struct rule *r, struct rule_worker *w, float *theta, struct rule_stats *st)
{
	(void)st;
	if (w->committed)
		r->ncommitted--;
	if (r->target > 0)
		r->target--;
	if (r->ncontrib == 0 || r->ncommitted < r->target)
		return 0;
	rule_sync_complete(r, theta);
	return 1;
}

const struct rule_ops rule_sync_ops = {
	.name = "sync",
	.rounds = 1,
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.commit = rule_sync_commit,
	.join = rule_sync_join,
	.leave = rule_sync_leave,
};
