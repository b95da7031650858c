/* t1002: models from JSON specs: bad specs are refused with the field named, the parameter
 * layout, reproducible PyTorch-style init, and whole-model gradients against finite
 * differences of the mean loss. */
#include <blis.h>
#include <string.h>

#include "base/err.h"
#include "nn/model.h"
#include "model-test.h"
#include "tap.h"

static void bad_spec(const char *layers, const char *want, const char *what)
{
	char text[2048], err[GEM_ERRMAX] = "";
	snprintf(text, sizeof text, "{\"input\":[1,8,8],\"classes\":3,\"layers\":[%s]}", layers);
	json_t *spec = json_loads(text, 0, NULL);
	struct model *m = (struct model *)1;
	int rc = spec ? model_from_json(spec, &m, err) : 0;
	if (!ok(rc == GEM_EUSAGE && m == NULL && strstr(err, want), "refused: %s", what))
		diag("rc %d, message \"%s\", want \"%s\"", rc, err, want);
	json_decref(spec);
}

#define TAIL "{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}"

static void test_bad_specs(void)
{
	const char *tail = "{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}";
	char buf[1024];
	snprintf(buf, sizeof buf, "{\"type\":\"conv3d\",\"out\":2},%s", tail);
	bad_spec(buf, "layers[0]: unknown layer type \"conv3d\"", "unknown layer type");
	bad_spec(buf, "; valid: dense, conv2d, maxpool2d, relu, dropout, dropout2d, flatten, logsoftmax",
		 "unknown layer type: the error lists the valid ones");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2\",\"out\":2},%s", tail);
	bad_spec(buf, "unknown layer type \"conv2\" (did you mean conv2d?)", "a typo: did you mean");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":2,\"kernal\":3},%s", tail);
	bad_spec(buf, "layers[0].kernal: unknown field of conv2d \"kernal\" (did you mean kernel?)",
		 "a mistyped field: did you mean");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":2},%s", tail);
	bad_spec(buf, "layers[0].kernel: missing", "missing field");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":2,\"kernel\":\"5\"},%s", tail);
	bad_spec(buf, "layers[0].kernel: must be an integer", "ill-typed field");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":0,\"kernel\":3},%s", tail);
	bad_spec(buf, "layers[0].out: 0 is out of range", "out of range field");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":2,\"kernel\":9},%s", tail);
	bad_spec(buf, "layers[0].kernel: 9 is larger than", "kernel larger than the input");
	snprintf(buf, sizeof buf, "{\"type\":\"conv2d\",\"out\":2,\"kernal\":3},%s", tail);
	bad_spec(buf, "layers[0].kernal: unknown field", "misspelt field");
	snprintf(buf, sizeof buf, "{\"type\":\"dropout\",\"p\":1.5},%s", tail);
	bad_spec(buf, "layers[0].p: 1.5 is not in [0, 1)", "dropout p out of range");
	bad_spec("{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}", "layers[0]: dense needs a flat input",
		 "dense on an image");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"maxpool2d\"},{\"type\":\"logsoftmax\"}",
		 "layers[1]: maxpool2d needs an image input", "maxpool on flat input");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}",
		 "classes: 3, but layers[2] gets 4 inputs", "final size differs from classes");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":3}", "layers[1]: the last layer must be logsoftmax",
		 "no logsoftmax at the end");
	bad_spec("{\"type\":\"flatten\"},{\"type\":\"logsoftmax\"},{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}",
		 "layers[1]: logsoftmax must be the last layer", "logsoftmax in the middle");
	bad_spec("{\"out\":3}", "layers[0].type: missing", "layer without type");
	bad_spec("3", "layers[0]: must be an object", "layer that is not an object");
	bad_spec("", "layers: must be a non-empty array", "no layers");

	char err[GEM_ERRMAX] = "";
	ok(!model_of_text("{\"classes\":3,\"layers\":[{\"type\":\"logsoftmax\"}]}", err) && strstr(err, "input: missing"),
	   "refused: missing input (%s)", err);
	ok(!model_of_text("{\"input\":[3],\"layers\":[{\"type\":\"logsoftmax\"}]}", err) && strstr(err, "classes: missing"),
	   "refused: missing classes (%s)", err);
	ok(!model_of_text("{\"input\":[3,2],\"classes\":3,\"layers\":[{\"type\":\"logsoftmax\"}]}", err) &&
		   strstr(err, "input: must be"),
	   "refused: 2-d input (%s)", err);
	ok(!model_of_text("{\"input\":[3],\"classes\":3,\"layer\":[]}", err) && strstr(err, "layer: unknown field"),
	   "refused: unknown top-level field (%s)", err);
	struct model *m = model_of_text("{\"input\":[3],\"classes\":3,\"layers\":[{\"type\":\"logsoftmax\"}]}", err);
	ok(m && model_nparams(m) == 0, "a model without parameters is fine");
	model_free(m);
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,"
		 "\"stride\":2,\"padding\":1}]}," TAIL,
		 "layers[0]: the block's output (4,4,4) differs from its input (1,8,8)",
		 "a residual block that changes an image's shape, both shapes named");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,"
		 "\"stride\":2,\"padding\":1}],\"shortcut\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":1}]}," TAIL,
		 "layers[0]: the block's output (4,4,4) differs from its shortcut's (4,8,8)",
		 "a shortcut of another shape than the block's output");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"relu\"}],\"shortcut\":[]}," TAIL,
		 "layers[0].shortcut: must be an array of 1 to 1000 layers", "an empty shortcut");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"relu\"}],\"shortcut\":[{\"type\":\"conv2d\","
		 "\"out\":1}]}," TAIL,
		 "layers[0].shortcut[0].kernel: missing", "a shortcut's layer named by its path");
	bad_spec("{\"type\":\"residual\",\"layers\":[{\"type\":\"relu\"}],\"shortcuts\":[]}," TAIL,
		 "layers[0].shortcuts: unknown field of residual \"shortcuts\" (did you mean shortcut?)",
		 "a misspelt shortcut");
	bad_spec("{\"type\":\"conv2d\",\"out\":6,\"kernel\":3},{\"type\":\"groupnorm\",\"groups\":4}," TAIL,
		 "layers[1].groups: 4 does not divide the 6 channels", "groupnorm's groups must divide the channels");
	bad_spec("{\"type\":\"groupnorm\"}," TAIL, "layers[0].groups: missing", "groupnorm without groups");
	bad_spec("{\"type\":\"globalavgpool\"},{\"type\":\"globalavgpool\"},{\"type\":\"logsoftmax\"}",
		 "layers[1]: globalavgpool needs an image input (C,H,W), got 1 features", "globalavgpool makes flat features");
	bad_spec("{\"type\":\"avgpool2d\",\"size\":9}," TAIL, "layers[0].size: 9 is larger than the input 8x8",
		 "avgpool2d larger than its input");
	struct model *f = (struct model *)1;
	ok(model_from_file("/nonexistent/x.json", NULL, &f, err) == GEM_EFAIL && !f &&
		   strstr(err, "/nonexistent/x.json"),
	   "a missing spec file fails with its name (%s)", err);
}

