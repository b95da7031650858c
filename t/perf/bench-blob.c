/* bench-blob: blob encode/decode speed and compression ratio per codec, on kaiming-initialised
 * parameter vectors the size of the cnn (163,790 floats) and the mlp (203,530 floats).
 * Output: TSV with a '#' header; MB/s count raw (float32) megabytes, 1 MB = 10^6 bytes. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Layers as (fan_in, out): weights N(0, 2/fan_in), biases U(±1/sqrt(fan_in)). */
static size_t kaiming(float *v, const int (*shape)[2], int nl, struct rng *r)
{
	size_t n = 0;
	for (int l = 0; l < nl; l++) {
		int fan_in = shape[l][0], out = shape[l][1];
		double s = sqrt(2.0 / fan_in);
		for (int i = 0; i < fan_in * out; i++)
			v[n++] = (float)(rng_normal(r) * s);
		for (int i = 0; i < out; i++)
			v[n++] = (rng_float(r) * 2 - 1) / (float)sqrt(fan_in);
	}
	return n;
}

int main(void)
{
	static const int cnn[][2] = {{25, 10}, {250, 20}, {320, 300}, {300, 200}, {200, 10}};
	static const int mlp[][2] = {{784, 256}, {256, 10}};
	static const char *codecs[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16};
	char err[GEM_ERRMAX] = "";
	struct blob_codec c;
	struct rng r;
	float *v = malloc(300000 * sizeof *v), *w = malloc(300000 * sizeof *w);
	unsigned char *enc = malloc(300000 * 4 + 4096);

	blob_codec_init(&c);
	rng_seed(&r, 1, 1);
	printf("# vector\tcount\tcodec\tlevel\traw_bytes\tenc_bytes\tratio\tenc_MBps\tdec_MBps\n");
	for (int vi = 0; vi < 2; vi++) {
		size_t n = vi == 0 ? kaiming(v, cnn, 5, &r) : kaiming(v, mlp, 2, &r);
		for (int k = 0; k < 4; k++) {
			struct blob_meta m;
			const void *out;
			double t0, te, td;
			int reps = 0;
			/* Repeat each side for at least 0.3 s. */
			t0 = now();
			do {
				if (blob_encode(&c, v, n, codecs[k], BLOB_LEVEL_DEFAULT, &out, &m, err) < 0) {
					fprintf(stderr, "bench-blob: %s\n", err);
					return 1;
				}
				reps++;
			} while ((te = now() - t0) < 0.3);
			te /= reps;
			memcpy(enc, out, m.nbytes);
			reps = 0;
			t0 = now();
			do {
				if (blob_decode(&c, enc, &m, w, n, err) < 0) {
					fprintf(stderr, "bench-blob: %s\n", err);
					return 1;
				}
				reps++;
			} while ((td = now() - t0) < 0.3);
			td /= reps;
			/* fp16 is lossy: its round trip is checked by t2007 */
			if (!blob_codec_lossy(codecs[k]) && memcmp(v, w, n * 4)) {
				fprintf(stderr, "bench-blob: %s round trip differs\n", codecs[k]);
				return 1;
			}
			printf("%s\t%zu\t%s\t%d\t%zu\t%zu\t%.4f\t%.1f\t%.1f\n", vi ? "mlp" : "cnn", n,
			       codecs[k], k == 1 || k == 2 ? BLOB_LEVEL_DEFAULT : 0, n * 4, m.nbytes,
			       (double)(n * 4) / (double)m.nbytes, (double)(n * 4) / te / 1e6,
			       (double)(n * 4) / td / 1e6);
		}
	}
	blob_codec_free(&c);
	free(v);
	free(w);
	free(enc);
	return 0;
}
