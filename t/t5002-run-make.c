/* t5002: run_make, the one maker of a run. The spec goes to run.json and back unchanged; θ₀ is
 * the model's initialisation from the seed; an existing run is refused, or replaced with every
 * file it left; a run in use is refused; a make that fails midway leaves no run.json, so no
 * half-made run is ever taken for one. And the options of a new run, as gem-init and gem-sim
 * take them. */
#include "base/err.h"
#include "nn/model.h"
#include "run/run.h"
#include "run/spec.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char model_json[] =
	"{\"name\":\"tiny\",\"input\":[64],\"classes\":4,\"layers\":[{\"type\":\"dense\",\"out\":16},"
	"{\"type\":\"relu\"},{\"type\":\"dense\",\"out\":4},{\"type\":\"logsoftmax\"}]}";

static void spec_init(struct run_spec *s, const char *rule)
{
	char err[GEM_ERRMAX];
	memset(s, 0, sizeof *s);
	snprintf(s->model_name, sizeof s->model_name, "tiny");
	snprintf(s->data_name, sizeof s->data_name, "tinydata");
	snprintf(s->data_dir, sizeof s->data_dir, "/nonexistent");
	s->model = json_loads(model_json, 0, NULL);
	s->mean = 0.25;
	s->std = 0.3;
	s->train = (struct run_train_spec){.lr = 0.1, .momentum = 0.9, .batch = 32, .epochs = 2,
					   .seed = 7};
	if (rule_config_default(rule, &s->rule, err) < 0)
		diag("%s", err);
	s->rule.lr = 0.1f;
	s->rule.nworkers = 2;
}

static int exists(const char *dir, const char *name)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
	char path[PATH_MAX + 32];
	FILE *f;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if ((f = fopen(path, "w")))
		fclose(f);
}

/* θ₀ of the run in dir is the model's initialisation from seed. */
static int theta0_is(const char *dir, uint64_t seed)
{
	char err[GEM_ERRMAX];
	struct run r;
	struct model *m;
	struct run_progress p;
	float *theta;
	int same = 0;
	if (run_open(dir, &r, err) < 0 || model_from_json(r.spec.model, &m, err) < 0)
		return 0;
	theta = malloc(sizeof *theta * model_nparams(m));
	model_init_params(m, seed);
	if (theta && run_params_load(&r, NULL, theta, model_nparams(m), &p, err) == 0)
		same = !memcmp(theta, model_params(m), sizeof *theta * model_nparams(m)) && p.version == 0;
	free(theta);
	model_free(m);
	run_close(&r);
	return same;
}

static void test_spec_json(void)
{
	char err[GEM_ERRMAX];
	struct run_spec s, back;
	json_t *j, *j2;
	spec_init(&s, "gem");
	snprintf(s.created, sizeof s.created, "2026-01-02T03:04:05Z");
	s.nparams = 1108;
	s.train.nesterov = 1;
	s.train.micro = 2;
	j = run_spec_to_json(&s);
	ok(j && run_spec_from_json(j, &back, err) == 0, "run.json of a spec reads back (%s)",
	   j ? "" : err);
	ok(!strcmp(back.created, s.created) && !strcmp(back.model_name, "tiny") &&
		   !strcmp(back.data_dir, "/nonexistent") && back.mean == s.mean && back.std == s.std &&
		   !memcmp(&back.train, &s.train, sizeof s.train) && back.nparams == 1108 &&
		   !strcmp(back.rule.name, "gem") && back.rule.nworkers == 2 &&
		   json_equal(back.model, s.model) && !back.part_data,
	   "every field as written");
	j2 = run_spec_to_json(&back);
	ok(j2 && json_equal(j, j2), "written again: the same run.json");
	json_object_del(json_object_get(j2, "train"), "lr");
	run_spec_free(&back);
	ok(run_spec_from_json(j2, &back, err) == GEM_EUSAGE && strstr(err, "train.lr"),
	   "a field missing is named: %s", err);
	run_spec_free(&back);
	json_object_set_new(json_object_get(j2, "train"), "lr", json_real(1e9));
	ok(run_spec_from_json(j2, &back, err) == GEM_EUSAGE && strstr(err, "train.lr: a number in"),
	   "a field out of range is named: %s", err);
	run_spec_free(&back);
	json_decref(j);
	json_decref(j2);
	run_spec_free(&s);
}

