/* t2007: the lossy fp16 codec: every finite half survives decode and encode unchanged, rounding
 * is to nearest even within half an ulp, saturation at ±65504, the portable and the F16C kernels
 * give the same bytes, a blob's CRC is that of what it decodes to, hostile blobs (an infinite or
 * NaN half, a wrong size or CRC) are refused without touching v, and error feedback loses
 * nothing: Σ sent + residual = Σ updates. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"
#include "tap.h"
#include "wire/quant.h"

#include <math.h>
#include <string.h>
#include <zlib.h>

enum { NH = 65536, N = 20000 };

static float v[NH], w[NH], sum_true[N], sum_sent[N], resid[N], sent[N];
static unsigned char halves[NH * 2], copy[NH * 2];

/* meta for count halves at halves, CRC of the floats at f */
static struct blob_meta meta_of(size_t count, const float *f)
{
	struct blob_meta m;
	memset(&m, 0, sizeof m);
	snprintf(m.codec, sizeof m.codec, "%s", BLOB_FP16);
	m.count = count;
	m.nbytes = count * 2;
	m.crc32 = (uint32_t)crc32(0, (const unsigned char *)f, (unsigned)(count * 4));
	return m;
}

/* Every finite half decodes and encodes back to itself; its value is the formula's. */
static void all_halves(struct blob_codec *c)
{
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	size_t n = 0, wrong = 0;
	for (unsigned h = 0; h < NH; h++) {
		unsigned e = (h >> 10) & 0x1f, mant = h & 0x3ff;
		double x;
		if (e == 0x1f)
			continue;
		x = e ? ldexp(1 + mant / 1024.0, (int)e - 15) : ldexp(mant, -24);
		v[n] = (float)(h & 0x8000 ? -x : x);
		halves[2 * n] = (unsigned char)(h & 0xff);
		halves[2 * n + 1] = (unsigned char)(h >> 8);
		n++;
	}
	m = meta_of(n, v);
	ok(blob_decode(c, halves, &m, w, n, err) == 0, "all %zu finite halves decode: %s", n, err);
	for (size_t i = 0; i < n; i++)
		wrong += memcmp(&v[i], &w[i], 4) != 0;
	ok(wrong == 0, "each decodes to its exact value (%zu wrong)", wrong);
	ok(blob_encode(c, w, n, BLOB_FP16, -1, &out, &m, err) == 0 && m.nbytes == 2 * n &&
		   !memcmp(out, halves, 2 * n),
	   "and encodes back to the same bytes");
	ok(m.crc32 == (uint32_t)crc32(0, (const unsigned char *)v, (unsigned)(n * 4)),
	   "the CRC is that of the decoded floats");
}

/* x rounds to want (exactly). */
static int rounds_to(struct blob_codec *c, float x, float want)
{
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	float got = NAN, back;
	if (blob_encode(c, &x, 1, BLOB_FP16, -1, &out, &m, err) < 0)
		return 0;
	back = blob_encoded_values(c, &x)[0];
	memcpy(copy, out, 2);
	if (blob_decode(c, copy, &m, &got, 1, err) < 0)
		return 0;
	if (got != want)
		diag("%.9g rounds to %.9g, want %.9g", x, got, want);
	return got == want && back == want && signbit(got) == signbit(want);
}

/* The portable kernels and F16C's: the same halves and values for every half's neighbourhood
 * (each finite half, and the floats a quarter of its step either side: ties, carries,
 * subnormals), beyond ±65504, with and without a residual; and the same decoded floats. */
