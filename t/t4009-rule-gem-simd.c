/* t4009: GEM's commit gives the same floats with its AVX2 pass as with its portable one
 * (rule_simd): θ, the rule's state and every statistic bit for bit, over tensors of blocks of 8
 * with tails, for gem_ref commit and pull, with ε = 0 (0/0 π), with π clamped at 0 and π_max,
 * and a commit that would overflow, refused at both levels; the reply it writes in the same
 * pass is the new θ; all of it with m_w and s_w in float32 and in bfloat16 (state_precision
 * bf16, where FLT_MAX itself rounds to an infinity and is refused). Near FLT_MAX no overflow
 * gets through at either level. bfloat16 state is rounded to nearest even, once, on store, and
 * takes half the bytes. rule_vec_finite finds one infinity or NaN at any place, at both
 * levels. */
#include "base/err.h"
#include "base/rng.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COMMITS 12
#define WORKERS 3

struct trace {
	float *theta, *state;
	size_t nstate;
	int status[COMMITS];
	int reply_differs; /* applied commits whose reply was not θ */
	struct rule_stats st[COMMITS];
};

/* The update of commit i: normal noise, with exact zeros, huge values and −ε mixed in */
static void update(float *d, size_t n, int i, float eps, struct rng *g)
{
	for (size_t k = 0; k < n; k++) {
		d[k] = 1e-2f * (float)rng_normal(g);
		if (k % 11 == 3)
			d[k] = 0;
		if (k % 29 == 5)
			d[k] = -eps;
		if (k % 97 == 7)
			d[k] = 1e3f;
	}
	if (i == 6 || i == 9)
		for (size_t k = 0; k < n; k++)
			d[k] = FLT_MAX; /* worker 0's second one overflows its m_w: refused */
}

static void run(const struct rule_config *c, const struct layout *l, int level, struct trace *t)
{
	char err[GEM_ERRMAX];
	struct rule *r;
	struct rng g;
	uint64_t ver = 0;
	json_t *meta;
	struct rule_vec *v;
	int nv;
	float *d = malloc(l->total * sizeof *d), *reply = malloc(l->total * sizeof *reply);

	rule_simd(level);
	rng_seed(&g, 7, 1);
	t->reply_differs = 0;
	t->theta = malloc(l->total * sizeof *t->theta);
	for (size_t k = 0; k < l->total; k++)
		t->theta[k] = 0.1f * (float)rng_normal(&g);
	if (rule_create(c, l, t->theta, &r, err) < 0) {
		printf("Bail out! %s\n", err);
		exit(1);
	}
	for (int w = 0; w < WORKERS; w++)
		rule_join(r, w, err);
	for (int i = 0; i < COMMITS; i++) {
		uint64_t base = ver > 1 ? ver - 1 : 0;
		update(d, l->total, i, c->eps, &g);
		memset(&t->st[i], 0, sizeof t->st[i]);
		memset(reply, 0xff, l->total * sizeof *reply);
		t->status[i] = rule_commit(r, i % WORKERS, d, base, &ver, reply, &t->st[i], err);
		t->reply_differs += t->status[i] == RULE_APPLIED &&
				    memcmp(reply, rule_theta(r), l->total * sizeof *reply);
	}
	memcpy(t->theta, rule_theta(r), l->total * sizeof *t->theta);
	rule_state_save(r, &meta, &v, &nv, err);
	t->nstate = 0;
	for (int i = 0; i < nv; i++)
		t->nstate += v[i].n;
	t->state = malloc(t->nstate * sizeof *t->state);
	t->nstate = 0;
	for (int i = 0; i < nv; i++) {
		for (size_t k = 0; k < v[i].n; k++)
			t->state[t->nstate + k] = v[i].bf16 ? rule_bf16_float(v[i].bf16[k]) : v[i].data[k];
		t->nstate += v[i].n;
	}
	free(v);
	json_decref(meta);
	rule_destroy(r);
	free(d);
	free(reply);
}

static void trace_free(struct trace *t)
{
	free(t->theta);
	free(t->state);
}

/* One commit of one worker with μ = 0 and bfloat16 state: m_w′ = Δθ and s_w′ = θ′ = θ + π·Δθ
 * rounded to nearest even, in the vector blocks and the tail alike; the state takes 2 bytes a
 * value where float32 takes 4. */
