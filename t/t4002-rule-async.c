/* t4002: DOWNPOUR, DynSGD, EASGD and DC-ASGD on small cases worked by hand; τ across workers. */
#include "base/err.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <string.h>

static struct rule *make(const char *name, const float *theta, size_t n, float lr, float alpha,
			 int nworkers)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	rule_config_default(name, &c, err);
	c.lr = lr;
	c.alpha = alpha;
	c.nworkers = nworkers;
	return rule_of(&c, theta, n);
}

/* downpour: θ ← θ + Δ, whatever τ */
static void downpour_adds(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {1, 2}, d[2] = {0.5f, -1};
	r = make("downpour", t, 2, 0.01f, 0, 0);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	ok(commit1(r, 0, d, 0, t, &ver, NULL, &st, err) == RULE_APPLIED && t[0] == 1.5f &&
		   t[1] == 1,
	   "downpour adds Δ");
	ok(commit1(r, 1, d, 0, t, &ver, NULL, &st, err) == RULE_APPLIED && t[0] == 2 &&
		   t[1] == 0 && st.staleness == 1 && ver == 2,
	   "downpour adds a stale Δ whole (τ = 1)");
	ok(st.ntensors == 0, "no π statistics outside gem");
	rule_destroy(r);
}

/* dynsgd: θ ← θ + Δ/(τ+1); τ counts the commits of other workers in between */
static void dynsgd_divides(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[1] = {0}, d[1] = {1};
	r = make("dynsgd", t, 1, 0.01f, 0, 0);
	for (int w = 0; w < 4; w++)
		rule_join(r, w, err);
	commit1(r, 0, d, 0, t, &ver, NULL, &st, err);
	ok(st.staleness == 0 && t[0] == 1, "dynsgd τ = 0: Δ/1");
	commit1(r, 1, d, 0, t, &ver, NULL, &st, err);
	ok(st.staleness == 1 && t[0] == 1.5f, "dynsgd τ = 1: Δ/2");
	commit1(r, 2, d, 0, t, &ver, NULL, &st, err);
	is_near(t[0], 1.5 + 1.0 / 3, 1e-6, "dynsgd τ = 2: Δ/3");
	ok(st.staleness == 2, "τ = 2 for worker 2 at base 0");
	commit1(r, 3, d, 0, t, &ver, NULL, &st, err);
	ok(st.staleness == 3 && ver == 4, "τ = 3 for worker 3 at base 0, version 4");
	commit1(r, 0, d, 1, t, &ver, NULL, &st, err);
	ok(st.staleness == 3, "worker 0 at base 1 after 3 other commits: τ = 3");
	rule_destroy(r);
}

/* easgd, n = 2 → α = 0.9/2 = 0.45; θ = (1, 2), the worker's x = (3, 0):
 *   d = 0.45·((3, 0) − (1, 2)) = (0.9, −0.9);  θ = (1.9, 1.1);  the worker's x − d = (2.1, 0.9) */
static void easgd_elastic(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {1, 2}, x[2] = {3, 0}, d[2] = {0, 0};
	r = make("easgd", t, 2, 0.01f, 0, 2);
	rule_join(r, 0, err);
	ok(commit1(r, 0, x, 0, t, &ver, d, &st, err) == RULE_APPLIED, "easgd commit");
	is_near(d[0], 0.9, 1e-6, "easgd d0 = α(x0 − θ0)");
	is_near(d[1], -0.9, 1e-6, "easgd d1 = α(x1 − θ1)");
	is_near(t[0], 1.9, 1e-6, "easgd θ0 + d0");
	is_near(t[1], 1.1, 1e-6, "easgd θ1 + d1");
	ok(commit1(r, 0, x, 1, t, &ver, NULL, &st, err) == GEM_EUSAGE,
	   "easgd without a reply buffer is refused: %s", err);
	rule_destroy(r);

	/* nworkers unset: α = 0.9/(workers joined) = 0.3 with 3 */
	t[0] = 0, t[1] = 0, x[0] = 1, x[1] = -1, ver = 0;
	r = make("easgd", t, 2, 0.01f, 0, 0);
	for (int w = 0; w < 3; w++)
		rule_join(r, w, err);
	commit1(r, 2, x, 0, t, &ver, d, &st, err);
	is_near(d[0], 0.3, 1e-6, "easgd without nworkers: α = 0.9/(workers joined)");
	rule_destroy(r);

	/* explicit α = 0.5 */
	t[0] = 0, t[1] = 0, ver = 0;
	r = make("easgd", t, 2, 0.01f, 0.5f, 4);
	rule_join(r, 0, err);
	commit1(r, 0, x, 0, t, &ver, d, &st, err);
	ok(d[0] == 0.5f && d[1] == -0.5f && t[0] == 0.5f, "easgd with α = 0.5");
	rule_destroy(r);
}

/* dcasgd, λ = 0.04, η = 0.1: θ ← θ + Δ − (λ/η)·Δ²·(θ − w_bak) with λ/η = 0.4.
 * A and B join at θ = (1, 1). A commits Δ = (0.1, 0.2): θ = w_bak(A), no compensation:
 * θ = (1.1, 1.2). B commits Δ = (0.5, 0) with w_bak(B) = (1, 1):
 *   θ − w_bak = (0.1, 0.2);  0.4·(0.25, 0)·(0.1, 0.2) = (0.01, 0)
 *   θ = (1.1 + 0.5 − 0.01, 1.2 + 0 − 0) = (1.59, 1.2) */
static void dcasgd_compensates(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {1, 1}, da[2] = {0.1f, 0.2f}, db[2] = {0.5f, 0}, before[2];
	r = make("dcasgd", t, 2, 0.1f, 0, 0);
	ok(rule_config_of(r)->lambda_dc == 0.04f, "dcasgd λ_dc defaults to 0.04 (DC-ASGD-c)");
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	commit1(r, 0, da, 0, t, &ver, NULL, &st, err);
	ok(t[0] == 1 + 0.1f && t[1] == 1 + 0.2f, "dcasgd: no compensation when θ = w_bak");
	commit1(r, 1, db, 0, t, &ver, NULL, &st, err);
	is_near(t[0], 1.59, 1e-6, "dcasgd: compensation −0.01 when θ moved since w_bak");
	is_near(t[1], 1.2, 1e-6, "dcasgd: no compensation where Δ = 0");
	/* B's w_bak is now the θ its commit left: its next commit is uncompensated */
	memcpy(before, t, sizeof before);
	commit1(r, 1, db, 2, t, &ver, NULL, &st, err);
	ok(t[0] == before[0] + 0.5f, "dcasgd: w_bak ← θ after the worker's own commit");
	/* A is 2 versions behind; after a pull (rule_sent) it is not */
	memcpy(before, t, sizeof before);
	rule_sent(r, 0);
	commit1(r, 0, db, 3, t, &ver, NULL, &st, err);
	ok(t[0] == before[0] + 0.5f, "dcasgd: w_bak ← θ sent on a pull");
	rule_destroy(r);
}

int main(void)
{
	downpour_adds();
	dynsgd_divides();
	easgd_elastic();
	dcasgd_compensates();
	return done_testing();
}
