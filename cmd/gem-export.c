/* gem-export: write a run's θ as a safetensors file (or a stored .npz) on stdout or to a file,
 * for fine-tuning or inference with other tools. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/prog.h"
#include "nn/data.h"
#include "report/export.h"
#include "run/run.h"

static const char usage_line[] = "usage: gem-export [options] RUNDIR";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Write the run's parameters θ (a sliced run's slices merged) on standard output:\n"
	      "a safetensors file whose tensors are named and shaped as the model's layers\n"
	      "(\"0.weight\", \"0.bias\", ...), with the model spec and the input normalisation in\n"
	      "its metadata.\n"
	      "\n"
	      "      --format F          safetensors (default) or npz: a zip of one .npy file\n"
	      "                          per tensor, stored, without metadata\n"
	      "      --params FILE       export this parameter file of the run instead (a saved\n"
	      "                          copy of params.gem, an SGP node's node-I.gem)\n"
	      "      --held-out          print instead the held-out samples of a run made with\n"
	      "                          --holdout: their indices among the training samples,\n"
	      "                          from 0, one a line (a CSV table's data rows, an\n"
	      "                          array's first axis)\n"
	      "  -o, --output FILE       write FILE (atomically) instead of standard output\n"
	      "  -q, --quiet             no informational messages on stderr\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n",
	      f);
}

enum { O_FORMAT = 256, O_PARAMS, O_HELD_OUT };

static const struct option longopts[] = {
	{"format", required_argument, 0, O_FORMAT}, {"params", required_argument, 0, O_PARAMS},
	{"output", required_argument, 0, 'o'},      {"held-out", no_argument, 0, O_HELD_OUT},
	{"quiet", no_argument, 0, 'q'},             {"help", no_argument, 0, 'h'},
	{"version", no_argument, 0, 'V'},           {0, 0, 0, 0},
};

static int bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "gem-export: %s%s\n%s\n", what, arg, usage_line);
	return EXIT_USAGE;
}

/* Every buffer of x to stdout; -1 (errno set) on a write error. */
static int write_stdout(const struct export_file *x)
{
	for (int i = 0; i < x->niov; i++)
		if (fwrite(x->iov[i].iov_base, 1, x->iov[i].iov_len, stdout) != x->iov[i].iov_len)
			return -1;
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

/* --held-out: the indices of the run's held-out training samples, one a line. */
static int held_out(const struct run *r, const char *output)
{
	char err[GEM_ERRMAX];
	struct data_source src;
	uint32_t *rows;
	size_t k;
	int rc;
	FILE *f = stdout;
	run_data_source(r, NULL, &src);
	if ((rc = dataset_holdout_rows(&src, &rows, &k, err)) < 0) {
		fprintf(stderr, "gem-export: %s: %s\n", r->dir, err);
		return prog_exit(rc);
	}
	if (output && !(f = fopen(output, "w"))) {
		fprintf(stderr, "gem-export: %s: %s\n", output, strerror(errno));
		free(rows);
		return EXIT_JOB;
	}
	for (size_t i = 0; i < k; i++)
		fprintf(f, "%u\n", rows[i]);
	free(rows);
	if (fflush(f) != 0 || ferror(f) || (output && fclose(f) != 0)) {
		fprintf(stderr, "gem-export: %s: write error\n", output ? output : "standard output");
		return EXIT_JOB;
	}
	log_info("%zu held-out samples of %s", k, src.loc);
	return 0;
}

int main(int argc, char **argv)
{
	enum export_format format = EXPORT_SAFETENSORS;
	const char *output = NULL, *params = NULL;
	char err[GEM_ERRMAX];
	struct export_file x;
	struct run r;
	int c, rc, rows = 0;

	if (log_init("gem-export", err) < 0) {
		fprintf(stderr, "gem-export: %s\n", err);
		return EXIT_USAGE;
	}
	while ((c = getopt_long(argc, argv, "o:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case O_FORMAT:
			if (!strcmp(optarg, "safetensors"))
				format = EXPORT_SAFETENSORS;
			else if (!strcmp(optarg, "npz"))
				format = EXPORT_NPZ;
			else
				return bad_usage("--format wants safetensors or npz, not ", optarg);
			break;
		case O_PARAMS: params = optarg; break;
		case O_HELD_OUT: rows = 1; break;
		case 'o': output = optarg; break;
		case 'q': log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-export"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind == argc ? "which run?" : "one run at a time: ",
				 optind == argc ? "" : argv[optind + 1]);
	if (rows && (params || format != EXPORT_SAFETENSORS))
		return bad_usage("--held-out: not with --params or --format", "");
	if (rows) {
		if ((rc = run_open(argv[optind], &r, err)) < 0) {
			fprintf(stderr, "gem-export: %s\n", err);
			return prog_exit(rc);
		}
		rc = held_out(&r, output);
		run_close(&r);
		return rc;
	}
	if (!output && isatty(1))
		return bad_usage("not writing binary data to a terminal: redirect standard output ",
				 "(gem-export RUNDIR > model.safetensors) or give -o FILE");
	if ((rc = run_open(argv[optind], &r, err)) < 0) {
		fprintf(stderr, "gem-export: %s\n", err);
		return prog_exit(rc);
	}
	if ((rc = export_run(&r, params, format, &x, err)) == 0) {
		if (output)
			rc = fs_write_atomicv(output, x.iov, x.niov, err);
		else if (write_stdout(&x) < 0)
			rc = gem_errf(err, GEM_EFAIL, "standard output: %s", strerror(errno));
		export_free(&x);
	}
	if (rc < 0)
		fprintf(stderr, "gem-export: %s\n", err);
	else
		log_info("θ of %s written to %s", params ? params : r.dir, output ? output : "standard output");
	run_close(&r);
	return prog_exit(rc);
}
