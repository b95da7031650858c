#include "nn/layers.h"

#include "base/num.h"
#include "nn/conv_direct.h"
#include "nn/matmul.h"
#include "nn/pool.h"

#include <blis.h>
#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

/* C (m,n) = A (m,k) · B (k,n) + beta·C, each with its own row and column strides. BLIS takes
 * non-const pointers but reads A and B only. BLIS runs on one thread (layers_set_threads): its
 * own threads' barriers spin, and a second team beside the pool's fought it for the cores
 * (doc/results/resnet-speed.md). Instead the product is cut into blocks of C's rows or
 * columns, as many as its size says (never the thread count: a block's floats are the same
 * whoever computes it), and the pool's threads take the blocks in order. */
struct gemm_job {
	dim_t m, n, k;
	const float *a, *b;
	inc_t rsa, csa, rsb, csb, rsc, csc;
	float beta, *c;
	int rows, blocks; /* blocks of rows (else of columns), and how many */
};

#define GEMM_BLOCK_FLOPS (1 << 23) /* multiply-adds per block, at least: a call costs microseconds */
#define GEMM_MAX_BLOCKS 16
#define GEMM_BLOCK_MIN 256

static void gemm_blocks(void *arg, size_t lo, size_t hi)
{
	const struct gemm_job *j = arg;
	float one = 1.0f, beta = j->beta;
	dim_t d = j->rows ? j->m : j->n, al = j->rows ? 24 : 32; /* whole micro-tiles of BLIS's kernels */
	dim_t units = (d + al - 1) / al;
	for (size_t i = lo; i < hi; i++) {
		dim_t u0 = units * (dim_t)i / j->blocks * al, u1 = units * (dim_t)(i + 1) / j->blocks * al;
		if (u1 > d)
			u1 = d;
		if (u0 >= u1)
			continue;
		if (j->rows)
			bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, u1 - u0, j->n, j->k, &one,
				  (float *)j->a + u0 * j->rsa, j->rsa, j->csa, (float *)j->b, j->rsb, j->csb, &beta,
				  j->c + u0 * j->rsc, j->rsc, j->csc);
		else
			bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, j->m, u1 - u0, j->k, &one, (float *)j->a, j->rsa,
				  j->csa, (float *)j->b + u0 * j->csb, j->rsb, j->csb, &beta, j->c + u0 * j->csc, j->rsc,
				  j->csc);
	}
}

static void gemm(dim_t m, dim_t n, dim_t k, const float *a, inc_t rsa, inc_t csa, const float *b,
		 inc_t rsb, inc_t csb, float beta, float *c, inc_t rsc, inc_t csc)
{
	struct gemm_job j = {m, n, k, a, b, rsa, csa, rsb, csb, rsc, csc, beta, c, m > n, 1};
	double work = (double)m * n * k;
	dim_t d = j.rows ? m : n, al = j.rows ? 24 : 32;
	(void)al;
	if (work >= 2.0 * GEMM_BLOCK_FLOPS) {
		/* each block packs the other operand again: blocks of GEMM_BLOCK_MIN rows or columns
		 * or more keep that under a few per cent of its multiply-adds */
		double nb = work / GEMM_BLOCK_FLOPS, most = (double)(d / GEMM_BLOCK_MIN);
		nb = nb > GEMM_MAX_BLOCKS ? GEMM_MAX_BLOCKS : nb;
		j.blocks = (int)(nb < most ? nb : most);
		if (j.blocks < 1)
			j.blocks = 1;
	}
	if (j.blocks <= 1) {
		gemm_blocks(&j, 0, 1);
		return;
	}
	pool_for((size_t)j.blocks, 1, 1, gemm_blocks, &j);
}

/* Short loops written in blocks of 8 with fixed trip counts: GCC -O2 (cheap vectorizer cost
 * model) vectorizes these and would turn a plain copy loop into a memcpy call per segment. */
static inline void copy_floats(float *restrict d, const float *restrict s, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		memcpy(d + i, s + i, 8 * sizeof *d);
	for (; i + 4 <= n; i += 4)
		memcpy(d + i, s + i, 4 * sizeof *d);
	if (i < n)
		d[i] = s[i];
	if (i + 1 < n)
		d[i + 1] = s[i + 1];
	if (i + 2 < n)
		d[i + 2] = s[i + 2];
}

static inline void add_floats(float *restrict d, const float *restrict s, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			d[i + j] += s[i + j];
	for (; i < n; i++)
		d[i] += s[i];
}

static inline void fill_floats(float *restrict d, float v, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			d[i + j] = v;
	for (; i < n; i++)
		d[i] = v;
}

/* Σ x with 8 partial sums: vectorizes, and rounds better than one running sum. */
static float sum_floats(const float *restrict x, size_t n)
{
	float acc[8] = {0}, s = 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			acc[j] += x[i + j];
	for (; i < n; i++)
		s += x[i];
	for (int j = 0; j < 8; j++)
		s += acc[j];
	return s;
}

/* d = s · m (element-wise) */
static void mul_floats(float *restrict d, const float *restrict s, const float *restrict m, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			d[i + j] = s[i + j] * m[i + j];
	for (; i < n; i++)
		d[i] = s[i] * m[i];
}

static void scale_floats(float *restrict d, const float *restrict s, float v, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			d[i + j] = s[i + j] * v;
	for (; i < n; i++)
		d[i] = s[i] * v;
}

void layers_set_threads(int t)
{
	bli_thread_set_num_threads(1); /* the pool's threads split its products (gemm) */
	conv_direct_threads(t);
	matmul_threads(t);
	pool_set_threads(t);
}

