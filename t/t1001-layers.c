/* t1001: every layer's backward agrees with central finite differences of its forward.
 * For y = f(x) we take the scalar L = Σ y ⊙ R (R random, summed in double) and compare
 * ∂L/∂x (and ∂L/∂W, ∂L/∂b) from backward(dy = R) with (L(x+ε) − L(x−ε)) / 2ε, ε = 1e-2.
 * Bound: max over elements of |num − ana| / max(1e-2, |num| + |ana|) < 5e-3. The layers are
 * piecewise linear or smooth, so what differs is float32 rounding of the forward (~1e-6 in L,
 * ~5e-5 after dividing by 2ε; we see up to 2e-3 against the 1e-2 floor); a wrong index or a
 * missing term gives errors of order 1.
 * Inputs of relu and maxpool stay at least 0.05 away from their kinks, so ±ε never crosses one.
 * Forwards are checked against plain formulas in double: a pool's mean, GroupNorm's
 * normalisation (whose backward is held against differences of that double forward). */
#include <blis.h>
#include <float.h>
#include <string.h>

#include "nn/pool.h"
#include "nn/conv_direct.h"
#include "nn/layer_ops.h"
#include "nn/layers.h"
#include "gradcheck-test.h"
#include "tap.h"

static struct rng r;

static void fill(float *p, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * rng_float(&r);
}

/* values k·0.1 + 0.05 for a random permutation of k, shifted: distinct by 0.1, none near 0 */
static void fill_distinct(float *p, size_t n)
{
	uint32_t *idx = malloc(n * sizeof *idx);
	for (size_t i = 0; i < n; i++)
		idx[i] = (uint32_t)i;
	rng_shuffle(&r, idx, n);
	for (size_t i = 0; i < n; i++)
		p[i] = ((float)idx[i] - (float)n / 2) * 0.1f + 0.05f;
	free(idx);
}

/* ---- conv2d ---- */
struct conv_ctx {
	int B;
	struct conv2d_shape s;
	float *x, *W, *b, *y, *col;
};

static void conv_run(void *c)
{
	struct conv_ctx *d = c;
	conv2d_forward(d->y, d->col, d->x, d->W, d->b, d->B, &d->s, 1);
}

static void test_conv(int B, int c, int h, int w, int oc, int k, int stride, int pad)
{
	struct conv_ctx d = {.B = B};
	ok(conv2d_shape_init(&d.s, c, h, w, oc, k, stride, pad) == 0, "conv2d %dx%dx%d k%d s%d p%d: shape ok",
	   c, h, w, k, stride, pad);
	size_t nx = (size_t)c * B * h * w, nw = (size_t)oc * c * k * k, ny = (size_t)oc * B * d.s.oh * d.s.ow;
	size_t ncol = conv2d_col_size(&d.s, B);
	float *x = malloc(nx * 4), *W = malloc(nw * 4), *b = malloc(oc * 4), *y = malloc(ny * 4);
	float *R = malloc(ny * 4), *dx = malloc(nx * 4), *dW = malloc(nw * 4), *db = malloc(oc * 4);
	float *col = malloc(ncol * 4), *dcol = malloc(ncol * 4);
	d.x = x, d.W = W, d.b = b, d.y = y, d.col = col;
	fill(x, nx, -1, 1), fill(W, nw, -1, 1), fill(b, oc, -1, 1), fill(R, ny, -1, 1);
	conv_run(&d);
	/* one output by the definition: y[o][bb][i][j] = b[o] + Σ W[o][ch][ki][kj]·x[ch][bb][i·S−P+ki][j·S−P+kj] */
	int o = oc - 1, bb = B - 1, i = d.s.oh - 1, j = d.s.ow / 2;
	double want = b[o];
	for (int ch = 0; ch < c; ch++)
		for (int ki = 0; ki < k; ki++)
			for (int kj = 0; kj < k; kj++) {
				int ih = i * stride - pad + ki, iw = j * stride - pad + kj;
				if (ih >= 0 && ih < h && iw >= 0 && iw < w)
					want += (double)W[((o * c + ch) * k + ki) * k + kj] *
						x[(((size_t)ch * B + bb) * h + ih) * w + iw];
			}
	is_near(y[(((size_t)o * B + bb) * d.s.oh + i) * d.s.ow + j], want, 1e-4, "conv2d: an output by definition");
	conv2d_backward(dx, dW, db, dcol, R, col, x, W, B, &d.s);
	/* An output sums c·k² products and a weight reaches B·OH·OW outputs: the float forward's
	 * rounding, over 2ε, is some 1e-4 absolute (as conv_run is linear in x and in W, that is all
	 * the difference has), which against gradients near 0 the default floor would call errors
	 * of 1e-2. Errors of a wrong index or a missing term stay of order 1. */
	struct probe p = {conv_run, &d, y, R, ny, 0.1};
	double ex = probe_check(&p, x, dx, nx, 1), ew = probe_check(&p, W, dW, nw, 1);
	double eb = probe_check(&p, b, db, oc, 1);
	ok(ex < BOUND, "conv2d: dx matches finite differences (max rel err %.2g)", ex);
	ok(ew < BOUND, "conv2d: dW matches finite differences (max rel err %.2g)", ew);
	ok(eb < BOUND, "conv2d: db matches finite differences (max rel err %.2g)", eb);
	free(x), free(W), free(b), free(y), free(R), free(dx), free(dW), free(db), free(col), free(dcol);
}

