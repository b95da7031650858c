/* t1008: the sequence layers and the element-wise activations (nn/seq.h). Each backward against central finite differences of
 * its forward, as t1001 does (L = Σ y ⊙ R in double, ε = 1e-2, max relative error < 5e-3 with
 * a floor of 1e-2); forwards against plain double-precision formulas; attention against a
 * T = 3 example worked by hand and a causality check (changing position t+1 changes nothing at
 * positions <= t, bit for bit); and every kernel level giving the same floats. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "nn/layer_ops.h"
#include "nn/matmul.h"
#include "nn/seq.h"
#include "gradcheck-test.h"
#include "tap.h"

static struct rng r;
static float *scratch;

static void fill(float *p, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * rng_float(&r);
}

static float *falloc(size_t n)
{
	return layer_falloc(n, sizeof(float));
}

/* probe_check, then y as at the current inputs again */
static double check(struct probe *p, float *v, const float *grad, size_t n, size_t step)
{
	double worst = probe_check(p, v, grad, n, step);
	p->run(p->ctx);
	return worst;
}

/* ---- embedding, position ---- */
struct emb_ctx {
	int N, V, D, B, T;
	float *ids, *W, *P, *y, *h;
};

static void emb_run(void *c)
{
	struct emb_ctx *e = c;
	embedding_forward(e->h, e->ids, e->W, e->N, e->V, e->D);
	position_forward(e->y, e->h, e->P, e->B, e->T, e->D);
}

static void test_embedding(void)
{
	struct emb_ctx e = {.B = 3, .T = 5, .V = 7, .D = 6};
	e.N = e.B * e.T;
	size_t ny = (size_t)e.N * e.D;
	float ids[15], *R = falloc(ny), *dW = falloc(42), *dP = falloc(30), *dh = falloc(ny);
	e.ids = ids, e.W = falloc(42), e.P = falloc(30), e.y = falloc(ny), e.h = falloc(ny);
	for (int i = 0; i < e.N; i++)
		ids[i] = (float)rng_below(&r, (uint32_t)e.V - 1); /* id V−1 never used: its gradient is 0 */
	fill(e.W, 42, -1, 1), fill(e.P, 30, -1, 1), fill(R, ny, -1, 1);
	emb_run(&e);
	ok(e.y[2 * e.D + 3] == e.W[(int)ids[2] * e.D + 3] + e.P[2 * e.D + 3] &&
		   e.y[(e.T + 1) * e.D] == e.W[(int)ids[e.T + 1] * e.D] + e.P[e.D],
	   "embedding + position: y[b][t] = W[id] + P[t]");
	position_backward(dP, R, e.B, e.T, e.D);
	embedding_backward(dW, R, ids, e.N, e.V, e.D);
	struct probe p = {emb_run, &e, e.y, R, ny, 0};
	double ew = check(&p, e.W, dW, 42, 1), ep = check(&p, e.P, dP, 30, 1);
	ok(ew < BOUND, "embedding: dW matches finite differences (max rel err %.2g)", ew);
	ok(ep < BOUND, "position: dP matches finite differences (max rel err %.2g)", ep);
	int zero = 1;
	for (int d = 0; d < e.D; d++)
		zero &= dW[(e.V - 1) * e.D + d] == 0;
	ok(zero, "embedding: an id not in the batch gets no gradient");
	ids[0] = NAN, ids[1] = -1, ids[2] = (float)e.V;
	embedding_forward(e.h, ids, e.W, 3, e.V, e.D);
	ok(!memcmp(e.h, e.W, sizeof(float) * e.D) && !memcmp(e.h + 2 * e.D, e.W, sizeof(float) * e.D),
	   "embedding: ids outside [0, V) read row 0");
	free(R), free(dW), free(dP), free(dh), free(e.W), free(e.P), free(e.y), free(e.h);
}

/* ---- layernorm ---- */
struct ln_ctx {
	int N, D;
	float *x, *g, *b, *y, *stats;
};

