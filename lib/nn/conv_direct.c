#include "nn/conv_direct.h"

#include "base/cpulevel.h"
#include "nn/pool.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CD_X86 1
#define CD_AVX2 __attribute__((target("avx2,fma")))
#define CD_AVX512 __attribute__((target("avx2,fma,avx512f,avx512vl")))
#define CD_INLINE static inline __attribute__((always_inline))
#endif

/* Output channels per forward tile: two rows × 5 channels = 10 accumulators, 2 input vectors
 * and a broadcast weight fit the 16 AVX2 registers; 10 and 20 channels split evenly. */
#define CD_G 5
/* Kernel columns per weight-gradient tile, and at most CD_NO output channels (× 5 = 20
 * accumulators with AVX-512VL's 32 registers, 2 × 5 with AVX2's 16). */
#define CD_KJ 5
#define CD_NO 4
/* The input gradient's limits: kernels up to CD_KMAX wide, output rows up to CD_OWMAX. */
#define CD_KMAX 8
#define CD_OWMAX 64
/* Input channels per input-gradient tile: up to 5 (× 5 kernel columns = 25 accumulators with
 * AVX-512VL), 2 with AVX2. */
#define CD_DXG 5

static int forced = -1; /* tests: a level forced; -1 asks the CPU at every call */

/* What the CPU has (libgcc's constructor has filled __builtin_cpu_supports' data): 2 AVX2,
 * FMA and AVX-512VL, 1 AVX2 and FMA, 0 neither. */
static int simd_available(void)
{
#ifdef CD_X86
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0;
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") ? 2 : 1;
#else
	return 0;
#endif
}

int conv_direct_simd(int level)
{
	return cpulevel_force(&forced, simd_available(), level);
}

int conv_direct_fits(const struct conv2d_shape *s)
{
	return s->stride == 1 && s->pad == 0 && s->ow % 8 == 0;
}

/* ---- portable ---- */

/* Each kernel below does a part of the work: forward the samples [lo, hi), dW the output
 * channels [lo, hi) (lo a multiple of the tile's channels). */
static void forward_c(float *y, const float *x, const float *W, const float *b, int B,
		      const struct conv2d_shape *s, int lo, int hi)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int k = s->k, ckk = s->c * k * k;
	for (int o = 0; o < s->oc; o++)
		for (int bb = lo; bb < hi; bb++)
			for (int i = 0; i < s->oh; i++)
				for (int j = 0; j < s->ow; j++) {
					float acc = 0;
					for (int ch = 0; ch < s->c; ch++) {
						const float *xp = x + ((size_t)ch * B + bb) * plane + (size_t)i * s->w + j;
						const float *wp = W + (size_t)o * ckk + (size_t)ch * k * k;
						for (int ki = 0; ki < k; ki++)
							for (int kj = 0; kj < k; kj++)
								acc += xp[ki * s->w + kj] * wp[ki * k + kj];
					}
					y[(size_t)o * n + bb * ohw + (size_t)i * s->ow + j] = acc + b[o];
				}
}

/* 8 lane sums added as the SIMD horizontal sum does: (l + l+4), then (+2), then (+1). */
static float lanes_sum(const float *l)
{
	float a[4];
	for (int i = 0; i < 4; i++)
		a[i] = l[i] + l[i + 4];
	return (a[0] + a[2]) + (a[1] + a[3]);
}

static void dW_c(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s, int lo,
		 int hi)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int k = s->k;
	for (int o = lo; o < hi; o++)
		for (int ch = 0; ch < s->c; ch++)
			for (int ki = 0; ki < k; ki++)
				for (int kj = 0; kj < k; kj++) {
					float l[8] = {0};
					for (int bb = 0; bb < B; bb++)
						for (int i = 0; i < s->oh; i++) {
							const float *d = dy + (size_t)o * n + bb * ohw + (size_t)i * s->ow;
							const float *xr = x + ((size_t)ch * B + bb) * plane +
									  (size_t)(i + ki) * s->w + kj;
							for (int j = 0; j < s->ow; j++)
								l[j % 8] += d[j] * xr[j];
						}
					dW[(((size_t)o * s->c + ch) * k + ki) * k + kj] = lanes_sum(l);
				}
}

/* dx row r of channel c, sample b, from T[kj][l] = Σ_o Σ_ki W[o][c][ki][kj]·dy[o][b][r−ki][l]:
 * dx[r][iw] = Σ_kj T[kj][iw − kj] over the l inside the output row. */