static void levels_agree(struct blob_codec *c)
{
	static unsigned char h[2][NH * 2 * 3];
	static float x3[NH * 3], rs[2][NH * 3], dec[2][NH * 3];
	int simd = quant_simd(-1), same = 1;
	size_t n = 0;
	for (unsigned u = 0; u < NH; u++) {
		unsigned e = u >> 10 & 0x1f;
		double x, q;
		if (e == 0x1f)
			continue;
		x = e ? ldexp(1 + (u & 0x3ff) / 1024.0, (int)e - 15) : ldexp(u & 0x3ff, -24);
		q = ldexp(1, (e > 1 ? (int)e : 1) - 27); /* a quarter of the half's step */
		x = u & 0x8000 ? -x : x;
		x3[n] = (float)x;
		x3[n + 1] = (float)(x + 2 * q); /* halfway to the next half: a tie */
		x3[n + 2] = (float)(x - q);
		n += 3;
	}
	x3[0] = 1e9f;
	x3[1] = -65519.0f;
	x3[2] = 65520.0f;
	for (int level = 0; level <= simd; level++) {
		struct blob_meta m;
		const void *out;
		char err[GEM_ERRMAX];
		quant_simd(level);
		for (size_t i = 0; i < n; i++)
			rs[level][i] = x3[(i * 7) % n] * 0x1p-12f;
		if (blob_encode(c, x3, n, BLOB_FP16, -1, &out, &m, err) < 0)
			same = 0;
		else
			memcpy(h[level], out, 2 * n);
		if (blob_decode(c, h[level], &m, dec[level], n, err) < 0)
			same = 0;
		if (blob_encode_feedback(c, x3, rs[level], n, BLOB_FP16, -1, &out, &m, err) < 0)
			same = 0;
	}
	quant_simd(simd);
	ok(same && (simd == 0 || (!memcmp(h[0], h[1], 2 * n) && !memcmp(dec[0], dec[1], n * 4) &&
				  !memcmp(rs[0], rs[1], n * 4))),
	   "portable and F16C kernels: the same halves, values and residuals for %zu floats at, "
	   "between and beside every half (simd %d)", n, simd);
}

