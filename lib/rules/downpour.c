/* rule_downpour: DOWNPOUR (Dean et al. 2012). The worker sums its last λ local updates; the
 * server adds them as they come: θ ← θ + Δ. */
#include <stddef.h>

#include "rules/impl.h"

static int rule_downpour_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	(void)sp; /* θ whole: a rule without fragments */
	(void)w, (void)tau, (void)st;
	return rule_add_div(rule_theta(r), in, 1, rule_theta_next(r), reply, r->n);
}

const struct rule_ops rule_downpour_ops = {
	.desc = {.name = "downpour", .fields = "window", .window = 1, .sends = RULE_SENDS_STEP},
	.sent_vec = -1,
	.pass = rule_downpour_commit,
};