/* Each SIMD level of the direct kernels (nn/conv_direct.h) agrees with the portable one within
 * float rounding. */
static void test_conv_direct_paths(int B, int c, int h, int w, int oc, int k)
{
	struct conv2d_shape s;
	conv2d_shape_init(&s, c, h, w, oc, k, 1, 0);
	size_t nx = (size_t)c * B * h * w, nw = (size_t)oc * c * k * k, ny = (size_t)oc * B * s.oh * s.ow;
	float *x = malloc(nx * 4), *W = malloc(nw * 4), *b = malloc(oc * 4), *dy = malloc(ny * 4);
	float *y[3] = {malloc(ny * 4), malloc(ny * 4), malloc(ny * 4)};
	float *dW[3] = {malloc(nw * 4), malloc(nw * 4), malloc(nw * 4)};
	float *dx[3] = {malloc(nx * 4), malloc(nx * 4), malloc(nx * 4)};
	fill(x, nx, -1, 1), fill(W, nw, -1, 1), fill(b, oc, -1, 1), fill(dy, ny, -1, 1);
	int was = conv_direct_simd(-1);
	conv_direct_simd(2); /* the highest level this CPU has */
	int have = conv_direct_simd(-1);
	for (int i = 0; i < 3; i++) {
		conv_direct_simd(i);
		conv_direct_forward(y[i], x, W, b, B, &s);
		conv_direct_dW(dW[i], dy, x, B, &s);
		conv_direct_dx(dx[i], dy, W, B, &s);
	}
	conv_direct_simd(was);
	/* threads split the work, not the sums: bit for bit the same */
	float *yt = malloc(ny * 4), *dWt = malloc(nw * 4), *dxt = malloc(nx * 4);
	conv_direct_threads(3);
	pool_set_threads(3);
	conv_direct_forward(yt, x, W, b, B, &s);
	conv_direct_dW(dWt, dy, x, B, &s);
	conv_direct_dx(dxt, dy, W, B, &s);
	conv_direct_threads(1);
	pool_set_threads(1);
	conv_direct_forward(y[0], x, W, b, B, &s);
	conv_direct_dW(dW[0], dy, x, B, &s);
	conv_direct_dx(dx[0], dy, W, B, &s);
	ok(!memcmp(yt, y[0], ny * 4) && !memcmp(dWt, dW[0], nw * 4) && !memcmp(dxt, dx[0], nx * 4),
	   "conv2d direct %dx%dx%d k%d: 3 threads give the bits of 1", c, h, w, k);
	free(yt), free(dWt), free(dxt);
	conv_direct_simd(0);
	conv_direct_forward(y[0], x, W, b, B, &s);
	conv_direct_dW(dW[0], dy, x, B, &s);
	conv_direct_dx(dx[0], dy, W, B, &s);
	conv_direct_simd(was);
	/* each dW entry sums B·OH·OW products: allow rounding growing as its square root */
	double tw = 4 * sqrt((double)B * s.oh * s.ow) * FLT_EPSILON;
	for (int l = 1; l <= 2; l++) {
		double ey = 0, ew = 0, ex = 0;
		for (size_t i = 0; i < nx; i++)
			ex = fmax(ex, fabs((double)dx[l][i] - dx[0][i]) / (1 + fabs((double)dx[0][i])));
		for (size_t i = 0; i < ny; i++)
			ey = fmax(ey, fabs((double)y[l][i] - y[0][i]) / (1 + fabs((double)y[0][i])));
		for (size_t i = 0; i < nw; i++)
			ew = fmax(ew, fabs((double)dW[l][i] - dW[0][i]) / (1 + fabs((double)dW[0][i])));
		if (l > have)
			diag("SIMD level %d is missing here: it ran level %d", l, have);
		ok(ey < 1e-5, "conv2d direct %dx%dx%d k%d: SIMD level %d and portable forward agree (max rel diff %.2g)",
		   c, h, w, k, l, ey);
		ok(ew < tw, "conv2d direct %dx%dx%d k%d: SIMD level %d and portable dW agree (max rel diff %.2g)", c,
		   h, w, k, l, ew);
		ok(ex < 1e-5, "conv2d direct %dx%dx%d k%d: SIMD level %d and portable dx agree (max rel diff %.2g)", c,
		   h, w, k, l, ex);
	}
	for (int i = 0; i < 3; i++)
		free(y[i]), free(dW[i]), free(dx[i]);
	free(x), free(W), free(b), free(dy);
}

