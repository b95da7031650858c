/* rules/impl.h: what rule.c shares with the rules/<name>.c files (not part of libgem's
 * interface). doc/rules.md gives the math of each rule.
 * rule.c keeps the workers and versions, rule_config.c the configs, rule_state.c the
 * checkpoints; a rule file only computes.
 *
 * A commit is one pass per rule: it writes θ′ and every state vector it changes into spare
 * buffers, ORs the finiteness of what it wrote, and the new buffers are taken only if all of it
 * is finite. A refused commit has then changed nothing, and the arithmetic is written once.
 * θ's buffers are shared: the vector a rule keeps of the θ last sent to a worker (gem's s_w,
 * dcasgd's w_bak) is the buffer θ was in then, so that θ′ is written once. */
#ifndef GEM_RULE_IMPL_H
#define GEM_RULE_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rules/rule.h"

/* The passes go over θ in blocks of one vector (below) and finish with a scalar tail; GEM's
 * blocks are RULE_BLOCK elements, one rule_v8. */
#define RULE_BLOCK 8
/* gcc keeps a pointer's restrict only in the function whose parameter it is, not where that
 * function is inlined: the passes over θ are kept out of line. */
#define RULE_NOINLINE __attribute__((noinline))

/* The slice of θ one call (a commit, a leave) moves: its fragment (rule_commit_fragment), [0, n)
 * without fragments. The passes read and write the vectors there only, and their spares are
 * taken back there (rule_take_vec). */
struct rule_span {
	size_t off, len;
};

/* A buffer of θ: θ now, the θ last sent to some workers, or free. */
struct rule_snap {
	float *v;
	int refs; /* θ (1) and the workers whose sent vector it is */
};

struct rule_worker {
	int active;
	int committed;          /* rounds: committed in the current round */
	float *vec[2];          /* ops->vec names them; vec[ops->sent_vec] is sent->v; of a rule
				 * with ops->bf16_state, n uint16_t each (rule_bf16_vec) */
	struct rule_snap *sent; /* the θ last sent (ops->sent_vec >= 0) */
};

struct rule;

struct rule_ops {
	struct rule_desc desc;
	int nvec;           /* per-worker vectors */
	const char *vec[2]; /* their names ("m", "s"; "bak") */
	int sent_vec;       /* the one that holds θ last sent, -1 none */
	/* 1: the per-worker vectors (and their spares) are bfloat16, n uint16_t each, and θ last
	 * sent is a rounded copy the rule writes itself (sent) */
	int bf16_state;
	/* the same rule with bfloat16 per-worker vectors (NULL: it has none) */
	const struct rule_ops *bf16;
	/* bf16_state: θ is sent to w now; record it */
	void (*sent)(struct rule *r, struct rule_worker *w);
	/* 1 if a commit leaves θ before it in its worker's sent vector (gem_ref pull), not θ′;
	 * NULL: θ′ */
	int (*sent_before)(const struct rule *r);
	int nglobal;        /* rule-wide vectors (sync, diloco: "v", "sum"; dma: "sum";
			     * async-diloco: "v", "a") */
	const char *global[2];
	/* Rules without rounds: one commit (τ computed, the worker checked) in one pass: θ′ into
	 * rule_theta_next, the new value of each of w's vectors but the sent one into r->spare,
	 * the reply (θ′, or easgd's d) into reply unless it is NULL, the statistics into st
	 * unless NULL. Returns 1 if all it wrote is finite, else 0 (rule_commit then takes none
	 * of it). */
	int (*pass)(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		    const float *in, uint64_t tau, float *reply, struct rule_stats *st);
	/* Rules without rounds that keep global vectors: take what the pass wrote into r->gspare
	 * once rule_commit takes the commit (NULL: none) */
	void (*take)(struct rule *r, const struct rule_span *sp);
	/* Rounds (round.c): the global vector that sums the round's updates, and the round's pass
	 * over k contributions with in (NULL: the sum alone, when a leave closes the round). Its
	 * sum s = sum + in goes to the sum's spare; with close, the round is applied instead: θ′
	 * into rule_theta_next and reply (unless NULL), the rule's other new vectors into
	 * r->gspare, and the sum's spare zeroed. Either way 1 if what closing the round now would
	 * write (s included) is finite. */
	int round_sum;
	int (*round_pass)(struct rule *r, const struct rule_span *sp, const float *in, float *reply,
			  float k, int close);
};

struct rule {
	struct rule_config c;
	const struct rule_ops *ops;
	struct layout l;
	size_t n;                  /* floats in θ */
	struct rule_worker *w;     /* indexed by worker id */
	int cap, nactive;
	float *global[2];          /* ops->global */
	/* θ's buffers: θ, and those no one references, a commit writing θ′ into the last; one
	 * more than θ and the workers' sent vectors can reference (nsnap in all) */
	struct rule_snap *theta, **free;
	int nfree, free_cap, nsnap;
	/* a commit's new values of a worker's vector (ops->vec, but the sent one) and of a global
	 * one: swapped with the vector they replace when the commit is taken */
	float *spare[2], *gspare[2];
	float *scratch;            /* gem: π of the last commit, then 32-bit room for the medians */
	int target, ncommitted, ncontrib; /* the rules with rounds: see round.c; async-diloco:
					   * ncontrib counts its open group */
};

/* The passes run on vectors of GCC's vector extension, their lanes in registers: vectors of 4
 * floats (SSE, which every x86-64 has) in the passes bound by memory, and vectors of 8 in GEM's,
 * which gcc lowers to two of 4 in the portable build and makes one AVX2 register of in RULE_AVX2
 * functions. Lane j of a block is element i + j either way, so both give the same floats, sums
 * included. */
