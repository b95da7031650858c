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

/* Each kernel below does a part of the work: forward the samples [lo, hi), dW its units
 * [lo, hi) (conv_direct_dW). */
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

/* dW's units [lo, hi) (see conv_direct_dW): (output channel, input channel, kernel row). */
static void dW_c(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s, int lo,
		 int hi)
{
	size_t plane = (size_t)s->h * s->w, ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	int k = s->k;
	for (int u = lo; u < hi; u++) {
		int o = u / (s->c * k), ch = u / k % s->c, ki = u % k;
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

/* dW_tile over dW's units [lo, hi) (see conv_direct_dW): (a tile of at most NO output
 * channels, input channel, kernel row); NO a constant: 2 fits the 16 AVX2 registers, 4 the 32
 * of AVX-512VL. */
CD_AVX2 CD_INLINE void dW_all(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s,
			      int NO, int lo, int hi)
{
	size_t plane = (size_t)s->h * s->w, n = (size_t)B * s->oh * s->ow;
	int k = s->k, ckk = s->c * k * k;
	for (int u = lo; u < hi; u++) {
		int o = u / (s->c * k) * NO, ch = u / k % s->c, ki = u % k;
		for (int kj = 0; kj < k; kj += CD_KJ) {
			float *dw = dW + (size_t)o * ckk + ((size_t)ch * k + ki) * k + kj;
			const float *d = dy + (size_t)o * n;
			const float *xp = x + (size_t)ch * B * plane + (size_t)ki * s->w + kj;
			int nk = k - kj < CD_KJ ? k - kj : CD_KJ, no = s->oc - o < NO ? s->oc - o : NO;
			if (no == NO && nk == CD_KJ)
				dW_tile(dw, (size_t)ckk, d, n, xp, B, s, NO, CD_KJ);
			else
				dW_tile(dw, (size_t)ckk, d, n, xp, B, s, no, nk);
		}
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

/* ---- padded and strided: the packed batch P ----
 * Shapes with padding, a stride, or output rows not a multiple of 8 (the resnet's 3×3 pad-1
 * convolutions at stride 1 and 2 and its 1×1 stride-2 shortcuts) first copy their input into
 * P: per (channel, sample), the rows the outputs read, each split into its stride's phases,
 * zeros where the padding is. Output pixel (i, j)'s tap (ki, kj) then sits at
 *   P[c][b][i·RS + ki][kj mod S][j + kj div S],   RS = min(K, S)
 * so 8 outputs of a row read 8 consecutive floats for every tap, at any stride: the stride-1
 * kernels' contiguous loads without im2col's K·K copies. A row holds ceil(OW/8)·8 + (K−1)/S
 * floats, so the last 8-wide block of a row reads no further than its row. P is channel-major
 * (P[c][b][row][phase][m]: dW, which sums over the batch per channel, streams through it). In
 * training the forward packs the whole batch into the layer's col buffer and backward's dW
 * reads it from there; in evaluation each thread packs one sample at a time into the room of
 * its first sample (some 64 KB for the resnet: the cache, not memory). dx gathers into a
 * P-shaped sample in dcol, in the same reused room, and unpacks it. The work is split by samples (forward, dx)
 * and output channels (dW), as above. */

struct pgeo {
	int rs, nph, hr, wq; /* rows per output row, phases, stored rows, floats per phase row */
	size_t row, chan;    /* floats per stored row (nph·wq), per (channel, sample) (hr·row) */
};

static struct pgeo pad_geo(const struct conv2d_shape *s)
{
	struct pgeo g;
	int k = s->k, st = s->stride;
	g.rs = g.nph = k < st ? k : st;
	/* k >= S: stored row r is padded row r; k < S: output row i's taps only, i·k + ki */
	g.hr = k >= st ? (s->oh - 1) * st + k : s->oh * k;
	g.wq = (s->ow + 7) / 8 * 8 + (k - 1) / st;
	g.row = (size_t)g.nph * g.wq;
	g.chan = (size_t)g.hr * g.row;
	return g;
}

int conv_direct_pad_fits(const struct conv2d_shape *s)
{
	return !conv_direct_fits(s) && s->k <= 3 && s->stride <= 2 && s->pad < s->k;
}

size_t conv_direct_pad_size(const struct conv2d_shape *s, int B)
{
	return (size_t)s->c * B * pad_geo(s).chan;
}

/* The input row of stored row r (may be outside the image: a padding row). */
static int pad_in_row(const struct conv2d_shape *s, int r)
{
	return (s->k >= s->stride ? r : r / s->k * s->stride + r % s->k) - s->pad;
}

/* Sample b's P from x (C,B,H,W): its channels at Pb, B·chan floats apart. */
static void pad_pack(float *Pb, const float *x, int B, int b, const struct conv2d_shape *s,
		     const struct pgeo *g)
{
	size_t plane = (size_t)s->h * s->w;
	for (int c = 0; c < s->c; c++) {
		float *pc = Pb + (size_t)c * B * g->chan;
		const float *xc = x + ((size_t)c * B + b) * plane;
		for (int r = 0; r < g->hr; r++) {
			float *pr = pc + (size_t)r * g->row;
			int ir = pad_in_row(s, r);
			if (ir < 0 || ir >= s->h) {
				memset(pr, 0, sizeof *pr * g->row);
				continue;
			}
			const float *xr = xc + (size_t)ir * s->w;
			for (int ph = 0; ph < g->nph; ph++, pr += g->wq) {
				/* m inside the image: 0 <= m·S + ph − pad < W; zeros either side */
				int st = s->stride, a = s->pad - ph, lo = a <= 0 ? 0 : (a + st - 1) / st;
				int hi = (s->w + s->pad - ph + st - 1) / st;
				hi = hi < g->wq ? hi : g->wq;
				lo = lo < hi ? lo : hi;
				memset(pr, 0, sizeof *pr * lo);
				const float *xs = xr + lo * st + ph - s->pad;
				if (st == 1)
					memcpy(pr + lo, xs, sizeof *pr * (hi - lo));
				else
					for (int m = lo; m < hi; m++)
						pr[m] = xs[(m - lo) * st];
				memset(pr + hi, 0, sizeof *pr * (g->wq - hi));
			}
		}
	}
}

/* dx (C,B,H,W) of sample b from its P-shaped gradient Db: each input pixel sits at one place of
 * Db (or none: a pixel no output reads has gradient 0). */
static void pad_unpack(float *dx, const float *Db, int B, int b, const struct conv2d_shape *s,
		       const struct pgeo *g)
{
	size_t plane = (size_t)s->h * s->w;
	for (int c = 0; c < s->c; c++) {
		const float *dc = Db + (size_t)c * B * g->chan;
		float *xc = dx + ((size_t)c * B + b) * plane;
		for (int ih = 0; ih < s->h; ih++) {
			float *xr = xc + (size_t)ih * s->w;
			int pr = ih + s->pad, r = pr; /* padded row → stored row */
			if (s->k < s->stride)
				r = pr % s->stride < s->k ? pr / s->stride * s->k + pr % s->stride : -1;
			if (r < 0 || r >= g->hr) {
				memset(xr, 0, sizeof *xr * s->w);
				continue;
			}
			const float *dr = dc + (size_t)r * g->row;
			int st = s->stride;
			if (g->nph < st || (g->wq - 1) * st + st - 1 - s->pad < s->w - 1)
				memset(xr, 0, sizeof *xr * s->w); /* columns no output reads */
			for (int ph = 0; ph < g->nph; ph++, dr += g->wq) {
				/* as pad_pack: the m whose column m·S + ph − pad is inside the row */
				int a = s->pad - ph, lo = a <= 0 ? 0 : (a + st - 1) / st;
				int hi = (s->w + s->pad - ph + st - 1) / st;
				hi = hi < g->wq ? hi : g->wq;
				float *xs = xr + lo * st + ph - s->pad;
				if (st == 1 && lo < hi)
					memcpy(xs, dr + lo, sizeof *xs * (hi - lo));
				else
					for (int m = lo; m < hi; m++)
						xs[(m - lo) * st] = dr[m];
			}
		}
	}
}

/* The offset in P of tap t = (ki, kj) from its output pixel's (i·RS, j) */
static void pad_offsets(int *off, const struct conv2d_shape *s, const struct pgeo *g)
{
	for (int ki = 0; ki < s->k; ki++)
		for (int kj = 0; kj < s->k; kj++)
			off[ki * s->k + kj] = (int)(ki * g->row) + kj % s->stride * g->wq + kj / s->stride;
}

#define CD_KK 9 /* taps at most: K <= 3 */
#define CD_ACC 27 /* accumulators at most in a dW or dx tile (3 × 9, 8 × 1, 5 × 4) */

/* Portable: the same sums in the same order as the SIMD kernels below. */
static void pfwd_c(float *y, float *P, const float *x, const float *W, const float *b, int B,
		   const struct conv2d_shape *s, int lo, int hi, int keep)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], kk = s->k * s->k, ckk = s->c * kk;
	size_t ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw, pcs = (size_t)B * g.chan;
	pad_offsets(off, s, &g);
	for (int bb = lo; bb < hi; bb++) {
		float *Pb = P + (size_t)(keep ? bb : lo) * g.chan;
		pad_pack(Pb, x, B, bb, s, &g);
		for (int o = 0; o < s->oc; o++)
			for (int i = 0; i < s->oh; i++)
				for (int j = 0; j < s->ow; j++) {
					const float *p = Pb + (size_t)i * g.rs * g.row + j;
					float acc = 0;
					for (int c = 0; c < s->c; c++)
						for (int t = 0; t < kk; t++)
							acc += p[c * pcs + off[t]] * W[(size_t)o * ckk + c * kk + t];
					y[o * n + bb * ohw + (size_t)i * s->ow + j] = acc + b[o];
				}
	}
}

static void pdW_c(float *dW, const float *dy, const float *P, int B, const struct conv2d_shape *s,
		  int lo, int hi)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], kk = s->k * s->k;
	size_t ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	pad_offsets(off, s, &g);
	for (int o = lo; o < hi; o++)
		for (int c = 0; c < s->c; c++)
			for (int t = 0; t < kk; t++) {
				float l[8] = {0};
				for (int bb = 0; bb < B; bb++)
					for (int i = 0; i < s->oh; i++) {
						const float *d = dy + o * n + bb * ohw + (size_t)i * s->ow;
						const float *p = P + ((size_t)c * B + bb) * g.chan + (size_t)i * g.rs * g.row + off[t];
						for (int j = 0; j < s->ow; j++)
							l[j % 8] += d[j] * p[j];
					}
				dW[((size_t)o * s->c + c) * kk + t] = lanes_sum(l);
			}
}

