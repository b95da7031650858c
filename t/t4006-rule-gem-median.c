/* t4006: GEM's per-tensor median π on a tensor larger than the sample it is taken over
 * (100,003 elements): close to the exact median; exact on a small tensor. */
#include "base/err.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	enum { BIG = 100003, SMALL = 1001 };
	struct layout l;
	struct rule_config c;
	struct rule *r = NULL;
	struct rule_stats st;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	size_t n = BIG + SMALL;
	float *theta = calloc(n, sizeof *theta), *d1 = malloc(n * sizeof *d1), *d2 = malloc(n * sizeof *d2);
	float *pi = malloc(n * sizeof *pi);

	memset(&l, 0, sizeof l);
	l.ntensors = 2;
	l.t[0] = (struct layout_tensor){.name = "0.weight", .ndim = 1, .shape = {BIG}, .offset = 0, .size = BIG};
	l.t[1] = (struct layout_tensor){.name = "0.bias", .ndim = 1, .shape = {SMALL}, .offset = BIG, .size = SMALL};
	l.total = n;
	rule_config_default("gem", &c, err);
	c.momentum = 0.9f;
	ok(rule_create(&c, &l, theta, &r, err) == 0, "gem rule created");
	ok(rule_join(r, 0, err) == 0, "worker 0 joins");
	/* Two commits of one worker: θ − s_w = 0 at the second, so π_i = |0.9·Δ1_i + Δ2_i| / |Δ2_i|.
	 * With Δ1_i = c_i·Δ2_i and c_i = i-dependent values in [0, 4], π_i = 1 + 0.9·c_i. */
	for (size_t i = 0; i < n; i++) {
		float ci = (float)((i * 7919) % 4001) / 1000.0f;
		d2[i] = 1e-3f * (1 + (float)(i % 3));
		d1[i] = ci * d2[i];
		pi[i] = 1 + 0.9f * ci;
	}
	ok(commit1(r, 0, d1, 0, theta, &ver, NULL, &st, err) == RULE_APPLIED, "first commit");
	ok(commit1(r, 0, d2, 1, theta, &ver, NULL, &st, err) == RULE_APPLIED, "second commit");
	qsort(pi, BIG, sizeof *pi, cmp);
	qsort(pi + BIG, SMALL, sizeof *pi, cmp);
	diag("big tensor: sampled median %.5f, exact %.5f", st.t[0].pi_median, (pi[BIG / 2]));
	is_near(st.t[0].pi_median, pi[BIG / 2], 0.03, "median of a big tensor within 0.03 of exact");
	is_near(st.t[1].pi_median, pi[BIG + SMALL / 2], 1e-5, "median of a small tensor is exact");
	is_near(st.t[0].pi_mean, 1 + 0.9 * 2.0, 0.01, "mean π over every element");
	rule_destroy(r);
	free(theta);
	free(d1);
	free(d2);
	free(pi);
	return done_testing();
}
