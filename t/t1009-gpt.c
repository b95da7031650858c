/* t1009: sequence models from specs: the shipped gpt (its parameter count, layout and
 * initialisation), the spec errors of the sequence layers and residual blocks, a tiny GPT's
 * whole-model gradient against finite differences of its mean loss, and the same floats from
 * every kernel level and from two threads. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/pool.h"
#include "nn/matmul.h"
#include "nn/model.h"
#include "model-test.h"
#include "tap.h"

/* A sequence model of T = 4 token ids with vocab 9, dim 16, and layers: the middle ones. */
static void bad_spec(const char *middle, const char *want, const char *what)
{
	char text[4096], err[GEM_ERRMAX] = "";
	snprintf(text, sizeof text,
		 "{\"input\":[4],\"classes\":9,\"layers\":[{\"type\":\"embedding\",\"vocab\":9,\"dim\":16},%s"
		 "{\"type\":\"dense\",\"out\":9},{\"type\":\"logsoftmax\"}]}",
		 middle);
	struct model *m = model_of_text(text, err);
	if (!ok(!m && strstr(err, want), "refused: %s", what))
		diag("message \"%s\", want \"%s\"", err, want);
	model_free(m);
}

static void test_bad_specs(void)
{
	char err[GEM_ERRMAX] = "", deep[2048] = "", tail[1024] = "";
	bad_spec("{\"type\":\"position\"},{\"type\":\"attention\",\"heads\":3},",
		 "layers[2].heads: 3 does not divide the 16 features", "heads must divide the features");
	bad_spec("{\"type\":\"attention\"},", "layers[1].heads: missing", "attention without heads");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"out\":32}]},",
		 "layers[1]: the block's output (T,C) = (4,32) differs from its input (T,C) = (4,16)",
		 "a residual block that changes the shape, both shapes named");
	bad_spec("{\"type\":\"residual\"},", "layers[1].layers: missing", "a residual block without layers");
	bad_spec("{\"type\":\"residual\",\"layers\":[]},", "layers[1].layers: must be an array of 1 to 1000 layers",
		 "an empty residual block");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"oout\":3}]},",
		 "layers[1].layers[0].oout: unknown field of dense \"oout\" (did you mean out?)",
		 "a nested layer's error names its path");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"layernorm\"},{\"type\":\"logsoftmax\"}]},",
		 "layers[1].layers[1]: logsoftmax must be the last layer", "no loss inside a block");
	bad_spec("{\"type\":\"embedding\",\"vocab\":9,\"dim\":16},", "layers[1]: embedding must be the first layer",
		 "embedding after the first layer");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"position\"},",
		 "layers[2]: position needs a sequence input (T,C), got 64 features", "position on flat features");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"attention\",\"heads\":2},",
		 "layers[2]: attention needs a sequence input (T,C), got 64 features", "attention on flat features");
	bad_spec("{\"type\":\"attention\",\"heads\":2,\"init_std\":-1},", "layers[1].init_std: -1 is not in [0, 1000)",
		 "a negative init_std");
	for (int d = 0; d < 9; d++) {
		strcat(deep, "{\"type\":\"residual\",\"layers\":[");
		strcat(tail, "]}");
	}
	strcat(deep, "{\"type\":\"gelu\"}");
	strcat(deep, tail);
	strcat(deep, ",");
	bad_spec(deep, "blocks nested more than 8 deep", "residual blocks nested too deep");
	struct model *m = model_of_text("{\"input\":[4],\"classes\":9,\"layers\":[{\"type\":\"embedding\",\"vocab\":9,\"dim\":16},"
				"{\"type\":\"dense\",\"out\":9},{\"type\":\"logsoftmax\"}]}",
				err);
	ok(m && model_labels(m) == 4 && model_input_size(m) == 4, "a sequence model's loss has a label per position");
	struct dataset img = {.n = 1, .rows = 2, .cols = 2, .dim = 4, .classes = 3};
	struct dataset txt = {.n = 1, .rows = 1, .cols = 4, .dim = 4, .classes = 9, .seq = 4};
	ok(m && model_fits(m, &img, err) == GEM_EUSAGE && strstr(err, "at every position of a sequence"),
	   "image data does not fit a sequence model (%s)", err);
	ok(m && model_fits(m, &txt, err) == 0, "windows of 4 bytes below 9 fit it");
	txt.classes = 10;
	ok(m && model_fits(m, &txt, err) == GEM_EUSAGE && strstr(err, "bytes up to 9, beyond the model's vocabulary"),
	   "bytes beyond the vocabulary do not (%s)", err);
	struct model *flat = model_of_text("{\"input\":[4],\"classes\":9,\"layers\":[{\"type\":\"dense\",\"out\":9},"
				   "{\"type\":\"logsoftmax\"}]}", err);
	txt.text = (uint8_t *)"abcde";
	ok(flat && model_fits(flat, &txt, err) == GEM_EUSAGE && strstr(err, "not a sequence model"),
	   "a text does not fit a model without an embedding (%s)", err);
	txt.text = NULL;
	model_free(flat);
	txt.classes = 9, txt.seq = txt.dim = 5;
	ok(m && model_fits(m, &txt, err) == GEM_EUSAGE && strstr(err, "windows of 5 bytes"),
	   "windows of another length do not (%s)", err);
	model_free(m);
}

