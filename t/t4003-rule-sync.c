/* t4003: synchronous momentum SGD: the barrier of a round, refusals, leaves, and the algebra
 * "n workers at batch b = sequential momentum SGD at batch n·b" on linear least squares. */
#include "base/err.h"
#include "base/rng.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <string.h>

#define D 5  /* features */
#define NW 4 /* workers */
#define B 8  /* batch per worker */
#define STEPS 25

static struct rule *make_sync(const float *theta, size_t n, int nworkers, float momentum)
{
	struct layout l = layout_n(n);
	struct rule_config c;
	struct rule *r = NULL;
	char err[GEM_ERRMAX];
	rule_config_default("sync", &c, err);
	c.nworkers = nworkers;
	c.momentum = momentum;
	if (rule_create(&c, &l, theta, &r, err) < 0)
		diag("rule_create: %s", err);
	return r;
}

/* Δ = −η·(1/nb)·Σ (a·θ − y)·a over samples [first, first + nb) of the least-squares loss ½(a·θ − y)² */
static void lsq_update(const float a[][D], const float *y, int first, int nb, const float *theta,
		       float eta, float *delta)
{
	float g[D] = {0};
	for (int i = first; i < first + nb; i++) {
		float r = -y[i];
		for (int k = 0; k < D; k++)
			r += a[i][k] * theta[k];
		for (int k = 0; k < D; k++)
			g[k] += r * a[i][k];
	}
	for (int k = 0; k < D; k++)
		delta[k] = -eta * g[k] / (float)nb;
}

/* the barrier, 3 workers, μ = 0.9, θ = (0, 0):
 * round 1: Δ = (1, 2), (2, 0), (3, 1): mean (2, 1), v = (2, 1), θ = (2, 1)
 * round 2: Δ = (1, 1) each: v = 0.9·(2, 1) + (1, 1) = (2.8, 1.9), θ = (4.8, 2.9) */