int main(void)
{
	struct blob_codec c;
	struct blob_meta m;
	const void *out;
	char err[GEM_ERRMAX];
	struct rng r;
	double worst_rel = 0, worst_abs = 0;
	int ok_enc = 1;

	blob_codec_init(&c);
	ok(blob_codec_known(BLOB_FP16) && blob_codec_lossy(BLOB_FP16) && !blob_codec_lossy(BLOB_RAW) &&
		   !blob_codec_lossy(BLOB_ZLIB_SHUFFLE) && !blob_codec_lossy(BLOB_ZLIB),
	   "fp16 is known and lossy, the zlib codecs and raw are not");
	ok(blob_encode(&c, v, 1, "fp8", -1, &out, &m, err) == GEM_EUSAGE && strstr(err, "raw, zlib, zlib+shuffle, fp16"),
	   "an unknown codec lists the known ones: %s", err);
	all_halves(&c);
	levels_agree(&c);

	/* ties to even, carries, subnormals, saturation */
	ok(rounds_to(&c, 1 + 0x1p-11f, 1) && rounds_to(&c, 1 + 3 * 0x1p-11f, 1 + 0x1p-9f),
	   "a tie rounds to the even half (1 + 2^-11 → 1, 1 + 3·2^-11 → 1 + 2^-9)");
	ok(rounds_to(&c, 2047.9f, 2048) && rounds_to(&c, -0x1p-25f, -0.0f) &&
		   rounds_to(&c, 0x1.8p-24f, 0x1p-23f) && rounds_to(&c, 0x1p-14f - 0x1p-26f, 0x1p-14f),
	   "a carry steps the exponent; subnormal ties to even; the largest subnormal rounds up to 2^-14");
	ok(rounds_to(&c, 65504, 65504) && rounds_to(&c, 1e9f, 65504) && rounds_to(&c, -70000, -65504),
	   "beyond ±65504 saturates");
	{
		float bad[3] = {1, INFINITY, 2};
		ok(blob_encode(&c, bad, 3, BLOB_FP16, -1, &out, &m, err) == GEM_EUSAGE,
		   "a non-finite vector is not encoded: %s", err);
	}

	/* the bound: |fp16(x) − x| <= 2^-11·|x| for normal halves, 2^-25 below 2^-14 */
	rng_seed(&r, 7, 1);
	for (size_t i = 0; i < N; i++)
		v[i] = (float)(rng_normal(&r) * ldexp(1, (int)(rng_float(&r) * 40) - 30));
	ok_enc = blob_encode(&c, v, N, BLOB_FP16, -1, &out, &m, err) == 0;
	memcpy(copy, out, m.nbytes);
	ok(ok_enc && blob_decode(&c, copy, &m, w, N, err) == 0, "%d floats over 40 binades round-trip",
	   N);
	for (size_t i = 0; i < N; i++) {
		double e = fabs((double)w[i] - v[i]);
		if (fabs(v[i]) >= 0x1p-14)
			worst_rel = fmax(worst_rel, e / fabs(v[i]));
		else
			worst_abs = fmax(worst_abs, e);
	}
	ok(worst_rel <= 0x1p-11 && worst_rel > 0x1p-13,
	   "relative error at most 2^-11 (half an ulp) for normal halves: %.3g", worst_rel);
	ok(worst_abs <= 0x1p-25, "absolute error at most 2^-25 for subnormal halves: %.3g", worst_abs);

	/* hostile blobs: v untouched */
	{
		float keep[4] = {9, 9, 9, 9}, f4[4] = {1, 2, 3, 4};
		unsigned char b[8];
		ok(blob_encode(&c, f4, 4, BLOB_FP16, -1, &out, &m, err) == 0, "4 floats encoded");
		memcpy(b, out, 8);
		b[5] = 0x7c, b[4] = 0; /* +∞ */
		ok(blob_decode(&c, b, &m, keep, 4, err) == GEM_EFAIL && strstr(err, "element 2") &&
			   keep[0] == 9 && keep[3] == 9,
		   "an infinite half is refused, v untouched: %s", err);
		b[5] = 0xfe; /* NaN */
		ok(blob_decode(&c, b, &m, keep, 4, err) == GEM_EFAIL && keep[1] == 9,
		   "a NaN half is refused: %s", err);
		memcpy(b, out, 8);
		b[0] ^= 1;
		ok(blob_decode(&c, b, &m, keep, 4, err) == GEM_EFAIL && strstr(err, "CRC") && keep[0] == 9,
		   "a flipped bit fails the CRC: %s", err);
		m.nbytes = 16;
		ok(blob_decode(&c, b, &m, keep, 4, err) == GEM_EFAIL && strstr(err, "size"),
		   "a raw-sized fp16 blob is refused: %s", err);
		m.nbytes = 8;
		m.count = 3;
		ok(blob_decode(&c, b, &m, keep, 4, err) == GEM_EFAIL, "a wrong count is refused: %s",
		   err);
	}

	/* error feedback: 300 small updates, some below the smallest half; Σ sent + r = Σ u */
	{
		double worst = 0, lost_plain = 0;
		int fb_ok = 1;
		memset(resid, 0, sizeof resid);
		for (int k = 0; k < 300 && fb_ok; k++) {
			for (size_t i = 0; i < N; i++) {
				v[i] = (float)(rng_normal(&r) * ldexp(1, -10 - (int)(i % 20)));
				sum_true[i] += v[i];
			}
			fb_ok = blob_encode_feedback(&c, v, resid, N, BLOB_FP16, -1, &out, &m, err) == 0;
			memcpy(copy, out, m.nbytes);
			fb_ok = fb_ok && blob_decode(&c, copy, &m, sent, N, err) == 0;
			for (size_t i = 0; i < N; i++)
				sum_sent[i] += sent[i];
		}
		ok(fb_ok, "300 updates sent with error feedback");
		for (size_t i = 0; i < N; i++) {
			/* float sums of 300 terms: a few ulps of the largest partial sum */
			double tol = 1e-4 * ldexp(1, -10 - (int)(i % 20)) + 1e-12;
			double e = fabs((double)sum_sent[i] + resid[i] - sum_true[i]);
			worst = fmax(worst, e / tol);
			lost_plain += fabs(resid[i]) > 0;
		}
		ok(worst <= 1, "Σ sent + residual = Σ updates within float rounding (worst %.3g of the bound)",
		   worst);
		ok(lost_plain > 0, "the residuals are not all zero (%g of %d elements)", lost_plain, N);
		ok(fabs(resid[19]) <= 0x1p-25, "a residual stays below half the smallest half's step");
		/* lossless codecs: plain encoding, the residual untouched */
		resid[0] = 5;
		ok(blob_encode_feedback(&c, v, resid, N, BLOB_RAW, -1, &out, &m, err) == 0 && out == v &&
			   resid[0] == 5,
		   "raw: no feedback, the residual untouched");
	}
	blob_codec_free(&c);
	return done_testing();
}
