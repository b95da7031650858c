/* gem-init: make a run directory: model, data, rule, hyper-parameters, initial θ. */
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/num.h"
#include "base/prog.h"
#include "nn/data.h"
#include "base/err.h"
#include "base/log.h"
#include "nn/model.h"
#include "rules/rule.h"
#include "run/run.h"

static const char usage_line[] = "usage: gem-init [options] RUNDIR";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Make a training run: model, data, update rule, hyper-parameters, initial\n"
	      "parameters.\n"
	      "\n"
	      "  -m, --model NAME|FILE   built-in model NAME (cnn, mlp) or a spec FILE (see\n"
	      "                          gem-model(5)); default cnn\n"
	      "  -d, --data NAME|DIR     IDX dataset; default fashion-mnist\n"
	      "  -r, --rule NAME         update rule for gem-serve: gem downpour dynsgd easgd\n"
	      "                          dcasgd sync dma; default gem\n"
	      "      --lr X              learning rate η; default 0.05\n"
	      "      --momentum X        momentum μ; default 0.9\n"
	      "      --nesterov          Nesterov momentum (local training)\n"
	      "      --weight-decay X    L2 weight decay; default 0\n"
	      "  -b, --batch N           minibatch size; default 64\n"
	      "  -e, --epochs N          budget: epochs per worker; default 1\n"
	      "  -s, --seed N            seed of initialisation and data order; default 1\n"
	      "      --kappa X           gem: κ; default 1\n"
	      "      --pi-max X          gem: π_max; default 5\n"
	      "      --eps X             gem: ε; default 1e-12\n"
	      "      --gem-ref pull|commit  gem: s_w is theta before the worker's last commit\n"
	      "                          was applied, eps inside |dtheta + eps| (the authors'\n"
	      "                          code), or theta after it; default commit\n"
	      "      --window N          downpour, easgd: λ local steps per commit; default 1\n"
	      "                          (easgd 10); dma: β local steps per cycle, default 4\n"
	      "      --alpha X           easgd: α; default 0.9/workers\n"
	      "      --lambda-dc X       dcasgd: λ; default 0.04\n"
	      "  -n, --workers N         workers the run expects (sync and dma wait for that\n"
	      "                          many; easgd's α; gem-serve ends the run once they\n"
	      "                          came); default 1\n"
	      "  -f, --force             replace an existing run (not one in use) and remove\n"
	      "                          its files\n"
	      "  -q, --quiet             print nothing on success\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n",
	      f);
}

static void bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "gem-init: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s\n", usage_line);
	exit(EXIT_USAGE);
}

enum { O_LR = 256, O_MOM, O_NEST, O_WD, O_KAPPA, O_PIMAX, O_EPS, O_GEMREF, O_WINDOW, O_ALPHA, O_LDC };

static const struct option longopts[] = {
	{"model", required_argument, 0, 'm'},   {"data", required_argument, 0, 'd'},
	{"rule", required_argument, 0, 'r'},    {"lr", required_argument, 0, O_LR},
	{"momentum", required_argument, 0, O_MOM}, {"nesterov", no_argument, 0, O_NEST},
	{"weight-decay", required_argument, 0, O_WD}, {"batch", required_argument, 0, 'b'},
	{"epochs", required_argument, 0, 'e'},  {"seed", required_argument, 0, 's'},
	{"kappa", required_argument, 0, O_KAPPA}, {"pi-max", required_argument, 0, O_PIMAX},
	{"eps", required_argument, 0, O_EPS},   {"gem-ref", required_argument, 0, O_GEMREF},
	{"window", required_argument, 0, O_WINDOW},
	{"alpha", required_argument, 0, O_ALPHA}, {"lambda-dc", required_argument, 0, O_LDC},
	{"workers", required_argument, 0, 'n'}, {"force", no_argument, 0, 'f'},
	{"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
	{"version", no_argument, 0, 'V'},       {0, 0, 0, 0},
};

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
	if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
		return gem_errf(err, GEM_EUSAGE, "--model %s: a directory, not a model spec (a JSON file, "
				"see gem-model(5)) nor a built-in model", arg);
	if (stat(arg, &st) == 0) {
		snprintf(path, cap, "%s", arg);
		return 0;
	}
	if (strchr(arg, '/'))
		return gem_errf(err, GEM_EUSAGE, "--model %s: no such file", arg);
	n = builtin_models(names, 64);
	for (size_t i = 0; i < n; i++)
		list[i] = names[i];
	gem_err_unknown(err, GEM_EUSAGE, "model", arg, list, n);
	n = strlen(err);
	snprintf(err + n, GEM_ERRMAX - n, " (built-in), or a spec file (gem-model(5))");
	return GEM_EUSAGE;
}

