/* t2015: the int8 and int4 codecs. Their bytes are those of a plain reference written from
 * gem-protocol(7)'s rule (float32 scale = max|x| / L, x·(L/max) rounded to nearest even, ±L),
 * with the portable and the AVX2 kernels alike, the short last block and the error feedback
 * included; a blob decodes to exactly the values the encoder kept, within half a step of x;
 * tiny and huge blocks are handled as the page says; every field of a hostile blob is checked
 * (size, scale sign, finiteness and range, -128 and -8, the unused nibble) and v is left
 * untouched; error feedback loses nothing; and the codec names behave. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"
#include "tap.h"
#include "wire/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <zlib.h>

enum { N = 163790, NF = 4000 };

static float v[N], w[N], resid[N], resid2[N], ref_back[N], sum_true[NF], sum_sent[NF];
static unsigned char ref[N + N / 64 + 64], copy[N + N / 64 + 64];

/* The reference encoder: plain C, one element at a time, straight from the page. */
static size_t ref_encode(const float *x, size_t n, int bits, unsigned char *out, float *back)
{
	const float L = bits == 8 ? 127.0f : 7.0f;
	size_t o = 0;
	for (size_t b = 0; b < n; b += 256) {
		size_t m = n - b < 256 ? n - b : 256;
		float mx = 0, s = 0, inv = 0;
		for (size_t j = 0; j < m; j++)
			mx = fabsf(x[b + j]) > mx ? fabsf(x[b + j]) : mx;
		if (mx >= 0x1p-96f) {
			s = mx / L;
			inv = L / mx;
		}
		memcpy(out + o, &s, 4);
		o += 4;
		if (bits == 4)
			memset(out + o, 0, (m + 1) / 2);
		for (size_t j = 0; j < m; j++) {
			float y = x[b + j] * inv;
			int q = (int)nearbyintf(fminf(fmaxf(y, -L), L));
			back[b + j] = (float)q * s;
			if (bits == 8)
				out[o + j] = (unsigned char)(signed char)q;
			else
				out[o + j / 2] |= (unsigned char)((q & 15) << 4 * (j % 2));
		}
		o += bits == 8 ? m : (m + 1) / 2;
	}
	return o;
}

static struct blob_meta meta_of(const char *codec, size_t count, size_t nbytes, const float *f)
{
	struct blob_meta m;
	memset(&m, 0, sizeof m);
	snprintf(m.codec, sizeof m.codec, "%s", codec);
	m.count = count;
	m.nbytes = nbytes;
	m.crc32 = (uint32_t)crc32(0, (const unsigned char *)f, (unsigned)(count * 4));
	return m;
}

/* Each length (whole blocks, a short last one, odd and even) and each level: the reference's
 * bytes and values; decoded, the same values; the CRC theirs. */
static void against_reference(struct blob_codec *c, const char *codec, int bits)
{
	static const size_t lens[] = {0, 1, 2, 7, 255, 256, 257, 511, 513, 4097, N};
	int simd = quant_simd(-1);
	for (int level = simd; level >= 0; level--) {
		int bytes_ok = 1, vals_ok = 1, dec_ok = 1, crc_ok = 1;
		quant_simd(level);
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			size_t n = lens[li], rn = ref_encode(v, n, bits, ref, ref_back);
			struct blob_meta m;
			const void *out;
			char err[GEM_ERRMAX];
			if (blob_encode(c, v, n, codec, -1, &out, &m, err) < 0 || m.nbytes != rn ||
			    memcmp(out, ref, rn)) {
				diag("%s level %d n %zu: bytes differ (%zu, want %zu) %s", codec, level,
				     n, m.nbytes, rn, err);
				bytes_ok = 0;
				continue;
			}
			vals_ok &= !memcmp(blob_encoded_values(c, v), ref_back, n * 4);
			crc_ok &= m.crc32 == (uint32_t)crc32(0, (const unsigned char *)ref_back, (unsigned)(n * 4));
			memcpy(copy, out, m.nbytes);
			dec_ok &= blob_decode(c, copy, &m, w, n, err) == 0 && !memcmp(w, ref_back, n * 4);
		}
		ok(bytes_ok, "%s, simd %d: the reference's bytes, at every length", codec, level);
		ok(vals_ok && crc_ok, "%s, simd %d: the encoder keeps the values they decode to, and the "
		   "CRC is theirs", codec, level);
		ok(dec_ok, "%s, simd %d: decoding gives those values", codec, level);
	}
	quant_simd(simd);
}

