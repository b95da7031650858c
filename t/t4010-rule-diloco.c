/* t4010: DiLoCo's outer step, worked by hand; with η_o = 1 and μ_o = 0 the same θ as sync with
 * μ = 0 and as dma, bit for bit, for the same commits; the worker's inner steps (their momentum
 * kept from one window to the next); leaves, config and a checkpoint mid-round. async-diloco:
 * the outer step on each arrival and delayed Nesterov, worked by hand, and a checkpoint
 * mid-group; dynamic local updates: a slower worker is told a smaller H. */
#include "base/err.h"
#include "base/rng.h"
#include "nn/optim.h"
#include "rules/worker_half.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 37 /* blocks of 4 and a tail */
#define W 3

static int delayed; /* async-diloco's N for the next make */

static struct rule *make(const char *name, const float *theta, size_t n, int nworkers,
			 float outer_lr, float outer_momentum, float momentum)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	rule_config_default(name, &c, err);
	c.nworkers = nworkers;
	c.momentum = momentum;
	c.outer_lr = outer_lr;
	c.outer_momentum = outer_momentum;
	c.delayed_nesterov = delayed;
	return rule_of(&c, theta, n);
}

static void config(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	struct rule *r;
	struct layout l = layout_n(2);
	const float t[2] = {0, 0};
	json_t *j, *o;
	ok(rule_config_default("diloco", &c, err) == 0 && c.window == 50 && c.outer_lr == 0.7f &&
		   c.outer_momentum == 0.9f,
	   "diloco's defaults: H = 50, η_o = 0.7, μ_o = 0.9");
	ok(rule_describe("diloco")->rounds && rule_describe("diloco")->sends == RULE_SENDS_OUTER &&
		   !rule_describe("diloco")->background,
	   "diloco: rounds of inner steps, waited for");
	ok(rule_create(&c, &l, t, &r, err) == GEM_EUSAGE && strstr(err, "nworkers"),
	   "diloco without nworkers is refused: %s", err);
	o = json_pack("{s:s, s:i, s:i, s:f, s:f}", "name", "diloco", "window", 10, "nworkers", 4,
		      "outer_lr", 0.5, "outer_momentum", 0.0);
	ok(rule_config_from_json(o, &c, err) == 0 && c.window == 10 && c.outer_lr == 0.5f &&
		   c.outer_momentum == 0,
	   "run.json's window, outer_lr and outer_momentum");
	json_decref(o);
	j = rule_config_to_json(&c);
	ok(j && json_real_value(json_object_get(j, "outer_lr")) == 0.5 &&
		   json_object_get(j, "outer_momentum") && json_object_get(j, "window") &&
		   !json_object_get(j, "kappa"),
	   "diloco records its fields and no other rule's");
	json_decref(j);
	o = json_pack("{s:s, s:f, s:i}", "name", "diloco", "outer_lr", 0.0, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE && strstr(err, "outer_lr"),
	   "outer_lr 0 is refused: %s", err);
	json_decref(o);
	o = json_pack("{s:s, s:f, s:i}", "name", "diloco", "outer_momentum", 1.0, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE && strstr(err, "outer_momentum"),
	   "outer_momentum 1 is refused: %s", err);
	json_decref(o);
	o = json_pack("{s:s, s:f, s:i}", "name", "sync", "outer_lr", 0.5, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE && strstr(err, "not a field"),
	   "outer_lr is not sync's: %s", err);
	json_decref(o);
}

/* η_o = 0.5, μ_o = 0.5, 2 workers, θ = (0, 0), every number exact in binary:
 * round 1: u = (1, 2), (3, −2): ū = (2, 0), v = (2, 0), θ = 0.5·((2, 0) + 0.5·(2, 0)) = (1.5, 0)
 * round 2: u = (2, 2), (0, 2): ū = (1, 2), v = 0.5·(2, 0) + (1, 2) = (2, 2),
 *          θ = (1.5, 0) + 0.5·((1, 2) + 0.5·(2, 2)) = (2.5, 1.5)
 * round 3: worker 1 leaves after worker 0's u = (2, −4): ū = (2, −4), v = (3, −3),
 *          θ = (2.5, 1.5) + 0.5·((2, −4) + (1.5, −1.5)) = (4.25, −1.25) */
