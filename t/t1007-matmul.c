/* t1007: nn/matmul.h's products against a double-precision reference, for every way of storing
 * the operands, every way of starting C, edges of every tile size, and the causal shapes; and
 * the same floats, bit for bit, from every kernel level and from two threads. */
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "nn/pool.h"
#include "nn/layer_ops.h"
#include "nn/matmul.h"
#include "tap.h"

static struct rng r;
static float *scratch;

static void fill(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = 2 * rng_float(&r) - 1;
}

/* One product with the operands stored transposed or not; returns the worst error against
 * the reference relative to Σ|terms|, and leaves C in out (ldc = N + 3). */
static double one(int M, int N, int K, int ta, int tb, enum matmul_init init, enum matmul_tri tri,
		  float *out)
{
	long ldc = N + 3;
	float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
	float *bias = malloc(sizeof(float) * N), *c0 = malloc(sizeof(float) * M * ldc);
	double worst = 0;
	fill(a, (size_t)M * K), fill(b, (size_t)K * N), fill(bias, (size_t)N), fill(c0, (size_t)M * ldc);
	for (int i = 0; i < M && (tri == MATMUL_A_LOWER || tri == MATMUL_A_UPPER); i++)
		for (int k = 0; k < K; k++)
			if (tri == MATMUL_A_LOWER ? k > i : k < i)
				a[ta ? (size_t)k * M + i : (size_t)i * K + k] = 0;
	struct mat A = {a, ta ? 1 : K, ta ? M : 1}, B = {b, tb ? 1 : N, tb ? K : 1};
	memcpy(out, c0, sizeof(float) * M * ldc);
	matmul(out, ldc, A, B, M, N, K, init, init == MATMUL_BIAS ? bias : NULL, tri, scratch);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = init == MATMUL_BIAS ? bias[j] : init == MATMUL_ACC ? c0[i * ldc + j] : 0;
			double mag = fabs(s) + 1e-3;
			if (tri == MATMUL_C_LOWER && j > i)
				continue;
			for (int k = 0; k < K; k++) {
				double t = (double)A.p[i * A.rs + k * A.cs] * B.p[k * B.rs + j * B.cs];
				s += t, mag += fabs(t);
			}
			worst = fmax(worst, fabs(out[i * ldc + j] - s) / mag);
		}
	/* the padding columns of C are never written */
	for (int i = 0; i < M; i++)
		for (int j = N; j < ldc; j++)
			if (out[i * ldc + j] != c0[i * ldc + j])
				worst = 1;
	free(a), free(b), free(bias), free(c0);
	return worst;
}

/* The same product at every level (and on two threads at the highest): bit for bit. */
static void same_floats(int M, int N, int K, int ta, int tb, enum matmul_init init, enum matmul_tri tri)
{
	size_t n = (size_t)M * (N + 3);
	float *c[3], *c2 = malloc(sizeof(float) * n);
	struct rng keep = r;
	int have = matmul_simd(-1), same = 1, ok_all = 1;
	for (int l = 0; l < 3; l++) {
		c[l] = malloc(sizeof(float) * n);
		r = keep;
		matmul_simd(l);
		ok_all &= one(M, N, K, ta, tb, init, tri, c[l]) < 1e-6;
	}
	matmul_threads(2);
	pool_set_threads(2);
	r = keep;
	one(M, N, K, ta, tb, init, tri, c2);
	matmul_threads(1);
	pool_set_threads(1);
	matmul_simd(have);
	for (int l = 1; l < 3; l++)
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				if (tri != MATMUL_C_LOWER || j <= i)
					same &= !memcmp(&c[l][i * (N + 3) + j], &c[0][i * (N + 3) + j], sizeof(float)) &&
						!memcmp(&c2[i * (N + 3) + j], &c[0][i * (N + 3) + j], sizeof(float));
	ok(ok_all && same, "%dx%dx%d%s%s init %d tri %d: every level and 2 threads give the same floats", M, K, N,
	   ta ? " Aᵀ" : "", tb ? " Bᵀ" : "", init, tri);
	for (int l = 0; l < 3; l++)
		free(c[l]);
	free(c2);
}

int main(void)
{
	rng_seed(&r, 7, 7);
	scratch = layer_falloc(matmul_scratch_size(), sizeof(float));
	diag("kernel level on this machine: %d", matmul_simd(-1));
	float *out = malloc(sizeof(float) * 300 * 603);
	static const int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {12, 32, 256}, {13, 33, 257}, {37, 600, 70},
					{100, 17, 300}, {300, 40, 600}};
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
		for (int t = 0; t < 4; t++) {
			int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
			double e = one(M, N, K, t & 1, t >> 1, (enum matmul_init)(t % 3), MATMUL_FULL, out);
			ok(e < 1e-6, "%dx%dx%d%s%s init %d: matches the reference (worst %.2g)", M, K, N,
			   t & 1 ? " Aᵀ" : "", t >> 1 ? " Bᵀ" : "", t % 3, e);
		}
	for (int tri = MATMUL_C_LOWER; tri <= MATMUL_A_UPPER; tri++)
		for (int T = 1; T <= 300; T = T * 5 + 2) {
			double e = one(T, T, T, tri == MATMUL_A_UPPER, 0, MATMUL_ZERO, (enum matmul_tri)tri, out);
			ok(e < 1e-6, "causal %d, T = %d: matches the reference (worst %.2g)", tri, T, e);
		}
	same_floats(300, 40, 600, 0, 1, MATMUL_BIAS, MATMUL_FULL);
	same_floats(77, 130, 33, 1, 0, MATMUL_ACC, MATMUL_FULL);
	same_floats(1100, 64, 64, 0, 0, MATMUL_ZERO, MATMUL_FULL); /* big enough for 2 threads */
	for (int tri = MATMUL_C_LOWER; tri <= MATMUL_A_UPPER; tri++)
		same_floats(130, 130, 130, 0, 1, MATMUL_ZERO, (enum matmul_tri)tri);
	free(out);
	free(scratch);
	return done_testing();
}
