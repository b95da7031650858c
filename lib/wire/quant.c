#include "wire/quant.h"

#include "base/cpulevel.h"
#include "base/err.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QUANT_X86 1
#define QUANT_AVX2 __attribute__((target("avx2")))
#define QUANT_F16C __attribute__((target("avx2,f16c")))
#include <cpuid.h>
#include <immintrin.h>
#endif
#define QUANT_INLINE static inline __attribute__((always_inline))
#define QUANT_NOINLINE __attribute__((noinline))

static int quant_forced = -1; /* tests: a level forced; -1 asks the CPU */
static int quant_have;          /* what the CPU has: asked once (cpuid is slow in a VM) */
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;

static void quant_ask_cpu(void)
{
#ifdef QUANT_X86
	/* F16C by cpuid: clang's __builtin_cpu_supports does not know it */
	unsigned a, b, c = 0, d;
	quant_have = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
		     (c & bit_F16C);
#endif
}

static int quant_available(void)
{
	pthread_once(&quant_once, quant_ask_cpu);
	return quant_have;
}

int quant_simd(int level)
{
	return cpulevel_force(&quant_forced, quant_available(), level);
}

static int quant_avx2(void)
{
	return cpulevel_get(&quant_forced, quant_available()) == 1;
}

/* ---- fp16: IEEE 754 binary16, 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits ---- */
#define HALF_MAX_BITS 0x477fe000u /* 65504, the largest finite half, as float bits */
#define HALF_MIN_NORMAL_BITS 0x38800000u /* 2^-14 */

/* f (finite) to the nearest half, ties to even; beyond ±65504 saturated. Both roundings are
 * computed and one selected, without a branch, so that the loops over a vector vectorise. */
QUANT_INLINE uint32_t half_of(float f)
{
	uint32_t x, a, sign, sub, nor, b, rb, m;
	float r;
	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000u;
	a = x & 0x7fffffffu;
	/* below 2^-14, a subnormal half m·2^-24: m = |f|·2^24 < 1024 rounded to an integer by
	 * adding 2^23, which the FPU's default mode rounds to nearest even; the sum's mantissa
	 * bits are m (m = 1024 is the bit pattern of 2^-14, the smallest normal) */
	r = fabsf(f) * 16777216.0f + 8388608.0f;
	memcpy(&rb, &r, sizeof rb);
	sub = rb - 0x4b000000u;
	/* normal: rebias the exponent (127 → 15), drop 13 mantissa bits rounding to nearest
	 * even; a carry out of the mantissa steps the exponent up, as it should */
	b = a - ((127u - 15u) << 23);
	nor = (b + 0xfffu + ((b >> 13) & 1u)) >> 13;
	/* selects as masks: gcc -O2 turns ?: here into branches */
	m = 0u - (uint32_t)(a < HALF_MIN_NORMAL_BITS);
	nor = (sub & m) | (nor & ~m);
	m = 0u - (uint32_t)(a > HALF_MAX_BITS);
	return sign | (0x7bffu & m) | (nor & ~m);
}

/* A half to float, exactly; *bad gets a non-zero bit if it is infinite or NaN. */
QUANT_INLINE float float_of_half(uint32_t h, uint32_t *bad)
{
	uint32_t sign = (h & 0x8000u) << 16, e = h & 0x7c00u, x, s, m = 0u - (uint32_t)(e != 0);
	float sub = (float)(h & 0x3ffu) * 5.9604644775390625e-8f; /* m·2^-24, exact */
	float out;
	memcpy(&s, &sub, sizeof s);
	x = ((((h & 0x7fffu) << 13) + ((127u - 15u) << 23)) & m) | (s & ~m) | sign;
	*bad |= e == 0x7c00u;
	memcpy(&out, &x, sizeof out);
	return out;
}

/* The fp16 loops run in blocks of FP16_BLOCK with a fixed-count inner loop (gcc -O2's
 * vectoriser takes only loops whose count it knows), then a scalar tail. */
#define FP16_BLOCK 8

/* x into its half at out and the value that decodes to at back; *nonfinite gets a bit if x is
 * infinite or NaN. */
QUANT_INLINE float fp16_put(unsigned char *restrict out, float *restrict back, float x,
			    uint32_t *nonfinite)
{
	uint32_t h = half_of(x), bits, unused = 0;
	uint16_t h16 = (uint16_t)h;
	memcpy(&bits, &x, sizeof bits);
	*nonfinite |= (bits & 0x7fffffffu) >= 0x7f800000u;
	memcpy(out, &h16, 2);
	return *back = float_of_half(h, &unused);
}

QUANT_INLINE int fp16_encode_in(unsigned char *restrict out, float *restrict back,
				const float *restrict v, float *restrict resid, size_t n)
{
	uint32_t nonfinite = 0;
	size_t i = 0;
	if (resid) {
		for (; i + FP16_BLOCK <= n; i += FP16_BLOCK)
			for (int j = 0; j < FP16_BLOCK; j++) {
				float x = v[i + j] + resid[i + j];
				resid[i + j] = x - fp16_put(out + 2 * (i + j), back + i + j, x, &nonfinite);
			}
		for (; i < n; i++) {
			float x = v[i] + resid[i];
			resid[i] = x - fp16_put(out + 2 * i, back + i, x, &nonfinite);
		}
	} else {
		for (; i + FP16_BLOCK <= n; i += FP16_BLOCK)
			for (int j = 0; j < FP16_BLOCK; j++)
				fp16_put(out + 2 * (i + j), back + i + j, v[i + j], &nonfinite);
		for (; i < n; i++)
			fp16_put(out + 2 * i, back + i, v[i], &nonfinite);
	}
	return nonfinite ? -1 : 0;
}

QUANT_INLINE float fp16_get(const unsigned char *in, uint32_t *bad)
{
	uint16_t h;
	memcpy(&h, in, 2);
	return float_of_half(h, bad);
}

