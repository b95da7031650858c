/* t2016: the topk codec. It sends exactly the k = ⌈F·n⌉ largest |x|, ties to the lower index,
 * as a reference that sorts says, with fp16 values and LEB128 gaps as gem-protocol(7) lays them
 * out; values that differ in their last bits only (the select's last level), masses of equal
 * ones and a vector whose sample misleads choose right; the blob decodes to those values and zeros, its CRC theirs; every
 * field of a hostile blob is checked and v left untouched; error feedback loses nothing and
 * sends every element in time; and "topk:F" is what a sender names, "topk" what a blob says. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"
#include "tap.h"
#include "wire/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { N = 163790, NF = 3000 };

static float v[N], w[N], vals[N], halves_back[N], resid[NF], sum_true[NF], sum_sent[NF], r0[N],
	r1[N], x[N];
static uint32_t order[N];
static unsigned char ref[4 + 7 * N], copy[4 + 7 * N];
static const float *sort_x;

static uint32_t key(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u & 0x7fffffffu;
}

/* larger |x| first; equal ones in index order */
static int by_size(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b, ki = key(sort_x[i]),
		 kj = key(sort_x[j]);
	return ki != kj ? (ki < kj ? 1 : -1) : (i > j) - (i < j);
}

static int by_index(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	return (i > j) - (i < j);
}

/* The reference: sort, take k, lay them out; back gets the values they decode to. */
static size_t ref_encode(struct blob_codec *c, const float *x, size_t n, size_t k, float *back)
{
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	size_t o = 4 + 2 * k, next = 0;
	uint32_t k32 = (uint32_t)k;
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	sort_x = x;
	qsort(order, n, sizeof *order, by_size);
	qsort(order, k, sizeof *order, by_index);
	for (size_t j = 0; j < k; j++)
		vals[j] = x[order[j]];
	memcpy(ref, &k32, 4);
	if (blob_encode(c, vals, k, BLOB_FP16, -1, &out, &m, err) < 0)
		return 0;
	memcpy(ref + 4, out, 2 * k);
	memset(back, 0, n * sizeof *back);
	for (size_t j = 0; j < k; j++) {
		size_t gap = order[j] - next;
		back[order[j]] = blob_encoded_values(c, vals)[j];
		for (; gap >= 128; gap >>= 7)
			ref[o++] = (unsigned char)(gap | 128);
		ref[o++] = (unsigned char)gap;
		next = order[j] + 1;
	}
	return o;
}

/* topk:f of x[0..n) gives the reference's bytes and values, and decodes to them. */
static int same_as_reference(struct blob_codec *c, const float *x, size_t n, double f,
			     const char *what)
{
	char codec[32], err[GEM_ERRMAX] = "";
	size_t k = quant_topk_k(n, f), rn;
	struct blob_meta m;
	const void *out;
	int good;
	snprintf(codec, sizeof codec, "topk:%g", f);
	if (blob_encode(c, x, n, codec, -1, &out, &m, err) < 0) {
		diag("%s: %s", what, err);
		return 0;
	}
	memcpy(copy, out, m.nbytes);
	memcpy(w, blob_encoded_values(c, x), n * 4);
	rn = ref_encode(c, x, n, k, halves_back);
	good = !strcmp(m.codec, BLOB_TOPK) && m.nbytes == rn && !memcmp(copy, ref, rn) &&
	       !memcmp(w, halves_back, n * 4) &&
	       m.crc32 == (uint32_t)crc32(0, (const unsigned char *)w, (unsigned)(n * 4));
	if (!good)
		diag("%s: %zu bytes, the reference %zu", what, m.nbytes, rn);
	memset(w, 0xa5, n * 4);
	good &= blob_decode(c, copy, &m, w, n, err) == 0 && !memcmp(w, halves_back, n * 4);
	if (!good)
		diag("%s: %s", what, err);
	return good;
}

/* blob_decode refuses the n-element blob b, naming what, and leaves v as it was. */
static void refused(struct blob_codec *c, const unsigned char *b, size_t nbytes, size_t n,
		    const char *what, const char *why)
{
	struct blob_meta m;
	char err[GEM_ERRMAX] = "";
	float keep[64];
	memset(&m, 0, sizeof m);
	strcpy(m.codec, BLOB_TOPK);
	m.count = n;
	m.nbytes = nbytes;
	for (size_t i = 0; i < n; i++)
		keep[i] = 9;
	ok(blob_decode(c, b, &m, keep, n, err) == GEM_EFAIL && strstr(err, what) && keep[0] == 9 &&
		   keep[n - 1] == 9,
	   "%s is refused, v untouched: %s", why, err);
}

