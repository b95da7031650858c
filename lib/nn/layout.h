/* layout: how a model's parameters lie in one flat float32 vector θ. Every module that moves
 * or updates parameters (model, blobs, rules, server) sees θ as one contiguous vector and uses
 * this table when it needs the tensors (per-tensor statistics, shapes on the wire). */
#ifndef GEM_LAYOUT_H
#define GEM_LAYOUT_H
#include <stddef.h>

#define LAYOUT_MAX_TENSORS 64
#define LAYOUT_NAME_MAX 32

struct layout_tensor {
	char name[LAYOUT_NAME_MAX]; /* "0.weight", "0.bias", ... (layer index . kind) */
	int ndim;
	int shape[4];
	size_t offset; /* first element in θ */
	size_t size;   /* number of elements */
};

struct layout {
	int ntensors;
	size_t total; /* elements in θ: the sum of the sizes */
	struct layout_tensor t[LAYOUT_MAX_TENSORS];
};

/* Slice i of k (0 <= i < k) of n elements: [*off, *off + *len) with off = ⌊n·i/k⌋, so that
 * the k slices tile the n elements and differ by one element at most (n < 2^29, blob.h: the
 * products fit). A server's slice of θ and a DiLoCo fragment are such slices. */
static inline void layout_slice(size_t n, int i, int k, size_t *off, size_t *len)
{
	*off = n * (size_t)i / (size_t)k;
	*len = n * (size_t)(i + 1) / (size_t)k - *off;
}
#endif