static void test_shipped(void)
{
	const char *src = getenv("GEM_SRC");
	char path[4096], err[GEM_ERRMAX];
	struct model *m;
	json_t *spec;
	snprintf(path, sizeof path, "%s/share/gem/models/mlp.json", src ? src : ".");
	ok(model_from_file(path, &spec, &m, err) == 0, "mlp.json loads (%s)", m ? "" : err);
	if (m) {
		const struct layout *lo = model_layout(m);
		ok(model_nparams(m) == 784 * 256 + 256 + 256 * 10 + 10, "mlp has 784·256+256+256·10+10 parameters");
		ok(lo->ntensors == 4 && !strcmp(lo->t[0].name, "0.weight") && lo->t[0].shape[0] == 256 &&
			   lo->t[0].shape[1] == 784 && !strcmp(lo->t[3].name, "2.bias") &&
			   lo->t[3].offset == model_nparams(m) - 10,
		   "mlp layout: 0.weight (256,784) ... 2.bias at the end");
		ok(model_input_size(m) == 784 && model_classes(m) == 10 && !strcmp(model_name(m), "mlp"),
		   "mlp: 784 inputs, 10 classes, named mlp");
		ok(json_is_object(spec), "the spec is handed back");
		json_decref(spec);
		model_free(m);
	}
	snprintf(path, sizeof path, "%s/share/gem/models/cnn.json", src ? src : ".");
	ok(model_from_file(path, NULL, &m, err) == 0, "cnn.json loads (%s)", m ? "" : err);
	if (m) {
		const struct layout *lo = model_layout(m);
		/* PyTorch's count for the GEM paper's network */
		ok(model_nparams(m) == 163790, "cnn has 163790 parameters (%zu)", model_nparams(m));
		ok(lo->ntensors == 10 && !strcmp(lo->t[2].name, "3.weight") && lo->t[2].ndim == 4 &&
			   lo->t[2].shape[0] == 20 && lo->t[2].shape[1] == 10 && lo->t[2].shape[3] == 5 &&
			   !strcmp(lo->t[4].name, "8.weight") && lo->t[4].shape[1] == 320,
		   "cnn layout: 3.weight (20,10,5,5), 8.weight (300,320)");
		size_t sum = 0;
		for (int i = 0; i < lo->ntensors; i++)
			sum += lo->t[i].offset == sum ? lo->t[i].size : 0;
		ok(sum == lo->total && lo->total == model_nparams(m), "cnn tensors tile θ in order");
		model_free(m);
	}
}

