/* fuzz-idx: libFuzzer target for the IDX readers: idx_load (gzip'd or plain) of Fashion-MNIST's
 * files, the input written to a file and loaded as images and as labels; and idx_parse of any
 * type and 1 to 4 dimensions, on the input as it is and, when it is gzip'd, on what
 * samples_gunzip inflates; an array taken lies inside its buffer. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/err.h"
#include "nn/data.h"
#include "nn/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	char err[GEM_ERRMAX];
	uint32_t dims[3];
	uint8_t *out, *gz;
	struct idx_array a;
	size_t gzlen;
	FILE *f;

	if (!path[0])
		snprintf(path, sizeof path, "/tmp/gem-fuzz-idx.%ld", (long)getpid());
	if (!(f = fopen(path, "wb")) || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		abort();
	if (idx_parse(data, size, "fuzz", &a, err) == 0 && (a.data < data || a.data + a.nbytes != data + size))
		abort();
	if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b &&
	    samples_gunzip(data, size, 1 << 24, &gz, &gzlen, "fuzz", err) == 0) {
		if (gz[gzlen] != 0)
			abort();
		idx_parse(gz, gzlen, "fuzz", &a, err);
		free(gz);
	}
	for (int k = 0; k < 2; k++) {
		uint32_t magic = k ? 0x801 : 0x803;
		if (idx_load(path, magic, dims, &out, err) == 0) {
			/* the payload is as long as its dimensions say: touch its last byte */
			size_t n = (size_t)dims[0] * (k ? 1 : (size_t)dims[1] * dims[2]);
			if (n && out[n - 1] == 0x5a && out[0] == 0xa5)
				dims[0] = 0;
			free(out);
		}
	}
	return 0;
}
