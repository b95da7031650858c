/* rng: a small, seeded, reproducible random number generator (PCG32, XSH-RR). The same seed
 * and stream give the same numbers on every machine; nothing here touches global state. */
#ifndef GEM_RNG_H
#define GEM_RNG_H
#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t state, inc;
};

/* Every stream gem draws from, in one place, so that no two purposes share one. A stream is
 * combined with the run's seed (run.json "train.seed"); where a stream is a base, the offset
 * added to it is named. */
#define RNG_MODEL_INIT  UINT64_C(0x6d6f64656c)   /* "model": θ₀ (model_init_params) */
#define RNG_PART        UINT64_C(0x5348415244)   /* "SHARD", its older name: the data's parts */
#define RNG_EVAL_SUBSET UINT64_C(0x6576616c)     /* "eval": gem-eval's --samples subset, and
							 * with seed 1 a text's evaluation windows */
#define RNG_DROPOUT     UINT64_C(0x6472706f7574) /* + data position: dropout of one step (trainer) */
#define RNG_MICROBATCH  UINT64_C(0x6d696372)     /* "micr" + k, of a seed drawn from the step's
							 * dropout stream: micro-batch k's dropout
							 * (model_train_step) */
#define RNG_DROP_RATE   UINT64_C(0x64726f70)     /* "drop": gem-serve --drop-rate's draws */
#define RNG_SIM_TIMING  UINT64_C(0x73696d74)     /* + worker id: gem-sim's step times */
#define RNG_HOLDOUT     UINT64_C(0x686f6c64)     /* "hold": the samples --holdout takes as test */
#define RNG_SAMPLE      UINT64_C(0x73616d70)     /* "samp", gem-sample's seed: its draws */
/* The batch order of trainer `who` (-1: local training) is stream 1 + who of the data's
 * per-epoch shuffle (batcher_init): local training 0, worker or SGP node i, 1 + i. */
#define RNG_BATCH_ORDER(who) ((uint64_t)((int64_t)(who) + 1))

/* Seed a generator; different streams with one seed are independent sequences. */
void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(struct rng *r);
/* Uniform in [0, 1), 24 random bits. */
float rng_float(struct rng *r);
/* Uniform integer in [0, n), unbiased. */
uint32_t rng_below(struct rng *r, uint32_t n);
/* Standard normal (Box-Muller). */
double rng_normal(struct rng *r);
/* Fisher-Yates shuffle of an index array. */
void rng_shuffle(struct rng *r, uint32_t *idx, size_t n);
#endif
