/* shard: how θ is cut across K servers (gem-serve --shard I/K). Shard I holds the contiguous
 * elements [off, off + len) with off = ⌊n·I/K⌋: the slices differ by one element at most, so
 * they are balanced in bytes; a tensor may straddle two shards. Every rule is element-wise (or
 * per commit, per round), so K servers applying the slices of the same commits hold, end to
 * end, the θ one server would (gem-protocol(7), "Sharded runs"). */
#ifndef GEM_SHARD_H
#define GEM_SHARD_H
#include <stddef.h>

#include "nn/layout.h"

#define SHARD_MAX 64 /* servers of one run at most */

struct shard {
	int i, k;        /* shard i of k; k = 0: not sharded (the whole of θ) */
	size_t off, len; /* its elements of θ */
};

/* Shard i of k of n elements (k = 0: the whole). */
struct shard shard_of(size_t n, int i, int k);
/* Parse "I/K" (0 <= I < K <= SHARD_MAX): 0, or -1 if it is not that. */
int shard_parse(const char *text, int *i, int *k);
/* The layout of a shard's slice: the tensors it touches, clipped to it, offsets from its start
 * (a tensor cut in two keeps its name in both shards, its shape is dropped: ndim 1). */
void shard_layout(const struct layout *full, const struct shard *s, struct layout *out);
#endif
