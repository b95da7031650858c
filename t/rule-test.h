/* rule-test.h: what the rule tests share. layout_of gives one 1-D tensor per size, named
 * "I.weight", laid out one after another; layout_n a single tensor of n elements. commit1 and
 * leave1 copy θ out after the call. */
#ifndef GEM_RULE_TEST_H
#define GEM_RULE_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layout.h"
#include "rules/rule.h"

static inline struct layout layout_of(const size_t *sizes, int n)
{
	struct layout l;
	memset(&l, 0, sizeof l);
	l.ntensors = n;
	for (int i = 0; i < n; i++) {
		snprintf(l.t[i].name, sizeof l.t[i].name, "%d.weight", i);
		l.t[i].ndim = 1;
		l.t[i].shape[0] = (int)sizes[i];
		l.t[i].offset = l.total;
		l.t[i].size = sizes[i];
		l.total += sizes[i];
	}
	return l;
}

static inline struct layout layout_n(size_t n)
{
	return layout_of(&n, 1);
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

/* rule_leave, then θ copied into theta */
static inline int leave1(struct rule *r, int worker, float *theta, uint64_t *version,
			 struct rule_stats *st, char *err)
{
	int rc = rule_leave(r, worker, version, st, err);
	memcpy(theta, rule_theta(r), rule_nparams(r) * sizeof(float));
	return rc;
}
#endif
