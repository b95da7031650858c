/* fuzz-safetensors: libFuzzer target for safetensors_parse, the reader of weights a user brings
 * (gem-init --init-from): any bytes are refused or read into θ for a fixed layout of two
 * tensors, 0.weight (2, 3) and 0.bias (2); θ taken is finite. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct layout l = {.ntensors = 2, .total = 8};
	float theta[8];
	json_t *meta;
	l.t[0] = (struct layout_tensor){.name = "0.weight", .ndim = 2, .shape = {2, 3}, .offset = 0, .size = 6};
	l.t[1] = (struct layout_tensor){.name = "0.bias", .ndim = 1, .shape = {2}, .offset = 6, .size = 2};
	if (safetensors_parse(data, size, "fuzz", &l, theta, &meta, err) == 0) {
		for (int i = 0; i < 8; i++)
			if (!isfinite(theta[i]))
				abort();
		if (meta && !json_is_object(meta))
			abort();
		json_decref(meta);
	}
	return 0;
}
