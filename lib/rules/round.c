/* rule_round: the round bookkeeping of the rules whose commits wait for every worker (sync,
 * dma, diloco). A round collects one update per worker, all computed at the same version, summed into
 * the rule's global vector ops->round_sum; the last one's ops->round_pass applies the round to θ
 * (with r->ncontrib updates in the sum).
 *
 * target is the number of commits a round waits for. It starts at nworkers; a worker leaving
 * lowers it (the round completes with those remaining), a worker joining while fewer than target
 * are active takes a free seat, one joining when all active workers fill the target raises it
 * back, up to nworkers. A departed worker's commit stays in its round. */
#include <stddef.h>

#include "base/err.h"
#include "rules/impl.h"

/* The round just closed was applied into the spares: take them, and start the next round. */
static void rule_round_take(struct rule *r, const struct rule_span *sp)
{
	rule_take_theta(r, sp, NULL);
	for (int i = 0; i < r->ops->nglobal; i++)
		rule_take_vec(r, sp, &r->global[i], &r->gspare[i]);
	for (int i = 0; i < r->cap; i++)
		r->w[i].committed = 0;
	r->ncommitted = r->ncontrib = 0;
}

int rule_round_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		      const float *in, uint64_t tau, float *reply, char *err)
{
	int close = r->ncommitted + 1 >= r->target;
	if (w->committed)
		return gem_errf(err, GEM_EUSAGE, "%s: worker %d already committed in this round",
				r->ops->desc.name, (int)(w - r->w));
	/* an update computed at an older version belongs to a round already closed */
	if (tau)
		return gem_errf(err, GEM_EUSAGE,
				"%s: worker %d committed an update %llu versions old to the round",
				r->ops->desc.name, (int)(w - r->w), (unsigned long long)tau);
	/* a commit that leaves the round open checks the round closed now with it, so that a
	 * leave can close it later with the same sum and θ */
	if (!r->ops->round_pass(r, sp, in, close ? reply : NULL, (float)(r->ncontrib + 1), close))
		return RULE_E_NON_FINITE;
	w->committed = 1;
	r->ncommitted++;
	r->ncontrib++;
	if (close) {
		rule_round_take(r, sp);
		return RULE_APPLIED;
	}
	rule_take_vec(r, sp, &r->global[r->ops->round_sum], &r->gspare[r->ops->round_sum]);
	return RULE_PENDING;
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

int rule_round_leave(struct rule *r, const struct rule_span *sp, struct rule_worker *w)
{
	if (w->committed)
		r->ncommitted--;
	if (r->target > 0)
		r->target--;
	if (r->ncontrib == 0 || r->ncommitted < r->target)
		return 0;
	/* finite: the round's last commit checked this very close (the same sum, k and θ) */
	r->ops->round_pass(r, sp, NULL, NULL, (float)r->ncontrib, 1);
	rule_round_take(r, sp);
	return 1;
}