/* A residual block over images whose shortcut, a strided 1×1 conv2d, takes the input to the
 * block's new shape; its tensors are named after the block and "shortcut". */
#define TINY_RESNET                                                                                             \
	"{\"input\":[2,6,6],\"classes\":3,\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1}," \
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"relu\"},{\"type\":\"conv2d\",\"out\":3,\"kernel\":3,"      \
	"\"padding\":1}]},"                                                                                        \
	"{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,\"stride\":2,\"padding\":1}," \
	"{\"type\":\"relu\"},{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,\"padding\":1}],"                            \
	"\"shortcut\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":1,\"stride\":2}]},"                                 \
	"{\"type\":\"relu\"},{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}]}"

static void test_residual_layout(void)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_loads(TINY_RESNET, 0, NULL);
	struct model *m = NULL;
	if (!ok(spec && model_from_json(spec, &m, err) == 0, "a residual net over images builds (%s)", m ? "" : err)) {
		json_decref(spec);
		return;
	}
	const struct layout *lo = model_layout(m);
	const struct layout_tensor *t = &lo->t[8];
	ok(lo->ntensors == 12 && !strcmp(lo->t[2].name, "1.1.weight") && !strcmp(lo->t[4].name, "2.0.weight") &&
		   !strcmp(t->name, "2.shortcut.0.weight") && t->shape[0] == 4 && t->shape[1] == 3 && t->shape[2] == 1 &&
		   !strcmp(lo->t[10].name, "5.weight") && lo->t[10].shape[1] == 4 * 3 * 3,
	   "layout: the block's layers, then its shortcut's (2.shortcut.0.weight (4,3,1,1)); 4x3x3 into the dense");
	json_decref(spec);
	model_free(m);
}

/* share/gem/models/resnet.json: its parameters, its stage shortcuts, one training step. */
static void test_shipped_resnet(void)
{
	const char *src = getenv("GEM_SRC");
	char path[4096], err[GEM_ERRMAX];
	struct model *m;
	struct rng r;
	snprintf(path, sizeof path, "%s/share/gem/models/resnet.json", src ? src : ".");
	if (!ok(model_from_file(path, NULL, &m, err) == 0, "resnet.json loads (%s)", m ? "" : err))
		return;
	const struct layout *lo = model_layout(m);
	int sc = -1;
	for (int i = 0; i < lo->ntensors; i++)
		if (!strcmp(lo->t[i].name, "5.shortcut.0.weight"))
			sc = i;
	/* stem 160 + 32; blocks 4,704, 14,624 and 57,920; dense 31,370 */
	ok(model_nparams(m) == 108810 && lo->ntensors == 38, "resnet has 108810 parameters in 38 tensors (%zu, %d)",
	   model_nparams(m), lo->ntensors);
	ok(sc > 0 && lo->t[sc].shape[0] == 32 && lo->t[sc].shape[1] == 16 && lo->t[sc].shape[2] == 1 &&
		   !strcmp(lo->t[lo->ntensors - 2].name, "10.weight") && lo->t[lo->ntensors - 2].shape[1] == 3136,
	   "resnet layout: 5.shortcut.0.weight (32,16,1,1), 10.weight (10,3136) after the flatten");
	float x[2 * 784];
	uint16_t y[2] = {3, 7};
	rng_seed(&r, 2, 2);
	for (int i = 0; i < 2 * 784; i++)
		x[i] = rng_float(&r);
	model_init_params(m, 1);
	float loss = model_reserve(m, 2, err) == 0 ? model_train_step(m, x, y, 2, &r) : NAN;
	ok(fabsf(loss - logf(10)) < 0.5f, "resnet: one step from θ₀ gives a loss near ln 10 (%.3f)", loss);
	model_free(m);
}

