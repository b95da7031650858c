/* rng: a small, seeded, reproducible random number generator (PCG32, XSH-RR). The same seed
 * and stream give the same numbers on every machine; nothing here touches global state. */
#ifndef GEM_RNG_H
#define GEM_RNG_H
#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t state, inc;
};

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