static void bf16_rounding(int have)
{
	static const size_t sizes[] = {19};
	const struct layout l = layout_of(sizes, 1);
	/* the ties 1 + 2⁻⁸ (down to even 1) and 1 + 3·2⁻⁸ (up to even 1 + 2⁻⁶), just above a
	 * tie (up), negatives, a denormal (rounded too: bfloat16 has float32's exponents), a
	 * value bfloat16 holds exactly, one past its largest */
	static const float d[8] = {0x1.01p0f, 0x1.03p0f, -0x1.01p0f, 0x1.0102p0f, 3e-39f,
				   -0x1.7ep-3f, 0x1.ff8p127f, 1};
	static const float want[8] = {1, 0x1.04p0f, -1, 0x1.02p0f, 0x1.08p-128f, -0x1.7ep-3f,
				      INFINITY, 1};
	char err[GEM_ERRMAX];
	for (int level = 0; level <= have; level++) {
		struct rule_config c;
		struct rule *r, *r32;
		float theta[19] = {0}, in[19];
		struct rule_vec *v;
		json_t *meta;
		uint64_t ver = 0;
		int nv, wrong = 0, rc;
		rule_simd(level);
		rule_config_default("gem", &c, err);
		c.momentum = 0;
		c.state_precision = RULE_STATE_BF16;
		rule_create(&c, &l, theta, &r, err);
		c.state_precision = RULE_STATE_F32;
		rule_create(&c, &l, theta, &r32, err);
		rule_join(r, 0, err);
		rule_join(r32, 0, err);
		ok(rule_state_bytes(r32) - rule_state_bytes(r) == 2 * 19 * 2 && rule_join_bytes(r) == 2 * 19 * 2 &&
			   rule_join_bytes(r32) == 2 * 19 * 4,
		   "level %d: a worker's bfloat16 m_w and s_w take 2 bytes a value, float32's 4",
		   level);
		for (int k = 0; k < 19; k++)
			in[k] = d[k % 8 == 6 ? 7 : k % 8];
		rc = rule_commit(r, 0, in, 0, &ver, NULL, NULL, err);
		rule_state_save(r, &meta, &v, &nv, err);
		/* π is 1 but where ε counts (the denormal): θ′ = Δθ, s_w′ = m_w′ */
		for (int k = 0; k < 19; k++) {
			int j = k % 8 == 6 ? 7 : k % 8;
			wrong += nv != 2 || rule_bf16_float(v[0].bf16[k]) != want[j] ||
				 (j != 4 && (rule_theta(r)[k] != d[j] ||
					     rule_bf16_float(v[1].bf16[k]) != want[j]));
		}
		ok(rc == RULE_APPLIED && !wrong, "level %d: m_w and s_w rounded to nearest even, in "
		   "blocks and tail (%d wrong)", level, wrong);
		free(v);
		json_decref(meta);
		/* a finite float past bfloat16's largest rounds to an infinity */
		in[2] = d[6];
		rc = rule_commit(r, 0, in, ver, &ver, NULL, NULL, err);
		ok(rc == RULE_E_NON_FINITE && !isfinite(want[6]), "level %d: a finite m_w that rounds to "
		   "an infinity is refused", level);
		rule_destroy(r);
		rule_destroy(r32);
	}
}

