/* t0001: the RNG is reproducible and roughly uniform; shuffles are permutations. */
#include "base/rng.h"
#include "tap.h"

#include <string.h>

int main(void)
{
	struct rng a, b, c;
	uint32_t idx[1000], seen[1000] = {0};
	double sum = 0;
	int same = 1, perm = 1;

	rng_seed(&a, 42, 1);
	rng_seed(&b, 42, 1);
	rng_seed(&c, 42, 2);
	for (int i = 0; i < 1000; i++)
		if (rng_u32(&a) != rng_u32(&b))
			same = 0;
	ok(same, "same seed and stream give the same sequence");
	ok(rng_u32(&a) != rng_u32(&c), "another stream gives another sequence");
	for (int i = 0; i < 100000; i++)
		sum += rng_float(&a);
	is_near(sum / 100000, 0.5, 0.01, "uniform floats have mean 0.5");
	for (uint32_t i = 0; i < 1000; i++)
		idx[i] = i;
	rng_shuffle(&a, idx, 1000);
	for (int i = 0; i < 1000; i++)
		seen[idx[i]]++;
	for (int i = 0; i < 1000; i++)
		if (seen[i] != 1)
			perm = 0;
	ok(perm, "shuffle is a permutation");
	ok(idx[0] != 0 || idx[1] != 1 || idx[2] != 2, "shuffle moves things");
	sum = 0;
	for (int i = 0; i < 1000; i++)
		if (rng_below(&a, 7) >= 7)
			sum = 1;
	ok(sum == 0, "rng_below stays below n");
	return done_testing();
}