_Static_assert(POOL_MAX_THREADS == 64, "LAYERS_THREADS_BAD names the pool's most threads");

int layers_threads_arg(const char *s, int *t)
{
	long v;
	if (num_long(s, 1, POOL_MAX_THREADS, &v))
		return -1;
	*t = (int)v;
	return 0;
}

int conv2d_shape_init(struct conv2d_shape *s, int c, int h, int w, int oc, int k, int stride, int pad)
{
	if (c < 1 || h < 1 || w < 1 || oc < 1 || k < 1 || stride < 1 || pad < 0 ||
	    k > h + 2 * pad || k > w + 2 * pad)
		return -1;
	*s = (struct conv2d_shape){c, h, w, oc, k, stride, pad, 0, 0};
	s->oh = (h + 2 * pad - k) / stride + 1;
	s->ow = (w + 2 * pad - k) / stride + 1;
	return 0;
}

static size_t im2col_size(const struct conv2d_shape *s, int B)
{
	return (size_t)s->c * s->k * s->k * B * s->oh * s->ow;
}

/* col holds the im2col, or for the padded direct kernels their packed batch P (and dcol dx's
 * P-shaped gradient): at most the im2col's size except for a 1×1 stride-2 kernel, whose P
 * rounds the output rows up to 8 floats. */
size_t conv2d_col_size(const struct conv2d_shape *s, int B)
{
	size_t n = im2col_size(s, B);
	if (conv_direct_pad_fits(s) && conv_direct_pad_size(s, B) > n)
		n = conv_direct_pad_size(s, B);
	return n;
}

/* The valid output columns [*lo, *hi) of one kernel column kj: 0 <= ow·S − P + kj < W. */
static void conv_cols(const struct conv2d_shape *s, int kj, int *lo, int *hi)
{
	int a = s->pad - kj, b = s->w + s->pad - kj; /* ow·S in [a, b) */
	*lo = a <= 0 ? 0 : (a + s->stride - 1) / s->stride;
	*hi = b <= 0 ? 0 : (b + s->stride - 1) / s->stride;
	if (*hi > s->ow)
		*hi = s->ow;
	if (*lo > *hi)
		*lo = *hi;
}

/* col[(c,ki,kj)][(b,oh,ow)] = x[c][b][oh·S − P + ki][ow·S − P + kj], 0 outside the input, for
 * the nb samples from x on (x's channels are xb samples apart); col's rows are ld apart. */
static void im2col(float *col, size_t ld, const float *x, int xb, int nb, const struct conv2d_shape *s)
{
	size_t plane = (size_t)s->h * s->w;
	float *dst = col;
	for (int c = 0; c < s->c; c++)
		for (int ki = 0; ki < s->k; ki++)
			for (int kj = 0; kj < s->k; kj++, dst += ld) {
				int lo, hi;
				conv_cols(s, kj, &lo, &hi);
				for (int b = 0; b < nb; b++) {
					const float *xp = x + ((size_t)c * xb + b) * plane;
					for (int oh = 0; oh < s->oh; oh++) {
						float *d = dst + ((size_t)b * s->oh + oh) * s->ow;
						int ih = oh * s->stride - s->pad + ki;
						if (ih < 0 || ih >= s->h) {
							memset(d, 0, sizeof *d * s->ow);
							continue;
						}
						/* row[i] is input column lo·S − P + kj + i·S, inside the plane */
						for (int ow = 0; ow < lo; ow++)
							d[ow] = 0;
						for (int ow = hi; ow < s->ow; ow++)
							d[ow] = 0;
						if (lo == hi)
							continue;
						const float *row = xp + (size_t)ih * s->w + lo * s->stride - s->pad + kj;
						if (s->stride == 1)
							copy_floats(d + lo, row, hi - lo);
						else
							for (int ow = lo; ow < hi; ow++)
								d[ow] = row[(size_t)(ow - lo) * s->stride];
					}
				}
			}
}

/* The adjoint of im2col: dx[c][b][ih][iw] = Σ over the col entries that read it (nb samples
 * from dx on, channels xb samples apart, col rows ld apart). */
static void col2im(float *dx, const float *col, size_t ld, int xb, int nb, const struct conv2d_shape *s)
{
	size_t plane = (size_t)s->h * s->w;
	const float *src = col;
	for (int c = 0; c < s->c; c++)
		memset(dx + (size_t)c * xb * plane, 0, sizeof *dx * plane * nb);
	for (int c = 0; c < s->c; c++)
		for (int ki = 0; ki < s->k; ki++)
			for (int kj = 0; kj < s->k; kj++, src += ld) {
				int lo, hi;
				conv_cols(s, kj, &lo, &hi);
				for (int b = 0; b < nb; b++) {
					float *xp = dx + ((size_t)c * xb + b) * plane;
					for (int oh = 0; oh < s->oh; oh++) {
						const float *d = src + ((size_t)b * s->oh + oh) * s->ow;
						int ih = oh * s->stride - s->pad + ki;
						if (ih < 0 || ih >= s->h || lo == hi)
							continue;
						float *row = xp + (size_t)ih * s->w + lo * s->stride - s->pad + kj;
						if (s->stride == 1)
							add_floats(row, d + lo, (size_t)(hi - lo));
						else
							for (int ow = lo; ow < hi; ow++)
								row[(size_t)(ow - lo) * s->stride] += d[ow];
					}
				}
			}
}

/* Samples per chunk: the convolutions run over the batch in chunks whose im2col slice (C·K·K ×
 * chunk·OH·OW floats) stays in the L2 cache while BLIS packs it, about 256 KB. */
