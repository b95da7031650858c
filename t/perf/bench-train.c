/* bench-train: how fast the training kernels run on one thread. Prints TSV on stdout:
 * sgemm GFLOP/s for the shapes the mlp layers use and the cnn's would under im2col, the
 * direct conv kernels' GFLOP/s on the cnn's two conv layers, then training samples/s at batch
 * 64 and evaluation samples/s at batch 1000 for share/gem/models/{mlp,cnn}.json (found via
 * $GEM_SRC, else the current directory). Rates are per second of the thread's CPU time (one
 * BLIS thread). Beside each model figure: the fraction of this core's FMA peak it reaches
 * (FLOPs per sample counted from the spec: 2 per multiply-add of the dense and conv2d layers,
 * forward, and for training dW and dx where a lower layer has parameters; the peak measured
 * by an 8-wide FMA loop first) and the ratio to the same figure in $GEM_BENCH_LAST (a TSV this
 * program rewrites; make bench keeps it in build/rel/bench-last.tsv).
 * Usage: bench-train [CPU seconds per model figure, default 2 [model [threads]]]: with a model
 * name (mlp, cnn), only that model's figures, for a profiler (the last-run file is then left
 * alone); with threads T given, the kernels run on T threads (nn/layers.h) and the rates are
 * per second of wall-clock time, which other jobs on a shared machine slow down. */
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "base/err.h"
#include "nn/conv_direct.h"
#include "nn/layers.h"
#include "nn/model.h"
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
#endif

static double fma_peak(double secs)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return fma_peak_avx2(secs);
#endif
	(void)secs;
	return 0;
}