static void test_init(void)
{
	char err[GEM_ERRMAX];
	json_t *spec = json_pack("{s:[i,i,i],s:i,s:[{s:s,s:i,s:i},{s:s},{s:s,s:i},{s:s}]}", "input", 2, 6, 6,
				 "classes", 3, "layers", "type", "conv2d", "out", 4, "kernel", 3, "type",
				 "flatten", "type", "dense", "out", 3, "type", "logsoftmax");
	struct model *a, *b;
	int ra = model_from_json(spec, &a, err), rb = model_from_json(spec, &b, err);
	json_decref(spec);
	if (!ok(ra == 0 && rb == 0, "init test model builds"))
		return;
	size_t n = model_nparams(a);
	model_init_params(a, 7);
	model_init_params(b, 7);
	ok(!memcmp(model_params(a), model_params(b), n * sizeof(float)), "same seed, bit-identical θ");
	model_init_params(b, 8);
	ok(memcmp(model_params(a), model_params(b), n * sizeof(float)), "another seed, another θ");
	/* fan_in: conv 2·3·3 = 18, dense 4·4·4 = 64; bound 1/√fan_in for weights and biases */
	const struct layout *lo = model_layout(a);
	int inside = 1;
	double lo_seen[4] = {0}, hi_seen[4] = {0};
	for (int t = 0; t < lo->ntensors; t++) {
		double bound = 1 / sqrt(t < 2 ? 18.0 : 64.0);
		const float *p = model_params(a) + lo->t[t].offset;
		for (size_t i = 0; i < lo->t[t].size; i++) {
			inside &= fabs(p[i]) <= bound;
			lo_seen[t] = fmin(lo_seen[t], p[i] / bound);
			hi_seen[t] = fmax(hi_seen[t], p[i] / bound);
		}
	}
	ok(inside, "every parameter is within ±1/√fan_in");
	ok(lo_seen[2] < -0.9 && hi_seen[2] > 0.9, "dense weights fill the interval (%.2f..%.2f of the bound)",
	   lo_seen[2], hi_seen[2]);
	model_free(a);
	model_free(b);
}

/* Whole-model check: the gradient written by model_train_step against central differences of
 * the mean loss it returns, the dropout masks fixed by reseeding the rng for every evaluation.
 * ε = 3e-3. A ReLU or a max-pool switch inside ±ε bends the loss: with a kink at distance d,
 * (L₊ − L₋)/2ε misses the slope by exactly |L₊ − 2L₀ + L₋|/2ε. Parameters where that exceeds
 * bend (1e-4: five times the float32 rounding of the loss over 2ε) are counted as kinked and skipped;
 * at most a quarter may be. Every other parameter must satisfy
 * |num − ana| / max(1e-2, |num| + |ana|) < 2e-2 (1e-2 for a kink just under the threshold,
 * 1e-2 for rounding). A wrong gradient shows as errors of order 1 in smooth parameters. */
static double model_gradcheck(struct model *m, const float *x, const uint16_t *y, int n, double bend, int *same,
			      double *kinked)
{
	const float eps = 3e-3f;
	struct rng r;
	size_t np = model_nparams(m), nk = 0;
	float *theta = model_params(m), *g = malloc(np * sizeof *g), *g2 = malloc(np * sizeof *g2);
	double worst = 0;
	rng_seed(&r, 5, 5);
	double l0 = model_train_step(m, x, y, n, &r);
	memcpy(g, model_grads(m), np * sizeof *g);
	rng_seed(&r, 5, 5);
	model_train_step(m, x, y, n, &r);
	memcpy(g2, model_grads(m), np * sizeof *g2);
	*same = !memcmp(g, g2, np * sizeof *g);
	for (size_t i = 0; i < np; i++) {
		float keep = theta[i];
		theta[i] = keep + eps;
		rng_seed(&r, 5, 5);
		double lp = model_train_step(m, x, y, n, &r);
		theta[i] = keep - eps;
		rng_seed(&r, 5, 5);
		double lm = model_train_step(m, x, y, n, &r);
		theta[i] = keep;
		if (fabs(lp - 2 * l0 + lm) / (2.0 * eps) > bend) {
			nk++;
			continue;
		}
		double num = (lp - lm) / (2.0 * eps), d = fabs(num) + fabs(g[i]);
		double e = fabs(num - g[i]) / (d > 1e-2 ? d : 1e-2);
		worst = e > worst ? e : worst;
	}
	*kinked = (double)nk / (double)np;
	free(g);
	free(g2);
	return worst;
}

/* bend: the kink threshold of model_gradcheck, 1e-4; INFINITY for a net without kinks (no
 * ReLU, no max-pool), whose curvature (a normalisation's) is no kink and whose every
 * parameter is checked */