static void pdx_c(float *dx, float *D, const float *dy, const float *W, int B, const struct conv2d_shape *s,
		  int lo, int hi)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], k = s->k, kk = k * k, ckk = s->c * kk;
	size_t ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw;
	pad_offsets(off, s, &g);
	float *Db = D + (size_t)lo * g.chan; /* one sample's room, reused */
	for (int bb = lo; bb < hi; bb++) {
		for (int c = 0; c < s->c; c++)
			memset(Db + (size_t)c * B * g.chan, 0, sizeof *Db * g.chan);
		for (int c = 0; c < s->c; c++)
			for (int i = 0; i < s->oh; i++)
				for (int j = 0; j < s->ow; j++) {
					float *p = Db + (size_t)c * B * g.chan + (size_t)i * g.rs * g.row + j;
					for (int kj = 0; kj < k; kj++)
						for (int ki = 0; ki < k; ki++) {
							int t = ki * k + kj;
							float a = 0;
							for (int o = 0; o < s->oc; o++)
								a += W[(size_t)o * ckk + c * kk + t] *
								     dy[o * n + bb * ohw + (size_t)i * s->ow + j];
							p[off[t]] += a;
						}
				}
		pad_unpack(dx, Db, B, bb, s, &g);
	}
}

#ifdef CD_X86
/* The lanes of an 8-wide block at output column j0 that are inside the row. */
CD_AVX2 static __m256i row_mask(int j0, int ow)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(ow - j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Forward: R output rows × 8 columns × G output channels of one sample, Σ over (c, ki, kj) in
 * that order then + bias. p: P at the tile's (c = 0, sample, row i·RS, column j0), channels pcs
 * apart, output rows prs apart; W at the first channel's weights (channels ckk apart); y at
 * the tile's first output (channels ys, rows ow apart). nr <= R rows and ng <= G channels are
 * real; KK is the taps (a constant, so the tap loop unrolls). */
CD_AVX2 CD_INLINE void pfwd_tile(float *y, size_t ys, int ow, const float *p, size_t pcs, size_t prs,
				 const int *off, const float *W, int ckk, const float *b, int C, int KK,
				 int R, int G, int nr, int ng, int masked, __m256i mask)
{
	__m256 a[4][4];
#pragma GCC unroll 4
	for (int g = 0; g < 4; g++)
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++)
			a[g][r] = _mm256_setzero_ps();
	for (int c = 0; c < C; c++, p += pcs, W += KK) {
#pragma GCC unroll 9
		for (int t = 0; t < KK; t++) {
			__m256 v[4];
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				v[r] = r < nr ? _mm256_loadu_ps(p + off[t] + r * prs) : _mm256_setzero_ps();
#pragma GCC unroll 4
			for (int g = 0; g < G; g++)
				if (g < ng) {
					__m256 wv = _mm256_broadcast_ss(W + g * ckk + t);
#pragma GCC unroll 4
					for (int r = 0; r < R; r++)
						if (r < nr)
							a[g][r] = _mm256_fmadd_ps(v[r], wv, a[g][r]);
				}
		}
	}
#pragma GCC unroll 4
	for (int g = 0; g < G; g++)
		if (g < ng) {
			__m256 bv = _mm256_set1_ps(b[g]);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				if (r < nr) {
					float *yo = y + g * ys + (size_t)r * ow;
					if (masked)
						_mm256_maskstore_ps(yo, mask, _mm256_add_ps(a[g][r], bv));
					else
						_mm256_storeu_ps(yo, _mm256_add_ps(a[g][r], bv));
				}
		}
}