typedef float rule_v4 __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t rule_i4 __attribute__((vector_size(4 * sizeof(int32_t))));
typedef float rule_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t rule_i8 __attribute__((vector_size(8 * sizeof(int32_t))));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RULE_X86 1
#define RULE_AVX2 __attribute__((target("avx2")))
#endif

/* |x| of a rule_v8 (a macro: a function returning one would change the ABI without AVX) */
#define RULE_ABS8(x) ((rule_v8)((rule_i8)(x) & 0x7fffffff))

/* A pass ORs the bits of x − x of every value x it writes into an integer vector acc (+0, no
 * bit set, for a finite x; a NaN for an infinite or NaN one), and adds those of its scalar tail
 * into a float: an OR, not a sum, so that no chain of float additions bounds the loop. */
#define RULE_FINITE(acc, x) ((acc) |= (__typeof__(acc))((x) - (x)))

/* 1 if no lane of acc (nlanes int32_t) has a bit set and the tail's sum is 0: all that was
 * written is finite. */
static inline int rule_finite(const void *acc, int nlanes, float tail)
{
	int32_t lane, any = 0;
	for (int j = 0; j < nlanes; j++) {
		memcpy(&lane, (const char *)acc + j * sizeof lane, sizeof lane);
		any |= lane;
	}
	return !any && tail == 0;
}

static inline rule_v4 rule_load4(const float *p)
{
	rule_v4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void rule_store4(float *p, rule_v4 v)
{
	memcpy(p, &v, sizeof v);
}

/* A vector of a bf16_state rule (rule_worker.vec, rule.spare) as what it holds. */
static inline uint16_t *rule_bf16_vec(float *v)
{
	return (uint16_t *)(void *)v;
}

/* x rounded to bfloat16, to nearest, ties to even (a NaN may become an infinity: callers refuse
 * both). */
static inline uint16_t rule_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* Eight bfloat16 and eight uint32_t (their bits widened, or a float's to round) */
typedef uint16_t rule_h8 __attribute__((vector_size(8 * sizeof(uint16_t))));
typedef uint32_t rule_u8 __attribute__((vector_size(8 * sizeof(uint32_t))));
/* rule_bf16 and rule_bf16_float of eight lanes (macros, as RULE_ABS8) */
#define RULE_BF16_8(x)                                                                            \
	__builtin_convertvector(((rule_u8)(x) + 0x7fffu + (((rule_u8)(x) >> 16) & 1u)) >> 16, rule_h8)
#define RULE_BF16_FLOAT8(h) ((rule_v8)(__builtin_convertvector((h), rule_u8) << 16))

/* 1: use the RULE_AVX2 passes (the CPU has AVX2 and no test forced the portable ones) */
int rule_avx2(void);

/* θ′ = θ + d/k into out, and into q unless it is NULL (DOWNPOUR: k = 1, DynSGD: k = τ + 1);
 * 1 if θ′ is finite. */
int rule_add_div(const float *restrict theta, const float *restrict d, float k,
		 float *restrict out, float *restrict q, size_t n);

/* The buffer a commit writes θ′ into. */
static inline float *rule_theta_next(const struct rule *r)
{
	return r->free[r->nfree - 1]->v;
}

/* Take the θ′ of a commit that was written into rule_theta_next: θ is now θ′; the committing
 * worker w's sent vector (unless w is NULL) θ′, or θ before (ops->sent_before). */
void rule_take_theta(struct rule *r, const struct rule_span *sp, struct rule_worker *w);

/* Swap two vectors: a commit's spare and the one it replaces. */
static inline void rule_swap(float **a, float **b)
{
	float *t = *a;
	*a = *b;
	*b = t;
}

/* Take a commit's spare *b of the rule-wide vector *a: swapped, or when the commit moved one
 * fragment, its slice copied (the rest of the spare is stale). */
static inline void rule_take_vec(const struct rule *r, const struct rule_span *sp, float **a,
				 float **b)
{
	if (sp->len == r->n)
		rule_swap(a, b);
	else
		memcpy(*a + sp->off, *b + sp->off, sp->len * sizeof(float));
}

/* The rules with rounds (round.c), called by rule.c for them. */
int rule_round_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		      const float *in, uint64_t tau, float *reply, char *err);
int rule_round_join(struct rule *r, char *err);
/* w leaves its round; 1 if that closed the round (θ moved), else 0. */
int rule_round_leave(struct rule *r, const struct rule_span *sp, struct rule_worker *w);

extern const struct rule_ops rule_gem_ops, rule_downpour_ops, rule_dynsgd_ops, rule_easgd_ops,
	rule_dcasgd_ops, rule_sync_ops, rule_dma_ops, rule_diloco_ops, rule_async_diloco_ops;
/* Every rule (rule_config.c), and the index there of the one called name (-1: none). */
extern const struct rule_ops *const rule_all[];
int rule_index(const char *name);
/* rule.c's workers and buffers of θ, which a checkpoint restores (rule_state.c): the free
 * buffer a commit writes θ′ into, taken; worker w's sent vector is now s; make room for
 * worker id with its vectors (zero); free what worker w holds. */
struct rule_snap *rule_snap_pop(struct rule *r);
void rule_sent_set(struct rule *r, struct rule_worker *w, struct rule_snap *s);
int rule_worker_add(struct rule *r, int worker, char *err);
void rule_worker_free(struct rule *r, struct rule_worker *w);
#endif
