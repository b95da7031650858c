/* gem-plot-data: gnuplot-ready data (or a whole gnuplot script) from runs' log.jsonl. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/num.h"
#include "base/prog.h"
#include "base/err.h"
#include "base/log.h"
#include "report/eval.h"
#include "report/plot.h"
#include "run/run.h"

static const char usage_line[] =
	"usage: gem-plot-data [options] VIEW [LOG...]";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Print one VIEW of runs' logs as gnuplot data (TSV: a header line, '# run:'\n"
	      "comment lines, one block per run), CSV, JSON lines, or a gnuplot script. LOG is\n"
	      "a log.jsonl, a RUNDIR (an SGP run's: its node logs; a sliced run's: its slices'\n"
	      "logs), or - (stdin, the default).\n"
	      "  loss        version, samples, loss, moving average, per central update\n"
	      "  pi          a pi statistic per tensor over updates (gnuplot matrix nonuniform)\n"
	      "  staleness   tau, count, fraction\n"
	      "  throughput  time since the first update, updates/s, samples/s\n"
	      "  workers     worker, commits, samples, mean tau, max tau, mean loss\n"
	      "\n"
	      "      --smooth N       loss: moving-average window in updates (default 50)\n"
	      "      --by update|worker  loss: per central update (default) or per worker-step\n"
	      "      --x version|samples|seconds|bytes\n"
	      "                       loss: the first column, the plot's x-axis\n"
	      "      --bins N         pi: at most N columns of updates (default 200)\n"
	      "      --stat median|mean|zero|scale  pi: which statistic (default median)\n"
	      "  -w, --time-window SEC  throughput: window in seconds (default 1); --window is\n"
	      "                       its old name, deprecated\n"
	      "      --csv            print one CSV table (a run column first) instead of TSV\n"
	      "      --json           print JSON lines (one object per row) instead of TSV\n"
	      "  -g, --gnuplot        print a gnuplot script with the data inline\n"
	      "  -T, --term png|svg|dumb  gnuplot terminal (default png; implies --gnuplot)\n"
	      "  -o, --output FILE    gnuplot: set output FILE (implies --gnuplot)\n"
	      "      --follow         with a script: print one again whenever the logs grow,\n"
	      "                       until the runs end (pipe it into gnuplot)\n"
	      "      --interval SEC   --follow: seconds between looks at the logs (default 2)\n"
	      "      --retry-for SEC  --follow: wait this long for a LOG (a run) not made yet\n"
	      "                       (default 10)\n"
	      "  -q, --quiet          no informational messages on stderr\n"
	      "  -h, --help           show this help\n"
	      "  -V, --version        show the version\n",
	      f);
}

enum { OPT_BINS = 256, OPT_STAT, OPT_SMOOTH, OPT_BY, OPT_OLD_WINDOW, OPT_X, OPT_CSV, OPT_JSON,
       OPT_FOLLOW, OPT_INTERVAL, OPT_RETRY };

static const struct option longopts[] = {
	{"smooth", required_argument, 0, OPT_SMOOTH}, {"by", required_argument, 0, OPT_BY},
	{"bins", required_argument, 0, OPT_BINS}, {"stat", required_argument, 0, OPT_STAT},
	{"time-window", required_argument, 0, 'w'}, {"gnuplot", no_argument, 0, 'g'},
	{"term", required_argument, 0, 'T'},   {"output", required_argument, 0, 'o'},
	/* the old name, deprecated: one name, one meaning (gem-init's --window counts steps) */
	{"window", required_argument, 0, OPT_OLD_WINDOW},
	{"quiet", no_argument, 0, 'q'},
	{"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'V'},
	{"x", required_argument, 0, OPT_X},    {"csv", no_argument, 0, OPT_CSV},
	{"json", no_argument, 0, OPT_JSON},    {"follow", no_argument, 0, OPT_FOLLOW},
	{"interval", required_argument, 0, OPT_INTERVAL},
	{"retry-for", required_argument, 0, OPT_RETRY},
	{0, 0, 0, 0},
};

static int bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "gem-plot-data: %s: %s\n%s\n", what, arg, usage_line);
	return EXIT_USAGE;
}

/* The logs read in one look: every LOG argument's files (an SGP run's node logs). */
struct logs {
	char **path;
	size_t n;
	struct plot_log *lg;
	long *seen; /* --follow: lines of each log already read (and reported) */
};

static void logs_free(struct logs *L)
{
	for (size_t i = 0; i < L->n; i++) {
		plot_log_free(&L->lg[i]);
		free(L->path[i]);
	}
	free(L->path);
	free(L->lg);
	free(L->seen);
	memset(L, 0, sizeof *L);
}