static void by_hand(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0};
	int rc;
	r = make("diloco", t, 2, 2, 0.5f, 0.5f, 0.9f);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	ok(commit2(r, 0, 1, 2, 0, t, &ver, err) == RULE_PENDING && ver == 0 && t[0] == 0,
	   "round 1: the first commit waits");
	ok(commit2(r, 1, 3, -2, 0, t, &ver, err) == RULE_APPLIED && ver == 1,
	   "round 1: the second applies it");
	ok(t[0] == 1.5f && t[1] == 0, "θ = η_o·(ū + μ_o·v) = (1.5, 0) (%g, %g)", t[0], t[1]);
	ok(commit2(r, 1, 0, 2, 1, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 0, 2, 2, 1, t, &ver, err) == RULE_APPLIED && ver == 2,
	   "round 2 in the other order");
	ok(t[0] == 2.5f && t[1] == 1.5f, "v = (2, 2), θ = (2.5, 1.5) (%g, %g)", t[0], t[1]);
	ok(commit2(r, 0, 2, -4, 2, t, &ver, err) == RULE_PENDING &&
		   leave1(r, 1, t, &ver, &st, err) == 1 && ver == 3 && st.version == 3,
	   "round 3: a leave closes it with the one commit in");
	ok(t[0] == 4.25f && t[1] == -1.25f, "v = (3, −3), θ = (4.25, −1.25) (%g, %g)", t[0], t[1]);
	ok(commit2(r, 0, 1, 1, 2, t, &ver, err) == GEM_EUSAGE && strstr(err, "old"),
	   "a commit on an older θ is refused: %s", err);
	rule_destroy(r);

	/* the defaults, one worker, u = (1, −2): v = u, θ = 0.7·(u + 0.9·u) */
	t[0] = t[1] = 0;
	ver = 0;
	r = make("diloco", t, 2, 1, 0.7f, 0.9f, 0.9f);
	rule_join(r, 0, err);
	rc = commit2(r, 0, 1, -2, 0, t, &ver, err);
	ok(rc == RULE_APPLIED && t[0] == 0.7f * (1.0f + 0.9f * 1.0f) &&
		   t[1] == 0.7f * (-2.0f + 0.9f * -2.0f),
	   "η_o = 0.7, μ_o = 0.9: θ = 0.7·1.9·u (%g, %g)", t[0], t[1]);
	rule_destroy(r);
}

static void fill(struct rng *g, float *v, float scale)
{
	for (int i = 0; i < N; i++)
		v[i] = scale * (2 * rng_float(g) - 1);
}

/* diloco at η_o = 1, μ_o = 0 and `other` (sync at μ = 0, or dma) given the same commits, with a
 * leave and a join: θ the same bits after every round */
static void same_as(const char *other)
{
	char err[GEM_ERRMAX];
	struct rng g;
	float theta[N], in[N];
	uint64_t va = 0, vb = 0;
	struct rule *a, *b;
	int same = 1, rounds = 0, ra, rb;
	rng_seed(&g, 4010, 0);
	fill(&g, theta, 1);
	a = make("diloco", theta, N, W, 1, 0, 0.9f);
	b = make(other, theta, N, W, 0.7f, 0.9f, 0);
	for (int w = 0; w < W; w++)
		rule_join(a, w, err), rule_join(b, w, err);
	for (int k = 0; k < 20; k++) {
		for (int w = 0; w < W; w++) {
			if (k == 7 && w == 2) {
				ra = rule_leave(a, 2, &va, NULL, err);
				rb = rule_leave(b, 2, &vb, NULL, err);
				same &= ra == rb && ra == 1;
				rounds += ra == 1;
				continue;
			}
			if (k >= 7 && k < 12 && w == 2)
				continue;
			if (k == 12 && w == 2)
				rule_join(a, 2, err), rule_join(b, 2, err);
			fill(&g, in, 0.01f);
			ra = rule_commit(a, w, in, va, &va, NULL, NULL, err);
			rb = rule_commit(b, w, in, vb, &vb, NULL, NULL, err);
			same &= ra == rb && ra >= 0;
			rounds += ra == RULE_APPLIED;
		}
		same &= va == vb && !memcmp(rule_theta(a), rule_theta(b), sizeof theta);
	}
	ok(same && rounds == 20, "diloco (η_o = 1, μ_o = 0) = %s%s: the same θ after each of %d rounds",
	   other, strcmp(other, "sync") ? "" : " (μ = 0)", rounds);
	rule_destroy(a);
	rule_destroy(b);
}

