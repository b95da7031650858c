#include "role/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/num.h"
#include "base/rng.h"

int feed_open(struct feed *f, const struct run *run, const struct dataset *ds, int who, int part_i,
	      int part_n, char *err)
{
	memset(f, 0, sizeof *f);
	f->seed = run->spec.train.seed;
	f->who = who;
	return batcher_init(&f->b, ds, run->spec.train.batch, run->spec.train.seed,
			    RNG_BATCH_ORDER(who), part_i, part_n, (float)run->spec.mean,
			    (float)run->spec.std, err);
}

void feed_seek(struct feed *f, uint64_t samples)
{
	f->samples = samples;
	batcher_seek(&f->b, (long)(samples / f->b.count), samples % f->b.count);
}

uint64_t feed_epoch(const struct feed *f)
{
	return f->b.count;
}

uint64_t feed_steps(const struct feed *f, uint64_t samples)
{
	uint64_t count = f->b.count, batch = (uint64_t)f->b.batch;
	uint64_t per_epoch = (count + batch - 1) / batch, rest = samples % count;
	return samples / count * per_epoch + (rest + batch - 1) / batch;
}

void feed_close(struct feed *f)
{
	batcher_free(&f->b);
}

int trainer_open(struct trainer *t, const struct run *run, char *err)
{
	int rc;
	memset(t, 0, sizeof *t);
	t->batch = run->spec.train.batch;
	if ((rc = model_from_json(run->spec.model, &t->m, err)) < 0 ||
	    (rc = model_set_micro(t->m, run->spec.train.micro > 1 ? run->spec.train.micro : 1, err)) < 0 ||
	    (rc = model_reserve(t->m, t->batch, err)) < 0) {
		trainer_close(t);
		return rc;
	}
	t->x = model_input_alloc(t->m, (size_t)t->batch);
	t->y = malloc((size_t)t->batch * (size_t)model_labels(t->m) * sizeof *t->y); /* a text's: one per position */
	t->idx = malloc((size_t)t->batch * sizeof *t->idx);
	if (!t->x || !t->y || !t->idx) {
		trainer_close(t);
		return gem_errf(err, GEM_ENOMEM, "out of memory for a batch of %d",
				run->spec.train.batch);
	}
	return 0;
}

void trainer_close(struct trainer *t)
{
	model_free(t->m);
	free(t->x);
	free(t->y);
	free(t->idx);
	memset(t, 0, sizeof *t);
}

int trainer_diverged(double loss, int classes)
{
	return !isfinite(loss) || loss > TRAINER_DIVERGED * log(classes > 1 ? classes : 2);
}

int trainer_step(struct trainer *t, struct feed *f, float *loss, int *n, char *err)
{
	struct rng drop;
	/* dropout is a function of who trains and where in its data it stands: a resumed run, a
	 * replayed one and gem-sim draw what the original drew */
	if (model_exec_info(t->m)) {
		/* the child draws its dropout from the same four numbers (gem-exec(7)) */
		struct exec_batch b = {.worker = f->who, .part_i = f->b.part_i, .part_n = f->b.part_n,
				       .position = f->samples, .seed = f->seed};
		int rc;
		b.n = *n = batcher_next_index(&f->b, t->idx);
		if ((rc = model_train_ext(t->m, t->idx, &b, loss, err)) < 0)
			return rc;
	} else {
		rng_seed(&drop, f->seed ^ ((uint64_t)(f->who + 1) << 40), RNG_DROPOUT + f->samples);
		*n = batcher_next(&f->b, t->x, t->y);
		*loss = model_train_step(t->m, t->x, t->y, *n, &drop);
	}
	f->samples += (uint64_t)*n;
	if (trainer_diverged(*loss, model_classes(t->m))) {
		char l[16];
		gem_errf(err, GEM_EFAIL, "the loss is %s: diverged", num_format(l, sizeof l, "%g", (double)*loss));
		return 1;
	}
	return 0;
}
