/* t4008: a finite commit whose result would not be finite (an overflow: two commits of all
 * FLT_MAX overflow GEM's momentum) is refused with RULE_E_NON_FINITE and leaves θ (its buffer
 * too), the version and the rule's whole state exactly as they were, for every rule; applied
 * commits leave them finite, and the run goes on with honest commits. A commit to a round that
 * stays open is refused when closing the round now would overflow, so that a leave can close
 * it later. */
#include "base/err.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 37 /* blocks of 8 and a tail */
#define BAIL_OUT(...) (printf("Bail out! "), printf(__VA_ARGS__), printf("\n"), exit(1))

/* θ (its buffer and values), the version and the rule's state (meta and vectors), to compare
 * bit for bit */
struct snap {
	const float *cur;
	float theta[N];
	uint64_t version;
	char *meta;
	float *vecs;
	size_t nfloats;
};

static void take(struct snap *s, const struct rule *r, uint64_t version)
{
	char err[GEM_ERRMAX];
	json_t *meta;
	struct rule_vec *v;
	int nv;
	s->cur = rule_theta(r);
	memcpy(s->theta, s->cur, sizeof s->theta);
	s->version = version;
	if (rule_state_save(r, &meta, &v, &nv, err) < 0)
		BAIL_OUT("rule_state_save: %s", err);
	s->meta = json_dumps(meta, JSON_SORT_KEYS);
	s->nfloats = 0;
	for (int i = 0; i < nv; i++)
		s->nfloats += v[i].n;
	s->vecs = malloc(sizeof(float) * (s->nfloats + 1));
	s->nfloats = 0;
	for (int i = 0; i < nv; i++) {
		memcpy(s->vecs + s->nfloats, v[i].data, sizeof(float) * v[i].n);
		s->nfloats += v[i].n;
	}
	free(v);
	json_decref(meta);
}

static int same(const struct snap *a, const struct snap *b)
{
	return a->cur == b->cur && !memcmp(a->theta, b->theta, sizeof a->theta) &&
	       a->version == b->version &&
	       !strcmp(a->meta, b->meta) && a->nfloats == b->nfloats &&
	       !memcmp(a->vecs, b->vecs, sizeof(float) * a->nfloats);
}

static int all_finite(const struct snap *s)
{
	for (int i = 0; i < N; i++)
		if (!isfinite(s->theta[i]))
			return 0;
	for (size_t i = 0; i < s->nfloats; i++)
		if (!isfinite(s->vecs[i]))
			return 0;
	return 1;
}

static void drop(struct snap *s)
{
	free(s->meta);
	free(s->vecs);
}

static struct rule *make(const char *name, const float *theta, int nworkers)
{
	struct layout l = layout_n(N);
	struct rule_config c;
	struct rule *r = NULL;
	char err[GEM_ERRMAX];
	rule_config_default(name, &c, err);
	c.lr = 0.1f;
	c.nworkers = nworkers;
	if (rule_create(&c, &l, theta, &r, err) < 0)
		BAIL_OUT("%s: %s", name, err);
	for (int w = 0; w < nworkers; w++)
		if (rule_join(r, w, err) < 0)
			BAIL_OUT("%s: %s", name, err);
	return r;
}

/* Commits of ±FLT_MAX by workers 0 and 1 in turn until one is refused: it changed nothing. */
static void overflow(const char *name)
{
	char err[GEM_ERRMAX];
	float t0[N], in[N], reply[N];
	uint64_t ver = 0, base[2] = {0, 0};
	int refused = 0, bad = 0, k;
	struct rule *r;

	for (int i = 0; i < N; i++)
		t0[i] = (float)(i % 5) * 0.25f - 0.5f;
	r = make(name, t0, 2);
	for (k = 0; k < 8 && !refused; k++) {
		struct snap before, after;
		int w = k % 2, rc;
		/* easgd sends x: the center follows it, so x swings to overflow x − θ */
		float v = !strcmp(name, "easgd") && k % 2 ? -FLT_MAX : FLT_MAX;
		for (int i = 0; i < N; i++)
			in[i] = v;
		take(&before, r, ver);
		rc = rule_commit(r, w, in, base[w], &ver, reply, NULL, err);
		take(&after, r, ver);
		if (rc == RULE_E_NON_FINITE) {
			refused = 1;
			ok(same(&before, &after), "%s: commit %d refused: θ, version, state as they were",
			   name, k + 1);
			ok(strstr(err, "non-finite") != NULL, "%s: it says why: %s", name, err);
		} else if (rc < 0) {
			bad = 1;
			diag("%s: commit %d: %s", name, k + 1, err);
		} else if (!all_finite(&after)) {
			bad = 1;
			diag("%s: commit %d applied: θ or the state is not finite", name, k + 1);
		}
		/* rounds: both workers commit at the round's version */
		if (rc == RULE_APPLIED)
			base[0] = base[1] = ver;
		drop(&before);
		drop(&after);
	}
	ok(refused && !bad, "%s: an overflow is refused (after %d commits), every applied one finite",
	   name, k);
	rule_destroy(r);
}

