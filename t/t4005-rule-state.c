/* t4005: a rule's state saved and loaded (through JSON text and copied vectors, as a checkpoint
 * would, with θ) gives the same subsequent commits, bit for bit, for every rule, and for gem
 * with bfloat16 state (saved as floats, as a checkpoint does). */
#include "base/err.h"
#include "base/rng.h"
#include "rules/rule.h"
#include "tap.h"

#include <string.h>

#define N 37
#define W 3

static void fill(struct rng *g, float *x, float sd)
{
	for (int i = 0; i < N; i++)
		x[i] = sd * (float)rng_normal(g);
}

/* One commit of worker w with a random update on rule r; returns rule_commit's code. */
static int step(struct rule *r, int w, uint64_t seed, uint64_t *ver, uint64_t base,
		struct rule_stats *st)
{
	struct rng g;
	float in[N], reply[N];
	char err[GEM_ERRMAX];
	int rc;
	rng_seed(&g, seed, (uint64_t)w);
	fill(&g, in, 0.1f);
	if (!strcmp(rule_config_of(r)->name, "easgd"))
		for (int i = 0; i < N; i++)
			in[i] += rule_theta(r)[i];
	rc = rule_commit(r, w, in, base, ver, reply, st, err);
	if (rc < 0)
		diag("commit: %s", err);
	return rc;
}

int main(void)
{
	const char *names[] = {"gem", "downpour", "dynsgd", "easgd", "dcasgd", "sync", "dma", "diloco",
			       "async-diloco", "gem"};
	const int bf16 = 9; /* the second gem: state_precision bf16 */
	size_t sizes[3] = {10, 7, 20};
	struct layout l;
	char err[GEM_ERRMAX];

	memset(&l, 0, sizeof l);
	l.ntensors = 3;
	for (int i = 0; i < 3; i++) {
		l.t[i].offset = l.total;
		l.t[i].size = sizes[i];
		l.total += sizes[i];
	}
	for (int k = 0; k < (int)(sizeof names / sizeof *names); k++) {
		struct rule_config c;
		struct rule *a, *b;
		struct rule_vec *vecs, copies[16];
		struct rule_stats sa, sb;
		struct rng g;
		float theta[N];
		uint64_t va = 0, vb;
		json_t *meta, *meta2;
		char *text;
		int nvec, same = 1, rc = 0, rounds, saved;

		rule_config_default(names[k], &c, err);
		c.nworkers = W;
		c.lr = 0.1f;
		c.state_precision = k == bf16 ? RULE_STATE_BF16 : RULE_STATE_F32;
		rng_seed(&g, 4005, 0);
		fill(&g, theta, 1);
		rule_create(&c, &l, theta, &a, err);
		rounds = rule_desc_of(a)->rounds;
		for (int w = 0; w < W; w++)
			rule_join(a, w, err);
		/* some history: rounds complete 3 and leave one pending (worker 0 committed) */
		for (int s = 0; s < 3; s++)
			for (int w = 0; w < W; w++)
				step(a, w, 100 + s, &va, rounds ? va : (va > 0 ? va - 1 : 0), NULL);
		step(a, 0, 200, &va, va, NULL);
		rule_sent(a, 1);

		saved = rule_state_save(a, &meta, &vecs, &nvec, err) == 0;
		ok(saved, "%s: state saved (%d vectors)", names[k], nvec);
		if (k == bf16)
			ok(nvec == 2 * W && vecs[0].bf16 && !vecs[0].data, "gem bf16: its vectors are bfloat16");
		text = json_dumps(meta, JSON_COMPACT);
		for (int i = 0; i < nvec; i++) {
			copies[i] = vecs[i];
			copies[i].data = malloc(vecs[i].n * sizeof(float));
			copies[i].bf16 = NULL;
			for (size_t j = 0; j < vecs[i].n; j++)
				copies[i].data[j] = vecs[i].bf16 ? rule_bf16_float(vecs[i].bf16[j])
								 : vecs[i].data[j];
		}
		free(vecs);
		json_decref(meta);
		meta2 = json_loads(text, 0, NULL);
		memcpy(theta, rule_theta(a), sizeof theta);
		rule_create(&c, &l, theta, &b, err);
		ok(rule_state_load(b, meta2, copies, nvec, err) == 0, "%s: state loaded", names[k]);
		if (nvec > 0) {
			ok(rule_state_load(b, meta2, copies, nvec, err) == GEM_EUSAGE, "%s: a second load is refused", names[k]);
			rule_destroy(b);
			rule_create(&c, &l, theta, &b, err);
			ok(rule_state_load(b, meta2, copies, nvec - 1, err) == GEM_EFAIL, "%s: a missing vector: %s",
			   names[k], err);
			rule_destroy(b);
			rule_create(&c, &l, theta, &b, err);
			rule_state_load(b, meta2, copies, nvec, err);
		}
		vb = va;
		for (int s = 0; s < 4 && rc >= 0; s++)
			for (int w = 1; w < W + 1 && rc >= 0; w++) {
				int ww = w % W;
				uint64_t base = rounds ? va : (va > 0 ? va - 1 : 0);
				rc = step(a, ww, 300 + s, &va, base, &sa);
				if (step(b, ww, 300 + s, &vb, base, &sb) != rc || va != vb ||
				    memcmp(rule_theta(a), rule_theta(b), sizeof theta) ||
				    (sa.ntensors && memcmp(&sa.all, &sb.all, sizeof sa.all)))
					same = 0;
			}
		ok(rc >= 0 && same, "%s: the loaded rule commits as the saved one, bit for bit", names[k]);
		for (int i = 0; i < nvec; i++)
			free(copies[i].data);
		free(text);
		json_decref(meta2);
		rule_destroy(a);
		rule_destroy(b);
	}
	return done_testing();
}
