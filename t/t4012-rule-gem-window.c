/* t4012: gem with a window of H > 1 inner steps (gem on pseudo-gradients): its config, two
 * cycles of two workers worked by hand (the proxy's momentum is μ_o, not the run's μ), the
 * worker's half the same as async-diloco's bit for bit, a checkpoint between cycles, and a
 * commit whose result would not be finite refused with nothing changed. */
#include "base/err.h"
#include "base/rng.h"
#include "nn/optim.h"
#include "rules/rule.h"
#include "rules/worker_half.h"
#include "rule-test.h"
#include "tap.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#define N 37 /* blocks of 8 and a tail */

/* gem with window H, μ_o = outer_momentum, the run's μ 0.9, ε = 0 (exact by hand) */
static struct rule *make(const float *theta, size_t n, int window, float outer_momentum)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	rule_config_default("gem", &c, err);
	c.window = window;
	c.outer_momentum = outer_momentum;
	c.eps = 0;
	return rule_of(&c, theta, n);
}

static int refused(const char *text, const char *field)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	json_t *o = json_loads(text, 0, NULL);
	int rc = rule_config_from_json(o, &c, err);
	json_decref(o);
	if (rc != GEM_EUSAGE || !strstr(err, field))
		diag("%s: %d, %s", text, rc, err);
	return rc == GEM_EUSAGE && strstr(err, field);
}

static void config(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	json_t *o, *j;
	ok(rule_config_default("gem", &c, err) == 0 && c.window == 1 && c.outer_momentum == 0 &&
		   rule_sends_of(&c) == RULE_SENDS_STEP,
	   "gem's defaults: window 1, μ_o = 0, the worker sends one step");
	ok(rule_config_default("async-diloco", &c, err) == 0 && c.outer_momentum == 0.9f,
	   "async-diloco's μ_o stays DiLoCo's 0.9");
	rule_config_default("gem", &c, err);
	c.window = 10;
	ok(rule_sends_of(&c) == RULE_SENDS_OUTER, "window 10: the worker sends u_w as diloco's");
	o = json_pack("{s:s, s:i, s:f}", "name", "gem", "window", 10, "outer_momentum", 0.5);
	ok(rule_config_from_json(o, &c, err) == 0 && c.window == 10 && c.outer_momentum == 0.5f,
	   "run.json's window and outer_momentum for gem");
	json_decref(o);
	j = rule_config_to_json(&c);
	ok(j && json_integer_value(json_object_get(j, "window")) == 10 &&
		   json_real_value(json_object_get(j, "outer_momentum")) == 0.5 &&
		   !json_object_get(j, "outer_lr"),
	   "gem records window and outer_momentum, not outer_lr");
	json_decref(j);
	ok(refused("{\"name\": \"gem\", \"outer_momentum\": 0.5}", "window"),
	   "outer_momentum without a window is refused");
	ok(refused("{\"name\": \"gem\", \"window\": 0}", "window"), "window 0 is refused");
	ok(refused("{\"name\": \"gem\", \"window\": 4, \"outer_lr\": 0.5}", "outer_lr"),
	   "outer_lr is not gem's");
	ok(refused("{\"name\": \"gem\", \"window\": 4, \"outer_momentum\": 1}", "outer_momentum"),
	   "outer_momentum 1 is refused");
}

/* μ_o = 0.5, κ = 1, π_max = 5, ε = 0, θ = (0, 0), workers A and B joined at θ; every number
 * exact in binary (doc/rules.md, "GEM on pseudo-gradients"):
 * A, cycle 1: u = (2, −4): m_A = u, θ − s_A = 0, π = 1: θ = (2, −4)
 * B, cycle 1: u = (4, 8): m_B = u, |θ − s_B| = (2, 4), π = (0.5, 0.5): θ = (4, 0)
 * A, cycle 2: u = (2, 2): m_A = 0.5·(2, −4) + u = (3, 0), |θ − s_A| = (2, 4),
 *             π = ((3 − 2)/2, 0) = (0.5, 0): θ = (5, 0)
 * B, cycle 2: u = (−1, 2): m_B = 0.5·(4, 8) + u = (1, 6), |θ − s_B| = (1, 0),
 *             π = (0, 3): θ = (5, 6) */
