/* fuzz-csv: libFuzzer target for csv_parse, a table given as --data csv:FILE: any bytes are a
 * table or an error; a table taken has finite features, labels below its classes and as many
 * rows as it says. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/csv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX], *buf = malloc(size + 1);
	struct samples s;
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	if (csv_parse(buf, size, "fuzz", "label", &s, err) == 0) {
		const float *x = s.x;
		if (s.type != SAMPLES_F32 || s.ndim != 1 || s.dim < 1 || s.n < 1 || s.classes < 1)
			abort();
		for (size_t i = 0; i < s.n * s.dim; i++)
			if (!isfinite(x[i]))
				abort();
		for (size_t i = 0; i < s.n; i++)
			if (s.y[i] >= s.classes)
				abort();
		samples_free(&s);
	} else if (s.x || s.y) {
		abort(); /* an error leaves nothing allocated */
	}
	free(buf);
	return 0;
}