static void dx_combine(float *row, const float *T, int w, int k, int ow)
{
	for (int iw = 0; iw < w; iw++) {
		int kj0 = iw - ow + 1 > 0 ? iw - ow + 1 : 0, kj1 = iw + 1 < k ? iw + 1 : k;
		const float *t = T + iw;
		float sum = 0;
		for (int kj = kj0; kj < kj1; kj++)
			sum += t[kj * (ow - 1)]; /* T[kj][iw − kj] */
		row[iw] = sum;
	}
}

static void dx_c(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s, int lo,
		 int hi)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int k = s->k, kk = k * k, ckk = s->c * kk;
	float T[CD_KMAX * CD_OWMAX];
	for (int bb = lo; bb < hi; bb++)
		for (int c = 0; c < s->c; c++)
			for (int r = 0; r < s->h; r++) {
				int ki0 = r - s->oh + 1 > 0 ? r - s->oh + 1 : 0, ki1 = r + 1 < k ? r + 1 : k;
				for (int kj = 0; kj < k; kj++)
					for (int l = 0; l < s->ow; l++) {
						float a = 0;
						for (int o = 0; o < s->oc; o++)
							for (int ki = ki0; ki < ki1; ki++)
								a += W[(size_t)o * ckk + (size_t)c * kk + ki * k + kj] *
								     dy[o * n + bb * ohw + (size_t)(r - ki) * s->ow + l];
						T[kj * s->ow + l] = a;
					}
				dx_combine(dx + ((size_t)c * B + bb) * plane + (size_t)r * s->w, T, s->w, k, s->ow);
			}
}

/* ---- AVX2 + FMA ---- */
#ifdef CD_X86

/* Output rows i (and i+1 if two), columns [8j, 8j+8), channels o..o+ng−1 of one sample: x and
 * W point at the tile's first input pixel and first channel's weights, y at its first output;
 * channels are xs (input), ckk (weights) and ys (output) floats apart. */
CD_AVX2 CD_INLINE void fwd_tile(float *y, size_t ys, int ow, const float *x, size_t xs, int w,
				const float *W, int ckk, const float *b, int c, int k, int two, int ng)
{
	__m256 a0[CD_G], a1[CD_G];
#pragma GCC unroll 8
	for (int g = 0; g < CD_G; g++)
		a0[g] = a1[g] = _mm256_setzero_ps();
	for (int ch = 0; ch < c; ch++)
		for (int ki = 0; ki < k; ki++) {
			const float *xr = x + (size_t)ch * xs + (size_t)ki * w, *wr = W + (ch * k + ki) * k;
			for (int kj = 0; kj < k; kj++) {
				__m256 v0 = _mm256_loadu_ps(xr + kj);
				__m256 v1 = two ? _mm256_loadu_ps(xr + w + kj) : v0;
#pragma GCC unroll 8
				for (int g = 0; g < CD_G; g++)
					if (g < ng) {
						__m256 wv = _mm256_broadcast_ss(wr + g * ckk + kj);
						a0[g] = _mm256_fmadd_ps(v0, wv, a0[g]);
						if (two)
							a1[g] = _mm256_fmadd_ps(v1, wv, a1[g]);
					}
			}
		}
#pragma GCC unroll 8
	for (int g = 0; g < CD_G; g++)
		if (g < ng) {
			__m256 bv = _mm256_set1_ps(b[g]);
			_mm256_storeu_ps(y + g * ys, _mm256_add_ps(a0[g], bv));
			if (two)
				_mm256_storeu_ps(y + g * ys + ow, _mm256_add_ps(a1[g], bv));
		}
}

/* fwd_tile with ng and two as constants, so each case unrolls into registers. */
CD_AVX2 static void fwd_tile_any(float *y, size_t ys, int ow, const float *x, size_t xs, int w,
				 const float *W, int ckk, const float *b, int c, int k, int two, int ng)
{
#define CD_T(t, g) fwd_tile(y, ys, ow, x, xs, w, W, ckk, b, c, k, t, g)
	if (two)
		switch (ng) {
		case 5: CD_T(1, 5); break;
		case 4: CD_T(1, 4); break;
		case 3: CD_T(1, 3); break;
		case 2: CD_T(1, 2); break;
		default: CD_T(1, 1); break;
		}
	else
		switch (ng) {
		case 5: CD_T(0, 5); break;
		case 4: CD_T(0, 4); break;
		case 3: CD_T(0, 3); break;
		case 2: CD_T(0, 2); break;
		default: CD_T(0, 1); break;
		}
#undef CD_T
}