static int conv_chunk(const struct conv2d_shape *s, int B)
{
	size_t per = im2col_size(s, 1), room = (size_t)64 << 10;
	int nb = per >= room ? 1 : (int)(room / per);
	return nb < B ? nb : B;
}

void conv2d_forward(float *y, float *col, const float *x, const float *W, const float *b, int B,
		    const struct conv2d_shape *s, int keep)
{
	size_t n = (size_t)B * s->oh * s->ow, ohw = (size_t)s->oh * s->ow;
	size_t plane = (size_t)s->h * s->w;
	int ckk = s->c * s->k * s->k, nb = conv_chunk(s, B);
	if (conv_direct_fits(s)) {
		conv_direct_forward(y, x, W, b, B, s);
		return;
	}
	if (conv_direct_pad_fits(s)) { /* col: the packed batch, which backward's dW reads */
		conv_direct_pad_forward(y, col, x, W, b, B, s, keep);
		return;
	}
	for (int o = 0; o < s->oc; o++)
		fill_floats(y + (size_t)o * n, b[o], n); /* then y += W·col */
	for (int b0 = 0; b0 < B; b0 += nb) {
		int m = B - b0 < nb ? B - b0 : nb;
		/* keep: the whole im2col for backward, else one chunk's room reused */
		float *c = keep ? col + b0 * ohw : col;
		size_t ld = keep ? n : (size_t)m * ohw;
		im2col(c, ld, x + b0 * plane, B, m, s);
		gemm(s->oc, (dim_t)(m * ohw), ckk, W, ckk, 1, c, (inc_t)ld, 1, 1.0f, y + b0 * ohw, (inc_t)n, 1);
	}
}

/* Units per part for units of `floats` floats: a part of a pass should be some 8K floats or
 * more (waking the pool costs microseconds). */
static size_t per_part(size_t floats)
{
	return floats >= 8192 ? 1 : 8192 / (floats ? floats : 1);
}

/* db[o] = Σ of dy's plane o (n floats), for the planes [lo, hi) */
struct sums_job {
	float *db;
	const float *dy;
	size_t n;
};

static void sums_part(void *a, size_t lo, size_t hi)
{
	const struct sums_job *j = a;
	for (size_t o = lo; o < hi; o++)
		j->db[o] = sum_floats(j->dy + o * j->n, j->n);
}

void conv2d_backward(float *dx, float *dW, float *db, float *dcol, const float *dy, const float *col,
		     const float *x, const float *W, int B, const struct conv2d_shape *s)
{
	size_t n = (size_t)B * s->oh * s->ow, ohw = (size_t)s->oh * s->ow;
	size_t plane = (size_t)s->h * s->w;
	int ckk = s->c * s->k * s->k, nb = conv_chunk(s, B);
	struct sums_job sj = {db, dy, n};
	pool_for((size_t)s->oc, 1, per_part(n), sums_part, &sj);
	if (conv_direct_pad_fits(s)) {
		conv_direct_pad_dW(dW, dy, col, B, s);
		if (dx && dcol)
			conv_direct_pad_dx(dx, dcol, dy, W, B, s);
		return;
	}
	int direct = conv_direct_fits(s);
	if (direct)
		conv_direct_dW(dW, dy, x, B, s); /* col is not filled: forward took the direct path */
	if (direct && dx && conv_direct_dx_fits(s)) {
		conv_direct_dx(dx, dy, W, B, s);
		return;
	}
	for (int b0 = 0; b0 < B; b0 += nb) {
		int m = B - b0 < nb ? B - b0 : nb;
		size_t cm = (size_t)m * ohw;
		if (!direct)
			gemm(s->oc, ckk, (dim_t)cm, dy + b0 * ohw, (inc_t)n, 1, col + b0 * ohw, 1, (inc_t)n,
		     b0 ? 1.0f : 0.0f, dW, ckk, 1);
		if (!dx || !dcol)
			continue;
		gemm(ckk, (dim_t)cm, s->oc, W, 1, ckk, dy + b0 * ohw, (inc_t)n, 1, 0.0f, dcol, (inc_t)cm, 1);
		col2im(dx + b0 * plane, dcol, cm, B, m, s);
	}
}

/* 2×2 windows, the common case, four outputs at a time with GCC/Clang generic vectors (SSE on
 * x86-64, plain code elsewhere); ties go to the first maximum in scan order. */
typedef float v4sf __attribute__((vector_size(16)));
typedef int32_t v4si __attribute__((vector_size(16)));

