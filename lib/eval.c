#include "eval.h"

#include <stdlib.h>

#include "err.h"

int eval_dataset(struct model *m, const struct dataset *d, float mean, float std,
		 struct eval_result *res, char *err)
{
	size_t dim = model_input_size(m);
	float *x = malloc(sizeof *x * EVAL_CHUNK * dim);
	uint8_t *y = malloc(EVAL_CHUNK);
	double loss = 0;
	long correct = 0;
	int rc = 0;

	if (!x || !y) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = model_reserve(m, EVAL_CHUNK, err)) < 0)
		goto out;
	for (int start = 0; start < d->n; start += EVAL_CHUNK) {
		int n = d->n - start < EVAL_CHUNK ? d->n - start : EVAL_CHUNK;
		dataset_fill(d, NULL, start, n, mean, std, x, y);
		loss += model_evaluate(m, x, y, n, &correct, NULL);
	}
	res->n = d->n;
	res->loss = d->n ? loss / d->n : 0;
	res->accuracy = d->n ? (double)correct / d->n : 0;
out:
	free(x);
	free(y);
	return rc;
}
