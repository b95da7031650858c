/* rule_easgd: asynchronous elastic averaging SGD (Zhang et al. 2015). Every λ local steps a
 * worker sends its local x; center and worker move toward each other by the same d. */
#include <stddef.h>

#include "rules/impl.h"

/* d = α(x − θ) ; θ′ = θ + d into t2 ; d into the reply (the worker sets x ← x − d). 1 if d and θ′
 * are finite. */
RULE_NOINLINE static int rule_easgd_pass(const float *restrict theta, const float *restrict x,
					 float *restrict t2, float *restrict d, size_t n,
					 float alpha)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), vd = alpha * (rule_load4(x + i) - t);
		t = t + vd;
		rule_store4(d + i, vd);
		rule_store4(t2 + i, t);
		RULE_FINITE(acc, vd);
		RULE_FINITE(acc, t);
	}
	for (; i < n; i++) {
		float di = alpha * (x[i] - theta[i]), t = theta[i] + di;
		d[i] = di;
		t2[i] = t;
		tail += (di - di) + (t - t);
	}
	return rule_finite(&acc, 4, tail);
}

static float rule_easgd_alpha(const struct rule *r)
{
	/* α = 0.9/n: n is the configured nworkers, else the workers joined now */
	int n = r->c.nworkers > 0 ? r->c.nworkers : r->nactive;
	return r->c.alpha > 0 ? r->c.alpha : 0.9f / (float)n;
}

static int rule_easgd_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	(void)sp; /* θ whole: a rule without fragments */
	(void)w, (void)tau, (void)st;
	return rule_easgd_pass(rule_theta(r), in, rule_theta_next(r), reply, r->n,
			       rule_easgd_alpha(r));
}

const struct rule_ops rule_easgd_ops = {
	.desc = {.name = "easgd", .fields = "window alpha", .window = 10, .sends = RULE_SENDS_X,
		 .reply_elastic = 1},
	.sent_vec = -1,
	.pass = rule_easgd_commit,
};