static void ln_run(void *c)
{
	struct ln_ctx *l = c;
	layernorm_forward(l->y, l->stats, l->x, l->g, l->b, l->N, l->D);
}

static void test_layernorm(int N, int D)
{
	struct ln_ctx l = {N, D, falloc((size_t)N * D), falloc(D), falloc(D), falloc((size_t)N * D), falloc(2 * N)};
	size_t n = (size_t)N * D;
	float *R = falloc(n), *dy = falloc(n), *dx = falloc(n), *dg = falloc(D), *db = falloc(D);
	fill(l.x, n, -2, 2), fill(l.g, D, 0.5f, 1.5f), fill(l.b, D, -1, 1), fill(R, n, -1, 1);
	ln_run(&l);
	double mu = 0, var = 0, worst = 0;
	for (int d = 0; d < D; d++)
		mu += l.x[D + d];
	mu /= D;
	for (int d = 0; d < D; d++)
		var += (l.x[D + d] - mu) * (l.x[D + d] - mu);
	var /= D;
	for (int d = 0; d < D; d++)
		worst = fmax(worst, fabs(l.y[D + d] - ((l.x[D + d] - mu) / sqrt(var + 1e-5) * l.g[d] + l.b[d])));
	ok(worst < 1e-5, "layernorm (%d,%d): row 1 is (x − μ)/√(σ² + ε)·g + b (max diff %.2g)", N, D, worst);
	memcpy(dy, R, sizeof(float) * n);
	layernorm_backward(dx, dg, db, dy, l.x, l.stats, l.g, N, D);
	struct probe p = {ln_run, &l, l.y, R, n, 0};
	double ex = check(&p, l.x, dx, n, 1), eg = check(&p, l.g, dg, D, 1), eb = check(&p, l.b, db, D, 1);
	ok(ex < BOUND && eg < BOUND && eb < BOUND,
	   "layernorm (%d,%d): dx, dg, db match finite differences (max rel err %.2g, %.2g, %.2g)", N, D, ex, eg, eb);
	float *dg2 = falloc(D), *db2 = falloc(D);
	memcpy(dy, R, sizeof(float) * n);
	layernorm_backward(dy, dg2, db2, dy, l.x, l.stats, l.g, N, D);
	ok(!memcmp(dy, dx, sizeof(float) * n) && !memcmp(dg2, dg, sizeof(float) * D),
	   "layernorm (%d,%d): in place (dx = dy) gives the same floats", N, D);
	free(l.x), free(l.g), free(l.b), free(l.y), free(l.stats), free(R), free(dy), free(dx), free(dg), free(db);
	free(dg2), free(db2);
}

/* ---- gelu ---- */
struct gelu_ctx {
	size_t n;
	float *x, *y;
};

static void gelu_run(void *c)
{
	struct gelu_ctx *g = c;
	gelu_forward(g->y, g->x, g->n);
}

static void test_gelu(void)
{
	enum { N = 203 };
	struct gelu_ctx g = {N, falloc(N), falloc(N)};
	float *R = falloc(N), *dx = falloc(N);
	double worst = 0;
	fill(g.x, N, -6, 6), fill(R, N, -1, 1);
	g.x[0] = -30, g.x[1] = 30, g.x[2] = 0;
	gelu_run(&g);
	for (int i = 0; i < N; i++) {
		double x = g.x[i], want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
		worst = fmax(worst, fabs(g.y[i] - want) / (fabs(want) + 1e-6));
	}
	ok(worst < 1e-6, "gelu: 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) within %.2g relative (-30..30)", worst);
	gelu_backward(dx, R, g.x, N);
	struct probe p = {gelu_run, &g, g.y, R, N, 0};
	double e = check(&p, g.x, dx, N, 1);
	ok(e < BOUND, "gelu: dx matches finite differences (max rel err %.2g)", e);
	free(g.x), free(g.y), free(R), free(dx);
}

/* ---- tanh, sigmoid ---- */
struct act_ctx {
	int tanh;
	size_t n;
	float *x, *y;
};

