/* bench-train: how fast the training kernels run on one thread. Prints TSV on stdout:
 * sgemm GFLOP/s for the shapes the mlp and cnn layers use, then training samples/s at batch
 * 64 and evaluation samples/s at batch 1000 for share/gem/models/{mlp,cnn}.json (found via
 * $GEM_SRC, else the current directory). Rates are per second of the thread's CPU time (one
 * BLIS thread). Usage: bench-train [CPU seconds per model figure, default 2] */
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "nn/model.h"
#include "base/rng.h"

/* CPU time of this thread: other jobs on a shared machine slow the wall clock, not this. */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

static int bench_model(const char *name, double secs, struct rng *r)
{
	char path[4096], err[GEM_ERRMAX];
	const char *src = getenv("GEM_SRC");
	struct model *m;
	int B = 64, E = 1000;
	snprintf(path, sizeof path, "%s/share/gem/models/%s.json", src ? src : ".", name);
	if (model_from_file(path, NULL, &m, err) < 0 || model_reserve(m, E, err) < 0) {
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
	printf("train\t%s batch %d\t%.0f\tsamples/s\n", name, B, (double)steps * B / t);
	long evals = 0;
	double sum = 0;
	t0 = now();
	do {
		sum += model_evaluate(m, x, y, E, &correct, NULL);
		evals++;
		t = now() - t0;
	} while (t < secs);
	printf("eval\t%s batch %d\t%.0f\tsamples/s\n", name, E, (double)evals * E / t);
	fprintf(stderr, "bench-train: %s: %zu parameters, mean loss %.3f (%.3f in eval)\n", name,
		model_nparams(m), (double)loss / steps, sum / ((double)evals * E));
	free(x);
	free(y);
	model_free(m);
	return 0;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	struct rng r;
	int rc = 0;
	if (!(secs > 0)) {
		fprintf(stderr, "usage: bench-train [seconds]\n");
		return 2;
	}
	bli_thread_set_num_threads(1);
	rng_seed(&r, 42, 0);
	printf("# what\tshape\tvalue\tunit\n");
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
	rc |= bench_model("mlp", secs, &r);
	rc |= bench_model("cnn", secs, &r);
	return rc ? 1 : 0;
}