int main(void)
{
	static const size_t sizes[] = {1001, 8, 3, 4099};
	struct layout l = layout_of(sizes, 4);
	int was = rule_simd(-1), have;
	char err[GEM_ERRMAX];

	rule_simd(1);
	have = rule_simd(-1);
	if (have < 1) {
		rule_simd(was);
		skip_all("this CPU has no AVX2: only the portable passes run");
	}
	for (int prec = 0; prec < 2; prec++)
	for (int ref = 0; ref < 2; ref++)
		for (int e = 0; e < 2; e++) {
			struct rule_config c;
			struct trace a, b;
			int refused = 0;
			float c0 = 0, cmax = 0;
			rule_config_default("gem", &c, err);
			c.momentum = 0.9f;
			c.gem_ref = ref ? RULE_GEM_REF_PULL : RULE_GEM_REF_COMMIT;
			c.eps = e ? 0 : c.eps;
			c.pi_max = 2;
			c.nworkers = WORKERS;
			c.state_precision = prec ? RULE_STATE_BF16 : RULE_STATE_F32;
			run(&c, &l, 0, &a);
			run(&c, &l, 1, &b);
			for (int i = 0; i < COMMITS; i++) {
				refused += a.status[i] == RULE_E_NON_FINITE;
				c0 = a.st[i].all.clamped0 > c0 ? a.st[i].all.clamped0 : c0;
				cmax = a.st[i].all.clampedmax > cmax ? a.st[i].all.clampedmax : cmax;
			}
			ok(a.status[9] == RULE_E_NON_FINITE &&
				   (prec ? refused == 2 && a.status[6] == RULE_E_NON_FINITE : refused == 1),
			   "%s, %s, ε %g: the overflowing commit%s refused", prec ? "bf16" : "f32",
			   ref ? "pull" : "commit", (double)c.eps, prec ? "s are" : " is");
			ok(!memcmp(a.status, b.status, sizeof a.status), "the same commits applied");
			ok(!memcmp(a.theta, b.theta, l.total * sizeof *a.theta), "θ bit for bit");
			ok(a.nstate == b.nstate && !memcmp(a.state, b.state, a.nstate * sizeof *a.state),
			   "m_w and s_w bit for bit");
			ok(!memcmp(a.st, b.st, sizeof a.st), "every commit's statistics bit for bit");
			ok(!a.reply_differs && !b.reply_differs, "the reply is the new θ at both levels");
			ok(c0 > 0 && cmax > 0, "π was clamped at 0 (up to %.3f) and at π_max (up to %.3f)",
			   (double)c0, (double)cmax);
			trace_free(&a);
			trace_free(&b);
		}
	/* Commits near FLT_MAX, some applied and some refused: θ finite after every one, at both
	 * levels. */
	for (int level = 0; level <= have; level++) {
		struct rule_config c;
		struct rule *r;
		struct rng g;
		uint64_t ver = 0;
		int applied = 0, refused = 0, infinite = 0;
		float *theta = calloc(l.total, sizeof *theta), *d = malloc(l.total * sizeof *d);
		rule_simd(level);
		rng_seed(&g, 11, 1);
		rule_config_default("gem", &c, err);
		c.momentum = 0.9f;
		rule_create(&c, &l, theta, &r, err);
		for (int w = 0; w < 2; w++)
			rule_join(r, w, err);
		for (int i = 0; i < 60; i++) {
			float scale = i % 3 == 0 ? 5e37f : i % 3 == 1 ? 1e37f : 2e36f;
			int rc;
			for (size_t k = 0; k < l.total; k++)
				d[k] = scale * (float)rng_normal(&g);
			rc = rule_commit(r, i % 2, d, ver, &ver, NULL, NULL, err);
			applied += rc == RULE_APPLIED;
			refused += rc == RULE_E_NON_FINITE;
			for (size_t k = 0; k < l.total; k++)
				infinite += !isfinite(rule_theta(r)[k]);
		}
		ok(applied > 0 && refused > 0 && !infinite,
		   "level %d: near FLT_MAX, %d commits applied and %d refused, θ always finite", level,
		   applied, refused);
		rule_destroy(r);
		free(theta);
		free(d);
	}
	bf16_rounding(have);
	for (int level = 0; level <= have; level++) {
		enum { N = 101 }; /* blocks of 32 and a tail */
		float v[N];
		int missed = 0, wrong = 0;
		rule_simd(level);
		for (int i = 0; i < N; i++)
			v[i] = i % 3 ? FLT_MAX : (i % 2 ? -0.0f : 1e-45f);
		wrong += !rule_vec_finite(v, N);
		for (int i = 0; i < N; i++) {
			const float bad[3] = {INFINITY, -INFINITY, NAN};
			float keep = v[i];
			for (int b = 0; b < 3; b++) {
				v[i] = bad[b];
				missed += rule_vec_finite(v, N);
			}
			v[i] = keep;
		}
		ok(!wrong && !missed, "level %d: rule_vec_finite takes FLT_MAX, −0 and denormals, "
		   "and finds ±inf and NaN at each of %d places", level, N);
	}
	rule_simd(was);
	return done_testing();
}
