/* gem-eval: evaluate a run's parameters on its test set; TSV (or JSON lines) on stdout. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "data.h"
#include "err.h"
#include "eval.h"
#include "log.h"
#include "model.h"
#include "run.h"

static const char usage_line[] = "usage: gem-eval [options] (RUNDIR | PARAMS_FILE)";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Evaluate parameters on the run's test set; print TSV under a '#' header line:\n"
	      "elapsed seconds, version (central updates), samples seen, test loss, test accuracy.\n"
	      "\n"
	      "  -r, --run RUNDIR     the run a PARAMS_FILE belongs to (default: the file's directory)\n"
	      "  -d, --data NAME|DIR  evaluate on this dataset's test split instead of the run's\n"
	      "  -j, --json           print one JSON object instead of TSV\n"
	      "  -h, --help           show this help\n"
	      "  -V, --version        show the version\n",
	      f);
}

static const struct option longopts[] = {
	{"run", required_argument, 0, 'r'}, {"data", required_argument, 0, 'd'},
	{"json", no_argument, 0, 'j'},      {"help", no_argument, 0, 'h'},
	{"version", no_argument, 0, 'V'},   {0, 0, 0, 0},
};

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(int argc, char **argv)
{
	const char *rundir = NULL, *data = NULL, *params = NULL;
	char err[GEM_ERRMAX], dirbuf[PATH_MAX], datadir[PATH_MAX];
	int c, json = 0, rc = EXIT_JOB;
	struct run run;
	struct model *m = NULL;
	struct dataset ds;
	struct run_progress p;
	struct eval_result res;

	log_init("gem-eval");
	while ((c = getopt_long(argc, argv, "r:d:jhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': rundir = optarg; break;
		case 'd': data = optarg; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': cli_print_version("gem-eval"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "gem-eval: %s\n%s\n", optind == argc ? "nothing to evaluate" : "too many arguments",
			usage_line);
		return EXIT_USAGE;
	}
	if (is_dir(argv[optind])) {
		if (!rundir)
			rundir = argv[optind];
	} else {
		params = argv[optind];
		if (!rundir) {
			const char *slash = strrchr(params, '/');
			snprintf(dirbuf, sizeof dirbuf, "%.*s", slash ? (int)(slash - params) : 1,
				 slash ? params : ".");
			rundir = dirbuf;
		}
	}
	cli_blas_init();
	if (run_open(rundir, &run, err) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		return EXIT_USAGE;
	}
	if (data) {
		if (dataset_resolve(data, datadir, sizeof datadir, err) < 0) {
			fprintf(stderr, "gem-eval: %s\n", err);
			run_close(&run);
			return EXIT_USAGE;
		}
	} else {
		snprintf(datadir, sizeof datadir, "%s", run.data_dir);
	}
	if (model_from_json(run.model, &m, err) < 0 ||
	    run_params_load(&run, params, model_params(m), model_nparams(m), &p, err) < 0 ||
	    dataset_load(datadir, "test", &ds, err) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		goto out;
	}
	if (eval_dataset(m, &ds, run.mean, run.std, &res, err) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		dataset_free(&ds);
		goto out;
	}
	if (json)
		printf("{\"elapsed\":%.3f,\"version\":%llu,\"samples\":%llu,\"test_loss\":%.6f,"
		       "\"test_acc\":%.4f}\n",
		       p.elapsed, (unsigned long long)p.version, (unsigned long long)p.samples, res.loss,
		       res.accuracy);
	else
		printf("# elapsed\tversion\tsamples\ttest_loss\ttest_acc\n%.3f\t%llu\t%llu\t%.6f\t%.4f\n",
		       p.elapsed, (unsigned long long)p.version, (unsigned long long)p.samples, res.loss,
		       res.accuracy);
	rc = 0;
	dataset_free(&ds);
out:
	model_free(m);
	run_close(&run);
	return rc;
}
