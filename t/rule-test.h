/* rule-test.h: what the rule tests share: layout-test.h's layouts, and commit1 and leave1,
 * which copy θ out after the call. */
#ifndef GEM_RULE_TEST_H
#define GEM_RULE_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout-test.h"
#include "rules/rule.h"

/* rule_commit, then θ copied into theta: the cases worked by hand keep θ in an array */
static inline int commit1(struct rule *r, int worker, const float *in, uint64_t base,
			  float *theta, uint64_t *version, float *reply, struct rule_stats *st,
			  char *err)
{
	int rc = rule_commit(r, worker, in, base, version, reply, st, err);
	memcpy(theta, rule_theta(r), rule_nparams(r) * sizeof(float));
	return rc;
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