/* The files of the LOG arguments into L. */
static int logs_expand(struct logs *L, const char *const *args, size_t nargs, char *err)
{
	for (size_t a = 0; a < nargs; a++) {
		char **p, **grown;
		size_t k;
		if (plot_log_paths(args[a], &p, &k, err) < 0)
			return -1;
		grown = realloc(L->path, (L->n + k) * sizeof *grown);
		if (!grown) {
			while (k)
				free(p[--k]);
			free(p);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		L->path = grown;
		memcpy(L->path + L->n, p, k * sizeof *p);
		L->n += k;
		free(p);
	}
	L->lg = calloc(L->n, sizeof *L->lg);
	L->seen = calloc(L->n, sizeof *L->seen);
	return L->lg && L->seen ? 0 : gem_errf(err, GEM_ENOMEM, "out of memory");
}

/* Read every log of L; the first error ends it, *bad says which log it was. */
static int logs_read(struct logs *L, const struct plot_opts *o, size_t *bad, char *err)
{
	for (size_t i = 0; i < L->n; i++) {
		plot_log_free(&L->lg[i]);
		*bad = i;
		if (plot_log_read(L->path[i], o, L->seen[i], &L->lg[i], err) < 0)
			return -1;
		L->seen[i] = L->lg[i].nlines;
	}
	plot_logs_label(L->lg, L->n);
	return 0;
}

/* The LOG arguments' files are there: each a log file, or a RUNDIR holding its log.jsonl (an
 * SGP run's node logs and a sliced run's slice logs are files of their own). */
static int logs_there(const struct logs *L)
{
	char log[PATH_MAX];
	struct stat st;
	for (size_t i = 0; i < L->n; i++) {
		if (stat(L->path[i], &st) < 0)
			return 0;
		if (S_ISDIR(st.st_mode) &&
		    (run_dir_file(L->path[i], RUN_LOG, log, sizeof log) < 0 || stat(log, &st) < 0))
			return 0;
	}
	return 1;
}

/* --follow started before its runs are made: their logs, once they are there (waiting up to
 * retry_for seconds, as gem-eval --follow waits for its RUNDIR). 0, or an exit status. */
static int logs_wait(struct logs *L, const char *const *args, size_t nargs, double retry_for,
		     double interval)
{
	char err[GEM_ERRMAX];
	double t0 = clock_mono();
	for (int said = 0;; said = 1) {
		if (logs_expand(L, args, nargs, err) < 0) {
			fprintf(stderr, "gem-plot-data: %s\n", err);
			return EXIT_JOB;
		}
		if (logs_there(L))
			return 0;
		if (clock_mono() - t0 >= retry_for) {
			for (size_t i = 0; i < nargs; i++)
				fprintf(stderr, "gem-plot-data: %s: no log after %g s\n", args[i], retry_for);
			return EXIT_JOB;
		}
		if (!said)
			log_info("waiting for %s%s (retrying for %g s)", args[0], nargs > 1 ? " and the rest" : "",
				 retry_for);
		logs_free(L);
		eval_sleep(interval < 0.1 ? interval : 0.1);
	}
}

/* --follow: a script whenever the logs have new lines, until every run is over. A log not
 * there yet (or without an update) is waited for while its run is being trained. */
static int follow(struct logs *L, const struct plot_opts *o, double interval)
{
	char err[GEM_ERRMAX];
	long shown = -1;
	for (;;) {
		long lines = 0;
		size_t bad;
		int over = 1, w;
		if (logs_read(L, o, &bad, err) < 0) {
			if (plot_log_over(&L->lg[bad])) {
				fprintf(stderr, "gem-plot-data: %s\n", err);
				return EXIT_JOB;
			}
			eval_sleep(interval);
			continue;
		}
		for (size_t i = 0; i < L->n; i++) {
			lines += L->lg[i].nlines;
			over &= plot_log_over(&L->lg[i]);
		}
		if (lines != shown) {
			if ((w = plot_write(stdout, o, L->lg, L->n, err)) < 0) {
				fprintf(stderr, "gem-plot-data: %s\n", err);
				return prog_exit(w);
			}
			shown = lines;
		}
		if (over)
			return 0;
		eval_sleep(interval);
	}
}

/* The logs read once, and the view of them written. 0, or an exit status. */
static int plot_once(struct logs *L, const struct plot_opts *o)
{
	char err[GEM_ERRMAX];
	size_t bad;
	int w;
	if (logs_read(L, o, &bad, err) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n", err);
		return EXIT_JOB;
	}
	if ((w = plot_write(stdout, o, L->lg, L->n, err)) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n", err);
		return prog_exit(w);
	}
	return 0;
}

/* The options into *o, *interval and *retry_for: -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct plot_opts *o, double *interval,
			 double *retry_for)
{
	int c;
	while ((c = getopt_long(argc, argv, "w:gT:o:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_SMOOTH:
			if (num_long(optarg, 1, 1000000, &o->smooth) < 0)
				return bad_usage("--smooth wants a whole number from 1", optarg);
			break;
		case OPT_BY:
			if (strcmp(optarg, "worker") && strcmp(optarg, "update"))
				return bad_usage("--by wants update or worker", optarg);
			o->by_worker = !strcmp(optarg, "worker");
			break;
		case OPT_X:
			if (plot_x_parse(optarg, &o->x) < 0)
				return bad_usage("--x wants version, samples, seconds or bytes", optarg);
			break;
		case OPT_BINS:
			if (num_long(optarg, 1, 1000000, &o->bins) < 0)
				return bad_usage("--bins wants a whole number from 1", optarg);
			break;
		case OPT_STAT:
			if (plot_stat_parse(optarg, &o->stat) < 0)
				return bad_usage("--stat wants median, mean, zero or scale", optarg);
			break;
		case OPT_OLD_WINDOW:
			log_warn("--window is deprecated here: say --time-window");
			/* fall through */
		case 'w':
			if (num_double(optarg, 1e-3, 1e9, &o->window) < 0)
				return bad_usage("--time-window wants seconds from 0.001", optarg);
			break;
		case OPT_CSV: o->format = PLOT_CSV; break;
		case OPT_JSON: o->format = PLOT_JSON; break;
		case OPT_FOLLOW: o->follow = 1; break;
		case OPT_INTERVAL:
			if (num_double(optarg, 0.01, 86400, interval) < 0)
				return bad_usage("--interval wants seconds in [0.01, 86400]", optarg);
			break;
		case OPT_RETRY:
			if (num_double(optarg, 0, 1e6, retry_for) < 0)
				return bad_usage("--retry-for wants seconds", optarg);
			break;
		case 'g': o->gnuplot = 1; break;
		case 'T':
			if (plot_term_parse(optarg, &o->term) < 0)
				return bad_usage("--term wants png, svg or dumb", optarg);
			o->gnuplot = 1;
			break;
		case 'o':
			o->output = optarg;
			o->gnuplot = 1;
			break;
		case 'q': log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-plot-data"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct plot_opts o;
	struct logs L = {0};
	char err[GEM_ERRMAX];
	const char *stdin_only[] = {"-"};
	const char *const *args;
	double interval = 2, retry_for = 10;
	size_t nargs;
	int rc;

	/* a reader that has gone (gnuplot refusing a PNG for a terminal) ends this quietly, as a
	 * Unix filter ends, even when the parent left SIGPIPE ignored */
	signal(SIGPIPE, SIG_DFL);
	if (log_init("gem-plot-data", err) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n", err);
		return EXIT_USAGE;
	}
	plot_opts_init(&o);
	if ((rc = parse_options(argc, argv, &o, &interval, &retry_for)) >= 0)
		return rc;
	rc = 0;
	if (optind == argc) {
		fprintf(stderr, "gem-plot-data: which view?\n%s\n", usage_line);
		return EXIT_USAGE;
	}
	if (plot_view_parse(argv[optind], &o.view, err) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n%s\n", err, usage_line);
		return EXIT_USAGE;
	}
	optind++;
	if (o.gnuplot && o.format != PLOT_TSV)
		return bad_usage("a gnuplot script holds TSV", o.format == PLOT_CSV ? "--csv" : "--json");
	nargs = optind < argc ? (size_t)(argc - optind) : 1;
	args = optind < argc ? (const char *const *)argv + optind : stdin_only;
	if (o.follow && !o.gnuplot)
		return bad_usage("--follow prints gnuplot scripts", "add --gnuplot, --term or --output");
	for (size_t i = 0; o.follow && i < nargs; i++)
		if (!strcmp(args[i], "-"))
			return bad_usage("--follow reads files", "not stdin");
	if (o.follow) {
		rc = logs_wait(&L, args, nargs, retry_for, interval);
	} else if (logs_expand(&L, args, nargs, err) < 0) {
		fprintf(stderr, "gem-plot-data: %s\n", err);
		rc = EXIT_JOB;
	}
	if (rc == 0)
		rc = o.follow ? follow(&L, &o, interval) : plot_once(&L, &o);
	logs_free(&L);
	return rc;
}
