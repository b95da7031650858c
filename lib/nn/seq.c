#include "nn/seq.h"

#include "nn/matmul.h"
#include "nn/pool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Sixteen floats at a time with GCC/Clang generic vectors: one AVX-512 register, two AVX2 or
 * four SSE ones, whichever level the function they are inlined into is built for (SEQ_LEVELS);
 * the same operations in the same order at every level, so all levels agree bit for bit, and
 * a scalar tail runs the same operations on lane 0. No fused multiply-add: ISO C mode does not
 * contract a·b + c. The helpers are always inlined, so no vector crosses a call and GCC's
 * warnings that one would pass differently with AVX-512 (-Wpsabi) do not apply; they take
 * vectors by pointer, as GCC notes a vector parameter whatever the pragma says. */
#pragma GCC diagnostic ignored "-Wpsabi"
#define VW 16
typedef float vf __attribute__((vector_size(4 * VW)));
typedef int32_t vi __attribute__((vector_size(4 * VW)));
#define SEQ_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SEQ_AVX2 __attribute__((target("avx2")))
#define SEQ_AVX512 __attribute__((target("avx2,avx512f")))
#else
#define SEQ_AVX2
#define SEQ_AVX512
#endif

/* name##_body built three times, for matmul_simd's levels 0, 1, 2: name##_at[level](...). */
#define SEQ_LEVELS(name, params, args)                                                         \
	static void name##_0 params { name##_body args; }                                       \
	SEQ_AVX2 static void name##_1 params { name##_body args; }                              \
	SEQ_AVX512 static void name##_2 params { name##_body args; }                            \
	static void (*const name##_at[3]) params = {name##_0, name##_1, name##_2}

SEQ_INLINE vf vload(const float *p)
{
	vf v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* p[0..VW) = v */
#define vstore(p, v)                                                                                    \
	do {                                                                                            \
		vf vstore_ = (v);                                                                       \
		memcpy((p), &vstore_, sizeof vstore_);                                                  \
	} while (0)

SEQ_INLINE vf vsplat(float x)
{
	return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}

/* m ? a : b, lane by lane (m lanes are 0 or −1) */
#define vselect(m, a, b) ((vf)(((m) & (vi)(a)) | (~(m) & (vi)(b))))

/* the sum of the lanes, as a tree: (0+8, 1+9, ...), then halves again */
SEQ_INLINE float vhsum(const vf *v)
{
	float h[VW];
	memcpy(h, v, sizeof h);
	for (int w = VW / 2; w >= 1; w /= 2)
		for (int i = 0; i < w; i++)
			h[i] += h[i + w];
	return h[0];
}

/* e^x for x <= 88.7 (below −87.3, a number under 2e-38): x = n·ln2 + r with |r| <= ln2/2,
 * e^r by its Taylor series to r⁷ (relative error under 1e-7), times 2^n through the exponent
 * bits; n is x/ln2 rounded by adding and taking away 1.5·2^23. */
SEQ_INLINE vf vexp(const vf *px)
{
	const vf big = vsplat(12582912.0f);
	vf x = *px;
	x = vselect(x < vsplat(88.7f), x, vsplat(88.7f));
	x = vselect(x > vsplat(-87.3f), x, vsplat(-87.3f));
	vf n = (x * vsplat(1.44269504f) + big) - big;
	vf r = (x - n * vsplat(0.693359375f)) - n * vsplat(-2.12194440e-4f);
	vf p = vsplat(1.0f / 5040);
	p = p * r + vsplat(1.0f / 720);
	p = p * r + vsplat(1.0f / 120);
	p = p * r + vsplat(1.0f / 24);
	p = p * r + vsplat(1.0f / 6);
	p = p * r + vsplat(0.5f);
	p = p * r + vsplat(1.0f);
	p = p * r + vsplat(1.0f);
	return (vf)((vi)p + (__builtin_convertvector(n, vi) << 23));
}

/* Σ x[0..n) in VW partial sums (then vhsum), the tail after them */
SEQ_INLINE float row_sum(const float *x, int n)
{
	vf acc = vsplat(0);
	float s = 0;
	int d = 0;
	for (; d + VW <= n; d += VW)
		acc += vload(x + d);
	for (; d < n; d++)
		s += x[d];
	return vhsum(&acc) + s;
}

/* Σ x·y over [0, n), as row_sum */
SEQ_INLINE float row_dot(const float *x, const float *y, int n)
{
	vf acc = vsplat(0);
	float s = 0;
	int d = 0;
	for (; d + VW <= n; d += VW)
		acc += vload(x + d) * vload(y + d);
	for (; d < n; d++)
		s += x[d] * y[d];
	return vhsum(&acc) + s;
}

/* The row of token id x: x itself when it is in [0, V), else 0 (NaN too). */
static inline size_t token(float x, int V)
{
	return x >= 0 && x < (float)V ? (size_t)x : 0;
}

void embedding_forward(float *y, const float *ids, const float *W, int N, int V, int D)
{
	for (int i = 0; i < N; i++)
		memcpy(y + (size_t)i * D, W + token(ids[i], V) * D, sizeof *y * D);
}

void embedding_backward(float *dW, const float *dy, const float *ids, int N, int V, int D)
{
	memset(dW, 0, sizeof *dW * V * D);
	for (int i = 0; i < N; i++) {
		float *w = dW + token(ids[i], V) * D;
		const float *g = dy + (size_t)i * D;
		for (int d = 0; d < D; d++)
			w[d] += g[d];
	}
}

void position_forward(float *y, const float *x, const float *P, int B, int T, int D)
{
	size_t n = (size_t)T * D;
	for (int b = 0; b < B; b++)
		for (size_t i = 0; i < n; i++)
			y[b * n + i] = x[b * n + i] + P[i];
}

struct pos_job {
	float *dP;
	const float *dy;
	int B;
	size_t n;
};

/* elements [lo, hi) of dP: the samples' gradients added in order */
static void pos_part(void *arg, size_t lo, size_t hi)
{
	const struct pos_job *j = arg;
	memcpy(j->dP + lo, j->dy + lo, sizeof *j->dP * (hi - lo));
	for (int b = 1; b < j->B; b++)
		for (size_t i = lo; i < hi; i++)
			j->dP[i] += j->dy[b * j->n + i];
}

void position_backward(float *dP, const float *dy, int B, int T, int D)
{
	struct pos_job j = {dP, dy, B, (size_t)T * D};
	pool_for(j.n, VW, 16384 / VW / (B > 0 ? B : 1) + 1, pos_part, &j);
}

SEQ_INLINE void layernorm_forward_body(float *y, float *stats, const float *x, const float *g, const float *b,
				       int N, int D)
{
	for (int i = 0; i < N; i++) {
		const float *xr = x + (size_t)i * D;
		float *yr = y + (size_t)i * D;
		float mu = row_sum(xr, D) / (float)D, s = 0;
		vf acc = vsplat(0), vmu = vsplat(mu);
		int d = 0;
		for (; d + VW <= D; d += VW) {
			vf c = vload(xr + d) - vmu;
			acc += c * c;
		}
		for (int e = d; e < D; e++)
			s += (xr[e] - mu) * (xr[e] - mu);
		float rstd = 1.0f / sqrtf((vhsum(&acc) + s) / (float)D + LAYERNORM_EPS);
		vf vr = vsplat(rstd);
		stats[2 * i] = mu;
		stats[2 * i + 1] = rstd;
		for (d = 0; d + VW <= D; d += VW)
			vstore(yr + d, (vload(xr + d) - vmu) * vr * vload(g + d) + vload(b + d));
		for (; d < D; d++)
			yr[d] = (xr[d] - mu) * rstd * g[d] + b[d];
	}
}
SEQ_LEVELS(layernorm_forward, (float *y, float *stats, const float *x, const float *g, const float *b, int N, int D),
	   (y, stats, x, g, b, N, D));

/* What a pass split among the pool's threads works on (rows, columns or elements). */
struct seq_job {
	float *y, *stats, *dg, *db, *dy;
	const float *x, *g, *b, *cstats;
	int N, D, level;
};

/* Rows per part: a part should be some 8K floats or more (waking the pool costs microseconds). */
static size_t rows_per_part(int D)
{
	return D >= 8192 ? 1 : (size_t)(8192 / (D > 0 ? D : 1));
}

static void ln_fwd_part(void *a, size_t lo, size_t hi)
{
	const struct seq_job *j = a;
	size_t D = (size_t)j->D;
	layernorm_forward_at[j->level](j->y + lo * D, j->stats + 2 * lo, j->x + lo * D, j->g, j->b, (int)(hi - lo), j->D);
}

void layernorm_forward(float *y, float *stats, const float *x, const float *g, const float *b, int N, int D)
{
	struct seq_job j = {.y = y, .stats = stats, .x = x, .g = g, .b = b, .D = D, .level = matmul_simd(-1)};
	pool_for((size_t)N, 1, rows_per_part(D), ln_fwd_part, &j);
}

/* Columns [c0, c1) of dg and db (c0 a multiple of VW), each summed over the rows in order. The
 * sums build in registers and are stored once: a chunk's columns share cache lines with its
 * neighbours' (the gradient blob is not aligned to them), and storing at every row made two
 * threads pass those lines back and forth 4,096 times a call (the gpt's layernorm parameters
 * took 3.4 times the CPU time a step on two threads that they took on one). */
#define LN_BLOCK 4 /* vectors of columns a pass over the rows sums */
SEQ_INLINE void layernorm_params_body(float *dg, float *db, const float *dy, const float *x, const float *stats,
				      int N, int D, int c0, int c1)
{
	int d = c0;
	for (; d + VW <= c1; d += LN_BLOCK * VW) {
		int nv = (c1 - d) / VW < LN_BLOCK ? (c1 - d) / VW : LN_BLOCK;
		vf ag[LN_BLOCK], ab[LN_BLOCK];
		for (int v = 0; v < LN_BLOCK; v++)
			ag[v] = vsplat(0.0f), ab[v] = vsplat(0.0f);
		for (int i = 0; i < N; i++) {
			const float *xr = x + (size_t)i * D + d, *gr = dy + (size_t)i * D + d;
			vf vmu = vsplat(stats[2 * i]), vr = vsplat(stats[2 * i + 1]);
			for (int v = 0; v < nv; v++) {
				vf xh = (vload(xr + v * VW) - vmu) * vr, gy = vload(gr + v * VW);
				ag[v] = ag[v] + gy * xh;
				ab[v] = ab[v] + gy;
			}
		}
		for (int v = 0; v < nv; v++) {
			vstore(dg + d + v * VW, ag[v]);
			vstore(db + d + v * VW, ab[v]);
		}
		if (nv < LN_BLOCK) {
			d += nv * VW;
			break;
		}
	}
	for (int e = d; e < c1; e++) {
		float sg = 0, sb = 0;
		for (int i = 0; i < N; i++) {
			float xh = (x[(size_t)i * D + e] - stats[2 * i]) * stats[2 * i + 1], gy = dy[(size_t)i * D + e];
			sg += gy * xh;
			sb += gy;
		}
		dg[e] = sg, db[e] = sb;
	}
}
SEQ_LEVELS(layernorm_params, (float *dg, float *db, const float *dy, const float *x, const float *stats, int N,
			      int D, int c0, int c1),
	   (dg, db, dy, x, stats, N, D, c0, c1));

/* With x̂ = (x − μ)·r and dx̂ = dy·g: dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), row by row. */
SEQ_INLINE void layernorm_dx_body(float *dx, const float *dy, const float *x, const float *stats, const float *g,
				  int N, int D)
{
	for (int i = 0; i < N; i++) {
		const float *xr = x + (size_t)i * D, *gr = dy + (size_t)i * D;
		float mu = stats[2 * i], r = stats[2 * i + 1], s1 = 0, s2 = 0;
		vf a1 = vsplat(0), a2 = vsplat(0), vmu = vsplat(mu), vr = vsplat(r);
		int d = 0;
		for (; d + VW <= D; d += VW) {
			vf xh = (vload(xr + d) - vmu) * vr, dxh = vload(gr + d) * vload(g + d);
			a1 += dxh;
			a2 += dxh * xh;
		}
		for (int e = d; e < D; e++) {
			float xh = (xr[e] - mu) * r, dxh = gr[e] * g[e];
			s1 += dxh;
			s2 += dxh * xh;
		}
		float m1 = (vhsum(&a1) + s1) / (float)D, m2 = (vhsum(&a2) + s2) / (float)D;
		vf v1 = vsplat(m1), v2 = vsplat(m2);
		float *dr = dx + (size_t)i * D;
		for (d = 0; d + VW <= D; d += VW) {
			vf xh = (vload(xr + d) - vmu) * vr;
			vstore(dr + d, vr * ((vload(gr + d) * vload(g + d) - v1) - xh * v2));
		}
		for (; d < D; d++) {
			float xh = (xr[d] - mu) * r;
			dr[d] = r * ((gr[d] * g[d] - m1) - xh * m2);
		}
	}
}
SEQ_LEVELS(layernorm_dx, (float *dx, const float *dy, const float *x, const float *stats, const float *g, int N,
			  int D),
	   (dx, dy, x, stats, g, N, D));

static void ln_params_part(void *a, size_t lo, size_t hi)
{
	const struct seq_job *j = a;
	layernorm_params_at[j->level](j->dg, j->db, j->dy, j->x, j->cstats, j->N, j->D, (int)lo,
				      (int)hi);
}

static void ln_dx_part(void *a, size_t lo, size_t hi)
{
	const struct seq_job *j = a;
	size_t D = (size_t)j->D;
	layernorm_dx_at[j->level](j->y + lo * D, j->dy + lo * D, j->x + lo * D, j->cstats + 2 * lo, j->g, (int)(hi - lo),
				  j->D);
}

/* dg and db split by columns, each summed over the rows in order; then dx split by rows (dx
 * may be dy: the columns' pass reads dy first). */
void layernorm_backward(float *dx, float *dg, float *db, float *dy, const float *x, const float *stats,
			const float *g, int N, int D)
{
	struct seq_job j = {.y = dx, .dg = dg, .db = db, .dy = dy, .x = x, .g = g, .cstats = stats, .N = N, .D = D,
			    .level = matmul_simd(-1)};
	/* chunks of LN_BLOCK vectors of columns: a chunk reads that much of each row (one vector
	 * a row made the two threads' chunks of the gpt's 128 columns four times slower) */
	pool_for((size_t)D, LN_BLOCK * VW, rows_per_part(LN_BLOCK * VW * N), ln_params_part, &j);
	if (dx)
		pool_for((size_t)N, 1, rows_per_part(D), ln_dx_part, &j);
}

#define GELU_K 0.7978845608f /* √(2/π) */
#define GELU_C 0.044715f

/* s = σ(2z) = 1 / (1 + e^(−2z)), z = √(2/π)(x + 0.044715x³) */
SEQ_INLINE vf gelu_sigma(const vf *px)
{
	vf x = *px, z2 = vsplat(-2.0f * GELU_K) * (x + vsplat(GELU_C) * x * x * x);
	return vsplat(1.0f) / (vsplat(1.0f) + vexp(&z2));
}

/* σ(x) = 1 / (1 + e^(−x)) */
SEQ_INLINE vf vsigmoid(const vf *px)
{
	vf z = -*px;
	return vsplat(1.0f) / (vsplat(1.0f) + vexp(&z));
}

/* Element-wise passes split among the pool's threads in whole vectors, 16K floats a part or
 * more: each element is computed as on one thread. */
struct ew_job {
	void (*f2)(float *, const float *, size_t);
	void (*f3)(float *, const float *, const float *, size_t);
	float *y;
	const float *a, *b;
};

static void ew_part(void *arg, size_t lo, size_t hi)
{
	const struct ew_job *j = arg;
	if (j->f2)
		j->f2(j->y + lo, j->a + lo, hi - lo);
	else
		j->f3(j->y + lo, j->a + lo, j->b + lo, hi - lo);
}

static void ew_run(void (*f2)(float *, const float *, size_t), void (*f3)(float *, const float *, const float *, size_t),
		   float *y, const float *a, const float *b, size_t n)
{
	struct ew_job j = {f2, f3, y, a, b};
	pool_for(n, VW, 16384 / VW, ew_part, &j);
}

/* y = f(x) over n values, sixteen at a time, the tail through lane 0 */
#define SEQ_MAP(name, f)                                                                                \
	SEQ_INLINE void name##_body(float *y, const float *x, size_t n)                                    \
	{                                                                                               \
		size_t i = 0;                                                                           \
		for (; i + VW <= n; i += VW) {                                                          \
			vf v = vload(x + i);                                                            \
			vstore(y + i, f(&v));                                                           \
		}                                                                                       \
		for (; i < n; i++) {                                                                    \
			vf v = vsplat(x[i]);                                                            \
			y[i] = f(&v)[0];                                                                \
		}                                                                                       \
	}                                                                                               \
	SEQ_LEVELS(name, (float *y, const float *x, size_t n), (y, x, n));                               \
	void name(float *y, const float *x, size_t n)                                                   \
	{                                                                                               \
		ew_run(name##_at[matmul_simd(-1)], NULL, y, x, NULL, n);                                \
	}

/* gelu(x) = x·σ(2z) */
SEQ_INLINE vf vgelu(const vf *px)
{
	return *px * gelu_sigma(px);
}

SEQ_MAP(gelu_forward, vgelu)

/* gelu' = s + x·s(1 − s)·2·√(2/π)(1 + 3·0.044715x²) */
SEQ_INLINE vf gelu_grad(const vf *px)
{
	vf x = *px, s = gelu_sigma(px);
	vf dz = vsplat(2.0f * GELU_K) * (vsplat(1.0f) + vsplat(3.0f * GELU_C) * x * x);
	return s + x * s * (vsplat(1.0f) - s) * dz;
}

SEQ_INLINE void gelu_backward_body(float *dx, const float *dy, const float *x, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW) {
		vf v = vload(x + i);
		vstore(dx + i, vload(dy + i) * gelu_grad(&v));
	}
	for (; i < n; i++) {
		vf v = vsplat(x[i]);
		dx[i] = (vsplat(dy[i]) * gelu_grad(&v))[0];
	}
}
SEQ_LEVELS(gelu_backward, (float *dx, const float *dy, const float *x, size_t n), (dx, dy, x, n));

void gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
	ew_run(NULL, gelu_backward_at[matmul_simd(-1)], dx, dy, x, n);
}

/* tanh x = 2σ(2x) − 1 */
SEQ_INLINE vf vtanh(const vf *px)
{
	vf x2 = *px + *px;
	return vsplat(2.0f) * vsigmoid(&x2) - vsplat(1.0f);
}

SEQ_MAP(sigmoid_forward, vsigmoid)
SEQ_MAP(tanh_forward, vtanh)

static void sigmoid_backward_part(float *dx, const float *dy, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
}

void sigmoid_backward(float *dx, const float *dy, const float *y, size_t n)
{
	ew_run(NULL, sigmoid_backward_part, dx, dy, y, n);
}

static void tanh_backward_part(float *dx, const float *dy, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void tanh_backward(float *dx, const float *dy, const float *y, size_t n)
{
	ew_run(NULL, tanh_backward_part, dx, dy, y, n);
}

void dense_rows_forward(float *y, const float *x, const float *W, const float *b, int N, int in, int out,
			float *scratch)
{
	struct mat X = {x, in, 1}, Wt = {W, 1, in};
	matmul(y, out, X, Wt, N, out, in, MATMUL_BIAS, b, MATMUL_FULL, scratch);
}

/* db's columns [lo, hi): the rows of dy (x) added in order, in registers and stored once, as
 * layernorm_params_body does and for its reason, BIAS_COLS columns at a time */
#define BIAS_COLS 64
static void bias_grad_part(void *a, size_t lo, size_t hi)
{
	const struct seq_job *j = a;
	size_t D = (size_t)j->D;
	for (size_t c = lo; c < hi; c += BIAS_COLS) {
		size_t w = hi - c < BIAS_COLS ? hi - c : BIAS_COLS;
		float acc[BIAS_COLS];
		memcpy(acc, j->x + c, sizeof *acc * w);
		for (int i = 1; i < j->N; i++) {
			const float *r = j->x + i * D + c;
			size_t o = 0;
			for (; o + 8 <= w; o += 8) /* blocks of 8: GCC vectorises them */
				for (int k = 0; k < 8; k++)
					acc[o + k] += r[o + k];
			for (; o < w; o++)
				acc[o] += r[o];
		}
		memcpy(j->db + c, acc, sizeof *acc * w);
	}
}

void dense_rows_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
			 int N, int in, int out, float *scratch)
{
	struct mat dYt = {dy, 1, out}, X = {x, in, 1}, dY = {dy, out, 1}, Wm = {W, in, 1};
	matmul(dW, in, dYt, X, out, in, N, MATMUL_ZERO, NULL, MATMUL_FULL, scratch);
	struct seq_job j = {.db = db, .x = dy, .N = N, .D = out};
	pool_for((size_t)out, BIAS_COLS, rows_per_part(BIAS_COLS * N), bias_grad_part, &j);
	if (dx)
		matmul(dx, in, dY, Wm, N, in, out, MATMUL_ZERO, NULL, MATMUL_FULL, scratch);
}

/* Parts of a pass over the (sample, head) pairs: each has a T×T dP of its own. */
#define ATT_PARTS 16

size_t attention_size(int B, int T, int C, int H)
{
	size_t n = (size_t)B * T;
	return n * 3 * C * 2 + n * C * 2 + (size_t)B * H * T * T + (size_t)T * T * ATT_PARTS;
}

void attention_bind(struct attention *a, float *mem, int B, int T, int C, int H)
{
	size_t n = (size_t)B * T;
	*a = (struct attention){B, T, C, H, NULL, NULL, NULL, NULL, NULL, NULL};
	a->qkv = mem, mem += n * 3 * C;
	a->dqkv = mem, mem += n * 3 * C;
	a->att = mem, mem += n * C;
	a->datt = mem, mem += n * C;
	a->P = mem, mem += (size_t)B * H * T * T;
	a->dP = mem;
}

/* Rows [0, T) of the scores S (T,T) of one head in place: P[i][j] = e^(S[i][j]·scale − max) / Σ
 * for j <= i, 0 beyond. (max_j S·scale is scale·max_j S: scale > 0 and rounding is monotone.)
 * A row's last n mod VW terms go through one vector too (the lanes past n padded), and are
 * summed one by one after the vector's partial sums. */
SEQ_INLINE void softmax_causal_body(float *S, int T, float scale)
{
	vf vs = vsplat(scale);
	for (int i = 0; i < T; i++) {
		float *p = S + (size_t)i * T, mx = p[0], sum = 0, tail[VW];
		int n = i + 1, j, r;
		vf vmx = vsplat(p[0]);
		for (j = 0; j + VW <= n; j += VW) {
			vf v = vload(p + j);
			vmx = vselect(v > vmx, v, vmx);
		}
		for (int k = 0; k < VW; k++)
			mx = vmx[k] > mx ? vmx[k] : mx;
		for (; j < n; j++)
			mx = p[j] > mx ? p[j] : mx;
		mx *= scale;
		vf acc = vsplat(0), vm = vsplat(mx);
		for (j = 0; j + VW <= n; j += VW) {
			vf z = vload(p + j) * vs - vm, e = vexp(&z);
			vstore(p + j, e);
			acc += e;
		}
		if ((r = n - j) > 0) {
			vf z;
			memcpy(tail, p + j, sizeof *tail * r);
			for (int k = r; k < VW; k++)
				tail[k] = p[0];
			z = vload(tail) * vs - vm;
			vstore(tail, vexp(&z));
			memcpy(p + j, tail, sizeof *tail * r);
			for (int k = 0; k < r; k++)
				sum += tail[k];
		}
		vf inv = vsplat(1.0f / (vhsum(&acc) + sum));
		for (j = 0; j + VW <= n; j += VW)
			vstore(p + j, vload(p + j) * inv);
		for (; j < n; j++)
			p[j] *= inv[0];
		memset(p + n, 0, sizeof *p * (T - n));
	}
}
SEQ_LEVELS(softmax_causal, (float *S, int T, float scale), (S, T, scale));

/* Rows of dS from dP (in place) and P: dS = P ⊙ (dP − Σ_j dP·P)·scale for j <= i, 0 beyond. */
SEQ_INLINE void softmax_causal_back_body(float *dS, const float *P, int T, float scale)
{
	for (int i = 0; i < T; i++) {
		float *ds = dS + (size_t)i * T;
		const float *p = P + (size_t)i * T;
		int n = i + 1, j = 0;
		float dot = row_dot(ds, p, n);
		vf vd = vsplat(dot), vs = vsplat(scale);
		for (; j + VW <= n; j += VW)
			vstore(ds + j, vload(p + j) * (vload(ds + j) - vd) * vs);
		for (; j < n; j++)
			ds[j] = p[j] * (ds[j] - dot) * scale;
		for (; j < T; j++)
			ds[j] = 0.0f;
	}
}
SEQ_LEVELS(softmax_causal_back, (float *dS, const float *P, int T, float scale), (dS, P, T, scale));

/* The (sample, head) pairs of a pass split among up to ATT_PARTS of the pool's threads, each
 * pair on one thread and writing only its own rows of P, att and dqkv: the floats of one
 * thread. A part on a worker has its own matmul scratch on the worker's stack and its own
 * T×T dP (attention_size keeps ATT_PARTS of them). */
struct att_job {
	struct attention *a;
	float *scratch;
	int B, back, level, chunks;
};

static void att_pairs(const struct att_job *j, int lo, int hi, float *scratch, float *dS)
{
	struct attention *a = j->a;
	int T = a->T, C = a->C, H = a->H, hd = C / H;
	float scale = 1.0f / sqrtf((float)hd);
	for (int bh = lo; bh < hi; bh++) {
		int b = bh / H, h = bh % H;
		size_t row = (size_t)b * T * 3 * C + h * hd;
		const float *q = a->qkv + row;
		float *P = a->P + ((size_t)b * H + h) * T * T;
		if (!j->back) {
			struct mat Q = {q, 3 * C, 1}, Kt = {q + C, 1, 3 * C}, V = {q + 2 * C, 3 * C, 1}, Pm = {P, T, 1};
			matmul(P, T, Q, Kt, T, T, hd, MATMUL_ZERO, NULL, MATMUL_C_LOWER, scratch);
			softmax_causal_at[j->level](P, T, scale);
			matmul(a->att + (size_t)b * T * C + h * hd, C, Pm, V, T, hd, T, MATMUL_ZERO, NULL, MATMUL_A_LOWER,
			       scratch);
			continue;
		}
		float *dq = a->dqkv + row;
		struct mat dO = {a->datt + (size_t)b * T * C + h * hd, C, 1};
		struct mat Vt = {q + 2 * C, 1, 3 * C}, Pt = {P, 1, T}, dSm = {dS, T, 1}, dSt = {dS, 1, T};
		struct mat Km = {q + C, 3 * C, 1}, Qm = {q, 3 * C, 1};
		matmul(dS, T, dO, Vt, T, T, hd, MATMUL_ZERO, NULL, MATMUL_C_LOWER, scratch);
		matmul(dq + 2 * C, 3 * C, Pt, dO, T, hd, T, MATMUL_ZERO, NULL, MATMUL_A_UPPER, scratch);
		softmax_causal_back_at[j->level](dS, P, T, scale);
		matmul(dq, 3 * C, dSm, Km, T, hd, T, MATMUL_ZERO, NULL, MATMUL_A_LOWER, scratch);
		matmul(dq + C, 3 * C, dSt, Qm, T, hd, T, MATMUL_ZERO, NULL, MATMUL_A_UPPER, scratch);
	}
}

/* Chunk c of the (sample, head) pairs, with part's dP room */
static void att_chunk(void *arg, int c, int part)
{
	const struct att_job *j = arg;
	long lo, hi;
	pool_chunk_bounds((long)j->B * j->a->H, 1, j->chunks, c, &lo, &hi);
	float *dS = j->a->dP + (size_t)part * j->a->T * j->a->T;
	if (part > 0 && pool_worker() == part) {
		float mine[matmul_scratch_size()];
		att_pairs(j, (int)lo, (int)hi, mine, dS);
	} else {
		att_pairs(j, (int)lo, (int)hi, j->scratch, dS); /* the caller's, or one chunk after another */
	}
}

static void att_run(struct attention *a, int B, int back, float *scratch)
{
	struct att_job j = {a, scratch, B, back, matmul_simd(-1), pool_chunk_count((long)B * a->H)};
	pool_chunks(j.chunks, ATT_PARTS, att_chunk, &j);
}

void attention_forward(struct attention *a, float *y, const float *x, const float *Wqkv, const float *bqkv,
		       const float *Wo, const float *bo, int B, float *scratch)
{
	int T = a->T, C = a->C;
	dense_rows_forward(a->qkv, x, Wqkv, bqkv, B * T, C, 3 * C, scratch);
	att_run(a, B, 0, scratch);
	dense_rows_forward(y, a->att, Wo, bo, B * T, C, C, scratch);
}

void attention_backward(struct attention *a, float *dx, float *dWqkv, float *dbqkv, float *dWo, float *dbo,
			const float *dy, const float *x, const float *Wqkv, const float *Wo, int B, float *scratch)
{
	int T = a->T, C = a->C;
	dense_rows_backward(a->datt, dWo, dbo, dy, a->att, Wo, B * T, C, C, scratch);
	att_run(a, B, 1, scratch);
	dense_rows_backward(dx, dWqkv, dbqkv, a->dqkv, x, Wqkv, B * T, C, 3 * C, scratch);
}