/* 1 if a half is infinite or NaN */
QUANT_INLINE int fp16_decode_in(float *restrict v, const unsigned char *restrict in, size_t n)
{
	uint32_t any = 0;
	size_t i = 0;
	for (; i + FP16_BLOCK <= n; i += FP16_BLOCK)
		for (int j = 0; j < FP16_BLOCK; j++)
			v[i + j] = fp16_get(in + 2 * (i + j), &any);
	for (; i < n; i++)
		v[i] = fp16_get(in + 2 * i, &any);
	return any != 0;
}

QUANT_NOINLINE static int fp16_encode_c(unsigned char *restrict out, float *restrict back,
					 const float *restrict v, float *restrict resid, size_t n)
{
	return fp16_encode_in(out, back, v, resid, n);
}

QUANT_NOINLINE static int fp16_decode_c(float *restrict v, const unsigned char *restrict in,
					 size_t n)
{
	return fp16_decode_in(v, in, n);
}

#ifdef QUANT_X86
/* F16C's conversions round to nearest even as half_of does; clamped to ±65504 first, they
 * saturate as it does too */
QUANT_NOINLINE QUANT_F16C static int fp16_encode_avx2(unsigned char *restrict out,
						       float *restrict back, const float *restrict v,
						       float *restrict resid, size_t n)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), finite = _mm256_set1_epi32(0x7f7fffff);
	const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
	__m256i nonfinite = _mm256_setzero_si256();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(v + i), b;
		__m128i h;
		if (resid)
			x = _mm256_add_ps(x, _mm256_loadu_ps(resid + i));
		nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpgt_epi32(_mm256_and_si256(
								       _mm256_castps_si256(x), absmask),
							       finite));
		h = _mm256_cvtps_ph(_mm256_min_ps(_mm256_max_ps(x, lo), hi), _MM_FROUND_TO_NEAREST_INT);
		b = _mm256_cvtph_ps(h);
		_mm_storeu_si128((__m128i *)(void *)(out + 2 * i), h);
		_mm256_storeu_ps(back + i, b);
		if (resid)
			_mm256_storeu_ps(resid + i, _mm256_sub_ps(x, b));
	}
	return fp16_encode_in(out + 2 * i, back + i, v + i, resid ? resid + i : NULL, n - i) |
	       -!_mm256_testz_si256(nonfinite, nonfinite);
}

QUANT_NOINLINE QUANT_F16C static int fp16_decode_avx2(float *restrict v,
						       const unsigned char *restrict in, size_t n)
{
	const __m128i expo = _mm_set1_epi16(0x7c00);
	__m128i bad = _mm_setzero_si128();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i));
		bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, expo), expo));
		_mm256_storeu_ps(v + i, _mm256_cvtph_ps(h));
	}
	return fp16_decode_in(v + i, in + 2 * i, n - i) | !_mm_testz_si128(bad, bad);
}
#endif

int quant_fp16_encode(unsigned char *out, float *back, const float *v, float *resid, size_t n)
{
#ifdef QUANT_X86
	if (quant_avx2())
		return fp16_encode_avx2(out, back, v, resid, n);
#endif
	return fp16_encode_c(out, back, v, resid, n);
}

int quant_fp16_decode(float *v, const unsigned char *in, size_t n, char *err)
{
	size_t bad = 0;
	int any;
#ifdef QUANT_X86
	if (quant_avx2())
		any = fp16_decode_avx2(v, in, n);
	else
#endif
		any = fp16_decode_c(v, in, n);
	if (!any)
		return 0;
	while (bad < n && (in[2 * bad + 1] & 0x7c) != 0x7c)
		bad++;
	return gem_errf(err, GEM_EFAIL, "fp16 element %zu is infinite or NaN", bad);
}

/* ---- int8 and int4: blocks of QUANT_BLOCK elements, a float32 scale s and the values q ----
 *
 * A block of x: m = max |x_i|; s = m / L and q_i = x_i · (L / m) clamped to ±L and rounded to
 * the nearest integer, ties to even, with L = 127 (int8) or 7 (int4); below QUANT_TINY, s = 0 and
 * every q_i = 0 (L / m would overflow). A value decodes to (float)q_i · s. Each division,
 * product and rounding is one IEEE operation in float32, in both builds: the portable one rounds
 * by adding and taking away 1.5·2^23, the AVX2 one with vcvtps2dq, both to nearest even in the
 * FPU's default mode. */
#define ROUND 12582912.0f

/* Bytes of the values of a block of m elements. */
static size_t int_vbytes(size_t m, int bits)
{
	return bits == 8 ? m : (m + 1) / 2;
}

size_t quant_int_size(size_t n, int bits)
{
	size_t full = n / QUANT_BLOCK, tail = n % QUANT_BLOCK;
	return full * (4 + int_vbytes(QUANT_BLOCK, bits)) + (tail ? 4 + int_vbytes(tail, bits) : 0);
}

QUANT_INLINE uint32_t abs_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u & 0x7fffffffu;
}

/* The scale of a block whose largest |x| has the bits mbits, and its factor L / m; 1 if L·s is
 * not finite (the block is beyond the codec's range). */
static int int_scale(uint32_t mbits, float L, float *s, float *inv)
{
	float m;
	memcpy(&m, &mbits, sizeof m);
	*s = *inv = 0;
	if (m < QUANT_TINY)
		return 0;
	*s = m / L;
	*inv = L / m;
	return !(L * *s <= FLT_MAX);
}

/* What an encoder encodes: x = v, v + r (error feedback: r ← x − the values sent) or v − r (a
 * difference from the receiver's copy r: r ← r + the values sent; x never stored whole). */
enum quant_of { OF_V, OF_ADD, OF_SUB };