/* The padded and strided direct kernels (nn/conv_direct.h's conv_direct_pad_*), through
 * conv2d_forward/backward at every SIMD level, against the definition summed in double: each
 * result within n·ε·Σ|terms| of it (n the terms summed: the bound on any order of float
 * additions), and 3 threads give the bits of 1. */
static double conv_worst(const float *got, const double *want, const double *mag, size_t n, double terms)
{
	double worst = 0; /* the error in units of the bound */
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs(got[i] - want[i]) / (terms * FLT_EPSILON * mag[i] + 1e-30));
	return worst;
}

static void test_conv_pad(int B, int c, int h, int w, int oc, int k, int stride, int pad)
{
	struct conv2d_shape s;
	conv2d_shape_init(&s, c, h, w, oc, k, stride, pad);
	ok(conv_direct_pad_fits(&s), "conv2d %dx%dx%d→%d k%d s%d p%d: the padded direct kernels take it", c, h,
	   w, oc, k, stride, pad);
	size_t nx = (size_t)c * B * h * w, nw = (size_t)oc * c * k * k, ny = (size_t)oc * B * s.oh * s.ow;
	size_t ncol = conv2d_col_size(&s, B);
	float *x = malloc(nx * 4), *W = malloc(nw * 4), *b = malloc(oc * 4), *dy = malloc(ny * 4);
	float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dW = malloc(nw * 4), *db = malloc(oc * 4);
	float *y1 = malloc(ny * 4), *y2 = malloc(ny * 4), *dx1 = malloc(nx * 4), *dW1 = malloc(nw * 4);
	float *col = malloc(ncol * 4), *dcol = malloc(ncol * 4);
	double *ry = calloc(ny, 8), *my = calloc(ny, 8), *rw = calloc(nw, 8), *mw = calloc(nw, 8);
	double *rx = calloc(nx, 8), *mx = calloc(nx, 8);
	fill(x, nx, -1, 1), fill(W, nw, -1, 1), fill(b, oc, -1, 1), fill(dy, ny, -1, 1);
	for (int o = 0; o < oc; o++)
		for (int bb = 0; bb < B; bb++)
			for (int i = 0; i < s.oh; i++)
				for (int j = 0; j < s.ow; j++) {
					size_t yi = (((size_t)o * B + bb) * s.oh + i) * s.ow + j;
					ry[yi] = b[o], my[yi] = fabs(b[o]);
					for (int ch = 0; ch < c; ch++)
						for (int ki = 0; ki < k; ki++)
							for (int kj = 0; kj < k; kj++) {
								int ih = i * stride - pad + ki, iw = j * stride - pad + kj;
								if (ih < 0 || ih >= h || iw < 0 || iw >= w)
									continue;
								size_t wi = (((size_t)o * c + ch) * k + ki) * k + kj;
								size_t xi = (((size_t)ch * B + bb) * h + ih) * w + iw;
								double t = (double)W[wi] * x[xi], u = (double)dy[yi] * x[xi];
								double v = (double)dy[yi] * W[wi];
								ry[yi] += t, my[yi] += fabs(t);
								rw[wi] += u, mw[wi] += fabs(u);
								rx[xi] += v, mx[xi] += fabs(v);
							}
				}
	int was = conv_direct_simd(2), have = conv_direct_simd(-1);
	for (int l = 0; l <= 2; l++) {
		conv_direct_simd(l);
		if (l > have)
			diag("SIMD level %d is missing here: it ran level %d", l, have);
		conv2d_forward(y, col, x, W, b, B, &s, 1);
		conv2d_backward(dx, dW, db, dcol, dy, col, x, W, B, &s);
		double ey = conv_worst(y, ry, my, ny, c * k * k + 1);
		double ew = conv_worst(dW, rw, mw, nw, (double)B * s.oh * s.ow);
		double ex = conv_worst(dx, rx, mx, nx, oc * k * k);
		ok(ey < 1 && ew < 1 && ex < 1,
		   "conv2d %dx%dx%d→%d k%d s%d p%d, batch %d, SIMD level %d: y, dW, dx within the rounding bound "
		   "of the definition (worst %.2g, %.2g, %.2g of it)",
		   c, h, w, oc, k, stride, pad, B, l, ey, ew, ex);
		conv2d_forward(y1, dcol, x, W, b, B, &s, 0);
		ok(!memcmp(y, y1, ny * 4), "conv2d %dx%dx%d→%d k%d s%d p%d, SIMD level %d: evaluation (one sample's room "
		   "reused) gives the bits of training", c, h, w, oc, k, stride, pad, l);
		if (l != have)
			continue;
		conv_direct_threads(3);
		conv2d_forward(y1, col, x, W, b, B, &s, 1);
		conv2d_backward(dx1, dW1, db, dcol, dy, col, x, W, B, &s);
		conv2d_forward(y2, dcol, x, W, b, B, &s, 0); /* threads' rooms in evaluation */
		conv_direct_threads(1);
		ok(!memcmp(y, y1, ny * 4) && !memcmp(y, y2, ny * 4) && !memcmp(dW, dW1, nw * 4) &&
			   !memcmp(dx, dx1, nx * 4),
		   "conv2d %dx%dx%d→%d k%d s%d p%d: 3 threads give the bits of 1 (evaluation too)", c, h, w, oc, k,
		   stride, pad);
	}
	conv_direct_simd(was);
	free(x), free(W), free(b), free(dy), free(y), free(dx), free(dW), free(db), free(y1), free(y2), free(dx1), free(dW1);
	free(col), free(dcol), free(ry), free(my), free(rw), free(mw), free(rx), free(mx);
}

