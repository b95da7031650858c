#include "report/eval.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/rng.h"

/* ---- evaluation ---- */

int eval_buf_init(struct eval_buf *b, struct model *m, char *err)
{
	size_t labels = (size_t)model_labels(m);
	memset(b, 0, sizeof *b);
	/* a sequence model's activations are T rows per sample: a training batch's worth */
	b->chunk = labels > 1 ? EVAL_TEXT_BATCH : EVAL_CHUNK;
	b->x = model_input_alloc(m, b->chunk);
	b->y = malloc((size_t)b->chunk * labels * sizeof *b->y);
	b->pred = malloc((size_t)b->chunk * labels * sizeof *b->pred);
	if (!b->x || !b->y || !b->pred) {
		eval_buf_free(b);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	return model_reserve(m, b->chunk, err);
}

void eval_buf_free(struct eval_buf *b)
{
	free(b->x);
	free(b->y);
	free(b->pred);
	memset(b, 0, sizeof *b);
}

/* A text's fixed windows: EVAL_TEXT_BATCHES batches of b->chunk (byte values: not normalised). */
/* The first n predictions of b counted by class (the first EVAL_MAX_CLASSES classes). */
static void tally(struct eval_result *res, const struct eval_buf *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b->y[i] < EVAL_MAX_CLASSES) {
			res->class_n[b->y[i]]++;
			res->class_correct[b->y[i]] += b->pred[i] == b->y[i];
		}
}

static void eval_text(struct eval_buf *b, struct model *m, const struct dataset *d, struct eval_result *res)
{
	size_t labels = (size_t)model_labels(m);
	double loss = 0;
	long correct = 0;
	struct rng r;
	rng_seed(&r, EVAL_TEXT_SEED, RNG_EVAL_SUBSET);
	for (int k = 0; k < EVAL_TEXT_BATCHES; k++) {
		for (int i = 0; i < b->chunk; i++)
			dataset_fill_window(d, rng_below(&r, (uint32_t)(d->len - labels)), b->x + (size_t)i * labels,
					    b->y + (size_t)i * labels);
		loss += model_evaluate(m, b->x, b->y, b->chunk, &correct, b->pred);
		tally(res, b, (size_t)b->chunk * labels);
	}
	res->n = (long)EVAL_TEXT_BATCHES * b->chunk;
	res->loss = loss / ((double)res->n * (double)labels);
	res->accuracy = (double)correct / ((double)res->n * (double)labels);
}

int eval_run(struct eval_buf *b, struct model *m, const struct dataset *d, float mean, float std,
	     struct eval_result *res, char *err)
{
	int classes = model_classes(m);
	double loss = 0;
	long correct = 0;

	if (model_fits(m, d, err) < 0)
		return GEM_EUSAGE;
	memset(res, 0, sizeof *res);
	res->classes = classes;
	if (model_exec_info(m)) {
		/* its own test split, all of it, as the child scores it (no classes tallied) */
		uint64_t count;
		long long right;
		int rc = model_eval_ext(m, &loss, &count, &right, err);
		if (rc < 0)
			return rc;
		res->n = (long)count;
		res->loss = loss / (double)count;
		res->accuracy = right >= 0 ? (double)right / (double)count : NAN;
		return 0;
	}
	if (d->text) {
		if (d->n < 1 || b->chunk != EVAL_TEXT_BATCH)
			return gem_errf(err, GEM_EUSAGE, "the text has no window to evaluate");
		eval_text(b, m, d, res);
		return 0;
	}
	for (int start = 0; start < d->n; start += b->chunk) {
		int n = d->n - start < b->chunk ? d->n - start : b->chunk;
		dataset_fill(d, NULL, (size_t)start, (size_t)n, mean, std, b->x, b->y);
		loss += model_evaluate(m, b->x, b->y, n, &correct, b->pred);
		tally(res, b, (size_t)n);
	}
	res->n = d->n;
	res->loss = d->n ? loss / d->n : 0;
	res->accuracy = d->n ? (double)correct / d->n : 0;
	return 0;
}

/* The nodes' parameters z_0..z_{k-1} (n floats each): avg gets their average z̄ and dist[i] the
 * consensus distance ‖z_i − z̄‖₂. */
static void nodes_average(const float *const *z, int k, size_t n, float *avg, double *dist)
{
	for (size_t j = 0; j < n; j++) {
		double sum = 0;
		for (int i = 0; i < k; i++)
			sum += z[i][j];
		avg[j] = (float)(sum / k);
	}
	for (int i = 0; i < k; i++) {
		double d2 = 0;
		for (size_t j = 0; j < n; j++) {
			double d = (double)z[i][j] - avg[j];
			d2 += d * d;
		}
		dist[i] = sqrt(d2);
	}
}

/* Mean and (population) standard deviation of v[0..k). */
static void spread(const double *v, int k, double *mean, double *sd)
{
	double s = 0, s2 = 0;
	for (int i = 0; i < k; i++)
		s += v[i];
	*mean = k ? s / k : NAN;
	for (int i = 0; i < k; i++)
		s2 += (v[i] - *mean) * (v[i] - *mean);
	*sd = k ? sqrt(s2 / k) : NAN;
}

double eval_class_accuracy(const struct eval_result *res, int k)
{
	if (k < 0 || k >= res->classes || k >= EVAL_MAX_CLASSES || res->class_n[k] == 0)
		return NAN;
	return (double)res->class_correct[k] / (double)res->class_n[k];
}

