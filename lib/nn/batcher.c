#include "nn/batcher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/rng.h"
#include "nn/data_impl.h"

static uint64_t splitmix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* order = part shuffled by an rng seeded from (seed, stream, epoch) alone, so any epoch's
 * order can be recomputed without replaying the ones before it. */
/* Whether d's samples are a text's windows: its bytes', or an external model's text's. */
static int windowed(const struct dataset *d)
{
	return d->text || (d->external && d->seq);
}

static void shuffle_epoch(struct batcher *b)
{
	struct rng r;
	rng_seed(&r, splitmix64(b->seed ^ splitmix64((uint64_t)b->epoch)), b->stream);
	if (windowed(b->d)) { /* a text: the epoch's windows at offsets drawn with replacement */
		uint32_t span = (uint32_t)(b->hi - b->lo - (size_t)b->d->seq);
		for (size_t k = 0; k < b->count; k++)
			b->order[k] = (uint32_t)b->lo + rng_below(&r, span);
		return;
	}
	memcpy(b->order, b->part, b->count * sizeof *b->order);
	rng_shuffle(&r, b->order, b->count);
}

/* batcher_init of a windowed text: the worker's slice of its bytes. */
static int batcher_init_text(struct batcher *b, const struct dataset *d, int part_i, int part_n, char *err)
{
	b->lo = d->len * (size_t)part_i / (size_t)part_n;
	b->hi = d->len * (size_t)(part_i + 1) / (size_t)part_n;
	if (d->seq < 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: the text is not cut into windows");
	if (b->hi - b->lo < (size_t)d->seq + 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: part %d of %d of the text has %zu bytes, too few for a "
				"window of %d and the byte after", part_i, part_n, b->hi - b->lo, d->seq);
	b->count = (b->hi - b->lo - 1) / (size_t)d->seq;
	return 0;
}

/* b->part, of images: its part of the one permutation of all samples, fixed by seed alone so
 * that it can be made again; or, once d holds that part alone, d's samples in order. -1: out of
 * memory. */
static int part_fill(struct batcher *b)
{
	const struct dataset *d = b->d;
	uint32_t *perm;
	struct rng r;
	if (b->kept) {
		for (size_t k = 0; k < b->count; k++)
			b->part[k] = (uint32_t)k;
		return 0;
	}
	if (!(perm = malloc((size_t)d->n * sizeof *perm)))
		return -1;
	for (int i = 0; i < d->n; i++)
		perm[i] = (uint32_t)i;
	/* One permutation for all workers (seed only), cut into part_n contiguous parts. */
	rng_seed(&r, b->seed, RNG_PART);
	rng_shuffle(&r, perm, (size_t)d->n);
	memcpy(b->part, perm + (size_t)d->n * (size_t)b->part_i / (size_t)b->part_n,
	       b->count * sizeof *perm);
	free(perm);
	return 0;
}

/* The index arrays of b, whose count is set: its part (part_fill) and room for an epoch's
 * order. -1: out of memory (nothing allocated). */
static int batcher_alloc(struct batcher *b)
{
	if (windowed(b->d))
		return (b->order = malloc(b->count * sizeof *b->order)) ? 0 : -1;
	b->part = malloc(b->count * sizeof *b->part);
	b->order = malloc(b->count * sizeof *b->order);
	if (!b->part || !b->order || part_fill(b) < 0) {
		batcher_free(b);
		return -1;
	}
	return 0;
}

int batcher_init(struct batcher *b, const struct dataset *d, int batch, uint64_t seed,
		 uint64_t stream, int part_i, int part_n, float mean, float std, char *err)
{
	int rc;
	memset(b, 0, sizeof *b);
	if (batch < 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: batch size %d", batch);
	if (part_n < 1 || part_i < 0 || part_i >= part_n)
		return gem_errf(err, GEM_EUSAGE, "batcher: part %d of %d", part_i, part_n);
	*b = (struct batcher){.d = d, .batch = batch, .seed = seed, .stream = stream, .part_i = part_i,
			      .part_n = part_n};
	if (windowed(d)) {
		if ((rc = batcher_init_text(b, d, part_i, part_n, err)) < 0)
			return rc;
	} else {
		if (part_n > d->n)
			return gem_errf(err, GEM_EUSAGE, "batcher: %d parts of %d samples", part_n,
					d->n);
		if (!(std > 0) || !isfinite(mean) || !isfinite(std))
			return gem_errf(err, GEM_EUSAGE, "batcher: bad normalisation mean %g std %g",
					(double)mean, (double)std);
		b->count = (size_t)d->n * (size_t)(part_i + 1) / (size_t)part_n -
			   (size_t)d->n * (size_t)part_i / (size_t)part_n;
		data_make_lut(b->lut, mean, std);
		b->scale = 1 / std;
		b->shift = -mean / std;
	}
	return batcher_resume(b, err);
}

int batcher_resume(struct batcher *b, char *err)
{
	if (b->order)
		return 0;
	if (batcher_alloc(b) < 0)
		return gem_errf(err, GEM_ENOMEM, "batcher: out of memory");
	shuffle_epoch(b);
	return 0;
}

int batcher_keep_part(struct batcher *b, struct dataset *d, char *err)
{
	size_t row = (size_t)d->dim * (d->images ? 1 : sizeof(float));
	uint8_t *from = d->images ? d->images : (uint8_t *)d->xf, *x;
	uint16_t *y;
	int rc;
	if (d->text || d->external || b->kept || b->count == (size_t)d->n)
		return 0;
	if ((rc = batcher_resume(b, err)) < 0)
		return rc;
	x = malloc(b->count * row);
	y = malloc(b->count * sizeof *y);
	if (!x || !y) {
		free(x);
		free(y);
		return gem_errf(err, GEM_ENOMEM, "batcher: out of memory for the part's %zu samples",
				b->count);
	}
	for (size_t k = 0; k < b->count; k++) {
		memcpy(x + k * row, from + (size_t)b->part[k] * row, row);
		y[k] = d->labels[b->part[k]];
	}
	free(from);
	free(d->labels);
	if (d->images)
		d->images = x;
	else
		d->xf = (float *)x;
	d->labels = y;
	d->n = (int)b->count;
	b->kept = 1;
	/* the shuffle moves positions whatever they hold: the epoch's order of the new indices is
	 * the old one's, sample for sample */
	part_fill(b);
	shuffle_epoch(b);
	return 0;
}

/* The next batch's size, a new epoch begun when the last one is over. */
static size_t next_batch(struct batcher *b)
{
	if (b->pos >= b->count) {
		b->epoch++;
		b->pos = 0;
		shuffle_epoch(b);
	}
	return b->count - b->pos < (size_t)b->batch ? b->count - b->pos : (size_t)b->batch;
}

int batcher_next_index(struct batcher *b, uint64_t *idx)
{
	size_t k = next_batch(b);
	for (size_t i = 0; i < k; i++)
		idx[i] = b->order[b->pos + i];
	b->pos += k;
	return (int)k;
}

int batcher_next(struct batcher *b, float *x, uint16_t *y)
{
	struct norm nm;
	size_t k;
	if (b->d->external)
		return 0;
	k = next_batch(b);
	if (b->d->text) {
		size_t seq = (size_t)b->d->seq;
		for (size_t i = 0; i < k; i++)
			dataset_fill_window(b->d, b->order[b->pos + i], x + i * seq, y + i * seq);
		b->pos += k;
		return (int)k;
	}
	nm = data_norm_of(b->d, b->lut, &b->scale, &b->shift);
	data_fill(b->d, &nm, b->order, b->pos, k, x, y);
	b->pos += k;
	return (int)k;
}

void batcher_seek(struct batcher *b, long epoch, size_t pos)
{
	b->epoch = epoch;
	b->pos = pos < b->count ? pos : b->count;
	shuffle_epoch(b);
}

void batcher_free(struct batcher *b)
{
	free(b->part);
	free(b->order);
	b->part = b->order = NULL;
}
