/* matmul: C = A·B + C₀ on float32 with gem's own packed kernels, for the products of the
 * dense layers (flat or over a sequence) and attention. x86-64 with AVX-512F runs 12×32 tiles,
 * with AVX2 and FMA 6×16 tiles (asked at run time); elsewhere portable C. Every level computes
 * each output as one chain of fused multiply-adds from C₀ over k in increasing order, so every
 * level, tile, block size and thread count gives the same floats: a run replays bit for bit on
 * another machine. (libblis 0.9.0 falls back to its slow generic kernels on CPUs it does not
 * know, and its sums depend on which kernels it picked; the conv2d layers' im2col products
 * keep it.) A product is cut into chunks of C's rows or columns that the pool's threads take
 * as they come free (nn/pool.h). */
#ifndef GEM_MATMUL_H
#define GEM_MATMUL_H
#include <stddef.h>

/* A matrix operand: element (i, j) at p[i·rs + j·cs] (row-major: cs = 1; a transpose: rs = 1). */
struct mat {
	const float *p;
	long rs, cs;
};

/* How C₀ is made: 0, C's own values (accumulate), or the row vector bias in every row. */
enum matmul_init { MATMUL_ZERO, MATMUL_ACC, MATMUL_BIAS };

/* Which part of a causal product is needed (attention's, M = N = K = T):
 * MATMUL_FULL all of it; MATMUL_C_LOWER only C's outputs j <= i (tiles wholly above the
 * diagonal are skipped and keep what C held; the other outputs above it get values no one may
 * read); MATMUL_A_LOWER A is lower-triangular, MATMUL_A_UPPER upper-triangular: its other
 * triangle must hold zeros, and the runs of them that whole tiles would read are skipped (the
 * result is MATMUL_FULL's, up to the sign of a zero). */
enum matmul_tri { MATMUL_FULL, MATMUL_C_LOWER, MATMUL_A_LOWER, MATMUL_A_UPPER };

// Floats of the scratch one call of matmul needs (the packed panel of B)
size_t matmul_scratch_size(void);
// C (M,N), row-major with rows ldc apart, = A (M,K) · B (K,N) + C₀ (init; bias: N floats for
// MATMUL_BIAS, else NULL), over the part tri says. scratch: matmul_scratch_size() floats.
void matmul(float *c, long ldc, struct mat a, struct mat b, int M, int N, int K, enum matmul_init init,
	    const float *bias, enum matmul_tri tri, float *scratch);
// Run each call on t threads (default 1; layers_set_threads sets it): the rows of C are split
// among them, and each output is computed as on one thread.
void matmul_threads(int t);
// The kernels: 2 AVX-512F, 1 AVX2 + FMA, 0 portable; a level the CPU lacks becomes the highest
// it has (tests force each). level = -1 only asks. Returns the level in use before.
int matmul_simd(int level);
#endif