/* A block's encoder: x (of v and r) into out (scale, then values) and back, r updated. 1: an x
 * is not finite; 2: the block is beyond the codec's range; 3 (OF_SUB, checked first): a |v| or
 * |r| has the bits big or more. */
typedef int int_encode_fn(unsigned char *restrict out, float *restrict back,
			  const float *restrict v, float *restrict r, int bits, enum quant_of of,
			  uint32_t big);
/* A block's decoder (its scale s checked): 1 if a value is −L−1. */
typedef int int_decode_fn(float *restrict v, const unsigned char *restrict in, float s,
			  int bits);

static int int_encode_block_c(unsigned char *restrict out, float *restrict back,
			      const float *restrict v, float *restrict r, int bits, enum quant_of of,
			      uint32_t big)
{
	const float L = bits == 8 ? 127.0f : 7.0f;
	uint32_t mbits = 0, nonfinite = 0, most = 0;
	float s, inv;
	for (int j = 0; j < QUANT_BLOCK; j++) {
		float x = of == OF_ADD ? v[j] + r[j] : of == OF_SUB ? v[j] - r[j] : v[j];
		uint32_t a = abs_bits(x);
		if (of == OF_SUB) {
			uint32_t av = abs_bits(v[j]), ar = abs_bits(r[j]);
			most = av > most ? av : most;
			most = ar > most ? ar : most;
		}
		back[j] = x;
		nonfinite |= a > 0x7f7fffffu;
		mbits = a > mbits ? a : mbits;
	}
	if (of == OF_SUB && most >= big)
		return 3;
	if (nonfinite)
		return 1;
	if (int_scale(mbits, L, &s, &inv))
		return 2;
	memcpy(out, &s, sizeof s);
	out += sizeof s;
	if (bits == 4)
		memset(out, 0, QUANT_BLOCK / 2);
	for (int j = 0; j < QUANT_BLOCK; j++) {
		float x = back[j], y = x * inv;
		int q;
		y = y > L ? L : y < -L ? -L : y;
		y = (y + ROUND) - ROUND;
		q = (int)y;
		back[j] = y * s;
		if (of == OF_ADD)
			r[j] = x - back[j];
		else if (of == OF_SUB)
			r[j] = r[j] + back[j];
		if (bits == 8)
			out[j] = (unsigned char)(q & 0xff);
		else
			out[j / 2] |= (unsigned char)((q & 15) << 4 * (j & 1));
	}
	return 0;
}

static int int_decode_block_c(float *restrict v, const unsigned char *restrict in, float s,
			      int bits)
{
	int bad = 0;
	for (int j = 0; j < QUANT_BLOCK; j++) {
		/* int8: a signed byte; int4: a nibble (element 2i low, 2i + 1 high), sign-extended */
		int q = bits == 8 ? (in[j] ^ 0x80) - 0x80 : ((in[j / 2] >> 4 * (j & 1) & 15) ^ 8) - 8;
		bad |= q == (bits == 8 ? -128 : -8);
		v[j] = (float)q * s;
	}
	return bad;
}

#ifdef QUANT_X86
QUANT_AVX2 static int int_encode_block_avx2(unsigned char *restrict out, float *restrict back,
					    const float *restrict v, float *restrict r, int bits,
					    enum quant_of of, uint32_t big)
{
	const float L = bits == 8 ? 127.0f : 7.0f;
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), finite = _mm256_set1_epi32(0x7f7fffff),
		      bigger = _mm256_set1_epi32((int)(big - 1));
	__m256i mx = _mm256_setzero_si256(), nonfinite = _mm256_setzero_si256(),
		large = _mm256_setzero_si256();
	__m256 vinv, vs, hi = _mm256_set1_ps(L), lo = _mm256_set1_ps(-L);
	__m128i m4;
	float s, inv;
	for (int j = 0; j < QUANT_BLOCK; j += 8) {
		__m256 x = _mm256_loadu_ps(v + j);
		__m256i a;
		if (of == OF_ADD) {
			x = _mm256_add_ps(x, _mm256_loadu_ps(r + j));
		} else if (of == OF_SUB) {
			__m256 y = _mm256_loadu_ps(r + j);
			__m256i m = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(x), absmask),
						     _mm256_and_si256(_mm256_castps_si256(y), absmask));
			large = _mm256_or_si256(large, _mm256_cmpgt_epi32(m, bigger));
			x = _mm256_sub_ps(x, y);
		}
		_mm256_storeu_ps(back + j, x);
		a = _mm256_and_si256(_mm256_castps_si256(x), absmask);
		nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpgt_epi32(a, finite));
		mx = _mm256_max_epi32(mx, a);
	}
	if (of == OF_SUB && !_mm256_testz_si256(large, large))
		return 3;
	if (!_mm256_testz_si256(nonfinite, nonfinite))
		return 1;
	m4 = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
	m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
	m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xb1));
	if (int_scale((uint32_t)_mm_cvtsi128_si32(m4), L, &s, &inv))
		return 2;
	memcpy(out, &s, sizeof s);
	out += sizeof s;
	vinv = _mm256_set1_ps(inv);
	vs = _mm256_set1_ps(s);
	for (int j = 0; j < QUANT_BLOCK; j += 32) {
		__m256i q[4], p;
		for (int h = 0; h < 4; h++) {
			__m256 x = _mm256_loadu_ps(back + j + 8 * h), b;
			q[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, vinv), lo), hi));
			b = _mm256_mul_ps(_mm256_cvtepi32_ps(q[h]), vs);
			if (of == OF_ADD)
				_mm256_storeu_ps(r + j + 8 * h, _mm256_sub_ps(x, b));
			else if (of == OF_SUB)
				_mm256_storeu_ps(r + j + 8 * h,
						 _mm256_add_ps(_mm256_loadu_ps(r + j + 8 * h), b));
			_mm256_storeu_ps(back + j + 8 * h, b);
		}
		/* 32 bytes in order: the packs work within 128-bit lanes, the permute undoes it */
		p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		if (bits == 8) {
			_mm256_storeu_si256((__m256i *)(void *)(out + j), p);
		} else {
			/* 16-bit word i holds elements 2i (low byte) and 2i + 1: their nibbles */
			__m256i t = _mm256_or_si256(_mm256_and_si256(p, _mm256_set1_epi16(0x000f)),
						    _mm256_and_si256(_mm256_srli_epi16(p, 4),
								     _mm256_set1_epi16(0x00f0)));
			_mm_storeu_si128((__m128i *)(void *)(out + j / 2),
					 _mm_packus_epi16(_mm256_castsi256_si128(t),
							  _mm256_extracti128_si256(t, 1)));
		}
	}
	return 0;
}