/* |x − x̂| <= s/2 (a float's rounding more), s the block's max / L */
static void error_bound(struct blob_codec *c, const char *codec, int bits)
{
	const float L = bits == 8 ? 127.0f : 7.0f;
	char err[GEM_ERRMAX];
	struct blob_meta m;
	const void *out;
	double worst = 0;
	ok(blob_encode(c, v, N, codec, -1, &out, &m, err) == 0, "%s: encoded", codec);
	for (size_t b = 0; b < N; b += 256) {
		size_t e = b + 256 < N ? b + 256 : N;
		float mx = 0;
		for (size_t i = b; i < e; i++)
			mx = fmaxf(mx, fabsf(v[i]));
		for (size_t i = b; i < e; i++)
			worst = fmax(worst, fabs((double)blob_encoded_values(c, v)[i] - v[i]) / (mx / L));
	}
	ok(worst <= 0.5 + 1e-5 && worst > 0.45, "%s: error at most half a step: %.6f steps", codec,
	   worst);
}

/* Same bytes with feedback at every level; over rounds Σ sent + residual = Σ v. */
static void feedback(struct blob_codec *c, const char *codec)
{
	int simd = quant_simd(-1), same = 1;
	double worst = 0, total = 0;
	struct rng r;
	for (size_t i = 0; i < N; i++)
		resid[i] = (float)(v[i] * 0.01), resid2[i] = resid[i];
	for (int level = 0; level <= simd; level++) {
		struct blob_meta m;
		const void *out;
		char err[GEM_ERRMAX];
		quant_simd(level);
		if (blob_encode_feedback(c, v, level ? resid2 : resid, N, codec, -1, &out, &m, err) < 0)
			same = 0;
		else if (level)
			same &= !memcmp(out, ref, m.nbytes) && !memcmp(resid, resid2, sizeof resid);
		else
			memcpy(ref, out, m.nbytes);
	}
	quant_simd(simd);
	ok(same, "%s: with feedback, every level gives the same bytes and residual", codec);

	memset(resid, 0, sizeof resid);
	memset(sum_true, 0, sizeof sum_true);
	memset(sum_sent, 0, sizeof sum_sent);
	rng_seed(&r, 11, 2);
	for (int round = 0; round < 200; round++) {
		struct blob_meta m;
		const void *out;
		char err[GEM_ERRMAX];
		for (size_t i = 0; i < NF; i++)
			w[i] = (float)(rng_normal(&r) * 1e-3);
		if (blob_encode_feedback(c, w, resid, NF, codec, -1, &out, &m, err) < 0)
			break;
		memcpy(copy, out, m.nbytes);
		if (blob_decode(c, copy, &m, ref_back, NF, err) < 0)
			break;
		for (size_t i = 0; i < NF; i++) {
			sum_true[i] += w[i];
			sum_sent[i] += ref_back[i];
		}
	}
	for (size_t i = 0; i < NF; i++) {
		worst = fmax(worst, fabs((double)sum_sent[i] + resid[i] - sum_true[i]));
		total += fabs((double)sum_true[i]);
	}
	ok(worst < 1e-6 * total / NF + 1e-7, "%s: 200 rounds of feedback: Σ sent + residual = Σ v "
	   "(worst %.3g, mean |Σ v| %.3g)", codec, worst, total / NF);
}

