/* trainer: the one training step of every loop in gem (local training, a gem-work worker, an SGP
 * node, gem-sim's virtual workers): draw the next batch of a trainer's data order, seed dropout
 * from the trainer's identity and data position, forward and backward, check the loss. A feed is
 * one trainer's data order and position; a trainer is a model with its batch buffers. They are
 * apart because gem-sim's threads share a few models among many workers' feeds. */
#ifndef GEM_TRAINER_H
#define GEM_TRAINER_H
#include <jansson.h>
#include <stdint.h>

#include "nn/batcher.h"
#include "nn/data.h"
#include "nn/model.h"
#include "run/run.h"

/* What a worker (work.h) and an SGP node (sgp.h) are both told: how long to train, on which part
 * of the data, and how to reach the others (a server or the peers) and encode what they send. */
struct train_opts {
	int epochs;             /* 0: the run's budget */
	uint64_t steps;         /* > 0: exactly this many steps (iterations) */
	int part_i, part_n, part_set;    /* the part of the training set; unset: the default's */
	const char *token_file; /* the bearer token sent (and, by an SGP node, required) */
	const char *cacert;     /* PEM file of the CA that signed the https:// certificates of the
				 * server or the peers; NULL: the system's CAs */
	double retry_for;       /* seconds to keep retrying an unreachable server or peer, or to
				 * wait for the peer list or a message */
	const char *codec;      /* blob codec of what is sent (a name of blob.h); NULL: raw. A lossy
				 * one keeps what it rounds off and adds it to the next */
	double slowdown;        /* >= 1: each step takes this many times as long */
};

/* Who trains: local training, or worker / SGP node `id`. */
#define TRAINER_LOCAL (-1)

/* One trainer's data: its part of the training set in its own per-epoch order, and the number
 * of samples it has consumed (its position, which fixes the next batch and its dropout). */
struct feed {
	struct batcher b;
	uint64_t seed;    /* the run's */
	int who;          /* TRAINER_LOCAL or an id >= 0 */
	uint64_t samples; /* consumed so far, over every session */
};

/* A model instance and the buffers of one batch. */
struct trainer {
	struct model *m;
	int batch;
	float *x;
	uint16_t *y;     /* batch × model_labels */
	uint64_t *idx;   /* an external model's: the batch's sample indices */
};

/* The feed of `who` over part part_i of part_n of ds (run's seed, batch and normalisation),
 * at position 0. */
int feed_open(struct feed *f, const struct run *run, const struct dataset *ds, int who, int part_i,
	      int part_n, char *err);
/* Continue at position `samples` (every epoch visits the part once). */
void feed_seek(struct feed *f, uint64_t samples);
/* Samples in one epoch of the feed (its part). */
uint64_t feed_epoch(const struct feed *f);
/* The steps (batches, an epoch's last one short) that consume `samples` from position 0: a
 * trainer's place in its optimiser's schedule, and with the run's epochs its budget. */
uint64_t feed_steps(const struct feed *f, uint64_t samples);
void feed_close(struct feed *f);

/* The run's model, with buffers for its batch size (θ uninitialised: set model_params). */
int trainer_open(struct trainer *t, const struct run *run, char *err);
void trainer_close(struct trainer *t);

/* A mean loss of a model of `classes` classes that says its parameters have diverged: not finite,
 * or over TRAINER_DIVERGED times a uniform guess's (ln classes), which no model being trained
 * comes near and one whose parameters blew up passes at once. The one test of divergence of
 * every training loop and of gem-eval. */
#define TRAINER_DIVERGED 100
int trainer_diverged(double loss, int classes);

/* One step at the model's current θ: the next batch of f (an external model is named its
 * samples' indices, and who asks: gem-exec(7)), dropout drawn from stream
 * RNG_DROPOUT + f's position of the run's seed mixed with f's trainer, forward, backward (the
 * gradient of the mean loss in model_grads(t->m)). *loss gets the mean loss, *n the batch's
 * samples (f advances by n). Returns 0; 1 when the loss says the parameters have diverged
 * (trainer_diverged; err says so); < 0 when the model failed (an external model's child: err
 * names it and the request), which is no divergence. */
int trainer_step(struct trainer *t, struct feed *f, float *loss, int *n, char *err);
#endif
