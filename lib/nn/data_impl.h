/* data_impl: what data.c shares with the batcher (nn/batcher.c): the normalisation of samples
 * as they are filled into a batch. */
#ifndef GEM_DATA_IMPL_H
#define GEM_DATA_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "nn/data.h"

/* How inputs are normalised: a byte's table (the mean and std of all values, of bytes), or
 * x·scale[g] + shift[g] over groups of gsize values. */
struct norm {
	const float *lut;
	const float *scale, *shift;
	size_t gsize;
};

/* A byte's table of (byte/255 − mean)/std. */
void data_make_lut(float lut[256], float mean, float std);
/* d's norm: its groups', else lut (bytes) or scale and shift of all values. */
struct norm data_norm_of(const struct dataset *d, const float *lut, const float *scale,
		    const float *shift);
/* Samples idx[start+k] (or start+k when idx is NULL), k in [0, n), normalised by nm, into x
 * and their labels into y (unless NULL); a text's windows unnormalised. */
void data_fill(const struct dataset *d, const struct norm *nm, const uint32_t *idx, size_t start,
	  size_t n, float *restrict x, uint16_t *restrict y);
#endif
