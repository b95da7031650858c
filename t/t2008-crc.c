/* t2008: crc32_update equals zlib's crc32 at both levels, for every length up to a few steps
 * of the folding, at every alignment, chained over pieces, and on a θ-sized buffer. */
#include "base/rng.h"
#include "wire/crc.h"
#include "tap.h"

#include <stdlib.h>
#include <zlib.h>

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
	crc32_simd(was);
	free(buf);
	return done_testing();
}
