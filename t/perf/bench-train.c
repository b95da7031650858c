/* bench-train: how fast the training kernels run on one thread. Prints TSV on stdout: BLIS's
 * sgemm GFLOP/s for the shapes the mlp layers use and the cnn's would under im2col, the direct
 * conv kernels' GFLOP/s on the cnn's two conv layers, nn/matmul's on the dense layers' and the
 * gpt's products (the layers run on it), then training samples/s at batch 64 and evaluation
 * samples/s at batch 1000 for share/gem/models/{mlp,cnn,resnet}.json, and training and
 * evaluation tokens/s at batch 32 (windows of 128 bytes) for gpt.json (found via $GEM_SRC, else
 * the current directory). Rates are per second of the thread's CPU time (one BLIS thread),
 * after a first step (its page faults) that is not counted. Beside each model figure: the
 * fraction of this core's FMA peak it reaches (FLOPs per sample, or per token, counted from the
 * spec: 2 per multiply-add of the dense, conv2d and attention layers (attention's products over
 * all T positions, as if not causal), forward, and for training dW and dx where a lower layer
 * has parameters: 5.7 M per token for gpt; the peak measured by an 8-wide FMA loop first; a
 * 16-wide loop's is printed too, on CPUs with AVX-512) and the ratio to the same figure in
 * $GEM_BENCH_LAST (a TSV this program rewrites; make bench keeps it in
 * build/rel/bench-last.tsv).
 * Usage: bench-train [CPU seconds per model figure, default 2 [model [threads [micro]]]]: with a
 * model name (mlp, cnn, resnet, gpt) or a spec file's path (with a '/'), only that model's
 * figures, for a profiler (the last-run file is then left alone); with threads T given, the
 * kernels run on T threads (nn/layers.h) and the rates are per second of wall-clock time, which
 * other jobs on a shared machine slow down; with micro G, training steps cut their batch into G
 * micro-batches (model_set_micro: up to G threads each train one whole). */
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "base/err.h"
#include "base/prog.h"
#include "nn/conv_direct.h"
#include "nn/layer_ops.h"
#include "nn/layers.h"
#include "nn/matmul.h"
#include "nn/model.h"
#include "nn/pool.h"
#include "base/rng.h"

/* CPU time of this thread: other jobs on a shared machine slow the wall clock, not this. With
 * a thread count given, the wall clock. */
static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static double now(void)
{
	struct timespec ts;
	clock_gettime(clock_id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The FMA peak, FLOP/s: 12 independent 8-wide FMA chains (enough to cover the latency). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static double fma_peak_avx2(double secs)
{
	__m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
	long reps = 0;
	double t0 = now(), t;
	for (int i = 0; i < 12; i++)
		acc[i] = _mm256_set1_ps((float)i);
	do {
		for (int r = 0; r < 100000; r++)
#pragma GCC unroll 12
			for (int i = 0; i < 12; i++)
				acc[i] = _mm256_fmadd_ps(acc[i], m, a);
		reps += 100000;
		t = now() - t0;
	} while (t < secs);
	float sink = 0, lane[8];
	for (int i = 0; i < 12; i++) {
		_mm256_storeu_ps(lane, acc[i]);
		sink += lane[0];
	}
	if (sink == 42.0f)
		fprintf(stderr, "bench-train: %g\n", (double)sink);
	return 12.0 * 8 * 2 * reps / t;
}

/* The same with 16-wide AVX-512 registers. */
__attribute__((target("avx2,fma,avx512f"))) static double fma_peak_avx512(double secs)
{
	__m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
	long reps = 0;
	double t0 = now(), t;
	for (int i = 0; i < 12; i++)
		acc[i] = _mm512_set1_ps((float)i);
	do {
		for (int r = 0; r < 100000; r++)
#pragma GCC unroll 12
			for (int i = 0; i < 12; i++)
				acc[i] = _mm512_fmadd_ps(acc[i], m, a);
		reps += 100000;
		t = now() - t0;
	} while (t < secs);
	float sink = 0;
	for (int i = 0; i < 12; i++)
		sink += _mm512_reduce_add_ps(acc[i]);
	if (sink == 42.0f)
		fprintf(stderr, "bench-train: %g\n", (double)sink);
	return 12.0 * 16 * 2 * reps / t;
}
#endif

static double fma_peak16(double secs)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx512f"))
		return fma_peak_avx512(secs);
#endif
	(void)secs;
	return 0;
}

static double fma_peak(double secs)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return fma_peak_avx2(secs);
#endif
	(void)secs;
	return 0;
}