static void test_shipped(void)
{
	const char *src = getenv("GEM_SRC");
	char path[4096], err[GEM_ERRMAX] = "";
	struct model *m, *m2;
	snprintf(path, sizeof path, "%s/share/gem/models/gpt.json", src ? src : ".");
	if (!ok(model_from_file(path, NULL, &m, err) == 0 && model_from_file(path, NULL, &m2, err) == 0,
		"gpt.json loads (%s)", err))
		return;
	const struct layout *lo = model_layout(m);
	ok(model_nparams(m) == 875520, "gpt has 875,520 parameters (%zu)", model_nparams(m));
	ok(lo->ntensors == 54 && !strcmp(lo->t[0].name, "0.weight") && lo->t[0].shape[0] == 256 &&
		   !strcmp(lo->t[1].name, "1.weight") && lo->t[1].shape[0] == 128 && !strcmp(lo->t[4].name, "2.1.weight") &&
		   lo->t[4].shape[0] == 384 && !strcmp(lo->t[6].name, "2.1.out_weight") &&
		   !strcmp(lo->t[52].name, "11.weight") && lo->t[52].shape[0] == 256 && lo->t[52].shape[1] == 128,
	   "gpt layout: 0.weight (256,128), 1.weight (128,128), 2.1.weight (384,128), 2.1.out_weight, 11.weight");
	ok(model_input_size(m) == 128 && model_labels(m) == 128 && model_classes(m) == 256,
	   "gpt: 128 token ids in, a loss over 256 bytes at each of 128 positions");
	model_init_params(m, 1);
	model_init_params(m2, 1);
	const float *th = model_params(m);
	ok(!memcmp(th, model_params(m2), sizeof(float) * model_nparams(m)), "the same seed, the same θ");
	int shapes_ok = 1, ones = 1, zeros = 1;
	double s2 = 0;
	size_t nw = 0;
	for (int t = 0; t < lo->ntensors; t++) {
		const float *p = th + lo->t[t].offset;
		int ln = lo->t[t].ndim == 1 && strstr(lo->t[t].name, "weight");
		for (size_t i = 0; i < lo->t[t].size; i++) {
			if (ln)
				ones &= p[i] == 1.0f;
			else if (lo->t[t].ndim == 1)
				zeros &= p[i] == 0.0f;
			else
				s2 += (double)p[i] * p[i], nw++;
		}
		shapes_ok &= lo->t[t].ndim <= 2;
	}
	ok(ones && zeros && shapes_ok, "LayerNorm gains 1, every bias 0");
	ok(fabs(sqrt(s2 / (double)nw) - 0.02) < 0.0005, "matrices drawn with standard deviation 0.02 (%.5f)",
	   sqrt(s2 / (double)nw));
	/* two threads split the products' rows: the same gradient, bit for bit */
	float *x = malloc(sizeof(float) * 2 * 128), *g1 = malloc(sizeof(float) * model_nparams(m));
	uint16_t *y = malloc(2 * 128 * sizeof *y);
	struct rng r;
	rng_seed(&r, 3, 3);
	for (int i = 0; i < 2 * 128; i++)
		x[i] = (float)rng_below(&r, 256), y[i] = (uint8_t)rng_below(&r, 256);
	model_reserve(m, 2, err);
	float l1 = model_train_step(m, x, y, 2, &r);
	memcpy(g1, model_grads(m), sizeof(float) * model_nparams(m));
	matmul_threads(2);
	pool_set_threads(2);
	float l2 = model_train_step(m, x, y, 2, &r);
	matmul_threads(1);
	pool_set_threads(1);
	ok(l1 == l2 && !memcmp(g1, model_grads(m), sizeof(float) * model_nparams(m)) && fabs(l1 - log(256)) < 0.1,
	   "gpt: one step on 2 threads gives the gradient of 1, bit for bit (loss %.4f, ln 256 = %.4f)", l1, log(256));
	free(x), free(y), free(g1);
	model_free(m);
	model_free(m2);
}