static void act_run(void *c)
{
	struct act_ctx *a = c;
	(a->tanh ? tanh_forward : sigmoid_forward)(a->y, a->x, a->n);
}

static void test_activation(int is_tanh)
{
	enum { N = 203 };
	const char *name = is_tanh ? "tanh" : "sigmoid";
	struct act_ctx a = {is_tanh, N, falloc(N), falloc(N)};
	float *R = falloc(N), *dx = falloc(N), *g = falloc(N), *y0 = falloc(N);
	double worst = 0;
	int have = matmul_simd(-1), same = 1;
	fill(a.x, N, -6, 6), fill(R, N, -1, 1);
	a.x[0] = -100, a.x[1] = 100, a.x[2] = 0, a.x[3] = 1e-4f;
	act_run(&a);
	for (int i = 0; i < N; i++) {
		double x = a.x[i], want = is_tanh ? tanh(x) : 1 / (1 + exp(-x));
		worst = fmax(worst, fabs(a.y[i] - want));
	}
	ok(worst < 2e-7, "%s: within %.2g of libm's in double (-100..100)", name, worst);
	(is_tanh ? tanh_backward : sigmoid_backward)(dx, R, a.y, N);
	struct probe p = {act_run, &a, a.y, R, N, 0};
	double e = check(&p, a.x, dx, N, 1);
	ok(e < BOUND, "%s: dx matches finite differences (max rel err %.2g)", name, e);
	memcpy(g, R, sizeof(float) * N);
	(is_tanh ? tanh_backward : sigmoid_backward)(g, g, a.y, N);
	memcpy(y0, a.y, sizeof(float) * N);
	for (int l = 0; l < 3; l++) {
		matmul_simd(l);
		act_run(&a);
		same &= !memcmp(y0, a.y, sizeof(float) * N);
	}
	matmul_simd(have);
	ok(!memcmp(g, dx, sizeof(float) * N) && same, "%s: in place the same dx; every kernel level the same y", name);
	free(a.x), free(a.y), free(R), free(dx), free(g), free(y0);
}

/* ---- dense over rows ---- */
struct dr_ctx {
	int N, in, out;
	float *x, *W, *b, *y;
};

static void dr_run(void *c)
{
	struct dr_ctx *d = c;
	dense_rows_forward(d->y, d->x, d->W, d->b, d->N, d->in, d->out, scratch);
}

static void test_dense_rows(int N, int in, int out)
{
	struct dr_ctx d = {N, in, out, falloc((size_t)N * in), falloc((size_t)out * in), falloc(out),
			   falloc((size_t)N * out)};
	float *R = falloc((size_t)N * out), *dx = falloc((size_t)N * in), *dW = falloc((size_t)out * in);
	float *db = falloc(out);
	fill(d.x, (size_t)N * in, -1, 1), fill(d.W, (size_t)out * in, -1, 1), fill(d.b, out, -1, 1);
	fill(R, (size_t)N * out, -1, 1);
	dr_run(&d);
	double y0 = d.b[out - 1];
	for (int k = 0; k < in; k++)
		y0 += (double)d.x[(size_t)(N - 1) * in + k] * d.W[(size_t)(out - 1) * in + k];
	is_near(d.y[(size_t)N * out - 1], y0, 1e-5 * in, "dense rows %d→%d: the last output is x·W + b", in, out);
	dense_rows_backward(dx, dW, db, R, d.x, d.W, N, in, out, scratch);
	struct probe p = {dr_run, &d, d.y, R, (size_t)N * out, 0};
	double ex = check(&p, d.x, dx, (size_t)N * in, 3), ew = check(&p, d.W, dW, (size_t)out * in, 3);
	double eb = check(&p, d.b, db, out, 1);
	ok(ex < BOUND && ew < BOUND && eb < BOUND,
	   "dense rows %d→%d, %d rows: dx, dW, db match finite differences (%.2g, %.2g, %.2g)", in, out, N, ex, ew, eb);
	free(d.x), free(d.W), free(d.b), free(d.y), free(R), free(dx), free(dW), free(db);
}

