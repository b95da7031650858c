#include "run/spec.h"

#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "base/fsutil.h"
#include "base/jget.h"
#include "base/num.h"
#include "base/prog.h"
#include "nn/data.h"
#include "nn/model.h"
#include "nn/safetensors.h"
#include "nn/samples.h"
#include "run/run.h"

enum {
	O_LR = 256, O_MOM, O_NEST, O_WD, O_KAPPA, O_PIMAX, O_EPS, O_GEMREF, O_STATEPREC, O_WINDOW, O_ALPHA, O_LDC,
	O_OPTIM, O_WARMUP, O_SCHED, O_CLIP, O_OUTER_LR, O_OUTER_MOM, O_DELAYED, O_DYNLU, O_FRAGMENTS, O_MIX, O_LABEL,
	O_HOLDOUT, O_INIT_FROM, O_OVERLAP, O_EXEC_TIMEOUT, O_MICRO,
};


const struct option run_opts_long[RUN_OPTS_N + 1] = {
	{.name = "model", .has_arg = required_argument, .val = 'm'},
	{.name = "data", .has_arg = required_argument, .val = 'd'},
	{.name = "label", .has_arg = required_argument, .val = O_LABEL},
	{.name = "holdout", .has_arg = required_argument, .val = O_HOLDOUT},
	{.name = "init-from", .has_arg = required_argument, .val = O_INIT_FROM},
	{.name = "exec-timeout", .has_arg = required_argument, .val = O_EXEC_TIMEOUT},
	{.name = "rule", .has_arg = required_argument, .val = 'r'},
	{.name = "lr", .has_arg = required_argument, .val = O_LR},
	{.name = "momentum", .has_arg = required_argument, .val = O_MOM},
	{.name = "nesterov", .has_arg = no_argument, .val = O_NEST},
	{.name = "weight-decay", .has_arg = required_argument, .val = O_WD},
	{.name = "optimizer", .has_arg = required_argument, .val = O_OPTIM},
	{.name = "warmup", .has_arg = required_argument, .val = O_WARMUP},
	{.name = "schedule", .has_arg = required_argument, .val = O_SCHED},
	{.name = "clip", .has_arg = required_argument, .val = O_CLIP},
	{.name = "microbatches", .has_arg = required_argument, .val = O_MICRO},
	{.name = "batch", .has_arg = required_argument, .val = 'b'},
	{.name = "epochs", .has_arg = required_argument, .val = 'e'},
	{.name = "seed", .has_arg = required_argument, .val = 's'},
	{.name = "kappa", .has_arg = required_argument, .val = O_KAPPA},
	{.name = "pi-max", .has_arg = required_argument, .val = O_PIMAX},
	{.name = "eps", .has_arg = required_argument, .val = O_EPS},
	{.name = "gem-ref", .has_arg = required_argument, .val = O_GEMREF},
	{.name = "state-precision", .has_arg = required_argument, .val = O_STATEPREC},
	{.name = "window", .has_arg = required_argument, .val = O_WINDOW},
	{.name = "alpha", .has_arg = required_argument, .val = O_ALPHA},
	{.name = "lambda-dc", .has_arg = required_argument, .val = O_LDC},
	{.name = "outer-lr", .has_arg = required_argument, .val = O_OUTER_LR},
	{.name = "outer-momentum", .has_arg = required_argument, .val = O_OUTER_MOM},
	{.name = "delayed-nesterov", .has_arg = required_argument, .val = O_DELAYED},
	{.name = "dynamic-local-updates", .has_arg = no_argument, .val = O_DYNLU},
	{.name = "fragments", .has_arg = required_argument, .val = O_FRAGMENTS},
	{.name = "mix", .has_arg = required_argument, .val = O_MIX},
	{.name = "overlap", .has_arg = required_argument, .val = O_OVERLAP},
	{.name = "workers", .has_arg = required_argument, .val = 'n'},
	{.name = "force", .has_arg = no_argument, .val = 'f'},
	{0},
};

/* The options of run.json's "train" numbers, in run_train_nums' order. */
static const int train_opts[RUN_TRAIN_NUMS] = {O_LR, O_MOM, O_WD, 'b', 'e'};

/* ---- making a run ---- */

