#include "wire/crc.h"

#include "base/cpulevel.h"

#include <libdeflate.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC_X86 1
#define CRC_FOLD __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul")))
#endif

/* The folding runs on buffers this long or longer (shorter ones: libdeflate), a step of
 * CRC_STEP bytes: four registers of four 128-bit lanes. */
#define CRC_MIN 1024
#define CRC_STEP 256
#define CRC_POLY 0x104c11db7ull /* x^32 + ... + 1, bit d the coefficient of x^d */
#define CRC_POLY_REFLECTED 0xedb88320u

/* The reduction of a 128-bit lane, the polynomial of a stretch of the message whose last bit is
 * the lane's last, moved forward by D bits: with the lane's first 64 bits H (the higher powers)
 * and last 64 L, X·x^D ≡ H·(x^(64+D) mod P) + L·(x^D mod P), each product under 96 bits. In the
 * reflected order of the bytes (bit 0 of byte 0 the highest power) a carry-less product of a
 * 64-bit H by a 64-bit constant whose bit j is the coefficient of x^(63−j) of K comes out one
 * bit short of the lane's order; K = x^(63+D) mod P and x^(D−1) mod P make up that bit. */
struct crc_fold {
	uint64_t h, l; /* the constants for the lane's first and last 64 bits */
};

static struct crc_fold crc_step;    /* D = 8·CRC_STEP: a lane to its place one step on */
static struct crc_fold crc_tail[16]; /* D = 128·(15 − q): lane q of the last step to lane 15 */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* x^e mod P, bit d the coefficient of x^d */
static uint64_t crc_xpow(unsigned e)
{
	uint64_t r = 1;
	while (e--) {
		r <<= 1;
		if (r >> 32)
			r ^= CRC_POLY;
	}
	return r;
}

/* K (degree < 64) with bit j the coefficient of x^(63−j) */
static uint64_t crc_reflect(uint64_t k)
{
	uint64_t r = 0;
	for (int d = 0; d < 64; d++)
		if (k >> d & 1)
			r |= 1ull << (63 - d);
	return r;
}

static struct crc_fold crc_fold_by(unsigned bits)
{
	struct crc_fold f = {crc_reflect(crc_xpow(63 + bits)), crc_reflect(crc_xpow(bits - 1))};
	return f;
}

static void crc_init(void)
{
	crc_step = crc_fold_by(8 * CRC_STEP);
	for (int q = 0; q < 15; q++)
		crc_tail[q] = crc_fold_by(128 * (unsigned)(15 - q));
}

static int crc_forced = -1; /* tests: a level forced; -1 asks the CPU */

static int crc_available(void)
{
#ifdef CRC_X86
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul")
		       ? 1
		       : 0;
#else
	return 0;
#endif
}

int crc32_simd(int level)
{
	return cpulevel_force(&crc_forced, crc_available(), level);
}

#ifdef CRC_X86
CRC_FOLD static inline __m512i crc_fold512(__m512i a, __m512i k, __m512i data)
{
	/* lane by lane: H·k.h ⊕ L·k.l ⊕ the next data; 0x96 is the three-way XOR */
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
					 _mm512_clmulepi64_epi128(a, k, 0x11), data, 0x96);
}

/* OR the bits of x − x of the 16 floats of v into *acc: 0 for finite ones, a NaN's otherwise */
CRC_FOLD static inline void crc_finite(__m512i *acc, __m512i v)
{
	__m512 x = _mm512_castsi512_ps(v);
	*acc = _mm512_or_si512(*acc, _mm512_castps_si512(_mm512_sub_ps(x, x)));
}

/* x ⊕ lane q of the last step moved to lane 15's place (crc_tail[q]). */
CRC_FOLD static inline __m128i crc_tail_lane(__m128i x, __m128i lane, int q)
{
	__m128i kq = _mm_set_epi64x((long long)crc_tail[q].l, (long long)crc_tail[q].h);
	return _mm_xor_si128(x, _mm_xor_si128(_mm_clmulepi64_si128(lane, kq, 0x00),
					      _mm_clmulepi64_si128(lane, kq, 0x11)));
}

/* x ⊕ lanes q0 .. q0 + 3 of the last step, a's four (lane 15, the last of a3, is x itself).
 * The lanes go from register to register, not through an array on the stack: GCC stores a
 * 512-bit register to a local with an aligned move, counting on its realigned frame, which
 * ASan's fake stack (detect_stack_use_after_return) does not align to 64 bytes. */
CRC_FOLD static inline __attribute__((always_inline)) __m128i crc_tail_reg(__m128i x, __m512i a,
									 int q0)
{
	x = crc_tail_lane(x, _mm512_castsi512_si128(a), q0);
	x = crc_tail_lane(x, _mm512_extracti32x4_epi32(a, 1), q0 + 1);
	x = crc_tail_lane(x, _mm512_extracti32x4_epi32(a, 2), q0 + 2);
	return q0 + 3 < 15 ? crc_tail_lane(x, _mm512_extracti32x4_epi32(a, 3), q0 + 3) : x;
}