/* ---- maxpool2d ---- */
struct pool_ctx {
	size_t planes;
	int h, w, k;
	float *x, *y;
	uint8_t *arg;
};

static void maxpool_run(void *c)
{
	struct pool_ctx *d = c;
	maxpool2d_forward(d->y, d->arg, d->x, d->planes, d->h, d->w, d->k);
}

static void test_pool(size_t planes, int h, int w, int k)
{
	struct pool_ctx d = {planes, h, w, k, 0, 0, 0};
	size_t nx = planes * h * w, ny = planes * (h / k) * (w / k);
	float *x = malloc(nx * 4), *y = malloc(ny * 4), *R = malloc(ny * 4), *dx = malloc(nx * 4);
	d.x = x, d.y = y, d.arg = malloc(ny);
	fill_distinct(x, nx);
	fill(R, ny, -1, 1);
	maxpool_run(&d);
	int good = 1;
	for (size_t p = 0; p < planes; p++)
		for (int i = 0; i < h / k; i++)
			for (int j = 0; j < w / k; j++) {
				float m = -INFINITY;
				for (int di = 0; di < k; di++)
					for (int dj = 0; dj < k; dj++)
						m = fmaxf(m, x[(p * h + i * k + di) * w + j * k + dj]);
				good &= y[(p * (h / k) + i) * (w / k) + j] == m;
			}
	ok(good, "maxpool2d %dx%d k%d: y is the window maximum", h, w, k);
	for (size_t i = 0; i < nx; i++)
		dx[i] = NAN; /* backward must write every element */
	maxpool2d_backward(dx, R, d.arg, planes, h, w, k);
	struct probe p = {maxpool_run, &d, y, R, ny, 0};
	double ex = probe_check(&p, x, dx, nx, 1);
	ok(ex < BOUND, "maxpool2d %dx%d k%d: dx matches finite differences (max rel err %.2g)", h, w, k, ex);
	/* ties: a constant window sends its gradient to its first element only */
	float cx[16] = {0}, cy[4], cg[4] = {1, 2, 3, 4}, cdx[16];
	uint8_t carg[4];
	maxpool2d_forward(cy, carg, cx, 1, 4, 4, 2);
	maxpool2d_backward(cdx, cg, carg, 1, 4, 4, 2);
	ok(cdx[0] == 1 && cdx[1] == 0 && cdx[4] == 0 && cdx[5] == 0 && cdx[2] == 2 && cdx[10] == 4,
	   "maxpool2d: a tie goes to the first element");
	/* fused with the ReLU after it (x has both signs): the floats of the two passes */
	float *ry = malloc(ny * 4), *fy = malloc(ny * 4), *g = malloc(ny * 4), *fg = malloc(ny * 4);
	float *fdx = malloc(nx * 4);
	uint8_t *farg = malloc(ny);
	maxpool_run(&d); /* y and arg at x again, not at the probe's last step */
	relu_forward(ry, y, ny);
	maxpool2d_relu_forward(fy, farg, x, planes, h, w, k);
	memcpy(g, R, ny * 4), memcpy(fg, R, ny * 4);
	relu_backward(g, g, ry, ny);
	maxpool2d_backward(dx, g, d.arg, planes, h, w, k);
	maxpool2d_relu_backward(fdx, fg, fy, farg, planes, h, w, k);
	ok(!memcmp(ry, fy, ny * 4) && !memcmp(d.arg, farg, ny) && !memcmp(dx, fdx, nx * 4),
	   "maxpool2d %dx%d k%d fused with the ReLU: the floats of the separate passes, forward and back", h, w, k);
	free(ry), free(fy), free(g), free(fg), free(fdx), free(farg);
	free(x), free(y), free(R), free(dx), free(d.arg);
}