static void hostile(struct blob_codec *c)
{
	/* 3 of 10 elements: indices 1, 4, 9 (gaps 1, 2, 4), values 1, 2, -1 */
	static const unsigned char good[] = {3, 0, 0, 0, 0x00, 0x3c, 0x00, 0x40, 0x00, 0xbc, 1, 2, 4};
	unsigned char b[32];
	struct blob_meta m;
	char err[GEM_ERRMAX];
	memset(&m, 0, sizeof m);
	strcpy(m.codec, BLOB_TOPK);
	m.count = 10;
	m.nbytes = sizeof good;
	{
		float want[10] = {0, 1, 0, 0, 2, 0, 0, 0, 0, -1};
		m.crc32 = (uint32_t)crc32(0, (const unsigned char *)want, sizeof want);
		ok(blob_decode(c, good, &m, w, 10, err) == 0 && !memcmp(w, want, sizeof want),
		   "a blob written by hand decodes to its values and zeros: %s", err);
	}
#define FRESH() memcpy(b, good, sizeof good)
	FRESH();
	refused(c, b, 3, 10, "no count", "a blob shorter than its count");
	b[0] = 11;
	refused(c, b, sizeof good, 10, "sends 11", "a count above n");
	FRESH();
	refused(c, b, 9, 10, "too short", "a blob cut in its values");
	refused(c, b, 12, 10, "cut short", "a blob cut in its indices");
	refused(c, b, sizeof good + 1, 10, "after the last index", "a byte after the indices");
	b[12] = 5;
	refused(c, b, sizeof good, 10, "beyond 10", "an index at n");
	FRESH();
	b[10] = 0x81, b[11] = 0x00, b[12] = 2; /* gap 1 written in two bytes */
	refused(c, b, sizeof good, 10, "not minimally coded", "a gap with a needless zero byte");
	FRESH();
	b[5] = 0x7c; /* +∞ */
	refused(c, b, sizeof good, 10, "value 0 is infinite", "an infinite value");
	FRESH();
	b[9] = 0xfe; /* NaN */
	refused(c, b, sizeof good, 10, "value 2 is infinite or NaN", "a NaN value");
	{
		/* one element with a gap of six bytes (2^35): refused before it is read further */
		unsigned char big[] = {1, 0, 0, 0, 0, 0x3c, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
		refused(c, big, sizeof big, 10, "not minimally coded", "a gap longer than 5 bytes");
	}
	strcpy(m.codec, "topk:0.1");
	m.crc32 = 0;
	ok(blob_decode(c, good, &m, w, 10, err) == GEM_EFAIL && strstr(err, "unknown codec"),
	   "a blob that says topk:F, not topk, is refused: %s", err);
#undef FRESH
}

/* The reference's bytes and values, at the SIMD level in use (named in what they print). */
static void references(struct blob_codec *c, int level)
{
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	struct rng r;
	float f[64];

	rng_seed(&r, 9, 1);
	for (size_t i = 0; i < N; i++)
		v[i] = (float)(rng_normal(&r) * ldexp(1, -(int)(i / 20000) - 5));
	ok(same_as_reference(c, v, N, 0.01, "cnn-sized, topk:0.01"), "simd %d: topk:0.01 of %d floats: the "
	   "reference's bytes and values, decoded alike, the CRC theirs", level, N);
	ok(same_as_reference(c, v, N, 0.1, "cnn-sized, topk:0.1"), "topk:0.1 too");
	ok(same_as_reference(c, v, 1000, 1, "topk:1"), "topk:1 sends every element");
	m.nbytes = 0;
	if (blob_encode(c, v, N, "topk:0.01", -1, &out, &m, err) < 0)
		diag("%s", err);
	ok(m.nbytes > 4 + 3 * 1638 && m.nbytes < 4 + 4 * 1638,
	   "topk:0.01 is 3 to 4 bytes an element: %zu bytes for 1638", m.nbytes);
	/* the k-th largest among values that differ only in their lowest bits */
	for (size_t i = 0; i < 5000; i++) {
		uint32_t u = 0x3f800000u + (uint32_t)((i * 7919) % 5000);
		memcpy(&v[i], &u, 4);
		v[i] = i % 2 ? -v[i] : v[i];
	}
	ok(same_as_reference(c, v, 5000, 0.013, "low bits"), "values 1 + j·ulp: the select's last level "
	   "finds the k-th");
	/* the sample (every 24th element from the 12th) holds only large ones: it promises more than
	 * the k = 10,000 elements there are above the small ones, and the select takes all */
	for (size_t i = 0; i < 100000; i++)
		v[i] = i % 24 == 12 ? 1.0f : (float)((i * 7919) % 1000) * 1e-6f;
	ok(same_as_reference(c, v, 100000, 0.1, "sample fooled"), "a sample that misses the k-th: "
	   "still the reference's elements");
	/* the other way: the sample holds only middling ones, and 20,000 elements it misses are
	 * larger than all of them, so that more than k exceed the key it says a few fewer do */
	for (size_t i = 0; i < 100000; i++)
		v[i] = i % 24 == 12 ? 0.5f + (float)(i % 997) * 1e-4f
		       : i % 5 ? (float)((i * 7919) % 1000) * 1e-6f : 1.0f + (float)((i * 7919) % 1000) * 1e-3f;
	ok(same_as_reference(c, v, 100000, 0.1, "band fooled"), "more than k above the sample's upper "
	   "key: still the reference's elements");
	for (size_t i = 0; i < 5000; i++)
		v[i] = i % 3 ? (i % 2 ? 1.0f : -1.0f) : 0.5f;
	ok(same_as_reference(c, v, 5000, 0.3, "ties"), "a mass of equal |x|: the lower indices go");
	for (size_t i = 0; i < 64; i++)
		f[i] = i % 2 ? -0.0f : 0.0f;
	ok(same_as_reference(c, f, 64, 0.25, "zeros"), "±0 tie: the first 16 indices go");
	f[21] = NAN;
	ok(blob_encode(c, f, 64, "topk:0.5", -1, &out, &m, err) == GEM_EUSAGE && strstr(err, "finite"),
	   "a NaN is not encoded: %s", err);
}

/* With feedback at every SIMD level, topk:f of v and r gives the bytes and values of topk:f of
 * x = v + r without, and leaves r = x − those values; for the vector whose sample misleads too
 * (the select goes over x again, v not added twice). */
static void feedback_alike(struct blob_codec *c, int level)
{
	static const double fs[] = {0.01, 0.1};
	struct rng r;
	rng_seed(&r, 5, 5);
	for (int vi = 0; vi < 2; vi++) {
		size_t n = vi ? 100000 : N;
		for (size_t i = 0; i < n; i++) {
			v[i] = vi ? (i % 24 == 12 ? 1.0f : (float)((i * 7919) % 1000) * 1e-6f)
				  : (float)(rng_normal(&r) * 1e-2);
			r0[i] = vi ? (float)(i % 7) * 1e-9f : (float)(rng_normal(&r) * 1e-2);
			x[i] = r0[i] + v[i];
		}
		for (int fi = 0; fi < 2; fi++) {
			char codec[32], err[GEM_ERRMAX] = "";
			struct blob_meta m, mf;
			const void *out;
			int good, rest = 1;
			snprintf(codec, sizeof codec, "topk:%g", fs[fi]);
			memcpy(r1, r0, n * 4);
			good = blob_encode(c, x, n, codec, -1, &out, &m, err) == 0;
			memcpy(ref, out, m.nbytes);
			memcpy(halves_back, blob_encoded_values(c, x), n * 4);
			good &= blob_encode_feedback(c, v, r1, n, codec, -1, &out, &mf, err) == 0 &&
				mf.nbytes == m.nbytes && mf.crc32 == m.crc32 &&
				!memcmp(out, ref, m.nbytes) &&
				!memcmp(blob_encoded_values(c, v), halves_back, n * 4);
			for (size_t i = 0; i < n; i++)
				rest &= r1[i] == x[i] - halves_back[i];
			ok(good && rest, "simd %d, %s, %s: with feedback, the bytes of v + r; r keeps the "
			   "rest %s", level, vi ? "a misleading sample" : "cnn-sized", codec, err);
		}
	}
}

/* Over rounds Σ sent + residual = Σ v, and an element with a small steady v is sent in time. */
static void feedback(struct blob_codec *c)
{
	struct rng r;
	double worst = 0;
	int first_sent = -1;
	memset(resid, 0, sizeof resid);
	rng_seed(&r, 3, 3);
	for (int round = 0; round < 300; round++) {
		struct blob_meta m;
		const void *out;
		char err[GEM_ERRMAX];
		for (size_t i = 0; i < NF; i++)
			w[i] = (float)(rng_normal(&r) * 1e-3);
		w[7] = 2e-4f; /* a fifth of the others' size, never among the largest alone */
		if (blob_encode_feedback(c, w, resid, NF, "topk:0.05", -1, &out, &m, err) < 0)
			break;
		memcpy(copy, out, m.nbytes);
		if (blob_decode(c, copy, &m, halves_back, NF, err) < 0)
			break;
		for (size_t i = 0; i < NF; i++) {
			sum_true[i] += w[i];
			sum_sent[i] += halves_back[i];
		}
		if (first_sent < 0 && halves_back[7] != 0)
			first_sent = round;
	}
	for (size_t i = 0; i < NF; i++)
		worst = fmax(worst, fabs((double)sum_sent[i] + resid[i] - sum_true[i]));
	ok(worst < 1e-6, "300 rounds of topk:0.05 with feedback: Σ sent + residual = Σ v (worst %.3g)",
	   worst);
	ok(first_sent > 0 && first_sent < 300, "a small steady element is sent when its residual "
	   "has grown (round %d)", first_sent);
}

int main(void)
{
	struct blob_codec c;
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	float f[64];
	int simd = quant_simd(-1);

	blob_codec_init(&c);
	ok(blob_codec_known("topk:0.01") && blob_codec_known(BLOB_TOPK) && blob_codec_lossy("topk:0.5") &&
		   blob_codec_check("topk:1", err) == 0 && blob_codec_check("topk:1e-3", err) == 0,
	   "topk:F and topk are known, lossy; a sender may name topk:1 and topk:1e-3");
	ok(blob_codec_check(BLOB_TOPK, err) == GEM_EUSAGE && strstr(err, "topk:F"),
	   "topk alone is no sender's codec: %s", err);
	ok(blob_codec_check("topk:0", err) == GEM_EUSAGE &&
		   blob_codec_check("topk:1.5", err) == GEM_EUSAGE &&
		   blob_codec_check("topk:x", err) == GEM_EUSAGE && !blob_codec_known("topk:nan") &&
		   !blob_codec_known("topk:-0.1") && !blob_codec_known("topk: 0.1") &&
		   !blob_codec_known("topk:\n0.1") && !blob_codec_known("topk:0x1p-3") &&
		   !blob_codec_known("topk:+0.1"),
	   "0, 1.5, x, nan, -0.1, a blank, a newline, hex and a sign are no fractions: %s", err);
	/* a join event logs the name; a name as long as its buffer would be cut there */
	ok(blob_codec_check("topk:0.00000001", err) == 0 &&
		   blob_codec_check("topk:0.000000001", err) == GEM_EUSAGE && strstr(err, "15 characters") &&
		   !blob_codec_known("topk:0.000000001") && !blob_codec_known("topk:0.1000000000000000"),
	   "a name of 15 characters is a codec, one of 16 or more none: %s", err);
	ok(!strcmp(blob_codec_for_theta("topk:0.1"), BLOB_FP16), "θ goes in fp16 to a topk peer");
	ok(quant_topk_k(N, 0.01) == 1638 && quant_topk_k(N, 0.1) == 16379 && quant_topk_k(10, 1e-9) == 1 &&
		   quant_topk_k(10, 1) == 10 && quant_topk_k(0, 0.5) == 0,
	   "k = ⌈F·n⌉, at least 1");

	for (int level = simd; level >= 0; level--) {
		quant_simd(level);
		references(&c, level);
		feedback_alike(&c, level);
	}
	quant_simd(simd);
	memset(f, 0, sizeof f);
	ok(blob_encode(&c, v, 0, "topk:0.5", -1, &out, &m, err) == 0 && m.nbytes == 4 &&
		   blob_decode(&c, out, &m, w, 0, err) == 0,
	   "an empty vector is 4 bytes (k = 0)");
	f[5] = INFINITY;
	ok(blob_encode(&c, f, 64, "topk:0.5", -1, &out, &m, err) == GEM_EUSAGE && strstr(err, "finite"),
	   "a non-finite vector is not encoded: %s", err);
	f[5] = 70000;
	ok(blob_encode(&c, f, 64, "topk:0.5", -1, &out, &m, err) == 0 &&
		   blob_encoded_values(&c, f)[5] == 65504,
	   "a value beyond fp16 saturates to 65504 (the residual keeps the rest)");
	hostile(&c);
	feedback(&c);
	blob_codec_free(&c);
	return done_testing();
}
