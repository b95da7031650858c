/* t2003: batches: parts are disjoint and cover the data, orders are reproducible per
 * (seed, stream, epoch), seek recovers a position, the last batch of an epoch is partial. */
#include "nn/batcher.h"
#include "nn/data.h"
#include "base/err.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

enum { N = 1003, DIM = 6, B = 32 };

/* Each sample's pixels encode its index, so a batch tells which samples it holds. */
static int sample_of(const float *x)
{
	return (int)lroundf(x[0] * 255.0f) * 256 + (int)lroundf(x[1] * 255.0f);
}

/* One epoch of b: sample indices in order into out; returns count, checks batch sizes. */
static int epoch_order(struct batcher *b, int *out, int *sizes_ok)
{
	float x[B * DIM];
	uint16_t y[B];
	int n = 0, k;
	long e = -1;
	*sizes_ok = 1;
	do {
		k = batcher_next(b, x, y);
		if (e < 0)
			e = b->epoch;
		for (int i = 0; i < k; i++) {
			out[n + i] = sample_of(x + i * DIM);
			if (y[i] != out[n + i] % 10)
				*sizes_ok = 0;
		}
		n += k;
		if (k != B && b->pos != b->count)
			*sizes_ok = 0;
	} while (b->pos < b->count && b->epoch == e);
	return n;
}

