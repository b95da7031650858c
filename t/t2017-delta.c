/* t2017: wire/delta, the two ends of θ replies as deltas. A sender and a receiver, each with its
 * own copy, pass θ (a random walk, 200 replies) through int8, int4, topk:0.01 and topk:0.1: the
 * first reply is θ whole in fp16, the rest deltas in the codec, and the two copies are equal bit
 * for bit after each, with the same CRC-32; the copy's distance to θ stays near the codec's
 * one-reply error (the feedback keeps it from growing). A restart sends θ whole again, so does a
 * θ beyond DELTA_BOUND; a delta before any θ is refused; raw and fp16 keep no copy. The sender's
 * fused passes (blob_encode_diff, chunk by chunk) give what the passes one after the other gave:
 * the bytes of C(θ − x̂), x̂ + the values sent bit for bit (−0 too), and their CRC-32s. */
#include "base/err.h"
#include "base/rng.h"
#include "wire/delta.h"
#include "wire/msg.h"
#include "wire/quant.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { N = 3000, REPLIES = 200 };

/* One reply of θ from s to r: the receiver decodes the sender's blob and takes it into v. 1 if
 * it came as a delta, 0 whole, -1 on an error. */
static int pass(struct delta *s, struct delta *r, struct blob_codec *cs, struct blob_codec *cr,
		const float *theta, float *v)
{
	static float scratch[N];
	char err[GEM_ERRMAX];
	const void *enc;
	const float *got;
	const char *name;
	struct blob_meta m;
	memcpy(scratch, theta, sizeof scratch);
	if (delta_encode(s, cs, scratch, &enc, &m, &name, err) < 0 ||
	    blob_decode_view(cr, enc, &m, N, &got, err) < 0 ||
	    delta_take(r, !strcmp(name, DELTA_BLOB), got, v, err) < 0) {
		diag("%s", err);
		return -1;
	}
	return !strcmp(name, DELTA_BLOB);
}

static void one_codec(const char *codec, struct rng *g)
{
	static float theta[N], v[N];
	char err[GEM_ERRMAX];
	struct delta s, r;
	struct blob_codec cs, cr;
	int kinds = 0, same = 1;
	double far = 0;

	blob_codec_init(&cs);
	blob_codec_init(&cr);
	ok(delta_open(&s, codec, N, err) == 0 && delta_open(&r, codec, N, err) == 0 && s.copy &&
		   r.copy, "%s: both ends keep a copy", codec);
	for (int i = 0; i < N; i++)
		theta[i] = (float)rng_normal(g) * 0.1f;
	for (int k = 0; k < REPLIES; k++) {
		int kind;
		for (int i = 0; i < N; i++)
			theta[i] += (float)rng_normal(g) * 0.001f;
		kind = pass(&s, &r, &cs, &cr, theta, v);
		kinds += kind == (k > 0);
		same &= !memcmp(s.copy, r.copy, sizeof v) && !memcmp(v, r.copy, sizeof v) &&
			delta_crc(&s) == delta_crc(&r);
		if (k == REPLIES - 1)
			for (int i = 0; i < N; i++)
				far = fmax(far, fabs(theta[i] - v[i]));
	}
	ok(kinds == REPLIES, "%s: θ whole first, then %d deltas", codec, REPLIES - 1);
	ok(same, "%s: the copies are equal bit for bit after every reply, CRC-32 %08x", codec,
	   delta_crc(&s));
	/* θ walks 0.001 an element a reply, about 0.014 over the 200 (and the largest of 3,000
	 * elements' walks several times that): a copy that stopped following θ would be that far */
	ok(far < 0.012, "%s: the copy within %.2g of θ after %d replies", codec, far, REPLIES);
	delta_restart(&s);
	ok(pass(&s, &r, &cs, &cr, theta, v) == 0 && !memcmp(s.copy, r.copy, sizeof v),
	   "%s: after a restart θ goes whole, and both copies start over", codec);
	theta[7] = 0x1p126f;
	ok(pass(&s, &r, &cs, &cr, theta, v) == 0 && !memcmp(s.copy, r.copy, sizeof v),
	   "%s: a θ of 2^126 goes whole", codec);
	theta[7] = 0;
	ok(s.copy[7] == 65504 && pass(&s, &r, &cs, &cr, theta, v) == 1 &&
		   !memcmp(s.copy, r.copy, sizeof v),
	   "%s: the copy holds it as fp16's largest, 65504: then deltas again", codec);
	delta_close(&s);
	delta_close(&r);
	blob_codec_free(&cs);
	blob_codec_free(&cr);
}