/* Every tile of samples [lo, hi): R rows × G channels (AVX2 2 × 4, 8 accumulators of its 16
 * registers; AVX-512VL 4 × 4, 16 of 32: each loaded vector feeds 4 FMAs). */
CD_AVX2 CD_INLINE void pfwd_all(float *y, float *P, const float *x, const float *W, const float *b, int B,
				const struct conv2d_shape *s, int lo, int hi, int keep, int KK, int R, int G)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], ckk = s->c * KK;
	size_t ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw, pcs = (size_t)B * g.chan;
	size_t prs = (size_t)g.rs * g.row;
	pad_offsets(off, s, &g);
	for (int bb = lo; bb < hi; bb++) {
		float *Pb = P + (size_t)(keep ? bb : lo) * g.chan;
		pad_pack(Pb, x, B, bb, s, &g);
		for (int o = 0; o < s->oc; o += G) {
			int ng = s->oc - o < G ? s->oc - o : G;
			for (int i = 0; i < s->oh; i += R) {
				int nr = s->oh - i < R ? s->oh - i : R;
				for (int j = 0; j < s->ow; j += 8) {
					float *yt = y + o * n + bb * ohw + (size_t)i * s->ow + j;
					const float *pt = Pb + i * prs + j;
					const float *wt = W + (size_t)o * ckk;
					int masked = j + 8 > s->ow;
					__m256i mask = row_mask(j, s->ow);
#define CD_PF(NR, NG)                                                                                    \
	pfwd_tile(yt, n, s->ow, pt, pcs, prs, off, wt, ckk, b + o, s->c, KK, R, G, NR, NG, masked, mask)
					if (ng < G)
						CD_PF(nr, ng);
					else if (nr == R)
						CD_PF(R, G);
					else if (nr == 1)
						CD_PF(1, G);
					else if (nr == 2)
						CD_PF(2, G);
					else
						CD_PF(3, G);
#undef CD_PF
				}
			}
		}
	}
}