static void by_hand(void)
{
	static const float u[4][2] = {{2, -4}, {4, 8}, {2, 2}, {-1, 2}};
	static const float want[4][2] = {{2, -4}, {4, 0}, {5, 0}, {5, 6}};
	static const float pi_mean[4] = {1, 0.5f, 0.25f, 1.5f};
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0};
	int good = 1;
	r = make(t, 2, 10, 0.5f);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	for (int k = 0; k < 4; k++) {
		uint64_t base = k < 2 ? 0 : (uint64_t)k - 1;
		int rc = commit1(r, k % 2, u[k], base, t, &ver, NULL, &st, err);
		if (rc != RULE_APPLIED || t[0] != want[k][0] || t[1] != want[k][1] ||
		    st.all.pi_mean != pi_mean[k]) {
			diag("commit %d: %d, θ = (%g, %g), mean π %g", k + 1, rc, t[0], t[1],
			     st.all.pi_mean);
			good = 0;
		}
	}
	ok(good, "two cycles of two workers: θ = (2, −4), (4, 0), (5, 0), (5, 6)");
	rule_destroy(r);

	/* the same commits with the run's μ = 0.9 as the proxy's would give m_A = (3.8, −1.6)
	 * and π = 0.9 on A's second: μ_o is the one used */
	r = make((float[]){0, 0}, 2, 10, 0.9f);
	t[0] = t[1] = 0, ver = 0;
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	for (int k = 0; k < 3; k++)
		commit1(r, k % 2, u[k], k < 2 ? 0 : (uint64_t)k - 1, t, &ver, NULL, &st, err);
	ok(t[0] == 4 + 0.9f * 2 && t[1] == 0, "μ_o = 0.9: A's second cycle takes π = 0.9 (θ₁ = %g)",
	   t[0]);
	rule_destroy(r);
}

static void fill(struct rng *g, float *x, float sd)
{
	for (int i = 0; i < N; i++)
		x[i] = sd * (float)rng_normal(g);
}

/* gem's worker with window H is async-diloco's: the same u_w and x, bit for bit, for momentum
 * SGD (Nesterov, weight decay) and AdamW, over two windows with a reply between */
static void worker_is_diloco(const struct optim_config *oc, const char *what)
{
	char err[GEM_ERRMAX];
	struct rule_config cg, cd;
	struct rule_half lg, ld;
	struct layout lo = layout_n(N);
	struct rng g;
	float xg[N], xd[N], grad[N], grad2[N], theta[N];
	int same = 1;
	rule_config_default("gem", &cg, err);
	rule_config_default("async-diloco", &cd, err);
	cg.window = cd.window = 4;
	rng_seed(&g, 4012, 1);
	fill(&g, xg, 1);
	memcpy(xd, xg, sizeof xg);
	if (rule_half_init(&lg, &cg, &lo, oc, err) < 0 || rule_half_init(&ld, &cd, &lo, oc, err) < 0)
		diag("rule_half_init: %s", err);
	rule_half_start(&lg, xg, 0, 100);
	rule_half_start(&ld, xd, 0, 100);
	for (int win = 0; win < 2; win++) {
		const float *ug, *ud;
		rule_half_begin(&lg, xg);
		rule_half_begin(&ld, xd);
		for (int k = 0; k < cg.window; k++) {
			fill(&g, grad, 1);
			memcpy(grad2, grad, sizeof grad);
			rule_half_step(&lg, xg, grad);
			rule_half_step(&ld, xd, grad2);
		}
		ug = rule_half_commit(&lg, xg);
		ud = rule_half_commit(&ld, xd);
		same &= !memcmp(ug, ud, sizeof xg) && !memcmp(xg, xd, sizeof xg);
		fill(&g, theta, 1);
		rule_half_reply(&lg, xg, theta, 0);
		rule_half_reply(&ld, xd, theta, 0);
		same &= !memcmp(xg, theta, sizeof xg);
	}
	ok(same, "%s: gem's worker with H = 4 commits async-diloco's u_w, bit for bit", what);
	rule_half_free(&lg);
	rule_half_free(&ld);
}

/* θ, the version and the rule's state (text and vectors) in *len bytes, to compare bit for
 * bit */