static inline v4sf load4(const float *p)
{
	v4sf v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void store4(float *p, v4sf v)
{
	memcpy(p, &v, sizeof v);
}

/* m ? a : b, lane by lane (m lanes are 0 or −1) */
static inline v4sf select4(v4si m, v4sf a, v4sf b)
{
	return (v4sf)((m & (v4si)a) | (~m & (v4si)b));
}

/* the first maximum of window (a b / c d) and its position 0..3 */
static inline float max4(float a, float b, float c, float d, int *at)
{
	float v = a;
	*at = 0;
	if (b > v) v = b, *at = 1;
	if (c > v) v = c, *at = 2;
	if (d > v) v = d, *at = 3;
	return v;
}

static void maxpool2_forward(float *restrict y, uint8_t *restrict arg, const float *restrict x,
			     size_t planes, int h, int w)
{
	int oh = h / 2, ow = w / 2;
	for (size_t p = 0; p < planes; p++)
		for (int i = 0; i < oh; i++) {
			const float *r0 = x + (p * h + 2 * i) * w, *r1 = r0 + w;
			int j = 0;
			for (; j + 4 <= ow; j += 4, y += 4, arg += 4) {
				v4sf p0 = load4(r0 + 2 * j), p1 = load4(r0 + 2 * j + 4);
				v4sf q0 = load4(r1 + 2 * j), q1 = load4(r1 + 2 * j + 4);
				v4sf a = __builtin_shufflevector(p0, p1, 0, 2, 4, 6);
				v4sf b = __builtin_shufflevector(p0, p1, 1, 3, 5, 7);
				v4sf c = __builtin_shufflevector(q0, q1, 0, 2, 4, 6);
				v4sf d = __builtin_shufflevector(q0, q1, 1, 3, 5, 7);
				v4si mb = b > a, md = d > c;
				v4sf top = select4(mb, b, a), bot = select4(md, d, c);
				v4si ml = bot > top;
				v4si at = (ml & ((md & 1) | 2)) | (~ml & (mb & 1));
				store4(y, select4(ml, bot, top));
				for (int k = 0; k < 4; k++)
					arg[k] = (uint8_t)at[k];
			}
			for (; j < ow; j++, y++, arg++) {
				int at;
				*y = max4(r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1], &at);
				*arg = (uint8_t)at;
			}
		}
}

static void maxpool2_backward(float *restrict dx, const float *restrict dy, const uint8_t *restrict arg,
			      size_t planes, int h, int w)
{
	int oh = h / 2, ow = w / 2;
	for (size_t p = 0; p < planes; p++)
		for (int i = 0; i < oh; i++) {
			float *r0 = dx + (p * h + 2 * i) * w, *r1 = r0 + w;
			int j = 0;
			for (; j + 4 <= ow; j += 4, dy += 4, arg += 4) {
				v4sf g = load4(dy), zero = {0, 0, 0, 0};
				v4si at = {arg[0], arg[1], arg[2], arg[3]};
				v4sf ea = select4(at == 0, g, zero), eb = select4(at == 1, g, zero);
				v4sf ec = select4(at == 2, g, zero), ed = select4(at == 3, g, zero);
				store4(r0 + 2 * j, __builtin_shufflevector(ea, eb, 0, 4, 1, 5));
				store4(r0 + 2 * j + 4, __builtin_shufflevector(ea, eb, 2, 6, 3, 7));
				store4(r1 + 2 * j, __builtin_shufflevector(ec, ed, 0, 4, 1, 5));
				store4(r1 + 2 * j + 4, __builtin_shufflevector(ec, ed, 2, 6, 3, 7));
			}
			for (; j < ow; j++, dy++, arg++) {
				r0[2 * j] = *arg == 0 ? *dy : 0.0f;
				r0[2 * j + 1] = *arg == 1 ? *dy : 0.0f;
				r1[2 * j] = *arg == 2 ? *dy : 0.0f;
				r1[2 * j + 1] = *arg == 3 ? *dy : 0.0f;
			}
			/* an odd last column gets no gradient */
			if (w % 2) {
				r0[w - 1] = 0.0f;
				r1[w - 1] = 0.0f;
			}
		}
}

static void maxpool2d_fwd_serial(float *y, uint8_t *arg, const float *x, size_t planes, int h, int w, int k)
{
	int oh = h / k, ow = w / k;
	if (k == 2) {
		maxpool2_forward(y, arg, x, planes, h, w);
		return;
	}
	for (size_t p = 0; p < planes; p++) {
		const float *xp = x + p * h * w;
		for (int i = 0; i < oh; i++)
			for (int j = 0; j < ow; j++, y++, arg++) {
				const float *win = xp + (size_t)i * k * w + j * k;
				float v = win[0];
				int best = 0;
				for (int di = 0; di < k; di++)
					for (int dj = 0; dj < k; dj++)
						if (win[di * w + dj] > v) {
							v = win[di * w + dj];
							best = di * k + dj;
						}
				*y = v;
				*arg = (uint8_t)best;
			}
	}
}

static void maxpool2d_bwd_serial(float *dx, const float *dy, const uint8_t *arg, size_t planes, int h, int w, int k)
{
	int oh = h / k, ow = w / k;
	size_t plane = (size_t)h * w;
	if (k == 2 && h % 2 == 0) {
		maxpool2_backward(dx, dy, arg, planes, h, w);
		return;
	}
	/* rows and columns past the last whole window get no gradient */
	memset(dx, 0, sizeof *dx * plane * planes);
	for (size_t p = 0; p < planes; p++)
		for (int i = 0; i < oh; i++)
			for (int j = 0; j < ow; j++, dy++, arg++)
				dx[p * plane + (size_t)(i * k + *arg / k) * w + j * k + *arg % k] = *dy;
}

static void avgpool2d_fwd_serial(float *y, const float *x, size_t planes, int h, int w, int k)
{
	int oh = h / k, ow = w / k;
	float inv = 1.0f / (float)(k * k);
	for (size_t p = 0; p < planes; p++)
		for (int i = 0; i < oh; i++) {
			const float *r0 = x + (p * h + (size_t)i * k) * w;
			for (int j = 0; j < ow; j++, y++) {
				const float *win = r0 + (size_t)j * k;
				float acc = 0;
				for (int di = 0; di < k; di++)
					for (int dj = 0; dj < k; dj++)
						acc += win[(size_t)di * w + dj];
				*y = acc * inv;
			}
		}
}

