#include "base/rng.h"

#include <math.h>

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
	r->state = 0;
	r->inc = (stream << 1) | 1;
	rng_u32(r);
	r->state += seed;
	rng_u32(r);
}

uint32_t rng_u32(struct rng *r)
{
	uint64_t old = r->state;
	uint32_t xorshifted, rot;
	r->state = old * 6364136223846793005ULL + r->inc;
	xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
	rot = (uint32_t)(old >> 59);
	return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

float rng_float(struct rng *r)
{
	return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

uint32_t rng_below(struct rng *r, uint32_t n)
{
	/* Lemire's rejection keeps the result unbiased for any n. */
	uint32_t threshold = (uint32_t)(-n) % n;
	for (;;) {
		uint32_t x = rng_u32(r);
		if (x >= threshold)
			return x % n;
	}
}

double rng_normal(struct rng *r)
{
	double u1 = ((double)rng_u32(r) + 1.0) / 4294967297.0;
	double u2 = (double)rng_u32(r) / 4294967296.0;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void rng_shuffle(struct rng *r, uint32_t *idx, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		uint32_t j = rng_below(r, (uint32_t)i);
		uint32_t t = idx[i - 1];
		idx[i - 1] = idx[j];
		idx[j] = t;
	}
}