/* dW: NO output channels × the KK taps of input channel c, over the batch; 8 lane sums per
 * entry (output column mod 8) added as hsum8 does. dy at channel o's (sample 0, row 0), n
 * floats between channels; p at P's (c, sample 0) with the taps' offsets off. */
CD_AVX2 CD_INLINE void pdW_tile(float *dW, int ckk, const float *dy, size_t n, const float *p, int B,
				const struct conv2d_shape *s, const struct pgeo *g, const int *off, int KK,
				int NO, int no)
{
	__m256 a[CD_ACC]; /* flat and no larger than used: GCC keeps it in registers */
#pragma GCC unroll 8
	for (int q = 0; q < NO; q++)
#pragma GCC unroll 9
		for (int t = 0; t < KK; t++)
			a[q * KK + t] = _mm256_setzero_ps();
	/* one loop over (sample, row, block), its counters stepped by hand: with the three loops
	 * nested GCC 12 kept the accumulators in memory around the inner one */
	size_t prs = (size_t)g->rs * g->row, skip = g->chan - (size_t)s->oh * prs;
	int nblk = (s->ow + 7) / 8, jb = 0, i = 0;
	__m256i ones = _mm256_set1_epi32(-1), last = row_mask((nblk - 1) * 8, s->ow);
	const float *d = dy, *pr = p;
	for (long it = (long)B * s->oh * nblk; it > 0; it--) {
		__m256i mask = jb == nblk - 1 ? last : ones;
		__m256 dv[8];
#pragma GCC unroll 8
		for (int q = 0; q < NO; q++)
			dv[q] = q < no ? _mm256_maskload_ps(d + q * n + 8 * jb, mask) : _mm256_setzero_ps();
#pragma GCC unroll 9
		for (int t = 0; t < KK; t++) {
			__m256 pv = _mm256_loadu_ps(pr + 8 * jb + off[t]);
#pragma GCC unroll 8
			for (int q = 0; q < NO; q++)
				if (q < no)
					a[q * KK + t] = _mm256_fmadd_ps(dv[q], pv, a[q * KK + t]);
		}
		if (++jb == nblk) {
			jb = 0, d += s->ow, pr += prs;
			if (++i == s->oh)
				i = 0, pr += skip;
		}
	}
	/* unrolled: an index the compiler cannot fold would keep a[] in memory */
#pragma GCC unroll 8
	for (int q = 0; q < NO; q++)
#pragma GCC unroll 9
		for (int t = 0; t < KK; t++)
			if (q < no)
				dW[q * ckk + t] = hsum8(a[q * KK + t]);
}

