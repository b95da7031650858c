#include "report/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/rng.h"
#include "nn/model.h"

/* What generation needs of the model: a sequence model whose every output can be fed back
 * (classes within its vocabulary), and a prompt within the vocabulary. */
static int check_model(const struct model *m, const struct sample_opts *o, char *err)
{
	int t = model_labels(m), top = 0;
	struct dataset d = {.n = 1, .rows = 1, .cols = t, .dim = t, .seq = t,
			    .text = (uint8_t *)o->prompt, .len = o->prompt_len};
	if (model_exec_info(m)) {
		/* an external language model: its window, and the prompt's bytes among its tokens */
		for (size_t i = 0; i < o->prompt_len; i++)
			if (o->prompt[i] >= model_classes(m))
				return gem_errf(err, GEM_EUSAGE, "the prompt: byte %d is beyond the model's %d tokens",
						o->prompt[i], model_classes(m));
		return t < 2 || model_classes(m) > 256
			       ? gem_errf(err, GEM_EUSAGE, "the external model is not a language model of bytes "
						   "(positions, at most 256 classes: gem-exec(7)): nothing to sample")
			       : 0;
	}
	if (t < 2 || (size_t)t != model_input_size(m))
		return gem_errf(err, GEM_EUSAGE, "the model is not a sequence model (an embedding first, a "
				"loss at every position: gem-model(5)): nothing to sample");
	for (size_t i = 0; i < o->prompt_len; i++)
		if (o->prompt[i] + 1 > top)
			top = o->prompt[i] + 1;
	d.classes = model_classes(m);
	if (model_fits(m, &d, err) < 0) {
		gem_errprefix(err, "the model's outputs cannot be fed back: ");
		return GEM_EUSAGE;
	}
	d.classes = top;
	if (model_fits(m, &d, err) < 0) {
		gem_errprefix(err, "the prompt: ");
		return GEM_EUSAGE;
	}
	return 0;
}

/* One byte drawn from the row logp of k classes as o says; p is k doubles of scratch, idx k
 * ints. */
static int draw(const float *logp, int k, const struct sample_opts *o, struct rng *r, double *p, int *idx)
{
	int n = k, best = 0;
	double sum = 0, u, acc = 0;
	for (int c = 1; c < k; c++)
		if (logp[c] > logp[best])
			best = c;
	if (o->temperature == 0)
		return best;
	for (int c = 0; c < k; c++)
		idx[c] = c;
	if (o->top_k > 0 && o->top_k < k) {
		/* the k likeliest first (a partial selection sort: k is small), ties to the lower byte */
		for (int i = 0; i < o->top_k; i++) {
			int m = i;
			for (int j = i + 1; j < k; j++)
				if (logp[idx[j]] > logp[idx[m]])
					m = j;
			int t = idx[i];
			idx[i] = idx[m];
			idx[m] = t;
		}
		n = o->top_k;
	}
	for (int i = 0; i < n; i++)
		sum += p[i] = exp(((double)logp[idx[i]] - logp[best]) / o->temperature);
	u = rng_float(r) * sum;
	for (int i = 0; i < n; i++)
		if ((acc += p[i]) > u)
			return idx[i];
	return idx[n - 1];
}

/* Generate into out with m loaded (reserved for one sample): each byte from the model's row at
 * the last position of the context, the last t bytes of prompt + out (positions after a
 * shorter context hold 0: attention is causal, they change nothing before them). */
static int generate(struct model *m, const struct sample_opts *o, float *x, double *p, int *idx,
		    uint8_t *out, char *err)
{
	int t = model_labels(m), k = model_classes(m), ext = model_exec_info(m) != NULL;
	uint16_t *tok = ext ? malloc(sizeof *tok * (size_t)t) : NULL;
	struct rng r;
	if (ext && !tok)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	rng_seed(&r, o->seed, RNG_SAMPLE);
	for (long i = 0; i < o->bytes; i++) {
		size_t have = o->prompt_len + (size_t)i, len = have < (size_t)t ? have : (size_t)t;
		const float *row;
		for (size_t j = 0; j < (size_t)t; j++) {
			size_t at = have - len + j; /* in prompt + out */
			x[j] = j >= len ? 0.0f : at < o->prompt_len ? o->prompt[at] : out[at - o->prompt_len];
		}
		if (ext) {
			/* an external model is asked about the context alone, not the padding after it */
			for (size_t j = 0; j < len; j++)
				tok[j] = (uint16_t)x[j];
			if (!(row = model_predict_ext(m, tok, (int)len, err))) {
				free(tok);
				return GEM_EFAIL;
			}
		} else {
			row = model_predict(m, x, 1) + (len - 1) * (size_t)k;
		}
		out[i] = (uint8_t)draw(row, k, o, &r, p, idx);
	}
	free(tok);
	return 0;
}

int sample_run(const struct run *r, const struct sample_opts *o, uint8_t *out, char *err)
{
	struct run_progress pr;
	struct model *m = NULL;
	float *x = NULL;
	double *p = NULL;
	int *idx = NULL, rc;

	if (o->prompt_len < 1 || o->bytes < 1 || o->bytes > SAMPLE_MAX_BYTES || !(o->temperature >= 0) ||
	    o->top_k < 0)
		return gem_errf(err, GEM_EUSAGE, "sample: an empty prompt, or bytes, temperature or top-k "
				"out of range");
	if ((rc = model_from_json(r->spec.model, &m, err)) < 0)
		return rc;
	if ((rc = check_model(m, o, err)) < 0 || (rc = model_reserve(m, 1, err)) < 0 ||
	    (rc = run_params_load_merged(r, model_params(m), model_nparams(m), &pr, err)) < 0) {
		model_free(m);
		return rc;
	}
	/* one sample's input; an external model's context, its window of token ids (its input
	 * is one value a sample) */
	x = model_input_alloc(m, model_exec_info(m) ? model_labels(m) : 1);
	p = malloc(sizeof *p * (size_t)model_classes(m));
	idx = malloc(sizeof *idx * (size_t)model_classes(m));
	if (!x || !p || !idx)
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	else
		rc = generate(m, o, x, p, idx, out, err);
	free(x);
	free(p);
	free(idx);
	model_free(m);
	return rc;
}
