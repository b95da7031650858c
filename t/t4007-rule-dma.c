/* t4007: delayed model averaging, the server's half: a round is every worker's delta of one
 * cycle, X_{j+1} = X_j + mean(Δ) with no momentum, refusals, leaves, config and checkpoints. */
#include "base/err.h"
#include "rules/rule.h"
#include "rule-test.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static struct rule *make_dma(int nworkers, const float *theta)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	rule_config_default("dma", &c, err);
	c.nworkers = nworkers;
	c.momentum = 0.9f; /* the workers' local μ: the server must not use it */
	return rule_of(&c, theta, 2);
}

/* config: β is the window (default 4), nworkers is required */
static void config(void)
{
	char err[GEM_ERRMAX];
	struct rule *r;
	struct rule_config c;
	struct layout l = layout_n(2);
	const float t[2] = {0, 0};
	json_t *j, *o;
	ok(rule_config_default("dma", &c, err) == 0 && c.window == 4, "dma's default β = 4");
	ok(strstr(RULE_NAMES, "dma") != NULL, "dma is in RULE_NAMES");
	ok(rule_create(&c, &l, t, &r, err) == GEM_EUSAGE && strstr(err, "nworkers") && strstr(err, "dma"),
	   "dma without nworkers is refused: %s", err);
	o = json_pack("{s:s, s:i, s:i}", "name", "dma", "window", 8, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == 0 && c.window == 8 && c.nworkers == 2,
	   "run.json's window is β");
	json_decref(o);
	j = rule_config_to_json(&c);
	ok(j && json_integer_value(json_object_get(j, "window")) == 8 &&
		   json_object_get(j, "nworkers") && json_object_get(j, "momentum") &&
		   !json_object_get(j, "kappa") && !json_object_get(j, "alpha"),
	   "dma records lr, momentum, nworkers and window, nothing of the other rules");
	json_decref(j);
	o = json_pack("{s:s, s:f, s:i}", "name", "dma", "alpha", 0.5, "nworkers", 2);
	ok(rule_config_from_json(o, &c, err) == GEM_EUSAGE, "alpha is not dma's: %s", err);
	json_decref(o);
}

/* the rounds, 3 workers, X_0 = (0, 0):
 * cycle 0: Δ = (1, 2), (2, 0), (3, 1): X_1 = X_0 + mean(Δ) = (2, 1)
 * cycle 1: Δ = (1, 1), (0, 3), (2, −1): X_2 = (2, 1) + (1, 1) = (3, 2) (sync with μ = 0.9
 * would give (4.8, 2.9): dma averages models, no momentum at the server) */
static void rounds(void)
{
	char err[GEM_ERRMAX];
	struct rule_stats st;
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0};
	r = make_dma(3, t);
	ok(rule_desc_of(r)->rounds == 1, "dma is round-based");
	for (int w = 0; w < 3; w++)
		rule_join(r, w, err);
	ok(rule_join(r, 3, err) == GEM_EUSAGE, "a 4th worker is refused: %s", err);
	ok(commit2(r, 0, 1, 2, 0, t, &ver, err) == RULE_PENDING, "cycle 0: first delta pending");
	ok(commit2(r, 1, 2, 0, 0, t, &ver, err) == RULE_PENDING, "cycle 0: second delta pending");
	ok(ver == 0 && t[0] == 0 && t[1] == 0, "X and version wait for the round");
	ok(commit2(r, 0, 5, 5, 0, t, &ver, err) == GEM_EUSAGE && strstr(err, "already"),
	   "a second delta of the same cycle is refused: %s", err);
	ok(t[0] == 0 && t[1] == 0, "... and not added");
	ok(commit1(r, 2, (float[]){3, 1}, 0, t, &ver, NULL, &st, err) == RULE_APPLIED,
	   "the third delta completes the round");
	ok(ver == 1 && st.version == 1 && st.staleness == 0, "one version per cycle");
	ok(t[0] == 2 && t[1] == 1, "X_1 = X_0 + mean(Δ) = (2, 1)");
	ok(commit2(r, 0, 1, 1, 0, t, &ver, err) == GEM_EUSAGE && strstr(err, "old"),
	   "a delta on top of X_0 after X_1 is refused: %s", err);
	ok(commit2(r, 0, 1, 1, 1, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 1, 0, 3, 1, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 2, 2, -1, 1, t, &ver, err) == RULE_APPLIED,
	   "cycle 1: pending, pending, applied");
	ok(ver == 2 && t[0] == 3 && t[1] == 2, "X_2 = (3, 2): no momentum");

	/* cycle 2: workers 0 and 1 send (1, 1) and (3, 3), worker 2 leaves without its delta:
	 * the round completes with the two: X_3 = (3, 2) + (2, 2) = (5, 4) */
	ok(commit2(r, 0, 1, 1, 2, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 1, 3, 3, 2, t, &ver, err) == RULE_PENDING,
	   "cycle 2: two deltas pending");
	ok(leave1(r, 2, t, &ver, &st, err) == 1 && ver == 3 && st.version == 3,
	   "the third worker leaves: the round completes");
	ok(t[0] == 5 && t[1] == 4, "X_3 = X_2 + mean of the two deltas = (5, 4)");
	ok(commit2(r, 0, 1, 1, 3, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 1, 3, -1, 3, t, &ver, err) == RULE_APPLIED && t[0] == 7 && t[1] == 4,
	   "cycle 3 waits for the two remaining only: X_4 = (7, 4)");
	/* a worker that sent its delta leaves: the delta stays in the round */
	ok(commit2(r, 0, 4, 0, 4, t, &ver, err) == RULE_PENDING &&
		   leave1(r, 0, t, &ver, &st, err) == 0 && ver == 4,
	   "a worker leaves after its delta: round pending");
	ok(commit2(r, 1, 0, 2, 4, t, &ver, err) == RULE_APPLIED && ver == 5 && t[0] == 9 && t[1] == 5,
	   "its delta stays in: X_5 = (7, 4) + mean((4, 0), (0, 2)) = (9, 5)");
	ok(rule_join(r, 7, err) == 0, "a replacement worker joins");
	ok(commit2(r, 1, 2, 2, 5, t, &ver, err) == RULE_PENDING &&
		   commit2(r, 7, 0, 0, 5, t, &ver, err) == RULE_APPLIED && t[0] == 10 && t[1] == 6,
	   "and the rounds wait for it too: X_6 = (10, 6)");
	rule_destroy(r);
}

