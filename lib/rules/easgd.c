/* rule_easgd: asynchronous elastic averaging SGD (Zhang et al. 2015). Every λ local steps a
 * worker sends its local x; center and worker move toward each other by the same d. */
#include <stddef.h>

#include "base/err.h"
#include "rules/impl.h"

/* d = α(x − θ) ; θ ← θ + d ; reply d (the worker sets x ← x − d) */
RULE_NOINLINE static void rule_easgd_move(float *restrict theta, const float *restrict x,
					  float *restrict d, size_t n, float alpha)
{
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK)
		for (int j = 0; j < RULE_BLOCK; j++) {
			d[i + j] = alpha * (x[i + j] - theta[i + j]);
			theta[i + j] += d[i + j];
		}
	for (; i < n; i++) {
		d[i] = alpha * (x[i] - theta[i]);
		theta[i] += d[i];
	}
}

static int rule_easgd_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			     float *theta, float *reply, struct rule_stats *st, char *err)
{
	/* α = 0.9/n: n is the configured nworkers, else the workers joined now */
	int n = r->c.nworkers > 0 ? r->c.nworkers : r->nactive;
	float alpha = r->c.alpha > 0 ? r->c.alpha : 0.9f / (float)n;
	(void)w, (void)tau, (void)st;
	if (!reply)
		return gem_errf(err, GEM_EUSAGE, "easgd: no reply buffer for the elastic difference");
	rule_easgd_move(theta, in, reply, r->n, alpha);
	return RULE_APPLIED;
}

const struct rule_ops rule_easgd_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"easgd", "window alpha", 10, RULE_SENDS_X, 1, 0, 0, 0},
	.sent_vec = -1,
	.commit = rule_easgd_commit,
};
