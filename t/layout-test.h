/* layout-test.h: layouts for the rule tests. layout_of gives one 1-D tensor per size, named
 * "I.weight", laid out one after another; layout_n a single tensor of n elements. */
#ifndef GEM_LAYOUT_TEST_H
#define GEM_LAYOUT_TEST_H
#include <stdio.h>
#include <string.h>

#include "nn/layout.h"

static struct layout layout_of(const size_t *sizes, int n)
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
#endif
