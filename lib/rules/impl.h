/* rules/impl.h: what rule.c shares with the rules/<name>.c files (not part of libgem's
 * interface). doc/rules.md gives the math of each rule.
 * rule.c keeps the workers, versions, configs and checkpoints; a rule file only updates θ. */
#ifndef GEM_RULE_IMPL_H
#define GEM_RULE_IMPL_H
#include <stdint.h>
#include <string.h>

#include "rules/rule.h"

/* Element loops are written as blocks of RULE_BLOCK with a fixed-count inner loop plus a scalar
 * tail: gcc's -O2 vectoriser (very-cheap cost model) only takes loops whose count it knows. */
#define RULE_BLOCK 8
/* ... and only when the pointers are restrict, which gcc forgets when it inlines the function:
 * the loops over θ live in functions kept out of line. */
#define RULE_NOINLINE __attribute__((noinline))

struct rule_worker {
	int active;
	int committed; /* sync, dma: committed in the current round */
	float *vec[2]; /* ops->vec names them */
	float vmax;    /* a bound of |vec[0]| that the last commit left (GEM's m_w); +inf unknown */
};

struct rule;

struct rule_ops {
	struct rule_desc desc;
	int nvec;           /* per-worker vectors */
	const char *vec[2]; /* their names ("m", "s"; "bak") */
	int sent_vec;       /* the one that holds θ last sent, -1 none */
	int reply_theta;    /* commit writes the new θ into a non-NULL reply itself (else
			     * rule_commit copies it there) */
	int round_sum;      /* rounds: the global vector that sums the round's updates */
	/* rounds: apply a complete round to θ (r->ncontrib updates in the sum; zero the sum) */
	void (*round_close)(struct rule *r, float *theta);
	/* rounds: 1 if round_close would leave θ (and the rule's vectors) finite with the sum
	 * sum + in of k contributions */
	int (*round_check)(const struct rule *r, const float *theta, const float *in, float k);
	int nglobal;        /* rule-wide vectors (sync: "v", "sum"; dma: "sum") */
	const char *global[2];
	/* Whether one commit would leave θ, the reply and the rule's state finite: 1 yes (or the
	 * commit will be refused for another reason), 0 no. It reads and writes nothing else: a
	 * pass over the vectors commit will touch, computing each new value as commit does
	 * (same expressions, same order: the same floats), so a commit is refused before it
	 * changes anything (rule_commit). Finite inputs can overflow (2·FLT_MAX). */
	int (*check)(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		     const float *theta);
	/* Apply one commit (τ computed, worker checked); RULE_APPLIED, RULE_PENDING or < 0. */
	int (*commit)(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		      float *theta, float *reply, struct rule_stats *st, char *err);
	/* Optional: before a join is accepted / after a worker left (1: a round completed). */
	int (*join)(struct rule *r, char *err);
	int (*leave)(struct rule *r, struct rule_worker *w, float *theta, struct rule_stats *st);
};

struct rule {
	struct rule_config c;
	const struct rule_ops *ops;
	struct layout l;
	size_t n;                  /* floats in θ */
	struct rule_worker *w;     /* indexed by worker id */
	int cap, nactive;
	float *global[2];          /* ops->global */
	float *scratch;            /* gem: π of the last commit, then 32-bit room for the medians */
	/* A bound of |θ| that a commit left (GEM: tmax, and tmax_fresh to say so), valid for that θ
	 * at that version only (another rule's commit, a leave or any other θ makes it unknown);
	 * tbound is the one a check may use (+inf: unknown). GEM's
	 * overflow check trusts it and rule_worker.vmax: code that comes to write θ or a worker's
	 * vec[0] otherwise than through rule_commit, rule_leave, rule_join or rule_state_load must
	 * clear tmax_valid or set vmax to +inf. */
	float tmax, tbound;
	int tmax_valid, tmax_fresh;
	float in_absmax; /* rule_hint_absmax's, for the commit under way when in_hinted */
	int in_hinted;
	uint64_t tmax_version;
	const float *tmax_theta;
	int target, ncommitted, ncontrib; /* sync and dma round: see round.c */
};

/* The checks (ops->check) run on vectors of 4 floats (GCC's vector extension), their lanes in
 * registers: written as the commit loops are, gcc kept the check's lanes in memory and the
 * pass took 3 times as long as the commit. A check ORs the bits of x − x of every new value x
 * into its lanes: +0 (no bit set) for a finite x, NaN for an infinite or NaN one; an OR, not a
 * sum, so that no chain of float additions bounds the loop. rule_finite4: all lanes 0. */
typedef float rule_v4 __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t rule_i4 __attribute__((vector_size(4 * sizeof(int32_t))));

static inline rule_v4 rule_load4(const float *p)
{
	rule_v4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline rule_v4 rule_abs4(rule_v4 x)
{
	return (rule_v4)((rule_i4)x & 0x7fffffff);
}

/* acc's lanes and the scalar tail's sum all 0 */
static inline int rule_finite4(rule_i4 acc, float tail)
{
	return !(acc[0] | acc[1] | acc[2] | acc[3]) && tail == 0;
}

/* The hot passes of GEM's commit also run on vectors of 8 floats: gcc lowers them to two of 4
 * in the portable build and makes one AVX2 register of them in RULE_AVX2 functions (16
 * registers of 8 lanes instead of 16 of 4: the portable pass spilled its constants). Lane j of
 * a block of 8 is element i + j either way, so both give the same floats, sums included. */
typedef float rule_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t rule_i8 __attribute__((vector_size(8 * sizeof(int32_t))));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RULE_X86 1
#define RULE_AVX2 __attribute__((target("avx2")))
#endif

/* |x| of a rule_v8 (a macro: a function returning one would change the ABI without AVX) */
#define RULE_ABS8(x) ((rule_v8)((rule_i8)(x) & 0x7fffffff))

/* 1: use the RULE_AVX2 passes (the CPU has AVX2 and no test forced the portable ones) */
int rule_avx2(void);

/* 1 if the n floats of v are all finite, and then *max = max |v_i| (0 for n = 0). */
int rule_vec_absmax(const float *v, size_t n, float *max);

/* 1 if a + d is finite for all n floats (DOWNPOUR's θ + Δ). */
int rule_check_add(const float *restrict a, const float *restrict d, size_t n);

/* a ← a + d over n floats (DOWNPOUR's θ += Δ, a round's sum += Δ). */
void rule_vec_add(float *restrict a, const float *restrict d, size_t n);

/* The rules with rounds use these as their commit, join and leave (round.c). */
/* A round's check: the sum with this commit, and the round closed now with it (ops->round_check
 * does that part: the sum s = sum + in and k = ncontrib + 1 contributions). A round closed later by
 * a leave is closed with that same sum and θ, so it stays finite too. */
int rule_round_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		     const float *theta);
int rule_round_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
		      float *theta, float *reply, struct rule_stats *st, char *err);
int rule_round_join(struct rule *r, char *err);
int rule_round_leave(struct rule *r, struct rule_worker *w, float *theta, struct rule_stats *st);

extern const struct rule_ops rule_gem_ops, rule_downpour_ops, rule_dynsgd_ops, rule_easgd_ops,
	rule_dcasgd_ops, rule_sync_ops, rule_dma_ops;
#endif
