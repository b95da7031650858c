/* bench-blob: blob encode/decode speed and compression ratio per codec, on kaiming-initialised
 * parameter vectors the size of the cnn (163,790 floats) and the mlp (203,530 floats). The lossy
 * codecs also encode with error feedback (blob_encode_feedback, as a worker sends), and run with
 * their portable kernels too (simd 0; 1: AVX2 where the CPU has it).
 * Output: TSV with a '#' header; GB/s count float32 gigabytes in (or out, decoding) per second
 * of the thread's CPU time, 1 GB = 10^9 bytes; feedback_GBps is "-" for a lossless codec.
 * A second table: a server's reply to a worker of int8, int4 or topk, as a delta from its copy
 * (delta_encode on θ = the cnn vector, from a scratch copy of θ as gem-serve makes, the copy
 * kept as the server keeps it), GB/s of θ. */
#include "base/clock.h"
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"
#include "wire/delta.h"
#include "wire/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The thread's CPU time: on a machine shared with other jobs, what a call costs, not how long
 * it waited for a core. */
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

static char err[GEM_ERRMAX];
static uint32_t reply_crc;

/* The reply table: CPU seconds per delta_encode of theta (n floats) in codec, after the first
 * (θ whole); -1 on an error. */
static double per_reply(struct blob_codec *c, const char *codec, const float *theta,
			float *scratch, size_t n)
{
	struct delta d;
	struct blob_meta m;
	const void *out;
	const char *name;
	double t0, t = 0;
	int reps = 0, rc = delta_open(&d, codec, n, err);
	for (int first = 1; rc == 0 && first >= 0; first--) {
		t0 = clock_thread();
		do {
			memcpy(scratch, theta, n * sizeof *theta);
			rc = delta_encode(&d, c, scratch, &out, &m, &name, err);
			reply_crc ^= delta_crc(&d); /* gem-serve's header carries it */
			reps += !first;
		} while (rc == 0 && !first && (t = clock_thread() - t0) < 0.3);
	}
	delta_close(&d);
	return rc < 0 ? -1 : t / reps;
}

/* CPU seconds per call of one side, repeated for at least 0.3 s of it; -1 on an error (in err). */
static double per_call(struct blob_codec *c, int side, const float *v, float *resid, float *w,
		       size_t n, const char *codec, const void *enc, const struct blob_meta *m)
{
	struct blob_meta mm;
	const void *out;
	double t0 = clock_thread(), t;
	int reps = 0, rc;
	do {
		rc = side == 0   ? blob_encode(c, v, n, codec, BLOB_LEVEL_DEFAULT, &out, &mm, err)
		     : side == 1 ? blob_encode_feedback(c, v, resid, n, codec, -1, &out, &mm, err)
				 : blob_decode(c, enc, m, w, n, err);
		if (rc < 0)
			return -1;
		reps++;
	} while ((t = clock_thread() - t0) < 0.3);
	return t / reps;
}

int main(void)
{
	static const int cnn[][2] = {{25, 10}, {250, 20}, {320, 300}, {300, 200}, {200, 10}};
	static const int mlp[][2] = {{784, 256}, {256, 10}};
	static const char *codecs[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16, BLOB_INT8,
				       BLOB_INT4, "topk:0.01", "topk:0.1"};
	const int ncodecs = (int)(sizeof codecs / sizeof *codecs), simd = quant_simd(-1);
	struct blob_codec c;
	struct rng r;
	float *v = malloc(300000 * sizeof *v), *w = malloc(300000 * sizeof *w),
	      *resid = calloc(300000, sizeof *resid);
	unsigned char *enc = malloc(300000 * 4 + 4096);

	blob_codec_init(&c);
	rng_seed(&r, 1, 1);
	printf("# vector\tcount\tcodec\tsimd\traw_bytes\tenc_bytes\tratio\tenc_GBps\tfeedback_GBps"
	       "\tdec_GBps\n");
	for (int vi = 0; vi < 2; vi++) {
		size_t n = vi == 0 ? kaiming(v, cnn, 5, &r) : kaiming(v, mlp, 2, &r);
		for (int k = 0; k < ncodecs; k++) {
			int lossy = blob_codec_lossy(codecs[k]);
			for (int level = simd; level >= (lossy ? 0 : simd); level--) {
				struct blob_meta m;
				const void *out;
				double te, tf = 0, td;
				char fb[32] = "-";
				quant_simd(level);
				if ((te = per_call(&c, 0, v, resid, w, n, codecs[k], NULL, NULL)) < 0 ||
				    blob_encode(&c, v, n, codecs[k], -1, &out, &m, err) < 0)
					goto fail;
				memcpy(enc, out, m.nbytes);
				if ((td = per_call(&c, 2, v, resid, w, n, codecs[k], enc, &m)) < 0 ||
				    (lossy && (tf = per_call(&c, 1, v, resid, w, n, codecs[k], NULL,
							     NULL)) < 0))
					goto fail;
				/* the lossy round trips are checked by t2007, t2015 and t2016 */
				if (!lossy && memcmp(v, w, n * 4)) {
					fprintf(stderr, "bench-blob: %s round trip differs\n", codecs[k]);
					return 1;
				}
				if (lossy)
					snprintf(fb, sizeof fb, "%.2f", (double)(n * 4) / tf / 1e9);
				printf("%s\t%zu\t%s\t%d\t%zu\t%zu\t%.2f\t%.2f\t%s\t%.2f\n",
				       vi ? "mlp" : "cnn", n, codecs[k], lossy ? level : simd, n * 4,
				       m.nbytes, (double)(n * 4) / (double)m.nbytes,
				       (double)(n * 4) / te / 1e9, fb, (double)(n * 4) / td / 1e9);
				fflush(stdout);
			}
			quant_simd(simd);
		}
	}
	printf("\n# reply\tcount\tcodec\tsimd\tdelta_GBps\n");
	{
		size_t n = kaiming(v, cnn, 5, &r);
		static const char *deltas[] = {BLOB_INT8, BLOB_INT4, "topk:0.01", "topk:0.1"};
		for (int k = 0; k < 4; k++) {
			double t = per_reply(&c, deltas[k], v, w, n);
			if (t < 0)
				goto fail;
			printf("cnn\t%zu\t%s\t%d\t%.2f\n", n, deltas[k], simd, (double)(n * 4) / t / 1e9);
			fflush(stdout);
		}
	}
	blob_codec_free(&c);
	free(v);
	free(w);
	free(resid);
	free(enc);
	return 0;
fail:
	fprintf(stderr, "bench-blob: %s\n", err);
	return 1;
}
