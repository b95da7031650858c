/* t1004: end to end, a small mlp and a small cnn learn a separable synthetic problem with SGD:
 * the class is which quadrant of the image holds a bright blob (plus noise). */
#include <blis.h>
#include <string.h>

#include "base/err.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "tap.h"

#define N 256
#define SIDE 8

static void make_data(float *x, uint16_t *y, struct rng *r)
{
	for (int i = 0; i < N; i++) {
		int c = (int)rng_below(r, 4), oi = (c / 2) * 4, oj = (c % 2) * 4;
		y[i] = (uint8_t)c;
		for (int p = 0; p < SIDE * SIDE; p++)
			x[i * SIDE * SIDE + p] = 0.3f * (rng_float(r) - 0.5f);
		for (int a = 1; a < 3; a++)
			for (int b = 1; b < 3; b++)
				x[i * SIDE * SIDE + (oi + a) * SIDE + oj + b] += 1.0f;
	}
}

static void learn(const char *name, const char *text)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_loads(text, 0, NULL);
	struct model *m;
	struct sgd opt;
	struct rng r;
	float x[N * SIDE * SIDE];
	uint16_t y[N];
	long correct = 0;
	int rc = model_from_json(spec, &m, err);
	json_decref(spec);
	if (!ok(rc == 0, "%s builds (%s)", name, rc ? err : ""))
		return;
	rng_seed(&r, 4, 4);
	make_data(x, y, &r);
	model_init_params(m, 1);
	ok(model_reserve(m, N, err) == 0 && sgd_init(&opt, model_nparams(m), 0.05f, 0.9f, 1e-4f, 0, err) == 0,
	   "%s: buffers and optimiser", name);
	double before = model_evaluate(m, x, y, N, NULL, NULL) / N;
	for (int epoch = 0; epoch < 20; epoch++)
		for (int b = 0; b < N; b += 32) {
			model_train_step(m, x + b * SIDE * SIDE, y + b, 32, &r);
			sgd_step(&opt, model_params(m), model_grads(m));
		}
	double after = model_evaluate(m, x, y, N, &correct, NULL) / N;
	ok(after < before / 4, "%s: mean loss falls from %.3f to %.3f", name, before, after);
	ok(correct >= N * 95 / 100, "%s: %ld of %d training samples right", name, correct, N);
	sgd_free(&opt);
	model_free(m);
}

int main(void)
{
	bli_thread_set_num_threads(1);
	learn("mlp", "{\"input\":[64],\"classes\":4,\"layers\":[{\"type\":\"dense\",\"out\":16},{\"type\":\"relu\"},"
		     "{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}]}");
	learn("cnn", "{\"input\":[1,8,8],\"classes\":4,\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,"
		     "\"padding\":1},{\"type\":\"maxpool2d\"},{\"type\":\"relu\"},{\"type\":\"dropout2d\",\"p\":0.1},"
		     "{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}]}");
	return done_testing();
}
