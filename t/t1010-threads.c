/* t1010: the thread count changes nothing: a few SGD steps of a small resnet (GroupNorm, its
 * fused ReLU and residual add, padded and strided convolutions), a cnn (direct convolutions,
 * max pooling, dropout, dense layers) and a gpt (layernorm, attention, gelu) on 1, 2 and 3
 * threads leave θ and the evaluation's loss the same, byte for byte (runs replay bit for bit
 * whatever --threads says). The sizes are the smallest whose passes the pool splits. */
#include <blis.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "tap.h"

#define STEPS 3

/* θ after STEPS steps on threads t, and the evaluation's summed loss; NULL if it failed */
static float *train(const char *text, int t, int B, double *eval)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_loads(text, 0, NULL);
	struct model *m;
	struct sgd opt;
	struct rng r;
	int rc = model_from_json(spec, &m, err);
	json_decref(spec);
	if (rc) {
		diag("%s", err);
		return NULL;
	}
	layers_set_threads(t);
	size_t in = model_input_size(m), L = (size_t)model_labels(m), n = model_nparams(m);
	float *x = model_input_alloc(m, (size_t)B), *theta = malloc(sizeof *theta * n);
	uint16_t *y = malloc(sizeof *y * B * L);
	int classes = model_classes(m), seq = L > 1;
	rng_seed(&r, 7, 7);
	for (size_t i = 0; i < (size_t)B * in; i++)
		x[i] = seq ? (float)rng_below(&r, (uint64_t)classes) : rng_float(&r) - 0.5f;
	for (size_t i = 0; i < (size_t)B * L; i++)
		y[i] = (uint16_t)rng_below(&r, (uint64_t)classes);
	model_init_params(m, 1);
	if (model_reserve(m, B, err) || sgd_init(&opt, n, 0.05f, 0.9f, 1e-4f, 0, err)) {
		diag("%s", err);
		return NULL;
	}
	for (int s = 0; s < STEPS; s++) {
		model_train_step(m, x, y, B, &r);
		sgd_step(&opt, model_params(m), model_grads(m));
	}
	*eval = model_evaluate(m, x, y, B, NULL, NULL);
	memcpy(theta, model_params(m), sizeof *theta * n);
	sgd_free(&opt);
	model_free(m);
	free(x), free(y);
	layers_set_threads(1);
	return theta;
}

static void same_at_any_count(const char *name, const char *text, int B, size_t n)
{
	double e1, e;
	float *t1 = train(text, 1, B, &e1);
	if (!ok(t1 != NULL, "%s builds and trains", name))
		return;
	for (int t = 2; t <= 3; t++) {
		float *tt = train(text, t, B, &e);
		ok(tt && !memcmp(tt, t1, sizeof *t1 * n) && e == e1,
		   "%s: %d SGD steps on %d threads give θ of 1 thread byte for byte (eval loss %.6f)", name, STEPS, t,
		   e / B);
		free(tt);
	}
	free(t1);
}

static size_t nparams(const char *text)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_loads(text, 0, NULL);
	struct model *m;
	size_t n = 0;
	if (!model_from_json(spec, &m, err)) {
		n = model_nparams(m);
		model_free(m);
	}
	json_decref(spec);
	return n;
}

#define GN(c) "{\"type\":\"conv2d\",\"out\":" #c ",\"kernel\":3,\"padding\":1},{\"type\":\"groupnorm\",\"groups\":2}"
static const char *resnet =
	"{\"input\":[1,16,16],\"classes\":10,\"layers\":[" GN(8) ",{\"type\":\"relu\"},"
	"{\"type\":\"residual\",\"layers\":[" GN(8) ",{\"type\":\"relu\"}," GN(8) "]},{\"type\":\"relu\"},"
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"out\":16,\"kernel\":3,\"stride\":2,\"padding\":1},"
	"{\"type\":\"groupnorm\",\"groups\":4},{\"type\":\"relu\"},{\"type\":\"conv2d\",\"out\":16,\"kernel\":3,"
	"\"padding\":1},{\"type\":\"groupnorm\",\"groups\":4}],\"shortcut\":[{\"type\":\"conv2d\",\"out\":16,"
	"\"kernel\":1,\"stride\":2},{\"type\":\"groupnorm\",\"groups\":4}]},{\"type\":\"relu\"},"
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"groupnorm\",\"groups\":4},{\"type\":\"relu\"}]},"
	"{\"type\":\"globalavgpool\"},{\"type\":\"dense\",\"out\":10},{\"type\":\"logsoftmax\"}]}";
static const char *cnn =
	"{\"input\":[1,20,20],\"classes\":10,\"layers\":[{\"type\":\"conv2d\",\"out\":10,\"kernel\":5},"
	"{\"type\":\"maxpool2d\"},{\"type\":\"relu\"},{\"type\":\"conv2d\",\"out\":12,\"kernel\":3},"
	"{\"type\":\"dropout2d\",\"p\":0.2},{\"type\":\"avgpool2d\"},{\"type\":\"sigmoid\"},{\"type\":\"flatten\"},"
	"{\"type\":\"dense\",\"out\":64},{\"type\":\"tanh\"},{\"type\":\"dropout\",\"p\":0.3},"
	"{\"type\":\"dense\",\"out\":10},{\"type\":\"logsoftmax\"}]}";
static const char *gpt =
	"{\"input\":[32],\"classes\":64,\"layers\":[{\"type\":\"embedding\",\"vocab\":64,\"dim\":64},"
	"{\"type\":\"position\"},{\"type\":\"residual\",\"layers\":[{\"type\":\"layernorm\"},"
	"{\"type\":\"attention\",\"heads\":2}]},{\"type\":\"residual\",\"layers\":[{\"type\":\"layernorm\"},"
	"{\"type\":\"dense\",\"out\":256},{\"type\":\"gelu\"},{\"type\":\"dense\",\"out\":64}]},"
	"{\"type\":\"layernorm\"},{\"type\":\"dense\",\"out\":64},{\"type\":\"logsoftmax\"}]}";

int main(void)
{
	same_at_any_count("resnet", resnet, 32, nparams(resnet));
	same_at_any_count("cnn", cnn, 64, nparams(cnn));
	same_at_any_count("gpt", gpt, 16, nparams(gpt));
	return done_testing();
}