/* 8 signed bytes at q, times s, into v */
QUANT_INLINE QUANT_AVX2 void int_put8(float *v, __m128i q, __m256 s)
{
	_mm256_storeu_ps(v, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s));
}

QUANT_AVX2 static int int_decode_block_avx2(float *restrict v, const unsigned char *restrict in,
					    float s, int bits)
{
	__m256 vs = _mm256_set1_ps(s);
	__m128i bad = _mm_setzero_si128();
	for (int j = 0; j < QUANT_BLOCK; j += 32) {
		__m128i e[2];
		if (bits == 8) {
			e[0] = _mm_loadu_si128((const __m128i *)(const void *)(in + j));
			e[1] = _mm_loadu_si128((const __m128i *)(const void *)(in + j + 16));
			bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmpeq_epi8(e[0], _mm_set1_epi8(-128)),
							     _mm_cmpeq_epi8(e[1], _mm_set1_epi8(-128))));
		} else {
			__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(in + j / 2));
			__m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
			__m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
			for (int h = 0; h < 2; h++) {
				e[h] = h ? _mm_unpackhi_epi8(lo, hi) : _mm_unpacklo_epi8(lo, hi);
				e[h] = _mm_sub_epi8(_mm_xor_si128(e[h], _mm_set1_epi8(8)), _mm_set1_epi8(8));
				bad = _mm_or_si128(bad, _mm_cmpeq_epi8(e[h], _mm_set1_epi8(-8)));
			}
		}
		for (int h = 0; h < 2; h++) {
			int_put8(v + j + 16 * h, e[h], vs);
			int_put8(v + j + 16 * h + 8, _mm_srli_si128(e[h], 8), vs);
		}
	}
	return !_mm_testz_si128(bad, bad);
}
#endif

/* The whole blocks of n; the first failing block's index in *at. */
static int int_encode_blocks(unsigned char *out, float *back, const float *v, float *r,
			     size_t nblocks, int bits, enum quant_of of, uint32_t big, size_t *at)
{
	size_t step = 4 + int_vbytes(QUANT_BLOCK, bits);
	int_encode_fn *block = int_encode_block_c;
#ifdef QUANT_X86
	if (quant_avx2())
		block = int_encode_block_avx2;
#endif
	for (size_t b = 0; b < nblocks; b++) {
		size_t o = b * QUANT_BLOCK;
		int rc = block(out + b * step, back + o, v + o, r ? r + o : NULL, bits, of, big);
		if (rc) {
			*at = b;
			return rc;
		}
	}
	return 0;
}

/* A scale is finite, not negative (no sign bit, not even −0), and L·s is finite. */
static int int_scale_ok(float s, int bits)
{
	uint32_t u;
	memcpy(&u, &s, sizeof u);
	return !(u >> 31) && (bits == 8 ? 127.0f : 7.0f) * s <= FLT_MAX;
}

/* The whole blocks of in; the first failing block's index in *at, 1: a scale, 2: a value. */
static int int_decode_blocks(float *v, const unsigned char *in, size_t nblocks, int bits,
			     size_t *at)
{
	size_t step = 4 + int_vbytes(QUANT_BLOCK, bits);
	int_decode_fn *block = int_decode_block_c;
#ifdef QUANT_X86
	if (quant_avx2())
		block = int_decode_block_avx2;
#endif
	for (size_t b = 0; b < nblocks; b++) {
		float s;
		memcpy(&s, in + b * step, sizeof s);
		*at = b;
		if (!int_scale_ok(s, bits))
			return 1;
		if (block(v + b * QUANT_BLOCK, in + b * step + 4, s, bits))
			return 2;
	}
	return 0;
}

/* quant_int_encode of x (of v and r); 1 (OF_SUB): a |v| or |r| has the bits big or more. */
static int int_encode(unsigned char *out, float *back, const float *v, float *r, size_t n,
		      int bits, enum quant_of of, uint32_t big, char *err)
{
	size_t full = n / QUANT_BLOCK, tail = n % QUANT_BLOCK, at = 0;
	int rc = int_encode_blocks(out, back, v, r, full, bits, of, big, &at);
	if (rc == 0 && tail) {
		/* the last, short block padded with zeros, which change neither its largest |x|
		 * nor, in int4, the unused nibble (0) */
		float pv[QUANT_BLOCK] = {0}, pb[QUANT_BLOCK], pr[QUANT_BLOCK] = {0};
		unsigned char po[4 + QUANT_BLOCK];
		size_t o = full * QUANT_BLOCK;
		memcpy(pv, v + o, tail * sizeof *v);
		if (r)
			memcpy(pr, r + o, tail * sizeof *r);
		rc = int_encode_blocks(po, pb, pv, r ? pr : NULL, 1, bits, of, big, &at);
		at = full;
		memcpy(out + quant_int_size(o, bits), po, 4 + int_vbytes(tail, bits));
		memcpy(back + o, pb, tail * sizeof *back);
		if (r)
			memcpy(r + o, pr, tail * sizeof *r);
	}
	if (rc == 3)
		return 1;
	if (rc == 1)
		return gem_errf(err, GEM_EUSAGE, "int%d of a vector that is not finite (block %zu)",
				bits, at);
	if (rc == 2)
		return gem_errf(err, GEM_EUSAGE,
				"int%d: block %zu's largest |x| is beyond the codec's range", bits, at);
	return 0;
}