/* ---- avgpool2d, globalavgpool ---- */
struct avg_ctx {
	size_t planes;
	int B, c, h, w, k; /* k = 0: the global pool over (C,B,H,W) */
	float *x, *y;
};

static void avg_run(void *c)
{
	struct avg_ctx *d = c;
	if (d->k)
		avgpool2d_forward(d->y, d->x, d->planes, d->h, d->w, d->k);
	else
		globalavgpool_forward(d->y, d->x, d->B, d->c, d->h * d->w);
}

/* k > 0: avgpool2d over B·c planes; k = 0: globalavgpool */
static void test_avgpool(int B, int c, int h, int w, int k)
{
	size_t planes = (size_t)B * c, nx = planes * h * w, ny = k ? planes * (h / k) * (w / k) : planes;
	struct avg_ctx d = {planes, B, c, h, w, k, malloc(nx * 4), malloc(ny * 4)};
	float *R = malloc(ny * 4), *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
	char what[64];
	int kk = k ? k : 1, good = 1;
	if (k)
		snprintf(what, sizeof what, "avgpool2d %dx%d k%d", h, w, k);
	else
		snprintf(what, sizeof what, "globalavgpool (%d,%d,%d,%d)", c, B, h, w);
	fill(d.x, nx, -1, 1);
	fill(R, ny, -1, 1);
	avg_run(&d);
	for (size_t pl = 0; pl < planes; pl++) {
		int oh = k ? h / k : 1, ow = k ? w / k : 1, wh = k ? k : h, ww = k ? k : w;
		for (int i = 0; i < oh; i++)
			for (int j = 0; j < ow; j++) {
				double m = 0;
				for (int di = 0; di < wh; di++)
					for (int dj = 0; dj < ww; dj++)
						m += d.x[(pl * h + i * kk + di) * w + j * kk + dj];
				m /= wh * ww;
				/* the global pool's output is (B,C): plane (ch, b) → b·C + ch */
				size_t at = k ? (pl * oh + i) * ow + j : (pl % B) * c + pl / B;
				good &= fabs(d.y[at] - m) < 1e-6;
			}
	}
	ok(good, "%s: y is the window's mean", what);
	for (size_t i = 0; i < nx; i++)
		dx[i] = NAN; /* backward must write every element */
	if (k)
		avgpool2d_backward(dx, R, planes, h, w, k);
	else
		globalavgpool_backward(dx, R, B, c, h * w);
	struct probe p = {avg_run, &d, d.y, R, ny, 0};
	memcpy(dx2, dx, nx * 4);
	double ex = probe_check(&p, d.x, dx, nx, 1);
	ok(ex < BOUND && !memcmp(dx, dx2, nx * 4), "%s: dx matches finite differences (max rel err %.2g)", what, ex);
	free(d.x), free(d.y), free(R), free(dx), free(dx2);
}

/* ---- groupnorm ---- */
/* GroupNorm in double: y (C,B,HW) from x, g, b (double copies of the float inputs); returns
 * Σ y ⊙ R. Its normalisation sums a whole group, whose float rounding, divided by 2ε, would
 * swamp a finite difference of the float forward: the backward is held against this one. */
static double gn_ref(double *y, const double *x, const double *g, const double *b, const float *R, int B, int c,
		     int hw, int G)
{
	int cg = c / G, n = cg * hw;
	double L = 0;
	for (int s = 0; s < B; s++)
		for (int q = 0; q < G; q++) {
			double mu = 0, var = 0;
			for (int k = 0; k < cg; k++)
				for (int i = 0; i < hw; i++)
					mu += x[((size_t)(q * cg + k) * B + s) * hw + i];
			mu /= n;
			for (int k = 0; k < cg; k++)
				for (int i = 0; i < hw; i++) {
					double v = x[((size_t)(q * cg + k) * B + s) * hw + i] - mu;
					var += v * v;
				}
			var /= n;
			for (int k = 0; k < cg; k++)
				for (int i = 0; i < hw; i++) {
					size_t at = ((size_t)(q * cg + k) * B + s) * hw + i;
					y[at] = (x[at] - mu) / sqrt(var + 1e-5) * g[q * cg + k] + b[q * cg + k];
					L += y[at] * R[at];
				}
		}
	return L;
}