/* A spec's shapes as its layers go: c features (channels) of h × w, or of each of T positions. */
struct flops {
	long c, h, w, T;
	double fwd, bwd;
	int params_below;
};

/* Add the FLOPs of the layers of a "layers" array to f. */
static void layers_flops(const json_t *layers, struct flops *f)
{
	json_t *l, *v;
	size_t i;
	json_array_foreach(layers, i, l) {
		const char *type = json_string_value(json_object_get(l, "type"));
		double macs = 0;
		int params = 0;
		if (!strcmp(type, "dense")) {
			long out = json_integer_value(json_object_get(l, "out"));
			macs = (double)f->c * f->h * f->w * f->T * out;
			f->c = out, f->h = f->w = 1;
		} else if (!strcmp(type, "conv2d")) {
			long out = json_integer_value(json_object_get(l, "out"));
			long k = json_integer_value(json_object_get(l, "kernel")), st = 1, pad = 0;
			if ((v = json_object_get(l, "stride")))
				st = json_integer_value(v);
			if ((v = json_object_get(l, "padding")))
				pad = json_integer_value(v);
			long oh = (f->h + 2 * pad - k) / st + 1, ow = (f->w + 2 * pad - k) / st + 1;
			macs = (double)out * f->c * k * k * oh * ow;
			f->c = out, f->h = oh, f->w = ow;
		} else if (!strcmp(type, "maxpool2d") || !strcmp(type, "avgpool2d")) {
			long k = (v = json_object_get(l, "size")) ? json_integer_value(v) : 2;
			f->h /= k, f->w /= k;
		} else if (!strcmp(type, "globalavgpool")) {
			f->h = f->w = 1;
		} else if (!strcmp(type, "embedding")) { /* T token ids → (T, dim) */
			f->T = f->c, f->c = json_integer_value(json_object_get(l, "dim"));
			params = 1;
		} else if (!strcmp(type, "position") || !strcmp(type, "layernorm") || !strcmp(type, "groupnorm")) {
			params = 1;
		} else if (!strcmp(type, "attention")) { /* q, k, v and out projections; q·kᵀ, p·v */
			macs = (double)f->T * 4 * f->c * f->c + 2.0 * f->T * f->T * f->c;
		} else if (!strcmp(type, "residual")) { /* the shortcut's from the block's input */
			struct flops s = *f;
			s.fwd = s.bwd = 0;
			if ((v = json_object_get(l, "shortcut")))
				layers_flops(v, &s);
			layers_flops(json_object_get(l, "layers"), f);
			f->fwd += s.fwd, f->bwd += s.bwd;
			f->params_below |= s.params_below;
		} else if (!strcmp(type, "flatten")) {
			f->c *= f->h * f->w * f->T, f->h = f->w = f->T = 1;
		}
		f->fwd += 2 * macs;
		f->bwd += 2 * macs * (f->params_below ? 2 : 1);
		f->params_below |= macs > 0 || params;
	}
}

/* FLOPs per sample of a model spec: forward (train 0), or forward + backward (train 1). */
static double spec_flops(const json_t *spec, int train)
{
	json_t *in = json_object_get(spec, "input");
	struct flops f = {json_integer_value(json_array_get(in, 0)), 1, 1, 1, 0, 0, 0};
	if (json_array_size(in) == 3)
		f.h = json_integer_value(json_array_get(in, 1)), f.w = json_integer_value(json_array_get(in, 2));
	layers_flops(json_object_get(spec, "layers"), &f);
	return train ? f.fwd + f.bwd : f.fwd;
}

/* The figures of the last run ($GEM_BENCH_LAST: "what<TAB>shape<TAB>value" lines) and of this one. */
#define MAX_FIGS 32
static struct fig {
	char key[96];
	double v;
} last[MAX_FIGS], cur[MAX_FIGS];
static int nlast, ncur;

static void load_last(void)
{
	const char *path = getenv("GEM_BENCH_LAST");
	char line[sizeof last[0].key + 32];
	FILE *f = path ? fopen(path, "r") : NULL;
	while (f && nlast < MAX_FIGS && fgets(line, sizeof line, f)) {
		char *tab = strrchr(line, '\t');
		if (!tab)
			continue;
		*tab = 0;
		snprintf(last[nlast].key, sizeof last[nlast].key, "%.95s", line);
		last[nlast++].v = atof(tab + 1);
	}
	if (f)
		fclose(f);
}