/* The worker's half: H steps of momentum SGD from θ, u = x_H − x_0, and the momentum carried
 * into the next window; with H = 1 and μ = 0, u is −η·g up to the rounding of x_0 − η·g. */
static void inner_steps(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	struct rule_half l;
	struct layout lo = layout_n(N);
	struct optim_config oc = {.kind = OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f, .nesterov = 1};
	struct optim ref;
	struct rng g;
	float x[N], xr[N], theta[N], grad[N], worst = 0;
	const float *u;
	int same = 1, near = 1;
	rule_config_default("diloco", &c, err);
	c.nworkers = 1;
	c.window = 3;
	rng_seed(&g, 4010, 1);
	fill(&g, x, 1);
	ok(rule_half_init(&l, &c, &lo, &oc, err) == 0, "the worker's half");
	optim_init(&ref, &oc, &lo, err);
	rule_half_start(&l, x, 0, 0);
	memcpy(xr, x, sizeof x);
	for (int win = 0; win < 2; win++) {
		memcpy(theta, x, sizeof x);
		rule_half_begin(&l, x);
		for (int k = 0; k < c.window; k++) {
			fill(&g, grad, 1);
			rule_half_step(&l, x, grad);
			optim_step(&ref, xr, grad);
		}
		u = rule_half_commit(&l, x);
		for (int i = 0; i < N; i++)
			same &= u[i] == xr[i] - theta[i] && x[i] == xr[i];
		/* the server's θ: x starts over from it, the momentum does not */
		for (int i = 0; i < N; i++)
			theta[i] = xr[i] = theta[i] + 0.5f * u[i];
		rule_half_reply(&l, x, theta, 0);
		same &= !memcmp(x, theta, sizeof x);
	}
	ok(same, "u = x_H − x_0 of Nesterov SGD steps whose momentum goes on across windows");
	rule_half_free(&l);
	optim_free(&ref);

	c.window = 1;
	oc.momentum = 0;
	oc.nesterov = 0;
	rule_half_init(&l, &c, &lo, &oc, err);
	rule_half_start(&l, x, 0, 0);
	memcpy(theta, x, sizeof x);
	rule_half_begin(&l, x);
	fill(&g, grad, 1);
	rule_half_step(&l, x, grad);
	u = rule_half_commit(&l, x);
	for (int i = 0; i < N; i++) {
		float d = fabsf(u[i] - -0.1f * grad[i]), ulp = nextafterf(fabsf(x[i]), INFINITY) - fabsf(x[i]);
		near &= d <= ulp / 2;
		worst = fmaxf(worst, d / ulp);
	}
	ok(near, "H = 1, μ = 0: |u + η·g| <= half an ulp of x_1 (worst %.3g ulp)", worst);
	rule_half_free(&l);
}

/* save mid-round, load into a new rule, finish the round in both: the same θ and v */
static void checkpoint(void)
{
	char err[GEM_ERRMAX];
	struct rule *r, *r2;
	struct rule_vec *vecs;
	json_t *meta;
	uint64_t ver = 0, ver2;
	float t[2] = {0, 0}, t2[2];
	int nvec;
	r = make("diloco", t, 2, 2, 0.5f, 0.5f, 0);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	commit2(r, 0, 1, 2, 0, t, &ver, err);
	commit2(r, 1, 3, -2, 0, t, &ver, err);
	commit2(r, 0, 2, 2, 1, t, &ver, err);
	ok(rule_state_save(r, &meta, &vecs, &nvec, err) == 0 && nvec == 2 &&
		   !strcmp(vecs[0].name, "v") && !strcmp(vecs[1].name, "sum"),
	   "state: the outer momentum v and the round's sum");
	r2 = make("diloco", t, 2, 2, 0.5f, 0.5f, 0);
	ok(rule_state_load(r2, meta, vecs, nvec, err) == 0, "state loads into a new rule");
	free(vecs);
	json_decref(meta);
	memcpy(t2, t, sizeof t);
	ver2 = ver;
	ok(commit2(r2, 0, 9, 9, 1, t2, &ver2, err) == GEM_EUSAGE, "loaded: worker 0 is in the round");
	ok(commit2(r, 1, 0, 2, 1, t, &ver, err) == RULE_APPLIED &&
		   commit2(r2, 1, 0, 2, 1, t2, &ver2, err) == RULE_APPLIED,
	   "both close round 2");
	ok(t[0] == 2.5f && t[1] == 1.5f && t2[0] == t[0] && t2[1] == t[1] && ver2 == ver,
	   "the same θ = (2.5, 1.5) after the round trip");
	rule_destroy(r);
	rule_destroy(r2);
}