int quant_int_encode(unsigned char *out, float *back, const float *v, float *resid, size_t n,
		     int bits, char *err)
{
	return int_encode(out, back, v, resid, n, bits, resid ? OF_ADD : OF_V, 0, err);
}

int quant_int_encode_diff(unsigned char *out, float *back, const float *a, float *b, size_t n,
			  int bits, float bound, char *err)
{
	uint32_t big;
	memcpy(&big, &bound, sizeof big);
	return int_encode(out, back, a, b, n, bits, OF_SUB, big, err);
}

int quant_int_decode(float *v, const unsigned char *in, size_t nbytes, size_t n, int bits,
		     char *err)
{
	size_t full = n / QUANT_BLOCK, tail = n % QUANT_BLOCK, at = 0, want = quant_int_size(n, bits);
	int rc;
	if (nbytes != want)
		return gem_errf(err, GEM_EFAIL, "int%d size %zu bytes, want %zu for %zu elements", bits,
				nbytes, want, n);
	rc = int_decode_blocks(v, in, full, bits, &at);
	if (rc == 0 && tail) {
		float pv[QUANT_BLOCK];
		unsigned char pi[4 + QUANT_BLOCK] = {0};
		size_t vb = int_vbytes(tail, bits);
		memcpy(pi, in + quant_int_size(full * QUANT_BLOCK, bits), 4 + vb);
		at = full;
		if (bits == 4 && tail % 2 && pi[4 + vb - 1] >> 4)
			return gem_errf(err, GEM_EFAIL,
					"int4: the unused high nibble of the last byte is not 0");
		rc = int_decode_blocks(pv, pi, 1, bits, &at);
		at = full;
		memcpy(v + full * QUANT_BLOCK, pv, tail * sizeof *v);
	}
	if (rc == 1)
		return gem_errf(err, GEM_EFAIL,
				"int%d: block %zu's scale is negative, not finite or too large", bits,
				at);
	if (rc == 2)
		return gem_errf(err, GEM_EFAIL, "int%d: block %zu holds the value %d, outside ±%d",
				bits, at, bits == 8 ? -128 : -8, bits == 8 ? 127 : 7);
	return 0;
}

/* ---- top-k: the k largest |x| as (index, value) pairs ----
 *
 * The layout: k (uint32), k halves (the values, in index order), then the k indices, each as
 * its gap from the one before (the first: the index itself; then index − previous − 1) in LEB128
 * (7 bits a byte, low first, the high bit set on every byte but the last). The k-th largest
 * |x| is found by a radix select on the bits of |x| (which order like the numbers) among
 * candidates: a strided sample of at most TOPK_SAMPLE elements says a key lo that a few more
 * than k elements reach and a key hi that a few fewer than k exceed; one pass adds the
 * residual, checks, and gathers the indices and values of those that reach lo (all of them if
 * fewer than k do: then a second pass); a vector pass counts those above hi and keeps the keys
 * of the band [lo, hi] between, where the k-th falls; histograms of those keys, 11 bits at a time
 * from the top of their range down, each among the keys left in the bucket the k-th falls in,
 * find it. No sort, and one pass over the vector besides the sample's; the candidates and the
 * k sent are moved by AVX2 permutes where the CPU has it. */
#define TOPK_SAMPLE 4096
#define TOPK_VARINT_MAX 5

size_t quant_topk_k(size_t n, double f)
{
	double k = ceil(f * (double)n);
	if (!n)
		return 0;
	return k < 1 ? 1 : k > (double)n ? n : (size_t)k;
}

size_t quant_topk_bound(size_t k)
{
	return 4 + k * (2 + TOPK_VARINT_MAX);
}

/* The bucket (of nb, from the top) in which the k-th largest of the keys falls, given their
 * histogram h; *above: how many keys lie in higher buckets. */
static uint32_t topk_bucket(const uint32_t *h, uint32_t nb, size_t k, size_t *above)
{
	uint32_t b = nb;
	*above = 0;
	while (b-- > 1 && *above + h[b] < k)
		*above += h[b];
	return b;
}

/* The k-th largest (1 <= k <= m) of the m keys |x| of x[0..m), all in [lo, lo + span], and in
 * *gt how many exceed it; x NULL: of the keys already in a, each less lo. A radix select on
 * d = key − lo, 11 bits a level (fewer for few keys) from span's highest bit down: spread over
 * the whole range of the keys, the first level's histogram seldom counts one bucket twice in a
 * row (each count would wait on the one before). Each level but the last keeps the keys of the
 * k-th's bucket, in a (m uint32s) for the next. */
static uint32_t topk_kth(const float *x, uint32_t *a, size_t m, size_t k, uint32_t lo,
			 uint32_t span, size_t *gt)
{
	uint32_t h[1u << 11], d = 0;
	int hi = span ? 32 - __builtin_clz(span) : 0;
	*gt = 0;
	for (int first = x != NULL;; first = 0) {
		/* 11 bits a level, fewer for few keys: a level's histogram is cleared and scanned */
		int bits = m >= 1024 ? 11 : m >= 32 ? 32 - __builtin_clz((uint32_t)m) : 5;
		int sh = hi > bits ? hi - bits : 0;
		uint32_t nb = 1u << (hi - sh), b;
		size_t above, c = 0;
		memset(h, 0, nb * sizeof *h);
		if (first)
			for (size_t i = 0; i < m; i++)
				h[(abs_bits(x[i]) - lo) >> sh]++;
		else
			for (size_t i = 0; i < m; i++)
				h[a[i] >> sh & (nb - 1)]++;
		b = topk_bucket(h, nb, k, &above);
		*gt += above;
		k -= above;
		d |= b << sh;
		if (!sh)
			return lo + d;
		if (first)
			for (size_t i = 0; i < m; i++) {
				a[c] = abs_bits(x[i]) - lo;
				c += a[c] >> sh == b;
			}
		else
			for (size_t i = 0; i < m; i++) {
				a[c] = a[i];
				c += (a[i] >> sh & (nb - 1)) == b;
			}
		m = c;
		hi = sh;
	}
}

