/* fuzz-npz: libFuzzer target for the .npz reader of --data npz:FILE: the zip's central
 * directory (zip64 too), each member extracted (stored or inflated, CRC-checked, its size
 * bounded before allocation) and parsed as .npy, then the data set's train and test arrays
 * under the conventional names. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "nn/npy.h"
#include "nn/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct npz z;
	struct samples s;
	if (npz_open(data, size, "fuzz", &z, err) < 0)
		return 0;
	for (int i = 0; i < z.n && i < 16; i++) {
		struct npy_array a;
		uint8_t *m;
		size_t len;
		if (npz_extract(&z, i, &m, &len, err) < 0)
			continue;
		if (len != z.m[i].usize || m[len] != 0)
			abort();
		npy_parse(m, len, "member", &a, err);
		free(m);
	}
	if (npz_samples(&z, "train", NULL, NULL, &s, err) == 0)
		samples_free(&s);
	if (npz_samples(&z, "test", NULL, NULL, &s, err) == 0)
		samples_free(&s);
	npz_close(&z);
	return 0;
}