/* The mlp's first layer at batch 64 (the flat dense layers take this path too): y, dW and dx
 * against sums in double, within K·ε·Σ|terms| each, and dx = NULL changes nothing else. */
static double worst_of(const float *got, const float *a, long ars, long acs, const float *b, long brs, long bcs,
		       const float *init, int M, int N, int K)
{
	double worst = 0;
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double sum = init ? init[j] : 0, mag = fabs(sum);
			for (int k = 0; k < K; k++) {
				double t = (double)a[i * ars + k * acs] * b[k * brs + j * bcs];
				sum += t, mag += fabs(t);
			}
			double e = fabs(got[(size_t)i * N + j] - sum) / (K * FLT_EPSILON * mag + 1e-30);
			worst = e > worst ? e : worst;
		}
	return worst;
}

static void test_dense_flat(int N, int in, int out)
{
	float *x = falloc((size_t)N * in), *W = falloc((size_t)out * in), *b = falloc(out);
	float *y = falloc((size_t)N * out), *dy = falloc((size_t)N * out), *dx = falloc((size_t)N * in);
	float *dW = falloc((size_t)out * in), *db = falloc(out), *dW2 = falloc((size_t)out * in), *db2 = falloc(out);
	fill(x, (size_t)N * in, -1, 1), fill(W, (size_t)out * in, -1, 1), fill(b, out, -1, 1);
	fill(dy, (size_t)N * out, -1, 1);
	dense_rows_forward(y, x, W, b, N, in, out, scratch);
	dense_rows_backward(dx, dW, db, dy, x, W, N, in, out, scratch);
	double ey = worst_of(y, x, in, 1, W, 1, in, b, N, out, in);
	double ew = worst_of(dW, dy, 1, out, x, in, 1, NULL, out, in, N);
	double ex = worst_of(dx, dy, out, 1, W, in, 1, NULL, N, in, out);
	ok(ey <= 1 && ew <= 1 && ex <= 1, "dense rows %d→%d, %d rows: y, dW, dx within K·ε·Σ|terms| of sums in double "
	   "(%.2g, %.2g, %.2g of it)", in, out, N, ey, ew, ex);
	dense_rows_backward(NULL, dW2, db2, dy, x, W, N, in, out, scratch);
	ok(!memcmp(dW, dW2, sizeof *dW * out * in) && !memcmp(db, db2, sizeof *db * out),
	   "dense rows %d→%d: dx = NULL skips only dx", in, out);
	free(x), free(W), free(b), free(y), free(dy), free(dx), free(dW), free(db), free(dW2), free(db2);
}

/* ---- attention ---- */
struct att_ctx {
	struct attention a;
	int B, T, C, H;
	float *mem, *x, *Wq, *bq, *Wo, *bo, *y;
};

static void att_run(void *c)
{
	struct att_ctx *t = c;
	attention_forward(&t->a, t->y, t->x, t->Wq, t->bq, t->Wo, t->bo, t->B, scratch);
}

static void att_open(struct att_ctx *t, int B, int T, int C, int H)
{
	size_t n = (size_t)B * T * C;
	*t = (struct att_ctx){.B = B, .T = T, .C = C, .H = H};
	t->mem = falloc(attention_size(B, T, C, H));
	attention_bind(&t->a, t->mem, B, T, C, H);
	t->x = falloc(n), t->y = falloc(n), t->Wq = falloc((size_t)3 * C * C), t->bq = falloc((size_t)3 * C);
	t->Wo = falloc((size_t)C * C), t->bo = falloc(C);
}

static void att_close(struct att_ctx *t)
{
	free(t->mem), free(t->x), free(t->y), free(t->Wq), free(t->bq), free(t->Wo), free(t->bo);
}