QUANT_INLINE float topk_x(const float *restrict v, float *restrict r, size_t i, enum quant_of of)
{
	return of == OF_ADD ? (r[i] = r[i] + v[i]) : of == OF_SUB ? v[i] - r[i] : v[i];
}

/* The candidates of the select: x (of v and r) for i from i on, those with |x| bits lo or more
 * moved to the front: their indices to idx and their x to val from c on, in order; how many
 * there are then. *top: the largest key seen (an x is infinite or NaN if it is 0x7f800000 or
 * more). */
QUANT_INLINE size_t topk_gather_in(uint32_t *restrict idx, float *restrict val,
				   const float *restrict v, float *restrict r, size_t i, size_t n,
				   uint32_t lo, size_t c, uint32_t *top, enum quant_of of)
{
	for (; i < n; i++) {
		float x = topk_x(v, r, i, of);
		uint32_t a = abs_bits(x);
		*top = a > *top ? a : *top;
		idx[c] = (uint32_t)i;
		val[c] = x;
		c += a >= lo;
	}
	return c;
}

/* The candidates kept by the select, moved to the front of idx and val in order: the keys
 * above t and the first eq equal to it (without a branch on which go: they are unpredictable);
 * from c (of nc), sent of them kept before. Returns how many are kept. */
QUANT_INLINE size_t topk_take_in(uint32_t *restrict idx, float *restrict val, size_t c,
				 size_t nc, uint32_t t, size_t *eq, size_t sent)
{
	for (; c < nc; c++) {
		uint32_t a = abs_bits(val[c]), is_eq = a == t, take = (a > t) | (is_eq & (*eq > 0));
		idx[sent] = idx[c];
		val[sent] = val[c];
		sent += take;
		*eq -= is_eq & take;
	}
	return sent;
}

/* The keys of the candidates val[i..c) (each lo or more) that are hi or less, each less lo, to
 * a from nb on; *above counts the others. Returns how many a holds then. */
QUANT_INLINE size_t topk_band_in(uint32_t *restrict a, const float *restrict val, size_t i,
				 size_t c, uint32_t lo, uint32_t hi, size_t nb, size_t *above)
{
	for (; i < c; i++) {
		uint32_t key = abs_bits(val[i]);
		a[nb] = key - lo;
		nb += key <= hi;
		*above += key > hi;
	}
	return nb;
}

#ifdef QUANT_X86
/* topk_pick[m]: the lanes set in the 8-bit mask m, in order, a byte each */
static uint64_t topk_pick[256];
static pthread_once_t topk_once = PTHREAD_ONCE_INIT;

static void topk_pick_init(void)
{
	for (unsigned m = 0; m < 256; m++)
		for (unsigned b = 0, c = 0; b < 8; b++)
			if (m >> b & 1)
				topk_pick[m] |= (uint64_t)b << 8 * c++;
}

/* The permutation that moves the lanes set in the mask m to the front, in order. */
QUANT_INLINE __attribute__((target("avx2"))) __m256i topk_lanes(unsigned m)
{
	return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)topk_pick[m]));
}

/* topk_gather_in 8 lanes at a time: the lanes that pass, moved to the front by a permute, stored
 * whole (the ones past them are overwritten later: c + 8 <= i + 8 <= n) */
QUANT_INLINE __attribute__((target("avx2,popcnt"))) size_t
topk_gather_avx2_in(uint32_t *restrict idx, float *restrict val, const float *restrict v,
		    float *restrict r, size_t n, uint32_t lo, uint32_t *top, enum quant_of of)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), below = _mm256_set1_epi32((int)lo - 1);
	__m256i at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), most = _mm256_set1_epi32((int)*top);
	uint32_t lanes[8];
	size_t c = 0, i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(v + i);
		__m256i a, pick;
		unsigned m;
		if (of == OF_ADD) {
			x = _mm256_add_ps(_mm256_loadu_ps(r + i), x);
			_mm256_storeu_ps(r + i, x);
		} else if (of == OF_SUB) {
			x = _mm256_sub_ps(x, _mm256_loadu_ps(r + i));
		}
		a = _mm256_and_si256(_mm256_castps_si256(x), absmask);
		m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, below)));
		pick = topk_lanes(m);
		most = _mm256_max_epu32(most, a);
		_mm256_storeu_si256((__m256i *)(void *)(idx + c), _mm256_permutevar8x32_epi32(at, pick));
		_mm256_storeu_ps(val + c, _mm256_permutevar8x32_ps(x, pick));
		c += (size_t)__builtin_popcount(m);
		at = _mm256_add_epi32(at, _mm256_set1_epi32(8));
	}
	_mm256_storeu_si256((__m256i *)(void *)lanes, most);
	for (int j = 0; j < 8; j++)
		*top = lanes[j] > *top ? lanes[j] : *top;
	return topk_gather_in(idx, val, v, r, i, n, lo, c, top, of);
}

QUANT_NOINLINE __attribute__((target("avx2,popcnt"))) static size_t
topk_gather_avx2(uint32_t *restrict idx, float *restrict val, const float *restrict v,
		 float *restrict r, size_t n, uint32_t lo, uint32_t *top, enum quant_of of)
{
	return of == OF_ADD ? topk_gather_avx2_in(idx, val, v, r, n, lo, top, OF_ADD)
	       : of == OF_SUB ? topk_gather_avx2_in(idx, val, v, r, n, lo, top, OF_SUB)
				: topk_gather_avx2_in(idx, val, v, r, n, lo, top, OF_V);
}

