/* t4013: streaming fragments of diloco and async-diloco (doc/rules.md "Streaming fragments"):
 * the config's checks; the outer step on one fragment's slice, worked by hand, leaving the other
 * untouched; fragments in turn give one whole commit's θ bit for bit (the step is element-wise);
 * the worker's schedule and its mix by α, by hand, also with an overlap of T steps, whose
 * replies taken late (gem-work's) give the held ones' x; a leave closing a fragment's round; a
 * checkpoint mid-schedule resumed exactly; a non-finite fragment refused with nothing changed. */
#include "base/err.h"
#include "base/rng.h"
#include "nn/optim.h"
#include "rules/worker_half.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#define N 37 /* two fragments of 18 and 19: blocks of 4 and a tail in each */

static struct rule *make(const char *name, const float *theta, size_t n, int nworkers,
			 int fragments)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	rule_config_default(name, &c, err);
	c.nworkers = nworkers;
	c.momentum = 0;
	c.outer_lr = 0.5f;
	c.outer_momentum = 0.5f;
	c.window = 12; /* P = 1, 2, 3 divide it */
	c.fragments = fragments;
	return rule_of(&c, theta, n);
}

/* rule_commit_fragment of worker w's u (the fragment's floats), θ copied into theta */
static int frag(struct rule *r, int w, int p, const float *u, uint64_t base, uint64_t *ver,
		float *theta, char *err)
{
	int rc = rule_commit_fragment(r, w, p, u, base, ver, NULL, NULL, err);
	memcpy(theta, rule_theta(r), rule_nparams(r) * sizeof(float));
	return rc;
}

/* run.json's "rule" given as JSON text: rule_config_from_json's code, err filled */
static int from_text(const char *text, struct rule_config *c, char *err)
{
	json_t *o = json_loads(text, 0, NULL);
	int rc = rule_config_from_json(o, c, err);
	json_decref(o);
	return rc;
}

static void config(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	struct layout l = layout_n(3);
	const float t[3] = {0};
	struct rule *r;
	json_t *j;
	ok(rule_config_default("async-diloco", &c, err) == 0 && c.fragments == 1 && c.mix == 0,
	   "defaults: P = 1, α = 0 (all of θ at once, replaced)");
	ok(from_text("{\"name\": \"diloco\", \"nworkers\": 2, \"window\": 10, \"fragments\": 5, "
		     "\"mix\": 0.5}", &c, err) == 0 && c.fragments == 5 && c.mix == 0.5f,
	   "run.json's fragments and mix");
	j = rule_config_to_json(&c);
	ok(j && json_integer_value(json_object_get(j, "fragments")) == 5 &&
		   json_real_value(json_object_get(j, "mix")) == 0.5,
	   "and back");
	json_decref(j);
	ok(from_text("{\"name\": \"diloco\", \"nworkers\": 2, \"window\": 10, \"fragments\": 4}",
		     &c, err) == GEM_EUSAGE && strstr(err, "divide"),
	   "P must divide H: %s", err);
	ok(from_text("{\"name\": \"diloco\", \"nworkers\": 2, \"window\": 10, \"fragments\": 20}",
		     &c, err) == GEM_EUSAGE && strstr(err, "fragments"),
	   "P > H is refused: %s", err);
	ok(from_text("{\"name\": \"diloco\", \"nworkers\": 2, \"fragments\": 0}", &c, err) ==
			   GEM_EUSAGE && strstr(err, "fragments"),
	   "P = 0 is refused: %s", err);
	ok(from_text("{\"name\": \"async-diloco\", \"mix\": 1}", &c, err) == GEM_EUSAGE &&
		   strstr(err, "mix"),
	   "α = 1 is refused (the reply would be ignored): %s", err);
	ok(from_text("{\"name\": \"async-diloco\", \"fragments\": 2, \"delayed_nesterov\": 4}", &c,
		     err) == GEM_EUSAGE && strstr(err, "delayed_nesterov"),
	   "fragments with delayed Nesterov are refused: %s", err);
	ok(from_text("{\"name\": \"async-diloco\", \"fragments\": 2, "
		     "\"dynamic_local_updates\": true}", &c, err) == GEM_EUSAGE &&
		   strstr(err, "dynamic_local_updates"),
	   "fragments with dynamic local updates are refused: %s", err);
	ok(from_text("{\"name\": \"async-diloco\", \"window\": 10, \"overlap\": 2, "
		     "\"dynamic_local_updates\": true}", &c, err) == GEM_EUSAGE &&
		   strstr(err, "dynamic_local_updates"),
	   "an overlap with dynamic local updates is refused (the reply telling H comes T steps "
	   "into that window): %s", err);
	ok(from_text("{\"name\": \"diloco\", \"nworkers\": 2, \"window\": 10, \"fragments\": 2, "
		     "\"overlap\": 5}", &c, err) == GEM_EUSAGE && strstr(err, "overlap"),
	   "an overlap of H/P steps is refused: %s", err);
	ok(from_text("{\"name\": \"async-diloco\", \"window\": 10, \"fragments\": 2, "
		     "\"overlap\": 4}", &c, err) == 0 && c.overlap == 4,
	   "an overlap T < H/P is taken");
	j = rule_config_to_json(&c);
	ok(j && json_integer_value(json_object_get(j, "overlap")) == 4, "and back");
	json_decref(j);
	ok(from_text("{\"name\": \"gem\", \"window\": 4, \"fragments\": 2}", &c, err) ==
			   GEM_EUSAGE && strstr(err, "not a field"),
	   "fragments are not gem's: %s", err);
	rule_config_default("sync", &c, err);
	c.nworkers = 2;
	c.fragments = 2;
	ok(rule_config_check(&c, err) == GEM_EUSAGE && strstr(err, "does not use"),
	   "a rule without fragments refuses them in its config: %s", err);
	rule_config_default("async-diloco", &c, err);
	c.window = 4;
	c.fragments = 4;
	ok(rule_create(&c, &l, t, &r, err) == GEM_EUSAGE && strstr(err, "floats"),
	   "more fragments than θ has floats: %s", err);
}

