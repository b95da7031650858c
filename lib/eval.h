/* eval: a model's mean loss and accuracy over a whole dataset, in chunks (no dropout). */
#ifndef GEM_EVAL_H
#define GEM_EVAL_H
#include "data.h"
#include "model.h"

#define EVAL_CHUNK 500

struct eval_result {
	double loss;     /* mean NLL over the dataset */
	double accuracy; /* fraction of correct predictions */
	long n;
};

/* Evaluate m's current parameters on d, normalised with mean/std. Reserves the model for
 * EVAL_CHUNK samples (a training model must model_reserve its batch again afterwards). */
int eval_dataset(struct model *m, const struct dataset *d, float mean, float std,
		 struct eval_result *res, char *err);
#endif
