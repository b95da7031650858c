/* rule_dynsgd: adaptive staleness (DynSGD, Jiang et al. 2017): a commit computed τ central
 * updates ago counts 1/(τ+1): θ ← θ + Δ/(τ+1). */
#include <stddef.h>

#include "rules/impl.h"

static int rule_dynsgd_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	(void)sp; /* θ whole: a rule without fragments */
	(void)w, (void)st;
	return rule_add_div(rule_theta(r), in, (float)tau + 1.0f, rule_theta_next(r), reply,
			    r->n);
}

const struct rule_ops rule_dynsgd_ops = {
	.desc = {.name = "dynsgd", .fields = "", .window = 1, .sends = RULE_SENDS_STEP},
	.sent_vec = -1,
	.pass = rule_dynsgd_commit,
};