/* diloco, P = 2 over θ = 0 (4 floats), 2 workers, η_o = μ_o = 0.5, exact in binary.
 * Version 0 synchronises fragment 0 = [0, 2): u = (2, 0) and (0, 2): ū = (1, 1), v = (1, 1),
 * θ = 0.5·((1, 1) + 0.5·(1, 1)) = (0.75, 0.75). Version 1, fragment 1 = [2, 4): u = (2, 2)
 * twice: v = (2, 2), θ = 0.5·((2, 2) + (1, 1)) = (1.5, 1.5). */
static void by_hand(void)
{
	char err[GEM_ERRMAX];
	float t[4] = {0}, a[2] = {2, 0}, b[2] = {0, 2}, c[2] = {2, 2};
	uint64_t ver = 0;
	struct rule *r = make("diloco", t, 4, 2, 2);
	struct rule_vec *vecs;
	json_t *meta;
	int nvec;
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	ok(frag(r, 0, 1, a, 0, &ver, t, err) == GEM_EUSAGE && strstr(err, "fragment 0"),
	   "the round at version 0 is fragment 0's: %s", err);
	ok(frag(r, 0, 0, a, 0, &ver, t, err) == RULE_PENDING &&
		   frag(r, 1, 0, b, 0, &ver, t, err) == RULE_APPLIED && ver == 1,
	   "fragment 0's round");
	ok(t[0] == 0.75f && t[1] == 0.75f && t[2] == 0 && t[3] == 0,
	   "θ = (0.75, 0.75, 0, 0): fragment 1 untouched");
	ok(frag(r, 0, 1, c, 1, &ver, t, err) == RULE_PENDING &&
		   frag(r, 1, 1, c, 1, &ver, t, err) == RULE_APPLIED && ver == 2,
	   "fragment 1's round at version 1");
	ok(t[0] == 0.75f && t[1] == 0.75f && t[2] == 1.5f && t[3] == 1.5f,
	   "θ = (0.75, 0.75, 1.5, 1.5): fragment 0 untouched");
	rule_state_save(r, &meta, &vecs, &nvec, err);
	ok(nvec == 2 && vecs[0].data[0] == 1 && vecs[0].data[1] == 1 && vecs[0].data[2] == 2 &&
		   vecs[0].data[3] == 2 && vecs[1].data[0] == 0 && vecs[1].data[3] == 0,
	   "v = (1, 1, 2, 2), each fragment's own; the round's sum back to 0");
	free(vecs);
	json_decref(meta);
	/* version 2: fragment 0 again; worker 1 leaves, the round closes with worker 0's alone:
	 * ū = (2, 2), v = 0.5·(1, 1) + (2, 2) = (2.5, 2.5), θ += 0.5·((2, 2) + (1.25, 1.25)) */
	ok(frag(r, 0, 0, c, 2, &ver, t, err) == RULE_PENDING &&
		   leave1(r, 1, t, &ver, NULL, err) == 1 && ver == 3,
	   "a leave closes fragment 0's round");
	ok(t[0] == 2.375f && t[1] == 2.375f && t[2] == 1.5f && t[3] == 1.5f,
	   "θ = (2.375, 2.375, 1.5, 1.5): the leave's round moved fragment 0 only");
	rule_destroy(r);
}

