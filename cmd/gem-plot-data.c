/* gem-plot-data: gnuplot-ready data (or a whole gnuplot script) from runs' log.jsonl. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/err.h"
#include "base/log.h"
#include "report/plot.h"

static const char usage_line[] =
	"usage: gem-plot-data [options] VIEW [LOG...]";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Print one VIEW of runs' logs as gnuplot data (TSV under '#' header lines, one\n"
	      "block per run), or as a gnuplot script. LOG is a log.jsonl, a RUNDIR, or -\n"
	      "(stdin, the default).\n"
	      "  loss        version, samples, loss, moving average, per central update\n"
	      "  pi          a pi statistic per tensor over updates, as a gnuplot matrix\n"
	      "              nonuniform\n"
	      "  staleness   tau, count, fraction\n"
	      "  throughput  time since the first update, updates/s, samples/s\n"
	      "  workers     worker, commits, samples, mean tau, max tau, mean loss\n"
	      "\n"
	      "      --smooth N       loss: moving-average window in updates (default 50)\n"
	      "      --by update|worker  loss: per central update (default) or per worker-step\n"
	      "      --bins N         pi: at most N columns of updates (default 200)\n"
	      "      --stat median|mean|zero|scale  pi: which statistic (default median)\n"
	      "  -w, --time-window SEC  throughput: window in seconds (default 1); --window is\n"
	      "                       its old name, deprecated\n"
	      "  -g, --gnuplot        print a gnuplot script with the data inline\n"
	      "  -T, --term png|svg|dumb  gnuplot terminal (default png; implies --gnuplot)\n"
	      "  -o, --output FILE    gnuplot: set output FILE (implies --gnuplot)\n"
	      "  -q, --quiet          no informational messages on stderr\n"
	      "  -h, --help           show this help\n"
	      "  -V, --version        show the version\n",
	      f);
}

enum { OPT_BINS = 256, OPT_STAT, OPT_SMOOTH, OPT_BY, OPT_OLD_WINDOW };

static const struct option longopts[] = {
	{"smooth", required_argument, 0, OPT_SMOOTH}, {"by", required_argument, 0, OPT_BY},
	{"bins", required_argument, 0, OPT_BINS}, {"stat", required_argument, 0, OPT_STAT},
	{"time-window", required_argument, 0, 'w'}, {"gnuplot", no_argument, 0, 'g'},
	{"term", required_argument, 0, 'T'},   {"output", required_argument, 0, 'o'},
	/* the old name, deprecated: one name, one meaning (gem-init's --window counts steps) */
	{"window", required_argument, 0, OPT_OLD_WINDOW},
	{"quiet", no_argument, 0, 'q'},
	{"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'V'},
	{0, 0, 0, 0},
};

static int bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "gem-plot-data: %s: %s\n%s\n", what, arg, usage_line);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	struct plot_opts o;
	struct plot_log *logs;
	char err[GEM_ERRMAX];
	const char *stdin_only[] = {"-"};
	const char *const *paths;
	size_t nlogs, nread = 0;
	int c, rc = 0;

	if (log_init("gem-plot-data", err) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n", err);
		return EXIT_USAGE;
	}
	plot_opts_init(&o);
	while ((c = getopt_long(argc, argv, "w:gT:o:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_SMOOTH:
			if (cli_long(optarg, 1, 1000000, &o.smooth) < 0)
				return bad_usage("--smooth wants a whole number from 1", optarg);
			break;
		case OPT_BY:
			if (strcmp(optarg, "worker") && strcmp(optarg, "update"))
				return bad_usage("--by wants update or worker", optarg);
			o.by_worker = !strcmp(optarg, "worker");
			break;
		case OPT_BINS:
			if (cli_long(optarg, 1, 1000000, &o.bins) < 0)
				return bad_usage("--bins wants a whole number from 1", optarg);
			break;
		case OPT_STAT:
			if (plot_stat_parse(optarg, &o.stat) < 0)
				return bad_usage("--stat wants median, mean, zero or scale", optarg);
			break;
		case OPT_OLD_WINDOW:
			log_warn("--window is deprecated here: say --time-window");
			/* fall through */
		case 'w':
			if (cli_double(optarg, 1e-3, 1e9, &o.window) < 0)
				return bad_usage("--time-window wants seconds from 0.001", optarg);
			break;
		case 'g': o.gnuplot = 1; break;
		case 'T':
			if (plot_term_parse(optarg, &o.term) < 0)
				return bad_usage("--term wants png, svg or dumb", optarg);
			o.gnuplot = 1;
			break;
		case 'o':
			o.output = optarg;
			o.gnuplot = 1;
			break;
		case 'q': log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': cli_print_version("gem-plot-data"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind == argc) {
		fprintf(stderr, "gem-plot-data: which view?\n%s\n", usage_line);
		return EXIT_USAGE;
	}
	if (plot_view_parse(argv[optind], &o.view) < 0)
		return bad_usage("unknown view", argv[optind]);
	optind++;
	nlogs = optind < argc ? (size_t)(argc - optind) : 1;
	paths = optind < argc ? (const char *const *)argv + optind : stdin_only;
	logs = calloc(nlogs, sizeof *logs);
	if (!logs) {
		fprintf(stderr, "gem-plot-data: out of memory\n");
		return EXIT_JOB;
	}
	for (; nread < nlogs; nread++) {
		if (plot_log_read(paths[nread], o.view == PLOT_PI, o.stat, &logs[nread], err) < 0) {
			fprintf(stderr, "gem-plot-data: %s\n", err);
			rc = EXIT_JOB;
			break;
		}
	}
	if (rc == 0) {
		plot_logs_label(logs, nlogs);
		int w = plot_write(stdout, &o, logs, nlogs, err);
		if (w < 0) {
			fprintf(stderr, "gem-plot-data: %s\n", err);
			rc = w == GEM_EUSAGE ? EXIT_USAGE : EXIT_JOB;
		}
	}
	for (size_t i = 0; i < nlogs; i++)
		plot_log_free(&logs[i]);
	free(logs);
	return rc;
}