static void barrier(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0}, d0[2] = {1, 2}, d1[2] = {2, 0}, d2[2] = {3, 1}, one[2] = {1, 1};
	struct layout l = layout_n(2);
	struct rule_config c;
	rule_config_default("sync", &c, err);
	ok(rule_create(&c, &l, t, &r, err) == GEM_EUSAGE && strstr(err, "nworkers"),
	   "sync without nworkers is refused: %s", err);
	r = make_sync(t, 2, 3, 0.9f);
	for (int w = 0; w < 3; w++)
		rule_join(r, w, err);
	ok(rule_join(r, 3, err) == GEM_EUSAGE, "a 4th worker is refused: %s", err);
	ok(commit1(r, 0, d0, 0, t, &ver, NULL, &st, err) == RULE_PENDING, "first commit pending");
	ok(commit1(r, 1, d1, 0, t, &ver, NULL, &st, err) == RULE_PENDING, "second commit pending");
	ok(ver == 0 && t[0] == 0 && t[1] == 0, "θ and version wait for the round");
	ok(commit1(r, 0, d0, 0, t, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "a second commit in the round is refused: %s", err);
	ok(commit1(r, 2, d2, 0, t, &ver, NULL, &st, err) == RULE_APPLIED, "third commit applies");
	ok(ver == 1 && st.version == 1 && st.staleness == 0, "one version per round");
	ok(t[0] == 2 && t[1] == 1, "θ = θ + v, v = mean(Δ) = (2, 1)");
	ok(commit1(r, 0, one, 0, t, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "an update of the last round is refused: %s", err);
	commit1(r, 0, one, 1, t, &ver, NULL, &st, err);
	commit1(r, 2, one, 1, t, &ver, NULL, &st, err);
	commit1(r, 1, one, 1, t, &ver, NULL, &st, err);
	is_near(t[0], 4.8, 1e-6, "round 2: v = μv + mean(Δ), θ0 = 4.8");
	is_near(t[1], 2.9, 1e-6, "round 2: θ1 = 2.9");

	/* round 3: workers 0 and 1 commit (1, 1) and (3, 3), worker 2 leaves: the round completes
	 * with those two: v = 0.9·(2.8, 1.9) + (2, 2) = (4.52, 3.71) */
	float d3[2] = {3, 3};
	ok(commit1(r, 0, one, 2, t, &ver, NULL, &st, err) == RULE_PENDING &&
		   commit1(r, 1, d3, 2, t, &ver, NULL, &st, err) == RULE_PENDING,
	   "round 3: two pending");
	ok(leave1(r, 2, t, &ver, &st, err) == 1 && ver == 3 && st.version == 3,
	   "the third worker leaves: the round completes");
	is_near(t[0], 4.8 + 4.52, 1e-5, "round 3 averaged over the two remaining");
	ok(commit1(r, 0, one, 3, t, &ver, NULL, &st, err) == RULE_PENDING &&
		   commit1(r, 1, one, 3, t, &ver, NULL, &st, err) == RULE_APPLIED,
	   "round 4 waits for the two remaining only");
	ok(rule_join(r, 5, err) == 0, "a replacement worker joins");
	ok(commit1(r, 0, one, 4, t, &ver, NULL, &st, err) == RULE_PENDING &&
		   commit1(r, 1, one, 4, t, &ver, NULL, &st, err) == RULE_PENDING &&
		   commit1(r, 5, one, 4, t, &ver, NULL, &st, err) == RULE_APPLIED,
	   "round 5 waits for the replacement too");
	ok(rule_join(r, 6, err) == GEM_EUSAGE, "still no more than nworkers");
	/* a committed worker leaves mid-round: its update stays in the round */
	commit1(r, 0, one, 5, t, &ver, NULL, &st, err);
	ok(leave1(r, 0, t, &ver, &st, err) == 0 && ver == 5, "a committed worker leaves, round pending");
	ok(commit1(r, 1, one, 5, t, &ver, NULL, &st, err) == RULE_PENDING &&
		   commit1(r, 5, one, 5, t, &ver, NULL, &st, err) == RULE_APPLIED,
	   "the round completes with the two remaining");
	rule_destroy(r);
}

/* n workers at batch b vs one worker at batch n·b on the same samples, and a hand-written
 * sequential momentum SGD: v ← μv − η·∇L(θ) ; θ ← θ + v */
static void n_workers_one_batch(void)
{
	char err[GEM_ERRMAX];
	static float a[STEPS * NW * B][D], y[STEPS * NW * B];
	float tn[D] = {0}, t1[D] = {0}, tref[D] = {0}, vref[D] = {0}, delta[D];
	const float eta = 0.05f, mu = 0.9f;
	struct rule *rn = make_sync(tn, D, NW, mu), *r1 = make_sync(t1, D, 1, mu);
	struct rng g;
	uint64_t vn = 0, v1 = 0;
	double maxdiff1 = 0, maxdiffref = 0, scale = 0;
	int pend = 1;

	rng_seed(&g, 4003, 1);
	for (int i = 0; i < STEPS * NW * B; i++) {
		y[i] = 0;
		for (int k = 0; k < D; k++) {
			a[i][k] = (float)rng_normal(&g);
			y[i] += a[i][k] * (float)(k + 1) / D;
		}
		y[i] += 0.1f * (float)rng_normal(&g);
	}
	for (int w = 0; w < NW; w++)
		rule_join(rn, w, err);
	rule_join(r1, 0, err);
	for (int s = 0; s < STEPS; s++) {
		int first = s * NW * B;
		for (int w = 0; w < NW; w++) {
			int rc;
			lsq_update(a, y, first + w * B, B, tn, eta, delta);
			rc = commit1(rn, w, delta, vn, tn, &vn, NULL, NULL, err);
			if (rc != (w == NW - 1 ? RULE_APPLIED : RULE_PENDING))
				pend = 0;
		}
		lsq_update(a, y, first, NW * B, t1, eta, delta);
		commit1(r1, 0, delta, v1, t1, &v1, NULL, NULL, err);
		lsq_update(a, y, first, NW * B, tref, eta, delta);
		for (int k = 0; k < D; k++) {
			vref[k] = mu * vref[k] + delta[k];
			tref[k] += vref[k];
		}
	}
	for (int k = 0; k < D; k++) {
		maxdiff1 = fmax(maxdiff1, fabs(tn[k] - t1[k]));
		maxdiffref = fmax(maxdiffref, fabs(tn[k] - tref[k]));
		scale = fmax(scale, fabs(tref[k]));
	}
	diag("θ after %d rounds: %.6f %.6f %.6f ... (target 0.2 0.4 0.6 ...)", STEPS, tn[0], tn[1], tn[2]);
	ok(pend && vn == STEPS && v1 == STEPS, "%d rounds of %d workers, one version each", STEPS, NW);
	ok(scale > 0.1, "the problem moved θ");
	ok(maxdiff1 <= 1e-5 * scale, "sync, %d workers at batch %d = sync, 1 worker at batch %d (max diff %g)",
	   NW, B, NW * B, maxdiff1);
	ok(maxdiffref <= 1e-5 * scale, "= sequential momentum SGD at batch %d (max diff %g)", NW * B,
	   maxdiffref);
	rule_destroy(rn);
	rule_destroy(r1);
}

int main(void)
{
	barrier();
	n_workers_one_batch();
	return done_testing();
}