CD_AVX2 CD_INLINE void pdW_all(float *dW, const float *dy, const float *P, int B, const struct conv2d_shape *s,
			       int lo, int hi, int KK, int NO)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], ckk = s->c * KK;
	size_t n = (size_t)B * s->oh * s->ow;
	pad_offsets(off, s, &g);
	for (int o = lo; o < hi; o += NO) {
		int no = hi - o < NO ? hi - o : NO;
		for (int c = 0; c < s->c; c++) {
			float *dw = dW + (size_t)o * ckk + c * KK;
			const float *p = P + (size_t)c * B * g.chan;
			if (no == NO)
				pdW_tile(dw, ckk, dy + o * n, n, p, B, s, &g, off, KK, NO, NO);
			else
				pdW_tile(dw, ckk, dy + o * n, n, p, B, s, &g, off, KK, NO, no);
		}
	}
}

/* dx: for G input channels and one 8-wide block of output row i, A[g][t] = Σ_o W[o][c+g][t]·dy
 * (o from 0), then each A[g][t] is added into D at its tap's place, in the order (kj, g, ki):
 * the adds that overlap (the same row, kj one apart) are G·K adds apart, so a load does not
 * wait on the store just before it. dy lanes past the row are 0: they add nothing. */
CD_AVX2 CD_INLINE void pdx_tile(float *D, size_t dcs, const float *dy, size_t n, const float *W, int ckk,
				int oc, int k, const int *off, int KK, int G, int ng, __m256i mask)
{
	__m256 a[CD_ACC]; /* flat and no larger than used: GCC keeps it in registers */
#pragma GCC unroll 8
	for (int g = 0; g < G; g++)
#pragma GCC unroll 9
		for (int t = 0; t < KK; t++)
			a[g * KK + t] = _mm256_setzero_ps();
	for (int o = 0; o < oc; o++, dy += n, W += ckk) {
		__m256 d = _mm256_maskload_ps(dy, mask);
#pragma GCC unroll 8
		for (int g = 0; g < G; g++)
			if (g < ng)
#pragma GCC unroll 9
				for (int t = 0; t < KK; t++)
					a[g * KK + t] = _mm256_fmadd_ps(d, _mm256_broadcast_ss(W + g * KK + t), a[g * KK + t]);
	}
#pragma GCC unroll 3
	for (int kj = 0; kj < k; kj++)
#pragma GCC unroll 8
		for (int g = 0; g < G; g++)
			if (g < ng)
#pragma GCC unroll 3
				for (int ki = 0; ki < k; ki++) {
					float *q = D + g * dcs + off[ki * k + kj];
					_mm256_storeu_ps(q, _mm256_add_ps(_mm256_loadu_ps(q), a[g * KK + ki * k + kj]));
				}
}