/* the worst relative error of grad against central differences (ε = 1e-4) of gn_ref over v */
static double gn_check(double *yd, double *v, size_t nv, const float *grad, double *xd, double *gd, double *bd,
		       const float *R, int B, int c, int hw, int G)
{
	double worst = 0;
	for (size_t i = 0; i < nv; i++) {
		double keep = v[i];
		v[i] = keep + 1e-4;
		double lp = gn_ref(yd, xd, gd, bd, R, B, c, hw, G);
		v[i] = keep - 1e-4;
		double lm = gn_ref(yd, xd, gd, bd, R, B, c, hw, G);
		v[i] = keep;
		worst = fmax(worst, relerr((lp - lm) / 2e-4, grad[i]));
	}
	return worst;
}

static void test_groupnorm(int B, int c, int hw, int G)
{
	size_t n = (size_t)B * c * hw;
	float *x = malloc(n * 4), *g = malloc(c * 4), *b = malloc(c * 4), *y = malloc(n * 4), *st = malloc(8 * B * G);
	float *R = malloc(n * 4), *dx = malloc(n * 4), *dg = malloc(c * 4), *db = malloc(c * 4);
	float *g2 = malloc(n * 4), *dg2 = malloc(c * 4), *db2 = malloc(c * 4), *sm = malloc(8 * (size_t)B * c);
	double *xd = malloc(n * 8), *yd = malloc(n * 8), *gd = malloc(c * 8), *bd = malloc(c * 8), worst = 0;
	fill(x, n, -2, 2), fill(g, c, 0.5f, 1.5f), fill(b, c, -1, 1), fill(R, n, -1, 1);
	for (size_t i = 0; i < n; i++)
		xd[i] = x[i];
	for (int i = 0; i < c; i++)
		gd[i] = g[i], bd[i] = b[i];
	groupnorm_forward(y, st, x, g, b, B, c, hw, G);
	gn_ref(yd, xd, gd, bd, R, B, c, hw, G);
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs(y[i] - yd[i]));
	ok(worst < 1e-5, "groupnorm (%d,%d,%d) G %d: each group is (x − μ)/√(σ² + ε)·g + b over its channels (max diff %.2g)",
	   c, B, hw, G, worst);
	groupnorm_backward(dx, dg, db, R, NULL, x, st, g, sm, B, c, hw, G);
	double ex = gn_check(yd, xd, n, dx, xd, gd, bd, R, B, c, hw, G);
	double eg = gn_check(yd, gd, c, dg, xd, gd, bd, R, B, c, hw, G);
	double eb = gn_check(yd, bd, c, db, xd, gd, bd, R, B, c, hw, G);
	ok(ex < 1e-4 && eg < 1e-4 && eb < 1e-4,
	   "groupnorm (%d,%d,%d) G %d: dx, dg, db match finite differences (max rel err %.2g, %.2g, %.2g)", c, B, hw, G,
	   ex, eg, eb);
	memcpy(g2, R, n * 4);
	groupnorm_backward(g2, dg2, db2, g2, NULL, x, st, g, sm, B, c, hw, G);
	int same = !memcmp(g2, dx, n * 4) && !memcmp(dg2, dg, c * 4) && !memcmp(db2, db, c * 4);
	groupnorm_backward(NULL, dg2, db2, R, NULL, x, st, g, sm, B, c, hw, G);
	ok(same && !memcmp(dg2, dg, c * 4) && !memcmp(db2, db, c * 4),
	   "groupnorm: in place (dx = dy), and without dx, the same floats");
	/* fused with a residual add and a ReLU: the bits of the three passes one after another */
	float *y2 = malloc(n * 4), *ry = malloc(n * 4), *d3 = malloc(n * 4), *dg3 = malloc(c * 4), *db3 = malloc(c * 4);
	groupnorm_forward(y, st, x, g, b, B, c, hw, G);
	add_forward(y, R, y, n);
	relu_forward(ry, y, n);
	groupnorm_forward_fused(y2, st, x, g, b, R, 1, B, c, hw, G);
	int fwd = !memcmp(y2, ry, n * 4);
	fill(R, n, -1, 1);
	memcpy(g2, R, n * 4);
	relu_backward(g2, g2, ry, n);
	groupnorm_backward(dx, dg, db, g2, NULL, x, st, g, sm, B, c, hw, G);
	groupnorm_backward(d3, dg3, db3, R, ry, x, st, g, sm, B, c, hw, G);
	ok(fwd && !memcmp(d3, dx, n * 4) && !memcmp(dg3, dg, c * 4) && !memcmp(db3, db, c * 4) &&
		   !memcmp(R, g2, n * 4),
	   "groupnorm fused with the add and the ReLU: the floats of the separate passes, forward and back");
	free(y2), free(ry), free(d3), free(dg3), free(db3), free(sm);
	free(x), free(g), free(b), free(y), free(st), free(R), free(dx), free(dg), free(db);
	free(g2), free(dg2), free(db2), free(xd), free(yd), free(gd), free(bd);
}