static void avgpool2d_bwd_serial(float *dx, const float *dy, size_t planes, int h, int w, int k)
{
	int oh = h / k, ow = w / k;
	float inv = 1.0f / (float)(k * k);
	for (size_t p = 0; p < planes; p++) {
		float *xp = dx + p * h * w;
		for (int i = 0; i < oh; i++, dy += ow) {
			float *row = xp + (size_t)i * k * w;
			for (int j = 0; j < ow; j++)
				fill_floats(row + (size_t)j * k, dy[j] * inv, (size_t)k);
			fill_floats(row + (size_t)ow * k, 0.0f, (size_t)(w - ow * k));
			for (int di = 1; di < k; di++)
				memcpy(row + (size_t)di * w, row, sizeof *row * w);
		}
		fill_floats(xp + (size_t)oh * k * w, 0.0f, (size_t)(h - oh * k) * w);
	}
}

static void relu_floats(float *restrict y, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			y[i + j] = x[i + j] > 0 ? x[i + j] : 0.0f;
	for (; i < n; i++)
		y[i] = x[i] > 0 ? x[i] : 0.0f;
}

static void relu_backward_inplace(float *restrict g, const float *restrict y, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++) {
			float a = g[i + j], b = y[i + j];
			g[i + j] = b > 0 ? a : 0.0f;
		}
	for (; i < n; i++)
		g[i] = y[i] > 0 ? g[i] : 0.0f;
}

/* Σ (x − μ)² over n values, with 8 partial sums as sum_floats */
static float sum_sq_dev(const float *restrict x, float mu, size_t n)
{
	float acc[8] = {0}, s = 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			acc[j] += (x[i + j] - mu) * (x[i + j] - mu);
	for (; i < n; i++)
		s += (x[i] - mu) * (x[i] - mu);
	for (int j = 0; j < 8; j++)
		s += acc[j];
	return s;
}

/* y = (x − μ)·r·g + b over n values; then + add[i] (add not NULL) and max(·, 0) (relu): the
 * residual add and the ReLU that follow a norm, in its pass */
static void norm_affine(float *restrict y, const float *restrict x, const float *restrict add, int relu, float mu,
			float r, float g, float b, size_t n)
{
	float a = r * g;
	size_t i = 0;
	/* blocks of 8 for GCC -O2's vectorizer (see copy_floats), then the tail */
	if (add && relu) {
		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++) {
				float v = add[i + k] + ((x[i + k] - mu) * a + b);
				y[i + k] = v > 0 ? v : 0.0f;
			}
		for (; i < n; i++) {
			float v = add[i] + ((x[i] - mu) * a + b);
			y[i] = v > 0 ? v : 0.0f;
		}
	} else if (add) {
		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				y[i + k] = add[i + k] + ((x[i + k] - mu) * a + b);
		for (; i < n; i++)
			y[i] = add[i] + ((x[i] - mu) * a + b);
	} else if (relu) {
		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++) {
				float v = (x[i + k] - mu) * a + b;
				y[i + k] = v > 0 ? v : 0.0f;
			}
		for (; i < n; i++) {
			float v = (x[i] - mu) * a + b;
			y[i] = v > 0 ? v : 0.0f;
		}
	} else {
		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				y[i + k] = (x[i + k] - mu) * a + b;
		for (; i < n; i++)
			y[i] = (x[i] - mu) * a + b;
	}
}

struct gn_job {
	float *y, *stats, *dg, *db, *dx, *dy, *sums;
	const float *x, *g, *b, *add, *ry;
	int relu, B, c, hw, G;
};

/* The samples [lo, hi) of a forward: each (sample, group)'s μ and r from its values (a few
 * planes, in L1 after the first pass), then y in one pass, the add and the ReLU on the way. */
static void gn_forward_part(void *arg, size_t lo, size_t hi)
{
	const struct gn_job *j = arg;
	int cg = j->c / j->G, B = j->B, G = j->G;
	size_t plane = (size_t)j->hw, n = (size_t)cg * plane, step = (size_t)B * plane;
	for (size_t s = lo; s < hi; s++)
		for (int q = 0; q < G; q++) {
			size_t off = ((size_t)q * cg * B + s) * plane;
			const float *xc = j->x + off; /* channel q·cg of sample s; the next, step further */
			float sum = 0, dev = 0;
			for (int k = 0; k < cg; k++)
				sum += sum_floats(xc + k * step, plane);
			float mu = sum / (float)n;
			for (int k = 0; k < cg; k++)
				dev += sum_sq_dev(xc + k * step, mu, plane);
			float r = 1.0f / sqrtf(dev / (float)n + GROUPNORM_EPS);
			j->stats[2 * (s * G + q)] = mu;
			j->stats[2 * (s * G + q) + 1] = r;
			for (int k = 0; k < cg; k++) {
				int ch = q * cg + k;
				size_t o = off + k * step;
				norm_affine(j->y + o, xc + k * step, j->add ? j->add + o : NULL, j->relu, mu, r, j->g[ch],
					    j->b[ch], plane);
			}
		}
}

void groupnorm_forward_fused(float *y, float *stats, const float *x, const float *g, const float *b,
			     const float *add, int relu, int B, int c, int hw, int G)
{
	struct gn_job j = {.y = y, .stats = stats, .x = x, .g = g, .b = b, .add = add, .relu = relu, .B = B, .c = c,
			   .hw = hw, .G = G};
	pool_for((size_t)B, 1, per_part((size_t)c * hw), gn_forward_part, &j);
}

void groupnorm_forward(float *y, float *stats, const float *x, const float *g, const float *b, int B, int c,
		       int hw, int G)
{
	groupnorm_forward_fused(y, stats, x, g, b, NULL, 0, B, c, hw, G);
}

