/* gem-sample: print text generated from a run's θ (a byte-level sequence model: gpt). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "base/prog.h"
#include "report/sample.h"
#include "run/run.h"

static const char usage_line[] =
	"usage: gem-sample [--prompt TEXT] [--bytes N] [--temperature X] [options] RUNDIR";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Print the prompt and then text generated from the run's parameters, a byte at\n"
	      "a time, each drawn from the model's next-byte distribution after the last T\n"
	      "bytes (its positions). The same run, options and seed print the same bytes.\n"
	      "\n"
	      "      --prompt TEXT       the text to continue (its bytes as given); default a\n"
	      "                          newline\n"
	      "      --bytes N           bytes to generate, in [1, 1048576]; default 256\n"
	      "      --temperature X     divide the log-probabilities by X > 0 (below 1: more\n"
	      "                          likely bytes); 0: always the likeliest byte; default 1\n"
	      "      --top-k K           draw among the K likeliest bytes only; default 0 (all)\n"
	      "  -s, --seed S            seed of the draws, in [0, 2^63); default 1\n"
	      "  -q, --quiet             no informational messages on stderr\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n",
	      f);
}

enum { O_PROMPT = 256, O_BYTES, O_TEMP, O_TOPK };

static const struct option longopts[] = {
	{"prompt", required_argument, 0, O_PROMPT}, {"bytes", required_argument, 0, O_BYTES},
	{"temperature", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
	{"seed", required_argument, 0, 's'},          {"quiet", no_argument, 0, 'q'},
	{"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
	{0, 0, 0, 0},
};

static int bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "gem-sample: %s%s\n%s\n", what, arg, usage_line);
	return EXIT_USAGE;
}

/* The options into o; 0, or the exit status of a bad one (-1: --help or --version done). */
static int parse(int argc, char **argv, struct sample_opts *o)
{
	long v;
	int c;
	while ((c = getopt_long(argc, argv, "s:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case O_PROMPT:
			if (!*optarg)
				return bad_usage("--prompt: an empty prompt", "");
			o->prompt = (const uint8_t *)optarg;
			o->prompt_len = strlen(optarg);
			break;
		case O_BYTES:
			if (num_long(optarg, 1, SAMPLE_MAX_BYTES, &o->bytes))
				return bad_usage("--bytes: not an integer in [1, 1048576]: ", optarg);
			break;
		case O_TEMP:
			if (num_double(optarg, 0, 1e6, &o->temperature))
				return bad_usage("--temperature: not a number >= 0: ", optarg);
			break;
		case O_TOPK:
			if (num_long(optarg, 0, 1 << 16, &v))
				return bad_usage("--top-k: not an integer >= 0: ", optarg);
			o->top_k = (int)v;
			break;
		case 's':
			if (num_u64(optarg, &o->seed) || o->seed > INT64_MAX)
				return bad_usage("--seed: not an integer in [0, 2^63): ", optarg);
			break;
		case 'q': log_quiet(); break;
		case 'h': usage(stdout); return -1;
		case 'V': prog_print_version("gem-sample"); return -1;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind == argc ? "which run?" : "one run at a time: ",
				 optind == argc ? "" : argv[optind + 1]);
	return 0;
}

int main(int argc, char **argv)
{
	struct sample_opts o = {.prompt = (const uint8_t *)"\n", .prompt_len = 1, .bytes = 256,
				.temperature = 1, .seed = 1};
	char err[GEM_ERRMAX];
	uint8_t *out;
	struct run r;
	int rc;

	if (log_init("gem-sample", err) < 0) {
		fprintf(stderr, "gem-sample: %s\n", err);
		return EXIT_USAGE;
	}
	if ((rc = parse(argc, argv, &o)) != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = run_open(argv[optind], &r, err)) < 0) {
		fprintf(stderr, "gem-sample: %s\n", err);
		return prog_exit(rc);
	}
	if (!(out = malloc((size_t)o.bytes)))
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	else if ((rc = sample_run(&r, &o, out, err)) == 0 &&
		 (fwrite(o.prompt, 1, o.prompt_len, stdout) != o.prompt_len ||
		  fwrite(out, 1, (size_t)o.bytes, stdout) != (size_t)o.bytes || fflush(stdout) != 0))
		rc = gem_errf(err, GEM_EFAIL, "standard output: write error");
	if (rc < 0)
		fprintf(stderr, "gem-sample: %s\n", err);
	free(out);
	run_close(&r);
	return prog_exit(rc);
}