/* blob_decode refuses blob b (nbytes, n elements), naming what, and leaves v as it was. */
static void refused(struct blob_codec *c, const char *codec, const unsigned char *b, size_t nbytes,
		    size_t n, const char *what, const char *why)
{
	struct blob_meta m = meta_of(codec, n, nbytes, v);
	char err[GEM_ERRMAX] = "";
	float keep[600];
	for (size_t i = 0; i < n; i++)
		keep[i] = 9;
	ok(blob_decode(c, b, &m, keep, n, err) == GEM_EFAIL && strstr(err, what) && keep[0] == 9 &&
		   keep[n - 1] == 9,
	   "%s: %s is refused, v untouched: %s", codec, why, err);
}

static void hostile(struct blob_codec *c, const char *codec, int bits)
{
	unsigned char b[4 + 600];
	float f[301], s;
	size_t n = 300, size = quant_int_size(n, bits); /* a whole block and 44 more */
	size_t tail = 4 + (bits == 8 ? 256 : 128);
	for (size_t i = 0; i < 301; i++)
		f[i] = (float)i - 150;
	ref_encode(f, n, bits, ref, ref_back);
#define FRESH() memcpy(b, ref, size)
	FRESH();
	refused(c, codec, b, size - 1, n, "size", "a byte short");
	refused(c, codec, b, size + 1, n, "size", "a byte long");
	s = -1;
	memcpy(b, &s, 4);
	refused(c, codec, b, size, n, "block 0's scale", "a negative scale");
	s = -0.0f;
	memcpy(b, &s, 4);
	refused(c, codec, b, size, n, "block 0's scale", "a scale of -0");
	FRESH();
	s = NAN;
	memcpy(b + tail, &s, 4);
	refused(c, codec, b, size, n, "block 1's scale", "a NaN scale in the last block");
	s = INFINITY;
	memcpy(b + tail, &s, 4);
	refused(c, codec, b, size, n, "block 1's scale", "an infinite scale");
	s = FLT_MAX / 2;
	memcpy(b + tail, &s, 4);
	refused(c, codec, b, size, n, "block 1's scale", "a scale whose L·s overflows");
	FRESH();
	if (bits == 8) {
		b[4 + 100] = 0x80;
		refused(c, codec, b, size, n, "-128", "the value -128");
		FRESH();
		b[tail + 4 + 43] = 0x80;
		refused(c, codec, b, size, n, "block 1 holds the value -128", "-128 in the last block");
	} else {
		b[4 + 10] = 0x08;
		refused(c, codec, b, size, n, "-8", "a low nibble of -8");
		FRESH();
		b[tail + 4 + 21] = 0x80;
		refused(c, codec, b, size, n, "block 1 holds the value -8", "a high nibble of -8, last block");
		FRESH();
		/* 301 elements: the last block has 45, so the last byte's high nibble is unused */
		ref_encode(f, 301, 4, ref, ref_back);
		memcpy(b, ref, quant_int_size(301, 4));
		b[quant_int_size(301, 4) - 1] |= 0x10;
		refused(c, codec, b, quant_int_size(301, 4), 301, "unused high nibble",
			"a set unused nibble");
	}
#undef FRESH
}