static void save_cur(void)
{
	const char *path = getenv("GEM_BENCH_LAST");
	FILE *f = path ? fopen(path, "w") : NULL;
	for (int i = 0; f && i < ncur; i++)
		fprintf(f, "%s\t%.6g\n", cur[i].key, cur[i].v);
	if (f)
		fclose(f);
}

/* Print one model figure: value, fraction of peak (flops per sample), ratio to the last run. */
static void report(const char *what, const char *shape, double v, const char *unit, double flops, double peak)
{
	char key[96], ratio[32] = "-", frac[32] = "-";
	snprintf(key, sizeof key, "%s\t%s", what, shape);
	for (int i = 0; i < nlast; i++)
		if (!strcmp(last[i].key, key) && last[i].v > 0)
			snprintf(ratio, sizeof ratio, "%.2fx", v / last[i].v);
	if (peak > 0)
		snprintf(frac, sizeof frac, "%.1f%%", 100 * v * flops / peak);
	printf("%s\t%.0f\t%s/s\t%s\t%s\n", key, v, unit, frac, ratio);
	if (ncur < MAX_FIGS) {
		snprintf(cur[ncur].key, sizeof cur[ncur].key, "%s", key);
		cur[ncur++].v = v;
	}
}

static void fill(float *p, size_t n, struct rng *r)
{
	for (size_t i = 0; i < n; i++)
		p[i] = rng_float(r) - 0.5f;
}

/* C (m,n) row-major = A · B, where A is (m,k) or, if ta, stored (k,m); same for B with tb. */
static void bench_gemm(const char *what, int m, int n, int k, int ta, int tb, double secs, struct rng *r)
{
	float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
	float *c = malloc(sizeof(float) * m * n), one = 1, zero = 0;
	long reps = 0;
	double t0, t;
	fill(a, (size_t)m * k, r);
	fill(b, (size_t)k * n, r);
	t0 = now();
	do {
		for (int i = 0; i < 10; i++)
			bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, ta ? 1 : k, ta ? m : 1, b,
				  tb ? 1 : n, tb ? k : 1, &zero, c, n, 1);
		reps += 10;
		t = now() - t0;
	} while (t < secs);
	printf("sgemm\t%s %dx%dx%d%s%s\t%.1f\tGFLOP/s\n", what, m, k, n, ta ? " Aᵀ" : "", tb ? " Bᵀ" : "",
	       2.0 * m * n * k * reps / t * 1e-9);
	free(a);
	free(b);
	free(c);
}

/* GFLOP/s of nn/conv_direct.h's kernels (what the cnn's conv layers run) at batch B. */
static void bench_direct(const char *what, int B, int c, int hw, int oc, int k, double secs, struct rng *r)
{
	struct conv2d_shape s;
	conv2d_shape_init(&s, c, hw, hw, oc, k, 1, 0);
	size_t nx = (size_t)c * B * hw * hw, ny = (size_t)oc * B * s.oh * s.ow, nw = (size_t)oc * c * k * k;
	float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *W = malloc(sizeof(float) * nw);
	float *b = malloc(sizeof(float) * oc), *dW = malloc(sizeof(float) * nw), *dx = malloc(sizeof(float) * nx);
	double flops = 2.0 * ny * c * k * k;
	fill(x, nx, r), fill(y, ny, r), fill(W, nw, r), fill(b, (size_t)oc, r);
	for (int kind = 0; kind < (c > 1 ? 3 : 2); kind++) { /* the first layer needs no dx */
		long reps = 0;
		double t0 = now(), t;
		do {
			if (kind == 0)
				conv_direct_forward(y, x, W, b, B, &s);
			else if (kind == 1)
				conv_direct_dW(dW, y, x, B, &s);
			else
				conv_direct_dx(dx, y, W, B, &s);
			reps++;
			t = now() - t0;
		} while (t < secs);
		printf("direct\t%s %s, batch %d\t%.1f\tGFLOP/s\n", what, kind == 0 ? "fwd" : kind == 1 ? "dW" : "dx", B,
		       flops * reps / t * 1e-9);
	}
	free(x), free(y), free(W), free(b), free(dW), free(dx);
}

/* GFLOP/s of nn/matmul.h's kernels on C (M,N) = A (M,K)·B (K,N), B given transposed if tb
 * (x·Wᵀ), A if ta (dyᵀ·x), in the causal part tri (as the gpt's layers call them). */
