/* bench-cores: what a second core costs when two threads share data, the figures that bound
 * how far nn/'s kernels can scale from one thread to two on this machine (doc/results/
 * resnet-speed.md, "What the second core costs"). Prints TSV:
 *   - stream: a triad y = a + s·b over each thread's own arrays (bytes: the three arrays of
 *     one thread), on 1 and on 2 threads at once, GB/s summed over the threads: whether the
 *     cores share a cache or the memory's bandwidth;
 *   - the handoff: one thread writes a buffer, then the other reads it, GB/s of the read
 *     ("other core wrote it"); then the reader reads it once more ("read again", from its own
 *     cache now): the same data without the transfer. bench-threads.sh prints the first rate
 *     at 1 MB beside each of its figures.
 * A layer whose part reads what another thread's part wrote in the layer before pays the
 * first rate, not the second. Wall-clock rates, best of BENCH_CORES_ROUNDS rounds (default 5):
 * other jobs only ever slow them. Usage: bench-cores [seconds per stream figure, default 0.3
 * [handoff]]: with "handoff", only the handoff's rows (bench-threads.sh's). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* Whole cache lines a step, in vectors of 32 bytes: on x86 in AVX2 where the CPU has it (the
 * loads of a core's widest common unit), so that the rates are the memory's, not the loop's.
 * Chosen at run time, not by target_clones: its ifunc resolver runs before ThreadSanitizer's
 * runtime and crashes a TSAN=1 build. n: a multiple of 16 floats. */
typedef float v8sf __attribute__((vector_size(32)));
typedef uint64_t v4du __attribute__((vector_size(32)));

#define TRIAD_BODY                                                                          \
	for (size_t i = 0; i < n; i += 16) {                                                \
		v8sf a0, a1, b0, b1, y0, y1;                                                \
		memcpy(&a0, a + i, 32), memcpy(&a1, a + i + 8, 32);                          \
		memcpy(&b0, b + i, 32), memcpy(&b1, b + i + 8, 32);                          \
		y0 = a0 + 0.5f * b0, y1 = a1 + 0.5f * b1;                                    \
		memcpy(y + i, &y0, 32), memcpy(y + i + 8, &y1, 32);                          \
	}

/* The words XORed, a cache line a step */
#define READ_BODY                                                                           \
	v4du x0 = {0, 0, 0, 0}, x1 = x0, l0, l1;                                             \
	for (size_t i = 0; i + 8 <= words; i += 8) {                                        \
		memcpy(&l0, p + i, 32), memcpy(&l1, p + i + 4, 32);                          \
		x0 ^= l0, x1 ^= l1;                                                          \
	}                                                                                   \
	x0 ^= x1;                                                                           \
	return x0[0] ^ x0[1] ^ x0[2] ^ x0[3];

static void triad_any(float *y, const float *a, const float *b, size_t n)
{
	TRIAD_BODY
}