static void fill(struct rng *g, float *v, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		v[i] = scale * (2 * rng_float(g) - 1);
}

/* The outer step is element-wise: fragments 0 and 1 of the same commits, in turn, give the θ
 * and v of one whole commit (P = 1), bit for bit. */
static void same_as_whole(const char *name)
{
	char err[GEM_ERRMAX];
	struct rng g;
	float t0[N], u[3][2][N], tw[N], tf[N];
	uint64_t vw = 0, vf = 0;
	struct rule *whole, *split;
	size_t off[2] = {0, N / 2};
	int nw = strcmp(name, "diloco") ? 1 : 2, same = 1;
	rng_seed(&g, 4013, 1);
	fill(&g, t0, N, 1);
	for (int k = 0; k < 3; k++)
		for (int w = 0; w < 2; w++)
			fill(&g, u[k][w], N, 0.1f);
	whole = make(name, t0, N, nw, 1);
	split = make(name, t0, N, nw, 2);
	for (int w = 0; w < nw; w++) {
		rule_join(whole, w, err);
		rule_join(split, w, err);
	}
	for (int k = 0; k < 3; k++) {
		for (int w = 0; w < nw; w++)
			frag(whole, w, 0, u[k][w], vw, &vw, tw, err);
		for (int p = 0; p < 2; p++)
			for (int w = 0; w < nw; w++)
				frag(split, w, p, u[k][w] + off[p], vf, &vf, tf, err);
		same &= !memcmp(tw, tf, sizeof tw);
	}
	ok(same && vw == 3 && vf == 6,
	   "%s: 3 commits whole and as 2 fragments each: the same θ bit for bit", name);
	rule_destroy(whole);
	rule_destroy(split);
}

/* One window of l's steps on x (4 floats), each with gradient 1; the commit. */
static const float *window(struct rule_half *l, float *x)
{
	float g[4];
	rule_half_begin(l, x);
	for (int k = 0; k < l->window; k++) {
		for (int i = 0; i < 4; i++)
			g[i] = 1;
		rule_half_step(l, x, g);
	}
	return rule_half_commit(l, x);
}

/* worker()'s half: async-diloco, P = 2, H = 4, α = 0.5, an overlap of T steps, over 4 floats
 * from x, each inner step plain SGD with lr 1 (x − 1 with gradient 1, exact); 0 or an error. */
static int half_p2(struct rule_half *l, int overlap, const float *x)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	struct layout lo = layout_n(4);
	struct optim_config oc = {.kind = OPTIM_SGD, .lr = 1};
	int rc;
	rule_config_default("async-diloco", &c, err);
	c.window = 4;
	c.fragments = 2;
	c.mix = 0.5f;
	c.overlap = overlap;
	if ((rc = rule_half_init(l, &c, &lo, &oc, err)) == 0)
		rule_half_start(l, x, 0, 0);
	return rc;
}