CD_AVX2 static void forward_avx2(float *y, const float *x, const float *W, const float *b, int B,
				 const struct conv2d_shape *s, int lo, int hi)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int ckk = s->c * s->k * s->k;
	for (int bb = lo; bb < hi; bb++)
		for (int o = 0; o < s->oc; o += CD_G) {
			int ng = s->oc - o < CD_G ? s->oc - o : CD_G;
			for (int i = 0; i < s->oh; i += 2)
				for (int j = 0; j < s->ow; j += 8)
					fwd_tile_any(y + (size_t)o * n + bb * ohw + (size_t)i * s->ow + j, n, s->ow,
						     x + (size_t)bb * plane + (size_t)i * s->w + j, (size_t)B * plane,
						     s->w, W + (size_t)o * ckk, ckk, b + o, s->c, s->k,
						     i + 1 < s->oh, ng);
		}
}

CD_AVX2 static float hsum8(__m256 v)
{
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	__m128 h = _mm_add_ps(a, _mm_movehl_ps(a, a));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* dW of channels o..o+no−1, input channel ch, kernel row ki, columns kj0..kj0+nk−1, over the
 * batch: dy at channel o's first output (channels n apart), x at channel ch's first pixel, row
 * ki, column kj0; dW at (o, ch, ki, kj0), channels dws apart. */
CD_AVX2 CD_INLINE void dW_tile(float *dW, size_t dws, const float *dy, size_t n, const float *x,
			       int B, const struct conv2d_shape *s, int no, int nk)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow;
	__m256 a[CD_NO][CD_KJ];
#pragma GCC unroll 8
	for (int q = 0; q < CD_NO; q++)
#pragma GCC unroll 8
		for (int t = 0; t < CD_KJ; t++)
			a[q][t] = _mm256_setzero_ps();
	for (int bb = 0; bb < B; bb++)
		for (int i = 0; i < s->oh; i++)
			for (int j = 0; j < s->ow; j += 8) {
				const float *d = dy + bb * ohw + (size_t)i * s->ow + j;
				const float *xr = x + bb * plane + (size_t)i * s->w + j;
				__m256 dv[CD_NO];
#pragma GCC unroll 8
				for (int q = 0; q < CD_NO; q++)
					dv[q] = q < no ? _mm256_loadu_ps(d + q * n) : _mm256_setzero_ps();
#pragma GCC unroll 8
				for (int t = 0; t < CD_KJ; t++)
					if (t < nk) {
						__m256 xv = _mm256_loadu_ps(xr + t);
#pragma GCC unroll 8
						for (int q = 0; q < CD_NO; q++)
							if (q < no)
								a[q][t] = _mm256_fmadd_ps(dv[q], xv, a[q][t]);
					}
			}
	for (int q = 0; q < no; q++)
		for (int t = 0; t < nk; t++)
			dW[q * dws + t] = hsum8(a[q][t]);
}

/* dW_tile over every tile, at most NO output channels at a time (a constant: 2 fits the 16
 * AVX2 registers, 4 the 32 of AVX-512VL). */
CD_AVX2 CD_INLINE void dW_all(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s,
			      int NO, int lo, int hi)
{
	size_t plane = (size_t)s->h * s->w, n = (size_t)B * s->oh * s->ow;
	int k = s->k, ckk = s->c * k * k;
	for (int o = lo; o < hi; o += NO)
		for (int ch = 0; ch < s->c; ch++)
			for (int ki = 0; ki < k; ki++)
				for (int kj = 0; kj < k; kj += CD_KJ) {
					float *dw = dW + (size_t)o * ckk + ((size_t)ch * k + ki) * k + kj;
					const float *d = dy + (size_t)o * n;
					const float *xp = x + (size_t)ch * B * plane + (size_t)ki * s->w + kj;
					int nk = k - kj < CD_KJ ? k - kj : CD_KJ, no = hi - o < NO ? hi - o : NO;
					if (no == NO && nk == CD_KJ)
						dW_tile(dw, (size_t)ckk, d, n, xp, B, s, NO, CD_KJ);
					else
						dW_tile(dw, (size_t)ckk, d, n, xp, B, s, no, nk);
				}
}

CD_AVX2 static void dW_avx2(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s,
			    int lo, int hi)
{
	dW_all(dW, dy, x, B, s, 2, lo, hi);
}

CD_AVX512 static void dW_avx512(float *dW, const float *dy, const float *x, int B,
				const struct conv2d_shape *s, int lo, int hi)
{
	dW_all(dW, dy, x, B, s, 4, lo, hi);
}
#endif

