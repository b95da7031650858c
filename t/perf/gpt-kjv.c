/* gpt-kjv: the quality check of the built-in gpt on the kjv text, trained in one process as
 * the PyTorch reference it is judged against was: AdamW (lr 1e-3, β 0.9/0.95, weight decay
 * 0.1 on matrices), 100 steps of linear warm-up then a cosine down to lr/10 at the last step,
 * gradients clipped to norm 1, batches of 32 windows of 128 bytes drawn at random from the
 * first 90% of the text (seed 1). Prints TSV on stdout: held-out bits per byte (the mean
 * negative log-likelihood over 20 fixed batches of 32 windows of the last 10%, in bits) after
 * about 0.6, 1.2, 2.3 and 4.5 M tokens, with the training loss and the time so far; progress on
 * stderr. Not part of make bench: it takes minutes (share/gem/models/gpt.json, found via
 * $GEM_SRC; kjv from make deps).
 * Usage: gpt-kjv [M tokens, default 4.5 [seed, default 1 [threads, default 1]]] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/rng.h"
#include "nn/batcher.h"
#include "nn/data.h"
#include "nn/layer_ops.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/optim.h"

#define B 32
#define EVAL_BATCHES 20

/* Held-out bits per byte: 20 batches of 32 windows of te at offsets fixed by the seed. */
static double heldout_bpb(struct model *m, const struct dataset *te, const uint32_t *off, float *x, uint16_t *y)
{
	int T = te->seq;
	double nll = 0;
	for (int k = 0; k < EVAL_BATCHES; k++) {
		for (int i = 0; i < B; i++)
			for (int j = 0; j < T; j++) {
				x[i * T + j] = te->text[off[k * B + i] + j];
				y[i * T + j] = te->text[off[k * B + i] + j + 1];
			}
		nll += model_evaluate(m, x, y, B, NULL, NULL);
	}
	return nll / ((double)EVAL_BATCHES * B * T) / log(2.0);
}

int main(int argc, char **argv)
{
	double mtokens = argc > 1 ? atof(argv[1]) : 4.5;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	int threads = argc > 3 ? atoi(argv[3]) : 1;
	static const double marks[] = {0.6, 1.2, 2.3, 4.5};
	char path[4096], dir[4096], err[GEM_ERRMAX];
	const char *src = getenv("GEM_SRC");
	struct dataset tr, te;
	struct model *m;
	struct batcher bt;
	struct optim o;
	struct rng r;
	if (!(mtokens > 0) || threads < 1 || argc > 4) {
		fprintf(stderr, "usage: gpt-kjv [M tokens [seed [threads]]]\n");
		return 2;
	}
	layers_set_threads(threads);
	snprintf(path, sizeof path, "%s/share/gem/models/gpt.json", src ? src : ".");
	if (model_from_file(path, NULL, &m, err) < 0 || dataset_resolve(DATA_KJV, dir, sizeof dir, err) < 0 ||
	    dataset_load(dir, "train", &tr, err) < 0 || dataset_load(dir, "test", &te, err) < 0 ||
	    dataset_window(&tr, (int)model_input_size(m), err) < 0 ||
	    dataset_window(&te, (int)model_input_size(m), err) < 0 || model_fits(m, &tr, err) < 0 ||
	    model_reserve(m, B, err) < 0 || batcher_init(&bt, &tr, B, seed, RNG_BATCH_ORDER(-1), 0, 1, 0, 1, err) < 0) {
		fprintf(stderr, "gpt-kjv: %s\n", err);
		return 1;
	}
	int T = tr.seq;
	uint64_t steps = (uint64_t)ceil(mtokens * 1e6 / (B * T));
	struct optim_config c = {.kind = OPTIM_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .warmup = 100,
				 .schedule = LR_COSINE, .total_steps = steps, .clip = 1.0f};
	model_init_params(m, seed);
	if (optim_init(&o, &c, model_layout(m), err) < 0) {
		fprintf(stderr, "gpt-kjv: %s\n", err);
		return 1;
	}
	float *x = layer_falloc((size_t)B * T, sizeof *x);
	uint16_t *y = malloc((size_t)B * T * sizeof *y);
	uint32_t off[EVAL_BATCHES * B];
	rng_seed(&r, seed, RNG_EVAL_SUBSET);
	for (int i = 0; i < EVAL_BATCHES * B; i++)
		off[i] = rng_below(&r, (uint32_t)(te.len - (size_t)T));
	printf("# tokens\tsteps\theld-out bits/byte\ttrain loss (nats, smoothed over about 50 steps)\tseconds\n");
	printf("0\t0\t%.4f\t-\t0\n", heldout_bpb(m, &te, off, x, y));
	fflush(stdout);
	double t0 = clock_mono(), recent = 0;
	size_t next = 0;
	for (uint64_t s = 1; s <= steps; s++) {
		int n = batcher_next(&bt, x, y);
		float loss = model_train_step(m, x, y, n, &r);
		if (!isfinite(loss)) {
			fprintf(stderr, "gpt-kjv: the loss is %g at step %llu\n", (double)loss, (unsigned long long)s);
			return 1;
		}
		optim_step(&o, model_params(m), model_grads(m));
		recent += (loss - recent) / (s < 50 ? (double)s : 50.0);
		double tokens = (double)s * B * T;
		if (s % 50 == 0)
			fprintf(stderr, "gpt-kjv: step %llu of %llu, loss %.3f, %.0f tokens/s\n", (unsigned long long)s,
				(unsigned long long)steps, recent, tokens / (clock_mono() - t0));
		while (next < sizeof marks / sizeof *marks && (tokens >= marks[next] * 1e6 || s == steps) &&
		       marks[next] <= mtokens + 1e-9) {
			printf("%.0f\t%llu\t%.4f\t%.4f\t%.0f\n", tokens, (unsigned long long)s, heldout_bpb(m, &te, off, x, y),
			       recent, clock_mono() - t0);
			fflush(stdout);
			next++;
		}
	}
	optim_free(&o);
	batcher_free(&bt);
	dataset_free(&tr);
	dataset_free(&te);
	model_free(m);
	free(x);
	free(y);
	return 0;
}
