/* fuzz-model: libFuzzer target for model_from_json, the model spec a server hands every worker:
 * any JSON is built or refused; a built model reserves a small batch and trains one step
 * (residual blocks, sequence models: t/fuzz/corpus/model/tiny-gpt.json). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/rng.h"
#include "nn/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct model *m;
	json_t *j = json_loadb((const char *)data, size, 0, NULL);
	if (!j)
		return 0;
	/* a few million parameters at most: the fuzzer looks for faults, not for big models */
	if (model_from_json(j, &m, err) == 0) {
		size_t in = model_input_size(m);
		if (model_nparams(m) < (1u << 22) && in < (1u << 16) && model_reserve(m, 2, err) == 0) {
			/* token ids 0 for a sequence model; a label per position */
			size_t nl = 2 * (size_t)model_labels(m);
			float *x = calloc(2 * in, sizeof *x);
			uint16_t *y = calloc(nl, sizeof *y);
			struct rng r;
			rng_seed(&r, 1, 0);
			model_init_params(m, 1);
			if (x && y) {
				y[nl - 1] = (uint8_t)(model_classes(m) - 1);
				model_train_step(m, x, y, 2, &r);
			}
			free(x);
			free(y);
		}
		model_free(m);
	}
	json_decref(j);
	return 0;
}
