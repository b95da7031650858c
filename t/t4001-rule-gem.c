/* t4001: GEM's server side, worked by hand: π element-wise, the clamps at 0 and π_max, Δθ = 0,
 * s_w after a commit, momentum over two commits, staleness, per-tensor statistics; gem_ref pull
 * (the authors' s_w and ε) against the default on the same commits; the vector loop against the
 * one-element one; the medians against medians by sorting. */
#include "base/err.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct rule *gem_new(const struct layout *l, float momentum, const float *theta)
{
	struct rule_config c;
	struct rule *r = NULL;
	char err[GEM_ERRMAX];
	rule_config_default("gem", &c, err);
	c.momentum = momentum;
	if (rule_create(&c, l, theta, &r, err) < 0)
		diag("rule_create: %s", err);
	return r;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* The median rule_stats reports for π[0..n): exact up to 2048 values, else over every
 * ⌈n/2048⌉-th one; for an even count the mean of the middle two. By sorting. */
static float median_by_sort(const float *pi, size_t n, float *tmp)
{
	size_t stride = n <= 2048 ? 1 : (n + 2047) / 2048, m = 0;
	for (size_t i = 0; i < n; i += stride)
		tmp[m++] = pi[i];
	qsort(tmp, m, sizeof *tmp, cmp_float);
	return m % 2 ? tmp[m / 2] : (tmp[m / 2 - 1] + tmp[m / 2]) / 2;
}

/* The radix-select medians equal medians by sorting, bit for bit, for tensors of odd and even
 * sizes below and above the sample, with distinct values (spread), many ties (levels: a few
 * values of Δθ), zeros and clamps at π_max. A first commit has m_w = Δθ and θ = s_w, so
 * π = clamp(κ|Δθ|/(|Δθ| + ε), 0, π_max), computed here as the rule does. */
static void medians_match_sort(int levels)
{
	size_t sizes[] = {1, 2, 7, 8, 300, 301, 2048, 2049, 8192, 8193, 20000, 20001, 40000};
	int nt = (int)(sizeof sizes / sizeof *sizes);
	struct layout l = layout_of(sizes, nt);
	struct rule_config c;
	struct rule *r = NULL;
	struct rule_stats st;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	float *theta = calloc(l.total, sizeof(float)), *d = calloc(l.total, sizeof(float));
	float *pi = calloc(l.total, sizeof(float)), *tmp = calloc(l.total, sizeof(float));
	int bad = 0;

	rule_config_default("gem", &c, err);
	c.kappa = 3, c.pi_max = 2, c.eps = 1;
	rule_create(&c, &l, theta, &r, err);
	rule_join(r, 0, err);
	srand(7 + levels);
	for (size_t i = 0; i < l.total; i++) {
		int q = levels ? rand() % levels : rand();
		float v;
		d[i] = levels ? (float)q * 0.25f : (float)q / (float)RAND_MAX * 3.0f;
		d[i] = rand() % 2 ? -d[i] : d[i];
		v = c.kappa * fabsf(d[i]) / (fabsf(d[i]) + c.eps);
		v = v >= 0 ? v : 0;
		pi[i] = v > c.pi_max ? c.pi_max : v;
	}
	ok(commit1(r, 0, d, 0, theta, &ver, NULL, &st, err) == RULE_APPLIED, "%s: commit",
	   levels ? (levels > 100 ? "some ties" : "ties") : "spread");
	for (int t = 0; t < nt; t++) {
		float want = median_by_sort(pi + l.t[t].offset, l.t[t].size, tmp);
		if (st.t[t].pi_median != want) {
			diag("tensor %d (%zu): median %.9g, by sort %.9g", t, sizes[t],
			     (double)st.t[t].pi_median, (double)want);
			bad++;
		}
	}
	if (st.all.pi_median != median_by_sort(pi, l.total, tmp))
		bad++;
	ok(!bad, "%s: every median equals the median by sorting", levels ? (levels > 100 ? "some ties" : "ties") : "spread");
	rule_destroy(r);
	free(theta), free(d), free(pi), free(tmp);
}

/* The 8-wide loop and the one-element loop give the same floats: a 37-element tensor (32 in
 * the wide loop, 5 in the tail) against 37 one-element rules, the same commits of two workers,
 * θ compared bit for bit after each; gem_ref commit or pull. */
static void vector_matches_scalar(int pull)
{
	size_t n37[] = {37}, n1[] = {1};
	struct layout l = layout_of(n37, 1), l1 = layout_of(n1, 1);
	struct rule_config c;
	struct rule *big = NULL, *one[37];
	struct rule_stats st;
	char err[GEM_ERRMAX];
	float t[37] = {0}, t1[37] = {0}, d[37];
	uint64_t ver = 0, v1[37] = {0};
	int same = 1;
	rule_config_default("gem", &c, err);
	c.gem_ref = pull ? RULE_GEM_REF_PULL : RULE_GEM_REF_COMMIT;
	c.eps = 0.01f;
	rule_create(&c, &l, t, &big, err);
	rule_join(big, 0, err);
	rule_join(big, 1, err);
	for (int i = 0; i < 37; i++) {
		rule_create(&c, &l1, t1 + i, &one[i], err);
		rule_join(one[i], 0, err);
		rule_join(one[i], 1, err);
	}
	srand(11 + pull);
	for (int k = 0; k < 12; k++) {
		int who = k % 3 == 2;
		for (int i = 0; i < 37; i++)
			d[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * (i % 5 ? 1.0f : 0.01f);
		commit1(big, who, d, k / 2 % 3, t, &ver, NULL, &st, err);
		for (int i = 0; i < 37; i++)
			commit1(one[i], who, d + i, k / 2 % 3, t1 + i, &v1[i], NULL, &st, err);
		same &= memcmp(t, t1, sizeof t) == 0;
	}
	ok(same, "%s: the wide loop and the one-element loop give the same θ, bit for bit",
	   pull ? "pull" : "commit");
	rule_destroy(big);
	for (int i = 0; i < 37; i++)
		rule_destroy(one[i]);
}

/* Two workers, worked by hand: π element-wise, the clamp at 0, Δθ = 0, s_w after a commit,
 * staleness, the statistics of two tensors. */
static void two_workers(void)
{
	size_t sizes[2] = {2, 1};
	struct layout l = layout_of(sizes, 2);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	float theta[3] = {1, 2, 3};
	float da[3] = {0.5f, -0.25f, 0}, db[3] = {1.0f, 0.125f, -0.5f}, dc[3] = {0.25f, 0.25f, 0.25f};

	r = gem_new(&l, 0.9f, theta);
	ok(r, "gem rule created");
	ok(rule_join(r, 0, err) == 0 && rule_join(r, 1, err) == 0, "workers 0 and 1 join");

	/* A (worker 0) commits first: m_A = Δ_A, θ − s_A = 0, so π = |Δ|/(|Δ| + ε) = 1 in float
	 * where Δ ≠ 0, and π = 0/(0 + ε) = 0 where Δ = 0 (the ε case: no NaN, θ stays). */
	ok(commit1(r, 0, da, 0, theta, &ver, NULL, &st, err) == RULE_APPLIED, "A commits");
	ok(st.staleness == 0 && ver == 1 && st.version == 1, "A: τ = 0, version 1");
	ok(theta[0] == 1.5f && theta[1] == 1.75f && theta[2] == 3, "A: θ = θ + Δ_A = (1.5, 1.75, 3)");
	is_near(st.t[1].pi_mean, 0, 0, "A: π = 0 where Δθ = 0");

	/* B (worker 1) commits at base version 0 (τ = 1). By hand:
	 *   m_B = 0.9·0 + Δ_B = (1, 0.125, −0.5)
	 *   |θ − s_B| = |(1.5, 1.75, 3) − (1, 2, 3)| = (0.5, 0.25, 0)
	 *   π = ((1 − 0.5)/1, (0.125 − 0.25)/0.125, (0.5 − 0)/0.5) = (0.5, −1 → 0, 1)
	 *   θ = (1.5 + 0.5·1, 1.75 + 0·0.125, 3 + 1·(−0.5)) = (2, 1.75, 2.5)
	 * Tensor 0 is (π0, π1) = (0.5, 0): median 0.25, mean 0.25, clamped0 1/2, scale 0.5/1.125.
	 * Tensor 1 is π2 = 1. Overall: median 0.5, mean 0.5, clamped0 1/3, scale 1/1.625. */
	ok(commit1(r, 1, db, 0, theta, &ver, NULL, &st, err) == RULE_APPLIED, "B commits");
	ok(st.staleness == 1 && ver == 2, "B: τ = 1 (A's commit came between), version 2");
	is_near(theta[0], 2.0, 1e-6, "B: θ0 moved by π = 0.5");
	ok(theta[1] == 1.75f, "B: θ1 unchanged, π clamped to 0");
	is_near(theta[2], 2.5, 1e-6, "B: θ2 moved by π = 1");
	ok(st.ntensors == 2, "stats for 2 tensors");
	is_near(st.t[0].pi_median, 0.25, 1e-6, "tensor 0: median of an even count is the mean of the middle two");
	is_near(st.t[0].pi_mean, 0.25, 1e-6, "tensor 0: mean π");
	is_near(st.t[0].clamped0, 0.5, 1e-6, "tensor 0: half clamped to 0");
	is_near(st.t[0].scale, 0.5 / 1.125, 1e-6, "tensor 0: |π⊙Δθ|₁/|Δθ|₁");
	is_near(st.t[1].pi_median, 1, 1e-6, "tensor 1: median π = 1");
	is_near(st.all.pi_median, 0.5, 1e-6, "overall median π");
	is_near(st.all.pi_mean, 0.5, 1e-6, "overall mean π");
	is_near(st.all.clamped0, 1.0 / 3, 1e-6, "overall fraction clamped to 0");
	is_near(st.all.clampedmax, 0, 0, "nothing clamped to π_max");
	is_near(st.all.scale, 1 / 1.625, 1e-6, "overall effective scale");

	/* B again at version 2 (τ = 0): s_B was set to θ by its commit, so |θ − s_B| = 0:
	 *   m_B = 0.9·(1, 0.125, −0.5) + 0.25 = (1.15, 0.3625, −0.2)
	 *   π = |m_B|/0.25 = (4.6, 1.45, 0.8)
	 * (had s_B stayed at θ0, |θ − s_B| = (1, 0.25, 0.5) would give (0.6, 0.45, 0)). */
	ok(commit1(r, 1, dc, 2, theta, &ver, NULL, &st, err) == RULE_APPLIED && st.staleness == 0,
	   "B commits again, τ = 0");
	is_near(theta[0], 2.0 + 4.6 * 0.25, 1e-5, "s_w ← θ after B's commit: π0 = 4.6");
	is_near(theta[1], 1.75 + 1.45 * 0.25, 1e-5, "π1 = 1.45 (momentum of B's unscaled updates)");
	is_near(theta[2], 2.5 + 0.8 * 0.25, 1e-5, "π2 = 0.8");

	/* A at base 1, version 3: τ = 2 */
	ok(commit1(r, 0, dc, 1, theta, &ver, NULL, &st, err) == RULE_APPLIED && st.staleness == 2,
	   "A at base 1 after two of B's commits: τ = 2");
	ok(commit1(r, 0, dc, 9, theta, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "a base version ahead of θ is refused: %s", err);
	rule_destroy(r);
}

/* One worker: GEM is sequential momentum SGD while no clamp acts:
 * commit 1: m = 1, π = 1, θ = 1;  commit 2: m = 0.9 + 0.5 = 1.4, π = 1.4/0.5 = 2.8,
 * θ = 1 + 2.8·0.5 = 2.4 = 1 + m, as momentum SGD's θ += v. */
static void one_worker(void)
{
	struct layout l1 = layout_n(1);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	float t[1] = {0}, d1[1] = {1}, d2[1] = {0.5f}, d3[1] = {0.01f}, z[1] = {0};
	r = gem_new(&l1, 0.9f, t);
	rule_join(r, 7, err);
	commit1(r, 7, d1, 0, t, &ver, NULL, &st, err);
	is_near(t[0], 1, 1e-6, "single worker: first commit π = 1");
	commit1(r, 7, d2, 1, t, &ver, NULL, &st, err);
	is_near(st.all.pi_mean, 2.8, 1e-5, "momentum accumulates over two commits: π = 2.8");
	is_near(t[0], 2.4, 1e-5, "θ = θ + μ·m + Δ as sequential momentum SGD");
	/* m = 0.9·1.4 + 0.01 = 1.27, π = 127 → π_max = 5 */
	commit1(r, 7, d3, 2, t, &ver, NULL, &st, err);
	is_near(st.all.pi_mean, 5, 0, "π clamped at π_max = 5");
	is_near(st.all.clampedmax, 1, 0, "fraction clamped to π_max = 1");
	is_near(t[0], 2.4 + 0.05, 1e-5, "θ moved by π_max·Δθ");
	/* Δθ = 0 with m ≠ 0: κ|m|/ε is huge, clamps to π_max, θ += 5·0 */
	{
		float before = t[0];
		commit1(r, 7, z, 3, t, &ver, NULL, &st, err);
		ok(t[0] == before, "Δθ = 0 leaves θ as it was");
	}
	ok(isfinite(st.all.pi_mean) && isfinite(st.all.scale), "Δθ = 0: finite statistics");
	rule_destroy(r);
}

/* ε = 0: Δθ = 0, m = 0, θ = s gives 0/0; π must be 0, not NaN */
static void eps_zero(void)
{
	struct layout l1 = layout_n(1);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	struct rule_config c;
	float t[1] = {1}, z[1] = {0};
	rule_config_default("gem", &c, err);
	c.eps = 0;
	ok(rule_create(&c, &l1, t, &r, err) == 0, "ε = 0 is allowed");
	rule_join(r, 0, err);
	commit1(r, 0, z, 0, t, &ver, NULL, &st, err);
	ok(t[0] == 1 && st.all.pi_mean == 0, "ε = 0 and 0/0: π = 0, θ unchanged");
	rule_destroy(r);
}

/* rule_sent: a pull resets s_w. Worker 0 and 1 join at 0; worker 1 moves θ to 1; worker 0
 * pulls; its commit then sees |θ − s_0| = 0 and π = 1. Without the pull π = (1−1)/1 = 0. */
static void pull_resets_s(void)
{
	struct layout l1 = layout_n(1);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	float t[1] = {0}, d[1] = {1};
	r = gem_new(&l1, 0.9f, t);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	commit1(r, 1, d, 0, t, &ver, NULL, &st, err);
	rule_sent(r, 0);
	commit1(r, 0, d, 1, t, &ver, NULL, &st, err);
	is_near(st.all.pi_mean, 1, 1e-6, "after rule_sent, s_w is the θ pulled");
	rule_destroy(r);
}

/* tensor_stats off: no medians, the cheap statistics stay */
static void no_tensor_stats(void)
{
	size_t sizes[2] = {2, 1};
	struct layout l = layout_of(sizes, 2);
	float db[3] = {1.0f, 0.125f, -0.5f};
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	struct rule_config c;
	float t[3] = {1, 2, 3};
	rule_config_default("gem", &c, err);
	c.tensor_stats = 0;
	rule_create(&c, &l, t, &r, err);
	rule_join(r, 0, err);
	st.t[0].pi_median = 42;
	commit1(r, 0, db, 0, t, &ver, NULL, &st, err);
	ok(st.t[0].pi_median == 0 && st.all.pi_median == 0, "tensor_stats off: no medians");
	is_near(st.all.pi_mean, 1, 1e-6, "tensor_stats off: mean π still there (first commit: π = 1)");
	ok(commit1(r, 3, db, 0, t, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "a worker that never joined is refused: %s", err);
	ok(rule_join(r, 0, err) == GEM_EUSAGE, "joining twice is refused: %s", err);
	ok(leave1(r, 0, t, &ver, NULL, err) == 0 &&
		   commit1(r, 0, db, 1, t, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "a worker that left is refused");
	ok(rule_join(r, 0, err) == 0, "and may join again");
	rule_destroy(r);
}

/* gem_ref pull against commit on the same four commits, κ = 1, μ = 0.9, ε = 0.25, one
 * float, workers A (0) and B (1) joined at θ = 0. By hand, pull (commit where it differs):
 *   A, Δ = 1:    m_A = 1, |θ − s_A| = 0, π = 1/|1 + 0.25| = 0.8 (1/(1 + 0.25), the same);
 *                θ = 0.8; s_A ← 0 (θ before; commit: 0.8)
 *   B, Δ = −0.5: m_B = −0.5, |θ − s_B| = 0.8, π = (0.5 − 0.8)/… → 0; θ = 0.8, s_B ← 0.8
 *   A, Δ = 0.5:  m_A = 0.9 + 0.5 = 1.4; |θ − s_A| = 0.8 (A's own 0.8 counts; commit: 0),
 *                π = (1.4 − 0.8)/0.75 = 0.8 (commit: 1.4/0.75 = 28/15); θ = 1.2 (commit:
 *                0.8 + 14/15); s_A ← 0.8
 *   B, Δ = −0.5: m_B = −0.45 − 0.5 = −0.95; |θ − s_B| = 0.4, ε inside: |−0.5 + 0.25| = 0.25,
 *                π = (0.95 − 0.4)/0.25 = 2.2, θ = 1.2 − 1.1 = 0.1
 *                (commit: |θ − s_B| = 14/15, π = (0.95 − 14/15)/0.75 = 1/45, θ = 1.7222…) */
static void gem_ref_both(void)
{
	struct layout l1 = layout_n(1);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];

	for (int pull = 0; pull <= 1; pull++) {
		struct rule_config c;
		float t[1] = {0}, d1[1] = {1}, d2[1] = {-0.5f}, d3[1] = {0.5f};
		const char *v = pull ? "pull" : "commit";
		uint64_t ver = 0;
		rule_config_default("gem", &c, err);
		ok(c.gem_ref == RULE_GEM_REF_COMMIT, "gem_ref is commit by default");
		c.gem_ref = rule_gem_ref_parse(v);
		c.eps = 0.25f;
		ok(rule_create(&c, &l1, t, &r, err) == 0 && rule_join(r, 0, err) == 0 &&
			   rule_join(r, 1, err) == 0, "%s: gem rule, A and B joined", v);
		commit1(r, 0, d1, 0, t, &ver, NULL, &st, err);
		is_near(t[0], 0.8, 1e-6, "%s: A's first commit: π = 0.8", v);
		commit1(r, 1, d2, 0, t, &ver, NULL, &st, err);
		ok(t[0] == 0.8f && st.all.clamped0 == 1, "%s: B's first commit: π clamped to 0", v);
		commit1(r, 0, d3, 1, t, &ver, NULL, &st, err);
		is_near(st.all.pi_mean, pull ? 0.8 : 28.0 / 15, 1e-6,
			"%s: A again: π = %s", v, pull ? "0.8, A's own update in |θ − s_A|" : "28/15");
		is_near(t[0], pull ? 1.2 : 0.8 + 14.0 / 15, 1e-6, "%s: A again: θ", v);
		commit1(r, 1, d2, 2, t, &ver, NULL, &st, err);
		is_near(st.all.pi_mean, pull ? 2.2 : 1.0 / 45, 1e-5,
			"%s: B again: π = %s", v, pull ? "2.2, ε inside |Δθ + ε|" : "1/45");
		is_near(t[0], pull ? 0.1 : 0.8 + 14.0 / 15 - 0.5 / 45, 1e-5, "%s: B again: θ", v);
		rule_destroy(r);
	}
}

/* pull: Δθ = −ε makes the denominator 0: κ|m| > |θ − s| gives +∞, clamped to π_max */
static void pull_minus_eps(void)
{
	struct layout l1 = layout_n(1);
	struct rule_stats st;
	struct rule *r;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	struct rule_config c;
	float t[1] = {1}, d[1] = {-0.25f};
	rule_config_default("gem", &c, err);
	c.gem_ref = RULE_GEM_REF_PULL;
	c.eps = 0.25f;
	rule_create(&c, &l1, t, &r, err);
	rule_join(r, 0, err);
	ok(commit1(r, 0, d, 0, t, &ver, NULL, &st, err) == RULE_APPLIED &&
		   st.all.clampedmax == 1 && t[0] == 1 - 5 * 0.25f,
	   "pull, Δθ = −ε: π = π_max, θ finite");
	rule_destroy(r);
}

int main(void)
{
	two_workers();
	one_worker();
	eps_zero();
	pull_resets_s();
	no_tensor_stats();
	gem_ref_both();
	pull_minus_eps();
	ok(rule_gem_ref_parse("pull") == RULE_GEM_REF_PULL &&
		   rule_gem_ref_parse("commit") == RULE_GEM_REF_COMMIT && rule_gem_ref_parse("pul") < 0 &&
		   rule_gem_ref_parse("") < 0,
	   "gem_ref names: commit, pull, nothing else");

	vector_matches_scalar(0);
	vector_matches_scalar(1);
	medians_match_sort(0);
	medians_match_sort(12);
	medians_match_sort(1000);
	return done_testing();
}