/* worker()'s half with an overlap T = 1: each reply is held, and mixed into x as it is after
 * the first step of the next window. */
static void overlap(void)
{
	struct rule_half l;
	float x[4] = {0}, r0[2] = {-1, -1}, r1[2] = {-2, -2};
	const float *u;
	half_p2(&l, 1, x);
	u = window(&l, x);
	rule_half_reply(&l, x, r0, 0);
	ok(l.sent == 0 && u[0] == -2 && x[0] == -2 && x[1] == -2 && l.holding,
	   "T = 1: θ[0] = (−1, −1) held, x as trained: (−2, −2, −2, −2)");
	/* step 1: x = −3; x[0] ← 0.5·(−3) + 0.5·(−1) = −2; step 2: (−3, −3, −4, −4) */
	u = window(&l, x);
	ok(l.sent == 1 && u[0] == -4 && u[1] == -4 && x[0] == -3 && x[1] == -3 && x[2] == -4 &&
		   x[3] == -4 && !l.holding,
	   "mixed after 1 step (x[0] = −2), then a step: x = (−3, −3, −4, −4), u[1] = (−4, −4)");
	rule_half_reply(&l, x, r1, 0);
	/* step 1: (−4, −4, −5, −5); x[1] ← 0.5·(−5) + 0.5·(−2) = −3.5; step 2 */
	u = window(&l, x);
	ok(l.sent == 0 && u[0] == -4 && x[0] == -5 && x[2] == -4.5f && x[3] == -4.5f,
	   "θ[1] mixed after 1 step: x = (−5, −5, −4.5, −4.5), u[0] = x[0] − θ[0] = (−4, −4)");
	rule_half_free(&l);
}

/* One window of l's steps on x as gem-work takes it with an overlap: the reply v of the commit
 * in flight (NULL: none) comes once the T-th step is taken (rule_half_due), or before the
 * commit if the window is shorter; steps steps, each with gradient 1; the commit. */
static const float *late_window(struct rule_half *l, float *x, const float *v, int steps)
{
	float g[4];
	rule_half_begin(l, x);
	for (int k = 0; k < steps; k++) {
		for (int i = 0; i < 4; i++)
			g[i] = 1;
		rule_half_step(l, x, g);
		if (v && rule_half_due(l)) {
			rule_half_reply(l, x, v, 0);
			v = NULL;
		}
	}
	if (v)
		rule_half_reply(l, x, v, 0);
	return rule_half_commit(l, x);
}

/* gem-work's overlap: each reply taken after the T-th step of the next window (or before a
 * shorter window's commit) gives gem-sim's x and commits, where the reply was held, bit for
 * bit; T = 1 and T = 2 over H/P = 3 steps, and a last window of 1 step. */
static void overlap_late(void)
{
	struct rule_half held, late;
	float xh[4] = {0}, xl[4] = {0}, r[4][2] = {{-1, -1}, {-2, -3}, {0.5f, -4}, {-6, 1}};
	const float *uh, *ul;
	int same = 1, due = 1;
	for (int t = 1; t <= 2; t++) {
		char err[GEM_ERRMAX];
		struct rule_config c;
		struct layout lo = layout_n(4);
		struct optim_config oc = {.kind = OPTIM_SGD, .lr = 1};
		rule_config_default("async-diloco", &c, err);
		c.window = 6;
		c.fragments = 2;
		c.mix = 0.5f;
		c.overlap = t;
		rule_half_init(&held, &c, &lo, &oc, err);
		rule_half_init(&late, &c, &lo, &oc, err);
		memset(xh, 0, sizeof xh);
		memset(xl, 0, sizeof xl);
		rule_half_start(&held, xh, 0, 0);
		rule_half_start(&late, xl, 0, 0);
		for (int cyc = 0; cyc < 4; cyc++) {
			int steps = cyc == 3 ? 1 : 3;
			/* gem-sim: the last commit's reply, held, and the window */
			if (cyc)
				rule_half_reply(&held, xh, r[cyc - 1], 0);
			held.window = steps;
			uh = window(&held, xh);
			ul = late_window(&late, xl, cyc ? r[cyc - 1] : NULL, steps);
			same &= held.sent == late.sent && held.len == late.len &&
				!memcmp(uh, ul, sizeof(float) * held.len) && !memcmp(xh, xl, sizeof xh);
		}
		/* after a commit nothing is due until T steps are taken */
		due &= !rule_half_due(&late);
		rule_half_free(&held);
		rule_half_free(&late);
	}
	ok(same && due, "the replies taken late, after the T-th step: gem-sim's x and commits, "
	   "bit for bit (T = 1, 2; H/P = 3; a last window of 1 step)");
	ok(xh[0] != xh[2], "(and the fragments moved apart: x = (%g, %g, %g, %g))", (double)xh[0],
	   (double)xh[1], (double)xh[2], (double)xh[3]);
}

