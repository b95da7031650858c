/* rule: the server side of every update rule (GEM, DOWNPOUR, DynSGD, EASGD, DC-ASGD, synchronous
 * momentum SGD, delayed model averaging, DiLoCo in rounds and asynchronous) behind one interface, exactly as doc/rules.md. A rule
 * holds θ; the caller (gem-serve) owns its version counter and serialises calls. A rule keeps
 * per-worker state allocated once at join, and one spare of each of its vector kinds, so a
 * commit allocates nothing: it is computed into the spares and taken only if all of it is
 * finite, so that a refused one changes nothing. Not thread-safe: call everything under the
 * server's lock. */
#ifndef GEM_RULE_H
#define GEM_RULE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/layout.h"

#define RULE_NAME_MAX 16
#define RULE_VEC_NAME_MAX 32

/* Every known rule, space-separated, for usage lines. */
#define RULE_NAMES "gem downpour dynsgd easgd dcasgd sync dma diloco async-diloco"

/* gem's s_w (run.json's rule.gem_ref, doc/rules.md "GEM"): θ after the worker's last commit
 * (the default), or θ just before it was applied, as the authors' code, which also adds ε to
 * the signed update inside |·|. */
enum { RULE_GEM_REF_COMMIT = 0, RULE_GEM_REF_PULL = 1 };
#define RULE_GEM_REFS "commit pull" /* their names, in that order */

/* The precision of a rule's per-worker vectors (run.json's rule.state_precision): float32, or
 * bfloat16 rounded to nearest even (gem's m_w and s_w: half the memory). */
enum { RULE_STATE_F32 = 0, RULE_STATE_BF16 = 1 };
#define RULE_STATE_PRECISIONS "f32 bf16" /* their names, in that order */

/* What rule_commit did. */
enum {
	RULE_APPLIED = 0, /* θ was updated and *version incremented: reply now */
	RULE_PENDING = 1, /* rounds: held for the round; reply when a later call is RULE_APPLIED */
	RULE_E_NON_FINITE = -10, /* refused: θ or the rule's state would not be finite */
};

/* What the worker does between two commits (its half of the rule: lib/rules/worker_half.h). */
enum rule_sends {
	RULE_SENDS_STEP,  /* Δθ: −η∇L of one step, or x_λ − x_0 after λ plain SGD steps (window λ) */
	RULE_SENDS_X,     /* its own x after λ plain SGD steps; the reply d pulls it: x ← x − d */
	RULE_SENDS_CYCLE, /* Δ_w = x_w − x_w^init of λ momentum-SGD steps, sent in the background */
	RULE_SENDS_OUTER, /* x_λ − x_0 after λ steps of the run's optimiser, its state kept from one
			   * commit to the next; the reply θ replaces x (diloco's, async-diloco's) */
};

/* What a rule is, for the code around it (server core, worker, simulator, gem-init): each
 * lib/rules/<name>.c describes itself with one of these, and no other module names a rule. */
struct rule_desc {
	const char *name;
	const char *fields;  /* its own run.json "rule" fields, beside lr, momentum and nworkers */
	int window;          /* default λ, local steps per commit (1 for rules without "window") */
	enum rule_sends sends;
	int reply_elastic;   /* the commit's reply carries easgd's d (blob "elastic"), not θ */
	int rounds;          /* commits wait for a round of every worker: needs nworkers; no τ bound */
	int background;      /* the worker commits in the background and carries on */
	int scratch;         /* floats of rule-wide scratch per parameter */
	/* with a window > 1 the worker takes the run's optimiser's steps and sends as
	 * RULE_SENDS_OUTER (gem on pseudo-gradients); outer_momentum (default 0) is then the
	 * rule's, and must stay 0 with a window of 1 */
	int outer_window;
};

struct rule_config {
	char name[RULE_NAME_MAX]; /* one of RULE_NAMES */
	float lr;                 /* η (the run's): dcasgd's g = −Δ/η */
	float momentum;           /* μ (the run's, default 0.9): gem's m_w, sync's v, dma's local v */
	float kappa, pi_max, eps; /* gem: κ = 1, π_max = 5, ε = 1e-12 */
	int tensor_stats;         /* gem: 1 (default) computes median π per tensor (rule_stats) */
	int gem_ref;              /* gem: what |θ − s_w| measures against (RULE_GEM_REF_*) */
	int state_precision;      /* gem: its m_w and s_w in RULE_STATE_F32 or RULE_STATE_BF16 */
	int window;               /* λ, used by the worker: downpour 1, easgd 10; dma's β 4; gem 1,
				   * or H inner steps */
	float alpha;              /* easgd: 0 → 0.9/n */
	float lambda_dc;          /* dcasgd: λ_dc = 0.04 (the paper's DC-ASGD-c) */
	float outer_lr;           /* diloco, async-diloco: η_o = 0.7, the outer Nesterov step's rate */
	float outer_momentum;     /* diloco, async-diloco: μ_o = 0.9; gem with window > 1: its
				   * proxy's momentum over cycles, μ_o = 0 */
	int delayed_nesterov;     /* async-diloco: N, the arrivals per momentum step (0: off) */
	int dynamic_local_updates; /* async-diloco: 1 gives each worker an H of its own, scaled to
				    * its speed (rule_dynamic_window), in the reply */
	int fragments;            /* diloco, async-diloco: P, the fragments of θ synchronised in
				   * turn, one every H/P inner steps (1: all of θ at once) */
	float mix;                /* diloco, async-diloco: α, a fragment's reply mixed into the
				   * worker's x as x ← α·x + (1 − α)·θ (0: replaced) */
	int overlap;              /* diloco, async-diloco: T < H/P, the inner steps a worker takes
				   * after a commit before it mixes the reply in (0: it waits) */
	int nworkers;             /* n, the workers the run is planned for (0: unset); rules with rounds
				   * wait for n commits, easgd's default α is 0.9/n */
};