/* ---- relu, dropout, dropout2d ---- */
struct ew_ctx {
	int kind; /* 0 relu, 1 dropout, 2 dropout2d */
	size_t n, planes, plane;
	float p, *x, *y, *mask;
	uint64_t seed;
};

static void ew_run(void *c)
{
	struct ew_ctx *d = c;
	struct rng dr;
	rng_seed(&dr, d->seed, 7); /* the same masks on every call */
	if (d->kind == 0)
		relu_forward(d->y, d->x, d->n);
	else if (d->kind == 1)
		dropout_forward(d->y, d->mask, d->x, d->n, d->p, &dr);
	else
		dropout2d_forward(d->y, d->mask, d->x, d->planes, d->plane, d->p, &dr);
}

static void test_elementwise(int kind, const char *name)
{
	struct ew_ctx d = {kind, 300, 12, 25, 0.4f, 0, 0, 0, 99};
	float x[300], y[300], R[300], dx[300], mask[300], g[300];
	d.x = x, d.y = y, d.mask = mask;
	fill_distinct(x, 300);
	fill(R, 300, -1, 1);
	ew_run(&d);
	if (kind == 0)
		relu_backward(dx, R, y, 300);
	else if (kind == 1)
		dropout_backward(dx, R, mask, 300);
	else
		dropout2d_backward(dx, R, mask, 12, 25);
	struct probe p = {ew_run, &d, y, R, 300, 0};
	double ex = probe_check(&p, x, dx, 300, 1);
	ok(ex < BOUND, "%s: dx matches finite differences (max rel err %.2g)", name, ex);
	memcpy(g, R, sizeof g);
	if (kind == 0)
		relu_backward(g, g, y, 300);
	else if (kind == 1)
		dropout_backward(g, g, mask, 300);
	else
		dropout2d_backward(g, g, mask, 12, 25);
	ok(!memcmp(g, dx, sizeof g), "%s: backward in place gives the same dx", name);
}

static void test_dropout_stats(void)
{
	size_t n = 100000, zeros = 0, bad = 0;
	float *x = malloc(n * 4), *y = malloc(n * 4), *mask = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		x[i] = 1;
	dropout_forward(y, mask, x, n, 0.3f, &r);
	for (size_t i = 0; i < n; i++) {
		zeros += y[i] == 0;
		bad += y[i] != 0 && fabsf(y[i] - 1 / 0.7f) > 1e-6f;
	}
	is_near((double)zeros / n, 0.3, 0.01, "dropout: a fraction p of the elements is zeroed");
	ok(!bad, "dropout: kept elements are scaled by 1/(1-p)");
	dropout2d_forward(y, mask, x, 1000, 100, 0.5f, &r);
	bad = zeros = 0;
	for (size_t q = 0; q < 1000; q++) {
		zeros += y[q * 100] == 0;
		for (size_t i = 1; i < 100; i++)
			bad += y[q * 100 + i] != y[q * 100];
	}
	ok(!bad, "dropout2d: a plane is kept or dropped whole");
	is_near((double)zeros / 1000, 0.5, 0.06, "dropout2d: a fraction p of the planes is zeroed");
	free(x), free(y), free(mask);
}

/* ---- flatten ---- */
static void test_flatten(void)
{
	int B = 3, c = 4, hw = 5, good = 1;
	float x[60], y[60], back[60];
	for (int i = 0; i < 60; i++)
		x[i] = (float)i;
	flatten_forward(y, x, B, c, hw);
	for (int b = 0; b < B; b++)
		for (int ch = 0; ch < c; ch++)
			for (int i = 0; i < hw; i++)
				good &= y[(b * c + ch) * hw + i] == x[(ch * B + b) * hw + i];
	ok(good, "flatten: (C,B,HW) → (B,C·HW)");
	flatten_backward(back, y, B, c, hw);
	ok(!memcmp(back, x, sizeof x), "flatten: backward is the inverse permutation");
}

/* ---- log-softmax + NLL ---- */
struct lsm_ctx {
	int B, K;
	float *x, *logp;
	const uint16_t *label;
	double loss;
};

static void lsm_run(void *c)
{
	struct lsm_ctx *d = c;
	d->loss = logsoftmax_nll_forward(d->logp, d->x, d->label, d->B, d->K);
}