/* one worker: each delta is X's next step, X_{j+1} = X_j + Δ */
static void one_worker(void)
{
	char err[GEM_ERRMAX];
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {1, 1};
	r = make_dma(1, t);
	rule_join(r, 0, err);
	ok(commit2(r, 0, 0.5f, -1, 0, t, &ver, err) == RULE_APPLIED && t[0] == 1.5f && t[1] == 0,
	   "W = 1: X_1 = X_0 + Δ");
	rule_destroy(r);
}

/* checkpoint mid-round: save with worker 0's delta in, load into a new rule, finish the
 * round in both: the same X, and worker 0 still may not send twice */
static void checkpoint_mid_round(void)
{
	char err[GEM_ERRMAX];
	struct rule *r;
	uint64_t ver = 0;
	float t[2] = {0, 0}, t2[2], v1[2];
	uint64_t ver2;
	struct rule *r2;
	struct rule_vec *vecs;
	json_t *meta;
	int nvec, rc;

	ver = 0;
	r = make_dma(2, t);
	rule_join(r, 0, err);
	rule_join(r, 1, err);
	commit2(r, 0, 1, 2, 0, t, &ver, err);
	commit2(r, 1, 3, 4, 0, t, &ver, err); /* X_1 = (2, 3) */
	commit2(r, 0, 4, -2, 1, t, &ver, err);
	ok(rule_state_save(r, &meta, &vecs, &nvec, err) == 0 && nvec == 1 &&
		   !strcmp(vecs[0].name, "sum"),
	   "state: one vector, the round's sum");
	r2 = make_dma(2, t);
	rc = rule_state_load(r2, meta, vecs, nvec, err);
	ok(rc == 0, "state loads into a new rule");
	free(vecs);
	json_decref(meta);
	memcpy(t2, t, sizeof t);
	ver2 = ver;
	ok(commit2(r2, 0, 9, 9, 1, t2, &ver2, err) == GEM_EUSAGE,
	   "loaded: worker 0 has sent its delta of cycle 1: %s", err);
	ok(commit2(r, 1, 2, 0, 1, t, &ver, err) == RULE_APPLIED &&
		   commit2(r2, 1, 2, 0, 1, t2, &ver2, err) == RULE_APPLIED,
	   "both complete the round with worker 1's delta");
	v1[0] = 2 + 3, v1[1] = 3 - 1; /* X_2 = (2, 3) + mean((4, −2), (2, 0)) = (5, 2) */
	ok(t[0] == v1[0] && t[1] == v1[1] && t2[0] == v1[0] && t2[1] == v1[1] && ver == 2 && ver2 == 2,
	   "the same X_2 = (5, 2) before and after the round trip");
	rule_destroy(r);
	rule_destroy(r2);
}

int main(void)
{
	config();
	rounds();
	one_worker();
	checkpoint_mid_round();
	return done_testing();
}