static void test_make(const char *dir)
{
	char err[GEM_ERRMAX], sub[PATH_MAX + 32];
	struct run_spec s;
	struct run r;
	spec_init(&s, "sync");
	ok(run_make(dir, &s, 0, err) == 0, "a run made (%s)", err);
	ok(exists(dir, RUN_JSON) && exists(dir, RUN_PARAMS) && s.nparams == 64 * 16 + 16 + 16 * 4 + 4 &&
		   strlen(s.created) == 20,
	   "run.json and params.gem; %zu parameters; created %s", s.nparams, s.created);
	ok(theta0_is(dir, 7), "θ₀ is the model's initialisation from the seed");
	ok(run_make(dir, &s, 0, err) == GEM_EUSAGE && strstr(err, "a run exists there already"),
	   "an existing run is refused: %s", err);
	touch(dir, RUN_LOG);
	snprintf(sub, sizeof sub, "%s/slice-0-of-2", dir);
	mkdir(sub, 0777);
	touch(sub, RUN_PARAMS);
	s.train.seed = 8;
	ok(run_make(dir, &s, RUN_MAKE_FORCE, err) == 0 && !exists(dir, RUN_LOG) && access(sub, F_OK) < 0,
	   "replaced with --force: the old run's log and slices are gone (%s)", err);
	ok(theta0_is(dir, 8), "θ₀ of the new seed");

	ok(run_open(dir, &r, err) == 0 && run_lock(&r, err) == 0, "the run taken by a trainer");
	ok(run_make(dir, &s, RUN_MAKE_FORCE, err) == GEM_EUSAGE && strstr(err, "in use by pid"),
	   "a run in use is not replaced: %s", err);
	ok(exists(dir, RUN_JSON) && theta0_is(dir, 8), "and it is left as it was");
	run_close(&r);

	/* a directory in params.gem's place: the old run's files cannot all be removed, nor θ₀
	 * written */
	snprintf(sub, sizeof sub, "%s/%s", dir, RUN_PARAMS);
	unlink(sub);
	mkdir(sub, 0777);
	ok(run_make(dir, &s, RUN_MAKE_FORCE, err) < 0 && !exists(dir, RUN_JSON),
	   "a replacement that fails midway leaves no run.json (%s)", err);
	ok(run_open(dir, &r, err) == GEM_EUSAGE && strstr(err, "not a run"),
	   "so the directory is not a run: %s", err);
	ok(run_make(dir, &s, 0, err) < 0 && strstr(err, RUN_PARAMS) && !exists(dir, RUN_JSON),
	   "a new run whose θ₀ cannot be written: no run.json either (%s)", err);
	rmdir(sub);
	run_spec_free(&s);

	/* a spec run_open would refuse is not made: the training set of a single pixel value */
	spec_init(&s, "gem");
	s.std = 0;
	snprintf(sub, sizeof sub, "%s-flat", dir);
	ok(run_make(sub, &s, 0, err) == GEM_EUSAGE && strstr(err, "run.json: data.std") &&
		   access(sub, F_OK) < 0,
	   "a spec run_open would refuse is not made: %s", err);
	run_spec_free(&s);
}

static void test_opts(void)
{
	char err[GEM_ERRMAX];
	struct run_opts o;
	int value;
	run_opts_init(&o);
	ok(!strcmp(o.model, "cnn") && !strcmp(o.rule, "gem") && o.train.lr == 0.05 &&
		   o.train.batch == 64 && o.train.seed == 1, "gem-init's defaults");
	ok(run_opts_match("--lr", &value) >= 0 && value, "--lr takes the next argument");
	ok(run_opts_match("--lr=0.1", &value) >= 0 && !value, "--lr=0.1 does not");
	ok(run_opts_match("-mcnn", &value) == 'm' && !value &&
		   run_opts_match("-m", &value) == 'm' && value,
	   "-mcnn, -m cnn");
	ok(run_opts_match("--workers", &value) == 'n' && run_opts_match("--nesterov", &value) >= 0 && !value,
	   "--workers is -n; --nesterov takes no value");
	ok(run_opts_match("--steps", &value) == -1 && run_opts_match("--lrx", &value) == -1 &&
		   run_opts_match("run", &value) == -1, "no other option, no abbreviation, no argument");
	ok(run_opts_take(&o, run_opts_match("--lr", &value), "0.2", err) == 0 && o.train.lr == 0.2,
	   "--lr 0.2");
	ok(run_opts_take(&o, run_opts_match("--weight-decay", &value), "-1", err) == GEM_EUSAGE &&
		   !strcmp(err, "--weight-decay: not a number >= 0: -1"), "%s", err);
	ok(run_opts_take(&o, 'b', "65537", err) == GEM_EUSAGE &&
		   !strcmp(err, "--batch: not an integer in [1, 65536]: 65537"), "%s", err);
	ok(run_opts_take(&o, 's', "9223372036854775808", err) == GEM_EUSAGE, "--seed beyond 2^63");
	ok(run_opts_take(&o, 'q', NULL, err) == 1, "-q is no option of a run");
}

int main(void)
{
	char dir[] = "/tmp/gem-t5002.XXXXXX", sub[64];
	if (!mkdtemp(dir)) {
		diag("mkdtemp failed");
		return 1;
	}
	test_spec_json();
	snprintf(sub, sizeof sub, "%s/a/b", dir);
	test_make(sub);
	test_opts();
	snprintf(sub, sizeof sub, "rm -rf %s", dir);
	if (system(sub) != 0)
		diag("%s failed", sub);
	return done_testing();
}