static void test_logsoftmax(void)
{
	float x[4 * 6], logp[24], dx[24];
	uint16_t label[4] = {0, 5, 2, 2};
	struct lsm_ctx d = {4, 6, x, logp, label, 0};
	fill(x, 24, -3, 3);
	x[0] = 80; /* large logits must not overflow */
	lsm_run(&d);
	double s = 0;
	for (int k = 0; k < 6; k++)
		s += exp(logp[6 + k]);
	is_near(s, 1.0, 1e-6, "logsoftmax: probabilities sum to 1");
	is_near(logp[0], 0.0, 1e-6, "logsoftmax: a dominant logit has log-probability 0");
	logsoftmax_nll_backward(dx, logp, label, 4, 6, 1.0f / 4);
	/* here L is the mean NLL itself, computed in double */
	double worst = 0;
	for (int i = 0; i < 24; i++) {
		float keep = x[i];
		x[i] = keep + EPS;
		lsm_run(&d);
		double lp = d.loss / 4;
		x[i] = keep - EPS;
		lsm_run(&d);
		double lm = d.loss / 4;
		x[i] = keep;
		double e = relerr((lp - lm) / (2.0 * EPS), dx[i]);
		worst = e > worst ? e : worst;
	}
	ok(worst < 1e-2, "logsoftmax+nll: dx matches finite differences of the mean loss (max rel err %.2g)",
	   worst);
}

int main(void)
{
	bli_thread_set_num_threads(1);
	rng_seed(&r, 1001, 0);
	test_conv(2, 3, 7, 6, 4, 3, 1, 0);
	test_conv(3, 2, 9, 8, 3, 3, 2, 1);
	test_conv(2, 1, 8, 11, 2, 5, 1, 2);
	/* shapes the direct kernels take (ow a multiple of 8): 5 + 2 output channels, odd OH,
	 * kernels narrower and wider than a 5-column tile; each on every path */
	for (int simd = 2; simd >= 0; simd--) {
		int was = conv_direct_simd(simd);
		test_conv(2, 1, 12, 12, 7, 5, 1, 0);
		test_conv(2, 3, 10, 19, 3, 4, 1, 0);
		test_conv(3, 2, 10, 14, 1, 7, 1, 0);
		conv_direct_simd(was);
	}
	test_conv_direct_paths(64, 10, 12, 12, 20, 5); /* the cnn's layers */
	test_conv_direct_paths(64, 1, 28, 28, 10, 5);
	test_conv_direct_paths(3, 2, 10, 14, 3, 7);
	test_conv_direct_paths(2, 7, 9, 19, 4, 4); /* OW = 16: dx through stored rows */
	/* the resnet's convolutions (share/gem/models/resnet.json, and at 32×32×3), then odd shapes:
	 * rows of 7, odd channel counts, a 2×2 kernel, stride 2 without padding, one sample */
	test_conv_pad(3, 1, 28, 28, 16, 3, 1, 1);
	test_conv_pad(3, 16, 28, 28, 16, 3, 1, 1);
	test_conv_pad(3, 16, 28, 28, 32, 3, 2, 1);
	test_conv_pad(3, 16, 28, 28, 32, 1, 2, 0);
	test_conv_pad(3, 32, 14, 14, 32, 3, 1, 1);
	test_conv_pad(3, 32, 14, 14, 64, 3, 2, 1);
	test_conv_pad(3, 32, 14, 14, 64, 1, 2, 0);
	test_conv_pad(3, 64, 7, 7, 64, 3, 1, 1);
	test_conv_pad(2, 3, 32, 32, 16, 3, 1, 1);
	test_conv_pad(2, 16, 32, 32, 32, 3, 2, 1);
	test_conv_pad(2, 32, 16, 16, 64, 1, 2, 0);
	test_conv_pad(3, 5, 7, 7, 7, 3, 2, 1);
	test_conv_pad(2, 3, 9, 11, 5, 3, 1, 1);
	test_conv_pad(3, 7, 7, 7, 3, 1, 2, 0);
	test_conv_pad(2, 5, 7, 7, 9, 1, 1, 0);
	test_conv_pad(2, 3, 8, 13, 6, 2, 1, 1);
	test_conv_pad(2, 3, 9, 9, 5, 3, 2, 0);
	test_conv_pad(1, 2, 5, 6, 3, 3, 2, 2);
	test_pool(3, 6, 18, 2); /* four-at-a-time path and a tail */
	test_pool(2, 5, 11, 2); /* odd height and width */
	test_pool(2, 7, 9, 3);
	test_avgpool(2, 3, 6, 18, 2);
	test_avgpool(1, 2, 7, 9, 3); /* rows and columns past the last whole window */
	test_avgpool(3, 4, 5, 7, 0);
	test_groupnorm(3, 8, 10, 4);
	test_groupnorm(2, 6, 49, 1); /* one group: LayerNorm over (C,H,W) */
	test_groupnorm(2, 5, 9, 5);  /* a group per channel: InstanceNorm */
	test_elementwise(0, "relu");
	test_elementwise(1, "dropout");
	test_elementwise(2, "dropout2d");
	test_dropout_stats();
	test_flatten();
	test_logsoftmax();
	return done_testing();
}