int main(int argc, char **argv)
{
	const char *model_arg = "cnn", *data_arg = "fashion-mnist", *rule_name = "gem";
	char err[GEM_ERRMAX], model_path[4096], data_dir[4096], base[300];
	struct run_train tr = {.batch = 64, .epochs = 1, .seed = 1};
	double lr = 0.05, momentum = 0.9, wd = 0;
	struct rule_config rc;
	/* rule options are applied after --rule is known, in the order given */
	struct { int opt; const char *arg; } ruleopts[32];
	int nruleopts = 0, force = 0, quiet = 0, c, rc_create, nsamples = 0, status;
	long v;
	json_t *spec = NULL, *runjson = NULL, *rulejson = NULL;
	struct model *m = NULL;
	struct dataset ds;
	struct run run;
	double mean, std;
	time_t now;
	char created[32];

	if (log_init("gem-init", err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		return EXIT_USAGE;
	}
	while ((c = getopt_long(argc, argv, "m:d:r:b:e:s:n:fqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': model_arg = optarg; break;
		case 'd': data_arg = optarg; break;
		case 'r': rule_name = optarg; break;
		case O_LR:
			if (num_double(optarg, 1e-12, 1e6, &lr))
				bad_usage("--lr: not a positive number: %s", optarg);
			break;
		case O_MOM:
			if (num_double(optarg, 0, 0.999999, &momentum))
				bad_usage("--momentum: not in [0, 1): %s", optarg);
			break;
		case O_NEST: tr.nesterov = 1; break;
		case O_WD:
			if (num_double(optarg, 0, 1e6, &wd))
				bad_usage("--weight-decay: not a number >= 0: %s", optarg);
			break;
		case 'b':
			if (num_long(optarg, 1, 1 << 16, &v))
				bad_usage("--batch: not an integer in [1, 65536]: %s", optarg);
			tr.batch = (int)v;
			break;
		case 'e':
			if (num_long(optarg, 1, 1 << 20, &v))
				bad_usage("--epochs: not a positive integer: %s", optarg);
			tr.epochs = (int)v;
			break;
		case 's':
			if (num_u64(optarg, &tr.seed) || tr.seed > INT64_MAX)
				bad_usage("--seed: not an integer in [0, 2^63): %s", optarg);
			break;
		case O_KAPPA: case O_PIMAX: case O_EPS: case O_GEMREF: case O_WINDOW: case O_ALPHA: case O_LDC: case 'n':
			if (nruleopts == (int)(sizeof ruleopts / sizeof *ruleopts))
				bad_usage("too many rule options%s", "");
			ruleopts[nruleopts].opt = c;
			ruleopts[nruleopts++].arg = optarg;
			break;
		case 'f': force = 1; break;
		case 'q': quiet = 1; log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-init"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "gem-init: %s\n%s\n", optind == argc ? "no RUNDIR given" : "too many arguments",
			usage_line);
		return EXIT_USAGE;
	}
	if (rule_config_default(rule_name, &rc, err) < 0) {
		fprintf(stderr, "gem-init: --rule: %s\n", err);
		return EXIT_USAGE;
	}
	tr.lr = (float)lr;
	tr.momentum = (float)momentum;
	tr.weight_decay = (float)wd;
	rc.lr = tr.lr;
	rc.momentum = tr.momentum;
	for (int i = 0; i < nruleopts; i++) {
		const char *a = ruleopts[i].arg;
		switch (ruleopts[i].opt) {
		case O_KAPPA:
			if (num_float(a, 0, 1e6, &rc.kappa)) bad_usage("--kappa: not a number >= 0: %s", a);
			break;
		case O_PIMAX:
			if (num_float(a, 0, 1e6, &rc.pi_max)) bad_usage("--pi-max: not a number >= 0: %s", a);
			break;
		case O_EPS:
			if (num_float(a, 0, 1, &rc.eps)) bad_usage("--eps: not in [0, 1]: %s", a);
			break;
		case O_GEMREF:
			if ((rc.gem_ref = rule_gem_ref_parse(a)) < 0)
				bad_usage("--gem-ref: not pull or commit: %s", a);
			break;
		case O_WINDOW:
			if (num_long(a, 1, 1 << 20, &v)) bad_usage("--window: not a positive integer: %s", a);
			rc.window = (int)v;
			break;
		case O_ALPHA:
			if (num_float(a, 0, 1, &rc.alpha)) bad_usage("--alpha: not in [0, 1]: %s", a);
			break;
		case O_LDC:
			if (num_float(a, 0, 1e6, &rc.lambda_dc)) bad_usage("--lambda-dc: not a number >= 0: %s", a);
			break;
		case 'n':
			if (num_long(a, 1, 4096, &v)) bad_usage("--workers: not an integer in [1, 4096]: %s", a);
			rc.nworkers = (int)v;
			break;
		}
	}

	if (rule_config_check(&rc, err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		return EXIT_USAGE;
	}
	if (!(rulejson = rule_config_to_json(&rc))) {
		fprintf(stderr, "gem-init: out of memory\n");
		return EXIT_JOB;
	}
	for (int i = 0; i < nruleopts; i++) {
		const struct option *lo = longopts;
		const char *key;
		while (lo->name && lo->val != ruleopts[i].opt)
			lo++;
		key = ruleopts[i].opt == 'n' ? "nworkers" : !strcmp(lo->name, "pi-max") ? "pi_max"
			: !strcmp(lo->name, "lambda-dc") ? "lambda_dc"
			: !strcmp(lo->name, "gem-ref") ? "gem_ref" : lo->name;
		if (!json_object_get(rulejson, key)) {
			fprintf(stderr, "gem-init: --%s: rule %s does not use it\n%s\n", lo->name, rc.name,
				usage_line);
			json_decref(rulejson);
			return EXIT_USAGE;
		}
	}
	prog_blas_init();
	status = EXIT_USAGE;
	if (resolve_model(model_arg, model_path, sizeof model_path, err) < 0 ||
	    model_from_file(model_path, &spec, &m, err) < 0 ||
	    dataset_resolve(data_arg, data_dir, sizeof data_dir, err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		goto out;
	}
	{
		/* recorded absolute: workers start elsewhere (gem-run, other hosts find it by name) */
		char abs[PATH_MAX];
		if (realpath(data_dir, abs))
			snprintf(data_dir, sizeof data_dir, "%s", abs);
	}
	if (dataset_load(data_dir, "train", &ds, err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		status = EXIT_JOB;
		goto out;
	}
	nsamples = ds.n;
	if (model_fits(m, &ds, err) < 0) {
		fprintf(stderr, "gem-init: %s: %s\n", model_path, err);
		dataset_free(&ds);
		goto out;
	}
	dataset_stats(&ds, &mean, &std);
	dataset_free(&ds);

	/* the model's name: the name given, or the file's base name without .json */
	{
		const char *b = strrchr(model_arg, '/');
		snprintf(base, sizeof base, "%s", b ? b + 1 : model_arg);
		char *dot = strrchr(base, '.');
		if (dot && !strcmp(dot, ".json"))
			*dot = 0;
	}
	now = time(NULL);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	status = EXIT_JOB;
	runjson = json_pack("{s:i, s:s, s:s, s:O, s:{s:s, s:s, s:f, s:f}, s:{s:f, s:f, s:b, s:f, s:i, s:i, s:I},"
			    " s:o, s:I}",
			    "gem_run", RUN_FORMAT, "created", created, "model_name", base, "model", spec,
			    "data", "name", data_arg, "dir", data_dir, "mean", mean, "std", std,
			    "train", "lr", lr, "momentum", momentum, "nesterov",
			    tr.nesterov, "weight_decay", wd, "batch", tr.batch,
			    "epochs", tr.epochs, "seed", (json_int_t)tr.seed, "rule", rulejson, "nparams",
			    (json_int_t)model_nparams(m));
	rulejson = NULL; /* taken by json_pack, also when it fails */
	if (!runjson) {
		fprintf(stderr, "gem-init: cannot build run.json\n");
		goto out;
	}
	if ((rc_create = run_create(argv[optind], runjson, force, err)) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		status = prog_exit(rc_create);
		goto out;
	}
	if (run_open(argv[optind], &run, err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		goto out;
	}
	if ((rc_create = run_lock(&run, err)) < 0 || (rc_create = run_params_init(&run, err)) < 0) {
		status = prog_exit(rc_create);
		fprintf(stderr, "gem-init: %s\n", err);
		run_close(&run);
		goto out;
	}
	if (!quiet)
		printf("%s: model %s (%zu parameters), data %s (%d samples, mean %.4f, std %.4f), rule %s\n",
		       run.dir, base, model_nparams(m), data_dir, nsamples, mean, std, rc.name);
	run_close(&run);
	status = 0;
out:
	json_decref(rulejson);
	json_decref(runjson);
	json_decref(spec);
	model_free(m);
	return status;
}