/* Σ dy and Σ dy·x̂, x̂ = (x − μ)·r, over n values, with 8 partial sums each; ry: dy is first
 * masked where ry <= 0 (the ReLU after the norm), in place, while it is in L1 */
static void gn_sums(float *restrict dy, const float *restrict ry, const float *restrict x, float mu, float r,
		    size_t n, float *sdy, float *sdyx)
{
	float a[8] = {0}, c[8] = {0}, s = 0, t = 0;
	size_t i = 0;
	if (ry)
		relu_backward_inplace(dy, ry, n);
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++) {
			a[j] += dy[i + j];
			c[j] += dy[i + j] * ((x[i + j] - mu) * r);
		}
	for (; i < n; i++) {
		s += dy[i];
		t += dy[i] * ((x[i] - mu) * r);
	}
	for (int j = 0; j < 8; j++)
		s += a[j], t += c[j];
	*sdy = s, *sdyx = t;
}

/* dx = r·(dy·g − m1 − x̂·m2), x̂ = (x − μ)·r, over n values (dx may be dy) */
static void gn_dx(float *dx, const float *dy, const float *restrict x, float mu, float r, float g, float m1,
		  float m2, size_t n)
{
	size_t i = 0;
	if (dx == dy) { /* in place: one restrict pointer, so that the blocks vectorize */
		float *restrict d = dx;
		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				d[i + k] = r * ((d[i + k] * g - m1) - (x[i + k] - mu) * r * m2);
		for (; i < n; i++)
			d[i] = r * ((d[i] * g - m1) - (x[i] - mu) * r * m2);
		return;
	}
	float *restrict d = dx;
	const float *restrict e = dy;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			d[i + k] = r * ((e[i + k] * g - m1) - (x[i + k] - mu) * r * m2);
	for (; i < n; i++)
		d[i] = r * ((e[i] * g - m1) - (x[i] - mu) * r * m2);
}

/* The samples [lo, hi) of a backward: per group, the masking and the plane sums, then dx over
 * the same values (still in L1). The plane sums go to sums (B,C,2), which dg and db add up
 * afterwards, split by channel, each over the samples in order. */
static void gn_backward_part(void *arg, size_t lo, size_t hi)
{
	const struct gn_job *j = arg;
	int cg = j->c / j->G, B = j->B, G = j->G, c = j->c;
	size_t plane = (size_t)j->hw, n = (size_t)cg * plane, step = (size_t)B * plane;
	for (size_t s = lo; s < hi; s++)
		for (int q = 0; q < G; q++) {
			size_t off = ((size_t)q * cg * B + s) * plane;
			float mu = j->stats[2 * (s * G + q)], r = j->stats[2 * (s * G + q) + 1];
			float s1 = 0, s2 = 0;
			for (int k = 0; k < cg; k++) {
				int ch = q * cg + k;
				float *sm = j->sums + 2 * (s * c + ch);
				size_t o = off + k * step;
				gn_sums(j->dy + o, j->ry ? j->ry + o : NULL, j->x + o, mu, r, plane, &sm[0], &sm[1]);
				s1 += j->g[ch] * sm[0];
				s2 += j->g[ch] * sm[1];
			}
			if (!j->dx)
				continue;
			float m1 = s1 / (float)n, m2 = s2 / (float)n;
			for (int k = 0; k < cg; k++)
				gn_dx(j->dx + off + k * step, j->dy + off + k * step, j->x + off + k * step, mu, r,
				      j->g[q * cg + k], m1, m2, plane);
		}
}

/* channels [lo, hi) of dg and db: the samples' plane sums, in the samples' order */
static void gn_param_part(void *arg, size_t lo, size_t hi)
{
	const struct gn_job *j = arg;
	for (size_t ch = lo; ch < hi; ch++) {
		float g = 0, b = 0;
		for (int s = 0; s < j->B; s++) {
			b += j->sums[2 * ((size_t)s * j->c + ch)];
			g += j->sums[2 * ((size_t)s * j->c + ch) + 1];
		}
		j->db[ch] = b;
		j->dg[ch] = g;
	}
}

/* With x̂ = (x − μ)·r and dx̂ = dy·g[c], over the n values of a group: dx = r·(dx̂ − mean(dx̂) −
 * x̂·mean(dx̂·x̂)); Σ dx̂ = Σ_c g[c]·Σ dy and Σ dx̂·x̂ = Σ_c g[c]·Σ dy·x̂, the plane sums that
 * dg and db take too. */
void groupnorm_backward(float *dx, float *dg, float *db, float *dy, const float *ry, const float *x,
			const float *stats, const float *g, float *sums, int B, int c, int hw, int G)
{
	struct gn_job j = {.dx = dx, .dg = dg, .db = db, .dy = dy, .ry = ry, .x = x, .stats = (float *)stats, .g = g,
			   .sums = sums, .B = B, .c = c, .hw = hw, .G = G};
	pool_for((size_t)B, 1, per_part((size_t)c * hw), gn_backward_part, &j);
	pool_for((size_t)c, 1, per_part((size_t)B * 2), gn_param_part, &j);
}

struct ew_job {
	float *y;
	const float *a, *b;
};

/* element-wise passes: parts of whole 64-byte lines, 16K floats or more */
#define EW_UNIT 16
#define EW_MIN (16384 / EW_UNIT)

static void relu_part(void *arg, size_t lo, size_t hi)
{
	const struct ew_job *j = arg;
	relu_floats(j->y + lo, j->a + lo, hi - lo);
}

