/* fuzz-npy: libFuzzer target for npy_parse, the .npy header parser of --data npy:X,Y, and for
 * what makes samples of an array: the input parsed as features (with labels of zeros) and as
 * labels (with features of zeros); an array taken lies inside the input, and samples made from
 * it have the shape and classes they say. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "nn/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct samples *s, size_t n)
{
	if (s->n != n || s->dim < 1 || s->classes < 1 || (s->ndim != 1 && s->ndim != 3))
		abort();
	for (size_t i = 0; i < s->n; i++)
		if (s->y[i] >= s->classes)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t zeros[1 << 16];
	char err[GEM_ERRMAX];
	struct npy_array a, other = {.e = {.kind = 'u', .size = 1}, .ndim = 1, .data = zeros};
	struct samples s;
	if (npy_parse(data, size, "fuzz", &a, err) < 0)
		return 0;
	if (a.data < data || a.data + a.nbytes > data + size)
		abort();
	if (a.ndim < 1 || a.dims[0] > sizeof zeros)
		return 0;
	other.dims[0] = a.dims[0];
	other.nbytes = (size_t)a.dims[0];
	if (npy_samples(&a, NULL, "x", &other, "y", &s, err) == 0) {
		check(&s, (size_t)a.dims[0]);
		samples_free(&s);
	}
	if (npy_samples(&other, NULL, "x", &a, "y", &s, err) == 0) {
		check(&s, (size_t)a.dims[0]);
		samples_free(&s);
	}
	return 0;
}
