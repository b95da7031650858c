#include "run/runjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jget.h"
#include "base/num.h"
#include "nn/data.h"
#include "nn/model.h"
#include "nn/samples.h"

const struct run_train_num run_train_nums[RUN_TRAIN_NUMS] = {
	{.key = "lr", .bad = "not a positive number", .lo = 1e-12, .hi = 1e6,
	 .off = offsetof(struct run_train_spec, lr)},
	{.key = "momentum", .bad = "not in [0, 1)", .lo = 0, .hi = 0.999999,
	 .off = offsetof(struct run_train_spec, momentum)},
	{.key = "weight_decay", .bad = "not a number >= 0", .lo = 0, .hi = 1e6,
	 .off = offsetof(struct run_train_spec, weight_decay)},
	{.key = "batch", .bad = "not an integer in [1, 65536]", .lo = 1, .hi = RUN_MAX_BATCH,
	 .integral = 1, .off = offsetof(struct run_train_spec, batch)},
	{.key = "epochs", .bad = "not a positive integer", .lo = 1, .hi = RUN_MAX_EPOCHS,
	 .integral = 1, .off = offsetof(struct run_train_spec, epochs)},
};

/* The optimiser's members of run.json "train", and a budget in steps, each only when it is not
 * the default. */
static int optim_to_json(const struct run_train_spec *t, json_t *train)
{
	int rc = 0;
	if (t->optimizer != OPTIM_SGD)
		rc |= json_object_set_new(train, "optimizer", json_string(optim_kind_name(t->optimizer)));
	if (t->warmup)
		rc |= json_object_set_new(train, "warmup", json_integer((json_int_t)t->warmup));
	if (t->schedule != LR_CONSTANT)
		rc |= json_object_set_new(train, "schedule", json_string(lr_shape_name(t->schedule)));
	if (t->clip > 0)
		rc |= json_object_set_new(train, "clip", json_real(t->clip));
	if (t->micro > 1)
		rc |= json_object_set_new(train, "microbatches", json_integer(t->micro));
	if (t->steps)
		rc |= json_object_set_new(train, "steps", json_integer((json_int_t)t->steps));
	return rc;
}

/* run.json "data"'s optional members: the label column, the holdout, the normalisation by
 * group. */
static int data_to_json(const struct run_spec *s, json_t *data)
{
	json_t *mean, *std;
	int rc = 0;
	if (s->data_label[0])
		rc |= json_object_set_new(data, "label", json_string(s->data_label));
	if (s->holdout > 0)
		rc |= json_object_set_new(data, "holdout", json_real(s->holdout));
	if (!s->norm_groups)
		return rc;
	mean = json_array();
	std = json_array();
	rc |= json_object_set_new(data, "norm", json_pack("{s:f, s:o, s:o}", "scale", s->norm_scale,
							  "mean", mean, "std", std));
	for (int g = 0; g < s->norm_groups; g++) {
		rc |= json_array_append_new(mean, json_real(s->norm_mean[g]));
		rc |= json_array_append_new(std, json_real(s->norm_std[g]));
	}
	return rc;
}

