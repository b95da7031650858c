/* t5601: the file gem-export writes, read back with safetensors_load (what gem-init --init-from
 * is to call) into θ for the run's layout, is the run's θ bit for bit, for a run trained
 * locally and for a sliced run; the same file for a model of other shapes is refused with
 * each mismatch named. The programs run from $GEM_BIN on a data set of gem-arrays.py. */
#include "base/err.h"
#include "nn/model.h"
#include "nn/safetensors.h"
#include "run/run.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[512];

/* Run the shell commands in dir, gem's programs first in PATH. */
static int sh(const char *commands)
{
	char cmd[4096];
	const char *bin = getenv("GEM_BIN");
	snprintf(cmd, sizeof cmd, "cd '%s' && PATH='%s':\"$PATH\" && %s", dir, bin ? bin : "bin",
		 commands);
	return system(cmd);
}

/* RUNDIR's θ and the one read back from FILE, equal bit for bit. */
static void same_theta(const char *run, const char *file, const char *title)
{
	char err[GEM_ERRMAX] = "", path[1200];
	struct run r;
	struct model *m = NULL;
	struct run_progress p;
	float *a = NULL, *b = NULL;
	size_t n = 0;
	int rc;
	snprintf(path, sizeof path, "%s/%s", dir, run);
	rc = run_open(path, &r, err);
	if (rc == 0 && (rc = model_from_json(r.spec.model, &m, err)) == 0) {
		n = model_nparams(m);
		a = malloc(n * sizeof *a);
		b = malloc(n * sizeof *b);
		snprintf(path, sizeof path, "%s/%s", dir, file);
		rc = run_params_load_merged(&r, a, n, &p, err);
		if (rc == 0)
			rc = safetensors_load(path, model_layout(m), b, NULL, err);
	}
	ok(rc == 0 && n > 0 && !memcmp(a, b, n * sizeof *a), "%s: %zu floats, bit for bit (%s)", title, n, err);
	free(a);
	free(b);
	model_free(m);
	if (r.json)
		run_close(&r);
}

int main(void)
{
	static const char spec[] = "{\"input\":[16],\"classes\":5,\"layers\":[{\"type\":\"dense\",\"out\":8},"
				   "{\"type\":\"relu\"},{\"type\":\"dense\",\"out\":5},{\"type\":\"logsoftmax\"}]}";
	char err[GEM_ERRMAX] = "", path[1200];
	const char *src = getenv("GEM_SRC");
	json_t *other = json_loads(spec, 0, NULL);
	struct model *m = NULL;
	float theta[16 * 9 + 9 + 9 * 5 + 5];
	FILE *f;

	snprintf(dir, sizeof dir, "%s/gem-t5601.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		skip_all("cannot make a temporary directory");
	snprintf(path, sizeof path, "%s/spec.json", dir);
	if (!(f = fopen(path, "w")) || fputs(spec, f) < 0 || fclose(f) != 0)
		skip_all("cannot write the spec");
	snprintf(path, sizeof path, "python3 '%s/t/gem-arrays.py' idx data", src ? src : ".");
	if (sh(path))
		skip_all("t/gem-arrays.py failed (python3 missing?)");
	/* a run needs a test split: the training files serve as one */
	if (sh("cp -r data/notest run-data && cp run-data/train-images-idx3-ubyte "
	       "run-data/t10k-images-idx3-ubyte && cp run-data/train-labels-idx1-ubyte "
	       "run-data/t10k-labels-idx1-ubyte"))
		skip_all("cannot copy the data");
	ok(sh("gem-init -q --model spec.json --data run-data --batch 4 --seed 3 run && "
	      "gem-work -q --local run --steps 10 && gem-export -q run >run.safetensors") == 0,
	   "a run trained 10 steps, exported");
	same_theta("run", "run.safetensors", "read back: the run's θ");
	ok(sh("gem-init -q --model spec.json --data run-data --batch 2 --workers 2 sliced && "
	      "gem-sim -q -n 2 --steps 4 --slices 2 sliced >/dev/null && "
	      "gem-export -q sliced >sliced.safetensors") == 0,
	   "a sliced run (gem-sim --slices 2), exported");
	same_theta("sliced", "sliced.safetensors", "read back: the slices' θ merged");

	json_integer_set(json_object_get(json_array_get(json_object_get(other, "layers"), 0), "out"), 9);
	snprintf(path, sizeof path, "%s/run.safetensors", dir);
	ok(model_from_json(other, &m, err) == 0 &&
		   safetensors_load(path, model_layout(m), theta, NULL, err) == GEM_EUSAGE &&
		   strstr(err, "0.weight: shape [8, 16] in the file, [9, 16] in the model") &&
		   strstr(err, "0.bias: shape [8] in the file, [9] in the model") &&
		   strstr(err, "2.weight: shape [5, 8] in the file, [5, 9] in the model"),
	   "a model of 9 hidden units: each tensor that differs is named (%s)", err);
	model_free(m);
	json_decref(other);
	sh("rm -rf \"$PWD\"");
	return done_testing();
}
