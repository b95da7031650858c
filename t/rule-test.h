/* rule-test.h: what the rule tests share: layout-test.h's layouts, rule_of, which makes a rule
 * over one tensor, and commit1, commit2 and leave1, which copy θ out after the call. */
#ifndef GEM_RULE_TEST_H
#define GEM_RULE_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "layout-test.h"
#include "rules/rule.h"
#include "tap.h"

/* The rule c says over θ (n floats, one tensor), or NULL (said with diag). */
static inline struct rule *rule_of(const struct rule_config *c, const float *theta, size_t n)
{
	struct layout l = layout_n(n);
	struct rule *r = NULL;
	char err[GEM_ERRMAX];
	if (rule_create(c, &l, theta, &r, err) < 0)
		diag("rule_create %s: %s", c->name, err);
	return r;
}

/* rule_commit, then θ copied into theta: the cases worked by hand keep θ in an array */
static inline int commit1(struct rule *r, int worker, const float *in, uint64_t base,
			  float *theta, uint64_t *version, float *reply, struct rule_stats *st,
			  char *err)
{
	int rc = rule_commit(r, worker, in, base, version, reply, st, err);
	memcpy(theta, rule_theta(r), rule_nparams(r) * sizeof(float));
	return rc;
}

/* commit1 of the two-float update (a, b) */
static inline int commit2(struct rule *r, int worker, float a, float b, uint64_t base,
			  float *theta, uint64_t *version, char *err)
{
	float d[2] = {a, b};
	struct rule_stats st;
	return commit1(r, worker, d, base, theta, version, NULL, &st, err);
}

/* rule_leave, then θ copied into theta */
static inline int leave1(struct rule *r, int worker, float *theta, uint64_t *version,
			 struct rule_stats *st, char *err)
{
	int rc = rule_leave(r, worker, version, st, err);
	memcpy(theta, rule_theta(r), rule_nparams(r) * sizeof(float));
	return rc;
}
#endif
