/* rule_round: the round bookkeeping of the rules whose commits wait for every worker (sync,
 * dma). A round collects one update per worker, all computed at the same version, summed into
 * the rule's global vector ops->round_sum; when the last is in, ops->round_close applies the
 * round to θ (with r->ncontrib updates in the sum).
 *
 * target is the number of commits a round waits for. It starts at nworkers; a worker leaving
 * lowers it (the round completes with those remaining), a worker joining while fewer than target
 * are active takes a free seat, one joining when all active workers fill the target raises it
 * back, up to nworkers. A departed worker's commit stays in its round. */
#include <stddef.h>

#include "base/err.h"
#include "rules/impl.h"

static void rule_round_close(struct rule *r, float *theta)
{
	r->ops->round_close(r, theta);
	for (int i = 0; i < r->cap; i++)
		r->w[i].committed = 0;
	r->ncommitted = r->ncontrib = 0;
}

int rule_round_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		     const float *theta)
{
	if (w->committed || tau)
		return 1; /* rule_round_commit refuses it */
	return r->ops->round_check(r, theta, in, (float)(r->ncontrib + 1));
}

int rule_round_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		      float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)reply, (void)st;
	if (w->committed)
		return gem_errf(err, GEM_EUSAGE, "%s: worker %d already committed in this round",
				r->ops->desc.name, (int)(w - r->w));
	/* an update computed at an older version belongs to a round already closed */
	if (tau)
		return gem_errf(err, GEM_EUSAGE,
				"%s: worker %d committed an update %llu versions old to the round",
				r->ops->desc.name, (int)(w - r->w), (unsigned long long)tau);
	rule_vec_add(r->global[r->ops->round_sum], in, r->n);
	w->committed = 1;
	r->ncommitted++;
	r->ncontrib++;
	if (r->ncommitted < r->target)
		return RULE_PENDING;
	rule_round_close(r, theta);
	return RULE_APPLIED;
}

int rule_round_join(struct rule *r, char *err)
{
	if (r->nactive >= r->c.nworkers)
		return gem_errf(err, GEM_EUSAGE, "%s: the %d worker%s of a round %s joined",
				r->ops->desc.name, r->c.nworkers, GEM_S(r->c.nworkers),
				r->c.nworkers == 1 ? "has" : "have");
	if (r->nactive >= r->target)
		r->target++;
	return 0;
}

int rule_round_leave(struct rule *r, struct rule_worker *w, float *theta, struct rule_stats *st)
{
	(void)st;
	if (w->committed)
		r->ncommitted--;
	if (r->target > 0)
		r->target--;
	if (r->ncontrib == 0 || r->ncommitted < r->target)
		return 0;
	rule_round_close(r, theta);
	return 1;
}