/* blob_encode_diff of a and b (NB floats: two chunks and a part) against blob_encode of a − b,
 * then b + the values sent, at each SIMD level; with an |a| of 2^126 in the last chunk, 1. */
static void fused(const char *codec, struct rng *g)
{
	enum { NB = 10000 };
	static float a[NB], b[NB], x[NB], want[NB];
	static unsigned char bytes[4 * NB];
	char err[GEM_ERRMAX] = "";
	struct blob_codec c;
	blob_codec_init(&c);
	for (int level = quant_simd(-1), simd = level; level >= 0; level--) {
		struct blob_meta m, md;
		const void *out;
		uint32_t b_crc = 0;
		int good;
		quant_simd(level);
		for (int i = 0; i < NB; i++) {
			b[i] = i % 97 ? (float)rng_normal(g) * 0.1f : -0.0f;
			a[i] = i % 89 ? b[i] + (float)rng_normal(g) * 0.01f : -1e-30f;
			x[i] = a[i] - b[i];
		}
		good = blob_encode(&c, x, NB, codec, -1, &out, &m, err) == 0;
		memcpy(bytes, out, m.nbytes);
		for (int i = 0; i < NB; i++)
			want[i] = b[i] + blob_encoded_values(&c, x)[i];
		good = good &&
		       blob_encode_diff(&c, a, b, NB, codec, DELTA_BOUND, &out, &md, &b_crc, err) == 0 &&
		       md.nbytes == m.nbytes && !memcmp(out, bytes, m.nbytes) && md.crc32 == m.crc32 &&
		       !strcmp(md.codec, m.codec) && md.count == NB && !memcmp(b, want, sizeof b) &&
		       b_crc == (uint32_t)crc32(0, (const unsigned char *)want, sizeof want);
		ok(good, "%s, simd %d: the fused passes give C(a − b)'s bytes, b + its values and "
		   "their CRC-32s %s", codec, level, err);
		a[9000] = 0x1p126f;
		ok(blob_encode_diff(&c, a, b, NB, codec, DELTA_BOUND, &out, &md, &b_crc, err) == 1,
		   "%s, simd %d: an |a| of 2^126 in the last chunk: 1 (θ goes whole)", codec, level);
		if (!level)
			quant_simd(simd);
	}
	blob_codec_free(&c);
}

int main(void)
{
	static float got[N], v[N];
	char err[GEM_ERRMAX];
	struct delta d;
	struct rng g;
	rng_seed(&g, 17, 1);
	ok(delta_wanted("int8") && delta_wanted("int4") && delta_wanted("topk:0.01") &&
		   !delta_wanted("fp16") && !delta_wanted("raw") && !delta_wanted("zlib+shuffle") &&
		   !delta_wanted(NULL),
	   "int8, int4 and topk:F take deltas; fp16 and the lossless codecs θ whole");
	one_codec("int8", &g);
	one_codec("int4", &g);
	one_codec("topk:0.01", &g);
	one_codec("topk:0.1", &g);
	fused("int8", &g);
	fused("int4", &g);
	fused("topk:0.01", &g);
	fused("topk:0.1", &g);
	{
		struct blob_codec c;
		blob_codec_init(&c);
		ok(blob_encode_diff(&c, got, v, N, "fp16", DELTA_BOUND, NULL, NULL, NULL, err) ==
			   GEM_EUSAGE,
		   "fp16 takes no differences: %s", err);
		blob_codec_free(&c);
	}

	ok(delta_open(&d, "int8", N, err) == 0 &&
		   delta_take(&d, 1, got, v, err) == GEM_EFAIL && strstr(err, "before"),
	   "a delta before θ is refused: %s", err);
	delta_close(&d);
	ok(delta_open(&d, "fp16", N, err) == 0 && !d.copy && delta_take(&d, 0, got, v, err) == 0,
	   "fp16 keeps no copy, and takes θ as it comes");
	ok(delta_take(&d, 1, got, v, err) == GEM_EFAIL, "nor a delta");
	delta_close(&d);
	ok(delta_open(&d, "int3", N, err) == GEM_EUSAGE, "an unknown codec: %s", err);
	delta_close(&d);
	return done_testing();
}
