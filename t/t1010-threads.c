/* t1010: the thread count changes nothing: a few SGD steps of a small resnet (GroupNorm, its
 * fused ReLU and residual add, padded and strided convolutions), a cnn (direct convolutions,
 * max pooling, dropout, dense layers) and a gpt (layernorm, attention, gelu) on 1, 2 and 3
 * threads leave θ and the evaluation's loss the same, byte for byte (runs replay bit for bit
 * whatever --threads says), with and without micro-batches (model_set_micro: each thread then
 * trains micro-batches whole), and micro-batches change θ only by the rounding of their sums.
 * The sizes are the smallest whose passes the pool splits. */
#include <blis.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "tap.h"

#define STEPS 3

/* θ after STEPS steps on threads t with `micro` micro-batches, and the evaluation's summed loss;
 * NULL if it failed */
static float *train(const char *text, int t, int B, int micro, double *eval)
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
	if (model_set_micro(m, micro, err)) {
		diag("%s", err);
		model_free(m);
		return NULL;
	}
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

static void same_at_any_count(const char *name, const char *text, int B, int micro, size_t n)
{
	double e1, e;
	float *t1 = train(text, 1, B, micro, &e1);
	if (!ok(t1 != NULL, "%s builds and trains (%d micro-batches)", name, micro))
		return;
	for (int t = 2; t <= 3; t++) {
		float *tt = train(text, t, B, micro, &e);
		ok(tt && !memcmp(tt, t1, sizeof *t1 * n) && e == e1,
		   "%s, %d micro-batches: %d SGD steps on %d threads give θ of 1 thread byte for byte (eval loss "
		   "%.6f)", name, micro, STEPS, t, e / B);
		free(tt);
	}
	free(t1);
}

/* Without dropout, micro-batches' θ is the whole batch's up to the rounding of the sums: the
 * largest difference is within a few float steps of the largest |θ|, and not all are 0 (the
 * sums are in another order). */
static void micro_rounds_only(const char *name, const char *text, int B, int micro, size_t n)
{
	double e1, e;
	float *t1 = train(text, 2, B, 1, &e1), *tm = train(text, 2, B, micro, &e);
	double most = 0, diff = 0;
	for (size_t i = 0; t1 && tm && i < n; i++) {
		double d = fabs((double)tm[i] - t1[i]);
		most = fmax(most, fabs((double)t1[i]));
		diff = fmax(diff, d);
	}
	ok(t1 && tm && diff > 0 && diff < most * 1e-5 && fabs(e - e1) < fabs(e1) * 1e-5,
	   "%s: %d micro-batches' θ is the whole batch's to %.2g of its largest |θ| (%.3g; eval loss %.6f "
	   "against %.6f)", name, micro, most > 0 ? diff / most : 0.0, most, e / B, e1 / B);
	free(t1);
	free(tm);
}

static void micro_refused(void)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_loads("{\"input\":[4],\"classes\":2,\"layers\":[{\"type\":\"dense\",\"out\":2},"
				  "{\"type\":\"logsoftmax\"}]}", 0, NULL);
	struct model *m;
	int rc = model_from_json(spec, &m, err);
	json_decref(spec);
	if (!ok(rc == 0, "a dense model builds"))
		return;
	ok(model_set_micro(m, 0, err) == GEM_EUSAGE && strstr(err, "not in [1, 64]"), "0 micro-batches refused: %s",
	   err);
	ok(model_set_micro(m, MODEL_MAX_MICRO + 1, err) == GEM_EUSAGE, "65 refused: %s", err);
	model_free(m);
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
	for (int micro = 1; micro <= 3; micro++) {
		same_at_any_count("resnet", resnet, 32, micro, nparams(resnet));
		same_at_any_count("cnn", cnn, 64, micro, nparams(cnn));
		same_at_any_count("gpt", gpt, 16, micro, nparams(gpt));
	}
	micro_rounds_only("resnet", resnet, 32, 2, nparams(resnet));
	micro_rounds_only("gpt", gpt, 16, 3, nparams(gpt));
	micro_refused();
	return done_testing();
}