/* A round of 3 (sync, dma, diloco) with θ near FLT_MAX: worker 0's commit leaves the round open but
 * would overflow θ were it closed now: refused, nothing changed. Then a finite one is held, and
 * the leaves of the others close the round with it: θ finite. */
static void round_left_open(const char *name)
{
	char err[GEM_ERRMAX];
	float t0[N], in[N];
	struct snap before, after;
	struct rule_stats st;
	uint64_t ver = 0;
	struct rule *r;
	int rc;

	for (int i = 0; i < N; i++) {
		t0[i] = 3e38f;
		in[i] = 1e38f;
	}
	r = make(name, t0, 3);
	take(&before, r, ver);
	rc = rule_commit(r, 0, in, 0, &ver, NULL, NULL, err);
	take(&after, r, ver);
	ok(rc == RULE_E_NON_FINITE && same(&before, &after),
	   "%s: a commit to an open round that would overflow θ when the round closes is refused, "
	   "nothing changed", name);
	drop(&before);
	drop(&after);
	for (int i = 0; i < N; i++)
		in[i] = -1e38f;
	rc = rule_commit(r, 0, in, 0, &ver, NULL, NULL, err);
	ok(rc == RULE_PENDING && ver == 0, "%s: a finite one is held", name);
	ok(rule_leave(r, 1, &ver, &st, err) == 0 && rule_leave(r, 2, &ver, &st, err) == 1 &&
		   ver == 1 && st.version == 1,
	   "%s: the last leave closes the round", name);
	take(&after, r, ver);
	ok(all_finite(&after) && rule_theta(r)[0] < 3e38f, "%s: θ moved and finite", name);
	drop(&after);
	rule_destroy(r);
}

int main(void)
{
	static const char *rules[] = {"gem", "downpour", "dynsgd", "easgd", "dcasgd", "sync", "dma",
				      "diloco", "async-diloco"};
	char err[GEM_ERRMAX];

	/* one GEM worker commits all FLT_MAX twice: the second overflows m_w */
	{
		float t0[N], in[N];
		uint64_t ver = 0;
		struct snap s1, s2;
		struct rule *r;
		int rc;
		for (int i = 0; i < N; i++) {
			t0[i] = 0.5f;
			in[i] = FLT_MAX;
		}
		r = make("gem", t0, 2);
		ok(rule_commit(r, 0, in, 0, &ver, NULL, NULL, err) == RULE_APPLIED && ver == 1,
		   "gem: the first FLT_MAX commit is applied");
		take(&s1, r, ver);
		ok(all_finite(&s1), "gem: θ and m_w, s_w finite after it");
		rc = rule_commit(r, 0, in, 1, &ver, NULL, NULL, err);
		take(&s2, r, ver);
		ok(rc == RULE_E_NON_FINITE, "gem: the second is refused (m_w = μ·FLT_MAX + FLT_MAX)");
		ok(same(&s1, &s2), "gem: nothing changed");
		drop(&s2);
		for (int i = 0; i < N; i++)
			in[i] = -1e-3f;
		ok(rule_commit(r, 1, in, 1, &ver, NULL, NULL, err) == RULE_APPLIED && ver == 2,
		   "gem: an honest commit is applied after it");
		take(&s2, r, ver);
		ok(all_finite(&s2), "gem: θ finite after the honest commit");
		drop(&s1);
		drop(&s2);
		rule_destroy(r);
	}
	for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
		overflow(rules[i]);
	round_left_open("sync");
	round_left_open("dma");
	round_left_open("diloco");
	return done_testing();
}