/* out: a copy of the windowed text d. */
static int text_copy(const struct dataset *d, struct dataset *out, char *err)
{
	*out = *d;
	if (!(out->text = malloc(d->len ? d->len : 1))) {
		memset(out, 0, sizeof *out);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	memcpy(out->text, d->text, d->len);
	return 0;
}

int eval_subset(const struct dataset *d, long n, uint64_t seed, struct dataset *out, char *err)
{
	uint32_t *idx;
	struct rng r;

	memset(out, 0, sizeof *out);
	if (d->text)
		return text_copy(d, out, err);
	if (n > d->n)
		n = d->n;
	if (n < 1)
		return gem_errf(err, GEM_EUSAGE, "an empty subset");
	size_t row = (size_t)d->dim * (d->images ? 1 : sizeof *d->xf);
	uint8_t *x = malloc((size_t)n * row);
	const uint8_t *from = d->images ? d->images : (const uint8_t *)d->xf;
	idx = malloc(sizeof *idx * (size_t)d->n);
	if (d->images)
		out->images = x;
	else
		out->xf = (float *)(void *)x;
	out->labels = malloc((size_t)n * sizeof *out->labels);
	if (!idx || !x || !out->labels) {
		free(idx);
		dataset_free(out);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	for (int i = 0; i < d->n; i++)
		idx[i] = (uint32_t)i;
	rng_seed(&r, seed, RNG_EVAL_SUBSET);
	rng_shuffle(&r, idx, (size_t)d->n);
	for (long i = 0; i < n; i++) {
		memcpy(x + (size_t)i * row, from + (size_t)idx[i] * row, row);
		out->labels[i] = d->labels[idx[i]];
		if (out->labels[i] + 1 > out->classes)
			out->classes = out->labels[i] + 1;
	}
	free(idx);
	out->n = (int)n;
	out->rows = d->rows;
	out->cols = d->cols;
	out->dim = d->dim;
	out->groups = d->groups;
	if (d->gscale) {
		size_t bytes = (size_t)d->groups * sizeof *d->gscale;
		out->gscale = malloc(bytes);
		out->gshift = malloc(bytes);
		if (!out->gscale || !out->gshift) {
			dataset_free(out);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		memcpy(out->gscale, d->gscale, bytes);
		memcpy(out->gshift, d->gshift, bytes);
	}
	return 0;
}

/* ---- SGP nodes: each one's θ and their average, scored ---- */

/* The nodes' parameters into z[i], each node's evaluated as it comes. */
static int nodes_load(struct eval_nodes *r, float **z, struct eval_buf *b, struct model *m,
		      const struct dataset *d, float mean, float std, const struct run *run,
		      char *const *item, double retry_for, char *err)
{
	size_t n = model_nparams(m);
	int rc = 0;
	for (int i = 0; i < r->k && rc == 0; i++) {
		if (!(z[i] = malloc(sizeof(float) * n)))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		if (strncmp(item[i], "http://", 7) == 0 || strncmp(item[i], "https://", 8) == 0) {
			struct eval_remote remote;
			memset(&remote, 0, sizeof remote);
			if ((rc = eval_remote_open(&remote, item[i], retry_for, NULL, err)) == 0)
				rc = eval_remote_params(&remote, z[i], n, &r->p[i], err);
			eval_remote_close(&remote);
		} else {
			rc = run_params_load(run, item[i], z[i], n, &r->p[i], err);
		}
		if (rc == 0) {
			memcpy(model_params(m), z[i], sizeof(float) * n);
			rc = eval_run(b, m, d, mean, std, &r->res[i], err);
		}
	}
	return rc;
}

/* The mean and spread of the nodes' rows, and the version and samples of the summary rows. */
static int nodes_summarise(struct eval_nodes *r, char *err)
{
	double *v = calloc((size_t)r->k, sizeof *v);
	if (!v)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	r->version = INFINITY;
	r->samples = 0;
	for (int i = 0; i < r->k; i++) {
		r->samples += (double)r->p[i].samples;
		if ((double)r->p[i].version < r->version)
			r->version = (double)r->p[i].version;
	}
	for (int i = 0; i < r->k; i++)
		v[i] = r->res[i].loss;
	spread(v, r->k, &r->loss[0], &r->loss[1]);
	for (int i = 0; i < r->k; i++)
		v[i] = r->res[i].accuracy;
	spread(v, r->k, &r->acc[0], &r->acc[1]);
	spread(r->dist, r->k, &r->dist_spread[0], &r->dist_spread[1]);
	free(v);
	return 0;
}

int eval_nodes(struct eval_nodes *r, struct eval_buf *b, struct model *m, const struct dataset *d,
	       float mean, float std, const struct run *run, char *const *item, int k,
	       double retry_for, char *err)
{
	float **z = calloc((size_t)k, sizeof *z);
	int rc;
	memset(r, 0, sizeof *r);
	r->k = k;
	r->p = calloc((size_t)k, sizeof *r->p);
	r->res = calloc((size_t)k, sizeof *r->res);
	r->dist = calloc((size_t)k, sizeof *r->dist);
	if (!z || !r->p || !r->res || !r->dist)
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	else
		rc = nodes_load(r, z, b, m, d, mean, std, run, item, retry_for, err);
	if (rc == 0) {
		nodes_average((const float *const *)z, k, model_nparams(m), model_params(m), r->dist);
		rc = eval_run(b, m, d, mean, std, &r->avg, err);
	}
	if (rc == 0)
		rc = nodes_summarise(r, err);
	for (int i = 0; z && i < k; i++)
		free(z[i]);
	free(z);
	return rc;
}

void eval_nodes_free(struct eval_nodes *r)
{
	free(r->p);
	free(r->res);
	free(r->dist);
	memset(r, 0, sizeof *r);
}