/* Blocks below 2^-96 go as zeros; ±0 and the largest finite floats; non-finite vectors. */
static void edges(struct blob_codec *c, const char *codec, int bits)
{
	char err[GEM_ERRMAX];
	struct blob_meta m;
	const void *out;
	float f[512], s;
	for (int i = 0; i < 512; i++)
		f[i] = i < 256 ? 0x1p-98f * (i % 3) : (i % 2 ? -0.0f : 0.0f);
	ok(blob_encode(c, f, 512, codec, -1, &out, &m, err) == 0 &&
		   (memcpy(&s, out, 4), s == 0) && !memcmp(blob_encoded_values(c, f), (float[512]){0}, 2048),
	   "%s: a block below 2^-96 and one of ±0 go as zeros with scale 0", codec);
	f[0] = FLT_MAX;
	if (bits == 8)
		ok(blob_encode(c, f, 512, codec, -1, &out, &m, err) == GEM_EUSAGE &&
			   strstr(err, "range"),
		   "%s: a block at FLT_MAX is beyond the range (127·s overflows): %s", codec, err);
	else
		ok(blob_encode(c, f, 512, codec, -1, &out, &m, err) == 0 &&
			   blob_encoded_values(c, f)[0] == FLT_MAX,
		   "%s: a block at FLT_MAX is in range (7·s is FLT_MAX)", codec);
	f[0] = 0x1p127f;
	ok(blob_encode(c, f, 512, codec, -1, &out, &m, err) == 0 &&
		   blob_encoded_values(c, f)[0] == 0x1p127f,
	   "%s: 2^127 is in range and comes back exact", codec);
	f[300] = NAN;
	ok(blob_encode(c, f, 512, codec, -1, &out, &m, err) == GEM_EUSAGE && strstr(err, "finite"),
	   "%s: a NaN is not encoded: %s", codec, err);
}

int main(void)
{
	struct blob_codec c;
	char err[GEM_ERRMAX];
	struct rng r;

	blob_codec_init(&c);
	rng_seed(&r, 5, 1);
	/* layers of different scales, as a commit's Δθ has */
	for (size_t i = 0; i < N; i++)
		v[i] = (float)(rng_normal(&r) * ldexp(1, -(int)(i / 20000) * 2 - 5));
	v[1000] = 0; /* an exact zero and an isolated large value */
	v[3000] = 1;

	ok(blob_codec_known(BLOB_INT8) && blob_codec_known(BLOB_INT4) &&
		   blob_codec_lossy(BLOB_INT8) && blob_codec_lossy(BLOB_INT4) &&
		   blob_codec_check(BLOB_INT4, err) == 0,
	   "int8 and int4 are known and lossy");
	ok(!strcmp(blob_codec_for_theta(BLOB_INT8), BLOB_FP16) &&
		   !strcmp(blob_codec_for_theta(BLOB_INT4), BLOB_FP16) &&
		   !strcmp(blob_codec_for_theta(BLOB_FP16), BLOB_FP16) &&
		   !strcmp(blob_codec_for_theta(BLOB_RAW), BLOB_RAW),
	   "θ goes in fp16 to a peer of int8 or int4; fp16 and raw stay");
	ok(blob_codec_check("int16", err) == GEM_EUSAGE &&
		   strstr(err, "raw, zlib, zlib+shuffle, fp16, int8, int4, topk:F"),
	   "an unknown codec lists the known ones: %s", err);
	ok(quant_int_size(N, 8) == 640 * 4 + N && quant_int_size(N, 4) == 640 * 4 + 639 * 128 + 103,
	   "sizes: 4 bytes a block and 1 or 1/2 byte an element (%zu, %zu)", quant_int_size(N, 8),
	   quant_int_size(N, 4));
	ok((double)N * 4 / (double)quant_int_size(N, 8) > 3.9 &&
		   (double)N * 4 / (double)quant_int_size(N, 4) > 7.7,
	   "int8 is 3.9 times smaller than raw, int4 7.7 times");

	against_reference(&c, BLOB_INT8, 8);
	against_reference(&c, BLOB_INT4, 4);
	error_bound(&c, BLOB_INT8, 8);
	error_bound(&c, BLOB_INT4, 4);
	feedback(&c, BLOB_INT8);
	feedback(&c, BLOB_INT4);
	hostile(&c, BLOB_INT8, 8);
	hostile(&c, BLOB_INT4, 4);
	edges(&c, BLOB_INT8, 8);
	edges(&c, BLOB_INT4, 4);
	blob_codec_free(&c);
	return done_testing();
}