static char *state(const struct rule *r, uint64_t ver, size_t *len)
{
	char err[GEM_ERRMAX];
	json_t *meta;
	struct rule_vec *v;
	int nv;
	size_t cap = 64 + sizeof(float) * N;
	char *s, *text;
	if (rule_state_save(r, &meta, &v, &nv, err) < 0)
		return NULL;
	text = json_dumps(meta, JSON_SORT_KEYS);
	cap += strlen(text) + (size_t)nv * sizeof(float) * N;
	s = calloc(1, cap);
	*len = (size_t)snprintf(s, cap, "%llu %s", (unsigned long long)ver, text) + 1;
	memcpy(s + *len, rule_theta(r), sizeof(float) * N);
	*len += sizeof(float) * N;
	for (int i = 0; i < nv; i++, *len += sizeof(float) * N)
		memcpy(s + *len, v[i].data, sizeof(float) * N);
	free(text);
	free(v);
	json_decref(meta);
	return s;
}

/* A checkpoint after a cycle of each of 3 workers loads into a new rule that commits the next
 * cycles as the saved one, bit for bit; two cycles of all FLT_MAX overflow m_w and are refused
 * with everything as it was. */
static void checkpoint_and_overflow(void)
{
	char err[GEM_ERRMAX];
	struct rule *a, *b;
	struct rule_vec *vecs;
	struct rng g;
	json_t *meta;
	float theta[N], in[N];
	uint64_t va = 0, vb;
	size_t nb, na;
	char *before, *after;
	int nvec, same = 1, rc;
	rng_seed(&g, 4012, 2);
	fill(&g, theta, 1);
	a = make(theta, N, 10, 0.9f);
	for (int w = 0; w < 3; w++) {
		rule_join(a, w, err);
		fill(&g, in, 0.1f);
		rule_commit(a, w, in, 0, &va, NULL, NULL, err);
	}
	rule_state_save(a, &meta, &vecs, &nvec, err);
	memcpy(theta, rule_theta(a), sizeof theta);
	b = make(theta, N, 10, 0.9f);
	ok(rule_state_load(b, meta, vecs, nvec, err) == 0 && nvec == 6,
	   "state after a cycle each: m_w and s_w of 3 workers");
	free(vecs);
	json_decref(meta);
	vb = va;
	for (int k = 0; k < 6; k++) {
		uint64_t base = va - 2;
		fill(&g, in, 0.1f);
		same &= rule_commit(a, k % 3, in, base, &va, NULL, NULL, err) == RULE_APPLIED &&
			rule_commit(b, k % 3, in, base, &vb, NULL, NULL, err) == RULE_APPLIED &&
			va == vb && !memcmp(rule_theta(a), rule_theta(b), sizeof theta);
	}
	ok(same, "the loaded rule commits two more cycles as the saved one, bit for bit");
	rule_destroy(b);

	for (int i = 0; i < N; i++)
		in[i] = FLT_MAX;
	rc = RULE_APPLIED;
	for (int k = 0; k < 4 && rc == RULE_APPLIED; k++) {
		before = state(a, va, &nb);
		rc = rule_commit(a, 0, in, va, &va, NULL, NULL, err);
		after = state(a, va, &na);
		if (rc != RULE_APPLIED)
			ok(rc == RULE_E_NON_FINITE && na == nb && !memcmp(before, after, nb),
			   "u_w of all FLT_MAX: refused at commit %d, θ, version and state as they were",
			   k + 1);
		free(before);
		free(after);
	}
	ok(rc == RULE_E_NON_FINITE, "the overflow was refused");
	rule_destroy(a);
}

int main(void)
{
	const struct optim_config sgd = {.kind = OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f,
					 .nesterov = 1, .weight_decay = 0.01f};
	const struct optim_config adamw = {.kind = OPTIM_ADAMW, .lr = 1e-3f, .beta1 = 0.9f,
					   .beta2 = 0.95f, .weight_decay = 0.1f, .clip = 1};
	config();
	by_hand();
	worker_is_diloco(&sgd, "momentum SGD");
	worker_is_diloco(&adamw, "AdamW");
	checkpoint_and_overflow();
	return done_testing();
}