json_t *run_spec_to_json(const struct run_spec *s)
{
	const struct run_train_spec *t = &s->train;
	json_t *rule = rule_config_to_json(&s->rule), *j;
	if (!rule)
		return NULL;
	j = json_pack("{s:i, s:s, s:s, s:O, s:{s:s, s:s, s:f, s:f}, s:{s:f, s:f, s:b, s:f, s:i, s:i, s:I},"
		      " s:o, s:I}",
		      "gem_run", RUN_FORMAT, "created", s->created, "model_name", s->model_name, "model",
		      s->model, "data", "name", s->data_name, "dir", s->data_dir, "mean", s->mean, "std",
		      s->std, "train", "lr", t->lr, "momentum", t->momentum, "nesterov", t->nesterov,
		      "weight_decay", t->weight_decay, "batch", t->batch, "epochs", t->epochs, "seed",
		      (json_int_t)t->seed, "rule", rule, "nparams", (json_int_t)s->nparams);
	if (j && s->part_data && json_object_set_new(j, "part_data", json_true()) < 0) {
		json_decref(j);
		return NULL;
	}
	if (j && (optim_to_json(t, json_object_get(j, "train")) < 0 ||
		  data_to_json(s, json_object_get(j, "data")) < 0)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* Getters that name what is wrong: "train.lr: missing or not a number". */
static int get_num(const json_t *o, const char *sect, const char *key, double *out, char *err)
{
	if (jget_num(o, key, -HUGE_VAL, HUGE_VAL, out) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "%s%s%s: missing or not a number", sect, *sect ? "." : "",
				key);
	return 0;
}

static int get_str(const json_t *o, const char *sect, const char *key, char *out, size_t cap,
		   char *err)
{
	if (jget_strcpy(o, key, out, cap) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "%s%s%s: missing, not a string or too long", sect,
				*sect ? "." : "", key);
	return 0;
}

/* run.json "train"'s optimiser and budget in steps: each member optional (missing: the
 * default), checked as gem-init (gem-serve for the steps) checks its option; AdamW with a
 * momentum is refused (its betas are its momentum). */
static int optim_from_json(const json_t *train, struct run_train_spec *t, char *err)
{
	const json_t *v;
	long long warmup = 0, steps = 0, micro = 0;
	double clip = 0;
	int k;
	if ((v = json_object_get(train, "optimizer"))) {
		if (!json_is_string(v) || (k = optim_kind_parse(json_string_value(v))) < 0)
			return gem_errf(err, GEM_EUSAGE, "train.optimizer: not \"sgd\" or \"adamw\"");
		t->optimizer = (enum optim_kind)k;
	}
	if ((v = json_object_get(train, "schedule"))) {
		if (!json_is_string(v) || (k = lr_shape_parse(json_string_value(v))) < 0)
			return gem_errf(err, GEM_EUSAGE, "train.schedule: not \"constant\" or \"cosine\"");
		t->schedule = (enum lr_shape)k;
	}
	if (jget_int(train, "warmup", 0, (long long)RUN_MAX_WARMUP, &warmup) < 0)
		return gem_errf(err, GEM_EUSAGE, "train.warmup: not an integer in [0, 2^40]");
	if (jget_num(train, "clip", 0, RUN_MAX_CLIP, &clip) < 0)
		return gem_errf(err, GEM_EUSAGE, "train.clip: not a number in [0, %g]", RUN_MAX_CLIP);
	if (jget_int(train, "steps", 1, (long long)RUN_MAX_STEPS, &steps) < 0)
		return gem_errf(err, GEM_EUSAGE, "train.steps: not an integer in [1, 2^40]");
	if (jget_int(train, "microbatches", 1, MODEL_MAX_MICRO, &micro) < 0 || micro > t->batch)
		return gem_errf(err, GEM_EUSAGE, "train.microbatches: not an integer in [1, %d] and at most the "
				"batch", MODEL_MAX_MICRO);
	t->warmup = (uint64_t)warmup;
	t->clip = clip;
	t->micro = (int)micro;
	t->steps = (uint64_t)steps;
	if (t->optimizer == OPTIM_ADAMW && (t->momentum != 0 || t->nesterov))
		return gem_errf(err, GEM_EUSAGE, "train.momentum: AdamW takes none (its betas are its momentum)");
	return 0;
}

/* run.json "train": every number in the range gem-init gives it, checked before it is narrowed
 * (a double beyond an int, or a negative one cast to uint64_t, is undefined behaviour). */
static int train_from_json(const json_t *train, struct run_train_spec *t, char *err)
{
	long long seed;
	double v;
	for (size_t i = 0; i < RUN_TRAIN_NUMS; i++) {
		const struct run_train_num *f = &run_train_nums[i];
		if (get_num(train, "train", f->key, &v, err))
			return GEM_EUSAGE;
		if (!(v >= f->lo && v <= f->hi) || (f->integral && v != floor(v)))
			return gem_errf(err, GEM_EUSAGE, "train.%s: %s in [%g, %g]", f->key,
					f->integral ? "an integer" : "a number", f->lo, f->hi);
		if (f->integral)
			*(int *)((char *)t + f->off) = (int)v;
		else
			*(double *)((char *)t + f->off) = v;
	}
	/* read exactly, as gem-init writes it: a JSON integer (a double has 53 bits) */
	if (jget_int(train, "seed", 0, LLONG_MAX, &seed) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "train.seed: missing or not an integer in [0, 2^63)");
	t->seed = (uint64_t)seed;
	jget_bool(train, "nesterov", &t->nesterov);
	return optim_from_json(train, t, err);
}

/* run.json "data.norm": {"mean": [...], "std": [...]}, one of each per group, each std > 0. */
static int norm_from_json(const json_t *norm, struct run_spec *s, char *err)
{
	const json_t *mean = json_object_get(norm, "mean"), *std = json_object_get(norm, "std");
	size_t n = json_array_size(mean);
	if (!json_is_object(norm) || !json_is_array(mean) || !json_is_array(std) || !n ||
	    n != json_array_size(std) || n > SAMPLES_MAX_DIM)
		return gem_errf(err, GEM_EUSAGE, "data.norm: not {\"mean\": [...], \"std\": [...]} of one "
				"length");
	s->norm_mean = malloc(n * sizeof *s->norm_mean);
	s->norm_std = malloc(n * sizeof *s->norm_std);
	if (!s->norm_mean || !s->norm_std)
		return gem_errf(err, GEM_ENOMEM, "data.norm: out of memory");
	s->norm_groups = (int)n;
	s->norm_scale = 1.0 / 255;
	if (jget_num(norm, "scale", 1e-30, 1, &s->norm_scale) < 0)
		return gem_errf(err, GEM_EUSAGE, "data.norm.scale: not a number in (0, 1]");
	for (size_t g = 0; g < n; g++) {
		const json_t *m = json_array_get(mean, g), *d = json_array_get(std, g);
		s->norm_mean[g] = json_number_value(m);
		s->norm_std[g] = json_number_value(d);
		if (!json_is_number(m) || !json_is_number(d) || !isfinite(s->norm_mean[g]) ||
		    !(s->norm_std[g] >= 1e-30 && s->norm_std[g] <= 1e30))
			return gem_errf(err, GEM_EUSAGE, "data.norm: group %zu: a finite mean and a std in "
					"[1e-30, 1e30]", g);
	}
	return 0;
}

/* run.json "data": its place, and a normalisation: by group ("norm"), or of all values scaled
 * to [0, 1] (dataset_stats) with a std that keeps x/std a float (a run made before). The mean
 * and std of all values are those of bytes in [0, 1] unless the groups say the values are
 * floats (scale 1). */
static int data_from_json(const json_t *data, struct run_spec *s, char *err)
{
	const json_t *norm;
	int floats;
	if (!json_is_object(data))
		return gem_errf(err, GEM_EUSAGE, "data: missing or not an object");
	norm = json_object_get(data, "norm");
	if (get_str(data, "data", "name", s->data_name, sizeof s->data_name, err) ||
	    get_str(data, "data", "dir", s->data_dir, sizeof s->data_dir, err) ||
	    (norm && norm_from_json(norm, s, err)) || get_num(data, "data", "mean", &s->mean, err))
		return GEM_EUSAGE;
	floats = norm && s->norm_scale == 1;
	if (!(s->mean >= 0 && s->mean <= 1) && !(floats && fabs(s->mean) <= 1e30))
		return gem_errf(err, GEM_EUSAGE, "data.mean: a number in [0, 1]%s",
				floats ? " (of floats: in [-1e30, 1e30])" : "");
	if (get_num(data, "data", "std", &s->std, err))
		return GEM_EUSAGE;
	if (!(s->std >= 1e-30 && s->std <= (floats ? 1e30 : 1)))
		return gem_errf(err, GEM_EUSAGE, "data.std: a number in [1e-30, %g]", floats ? 1e30 : 1.0);
	if (jget_strcpy(data, "label", s->data_label, sizeof s->data_label) < 0)
		return gem_errf(err, GEM_EUSAGE, "data.label: not a string of a column's name");
	if (jget_num(data, "holdout", DATA_HOLDOUT_MIN, DATA_HOLDOUT_MAX, &s->holdout) < 0)
		return gem_errf(err, GEM_EUSAGE, "data.holdout: not a number in [%g, %g]", DATA_HOLDOUT_MIN,
				DATA_HOLDOUT_MAX);
	return 0;
}

int run_spec_from_json(const json_t *j, struct run_spec *s, char *err)
{
	const json_t *train = json_object_get(j, "train");
	long long n = 0;
	double v;
	int rc;

	memset(s, 0, sizeof *s);
	if (!json_is_object(j))
		return gem_errf(err, GEM_EUSAGE, "not a JSON object");
	if (get_num(j, "", "gem_run", &v, err) || v != RUN_FORMAT)
		return gem_errf(err, GEM_EUSAGE, "gem_run: missing, or a format this gem does not know");
	if (jget_strcpy(j, "created", s->created, sizeof s->created) < 0)
		return gem_errf(err, GEM_EUSAGE, "created: not a string of a time");
	s->model = json_incref(json_object_get(j, "model"));
	if (!json_is_object(s->model))
		return gem_errf(err, GEM_EUSAGE, "model: missing or not an object");
	if (get_str(j, "", "model_name", s->model_name, sizeof s->model_name, err) < 0 ||
	    (rc = data_from_json(json_object_get(j, "data"), s, err)) < 0)
		return GEM_EUSAGE;
	if (!json_is_object(train))
		return gem_errf(err, GEM_EUSAGE, "train: missing or not an object");
	if ((rc = train_from_json(train, &s->train, err)) < 0)
		return rc;
	if (rule_config_from_json(json_object_get(j, "rule"), &s->rule, err) < 0) {
		gem_errprefix(err, "rule: ");
		return GEM_EUSAGE;
	}
	if (jget_int(j, "nparams", 0, LLONG_MAX, &n) < 0)
		return gem_errf(err, GEM_EUSAGE, "nparams: not an integer >= 0");
	s->nparams = (size_t)n;
	/* a run of 0.1.0 says "shard" (the older spelling), at the top or in "train" */
	s->part_data = json_is_true(json_object_get(j, "part_data")) ||
		       json_is_true(json_object_get(j, "shard")) ||    /* older spelling */
		       json_is_true(json_object_get(train, "shard")); /* older spelling */
	return 0;
}

void run_spec_free(struct run_spec *s)
{
	json_decref(s->model);
	s->model = NULL;
	free(s->norm_mean);
	free(s->norm_std);
	s->norm_mean = s->norm_std = NULL;
	s->norm_groups = 0;
}


const char *run_spec_rule_name(const json_t *j)
{
	const json_t *rule = json_object_get(j, "rule");
	if (json_is_object(rule))
		rule = json_object_get(rule, "name");
	return json_is_string(rule) ? json_string_value(rule) : NULL;
}

const json_t *run_spec_model(const json_t *j)
{
	return json_object_get(j, "model");
}