#ifdef CD_X86
/* T[g][kj0 + t][8j ..] for channels c..c+ng−1 (W at channel c's weights of o = 0), kernel
 * columns kj0..kj0+nk−1, dy at sample b's output row 0 (channels n apart), dx row r: Σ over
 * o, then the kernel rows ki0..ki1−1 that reach an output row. */
CD_AVX2 CD_INLINE void dx_tile(float *T, const float *dy, size_t n, const float *W, int ckk,
			       const struct conv2d_shape *s, int r, int ki0, int ki1, int j, int kj0, int ng,
			       int nk, int k, __m256 *lo8, __m256 *hi8)
{
	int kk = k * k;
	__m256 a[CD_DXG][CD_KJ];
#pragma GCC unroll 8
	for (int g = 0; g < CD_DXG; g++)
#pragma GCC unroll 8
		for (int t = 0; t < CD_KJ; t++)
			a[g][t] = _mm256_setzero_ps();
	const float *d0 = dy + (size_t)(r - ki0) * s->ow + 8 * j, *w0 = W + ki0 * k + kj0;
	for (int o = 0; o < s->oc; o++, d0 += n, w0 += ckk) {
		const float *dp = d0, *w = w0;
		for (int ki = ki0; ki < ki1; ki++, dp -= s->ow, w += k) {
			__m256 d = _mm256_loadu_ps(dp);
#pragma GCC unroll 8
			for (int g = 0; g < CD_DXG; g++)
#pragma GCC unroll 8
				for (int t = 0; t < CD_KJ; t++)
					if (g < ng && t < nk)
						a[g][t] = _mm256_fmadd_ps(d, _mm256_broadcast_ss(w + g * kk + t), a[g][t]);
		}
	}
	if (lo8) {
		/* OW = 8: dx row [0, 8) += T[kj] shifted right by kj, [8, 16) += what falls out */
		__m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 8
		for (int t = 0; t < CD_KJ; t++) {
			__m256i kj = _mm256_set1_epi32(kj0 + t);
			__m256i idx = _mm256_and_si256(_mm256_sub_epi32(lane, kj), _mm256_set1_epi32(7));
			__m256 mhi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(kj, lane));
#pragma GCC unroll 8
			for (int g = 0; g < CD_DXG; g++)
				if (g < ng && t < nk) {
					__m256 v = _mm256_permutevar8x32_ps(a[g][t], idx);
					lo8[g] = _mm256_add_ps(lo8[g], _mm256_andnot_ps(mhi, v));
					hi8[g] = _mm256_add_ps(hi8[g], _mm256_and_ps(mhi, v));
				}
		}
		return;
	}
#pragma GCC unroll 8
	for (int g = 0; g < CD_DXG; g++)
#pragma GCC unroll 8
		for (int t = 0; t < CD_KJ; t++)
			if (g < ng && t < nk)
				_mm256_storeu_ps(T + ((size_t)g * k + kj0 + t) * s->ow + 8 * j, a[g][t]);
}

/* dx for the samples [lo, hi), NO input channels at a time (2 for AVX2, 5 for AVX-512VL). */
CD_AVX2 CD_INLINE void dx_all(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s,
			      int NO, int lo, int hi, int k)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int kk = k * k, ckk = s->c * kk;
	float T[CD_DXG * CD_KMAX * CD_OWMAX];
	for (int bb = lo; bb < hi; bb++)
		for (int c = 0; c < s->c; c += NO) {
			int ng = s->c - c < NO ? s->c - c : NO;
			for (int r = 0; r < s->h; r++) {
				int ki0 = r - s->oh + 1 > 0 ? r - s->oh + 1 : 0, ki1 = r + 1 < k ? r + 1 : k;
				__m256 lo8[CD_DXG], hi8[CD_DXG], *l8 = s->ow == 8 ? lo8 : NULL;
				for (int g = 0; g < CD_DXG; g++)
					lo8[g] = hi8[g] = _mm256_setzero_ps();
				for (int j = 0; j < s->ow / 8; j++)
					for (int kj = 0; kj < k; kj += CD_KJ) {
						int nk = k - kj < CD_KJ ? k - kj : CD_KJ;
						if (ng == NO && nk == CD_KJ)
							dx_tile(T, dy + bb * ohw, n, W + (size_t)c * kk, ckk, s, r, ki0, ki1, j,
								kj, NO, CD_KJ, k, l8, hi8);
						else
							dx_tile(T, dy + bb * ohw, n, W + (size_t)c * kk, ckk, s, r, ki0, ki1, j,
								kj, ng, nk, k, l8, hi8);
					}
				for (int g = 0; g < ng; g++) {
					float *row = dx + ((size_t)(c + g) * B + bb) * plane + (size_t)r * s->w;
					if (!l8) {
						dx_combine(row, T + (size_t)g * k * s->ow, s->w, k, s->ow);
						continue;
					}
					__m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(s->w - 8),
								       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
					_mm256_storeu_ps(row, lo8[g]);
					_mm256_maskstore_ps(row + 8, m, hi8[g]);
				}
			}
		}
}

