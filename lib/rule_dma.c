/* rule_dma: delayed model averaging (the ICLR 2019 submission "Asynchronous SGD without gradient
 * delay"), the server's half. Worker w runs cycles of β local steps; at boundary j it sends
 * Δ_w^j = x_w − x_w^init computed on top of X_j (base version j) and carries on without
 * waiting. The server averages one cycle's deltas into the next global model, with no momentum:
 *
 *     X_{j+1} = X_j + (1/W)·Σ_w Δ_w^j            once all W deltas of cycle j are in
 *
 * and answers every commit of the round with X_{j+1} (version j + 1), which the worker folds in
 * at its next boundary (lib/work.c). Round bookkeeping is sync's (rule_sync.c): target starts at
 * nworkers, a leave lowers it and the round completes with the deltas of those remaining, a join
 * takes a free seat; W is the number of deltas the round holds. A departed worker's delta stays
 * in its round. */
#include <stddef.h>

#include "err.h"
#include "rule_impl.h"

/* sum ← sum + Δ_w */
RULE_NOINLINE static void rule_dma_add(float *restrict sum, const float *restrict d, size_t n)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++)
			sum[i + j] += d[i + j];
	for (; i < n; i++)
		sum[i] += d[i];
}

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

static void rule_dma_complete(struct rule *r, float *theta)
{
	rule_dma_average(theta, r->global[0], r->n, (float)r->ncontrib);
	for (int i = 0; i < r->cap; i++)
		r->w[i].committed = 0;
	r->ncommitted = r->ncontrib = 0;
}

static int rule_dma_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			   float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)reply, (void)st;
	if (w->committed)
		return gem_errf(err, GEM_EUSAGE, "dma: worker %d already sent its delta of this cycle",
				(int)(w - r->w));
	/* Δ_w^j is added to X_j: a delta built on an older model belongs to a closed round */
	if (tau)
		return gem_errf(err, GEM_EUSAGE,
				"dma: worker %d sent a delta on top of a model %llu versions old",
				(int)(w - r->w), (unsigned long long)tau);
	rule_dma_add(r->global[0], in, r->n);
	w->committed = 1;
	r->ncommitted++;
	r->ncontrib++;
	if (r->ncommitted < r->target)
		return RULE_PENDING;
	rule_dma_complete(r, theta);
	return RULE_APPLIED;
}

static int rule_dma_join(struct rule *r, char *err)
{
	if (r->nactive >= r->c.nworkers)
		return gem_errf(err, GEM_EUSAGE, "dma: the %d workers of a round have joined",
				r->c.nworkers);
	if (r->nactive >= r->target)
		r->target++;
	return 0;
}

static int rule_dma_leave(struct rule *r, struct rule_worker *w, float *theta, struct rule_stats *st)
{
	(void)st;
	if (w->committed)
		r->ncommitted--;
	if (r->target > 0)
		r->target--;
	if (r->ncontrib == 0 || r->ncommitted < r->target)
		return 0;
	rule_dma_complete(r, theta);
	return 1;
}

const struct rule_ops rule_dma_ops = {
	.name = "dma",
	.rounds = 1,
	.sent_vec = -1,
	.nglobal = 1,
	.global = {"sum"},
	.commit = rule_dma_commit,
	.join = rule_dma_join,
	.leave = rule_dma_leave,
};