int main(void)
{
	static uint8_t images[N * DIM];
	static uint16_t labels[N];
	static int seen[N], o1[N], o2[N], o3[N];
	struct dataset d = {.n = N, .rows = 2, .cols = 3, .dim = DIM, .classes = 10, .images = images, .labels = labels};
	char err[GEM_ERRMAX] = "";
	struct batcher b, c;
	int total = 0, disjoint = 1, sizes_ok, n1, n2, same, ok_sizes = 1;
	float x[B * DIM];
	uint16_t y[B];

	for (int i = 0; i < N; i++) {
		images[i * DIM] = (uint8_t)(i / 256);
		images[i * DIM + 1] = (uint8_t)(i % 256);
		for (int j = 2; j < DIM; j++)
			images[i * DIM + j] = (uint8_t)(i * j);
		labels[i] = (uint16_t)(i % 10);
	}

	/* 4 parts, from 4 batchers with different streams: disjoint, covering, near-equal. */
	for (int s = 0; s < 4; s++) {
		ok(batcher_init(&b, &d, B, 7, (uint64_t)s, s, 4, 0.f, 1.f, err) == 0, "part %d: %s", s,
		   err);
		n1 = epoch_order(&b, o1, &sizes_ok);
		ok_sizes &= sizes_ok;
		ok(n1 == N * (s + 1) / 4 - N * s / 4, "part %d holds %d samples", s, n1);
		for (int i = 0; i < n1; i++)
			if (seen[o1[i]]++)
				disjoint = 0;
		total += n1;
		batcher_free(&b);
	}
	ok(disjoint, "parts are disjoint");
	ok(total == N, "parts cover the dataset (%d samples)", total);
	ok(ok_sizes, "full batches, labels match, only the last batch partial");

	/* Same seed and stream: same order; another epoch or stream: another order. */
	batcher_init(&b, &d, B, 11, 3, 1, 3, 0.f, 1.f, err);
	batcher_init(&c, &d, B, 11, 3, 1, 3, 0.f, 1.f, err);
	n1 = epoch_order(&b, o1, &sizes_ok);
	n2 = epoch_order(&c, o2, &sizes_ok);
	ok(n1 == n2 && !memcmp(o1, o2, sizeof(int) * (size_t)n1), "same seed, same order");
	ok(b.epoch == 0 && b.pos == b.count, "epoch 0 done, position at its end");
	n2 = epoch_order(&b, o2, &sizes_ok);
	ok(b.epoch == 1, "the call after the last batch starts epoch 1");
	same = !memcmp(o1, o2, sizeof(int) * (size_t)n1);
	ok(n1 == n2 && !same, "epoch 1 has another order");
	{
		/* ... but the same samples */
		static int cnt[N];
		int perm = 1;
		for (int i = 0; i < n1; i++)
			cnt[o1[i]]++;
		for (int i = 0; i < n2; i++)
			cnt[o2[i]]--;
		for (int i = 0; i < N; i++)
			if (cnt[i])
				perm = 0;
		ok(perm, "epoch 1 visits the same part");
	}
	batcher_free(&c);
	batcher_init(&c, &d, B, 11, 4, 1, 3, 0.f, 1.f, err);
	n2 = epoch_order(&c, o3, &sizes_ok);
	ok(n2 == n1 && memcmp(o1, o3, sizeof(int) * (size_t)n1), "another stream, another order");
	batcher_free(&c);

	/* Seek: a fresh batcher put at (epoch 1, pos 64) continues exactly as b did. */
	batcher_init(&c, &d, B, 11, 3, 1, 3, 0.f, 1.f, err);
	batcher_seek(&c, 1, 64);
	n2 = 0;
	while (c.pos < c.count) {
		int k = batcher_next(&c, x, y);
		for (int i = 0; i < k; i++)
			o3[n2++] = sample_of(x + i * DIM);
	}
	ok(n2 == n1 - 64 && !memcmp(o3, o2 + 64, sizeof(int) * (size_t)n2),
	   "seek(1, 64) reproduces epoch 1 from sample 64");
	batcher_seek(&c, 0, 0);
	n2 = epoch_order(&c, o3, &sizes_ok);
	ok(n2 == n1 && !memcmp(o3, o1, sizeof(int) * (size_t)n1), "seek(0, 0) replays epoch 0");
	batcher_seek(&c, 5, c.count);
	batcher_next(&c, x, y);
	ok(c.epoch == 6 && c.pos == (size_t)B, "seek to the end of an epoch continues with the next");
	batcher_free(&c);

	/* Free and resume between batches (gem-sim's waiting workers): epoch 1 as b saw it. */
	batcher_init(&c, &d, B, 11, 3, 1, 3, 0.f, 1.f, err);
	batcher_seek(&c, 1, 0);
	n2 = 0;
	same = 1;
	while (c.pos < c.count && same) {
		int k = batcher_next(&c, x, y);
		for (int i = 0; i < k; i++)
			o3[n2++] = sample_of(x + i * DIM);
		batcher_free(&c);
		same = !c.order && !c.part && c.count == 334 && batcher_resume(&c, err) == 0;
	}
	ok(same && batcher_resume(&c, err) == 0, "resume after free, and once more: %s", err);
	ok(n2 == n1 && !memcmp(o3, o2, sizeof(int) * (size_t)n2),
	   "freed and resumed after every batch: epoch 1's order");
	batcher_free(&c);

	/* A worker's dataset cut to its part after a batch of epoch 0: the same samples with the
	 * same labels, in the same orders (the rest of epoch 0, epoch 1 after a free and resume). */
	{
		struct dataset own = d;
		int first[B];
		own.images = malloc(sizeof images);
		own.labels = malloc(sizeof labels);
		memcpy(own.images, images, sizeof images);
		memcpy(own.labels, labels, sizeof labels);
		batcher_init(&c, &own, B, 11, 3, 1, 3, 0.f, 1.f, err);
		batcher_next(&c, x, y);
		for (int i = 0; i < B; i++)
			first[i] = sample_of(x + i * DIM);
		ok(batcher_keep_part(&c, &own, err) == 0 && own.n == 334 && c.count == 334,
		   "kept: the dataset holds the part's 334 samples: %s", err);
		n2 = epoch_order(&c, o3 + B, &sizes_ok) + B;
		memcpy(o3, first, sizeof first);
		ok(sizes_ok && n2 == n1 && !memcmp(o3, o1, sizeof(int) * (size_t)n1),
		   "kept: the rest of epoch 0 as before, labels with their samples");
		batcher_free(&c);
		ok(batcher_resume(&c, err) == 0, "kept: resumed: %s", err);
		n2 = epoch_order(&c, o3, &sizes_ok);
		ok(sizes_ok && n2 == n1 && !memcmp(o3, o2, sizeof(int) * (size_t)n2),
		   "kept: epoch 1 as before");
		batcher_free(&c);
		dataset_free(&own);
		own = d;
		batcher_init(&c, &own, B, 11, 3, 0, 1, 0.f, 1.f, err);
		ok(batcher_keep_part(&c, &own, err) == 0 && own.images == images && own.n == N,
		   "a part of the whole set keeps the dataset as it is");
		batcher_free(&c);
	}

	/* Partial last batch: 334 samples = 10×32 + 14. */
	ok(b.count == 334, "part 1 of 3 has 334 samples");
	batcher_seek(&b, 2, 320);
	ok(batcher_next(&b, x, y) == 14 && b.pos == 334, "last batch of 14");
	ok(batcher_next(&b, x, y) == B && b.epoch == 3, "then a full batch of epoch 3");
	batcher_free(&b);

	/* Normalisation */
	batcher_init(&b, &d, 1, 1, 0, 0, 1, 0.25f, 0.5f, err);
	batcher_next(&b, x, y);
	ok(x[2] == (float)((images[b.order[0] * DIM + 2] / 255.0 - 0.25) / 0.5),
	   "input is (pixel/255 - mean)/std");
	batcher_free(&b);

	ok(batcher_init(&b, &d, 0, 1, 0, 0, 1, 0.f, 1.f, err) == GEM_EUSAGE, "batch 0: %s", err);
	ok(batcher_init(&b, &d, 8, 1, 0, 4, 4, 0.f, 1.f, err) == GEM_EUSAGE, "part 4 of 4: %s", err);
	ok(batcher_init(&b, &d, 8, 1, 0, 0, N + 1, 0.f, 1.f, err) == GEM_EUSAGE,
	   "more parts than samples: %s", err);
	ok(batcher_init(&b, &d, 8, 1, 0, 0, 1, 0.f, 0.f, err) == GEM_EUSAGE, "std 0: %s", err);
	return done_testing();
}