/* Per-tensor GEM statistics of one commit. */
struct rule_tensor_stats {
	float pi_median; /* 0 unless tensor_stats; over a stride sample of 2048 in larger tensors */
	float pi_mean;
	float clamped0;   /* fraction of π clamped to 0 */
	float clampedmax; /* fraction of π clamped to π_max */
	float scale;      /* |π⊙Δθ|₁ / |Δθ|₁ (0 when Δθ = 0) */
};

/* What one commit did. Only staleness and version are set by non-GEM rules (ntensors = 0). */
struct rule_stats {
	uint64_t staleness; /* τ = *version − base_version before the commit */
	uint64_t version;   /* *version after the call */
	int ntensors;       /* gem: the layout's tensors (entries of t), else 0 */
	struct rule_tensor_stats all; /* gem: over the whole θ */
	struct rule_tensor_stats t[LAYOUT_MAX_TENSORS];
};

/* One float vector of a rule's state (layout->total floats) for a checkpoint blob. */
struct rule_vec {
	char name[RULE_VEC_NAME_MAX]; /* "m.3", "s.3" (gem, worker 3), "bak.3" (dcasgd), "v", "sum" (sync, diloco) */
	float *data;
	const uint16_t *bf16; /* rule_state_save of a rule whose vectors are bfloat16: these in
			       * place of data (NULL), each exactly a float (rule_bf16_float) */
	size_t n;
};

/* A bfloat16 as the float it is exactly. */
static inline float rule_bf16_float(uint16_t h)
{
	union {
		uint32_t u;
		float f;
	} v = {.u = (uint32_t)h << 16};
	return v.f;
}

struct rule;

/* The inner steps H_w the server tells worker w to take next with dynamic local updates
 * (async-diloco, doc/rules.md): round(H · rate / fastest) within [1, H], where rate is w's inner
 * steps per second as the server measured them and fastest the highest rate of the workers
 * joined; H (c->window) when c does not have them on, or rate or fastest is not a positive
 * number. */
int rule_dynamic_window(const struct rule_config *c, double rate, double fastest);

/* The descriptor of the named rule; NULL if there is none. */
const struct rule_desc *rule_describe(const char *name);
/* The error for a name that is no rule: the valid names, and a "did you mean". GEM_EUSAGE. */
int rule_err_unknown(char *err, const char *name);

/* The passes to use: 1 AVX2 where a rule has them (GEM's commit), 0 portable; a level the CPU
 * lacks becomes the highest it has (tests force each: both give the same floats). level = -1
 * only asks. Returns the level in use before. */
int rule_simd(int level);

/* 1 if the n floats of v are all finite (an update before any rule sees it). */
int rule_vec_finite(const float *v, size_t n);

/* What the workers of rule c send between two commits: its descriptor's sends, or
 * RULE_SENDS_OUTER for a rule with outer_window and a window > 1. */
enum rule_sends rule_sends_of(const struct rule_config *c);

#define RULE_OUTER_LR 0.7f /* Douillard et al. 2023: DiLoCo's outer rate */
/* Fill *c with the defaults of the named rule; an unknown name is GEM_EUSAGE listing RULE_NAMES. */
int rule_config_default(const char *name, struct rule_config *c, char *err);
/* The defaults of *c that depend on its number of workers N = c->nworkers (> 1), for the fields
 * not given (outer_lr_given, delayed_given): a rule with delayed Nesterov (async-diloco), whose
 * every commit is an outer step of its own, takes the outer rate divided by N and delayed
 * Nesterov over N arrivals (without --fragments, which does not go with it), the setting
 * doc/results.md measured to match sync where DiLoCo's 0.7 diverged. Others: unchanged. */
void rule_config_workers(struct rule_config *c, int outer_lr_given, int delayed_given);
/* The options that scale a step of rule c, as words for a divergence's message ("a lower
 * --lr"): its outer step's too ("--outer-lr", "--delayed-nesterov") for a rule with one. */
const char *rule_step_options(const struct rule_config *c);
/* The RULE_GEM_REF_* of a name in RULE_GEM_REFS ("commit", "pull"); -1 for any other. */
int rule_gem_ref_parse(const char *name);
/* The RULE_STATE_* of a name in RULE_STATE_PRECISIONS ("f32", "bf16"); -1 for any other. */
int rule_state_precision_parse(const char *name);
/* Check every field of *c; GEM_EUSAGE names the first bad one. */
int rule_config_check(const struct rule_config *c, char *err);
/* Read run.json's "rule" object: defaults of its "name" (gem if absent), overridden by the fields
 * given. An unknown field, a field the rule does not use, a wrong type or value is GEM_EUSAGE. */