/* The worker's half, P = 2, H = 4, α = 0.5, over 4 floats from x = 0, each inner step plain
 * SGD with lr 1 and gradient 1 (x − 1, exact). A commit every H/P = 2 steps. */
static void worker(void)
{
	char err[GEM_ERRMAX];
	struct rule_config c;
	struct rule_half l;
	struct layout lo = layout_n(4);
	struct optim_config oc = {.kind = OPTIM_SGD, .lr = 1};
	float x[4] = {0}, r0[2] = {-1, -1}, r1[2] = {-2, -2};
	const float *u;
	ok(half_p2(&l, 0, x) == 0 && l.window == 2, "the worker commits every H/P = 2 steps");
	for (int cyc = 0; cyc < 3; cyc++) {
		u = window(&l, x);
		if (cyc == 0) {
			/* x = (−2, −2, −2, −2); fragment 0's u = x[0] − θ[0] = (−2, −2) */
			ok(l.sent == 0 && l.off == 0 && l.len == 2 && u[0] == -2 && u[1] == -2,
			   "after 2 steps: fragment 0, u = (−2, −2)");
			/* x[0] ← 0.5·(−2) + 0.5·(−1) */
			rule_half_reply(&l, x, r0, 0);
			ok(x[0] == -1.5f && x[1] == -1.5f && x[2] == -2 && x[3] == -2,
			   "θ[0] = (−1, −1) mixed by α = 0.5: x = (−1.5, −1.5, −2, −2)");
		} else if (cyc == 1) {
			/* fragment 1 has gone H = 4 steps from its θ of 0 */
			ok(l.sent == 1 && l.off == 2 && l.len == 2 && u[0] == -4 && u[1] == -4,
			   "after 4 steps: fragment 1, u = (−4, −4)");
			rule_half_reply(&l, x, r1, 0);
			ok(x[0] == -3.5f && x[1] == -3.5f && x[2] == -3 && x[3] == -3,
			   "θ[1] = (−2, −2) mixed: x = (−3.5, −3.5, −3, −3)");
		} else {
			/* from θ[0] = −1, received two commits ago: −5.5 − (−1) */
			ok(l.sent == 0 && u[0] == -4.5f && u[1] == -4.5f,
			   "after 6 steps: fragment 0 again, u = x[0] − θ[0] = (−4.5, −4.5)");
		}
	}
	rule_half_free(&l);

	/* a round at version 3 synchronises fragment 1 first; α = 0 replaces x[p] */
	rule_config_default("diloco", &c, err);
	c.nworkers = 1;
	c.window = 4;
	c.fragments = 2;
	rule_half_init(&l, &c, &lo, &oc, err);
	memset(x, 0, sizeof x);
	rule_half_start(&l, x, 0, 0);
	rule_half_schedule(&l, 3);
	u = window(&l, x);
	rule_half_reply(&l, x, r0, 0);
	ok(l.sent == 1 && u[0] == -2 && x[0] == -2 && x[2] == -1 && x[3] == -1,
	   "diloco joined at version 3: fragment 1 first; α = 0: x[1] ← θ[1]");
	rule_half_free(&l);
	overlap();
	overlap_late();
}