CD_AVX2 CD_INLINE void pdx_all(float *dx, float *D, const float *dy, const float *W, int B,
			       const struct conv2d_shape *s, int lo, int hi, int k, int G)
{
	struct pgeo g = pad_geo(s);
	int off[CD_KK], KK = k * k, ckk = s->c * KK;
	size_t ohw = (size_t)s->oh * s->ow, n = (size_t)B * ohw, dcs = (size_t)B * g.chan;
	size_t prs = (size_t)g.rs * g.row;
	pad_offsets(off, s, &g);
	float *Db = D + (size_t)lo * g.chan; /* one sample's room, reused */
	for (int bb = lo; bb < hi; bb++) {
		for (int c = 0; c < s->c; c++)
			memset(Db + (size_t)c * B * g.chan, 0, sizeof *Db * g.chan);
		for (int c = 0; c < s->c; c += G) {
			int ng = s->c - c < G ? s->c - c : G;
			for (int i = 0; i < s->oh; i++)
				for (int j = 0; j < s->ow; j += 8) {
					float *dt = Db + (size_t)c * B * g.chan + i * prs + j;
					const float *d = dy + bb * ohw + (size_t)i * s->ow + j;
					__m256i mask = row_mask(j, s->ow);
					if (ng == G)
						pdx_tile(dt, dcs, d, n, W + (size_t)c * KK, ckk, s->oc, k, off, KK, G, G, mask);
					else
						pdx_tile(dt, dcs, d, n, W + (size_t)c * KK, ckk, s->oc, k, off, KK, G, ng, mask);
				}
		}
		pad_unpack(dx, Db, B, bb, s, &g);
	}
}

/* The kernels per tap count (1, 4, 9: k = 1, 2, 3) as constants, per level: AVX2's 16
 * registers hold 4 × 2 forward accumulators, 9 (one output channel) for a 3×3 dW, 9 (one
 * input channel) for a 3×3 dx; AVX-512VL's 32 hold 4 × 4, 18 (two) and 27 (three). */