/* topk_take_in 8 lanes at a time; a block that holds a key equal to t (one or a few in all,
 * but for masses of ties) says lane by lane which of those go */
QUANT_NOINLINE __attribute__((target("avx2,popcnt"))) static size_t
topk_take_avx2(uint32_t *restrict idx, float *restrict val, size_t nc, uint32_t t, size_t eq)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), tv = _mm256_set1_epi32((int)t);
	size_t c = 0, sent = 0;
	for (; c + 8 <= nc; c += 8) {
		__m256 x = _mm256_loadu_ps(val + c);
		__m256i a = _mm256_and_si256(_mm256_castps_si256(x), absmask), pick;
		unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, tv))),
			 e = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, tv)));
		for (unsigned j = 0; e && eq; j++, e >>= 1)
			if (e & 1) {
				m |= 1u << j;
				eq--;
			}
		pick = topk_lanes(m);
		_mm256_storeu_si256((__m256i *)(void *)(idx + sent),
				    _mm256_permutevar8x32_epi32(
					    _mm256_loadu_si256((const __m256i *)(const void *)(idx + c)),
					    pick));
		_mm256_storeu_ps(val + sent, _mm256_permutevar8x32_ps(x, pick));
		sent += (size_t)__builtin_popcount(m);
	}
	return topk_take_in(idx, val, c, nc, t, &eq, sent);
}

/* topk_band_in 8 lanes at a time (keys of finite x compare as signed integers); after
 * topk_gather, which fills topk_pick */
QUANT_NOINLINE __attribute__((target("avx2,popcnt"))) static size_t
topk_band_avx2(uint32_t *restrict a, const float *restrict val, size_t c, uint32_t lo, uint32_t hi,
	       size_t *above)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), lov = _mm256_set1_epi32((int)lo),
		      hiv = _mm256_set1_epi32((int)hi);
	size_t i = 0, nb = 0;
	for (; i + 8 <= c; i += 8) {
		__m256i key = _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(val + i)), absmask);
		unsigned gt = (unsigned)_mm256_movemask_ps(
			_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, hiv)));
		unsigned in = ~gt & 0xffu;
		_mm256_storeu_si256((__m256i *)(void *)(a + nb),
				    _mm256_permutevar8x32_epi32(_mm256_sub_epi32(key, lov),
								topk_lanes(in)));
		nb += (size_t)__builtin_popcount(in);
		*above += (size_t)__builtin_popcount(gt);
	}
	return topk_band_in(a, val, i, c, lo, hi, nb, above);
}
#endif

static size_t topk_band(uint32_t *a, const float *val, size_t c, uint32_t lo, uint32_t hi,
			size_t *above)
{
	*above = 0;
#ifdef QUANT_X86
	if (quant_avx2())
		return topk_band_avx2(a, val, c, lo, hi, above);
#endif
	return topk_band_in(a, val, 0, c, lo, hi, 0, above);
}

static size_t topk_gather(uint32_t *idx, float *val, const float *v, float *r, size_t n,
			  uint32_t lo, uint32_t *top, enum quant_of of)
{
	*top = 0;
#ifdef QUANT_X86
	if (quant_avx2()) {
		pthread_once(&topk_once, topk_pick_init);
		return topk_gather_avx2(idx, val, v, r, n, lo, top, of);
	}
#endif
	return topk_gather_in(idx, val, v, r, 0, n, lo, 0, top, of);
}

static size_t topk_take(uint32_t *idx, float *val, size_t nc, uint32_t t, size_t eq)
{
#ifdef QUANT_X86
	if (quant_avx2())
		return topk_take_avx2(idx, val, nc, t, eq);
#endif
	return topk_take_in(idx, val, 0, nc, t, &eq, 0);
}

/* The k sent (1 <= k <= n) of x (of v and r) in index order: their indices to idx[0..k) and
 * their x to val[0..k). val: n floats, keys: n uint32s of scratch.
 * A strided sample of at most TOPK_SAMPLE elements says a key lo that a few more than k
 * elements reach, and a key hi that a few fewer than k exceed; one pass adds, checks and gathers
 * the candidates, those that reach lo (all of them if fewer than k do); the select finds the
 * k-th largest key among those in [lo, hi] (among all the candidates if it is not there), and
 * the candidates above it and the first of those equal to it go. -1: an x is not finite. */
static int topk_select(uint32_t *idx, float *val, uint32_t *keys, const float *v, float *r,
		       size_t n, size_t k, enum quant_of of)
{
	size_t stride = n / TOPK_SAMPLE ? n / TOPK_SAMPLE : 1, s = 0, c, gt, nb = 0, above = 0;
	double want = (double)k / (double)stride;
	uint32_t lo = 0, hi = 0, least = UINT32_MAX, top = 0, t;
	/* the sample's kk-th and kh-th largest keys: about kk·stride and kh·stride elements reach
	 * them; the margin, 4 standard deviations of the count and 16 more, makes it rare that
	 * fewer than k reach lo, or k or more exceed hi */
	double margin = 4 * sqrt(want) + 16;
	size_t kk = (size_t)(want + margin), kh = want > margin ? (size_t)(want - margin) : 0;
	for (size_t i = stride / 2; i < n; i += stride) {
		uint32_t a;
		/* the sample's loads miss the cache (stride·4 bytes apart): asked for ahead */
		if (i + 16 * stride < n) {
			__builtin_prefetch(v + i + 16 * stride);
			if (of != OF_V)
				__builtin_prefetch(r + i + 16 * stride);
		}
		a = abs_bits(val[s++] = of == OF_ADD ? r[i] + v[i] : topk_x(v, r, i, of));
		least = a < least ? a : least;
		top = a > top ? a : top;
	}
	if (kk < s) {
		lo = topk_kth(val, keys, s, kk, least, top - least, &gt);
		/* hi among the sample's keys that reach lo: kk of them or more */
		for (size_t i = 0; kh && i < s; i++) {
			uint32_t a = abs_bits(val[i]);
			keys[nb] = a - lo;
			nb += a >= lo;
		}
		if (kh)
			hi = topk_kth(NULL, keys, nb, kh, lo, top - lo, &gt);
	}
	c = topk_gather(idx, val, v, r, n, lo, &top, of);
	if (top >= 0x7f800000u)
		return -1;
	if (c < k) { /* x again: r holds it after OF_ADD */
		lo = hi = 0;
		c = of == OF_ADD ? topk_gather(idx, val, r, NULL, n, 0, &top, OF_V)
				   : topk_gather(idx, val, v, r, n, 0, &top, of);
	}
	if (hi > lo)
		nb = topk_band(keys, val, c, lo, hi, &above);
	if (hi > lo && above < k && k - above <= nb) {
		t = topk_kth(NULL, keys, nb, k - above, lo, hi - lo, &gt);
		gt += above;
	} else {
		t = topk_kth(val, keys, c, k, lo, top - lo, &gt);
	}
	topk_take(idx, val, c, t, k - gt);
	return 0;
}