/* θ₀ of m from the safetensors file path: every tensor's name and shape checked against m's. */
static int init_from(struct model *m, const char *path, char *err)
{
	int rc = safetensors_load(path, model_layout(m), model_params(m), NULL, err);
	if (rc < 0)
		gem_errprefix(err, "--init-from: ");
	return rc;
}

/* Write the run spec describes with m, its model built: θ₀ from the seed (or from the
 * safetensors file init, if non-NULL), then run.json. */
static int make_with(const char *dir, struct run_spec *spec, struct model *m, const char *init,
		     int flags, char *err)
{
	struct run_spec check;
	json_t *runjson;
	int rc;
	if (!spec->created[0]) {
		time_t now = time(NULL);
		strftime(spec->created, sizeof spec->created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	}
	spec->nparams = model_nparams(m);
	if (!(runjson = run_spec_to_json(spec)))
		return gem_errf(err, GEM_ENOMEM, "cannot build run.json");
	/* no run is made that run_open would refuse (a dataset whose pixels are all one value) */
	rc = run_spec_from_json(runjson, &check, err);
	run_spec_free(&check);
	if (rc < 0) {
		gem_errprefix(err, "%s: ", RUN_JSON);
		json_decref(runjson);
		return rc;
	}
	if ((init ? (rc = init_from(m, init, err)) : (rc = model_init(m, spec->train.seed, err))) < 0) {
		json_decref(runjson);
		return rc;
	}
	rc = run_create(dir, runjson, model_params(m), model_nparams(m), flags & RUN_MAKE_FORCE, err);
	json_decref(runjson);
	return rc;
}

int run_make(const char *dir, struct run_spec *spec, int flags, char *err)
{
	struct model *m;
	int rc;
	if ((rc = model_from_json(spec->model, &m, err)) < 0)
		return rc;
	rc = make_with(dir, spec, m, NULL, flags, err);
	model_free(m);
	return rc;
}

/* ---- a new run from its options ---- */

/* The long name of option val. */
static const char *opt_name(int val)
{
	const struct option *o = run_opts_long;
	while (o->name && o->val != val)
		o++;
	return o->name;
}

void run_opts_init(struct run_opts *o)
{
	memset(o, 0, sizeof *o);
	o->model = "cnn";
	o->data = "fashion-mnist";
	o->rule = "gem";
	o->exec_timeout = EXEC_TIMEOUT_DEFAULT;
	o->train = (struct run_train_spec){.lr = 0.05, .momentum = 0.9, .batch = 64, .epochs = 1,
					   .seed = 1};
}

/* An option of the optimiser into t. */
static int optim_opt_take(struct run_train_spec *t, int c, const char *arg, char *err)
{
	int k;
	uint64_t u;
	switch (c) {
	case O_OPTIM:
		if ((k = optim_kind_parse(arg)) < 0)
			return gem_errf(err, GEM_EUSAGE, "--optimizer: not sgd or adamw: %s", arg);
		t->optimizer = (enum optim_kind)k;
		return 0;
	case O_SCHED:
		if ((k = lr_shape_parse(arg)) < 0)
			return gem_errf(err, GEM_EUSAGE, "--schedule: not constant or cosine: %s", arg);
		t->schedule = (enum lr_shape)k;
		return 0;
	case O_WARMUP:
		if (num_u64(arg, &u) || u > RUN_MAX_WARMUP)
			return gem_errf(err, GEM_EUSAGE, "--warmup: not an integer in [0, 2^40]: %s", arg);
		t->warmup = u;
		return 0;
	case O_MICRO:
		if (num_u64(arg, &u) || u < 1 || u > MODEL_MAX_MICRO)
			return gem_errf(err, GEM_EUSAGE, "--microbatches: not an integer in [1, %d]: %s",
					MODEL_MAX_MICRO, arg);
		t->micro = (int)u;
		return 0;
	}
	if (num_double(arg, 0, RUN_MAX_CLIP, &t->clip))
		return gem_errf(err, GEM_EUSAGE, "--clip: not a number in [0, %g]: %s", RUN_MAX_CLIP, arg);
	return 0;
}

int run_opts_take(struct run_opts *o, int c, const char *arg, char *err)
{
	if (c == O_MOM)
		o->momentum_set = 1;
	for (size_t i = 0; i < RUN_TRAIN_NUMS; i++) {
		const struct run_train_num *f = &run_train_nums[i];
		double v;
		long k;
		if (train_opts[i] != c)
			continue;
		if (f->integral ? num_long(arg, (long)f->lo, (long)f->hi, &k) : num_double(arg, f->lo, f->hi, &v))
			return gem_errf(err, GEM_EUSAGE, "--%s: %s: %s", opt_name(c), f->bad, arg);
		if (f->integral)
			*(int *)((char *)&o->train + f->off) = (int)k;
		else
			*(double *)((char *)&o->train + f->off) = v;
		return 0;
	}
	switch (c) {
	case O_OPTIM: case O_SCHED: case O_WARMUP: case O_CLIP: case O_MICRO:
		return optim_opt_take(&o->train, c, arg, err);
	case 'm': o->model = arg; return 0;
	case 'd': o->data = arg; o->data_set = 1; return 0;
	case O_EXEC_TIMEOUT:
		if (num_double(arg, 0.001, EXEC_TIMEOUT_MAX, &o->exec_timeout))
			return gem_errf(err, GEM_EUSAGE, "--exec-timeout: not a number of seconds in [0.001, %g]: %s",
					EXEC_TIMEOUT_MAX, arg);
		return 0;
	case O_LABEL: o->label = arg; return 0;
	case O_INIT_FROM: o->init_from = arg; return 0;
	case O_HOLDOUT:
		if (num_double(arg, DATA_HOLDOUT_MIN, DATA_HOLDOUT_MAX, &o->holdout))
			return gem_errf(err, GEM_EUSAGE, "--holdout: not a fraction in [%g, %g]: %s",
					DATA_HOLDOUT_MIN, DATA_HOLDOUT_MAX, arg);
		return 0;
	case 'r': o->rule = arg; return 0;
	case O_NEST: o->train.nesterov = 1; return 0;
	case 'f': o->force = 1; return 0;
	case 's':
		if (num_u64(arg, &o->train.seed) || o->train.seed > INT64_MAX)
			return gem_errf(err, GEM_EUSAGE, "--seed: not an integer in [0, 2^63): %s", arg);
		return 0;
	case O_KAPPA: case O_PIMAX: case O_EPS: case O_GEMREF: case O_STATEPREC: case O_WINDOW: case O_ALPHA: case O_LDC:
	case O_OUTER_LR: case O_OUTER_MOM: case O_DELAYED: case O_DYNLU: case O_FRAGMENTS:
	case O_MIX: case O_OVERLAP: case 'n':
		if (o->nruleopts == (int)(sizeof o->ruleopts / sizeof *o->ruleopts))
			return gem_errf(err, GEM_EUSAGE, "too many rule options");
		o->ruleopts[o->nruleopts].opt = c;
		o->ruleopts[o->nruleopts++].arg = arg;
		return 0;
	}
	return 1;
}

int run_opts_match(const char *a, int *value)
{
	const struct option *o;
	*value = 0;
	if (a[0] != '-' || !a[1])
		return -1;
	if (a[1] == '-') {
		const char *eq = strchr(a + 2, '=');
		size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		for (o = run_opts_long; o->name; o++)
			if (strlen(o->name) == len && !strncmp(o->name, a + 2, len)) {
				*value = o->has_arg == required_argument && !eq;
				return o->val;
			}
		return -1;
	}
	for (o = run_opts_long; o->name; o++)
		if (o->val == a[1]) {
			*value = o->has_arg == required_argument && !a[2];
			return o->val;
		}
	return -1;
}

int run_opts_table(const struct option *more, struct option *out, size_t cap)
{
	size_t n = 0;
	for (const struct option *o = run_opts_long; o->name; o++)
		if (n < cap)
			out[n++] = *o;
	for (; more && more->name; more++)
		if (n < cap)
			out[n++] = *more;
	if (n >= cap)
		return -1;
	out[n] = (struct option){0, 0, 0, 0};
	return 0;
}

/* A rule option's value into c: 0, or GEM_EUSAGE saying what is wrong with it. */
static int rule_opt_apply(struct rule_config *c, int opt, const char *a, char *err)
{
	long v;
	switch (opt) {
	case O_KAPPA:
		if (num_float(a, 0, 1e6, &c->kappa))
			return gem_errf(err, GEM_EUSAGE, "--kappa: not a number >= 0: %s", a);
		break;
	case O_PIMAX:
		if (num_float(a, 0, 1e6, &c->pi_max))
			return gem_errf(err, GEM_EUSAGE, "--pi-max: not a number >= 0: %s", a);
		break;
	case O_EPS:
		if (num_float(a, 0, 1, &c->eps))
			return gem_errf(err, GEM_EUSAGE, "--eps: not in [0, 1]: %s", a);
		break;
	case O_GEMREF:
		if ((c->gem_ref = rule_gem_ref_parse(a)) < 0)
			return gem_errf(err, GEM_EUSAGE, "--gem-ref: not pull or commit: %s", a);
		break;
	case O_STATEPREC:
		if ((c->state_precision = rule_state_precision_parse(a)) < 0)
			return gem_errf(err, GEM_EUSAGE, "--state-precision: not f32 or bf16: %s", a);
		break;
	case O_WINDOW:
		if (num_long(a, 1, 1 << 20, &v))
			return gem_errf(err, GEM_EUSAGE, "--window: not a positive integer: %s", a);
		c->window = (int)v;
		break;
	case O_ALPHA:
		if (num_float(a, 0, 1, &c->alpha))
			return gem_errf(err, GEM_EUSAGE, "--alpha: not in [0, 1]: %s", a);
		break;
	case O_LDC:
		if (num_float(a, 0, 1e6, &c->lambda_dc))
			return gem_errf(err, GEM_EUSAGE, "--lambda-dc: not a number >= 0: %s", a);
		break;
	case O_OUTER_LR:
		if (num_float(a, 1e-12, 1e6, &c->outer_lr))
			return gem_errf(err, GEM_EUSAGE, "--outer-lr: not a positive number: %s", a);
		break;
	case O_OUTER_MOM:
		if (num_float(a, 0, 0.999999, &c->outer_momentum))
			return gem_errf(err, GEM_EUSAGE, "--outer-momentum: not in [0, 1): %s", a);
		break;
	case O_DELAYED:
		if (num_long(a, 0, 1 << 20, &v))
			return gem_errf(err, GEM_EUSAGE,
					"--delayed-nesterov: not an integer in [0, 1048576]: %s", a);
		c->delayed_nesterov = (int)v;
		break;
	case O_DYNLU:
		c->dynamic_local_updates = 1;
		break;
	case O_FRAGMENTS:
		if (num_long(a, 1, 1 << 20, &v))
			return gem_errf(err, GEM_EUSAGE,
					"--fragments: not an integer in [1, 1048576]: %s", a);
		c->fragments = (int)v;
		break;
	case O_MIX:
		if (num_float(a, 0, 0.999999, &c->mix))
			return gem_errf(err, GEM_EUSAGE, "--mix: not in [0, 1): %s", a);
		break;
	case O_OVERLAP:
		if (num_long(a, 0, 1 << 20, &v))
			return gem_errf(err, GEM_EUSAGE,
					"--overlap: not an integer in [0, 1048576]: %s", a);
		c->overlap = (int)v;
		break;
	case 'n':
		if (num_long(a, 1, RUN_MAX_WORKERS, &v))
			return gem_errf(err, GEM_EUSAGE, "--workers: not an integer in [1, %d]: %s",
					RUN_MAX_WORKERS, a);
		c->nworkers = (int)v;
		break;
	}
	return 0;
}

/* The run.json "rule" member an option sets: its name with '_' for '-' ("pi_max"), --workers'
 * "nworkers". */
static void rule_key(int val, char *key, size_t cap)
{
	snprintf(key, cap, "%s", val == 'n' ? "nworkers" : opt_name(val));
	for (char *p = key; *p; p++)
		if (*p == '-')
			*p = '_';
}

/* The rule of o: its defaults, the options given in their order, checked; an option the rule
 * does not use is refused. o->usage when the error is one option's. */
static int rule_of_opts(struct run_opts *o, struct rule_config *rc, char *err)
{
	json_t *rulejson;
	char key[32];
	int rcode;
	if ((rcode = rule_config_default(o->rule, rc, err)) < 0) {
		gem_errprefix(err, "--rule: ");
		return GEM_EUSAGE;
	}
	rc->lr = (float)o->train.lr;
	rc->momentum = (float)o->train.momentum;
	int outer_lr_given = 0, delayed_given = 0;
	for (int i = 0; i < o->nruleopts; i++) {
		if (rule_opt_apply(rc, o->ruleopts[i].opt, o->ruleopts[i].arg, err) < 0)
			return o->usage = 1, GEM_EUSAGE;
		outer_lr_given |= o->ruleopts[i].opt == O_OUTER_LR;
		delayed_given |= o->ruleopts[i].opt == O_DELAYED;
	}
	/* what --workers N implies (async-diloco's outer step), stored in run.json as given */
	rule_config_workers(rc, outer_lr_given, delayed_given);
	if ((rcode = rule_config_check(rc, err)) < 0)
		return GEM_EUSAGE;
	if (!(rulejson = rule_config_to_json(rc)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int i = 0; i < o->nruleopts; i++) {
		rule_key(o->ruleopts[i].opt, key, sizeof key);
		if (!json_object_get(rulejson, key)) {
			json_decref(rulejson);
			o->usage = 1;
			return gem_errf(err, GEM_EUSAGE, "--%s: rule %s does not use it",
					opt_name(o->ruleopts[i].opt), rc->name);
		}
	}
	json_decref(rulejson);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The built-in model names (share/gem/models/NAME.json), sorted; how many (at most cap). */
static size_t builtin_models(char names[][64], size_t cap)
{
	char dir[4096];
	struct dirent *e;
	DIR *d;
	size_t n = 0;
	if (prog_share_path("models", dir, sizeof dir) || !(d = opendir(dir)))
		return 0;
	while (n < cap && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len > 5 && len - 5 < 64 && !strcmp(e->d_name + len - 5, ".json"))
			snprintf(names[n++], 64, "%.*s", (int)(len - 5), e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, by_name);
	return n;
}

/* A model argument without a slash is a built-in name first (share/gem/models/NAME.json),
 * whatever the current directory holds; else it is a spec file. */
static int resolve_model(const char *arg, char *path, size_t cap, char *err)
{
	char rel[300], names[64][64];
	const char *list[64];
	struct stat st;
	size_t n;
	if (!strchr(arg, '/') && strlen(arg) <= 200) {
		snprintf(rel, sizeof rel, "models/%s.json", arg);
		if (prog_share_path(rel, path, cap) == 0)
			return 0;
	}
	if (fs_is_dir(arg))
		return gem_errf(err, GEM_EUSAGE, "--model %s: a directory, not a model spec (a JSON file, "
				"see gem-model(5)) nor a built-in model", arg);
	if (stat(arg, &st) == 0) {
		snprintf(path, cap, "%s", arg);
		return 0;
	}
	if (strchr(arg, '/'))
		return gem_errf(err, GEM_EUSAGE, "--model %s: no such file", arg);
	snprintf(rel, sizeof rel, "%.200s.json", arg);
	if (stat(rel, &st) == 0 && S_ISREG(st.st_mode))
		return gem_errf(err, GEM_EUSAGE, "--model %s: no built-in model and no file of that name; "
				"did you mean --model %s (a spec file here)?", arg, rel);
	n = builtin_models(names, 64);
	for (size_t i = 0; i < n; i++)
		list[i] = names[i];
	gem_err_unknown(err, GEM_EUSAGE, "model", arg, list, n);
	n = strlen(err);
	snprintf(err + n, GEM_ERRMAX - n, " (built-in), or a spec file (gem-model(5))");
	return GEM_EUSAGE;
}

/* The model's name in run.json: the name given, or the file's base name without .json. */
static int model_name_of(const char *arg, char *out, size_t cap, char *err)
{
	const char *b = strrchr(arg, '/');
	size_t len;
	b = b ? b + 1 : arg;
	len = strlen(b);
	if (len > 5 && !strcmp(b + len - 5, ".json"))
		len -= 5;
	if (len >= cap)
		return gem_errf(err, GEM_EUSAGE, "--model %s: a name of at most %zu bytes", arg, cap - 1);
	snprintf(out, cap, "%.*s", (int)len, b);
	return 0;
}

/* The normalisation by group of ds (its training split) into s. */
static int norm_of_data(const struct dataset *ds, struct run_spec *s, char *err)
{
	s->norm_mean = malloc((size_t)ds->groups * sizeof *s->norm_mean);
	s->norm_std = malloc((size_t)ds->groups * sizeof *s->norm_std);
	if (!s->norm_mean || !s->norm_std)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->norm_groups = ds->groups;
	s->norm_scale = ds->images ? 1.0 / 255 : 1;
	dataset_group_stats(ds, s->norm_mean, s->norm_std);
	return 0;
}

/* The data of a new run: found (recorded absolute: workers start elsewhere, and gem-run's
 * other hosts find it by name), its training set checked against m, its statistics taken. */
static int data_of_opts(struct run_opts *o, const struct model *m, const char *model_path,
			struct run_spec *s, char *err)
{
	char abs[PATH_MAX];
	struct dataset ds;
	int rc;
	if (strlen(o->data) >= sizeof s->data_name)
		return gem_errf(err, GEM_EUSAGE, "--data: a name of at most %zu bytes", sizeof s->data_name - 1);
	if (o->label && strlen(o->label) >= sizeof s->data_label)
		return gem_errf(err, GEM_EUSAGE, "--label: a name of at most %zu bytes", sizeof s->data_label - 1);
	if (dataset_resolve(o->data, s->data_dir, sizeof s->data_dir, err) < 0)
		return GEM_EUSAGE;
	if (!dataset_is_spec(s->data_dir) && realpath(s->data_dir, abs))
		snprintf(s->data_dir, sizeof s->data_dir, "%s", abs);
	snprintf(s->data_name, sizeof s->data_name, "%s", o->data);
	snprintf(s->data_label, sizeof s->data_label, "%s", o->label ? o->label : "");
	s->holdout = o->holdout;
	struct data_source src = {.loc = s->data_dir, .label = s->data_label, .holdout = s->holdout,
				  .seed = o->train.seed};
	if ((rc = dataset_open(&src, "train", &ds, err)) < 0)
		return rc;
	if (ds.text && (s->holdout > 0 || s->data_label[0])) {
		dataset_free(&ds);
		o->usage = 1;
		return gem_errf(err, GEM_EUSAGE, "--%s: a text holds out its last tenth already, and has no "
				"label column", s->holdout > 0 ? "holdout" : "label");
	}
	if (run_data_fit(m, &ds, err) < 0) {
		gem_errprefix(err, "%s: ", model_path);
		dataset_free(&ds);
		return GEM_EUSAGE;
	}
	o->nsamples = ds.n;
	dataset_stats(&ds, &s->mean, &s->std);
	if (!(s->std >= 1e-30)) {
		/* run.json's data.std would be out of range: say what it means for the data */
		rc = gem_errf(err, GEM_EUSAGE, "--data %s: the training data is constant (every %s "
			      "the same, a standard deviation of 0): nothing to learn from", o->data,
			      ds.text ? "byte" : "value");
		dataset_free(&ds);
		return rc;
	}
	rc = ds.text ? 0 : norm_of_data(&ds, s, err);
	dataset_free(&ds);
	if (rc < 0)
		return rc;
	/* gem-eval and the end of every gem-run evaluate on the test split: a run without one, or
	 * with one that does not fit the model (its width, its labels), would fail only then */
	if ((rc = dataset_open(&src, "test", &ds, err)) < 0) {
		gem_errprefix(err, "--data %s: ", o->data);
		return rc;
	}
	if (run_data_fit(m, &ds, err) < 0) {
		gem_errprefix(err, "%s: the test split: ", model_path);
		rc = GEM_EUSAGE;
	}
	dataset_free(&ds);
	return rc;
}

/* --model names an external model (gem-exec(7)). */
static int is_exec(const char *model)
{
	return !strncmp(model, EXEC_PREFIX, strlen(EXEC_PREFIX));
}

/* The optimiser o asks for, checked: AdamW without a momentum (it sets the rule's to 0 too),
 * a cosine longer than its warm-up over the run's budget of steps (a worker of the whole
 * training set's: o->nsamples known). */
static int optim_of_opts(struct run_opts *o, char *err)
{
	struct run_train_spec *t = &o->train;
	uint64_t steps = (uint64_t)t->epochs * (((uint64_t)o->nsamples + (uint64_t)t->batch - 1) / (uint64_t)t->batch);
	o->usage = 1;
	if (t->optimizer == OPTIM_ADAMW) {
		if ((o->momentum_set && t->momentum != 0) || t->nesterov)
			return gem_errf(err, GEM_EUSAGE, "--%s: AdamW takes none (its betas are its momentum)",
					t->nesterov ? "nesterov" : "momentum");
		t->momentum = 0;
	}
	if (t->micro > t->batch)
		return gem_errf(err, GEM_EUSAGE, "--microbatches %d: more than the batch (%d)", t->micro, t->batch);
	if (t->micro > 1 && is_exec(o->model))
		return gem_errf(err, GEM_EUSAGE, "--microbatches: an external model cuts its batches itself");
	if (o->nsamples && t->schedule == LR_COSINE && steps <= t->warmup)
		return gem_errf(err, GEM_EUSAGE, "--warmup %llu: the cosine needs a longer budget than "
				"%llu steps (--epochs %d of %d samples in batches of %d)",
				(unsigned long long)t->warmup, (unsigned long long)steps, t->epochs, o->nsamples,
				t->batch);
	o->usage = 0;
	return 0;
}

/* The model of an external model's run (gem-exec(7)) and its data: the child's own, which
 * its record names (DATA_MODEL_PREFIX), its budget's samples the child's. */
static int exec_of_opts(struct run_opts *o, struct run_spec *s, struct model **m, char *err)
{
	const struct exec_info *e;
	int rc;
	o->usage = 1;
	if (o->data_set || o->label || o->holdout > 0)
		return gem_errf(err, GEM_EUSAGE, "--%s: an external model brings its own data and its test "
				"split (gem-exec(7))", o->data_set ? "data" : o->label ? "label" : "holdout");
	o->usage = 0;
	if ((rc = model_from_exec(o->model + strlen(EXEC_PREFIX), o->exec_timeout, &s->model, m, err)) < 0)
		return rc;
	e = model_exec_info(*m);
	snprintf(s->model_name, sizeof s->model_name, "%s", e->name);
	snprintf(s->data_name, sizeof s->data_name, "%strain=%llu,test=%llu", DATA_MODEL_PREFIX,
		 (unsigned long long)e->train, (unsigned long long)e->test);
	if (e->positions)
		snprintf(s->data_name + strlen(s->data_name), sizeof s->data_name - strlen(s->data_name),
			 ",positions=%d", e->positions);
	snprintf(s->data_dir, sizeof s->data_dir, "%s", s->data_name);
	s->mean = 0;
	s->std = 1;
	o->nsamples = e->positions ? (int)((e->train - 1) / (uint64_t)e->positions) : (int)e->train;
	return 0;
}

int run_make_new(const char *dir, struct run_opts *o, struct run_spec *spec, char *err)
{
	char path[4096];
	struct model *m = NULL;
	int rc;

	memset(spec, 0, sizeof *spec);
	o->usage = 0;
	o->nsamples = 0;
	/* the optimiser is checked before the rule takes its momentum (AdamW's 0), and again once
	 * the data gives the budget of its cosine */
	if ((rc = optim_of_opts(o, err)) < 0 || (rc = rule_of_opts(o, &spec->rule, err)) < 0)
		return rc;
	if (is_exec(o->model)) {
		if ((rc = exec_of_opts(o, spec, &m, err)) == 0 && (rc = optim_of_opts(o, err)) == 0) {
			spec->train = o->train;
			rc = make_with(dir, spec, m, o->init_from, o->force ? RUN_MAKE_FORCE : 0, err);
		}
		model_free(m);
		return rc;
	}
	if (resolve_model(o->model, path, sizeof path, err) < 0 ||
	    model_from_file(path, &spec->model, &m, err) < 0)
		return GEM_EUSAGE;
	if ((rc = model_name_of(o->model, spec->model_name, sizeof spec->model_name, err)) < 0) {
		model_free(m);
		return rc;
	}
	if ((rc = data_of_opts(o, m, path, spec, err)) == 0 && (rc = optim_of_opts(o, err)) == 0) {
		spec->train = o->train;
		rc = make_with(dir, spec, m, o->init_from, o->force ? RUN_MAKE_FORCE : 0, err);
	}
	model_free(m);
	return rc;
}