/* T = 3, C = 2, one head, q = k = v = x and an identity output projection: y_t is the
 * average of x_0..x_t weighted by softmax(x_t·x_s/√2). With x = (1,0), (0,1), (1,1):
 *   y_0 = x_0 = (1, 0);
 *   y_1: scores 0, 1/√2 → weights 1/(1+e^(1/√2)), e^(1/√2)/(1+e^(1/√2)) → (w0, w1);
 *   y_2: scores 1, 1, 2 over √2 → weights a, a, c with a = e^(1/√2)/S, c = e^(√2)/S,
 *        S = 2e^(1/√2) + e^(√2) → (a + c, a + c). */
static void test_attention_by_hand(void)
{
	struct att_ctx t;
	att_open(&t, 1, 3, 2, 1);
	static const float x[6] = {1, 0, 0, 1, 1, 1};
	memcpy(t.x, x, sizeof x);
	memset(t.Wq, 0, sizeof(float) * 12), memset(t.bq, 0, sizeof(float) * 6);
	memset(t.Wo, 0, sizeof(float) * 4), memset(t.bo, 0, sizeof(float) * 2);
	for (int k = 0; k < 3; k++) /* q, k and v rows of Wqkv: identities */
		t.Wq[(2 * k) * 2 + 0] = 1, t.Wq[(2 * k + 1) * 2 + 1] = 1;
	t.Wo[0] = t.Wo[3] = 1;
	att_run(&t);
	double e = exp(1 / sqrt(2.0)), w1 = e / (1 + e), S = 2 * e + exp(sqrt(2.0)), ac = (e + exp(sqrt(2.0))) / S;
	double want[6] = {1, 0, 1 - w1, w1, ac, ac}, worst = 0;
	for (int i = 0; i < 6; i++)
		worst = fmax(worst, fabs(t.y[i] - want[i]));
	ok(worst < 1e-6, "attention, T = 3 by hand: y = (1,0), (%.5f,%.5f), (%.5f,%.5f) (max diff %.2g)", 1 - w1, w1,
	   ac, ac, worst);
	ok(t.a.P[1] == 0 && t.a.P[2] == 0 && t.a.P[5] == 0, "attention: no weight on later positions");
	att_close(&t);
}

static void test_attention(int B, int T, int C, int H)
{
	struct att_ctx t;
	size_t n = (size_t)B * T * C;
	att_open(&t, B, T, C, H);
	fill(t.x, n, -1, 1), fill(t.Wq, (size_t)3 * C * C, -0.5f, 0.5f), fill(t.bq, (size_t)3 * C, -0.5f, 0.5f);
	fill(t.Wo, (size_t)C * C, -0.5f, 0.5f), fill(t.bo, C, -0.5f, 0.5f);
	float *R = falloc(n), *dx = falloc(n), *dWq = falloc((size_t)3 * C * C), *dbq = falloc((size_t)3 * C);
	float *dWo = falloc((size_t)C * C), *dbo = falloc(C), *y0 = falloc(n);
	fill(R, n, -1, 1);
	att_run(&t);
	attention_backward(&t.a, dx, dWq, dbq, dWo, dbo, R, t.x, t.Wq, t.Wo, B, scratch);
	struct probe p = {att_run, &t, t.y, R, n, 0};
	double ex = check(&p, t.x, dx, n, 1), ewq = check(&p, t.Wq, dWq, (size_t)3 * C * C, 1);
	double ebq = check(&p, t.bq, dbq, (size_t)3 * C, 1), ewo = check(&p, t.Wo, dWo, (size_t)C * C, 1);
	double ebo = check(&p, t.bo, dbo, C, 1);
	ok(ex < BOUND && ewq < BOUND && ebq < BOUND && ewo < BOUND && ebo < BOUND,
	   "attention B %d T %d C %d H %d: dx, dW, db, dWout, dbout match finite differences (%.2g %.2g %.2g %.2g "
	   "%.2g)", B, T, C, H, ex, ewq, ebq, ewo, ebo);
	/* causality: a new token at t+1 leaves every output at positions <= t as it was */
	int causal = 1;
	for (int t1 = 1; t1 < T; t1++) {
		memcpy(y0, t.y, sizeof(float) * n);
		for (int c = 0; c < C; c++)
			t.x[(size_t)t1 * C + c] += 0.75f;
		att_run(&t);
		causal &= !memcmp(y0, t.y, sizeof(float) * t1 * C) && memcmp(y0, t.y, sizeof(float) * (t1 + 1) * C);
	}
	ok(causal, "attention T %d: changing position t+1 changes no output at positions <= t, and changes t+1", T);
	free(R), free(dx), free(dWq), free(dbq), free(dWo), free(dbo), free(y0);
	att_close(&t);
}