static uint64_t read_any(const uint64_t *p, size_t words)
{
	READ_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void triad_avx2(float *y, const float *a, const float *b, size_t n)
{
	TRIAD_BODY
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint64_t *p, size_t words)
{
	READ_BODY
}

static int avx2(void)
{
	return __builtin_cpu_supports("avx2");
}
#else
#define triad_avx2 triad_any
#define read_avx2 read_any
static int avx2(void)
{
	return 0;
}
#endif

static void triad(float *y, const float *a, const float *b, size_t n)
{
	(avx2() ? triad_avx2 : triad_any)(y, a, b, n);
}

static uint64_t read_all(const uint64_t *p, size_t words)
{
	return (avx2() ? read_avx2 : read_any)(p, words);
}

/* ---- stream ---- */
struct stream {
	size_t n; /* floats per array */
	double secs, gbps;
	float sink;
};

static void *stream_run(void *arg)
{
	struct stream *s = arg;
	float *a = aligned_alloc(64, s->n * 4), *b = aligned_alloc(64, s->n * 4), *y = aligned_alloc(64, s->n * 4);
	if (!a || !b || !y) {
		free(a), free(b), free(y);
		s->gbps = -1;
		return NULL;
	}
	for (size_t i = 0; i < s->n; i++)
		a[i] = (float)i, b[i] = 1.0f, y[i] = 0.0f;
	long reps = 0;
	double t0 = clock_mono(), t;
	do {
		triad(y, a, b, s->n);
		a[reps % s->n] = y[(reps + 1) % s->n]; /* each pass depends on the one before */
		reps++;
	} while ((t = clock_mono() - t0) < s->secs);
	s->gbps = (double)reps * 3.0 * (double)s->n * 4.0 / t / 1e9;
	s->sink = y[s->n / 2];
	free(a), free(b), free(y);
	return NULL;
}

/* Total GB/s of `threads` threads, each on its own three arrays of `bytes` in all; < 0 failed */
static double stream(int threads, size_t bytes, double secs)
{
	size_t n = bytes / 12 / 16 * 16;
	struct stream s[2] = {{n, secs, 0, 0}, {n, secs, 0, 0}};
	pthread_t th;
	if (threads == 2 && pthread_create(&th, NULL, stream_run, &s[1]))
		return -1;
	stream_run(&s[0]);
	if (threads == 2)
		pthread_join(th, NULL);
	if (s[0].gbps < 0 || (threads == 2 && s[1].gbps < 0))
		return -1;
	return s[0].gbps + (threads == 2 ? s[1].gbps : 0);
}

/* ---- a buffer written by one core, read by the other ---- */
struct handoff {
	uint64_t *buf;
	size_t words;
	int reps;
	atomic_int turn; /* 0: the writer's, 1: the reader's */
	double first, again; /* seconds the reader spent on its two reads */
	uint64_t sink;
};

static void *reader(void *arg)
{
	struct handoff *h = arg;
	for (int r = 0; r < h->reps; r++) {
		while (atomic_load_explicit(&h->turn, memory_order_acquire) != 1)
			;
		double t0 = clock_mono();
		h->sink ^= read_all(h->buf, h->words);
		double t1 = clock_mono();
		h->sink ^= read_all(h->buf, h->words);
		h->first += t1 - t0, h->again += clock_mono() - t1;
		atomic_store_explicit(&h->turn, 0, memory_order_release);
	}
	return NULL;
}

/* GB/s of the reader's first and second reads of `bytes` the other thread wrote; -1 failed */
static int handoff(size_t bytes, int reps, double *first, double *again)
{
	struct handoff h = {aligned_alloc(64, bytes), bytes / 8, reps, 0, 0, 0, 0};
	pthread_t th;
	if (!h.buf)
		return -1;
	memset(h.buf, 0, bytes);
	if (pthread_create(&th, NULL, reader, &h)) {
		free(h.buf);
		return -1;
	}
	for (int r = 0; r < reps; r++) {
		while (atomic_load_explicit(&h.turn, memory_order_acquire) != 0)
			;
		for (size_t i = 0; i < h.words; i++)
			h.buf[i] = i * 0x9e3779b97f4a7c15u + (uint64_t)r;
		atomic_store_explicit(&h.turn, 1, memory_order_release);
	}
	pthread_join(th, NULL);
	*first = (double)bytes * reps / h.first / 1e9;
	*again = (double)bytes * reps / h.again / 1e9;
	if (h.sink == 1) /* keeps the reads */
		fprintf(stderr, "bench-cores: %llu\n", (unsigned long long)h.sink);
	free(h.buf);
	return 0;
}

static double best(double a, double b)
{
	return a > b ? a : b;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 0.3;
	const char *r = getenv("BENCH_CORES_ROUNDS");
	int rounds = r ? atoi(r) : 5, handoff_only = argc > 2 && !strcmp(argv[2], "handoff");
	if (!(secs > 0 && secs <= 60) || rounds < 1 || rounds > 100 || (argc > 2 && !handoff_only) ||
	    argc > 3) { /* NaN too */
		fprintf(stderr, "usage: bench-cores [seconds a stream figure, above 0, at most 60 [handoff]] "
				"(BENCH_CORES_ROUNDS: 1 to 100)\n");
		return 2;
	}
	static const size_t sizes[] = {256 << 10, 32 << 20};
	printf("# what\tthreads\tbytes\tGBps\n");
	for (int s = 0; s < (handoff_only ? 0 : 2); s++)
		for (int t = 1; t <= 2; t++) {
			double g = -1;
			for (int k = 0; k < rounds; k++)
				g = best(g, stream(t, sizes[s], secs));
			if (g < 0) {
				fprintf(stderr, "bench-cores: out of memory or threads\n");
				return 1;
			}
			printf("stream\t%d\t%zu\t%.1f\n", t, sizes[s], g);
		}
	static const size_t hsizes[] = {64 << 10, 1 << 20};
	for (int s = 0; s < 2; s++) {
		double f = 0, a = 0, f1, a1;
		for (int k = 0; k < rounds; k++) {
			if (handoff(hsizes[s], (int)((64 << 20) / hsizes[s]), &f1, &a1)) {
				fprintf(stderr, "bench-cores: out of memory or threads\n");
				return 1;
			}
			f = best(f, f1), a = best(a, a1);
		}
		printf("other core wrote it\t2\t%zu\t%.1f\n", hsizes[s], f);
		printf("read again\t2\t%zu\t%.1f\n", hsizes[s], a);
	}
	return 0;
}