/* The CRC register (not inverted) of p[0..n), n a multiple of CRC_STEP and at least 2 steps,
 * from register r; with finite, also whether p holds finite float32s only (*finite). */
CRC_FOLD static inline __attribute__((always_inline)) uint32_t
crc_fold_in(uint32_t r, const unsigned char *p, size_t n, int *finite)
{
	const __m512i k = _mm512_set_epi64((long long)crc_step.l, (long long)crc_step.h,
					   (long long)crc_step.l, (long long)crc_step.h,
					   (long long)crc_step.l, (long long)crc_step.h,
					   (long long)crc_step.l, (long long)crc_step.h);
	__m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 64),
		a2 = _mm512_loadu_si512(p + 128), a3 = _mm512_loadu_si512(p + 192);
	__m128i x;
	__m512i bad = _mm512_setzero_si512();
	uint64_t half[2];
	uint32_t reg = 0;

	if (finite) {
		crc_finite(&bad, a0);
		crc_finite(&bad, a1);
		crc_finite(&bad, a2);
		crc_finite(&bad, a3);
	}
	/* the register enters as the first 32 bits of the message, XORed in */
	a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)r)));
	for (size_t i = CRC_STEP; i < n; i += CRC_STEP) {
		__m512i d0 = _mm512_loadu_si512(p + i), d1 = _mm512_loadu_si512(p + i + 64),
			d2 = _mm512_loadu_si512(p + i + 128), d3 = _mm512_loadu_si512(p + i + 192);
		if (finite) {
			crc_finite(&bad, d0);
			crc_finite(&bad, d1);
			crc_finite(&bad, d2);
			crc_finite(&bad, d3);
		}
		a0 = crc_fold512(a0, k, d0);
		a1 = crc_fold512(a1, k, d1);
		a2 = crc_fold512(a2, k, d2);
		a3 = crc_fold512(a3, k, d3);
	}
	if (finite)
		*finite = _mm512_test_epi32_mask(bad, bad) == 0;
	x = _mm512_extracti32x4_epi32(a3, 3);
	x = crc_tail_reg(x, a0, 0);
	x = crc_tail_reg(x, a1, 4);
	x = crc_tail_reg(x, a2, 8);
	x = crc_tail_reg(x, a3, 12);
	/* x ≡ the message mod P; its register is that of x's 16 bytes from 0: x·x^32 mod P */
	half[0] = (uint64_t)_mm_cvtsi128_si64(x);
	half[1] = (uint64_t)_mm_extract_epi64(x, 1);
	for (int i = 0; i < 16; i++) {
		reg ^= (uint32_t)(half[i / 8] >> (8 * (i % 8)) & 0xff);
		for (int b = 0; b < 8; b++)
			reg = (reg >> 1) ^ (CRC_POLY_REFLECTED & (0u - (reg & 1)));
	}
	return reg;
}

CRC_FOLD static uint32_t crc_fold_all(uint32_t r, const unsigned char *p, size_t n)
{
	return crc_fold_in(r, p, n, NULL);
}

CRC_FOLD static uint32_t crc_fold_all_f32(uint32_t r, const unsigned char *p, size_t n, int *finite)
{
	return crc_fold_in(r, p, n, finite);
}
#endif

#ifdef CRC_X86
/* The bytes of n that the folding takes (whole steps; 0: it does not run here), the constants
 * made. */
static size_t crc_bulk(size_t n)
{
	if (cpulevel_get(&crc_forced, crc_available()) != 1 || n < CRC_MIN)
		return 0;
	pthread_once(&crc_once, crc_init);
	return n / CRC_STEP * CRC_STEP;
}
#endif

uint32_t crc32_update(uint32_t crc, const void *p, size_t n)
{
#ifdef CRC_X86
	size_t bulk = crc_bulk(n);
	if (bulk) {
		crc = ~crc_fold_all(~crc, p, bulk);
		p = (const unsigned char *)p + bulk;
		n -= bulk;
	}
#endif
	return (uint32_t)libdeflate_crc32(crc, p, n);
}

uint32_t crc32_f32(const void *v, size_t count, int *finite)
{
	const unsigned char *p = v;
	size_t n = count * sizeof(float);
	*finite = 0;
#ifdef CRC_X86
	size_t bulk = crc_bulk(n);
	if (bulk) {
		float tail = 0;
		uint32_t crc = ~crc_fold_all_f32(~0u, p, bulk, finite);
		for (size_t i = bulk; i < n; i += sizeof(float)) {
			float x;
			memcpy(&x, p + i, sizeof x);
			tail += x - x;
		}
		*finite = *finite && tail == 0;
		return (uint32_t)libdeflate_crc32(crc, p + bulk, n - bulk);
	}
#endif
	return (uint32_t)libdeflate_crc32(0, p, n);
}