#define TINY                                                                                                     \
	"{\"input\":[6],\"classes\":7,\"layers\":[{\"type\":\"embedding\",\"vocab\":7,\"dim\":8,\"init_std\":0.5},"   \
	"{\"type\":\"position\",\"init_std\":0.5},"                                                                  \
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"layernorm\"},{\"type\":\"attention\",\"heads\":2,"           \
	"\"init_std\":0.4}]},"                                                                                       \
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"layernorm\"},{\"type\":\"dense\",\"out\":12,\"init_std\":0.4},"\
	"{\"type\":\"gelu\"},{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"out\":12,\"init_std\":0.3}]},"  \
	"{\"type\":\"dense\",\"out\":8,\"init_std\":0.4}]},"                                                         \
	"{\"type\":\"layernorm\"},{\"type\":\"dense\",\"out\":7,\"init_std\":0.4},{\"type\":\"logsoftmax\"}]}"

/* The tiny GPT's gradient of the mean loss against central differences, ε = 3e-3, every
 * parameter; relative error with a floor of 1e-2 (float32 rounding of the loss over 2ε is
 * about 2e-5 in absolute terms). */
static void test_gradients(void)
{
	enum { N = 3, T = 6 };
	char err[GEM_ERRMAX];
	struct model *m = model_of_text(TINY, err);
	struct rng r;
	float x[N * T], eps = 3e-3f;
	uint16_t y[N * T], pred[N * T];
	if (!ok(m && model_reserve(m, N, err) == 0, "a tiny GPT builds (%s)", m ? "" : err))
		return;
	model_init_params(m, 5);
	rng_seed(&r, 9, 9);
	for (int i = 0; i < N * T; i++)
		x[i] = (float)rng_below(&r, 7), y[i] = (uint8_t)rng_below(&r, 7);
	size_t np = model_nparams(m);
	float *theta = model_params(m), *g = malloc(sizeof(float) * np);
	double l0 = model_train_step(m, x, y, N, &r), worst = 0;
	memcpy(g, model_grads(m), sizeof(float) * np);
	for (size_t i = 0; i < np; i++) {
		float keep = theta[i];
		theta[i] = keep + eps;
		double lp = model_train_step(m, x, y, N, &r);
		theta[i] = keep - eps;
		double lm = model_train_step(m, x, y, N, &r);
		theta[i] = keep;
		double num = (lp - lm) / (2.0 * eps), d = fabs(num) + fabs(g[i]);
		worst = fmax(worst, fabs(num - g[i]) / (d > 1e-2 ? d : 1e-2));
	}
	ok(worst < 1e-2, "tiny GPT (%zu parameters): gradient matches finite differences of the loss (max rel err %.2g)",
	   np, worst);
	long correct = 0;
	double sum = model_evaluate(m, x, y, N, &correct, pred);
	int in_range = 1;
	for (int i = 0; i < N * T; i++)
		in_range &= pred[i] < 7;
	ok(fabs(sum / (N * T) - l0) < 1e-5 && correct >= 0 && correct <= N * T && in_range,
	   "evaluate sums the loss over every position (mean %.4f, train step %.4f) and predicts each", sum / (N * T), l0);
	/* the log-probabilities at position t depend on positions <= t only: a prompt of 2 tokens
	 * and anything after it give the same next-token distribution after the prompt */
	const float *lp = model_predict(m, x, 1);
	float keep[7], psum = 0, x0[N * T];
	memcpy(x0, x, sizeof x0);
	memcpy(keep, lp + 7, sizeof keep);
	for (int k = 0; k < 7; k++)
		psum += expf(keep[k]);
	x[3] = (float)(((int)x[3] + 1) % 7), x[5] = 0;
	lp = model_predict(m, x, 1);
	ok(!memcmp(keep, lp + 7, sizeof keep) && fabsf(psum - 1) < 1e-5 && !model_predict(m, x, N + 1),
	   "predict: position 1's next-token log-probabilities (summing to 1) ignore later tokens");
	memcpy(x, x0, sizeof x0);
	/* every kernel level: the same loss and gradient, bit for bit */
	int have = matmul_simd(-1), same = 1;
	for (int l = 0; l < 3; l++) {
		matmul_simd(l);
		same &= (float)l0 == model_train_step(m, x, y, N, &r) && !memcmp(g, model_grads(m), sizeof(float) * np);
	}
	matmul_simd(have);
	ok(same, "tiny GPT: every kernel level gives the same loss and gradient");
	free(g);
	model_free(m);
}

int main(void)
{
	test_bad_specs();
	test_shipped();
	test_gradients();
	return done_testing();
}
