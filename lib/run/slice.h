/* slice: how θ is cut across K servers (gem-serve --slice I/K). Slice I holds the contiguous
 * elements [off, off + len) with off = ⌊n·I/K⌋: the slices differ by one element at most, so
 * they are balanced in bytes; a tensor may straddle two slices. Every rule is element-wise (or
 * per commit, per round), so K servers applying the slices of the same commits hold, end to
 * end, the θ one server would (gem-protocol(7), "Sliced runs"). */
#ifndef GEM_SLICE_H
#define GEM_SLICE_H
#include <stddef.h>

#include "nn/layout.h"

#define SLICE_MAX 64 /* servers of one run at most */

struct slice {
	int i, k;        /* slice i of k; k = 0: not sliced (the whole of θ) */
	size_t off, len; /* its elements of θ */
};

/* Slice i of k of n elements (k = 0: the whole). */
struct slice slice_of(size_t n, int i, int k);
/* Parse "I/K" (0 <= I < K <= SLICE_MAX): 0, or -1 if it is not that. */
int slice_parse(const char *text, int *i, int *k);
/* The layout of a server's slice: the tensors it touches, clipped to it, offsets from its start
 * (a tensor cut in two keeps its name in both slices, its shape is dropped: ndim 1). */
void slice_layout(const struct layout *full, const struct slice *s, struct layout *out);
#endif
