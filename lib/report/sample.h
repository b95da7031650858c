/* sample: text generated from a run's θ, a byte at a time: the model's next-byte
 * distribution after the last T bytes (its positions) of the prompt and what came so far,
 * sharpened or flattened by a temperature, cut to the k likeliest, drawn from a seeded stream
 * (RNG_SAMPLE), so that one seed gives the same bytes on every machine. gem-sample prints it. */
#ifndef GEM_SAMPLE_H
#define GEM_SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#include "run/run.h"

#define SAMPLE_MAX_BYTES (1L << 20) /* bytes generated at most */

struct sample_opts {
	const uint8_t *prompt; /* the bytes the text continues (at least one) */
	size_t prompt_len;
	long bytes;            /* to generate, in [1, SAMPLE_MAX_BYTES] */
	double temperature;    /* > 0: log-probabilities divided by it; 0: the likeliest byte */
	int top_k;             /* draw among the k likeliest; 0: among all */
	uint64_t seed;
};

/* Generate o->bytes bytes into out from θ of run r (params.gem, or a sliced run's slices).
 * GEM_EUSAGE: a bad option, a model that is not a byte-level sequence model (an embedding
 * first, a loss at every position, no output beyond its vocabulary), a prompt byte beyond its
 * vocabulary; GEM_EFAIL: θ cannot be read. */
int sample_run(const struct run *r, const struct sample_opts *o, uint8_t *out, char *err);
#endif