/* Every kernel level (nn/matmul.h's, which the passes follow) gives the same floats. */
static void test_levels(void)
{
	enum { B = 2, T = 37, C = 48, H = 3 };
	size_t n = (size_t)B * T * C;
	struct att_ctx t[3];
	float *g[3], *y[3], *st[3], *dx[3], *dW[3], *db[3], *dWo[3], *dbo[3], *R = falloc(n);
	int have = matmul_simd(-1), same = 1;
	fill(R, n, -1, 1);
	for (int l = 0; l < 3; l++) {
		struct rng keep = r;
		matmul_simd(l);
		att_open(&t[l], B, T, C, H);
		fill(t[l].x, n, -1, 1), fill(t[l].Wq, (size_t)3 * C * C, -0.5f, 0.5f);
		fill(t[l].bq, (size_t)3 * C, -0.5f, 0.5f), fill(t[l].Wo, (size_t)C * C, -0.5f, 0.5f);
		fill(t[l].bo, C, -0.5f, 0.5f);
		r = keep;
		g[l] = falloc(n), y[l] = falloc(n), st[l] = falloc(2 * B * T), dx[l] = falloc(n);
		dW[l] = falloc((size_t)3 * C * C), db[l] = falloc((size_t)3 * C), dWo[l] = falloc((size_t)C * C);
		dbo[l] = falloc(C);
		att_run(&t[l]);
		attention_backward(&t[l].a, dx[l], dW[l], db[l], dWo[l], dbo[l], R, t[l].x, t[l].Wq, t[l].Wo, B, scratch);
		gelu_forward(g[l], t[l].y, n);
		gelu_backward(g[l], g[l], t[l].y, n);
		layernorm_forward(y[l], st[l], g[l], t[l].Wo, t[l].bo, B * T, C);
		layernorm_backward(g[l], dWo[l], dbo[l], g[l], y[l], st[l], t[l].Wo, B * T, C);
	}
	for (int l = 1; l < 3; l++)
		same &= !memcmp(t[l].y, t[0].y, sizeof(float) * n) && !memcmp(dx[l], dx[0], sizeof(float) * n) &&
			!memcmp(dW[l], dW[0], sizeof(float) * 3 * C * C) && !memcmp(g[l], g[0], sizeof(float) * n) &&
			!memcmp(y[l], y[0], sizeof(float) * n) && !memcmp(dWo[l], dWo[0], sizeof(float) * C * C);
	ok(same, "attention, gelu, layernorm: every kernel level gives the same floats");
	matmul_simd(have);
	for (int l = 0; l < 3; l++) {
		att_close(&t[l]);
		free(g[l]), free(y[l]), free(st[l]), free(dx[l]), free(dW[l]), free(db[l]), free(dWo[l]), free(dbo[l]);
	}
	free(R);
}

int main(void)
{
	rng_seed(&r, 11, 11);
	scratch = falloc(matmul_scratch_size());
	test_embedding();
	test_layernorm(3, 16);
	test_layernorm(5, 37);
	test_gelu();
	test_activation(1);
	test_activation(0);
	test_dense_rows(7, 5, 9);
	test_dense_rows(40, 33, 17);
	test_dense_flat(64, 784, 256);
	test_dense_flat(13, 37, 9);
	test_attention_by_hand();
	test_attention(2, 5, 4, 1);
	test_attention(2, 7, 12, 3);
	test_attention(1, 19, 8, 2);
	test_levels();
	free(scratch);
	return done_testing();
}