/* async-diloco, η_o = 0.5, μ_o = 0.5, θ = (0, 0), numbers exact in binary.
 * Nesterov on each arrival: u = (2, 0): v = (2, 0), θ = 0.5·((2, 0) + (1, 0)) = (1.5, 0);
 * u = (0, 2) from a worker one version behind: v = (1, 2), θ = (1.5, 0) + 0.5·((0, 2) +
 * (0.5, 1)) = (1.75, 1.5). */
static void async_by_hand(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0};
	int rc;
	ok(!rule_describe("async-diloco")->rounds &&
		   rule_describe("async-diloco")->sends == RULE_SENDS_OUTER,
	   "async-diloco: no rounds, the inner steps of diloco");
	delayed = 0;
	r = make("async-diloco", t, 2, 0, 0.5f, 0.5f, 0.9f);
	ok(r != NULL, "async-diloco needs no nworkers");
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	rc = commit1(r, 0, (float[]){2, 0}, 0, t, &ver, NULL, &st, err);
	ok(rc == RULE_APPLIED && ver == 1 && t[0] == 1.5f && t[1] == 0,
	   "u = (2, 0) applied on arrival: θ = (1.5, 0) (%g, %g)", t[0], t[1]);
	rc = commit1(r, 1, (float[]){0, 2}, 0, t, &ver, NULL, &st, err);
	ok(rc == RULE_APPLIED && st.staleness == 1 && t[0] == 1.75f && t[1] == 1.5f,
	   "a stale u = (0, 2) too (τ = 1): θ = (1.75, 1.5) (%g, %g)", t[0], t[1]);
	rule_destroy(r);
}

/* Delayed Nesterov, N = 2, η_o = 0.5, μ_o = 0.5, θ = (0, 0):
 * 1: u = (2, 0): a = (2, 0), plain: θ = (1, 0)
 * 2: u = (0, 2): a = (2, 2), v = a/2 = (1, 1), θ = (1, 0) + 0.5·((0, 2) + 0.5·(1, 1)) = (1.25, 1.25)
 * 3: u = (2, 2): a = (2, 2), plain: θ = (2.25, 2.25)
 * 4: u = (4, 0): a = (6, 2), v = 0.5·(1, 1) + (3, 1) = (3.5, 1.5),
 *    θ = (2.25, 2.25) + 0.5·((4, 0) + 0.5·(3.5, 1.5)) = (5.125, 2.625)
 * and the same with a checkpoint after arrival 3, in the middle of a group. */