/* FLOPs per sample of a model spec: forward (train 0), or forward + backward (train 1). */
static double spec_flops(const json_t *spec, int train)
{
	json_t *in = json_object_get(spec, "input"), *layers = json_object_get(spec, "layers"), *l;
	long c = json_integer_value(json_array_get(in, 0)), h = 1, w = 1;
	double fwd = 0, bwd = 0;
	int params_below = 0;
	size_t i;
	if (json_array_size(in) == 3)
		h = json_integer_value(json_array_get(in, 1)), w = json_integer_value(json_array_get(in, 2));
	json_array_foreach(layers, i, l) {
		const char *type = json_string_value(json_object_get(l, "type"));
		json_t *v;
		double macs = 0;
		if (!strcmp(type, "dense")) {
			long out = json_integer_value(json_object_get(l, "out"));
			macs = (double)c * h * w * out;
			c = out, h = w = 1;
		} else if (!strcmp(type, "conv2d")) {
			long out = json_integer_value(json_object_get(l, "out"));
			long k = json_integer_value(json_object_get(l, "kernel")), st = 1, pad = 0;
			if ((v = json_object_get(l, "stride")))
				st = json_integer_value(v);
			if ((v = json_object_get(l, "padding")))
				pad = json_integer_value(v);
			long oh = (h + 2 * pad - k) / st + 1, ow = (w + 2 * pad - k) / st + 1;
			macs = (double)out * c * k * k * oh * ow;
			c = out, h = oh, w = ow;
		} else if (!strcmp(type, "maxpool2d")) {
			long k = (v = json_object_get(l, "size")) ? json_integer_value(v) : 2;
			h /= k, w /= k;
		}
		fwd += 2 * macs;
		bwd += 2 * macs * (params_below ? 2 : 1);
		params_below |= macs > 0;
	}
	return train ? fwd + bwd : fwd;
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
static void report(const char *what, const char *shape, double v, double flops, double peak)
{
	char key[96], ratio[32] = "-", frac[32] = "-";
	snprintf(key, sizeof key, "%s\t%s", what, shape);
	for (int i = 0; i < nlast; i++)
		if (!strcmp(last[i].key, key) && last[i].v > 0)
			snprintf(ratio, sizeof ratio, "%.2fx", v / last[i].v);
	if (peak > 0)
		snprintf(frac, sizeof frac, "%.1f%%", 100 * v * flops / peak);
	printf("%s\t%.0f\tsamples/s\t%s\t%s\n", key, v, frac, ratio);
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

static int bench_model(const char *name, double secs, double peak, struct rng *r)
{
	char path[4096], err[GEM_ERRMAX];
	const char *src = getenv("GEM_SRC");
	struct model *m;
	json_t *spec;
	int B = 64, E = 1000;
	snprintf(path, sizeof path, "%s/share/gem/models/%s.json", src ? src : ".", name);
	if (model_from_file(path, &spec, &m, err) < 0 || model_reserve(m, E, err) < 0) {
		fprintf(stderr, "bench-train: %s\n", err);
		return -1;
	}
	size_t in = model_input_size(m);
	float *x = malloc(sizeof(float) * in * E);
	uint8_t *y = malloc(E);
	fill(x, in * E, r);
	for (int i = 0; i < E; i++)
		y[i] = (uint8_t)rng_below(r, (uint32_t)model_classes(m));
	model_init_params(m, 1);
	long steps = 0, correct = 0;
	double t0 = now(), t;
	float loss = 0;
	do {
		/* different slices of x so the batch is not always hot in cache */
		int off = (int)(steps % (E / B)) * B;
		loss += model_train_step(m, x + (size_t)off * in, y + off, B, r);
		steps++;
		t = now() - t0;
	} while (t < secs);
	char shape[64];
	snprintf(shape, sizeof shape, "%s batch %d", name, B);
	report("train", shape, (double)steps * B / t, spec_flops(spec, 1), peak);
	long evals = 0;
	double sum = 0;
	t0 = now();
	do {
		sum += model_evaluate(m, x, y, E, &correct, NULL);
		evals++;
		t = now() - t0;
	} while (t < secs);
	snprintf(shape, sizeof shape, "%s batch %d", name, E);
	report("eval", shape, (double)evals * E / t, spec_flops(spec, 0), peak);
	fprintf(stderr, "bench-train: %s: %zu parameters, mean loss %.3f (%.3f in eval)\n", name,
		model_nparams(m), (double)loss / steps, sum / ((double)evals * E));
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
	int threads = argc > 3 ? atoi(argv[3]) : 1;
	if (!(secs > 0) || argc > 4 || threads < 1 || threads > 64) {
		fprintf(stderr, "usage: bench-train [seconds [model [threads 1..64]]]\n");
		return 2;
	}
	bli_thread_set_num_threads(1);
	rng_seed(&r, 42, 0);
	if (argc >= 3) {
		if (argc > 3) {
			layers_set_threads(threads);
			clock_id = CLOCK_MONOTONIC;
		}
		return bench_model(argv[2], secs, 0, &r) < 0;
	}
	double peak = fma_peak(secs / 4);
	load_last();
	printf("# what\tshape\tvalue\tunit\tof FMA peak\tvs last run\n");
	printf("peak\tFMA loop, 8-wide\t%.1f\tGFLOP/s\n", peak * 1e-9);
	double gs = secs / 4;
	bench_gemm("mlp dense0 fwd", 64, 256, 784, 0, 1, gs, &r);
	bench_gemm("mlp dense0 dW", 256, 784, 64, 1, 0, gs, &r);
	/* the same two as nn/layers.c's dense layer runs them at batches up to 128: all row-stored */
	bench_gemm("mlp dense0 fwd, yᵀ = W·xᵀ", 256, 64, 784, 0, 0, gs, &r);
	bench_gemm("mlp dense0 dW, from dyᵀ", 256, 784, 64, 0, 0, gs, &r);
	bench_gemm("cnn conv0 fwd", 10, 36864, 25, 0, 0, gs, &r);
	bench_gemm("cnn conv0 dW", 10, 25, 36864, 0, 1, gs, &r);
	bench_gemm("cnn conv3 fwd", 20, 4096, 250, 0, 0, gs, &r);
	bench_gemm("cnn conv3 dW", 20, 250, 4096, 0, 1, gs, &r);
	bench_gemm("cnn conv3 dcol", 250, 4096, 20, 1, 0, gs, &r);
	bench_gemm("cnn dense8 fwd", 64, 300, 320, 0, 1, gs, &r);
	bench_gemm("square", 512, 512, 512, 0, 0, gs, &r);
	bench_direct("cnn conv0 1x28x28→10 k5", 64, 1, 28, 10, 5, gs, &r);
	bench_direct("cnn conv3 10x12x12→20 k5", 64, 10, 12, 20, 5, gs, &r);
	rc |= bench_model("mlp", secs, peak, &r);
	rc |= bench_model("cnn", secs, peak, &r);
	if (!rc)
		save_cur();
	return rc ? 1 : 0;
}