#define CD_PAD_LEVEL(name, attr, R, NO9, NO4, NO1, G9, G4, G1)                                              \
	attr static void pfwd_##name(float *y, float *P, const float *x, const float *W, const float *b, int B, \
				     const struct conv2d_shape *s, int lo, int hi, int keep)                    \
	{                                                                                                       \
		if (s->k == 3)                                                                                  \
			pfwd_all(y, P, x, W, b, B, s, lo, hi, keep, 9, R, 4);                                         \
		else if (s->k == 2)                                                                             \
			pfwd_all(y, P, x, W, b, B, s, lo, hi, keep, 4, R, 4);                                         \
		else                                                                                            \
			pfwd_all(y, P, x, W, b, B, s, lo, hi, keep, 1, R, 4);                                         \
	}                                                                                                       \
	attr static void pdW_##name(float *dW, const float *dy, const float *P, int B,                         \
				    const struct conv2d_shape *s, int lo, int hi)                               \
	{                                                                                                       \
		if (s->k == 3)                                                                                  \
			pdW_all(dW, dy, P, B, s, lo, hi, 9, NO9);                                               \
		else if (s->k == 2)                                                                             \
			pdW_all(dW, dy, P, B, s, lo, hi, 4, NO4);                                               \
		else                                                                                            \
			pdW_all(dW, dy, P, B, s, lo, hi, 1, NO1);                                               \
	}                                                                                                       \
	attr static void pdx_##name(float *dx, float *D, const float *dy, const float *W, int B,               \
				    const struct conv2d_shape *s, int lo, int hi)                               \
	{                                                                                                       \
		if (s->k == 3)                                                                                  \
			pdx_all(dx, D, dy, W, B, s, lo, hi, 3, G9);                                             \
		else if (s->k == 2)                                                                             \
			pdx_all(dx, D, dy, W, B, s, lo, hi, 2, G4);                                             \
		else                                                                                            \
			pdx_all(dx, D, dy, W, B, s, lo, hi, 1, G1);                                             \
	}
CD_PAD_LEVEL(avx2, CD_AVX2, 2, 1, 2, 4, 1, 2, 6)
CD_PAD_LEVEL(avx512, CD_AVX512, 4, 2, 4, 8, 2, 4, 8)
#undef CD_PAD_LEVEL
#endif

/* One thread's part of a kernel call. */
struct part {
	int dW, level, lo, hi, B; /* dW: 0 forward, 1 dW, 2 dx; 3, 4, 5 the same on P */
	float *out;
	const float *x, *W, *b, *dy;
	const struct conv2d_shape *s;
	float *P; /* 3, 5: the packed batch written (forward) or its gradient (dx); 4: read */
	int keep; /* 3: P keeps every sample (for dW); 0: one sample's room per part, reused */
};

/* run_part's padded kernels. */
static void run_pad_part(const struct part *p)
{
	switch (p->dW) {
	case 3:
#ifdef CD_X86
		if (p->level == 2)
			pfwd_avx512(p->out, p->P, p->x, p->W, p->b, p->B, p->s, p->lo, p->hi, p->keep);
		else if (p->level)
			pfwd_avx2(p->out, p->P, p->x, p->W, p->b, p->B, p->s, p->lo, p->hi, p->keep);
		else
#endif
			pfwd_c(p->out, p->P, p->x, p->W, p->b, p->B, p->s, p->lo, p->hi, p->keep);
		break;
	case 4:
#ifdef CD_X86
		if (p->level == 2)
			pdW_avx512(p->out, p->dy, p->P, p->B, p->s, p->lo, p->hi);
		else if (p->level)
			pdW_avx2(p->out, p->dy, p->P, p->B, p->s, p->lo, p->hi);
		else
#endif
			pdW_c(p->out, p->dy, p->P, p->B, p->s, p->lo, p->hi);
		break;
	default:
#ifdef CD_X86
		if (p->level == 2)
			pdx_avx512(p->out, p->P, p->dy, p->W, p->B, p->s, p->lo, p->hi);
		else if (p->level)
			pdx_avx2(p->out, p->P, p->dy, p->W, p->B, p->s, p->lo, p->hi);
		else
#endif
			pdx_c(p->out, p->P, p->dy, p->W, p->B, p->s, p->lo, p->hi);
	}
}