int rule_config_from_json(const json_t *obj, struct rule_config *c, char *err);
/* run.json's "rule" object: name and the fields this rule uses (new reference; NULL: no memory).
 * Floats are stored as their shortest decimal: dump with JSON_REAL_PRECISION(9) to read 0.9. */
json_t *rule_config_to_json(const struct rule_config *c);

/* Make a rule for parameters laid out as l (copied), θ starting as theta (l->total floats,
 * copied). */
int rule_create(const struct rule_config *c, const struct layout *l, const float *theta,
		struct rule **out, char *err);
void rule_destroy(struct rule *r);
const struct rule_config *rule_config_of(const struct rule *r);
/* Floats in θ (the layout's total). */
size_t rule_nparams(const struct rule *r);
/* What the rule is (its descriptor). */
const struct rule_desc *rule_desc_of(const struct rule *r);
/* Bytes of memory the rule's state holds: θ's buffers (θ, a commit's spare, and the θ last sent
 * to each worker), its rule-wide vectors and their spares, its scratch, and every joined
 * worker's vectors (gem: m_w and s_w, 2·4·|θ| bytes a worker). */
size_t rule_state_bytes(const struct rule *r);
/* Bytes rule_join of a worker not joined adds to rule_state_bytes. */
size_t rule_join_bytes(const struct rule *r);
/* θ (rule_nparams floats), until the next call that moves it (rule_commit, rule_leave). */
const float *rule_theta(const struct rule *r);

/* Worker w (an id >= 0) joins and receives θ: allocate its state (gem: m_w = 0, s_w = θ;
 * dcasgd: w_bak = θ). The rules with rounds refuse a worker beyond nworkers; a joined id is refused. */
int rule_join(struct rule *r, int worker, char *err);
/* θ was just sent to worker w (a pull): gem's s_w, dcasgd's w_bak. rule_commit already records
 * the θ it leaves behind as sent to the committing worker. Unknown workers are ignored. */
void rule_sent(struct rule *r, int worker);
/* Apply worker w's commit `in` (layout->total floats): Δθ = −η∇L computed at base_version
 * (downpour: the sum of λ local updates; easgd: the worker's x; dma: the worker's delta of one
 * cycle, Δ_w = x_w − x_w^init) to θ, of which *version is the version. Returns RULE_APPLIED (θ updated, ++*version), RULE_PENDING (rounds: held until the
 * round's last commit, which returns RULE_APPLIED), RULE_E_NON_FINITE when the result (θ, the
 * reply or the rule's state) would not be finite, an overflow of finite inputs: nothing changed;
 * or GEM_EUSAGE: unknown worker, base_version ahead of *version, easgd without a reply, sync and
 * dma: a second commit in a round or a stale base. reply (n floats; NULL: none) receives, in
 * the commit's pass, what the worker gets back from an applied commit: θ after it, or easgd's
 * elastic difference d (the worker subtracts it); otherwise its contents are undefined. st
 * (may be NULL) receives the commit's statistics. */
int rule_commit(struct rule *r, int worker, const float *in, uint64_t base_version,
		uint64_t *version, float *reply, struct rule_stats *st, char *err);
/* rule_commit of fragment p of P (the config's fragments; doc/rules.md "Streaming fragments"):
 * in and reply are the fragment's floats, the slice layout_slice(n, p, P) of θ, and the commit
 * moves θ and the rule's state in that slice only. A rule with rounds synchronises fragment
 * *version mod P in the round at *version: another p is GEM_EUSAGE, as is p outside [0, P).
 * rule_commit is fragment 0 of this. */
int rule_commit_fragment(struct rule *r, int worker, int p, const float *in, uint64_t base_version,
			 uint64_t *version, float *reply, struct rule_stats *st, char *err);
/* Worker w leaves: its state is freed; the rules with rounds and easgd continue with those remaining.
 * Returns 1 if the leave completed a pending round (θ, *version and st updated: reply to the waiting
 * workers), 0 if not, GEM_EUSAGE for an unknown worker. */
int rule_leave(struct rule *r, int worker, uint64_t *version, struct rule_stats *st, char *err);

/* The rule's state for a checkpoint: *meta a new JSON object (rule, workers, sync round) and
 * *vecs a malloc'd array of *nvec vectors pointing into the rule, valid until the next call that
 * changes it. The caller writes them (blobs named by rule_vec.name), then free(*vecs) and
 * json_decref(*meta). */
int rule_state_save(const struct rule *r, json_t **meta, struct rule_vec **vecs, int *nvec, char *err);
/* Restore a saved state into a rule just created with the same config and layout, before any
 * join: the saved workers are joined again. vecs are matched by name; a missing or mis-sized
 * one is GEM_EFAIL. */
int rule_state_load(struct rule *r, const json_t *meta, const struct rule_vec *vecs, int nvec,
		    char *err);
#endif