/* The k sent, idx[0..k) and their x at back[0..k): their halves into vals (k) by the fp16
 * kernel, through dec (k floats of scratch); resid at their places what the halves miss; back
 * (n floats) zeroed then given the values sent at their places; their gaps after the halves.
 * Returns the gaps' bytes. */
static size_t topk_emit(unsigned char *restrict vals, float *restrict back, float *restrict resid,
			const uint32_t *restrict idx, float *restrict dec, size_t k, size_t n)
{
	unsigned char *gaps = vals + 2 * k, *g = gaps;
	size_t next = 0;
	quant_fp16_encode(vals, dec, back, NULL, k); /* finite: the gather checked */
	memset(back, 0, n * sizeof *back);
	for (size_t j = 0; j < k; j++) {
		size_t gap = idx[j] - next;
		back[idx[j]] = dec[j];
		if (resid) /* which holds their x */
			resid[idx[j]] -= dec[j];
		for (; gap > 0x7f; gap >>= 7)
			*g++ = (unsigned char)(gap | 0x80);
		*g++ = (unsigned char)gap;
		next = (size_t)idx[j] + 1;
	}
	return (size_t)(g - gaps);
}

static int topk_encode(unsigned char *out, size_t *nbytes, float *back, const float *v, float *r,
		       size_t n, size_t k, uint32_t *idx, enum quant_of of, char *err)
{
	uint32_t k32 = (uint32_t)k;
	if (k > n || (!k && n) || k > UINT32_MAX)
		return gem_errf(err, GEM_EUSAGE, "topk: %zu of %zu elements", k, n);
	memcpy(out, &k32, sizeof k32);
	*nbytes = 4;
	if (!k)
		return 0;
	if (topk_select(idx, back, idx + n, v, r, n, k, of) < 0)
		return gem_errf(err, GEM_EUSAGE, "topk of a vector that is not finite");
	/* the keys' scratch is free again: dec; back: the values sent */
	*nbytes += 2 * k + topk_emit(out + 4, back, of == OF_ADD ? r : NULL, idx,
				     (float *)(void *)(idx + n), k, n);
	return 0;
}

int quant_topk_encode(unsigned char *out, size_t *nbytes, float *back, const float *v,
		      float *resid, size_t n, size_t k, uint32_t *idx, char *err)
{
	return topk_encode(out, nbytes, back, v, resid, n, k, idx, resid ? OF_ADD : OF_V, err);
}

int quant_topk_encode_diff(unsigned char *out, size_t *nbytes, float *back, const float *a,
			   const float *b, size_t n, size_t k, uint32_t *idx, char *err)
{
	/* b is read, never written, under OF_SUB */
	return topk_encode(out, nbytes, back, a, (float *)(uintptr_t)b, n, k, idx, OF_SUB, err);
}

int quant_topk_decode(float *v, const unsigned char *in, size_t nbytes, size_t n, char *err)
{
	const unsigned char *p, *end = in + nbytes;
	uint32_t k32, bad = 0;
	size_t k, next = 0;
	if (nbytes < 4)
		return gem_errf(err, GEM_EFAIL, "topk size %zu bytes: no count", nbytes);
	memcpy(&k32, in, sizeof k32);
	k = k32;
	if (k > n)
		return gem_errf(err, GEM_EFAIL, "topk of %zu elements sends %zu", n, k);
	if (nbytes - 4 < 2 * k)
		return gem_errf(err, GEM_EFAIL, "topk size %zu bytes: too short for %zu values",
				nbytes, k);
	memset(v, 0, n * sizeof *v);
	p = in + 4 + 2 * k;
	for (size_t j = 0; j < k; j++) {
		uint64_t gap = 0;
		int len = 0;
		do {
			if (p == end)
				return gem_errf(err, GEM_EFAIL, "topk: index %zu of %zu is cut short",
						j, k);
			if (len == TOPK_VARINT_MAX || (len && *p == 0))
				return gem_errf(err, GEM_EFAIL,
						"topk: index %zu's gap is not minimally coded", j);
			gap |= (uint64_t)(*p & 0x7f) << (7 * len++);
		} while (*p++ & 0x80);
		if (gap >= n - next)
			return gem_errf(err, GEM_EFAIL, "topk: index %zu is beyond %zu elements", j, n);
		next += gap;
		v[next++] = fp16_get(in + 4 + 2 * j, &bad);
		if (bad)
			return gem_errf(err, GEM_EFAIL, "topk: value %zu is infinite or NaN", j);
	}
	if (p != end)
		return gem_errf(err, GEM_EFAIL, "topk: %zu bytes after the last index",
				(size_t)(end - p));
	return 0;
}