static void *run_part(void *arg)
{
	const struct part *p = arg;
	if (p->dW >= 3) {
		run_pad_part(p);
		return NULL;
	}
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

/* [0, n) in chunks of whole units of `unit`, taken by the pool's threads. A chunk writes only
 * its own outputs, in the order one thread would: the result does not depend on the number of
 * threads or on which thread takes a chunk. */
struct split {
	struct part base;
	int n, unit, chunks;
};

static void run_chunk(void *arg, int c, int part_no)
{
	const struct split *sp = arg;
	struct part p = sp->base;
	(void)part_no;
	long lo, hi;
	pool_chunk_bounds(sp->n, sp->unit, sp->chunks, c, &lo, &hi);
	p.lo = (int)lo, p.hi = (int)hi;
	run_part(&p);
}

static void run_split(struct part base, int n, int unit)
{
	int units = (n + unit - 1) / unit;
	struct split sp = {base, n, unit, nthreads > 1 ? pool_chunk_count(units) : 1};
	pool_chunks(sp.chunks, 0, run_chunk, &sp);
}

void conv_direct_forward(float *y, const float *x, const float *W, const float *b, int B,
			 const struct conv2d_shape *s)
{
	struct part p = {0, conv_direct_simd(-1), 0, B, B, y, x, W, b, NULL, s, NULL, 0};
	run_split(p, B, 1);
}

/* dW's units: (a tile of NO output channels, an input channel, a kernel row), each weight in
 * one unit and summed over the batch in the same order whichever thread takes it. Splitting
 * the input channels and rows as well as the output channels gives the cnn's conv0 (10 output
 * channels, 1 input, 5 rows) 15 units where its 3 tiles split 2 against 1 over two threads. */
void conv_direct_dW(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s)
{
	struct part p = {1, conv_direct_simd(-1), 0, 0, B, dW, x, NULL, NULL, dy, s, NULL, 0};
	int NO = p.level == 2 ? 4 : p.level ? 2 : 1;
	p.hi = (s->oc + NO - 1) / NO * s->c * s->k;
	run_split(p, p.hi, 1);
}

int conv_direct_dx_fits(const struct conv2d_shape *s)
{
	return conv_direct_fits(s) && s->k <= CD_KMAX && s->ow <= CD_OWMAX;
}

void conv_direct_dx(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s)
{
	struct part p = {2, conv_direct_simd(-1), 0, B, B, dx, NULL, W, NULL, dy, s, NULL, 0};
	run_split(p, B, 1);
}

void conv_direct_pad_forward(float *y, float *P, const float *x, const float *W, const float *b, int B,
			     const struct conv2d_shape *s, int keep)
{
	struct part p = {3, conv_direct_simd(-1), 0, B, B, y, x, W, b, NULL, s, P, keep};
	run_split(p, B, 1);
}

void conv_direct_pad_dW(float *dW, const float *dy, const float *P, int B, const struct conv2d_shape *s)
{
	/* output channels in units of the widest dW tile (a thread's part is whole tiles) */
	struct part p = {4, conv_direct_simd(-1), 0, s->oc, B, dW, NULL, NULL, NULL, dy, s, (float *)P, 0};
	run_split(p, s->oc, s->k == 1 ? 8 : 4);
}

void conv_direct_pad_dx(float *dx, float *D, const float *dy, const float *W, int B, const struct conv2d_shape *s)
{
	struct part p = {5, conv_direct_simd(-1), 0, B, B, dx, NULL, W, NULL, dy, s, D, 0};
	run_split(p, B, 1);
}