/* Save in the middle of the schedule (a fragment's round open), load into a new rule, finish
 * in both: the same θ and version. */
static void checkpoint(const char *name)
{
	char err[GEM_ERRMAX];
	struct rng g;
	float t0[N], u[4][N], t[N], t2[N];
	uint64_t ver = 0, ver2;
	struct rule *r, *r2;
	struct rule_vec *vecs;
	json_t *meta;
	int nvec, rounds = !strcmp(name, "diloco"), p;
	size_t off, len;
	rng_seed(&g, 4013, 2);
	fill(&g, t0, N, 1);
	for (int k = 0; k < 4; k++)
		fill(&g, u[k], N, 0.1f);
	r = make(name, t0, N, 2, 3);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	/* versions 0 and 1 (fragments 0 and 1), then worker 0's commit to version 2's round */
	for (int k = 0; k < 2; k++) {
		layout_slice(N, k, 3, &off, &len);
		frag(r, 0, k, u[0] + off, ver, &ver, t, err);
		if (rounds)
			frag(r, 1, k, u[1] + off, ver, &ver, t, err);
	}
	layout_slice(N, 2, 3, &off, &len);
	frag(r, 0, 2, u[2] + off, ver, &ver, t, err);
	ok(rule_state_save(r, &meta, &vecs, &nvec, err) == 0, "%s: saved mid-schedule", name);
	/* θ is saved beside the rule's state: the new rule starts from it */
	r2 = make(name, t, N, 2, 3);
	ok(rule_state_load(r2, meta, vecs, nvec, err) == 0, "%s: loaded", name);
	free(vecs);
	json_decref(meta);
	ver2 = ver;
	p = rounds ? 2 : 0;
	layout_slice(N, p, 3, &off, &len);
	ok(frag(r, 1, p, u[3] + off, ver, &ver, t, err) == RULE_APPLIED &&
		   frag(r2, 1, p, u[3] + off, ver2, &ver2, t2, err) == RULE_APPLIED,
	   "%s: both apply fragment %d", name, p);
	ok(!memcmp(t, t2, sizeof t) && ver == ver2, "%s: the same θ, bit for bit, version %llu",
	   name, (unsigned long long)ver);
	rule_destroy(r);
	rule_destroy(r2);
}

/* θ near FLT_MAX in fragment 1: its commit overflows and is refused, nothing changed. */
static void non_finite(const char *name)
{
	char err[GEM_ERRMAX];
	float t0[4] = {1, 1, FLT_MAX, FLT_MAX}, u[2] = {FLT_MAX, FLT_MAX}, t[4], v0[4], v1[4];
	uint64_t ver = 1;
	struct rule *r = make(name, t0, 4, 1, 2);
	struct rule_vec *vecs;
	json_t *meta;
	int nvec;
	rule_join(r, 0, err);
	rule_state_save(r, &meta, &vecs, &nvec, err);
	memcpy(v0, vecs[0].data, sizeof v0);
	free(vecs);
	json_decref(meta);
	ok(frag(r, 0, 1, u, 1, &ver, t, err) == RULE_E_NON_FINITE && ver == 1 &&
		   !memcmp(t, t0, sizeof t),
	   "%s: an overflowing fragment is refused, θ and version unchanged: %s", name, err);
	rule_state_save(r, &meta, &vecs, &nvec, err);
	memcpy(v1, vecs[0].data, sizeof v1);
	ok(!memcmp(v0, v1, sizeof v0) && vecs[1].data[2] == 0 && vecs[1].data[3] == 0,
	   "%s: and the rule's vectors unchanged", name);
	free(vecs);
	json_decref(meta);
	rule_destroy(r);
}

int main(void)
{
	config();
	by_hand();
	same_as_whole("diloco");
	same_as_whole("async-diloco");
	worker();
	checkpoint("diloco");
	checkpoint("async-diloco");
	non_finite("diloco");
	non_finite("async-diloco");
	return done_testing();
}
