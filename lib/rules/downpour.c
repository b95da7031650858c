/* rule_downpour: DOWNPOUR (Dean et al. 2012). The worker sums its last λ local updates; the
 * server adds them as they come. */
#include <stddef.h>

#include "rules/impl.h"

static int rule_downpour_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
				float *theta, float *reply, struct rule_stats *st, char *err)
{
	(void)w, (void)tau, (void)reply, (void)st, (void)err;
	rule_vec_add(theta, in, r->n);
	return RULE_APPLIED;
}

static int rule_downpour_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			       const float *theta)
{
	(void)w, (void)tau;
	return rule_check_add(theta, in, r->n);
}

const struct rule_ops rule_downpour_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"downpour", "window", 1, RULE_SENDS_STEP, 0, 0, 0, 0},
	.sent_vec = -1,
	.check = rule_downpour_check,
	.commit = rule_downpour_commit,
};
