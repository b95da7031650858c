/* batcher: one worker's batches of a dataset (nn/data.h): its part of the training set, in an
 * order that each epoch draws anew from the seed, normalised; where it stands (epoch, pos) is
 * what a checkpoint records. */
#ifndef GEM_BATCHER_H
#define GEM_BATCHER_H
#include <stddef.h>
#include <stdint.h>

#include "nn/data.h"

/* Batches of one worker's part: epoch e visits the part in an order fixed by (seed, stream,
 * e). Read epoch and pos (samples of this epoch already returned) to checkpoint; seek back. */
struct batcher {
	const struct dataset *d;
	int batch;
	uint64_t seed, stream;
	int part_i, part_n;
	uint32_t *part;  /* this worker's sample indices, in their fixed (unshuffled) order */
	uint32_t *order; /* the part shuffled for the current epoch (a text: window offsets) */
	size_t count;    /* samples in the part (a text: windows per epoch) */
	size_t lo, hi;   /* a text: the worker's slice of its bytes */
	int kept;        /* d holds this part's samples alone, in its order (batcher_keep_part) */
	long epoch;      /* current epoch, from 0 */
	size_t pos;      /* next sample of the epoch's order */
	float lut[256];  /* pixel byte → (byte/255 − mean)/std, of the mean and std of all values */
	float scale, shift; /* float features: x·scale + shift, of the same */
};

/* Worker part_i of part_n gets a disjoint, near-equal part of a permutation fixed by seed
 * (the parts cover the dataset); inputs become (pixel/255 − mean)/std, or those of d's groups
 * when it has them (dataset_set_norm). Starts at epoch 0. Of a
 * windowed text, the worker's part is the part_i-th of part_n slices of its bytes; an epoch
 * is count = (slice − 1)/seq windows at offsets drawn uniformly, with replacement, from every
 * offset whose window and next byte lie in the slice (a stream fixed by seed, stream, epoch). */
int batcher_init(struct batcher *b, const struct dataset *d, int batch, uint64_t seed,
		 uint64_t stream, int part_i, int part_n, float mean, float std, char *err);
/* Fill up to batch samples into x (batch × dim) and y (batch × seq labels for a text); return
 * how many. The last batch of an epoch may be partial; the call after it starts the next
 * epoch. */
int batcher_next(struct batcher *b, float *x, uint16_t *y);
/* The indices of the next batch, as batcher_next would fill it, into idx (batch of them): a
 * sample's index in the split, a text's window offset. Returns how many. An external model's
 * samples are drawn only this way. */
int batcher_next_index(struct batcher *b, uint64_t *idx);
/* Continue at sample pos of epoch's order, as a run checkpointed there would. */
void batcher_seek(struct batcher *b, long epoch, size_t pos);
/* Keep of d, b's dataset, only b's part: its samples, in the part's order, the others freed,
 * so that a process that trains on one part of many holds that part alone. b's batches stay
 * the samples they were (b then indexes d's count samples); d serves no other batcher after.
 * Of a text or of a part that is the whole set nothing changes. GEM_ENOMEM. */
int batcher_keep_part(struct batcher *b, struct dataset *d, char *err);
/* Release the index arrays (about 8 bytes a sample of the part). Where the batcher stands
 * stays (count, epoch, pos): batcher_resume makes them again, so that a worker that waits long
 * between its batches (one of gem-sim's thousands) need not hold them while it waits. */
void batcher_free(struct batcher *b);
/* After batcher_free: the index arrays again, as they were (0 at once when b holds them);
 * GEM_ENOMEM. batcher_next and batcher_seek need them. */
int batcher_resume(struct batcher *b, char *err);
#endif
