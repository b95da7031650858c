/* t2008: crc32_update equals zlib's crc32 at both levels, for every length up to a few steps
 * of the folding, at every alignment, chained over pieces, and on a θ-sized buffer.
 * crc32_f32 gives the same CRC and says all finite only when it is so: one ±inf or NaN at any
 * of many places (in the folded steps and in the tail) makes it 0. Under ASan, with its fake
 * stack. */
#include "base/rng.h"
#include "wire/crc.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Under ASan (make test SANITIZE=1), locals live in its fake stack, whose frames are aligned
 * less than a 512-bit register's: the folding must not spill its registers to the stack. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_stack_use_after_return=1";
}

int main(void)
{
	enum { BIG = 655160 + 13, SHORT = 2600 };
	unsigned char *buf = malloc(BIG + 64);
	struct rng g;
	int was = crc32_simd(-1), have;

	crc32_simd(1);
	have = crc32_simd(-1);
	diag("folding level %d on this CPU", have);
	rng_seed(&g, 3, 1);
	for (size_t i = 0; i < BIG + 64; i++)
		buf[i] = (unsigned char)(rng_u32(&g) >> 24);
	for (int level = 0; level <= have; level++) {
		int bad = 0, bad_align = 0, bad_chain = 0;
		uLong want;
		crc32_simd(level);
		for (size_t n = 0; n <= SHORT && !bad; n++)
			bad += crc32_update(0, buf, n) != (uint32_t)crc32(0, buf, (uInt)n);
		ok(!bad, "level %d: lengths 0..%d equal zlib's", level, SHORT);
		for (size_t a = 1; a < 64; a++)
			bad_align += crc32_update(0, buf + a, 4096 + a) !=
				     (uint32_t)crc32(0, buf + a, (uInt)(4096 + a));
		ok(!bad_align, "level %d: every alignment", level);
		want = crc32(0, buf, BIG);
		ok(crc32_update(0, buf, BIG) == (uint32_t)want, "level %d: %d bytes (θ of cnn)", level,
		   BIG);
		for (size_t cut = 1; cut < BIG; cut = cut * 3 + 7) {
			uint32_t c = crc32_update(0, buf, cut);
			bad_chain += crc32_update(c, buf + cut, BIG - cut) != (uint32_t)want;
		}
		ok(!bad_chain, "level %d: two pieces chained give the whole's", level);
		ok(crc32_update(0xdeadbeef, buf, 5000) == (uint32_t)crc32(0xdeadbeef, buf, 5000),
		   "level %d: a CRC continued from another", level);
	}
	for (int level = 0; level <= have; level++) {
		enum { NF = 3001 }; /* 46 steps of 64 floats and a tail of 57 */
		float *f = malloc(NF * sizeof *f);
		int fin, bad_crc = 0, missed = 0, nplaces = 0;
		crc32_simd(level);
		for (int i = 0; i < NF; i++)
			f[i] = i % 5 ? 3.0e38f : -1e-40f;
		bad_crc += crc32_f32(f, NF, &fin) != (uint32_t)crc32(0, (void *)f, NF * 4);
		ok(fin == (level == 1), "level %d: finite floats are %s", level,
		   level ? "known finite" : "not known finite (no folding)");
		for (int i = 0; i < NF; i += i < 64 || i > NF - 70 ? 1 : 37) {
			const float bad[3] = {INFINITY, -INFINITY, NAN};
			float keep = f[i];
			for (int b = 0; b < 3; b++) {
				f[i] = bad[b];
				bad_crc += crc32_f32(f, NF, &fin) != (uint32_t)crc32(0, (void *)f, NF * 4);
				missed += fin;
			}
			f[i] = keep;
			nplaces++;
		}
		ok(!missed, "level %d: ±inf and NaN found at each of %d places", level, nplaces);
		ok(!bad_crc, "level %d: crc32_f32's CRC is zlib's", level);
		free(f);
	}
	crc32_simd(was);
	free(buf);
	return done_testing();
}