void relu_forward(float *y, const float *x, size_t n)
{
	struct ew_job j = {y, x, NULL};
	pool_for(n, EW_UNIT, EW_MIN, relu_part, &j);
}

static void relu_back_part(void *arg, size_t lo, size_t hi)
{
	const struct ew_job *j = arg;
	if (j->y != j->a)
		memcpy(j->y + lo, j->a + lo, sizeof *j->y * (hi - lo));
	relu_backward_inplace(j->y + lo, j->b + lo, hi - lo);
}

void relu_backward(float *dx, const float *dy, const float *y, size_t n)
{
	struct ew_job j = {dx, dy, y};
	pool_for(n, EW_UNIT, EW_MIN, relu_back_part, &j);
}

static void add_part(void *arg, size_t lo, size_t hi)
{
	const struct ew_job *j = arg;
	float *y = j->y + lo;
	const float *a = j->a + lo, *b = j->b + lo;
	/* in place (y is a or b: backward's sums) through add_floats' restrict pointers; a + b is
	 * b + a, bit for bit */
	if (y == a || y == b) {
		add_floats(y, y == a ? b : a, hi - lo);
		return;
	}
	float *restrict d = y;
	const float *restrict p = a, *restrict q = b;
	size_t i = 0, n = hi - lo;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			d[i + k] = p[i + k] + q[i + k];
	for (; i < n; i++)
		d[i] = p[i] + q[i];
}

void add_forward(float *y, const float *a, const float *b, size_t n)
{
	struct ew_job j = {y, a, b};
	pool_for(n, EW_UNIT, EW_MIN, add_part, &j);
}

/* The pools split by planes: a plane's outputs are its own. */
struct plane_job {
	float *y;
	uint8_t *arg;
	const float *x, *mask;
	const uint8_t *carg;
	int h, w, k, B, c, hw, which;
	int relu;        /* maxpool: the ReLU after it, in the same pass */
	float *g;        /* its backward: dy, masked in place where ry <= 0 */
	const float *ry; /* the ReLU's output */
};

/* y = max(y, 0) in place: relu_floats's values, in its blocks of 8 (GCC vectorises those) */
static void relu_inplace(float *y, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			y[i + j] = y[i + j] > 0 ? y[i + j] : 0.0f;
	for (; i < n; i++)
		y[i] = y[i] > 0 ? y[i] : 0.0f;
}

/* planes [lo, hi) of y = x·mask[plane] (dropout2d; y may be x) */
static void scale_planes(const struct plane_job *j, size_t lo, size_t hi)
{
	size_t plane = (size_t)j->h * j->w;
	for (size_t q = lo; q < hi; q++) {
		if (j->y == j->x)
			for (size_t i = 0; i < plane; i++)
				j->y[q * plane + i] *= j->mask[q];
		else
			scale_floats(j->y + q * plane, j->x + q * plane, j->mask[q], plane);
	}
}

static void plane_part(void *a, size_t lo, size_t hi)
{
	const struct plane_job *j = a;
	size_t in = (size_t)j->h * j->w, out = (size_t)(j->h / j->k) * (j->w / j->k), n = hi - lo;
	switch (j->which) {
	case 0:
		maxpool2d_fwd_serial(j->y + lo * out, j->arg + lo * out, j->x + lo * in, n, j->h, j->w, j->k);
		if (j->relu) /* while the planes are in this core's cache */
			relu_inplace(j->y + lo * out, n * out);
		break;
	case 1:
		if (j->relu)
			relu_backward_inplace(j->g + lo * out, j->ry + lo * out, n * out);
		maxpool2d_bwd_serial(j->y + lo * in, j->x + lo * out, j->carg + lo * out, n, j->h, j->w, j->k);
		break;
	case 2:
		avgpool2d_fwd_serial(j->y + lo * out, j->x + lo * in, n, j->h, j->w, j->k);
		break;
	case 3:
		avgpool2d_bwd_serial(j->y + lo * in, j->x + lo * out, n, j->h, j->w, j->k);
		break;
	case 8:
		scale_planes(j, lo, hi);
		break;
	}
}

static void planes_run(struct plane_job *j, size_t planes)
{
	pool_for(planes, 1, per_part((size_t)j->h * j->w), plane_part, j);
}

void maxpool2d_forward(float *y, uint8_t *arg, const float *x, size_t planes, int h, int w, int k)
{
	struct plane_job j = {.y = y, .arg = arg, .x = x, .h = h, .w = w, .k = k, .which = 0};
	planes_run(&j, planes);
}

void maxpool2d_backward(float *dx, const float *dy, const uint8_t *arg, size_t planes, int h, int w, int k)
{
	struct plane_job j = {.y = dx, .carg = arg, .x = dy, .h = h, .w = w, .k = k, .which = 1};
	planes_run(&j, planes);
}

void maxpool2d_relu_forward(float *y, uint8_t *arg, const float *x, size_t planes, int h, int w, int k)
{
	struct plane_job j = {.y = y, .arg = arg, .x = x, .h = h, .w = w, .k = k, .which = 0, .relu = 1};
	planes_run(&j, planes);
}

void maxpool2d_relu_backward(float *dx, float *dy, const float *ry, const uint8_t *arg, size_t planes, int h, int w,
			     int k)
{
	struct plane_job j = {.y = dx, .carg = arg, .x = dy, .h = h, .w = w, .k = k, .which = 1, .relu = 1, .g = dy,
			      .ry = ry};
	planes_run(&j, planes);
}

void avgpool2d_forward(float *y, const float *x, size_t planes, int h, int w, int k)
{
	struct plane_job j = {.y = y, .x = x, .h = h, .w = w, .k = k, .which = 2};
	planes_run(&j, planes);
}