static void test_gradients(const char *name, const char *text, int n, double bend)
{
	char err[GEM_ERRMAX];
	struct model *m = model_of_text(text, err);
	struct rng r;
	int same;
	double kinked;
	if (!ok(m != NULL, "%s builds (%s)", name, m ? "" : err))
		return;
	ok(model_reserve(m, n + 3, err) == 0 && model_reserved(m) == n + 3, "%s: reserve %d", name, n + 3);
	ok(model_reserve(m, 2, err) == 0 && model_reserved(m) == n + 3, "%s: a smaller reserve keeps the buffers",
	   name);
	model_init_params(m, 3);
	size_t in = model_input_size(m);
	float *x = malloc(in * n * sizeof *x);
	uint16_t *y = malloc(n * sizeof *y);
	rng_seed(&r, 11, 0);
	for (size_t i = 0; i < in * n; i++)
		x[i] = 2 * rng_float(&r) - 1;
	for (int i = 0; i < n; i++)
		y[i] = (uint16_t)rng_below(&r, (uint32_t)model_classes(m));
	double e = model_gradcheck(m, x, y, n, bend, &same, &kinked);
	ok(same, "%s: the same batch and rng give bit-identical gradients", name);
	ok(e < 2e-2, "%s: gradient matches finite differences of the loss (max rel err %.2g)", name, e);
	ok(kinked <= 0.25, "%s: few parameters sit near a kink (%.0f%% skipped)", name, 100 * kinked);
	long correct = 0;
	uint16_t pred[64];
	double sum = model_evaluate(m, x, y, n, &correct, pred);
	int agree = 1;
	for (int i = 0; i < n; i++)
		agree &= pred[i] < model_classes(m);
	ok(isfinite(sum) && sum > 0 && correct >= 0 && correct <= n && agree, "%s: evaluate gives a loss sum and predictions",
	   name);
	ok(isnan(model_train_step(m, x, y, n + 4, &r)) && isnan(model_evaluate(m, x, y, 0, NULL, NULL)),
	   "%s: a batch outside 1..reserved is refused (NaN)", name);
	free(x);
	free(y);
	model_free(m);
}

int main(void)
{
	bli_thread_set_num_threads(1);
	test_bad_specs();
	test_shipped();
	test_shipped_resnet();
	test_init();
	test_residual_layout();
	test_gradients("tiny resnet", TINY_RESNET, 4, 1e-4);
	test_gradients("tiny resnet with groupnorm, pools, tanh and sigmoid",
		       "{\"input\":[2,6,6],\"classes\":3,\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,"
		       "\"padding\":1},{\"type\":\"groupnorm\",\"groups\":2},{\"type\":\"tanh\"},"
		       "{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"out\":4,\"kernel\":3,\"padding\":1},"
		       "{\"type\":\"groupnorm\",\"groups\":4},{\"type\":\"sigmoid\"}]},{\"type\":\"avgpool2d\"},"
		       "{\"type\":\"groupnorm\",\"groups\":1},{\"type\":\"globalavgpool\"},{\"type\":\"dense\",\"out\":3},"
		       "{\"type\":\"logsoftmax\"}]}",
		       4, INFINITY);
	test_gradients("a block with a shortcut first (no input gradient)",
		       "{\"input\":[2,5,5],\"classes\":3,\"layers\":[{\"type\":\"residual\",\"layers\":[{\"type\":"
		       "\"conv2d\",\"out\":3,\"kernel\":3,\"stride\":2,\"padding\":1}],\"shortcut\":[{\"type\":\"relu\"},"
		       "{\"type\":\"conv2d\",\"out\":3,\"kernel\":1,\"stride\":2},{\"type\":\"relu\"},{\"type\":\"residual\","
		       "\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":1}]}]},"
		       "{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}]}",
		       4, 1e-4);
	test_gradients("tiny mlp",
		       "{\"input\":[1,3,4],\"classes\":4,\"layers\":[{\"type\":\"flatten\"},"
		       "{\"type\":\"dense\",\"out\":6},{\"type\":\"relu\"},{\"type\":\"dropout\",\"p\":0.3},"
		       "{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}]}",
		       5, 1e-4);
	test_gradients("tiny cnn",
		       "{\"input\":[2,10,10],\"classes\":3,\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":3},"
		       "{\"type\":\"maxpool2d\",\"size\":2},{\"type\":\"relu\"},"
		       "{\"type\":\"conv2d\",\"out\":4,\"kernel\":2,\"padding\":1},{\"type\":\"dropout2d\",\"p\":0.3},"
		       "{\"type\":\"relu\"},{\"type\":\"flatten\"},{\"type\":\"dense\",\"out\":5},{\"type\":\"relu\"},"
		       "{\"type\":\"dense\",\"out\":3},{\"type\":\"logsoftmax\"}]}",
		       5, 1e-4);
	return done_testing();
}