static void bench_matmul(const char *what, int M, int N, int K, int ta, int tb, enum matmul_tri tri, double secs,
			 struct rng *r)
{
	float *a = layer_falloc((size_t)M * K, 4), *b = layer_falloc((size_t)K * N, 4);
	float *c = layer_falloc((size_t)M * N, 4), *scratch = layer_falloc(matmul_scratch_size(), 4);
	struct mat A = {a, ta ? 1 : K, ta ? M : 1}, B = {b, tb ? 1 : N, tb ? K : 1};
	long reps = 0;
	double t0, t;
	fill(a, (size_t)M * K, r);
	fill(b, (size_t)K * N, r);
	t0 = now();
	do {
		matmul(c, N, A, B, M, N, K, MATMUL_ZERO, NULL, tri, scratch);
		reps++;
		t = now() - t0;
	} while (t < secs);
	printf("matmul\t%s %dx%dx%d%s%s\t%.1f\tGFLOP/s\n", what, M, K, N, ta ? " Aᵀ" : "", tb ? " Bᵀ" : "",
	       2.0 * M * N * K * reps / t * 1e-9);
	free(a), free(b), free(c), free(scratch);
}

static int bench_model(const char *name, double secs, double peak, int micro, struct rng *r)
{
	char path[4096], err[GEM_ERRMAX], label[40];
	const char *src = getenv("GEM_SRC");
	struct model *m;
	json_t *spec;
	if (strchr(name, '/')) { /* a spec file's path: the figures named after the file */
		snprintf(path, sizeof path, "%s", name);
		const char *base = strrchr(name, '/') + 1;
		snprintf(label, sizeof label, "%.*s", (int)strcspn(base, ".") % 40, base);
		name = label;
	} else {
		snprintf(path, sizeof path, "%s/share/gem/models/%s.json", src ? src : ".", name);
	}
	if (model_from_file(path, &spec, &m, err) < 0) {
		fprintf(stderr, "bench-train: %s\n", err);
		return -1;
	}
	/* a sequence model: batches of 32 windows, rates in tokens (its labels per sample) */
	int L = model_labels(m), B = L > 1 ? 32 : 64, E = L > 1 ? 32 : 1000, K = model_classes(m);
	const char *unit = L > 1 ? "tokens" : "samples";
	if (model_set_micro(m, micro, err) < 0 || model_reserve(m, E > B ? E : B, err) < 0) {
		fprintf(stderr, "bench-train: %s\n", err);
		return -1;
	}
	int S = E > 4 * B ? E : 4 * B; /* samples to draw batches from */
	size_t in = model_input_size(m);
	float *x = layer_falloc(in * S, sizeof *x);
	uint16_t *y = malloc((size_t)S * L * sizeof *y);
	if (L > 1)
		for (size_t i = 0; i < in * S; i++)
			x[i] = (float)rng_below(r, (uint32_t)K);
	else
		fill(x, in * S, r);
	for (int i = 0; i < S * L; i++)
		y[i] = (uint8_t)rng_below(r, (uint32_t)K);
	model_init_params(m, 1);
	long steps = 0, correct = 0;
	float loss = model_train_step(m, x, y, B, r); /* the first step's page faults: not counted */
	double t0 = now(), t;
	do {
		/* different slices of x so the batch is not always hot in cache */
		int off = (int)(steps % (S / B)) * B;
		loss += model_train_step(m, x + (size_t)off * in, y + (size_t)off * L, B, r);
		steps++;
		t = now() - t0;
	} while (t < secs);
	char shape[64];
	snprintf(shape, sizeof shape, "%s batch %d", name, B);
	report("train", shape, (double)steps * B * L / t, unit, spec_flops(spec, 1) / L, peak);
	long evals = 0;
	double sum = model_evaluate(m, x, y, E, &correct, NULL);
	t0 = now();
	do {
		sum += model_evaluate(m, x, y, E, &correct, NULL);
		evals++;
		t = now() - t0;
	} while (t < secs);
	snprintf(shape, sizeof shape, "%s batch %d", name, E);
	report("eval", shape, (double)evals * E * L / t, unit, spec_flops(spec, 0) / L, peak);
	fprintf(stderr, "bench-train: %s: %zu parameters, mean loss %.3f (%.3f in eval)\n", name,
		model_nparams(m), (double)loss / (steps + 1), sum / ((double)(evals + 1) * E * L));
	free(x);
	free(y);
	json_decref(spec);
	model_free(m);
	return 0;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	struct rng r;
	int rc = 0;
	int threads = argc > 3 ? atoi(argv[3]) : 1, micro = argc > 4 ? atoi(argv[4]) : 1;
	if (!(secs > 0) || argc > 5 || threads < 1 || threads > 64 || micro < 1 || micro > MODEL_MAX_MICRO) {
		fprintf(stderr, "usage: bench-train [seconds [model [threads 1..64 [micro-batches 1..64]]]]\n");
		return 2;
	}
	prog_blas_init();
	rng_seed(&r, 42, 0);
	if (argc >= 3) {
		if (argc > 3) {
			/* BENCH_POOL_SPIN: the pool's polls before it sleeps (doc/results/resnet-speed.md
			 * measured the default with it) */
			if (getenv("BENCH_POOL_SPIN"))
				pool_set_spin(atol(getenv("BENCH_POOL_SPIN")));
			layers_set_threads(threads);
			clock_id = CLOCK_MONOTONIC;
		}
		return bench_model(argv[2], secs, fma_peak(secs / 4), micro, &r) < 0;
	}
	double peak = fma_peak(secs / 4), peak16 = fma_peak16(secs / 4);
	load_last();
	printf("# what\tshape\tvalue\tunit\tof FMA peak\tvs last run\n");
	printf("# BLIS kernels: %s\n", prog_blas_kernels());
	printf("peak\tFMA loop, 8-wide\t%.1f\tGFLOP/s\n", peak * 1e-9);
	if (peak16 > 0)
		printf("peak\tFMA loop, 16-wide (AVX-512; not the fractions' peak)\t%.1f\tGFLOP/s\n", peak16 * 1e-9);
	double gs = secs / 4;
	bench_gemm("mlp dense0 fwd", 64, 256, 784, 0, 1, gs, &r);
	bench_gemm("mlp dense0 dW", 256, 784, 64, 1, 0, gs, &r);
	bench_gemm("cnn conv0 fwd", 10, 36864, 25, 0, 0, gs, &r);
	bench_gemm("cnn conv0 dW", 10, 25, 36864, 0, 1, gs, &r);
	bench_gemm("cnn conv3 fwd", 20, 4096, 250, 0, 0, gs, &r);
	bench_gemm("cnn conv3 dW", 20, 250, 4096, 0, 1, gs, &r);
	bench_gemm("cnn conv3 dcol", 250, 4096, 20, 1, 0, gs, &r);
	bench_gemm("cnn dense8 fwd", 64, 300, 320, 0, 1, gs, &r);
	bench_gemm("square", 512, 512, 512, 0, 0, gs, &r);
	bench_direct("cnn conv0 1x28x28→10 k5", 64, 1, 28, 10, 5, gs, &r);
	bench_direct("cnn conv3 10x12x12→20 k5", 64, 10, 12, 20, 5, gs, &r);
	/* the dense layers' products as nn/layer_ops.c runs them */
	bench_matmul("mlp dense0 fwd", 64, 256, 784, 0, 1, MATMUL_FULL, gs, &r);
	bench_matmul("mlp dense0 dW", 256, 784, 64, 1, 0, MATMUL_FULL, gs, &r);
	bench_matmul("cnn dense8 fwd", 64, 300, 320, 0, 1, MATMUL_FULL, gs, &r);
	bench_matmul("gpt qkv fwd", 4096, 384, 128, 0, 1, MATMUL_FULL, gs, &r);
	bench_matmul("gpt mlp fwd", 4096, 512, 128, 0, 1, MATMUL_FULL, gs, &r);
	bench_matmul("gpt mlp dx", 4096, 128, 512, 0, 0, MATMUL_FULL, gs, &r);
	bench_matmul("gpt mlp dW", 512, 128, 4096, 1, 0, MATMUL_FULL, gs, &r);
	bench_matmul("gpt q·kᵀ, causal", 128, 128, 32, 0, 1, MATMUL_C_LOWER, gs, &r);
	bench_matmul("gpt p·v, causal", 128, 32, 128, 0, 0, MATMUL_A_LOWER, gs, &r);
	bench_matmul("square", 512, 512, 512, 0, 0, MATMUL_FULL, gs, &r);
	rc |= bench_model("mlp", secs, peak, 1, &r);
	rc |= bench_model("cnn", secs, peak, 1, &r);
	rc |= bench_model("resnet", secs, peak, 1, &r);
	rc |= bench_model("gpt", secs, peak, 1, &r);
	if (!rc)
		save_cur();
	return rc ? 1 : 0;
}
