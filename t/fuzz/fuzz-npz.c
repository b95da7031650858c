/* fuzz-npz: libFuzzer target for the .npz reader of --data npz:FILE: the zip's central
 * directory (zip64 too), each member extracted (stored or inflated, CRC-checked, its size
 * bounded before allocation) and parsed as .npy, then the data set's train and test arrays
 * under the conventional names, under the names of its first two members (as
 * npz:FILE,FEATURES,LABELS gives them), and under a name it does not hold (refused). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/npy.h"
#include "nn/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Member i's name without its .npy, as a user names the array, into name (64 bytes). */
static const char *array_name(const struct npz *z, int i, char name[64])
{
	size_t len = z->m[i].name_len < 63 ? z->m[i].name_len : 63;
	memcpy(name, z->m[i].name, len);
	name[len] = 0;
	if (len > 4 && !strcmp(name + len - 4, ".npy"))
		name[len - 4] = 0;
	return name;
}

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
	if (z.n >= 2) {
		char x[64], y[64];
		if (npz_samples(&z, "test", array_name(&z, 0, x), array_name(&z, 1, y), &s, err) == 0)
			samples_free(&s);
		if (npz_find(&z, "no such array") < 0 &&
		    npz_samples(&z, "train", x, "no such array", &s, err) == 0)
			abort();
	}
	npz_close(&z);
	return 0;
}