CD_AVX2 static void dx_avx2(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s,
			    int lo, int hi)
{
	if (s->k == 5) /* the usual kernel, its offsets constants */
		dx_all(dx, dy, W, B, s, 2, lo, hi, 5);
	else
		dx_all(dx, dy, W, B, s, 2, lo, hi, s->k);
}

CD_AVX512 static void dx_avx512(float *dx, const float *dy, const float *W, int B,
				const struct conv2d_shape *s, int lo, int hi)
{
	if (s->k == 5)
		dx_all(dx, dy, W, B, s, 5, lo, hi, 5);
	else
		dx_all(dx, dy, W, B, s, 5, lo, hi, s->k);
}
#endif

/* One thread's part of a kernel call. */
struct part {
	int dW, level, lo, hi, B; /* dW: 0 forward, 1 dW, 2 dx */
	float *out;
	const float *x, *W, *b, *dy;
	const struct conv2d_shape *s;
};

static void *run_part(void *arg)
{
	const struct part *p = arg;
	if (p->dW == 2) {
#ifdef CD_X86
		if (p->level == 2)
			dx_avx512(p->out, p->dy, p->W, p->B, p->s, p->lo, p->hi);
		else if (p->level)
			dx_avx2(p->out, p->dy, p->W, p->B, p->s, p->lo, p->hi);
		else
#endif
			dx_c(p->out, p->dy, p->W, p->B, p->s, p->lo, p->hi);
		return NULL;
	}
#ifdef CD_X86
	if (!p->dW && p->level) {
		forward_avx2(p->out, p->x, p->W, p->b, p->B, p->s, p->lo, p->hi);
		return NULL;
	}
	if (p->dW && p->level == 2) {
		dW_avx512(p->out, p->dy, p->x, p->B, p->s, p->lo, p->hi);
		return NULL;
	}
	if (p->dW && p->level) {
		dW_avx2(p->out, p->dy, p->x, p->B, p->s, p->lo, p->hi);
		return NULL;
	}
#endif
	if (p->dW)
		dW_c(p->out, p->dy, p->x, p->B, p->s, p->lo, p->hi);
	else
		forward_c(p->out, p->x, p->W, p->b, p->B, p->s, p->lo, p->hi);
	return NULL;
}

#define CD_MAX_THREADS 64
static int nthreads = 1;

void conv_direct_threads(int t)
{
	nthreads = t < 1 ? 1 : t > CD_MAX_THREADS ? CD_MAX_THREADS : t;
}

/* Split [0, n) in units of `unit` among the threads; this thread runs the first part. A part
 * writes only its own outputs, in the order one thread would: the result does not depend on
 * the number of threads. */
static void run_split_part(void *arg, int i, int T)
{
	struct part *parts = arg;
	(void)T;
	run_part(&parts[i]);
}

static void run_split(struct part base, int n, int unit)
{
	int units = (n + unit - 1) / unit, T = nthreads < units ? nthreads : units;
	struct part parts[CD_MAX_THREADS];
	if (T > pool_threads())
		T = pool_threads();
	for (int i = 0; i < T; i++) {
		parts[i] = base;
		parts[i].lo = units * i / T * unit;
		parts[i].hi = units * (i + 1) / T * unit < n ? units * (i + 1) / T * unit : n;
	}
	pool_run(run_split_part, parts, T);
}

void conv_direct_forward(float *y, const float *x, const float *W, const float *b, int B,
			 const struct conv2d_shape *s)
{
	struct part p = {0, conv_direct_simd(-1), 0, B, B, y, x, W, b, NULL, s};
	run_split(p, B, 1);
}

void conv_direct_dW(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s)
{
	struct part p = {1, conv_direct_simd(-1), 0, s->oc, B, dW, x, NULL, NULL, dy, s};
	run_split(p, s->oc, p.level == 2 ? 4 : 2);
}

int conv_direct_dx_fits(const struct conv2d_shape *s)
{
	return conv_direct_fits(s) && s->k <= CD_KMAX && s->ow <= CD_OWMAX;
}

void conv_direct_dx(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s)
{
	struct part p = {2, conv_direct_simd(-1), 0, B, B, dx, NULL, W, NULL, dy, s};
	run_split(p, B, 1);
}