static void delayed_nesterov(void)
{
	static const float u[4][2] = {{2, 0}, {0, 2}, {2, 2}, {4, 0}};
	static const float want[4][2] = {{1, 0}, {1.25f, 1.25f}, {2.25f, 2.25f}, {5.125f, 2.625f}};
	char err[GEM_ERRMAX];
	struct rule *r, *r2;
	struct rule_vec *vecs;
	json_t *meta;
	uint64_t ver = 0, ver2;
	float t[2] = {0, 0}, t2[2];
	int good = 1, nvec;
	delayed = 2;
	r = make("async-diloco", t, 2, 0, 0.5f, 0.5f, 0);
	rule_join(r, 0, err);
	for (int k = 0; k < 3; k++) {
		good &= commit1(r, 0, u[k], ver, t, &ver, NULL, NULL, err) == RULE_APPLIED &&
			t[0] == want[k][0] && t[1] == want[k][1];
		if (!good)
			diag("arrival %d: θ = (%g, %g)", k + 1, t[0], t[1]);
	}
	ok(good, "arrivals 1-3: plain, momentum with the mean of two, plain");
	ok(rule_state_save(r, &meta, &vecs, &nvec, err) == 0 && nvec == 2 &&
		   !strcmp(vecs[0].name, "v") && !strcmp(vecs[1].name, "a") && vecs[1].data[0] == 2,
	   "state mid-group: v and a = (2, 2)");
	r2 = make("async-diloco", t, 2, 0, 0.5f, 0.5f, 0);
	ok(rule_state_load(r2, meta, vecs, nvec, err) == 0, "state loads into a new rule");
	free(vecs);
	json_decref(meta);
	memcpy(t2, t, sizeof t);
	ver2 = ver;
	ok(commit1(r, 0, u[3], ver, t, &ver, NULL, NULL, err) == RULE_APPLIED &&
		   commit1(r2, 0, u[3], ver2, t2, &ver2, NULL, NULL, err) == RULE_APPLIED,
	   "arrival 4 in both");
	ok(t[0] == 5.125f && t[1] == 2.625f && t2[0] == t[0] && t2[1] == t[1],
	   "the 4th takes v = (3.5, 1.5): θ = (5.125, 2.625) (%g, %g), the loaded rule too", t[0],
	   t[1]);
	rule_destroy(r);
	rule_destroy(r2);
	delayed = 0;
}

/* Dynamic local updates: H_w = round(H · rate / fastest) within [1, H]. */
static void dynamic_window(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	json_t *o, *j;
	rule_config_default("async-diloco", &c, err);
	c.window = 8;
	ok(!c.dynamic_local_updates && rule_dynamic_window(&c, 1, 4) == 8,
	   "off by default: every worker takes H = 8");
	c.dynamic_local_updates = 1;
	ok(rule_dynamic_window(&c, 4, 4) == 8, "the fastest worker takes H = 8");
	ok(rule_dynamic_window(&c, 1, 4) == 2, "a worker 4 times slower takes 2 (%d)",
	   rule_dynamic_window(&c, 1, 4));
	ok(rule_dynamic_window(&c, 3, 4) == 6 && rule_dynamic_window(&c, 2.2, 4) == 4,
	   "3/4 of the speed: 6; 0.55: round(4.4) = 4");
	ok(rule_dynamic_window(&c, 0.01, 4) == 1, "a very slow worker takes 1, not 0");
	ok(rule_dynamic_window(&c, 0, 4) == 8 && rule_dynamic_window(&c, 1, 0) == 8 &&
		   rule_dynamic_window(&c, NAN, 4) == 8 && rule_dynamic_window(&c, INFINITY, 4) == 8,
	   "a speed not measured (0, NaN, inf): H");
	o = json_pack("{s:s, s:i, s:b}", "name", "async-diloco", "window", 8,
		      "dynamic_local_updates", 1);
	ok(rule_config_from_json(o, &c, err) == 0 && c.dynamic_local_updates == 1,
	   "run.json's dynamic_local_updates");
	j = rule_config_to_json(&c);
	ok(j && json_is_true(json_object_get(j, "dynamic_local_updates")), "and back into run.json");
	json_decref(j);
	json_decref(o);
	o = json_pack("{s:s, s:i}", "name", "async-diloco", "dynamic_local_updates", 1);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE && strstr(err, "true or false"),
	   "dynamic_local_updates is true or false: %s", err);
	json_decref(o);
	o = json_pack("{s:s, s:b, s:i}", "name", "diloco", "dynamic_local_updates", 1, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE && strstr(err, "not a field"),
	   "not a field of diloco (its rounds wait for every worker anyway): %s", err);
	json_decref(o);
}

int main(void)
{
	config();
	by_hand();
	same_as("sync");
	same_as("dma");
	inner_steps();
	checkpoint();
	async_by_hand();
	delayed_nesterov();
	dynamic_window();
	return done_testing();
}