void avgpool2d_backward(float *dx, const float *dy, size_t planes, int h, int w, int k)
{
	struct plane_job j = {.y = dx, .x = dy, .h = h, .w = w, .k = k, .which = 3};
	planes_run(&j, planes);
}

/* channels [lo, hi) of the global pool, flatten (which 4..7) */
static void chan_part(void *a, size_t lo, size_t hi)
{
	const struct plane_job *j = a;
	int B = j->B, c = j->c, hw = j->hw;
	for (size_t ch = lo; ch < hi; ch++)
		for (int b = 0; b < B; b++) {
			size_t p = (ch * B + b) * hw, q = (size_t)b * c + ch;
			switch (j->which) {
			case 4:
				j->y[q] = sum_floats(j->x + p, (size_t)hw) / (float)hw;
				break;
			case 5:
				fill_floats(j->y + p, j->x[q] / (float)hw, (size_t)hw);
				break;
			case 6:
				memcpy(j->y + q * hw, j->x + p, sizeof *j->y * hw);
				break;
			case 7:
				memcpy(j->y + p, j->x + q * hw, sizeof *j->y * hw);
				break;
			}
		}
}

static void chans_run(float *y, const float *x, int B, int c, int hw, int which)
{
	struct plane_job j = {.y = y, .x = x, .B = B, .c = c, .hw = hw, .which = which};
	pool_for((size_t)c, 1, per_part((size_t)B * hw), chan_part, &j);
}

void globalavgpool_forward(float *y, const float *x, int B, int c, int hw)
{
	chans_run(y, x, B, c, hw, 4);
}

void globalavgpool_backward(float *dx, const float *dy, int B, int c, int hw)
{
	chans_run(dx, dy, B, c, hw, 5);
}

void flatten_forward(float *y, const float *x, int B, int c, int hw)
{
	chans_run(y, x, B, c, hw, 6);
}

void flatten_backward(float *dx, const float *dy, int B, int c, int hw)
{
	chans_run(dx, dy, B, c, hw, 7);
}

void dropout_forward(float *y, float *mask, const float *x, size_t n, float p, struct rng *r)
{
	float keep = 1.0f / (1.0f - p);
	for (size_t i = 0; i < n; i++)
		mask[i] = rng_float(r) < p ? 0.0f : keep;
	mul_floats(y, x, mask, n);
}

void dropout_backward(float *dx, const float *dy, const float *mask, size_t n)
{
	if (dx == dy)
		for (size_t i = 0; i < n; i++)
			dx[i] *= mask[i];
	else
		mul_floats(dx, dy, mask, n);
}

void dropout2d_forward(float *y, float *mask, const float *x, size_t planes, size_t plane, float p,
		       struct rng *r)
{
	float keep = 1.0f / (1.0f - p);
	for (size_t q = 0; q < planes; q++) /* the draws in order, then the planes on the pool */
		mask[q] = rng_float(r) < p ? 0.0f : keep;
	struct plane_job j = {.y = y, .x = x, .mask = mask, .h = 1, .w = (int)plane, .k = 1, .which = 8};
	planes_run(&j, planes);
}

void dropout2d_backward(float *dx, const float *dy, const float *mask, size_t planes, size_t plane)
{
	struct plane_job j = {.y = dx, .x = dy, .mask = mask, .h = 1, .w = (int)plane, .k = 1, .which = 8};
	planes_run(&j, planes);
}

struct lsm_job {
	float *out;
	const float *in;
	const uint16_t *label;
	int K;
	float scale;
};

static void lsm_fwd_part(void *a, size_t lo, size_t hi)
{
	const struct lsm_job *j = a;
	int K = j->K;
	for (size_t b = lo; b < hi; b++) {
		const float *xb = j->in + b * K;
		float *lb = j->out + b * K;
		float mx = xb[0];
		double sum = 0;
		for (int k = 1; k < K; k++)
			if (xb[k] > mx)
				mx = xb[k];
		for (int k = 0; k < K; k++)
			sum += exp((double)(xb[k] - mx));
		float lse = mx + (float)log(sum);
		for (int k = 0; k < K; k++)
			lb[k] = xb[k] - lse;
	}
}

/* rows split among the threads; the loss summed afterwards, in the rows' order */
double logsoftmax_nll_forward(float *logp, const float *x, const uint16_t *label, int B, int K)
{
	struct lsm_job j = {logp, x, label, K, 0};
	pool_for((size_t)B, 1, per_part((size_t)K * 8), lsm_fwd_part, &j);
	return label ? nll_sum(logp, label, B, K, 0) : 0;
}

double nll_sum(const float *logp, const uint16_t *label, int B, int K, double start)
{
	double loss = start;
	for (int b = 0; b < B; b++)
		loss -= logp[(size_t)b * K + label[b]];
	return loss;
}

static void lsm_bwd_part(void *a, size_t lo, size_t hi)
{
	const struct lsm_job *j = a;
	size_t K = (size_t)j->K;
	for (size_t b = lo; b < hi; b++) {
		for (size_t k = 0; k < K; k++)
			j->out[b * K + k] = expf(j->in[b * K + k]) * j->scale;
		j->out[b * K + j->label[b]] -= j->scale;
	}
}

void logsoftmax_nll_backward(float *dx, const float *logp, const uint16_t *label, int B, int K, float scale)
{
	struct lsm_job j = {dx, logp, label, K, scale};
	pool_for((size_t)B, 1, per_part((size_t)K * 4), lsm_bwd_part, &j);
}
