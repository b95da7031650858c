/* gem-sim: N asynchronous workers of a run, simulated in one process on a virtual clock, against
 * gem-serve's own server core (lib/role/sim.c, lib/role/ps.c); or a replay of a served run
 * (--replay, lib/role/replay.c). gem-init's options (lib/run/spec.h) make the run first, as
 * gem-init would, with --workers N. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/num.h"
#include "base/prog.h"
#include "base/err.h"
#include "base/log.h"
#include "run/run.h"
#include "run/spec.h"
#include "role/progress.h"
#include "role/ps.h"
#include "role/replay.h"
#include "role/sim.h"
#include "wire/blob.h"

#define MAX_EVENTS 4096

static const char usage_line[] =
	"usage: gem-sim -n N [--steps S] [options] [gem-init options] RUNDIR\n"
	"   or: gem-sim --replay LOG NEWRUN";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Simulate N asynchronous workers of a run in one process, on a virtual clock: the\n"
	      "rules of gem-serve, applied in order of arrival; the same log and params.gem.\n"
	      "\n"
	      "  -n, --workers N         virtual workers from time 0; default 1\n"
	      "  -t, --steps S           S local steps per worker (default: the run's epochs)\n"
	      "      --step-time DIST    seconds per step: const:T, normal:MEAN,SD or\n"
	      "                          lognormal:MU,SIGMA; default const:1\n"
	      "      --jitter J          multiply each step time by U(1-J, 1+J); default 0\n"
	      "      --speed-spread S    worker speeds: each one's step times x e^(S z), one\n"
	      "                          z ~ N(0, 1) per worker; default 0\n"
	      "      --timing PRESET     roundrobin (const:1, the default) or measured\n"
	      "                          (lognormal steps and worker speeds fitted to real\n"
	      "                          gem-run workers)\n"
	      "      --stragglers K:F    workers 0..K-1 are F times slower\n"
	      "      --latency SEC       one-way time of every message; default 0\n"
	      "      --server-time SEC   server time per commit; default 0\n"
	      "      --server-cost A,B   the server as a queue: each slice's CPU takes\n"
	      "                          A*n + B more seconds per commit of n parameters;\n"
	      "                          auto: A and B fitted for the codec on gem's test\n"
	      "                          machine; default 0,0 (off)\n"
	      "      --bandwidth BPS     each server host's link moves BPS bytes/s each way,\n"
	      "                          a queue in and a queue out; default 0 (no limit)\n"
	      "      --die W@T           worker W dies at time T (repeatable)\n"
	      "      --join T            a new worker joins at time T (repeatable)\n"
	      "  -j, --threads T         compute gradients on T threads, same result; default 1\n"
	      "      --slices K          serve theta with K cores in this process, one slice\n"
	      "                          each, as K gem-serve --slice I/K would (the same\n"
	      "                          theta); default 1. --shards K is its older spelling\n"
	      "      --codec C           the workers commit in codec C, as gem-work --codec C\n"
	      "                          does (the same encoder, error feedback and replies:\n"
	      "                          the same theta); default raw\n"
	      "      --replay LOG        re-run the joins, commits and leaves of a gem-serve\n"
	      "                          run's LOG (RUN/log.jsonl) in their order into NEWRUN\n"
	      "                          (made from RUN when it is not a run): the same\n"
	      "                          parameters, bit for bit\n"
	      "  -q, --quiet             no progress line, no summary on stderr\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n"
	      "Every other option goes to gem-init (see gem-init --help), which makes RUNDIR\n"
	      "first, with --workers N; without them RUNDIR must be a run, and is used as it\n"
	      "is.\n",
	      f);
}

static void bad_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "gem-sim: %s%s\n%s\n", msg, arg ? arg : "", usage_line);
	exit(EXIT_USAGE);
}

enum { O_STEPTIME = 256, O_JITTER, O_SPREAD, O_TIMING, O_STRAG, O_LAT, O_SRV, O_DIE, O_JOIN, O_REPLAY,
       O_SLICES, O_CODEC, O_COST, O_BW };

static const struct option longopts[] = {
	{"workers", required_argument, 0, 'n'},      {"steps", required_argument, 0, 't'},
	{"step-time", required_argument, 0, O_STEPTIME}, {"jitter", required_argument, 0, O_JITTER},
	{"speed-spread", required_argument, 0, O_SPREAD}, {"timing", required_argument, 0, O_TIMING},
	{"stragglers", required_argument, 0, O_STRAG}, {"latency", required_argument, 0, O_LAT},
	{"server-time", required_argument, 0, O_SRV}, {"die", required_argument, 0, O_DIE},
	{"join", required_argument, 0, O_JOIN},      {"threads", required_argument, 0, 'j'},
	{"replay", required_argument, 0, O_REPLAY},  {"slices", required_argument, 0, O_SLICES},
	{"codec", required_argument, 0, O_CODEC},   {"quiet", no_argument, 0, 'q'},
	{"server-cost", required_argument, 0, O_COST}, {"bandwidth", required_argument, 0, O_BW},
	{"help", no_argument, 0, 'h'},               {"version", no_argument, 0, 'V'},
	{"shards", required_argument, 0, O_SLICES}, /* --slices' older spelling, until a later release */
	{0, 0, 0, 0},
};
static const char shortopts[] = "n:t:j:qhV";

/* Whether a gem-sim option `a` takes the next argument as its value. */
static int sim_takes_value(const char *a)
{
	if (a[0] != '-')
		return 0;
	if (a[1] == '-') {
		const char *eq = strchr(a + 2, '=');
		size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (eq)
			return 0;
		for (const struct option *o = longopts; o->name; o++)
			if (strlen(o->name) == len && !strncmp(o->name, a + 2, len))
				return o->has_arg == required_argument;
		return 0;
	}
	return a[1] && a[2] == 0 && strchr("ntj", a[1]) != NULL;
}

/* Make rundir as gem-init would with the options in args[1..nargs), and --workers n (first):
 * 0, or the exit status. */
static int make_run(const char *rundir, int n, int nargs, char **args)
{
	char err[GEM_ERRMAX], nbuf[32];
	struct run_opts o;
	struct run_spec spec;
	int c, rc;

	run_opts_init(&o);
	snprintf(nbuf, sizeof nbuf, "%d", n);
	run_opts_take(&o, 'n', nbuf, err);
	optind = 0;
	while ((c = getopt_long(nargs, args, RUN_OPTS_SHORT, run_opts_long, NULL)) != -1) {
		if (c == '?') {
			fprintf(stderr, "%s\n", usage_line);
			exit(EXIT_USAGE);
		}
		if (run_opts_take(&o, c, optarg, err) < 0)
			bad_usage("", err);
	}
	prog_blas_init();
	if ((rc = run_make_new(rundir, &o, &spec, err)) < 0) {
		fprintf(stderr, "gem-sim: %s\n", err);
		if (o.usage)
			fprintf(stderr, "%s\n", usage_line);
	}
	run_spec_free(&spec);
	return prog_exit(rc);
}

/* The arguments, split: ours, and gem-init's that make the run. Global so that they stay
 * reachable whichever way main exits. */
static char **sargv, **iargv;

static prog_stop_flag stop_signal;
static void on_signal(int sig)
{
	stop_signal = sig;
}

/* gem-sim --replay LOG NEWRUN: prints what the replay ended with. */
static int replay(const char *logpath, const char *newrun, int quiet)
{
	struct replay_summary sum;
	char err[GEM_ERRMAX];
	int rc;
	prog_blas_init();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if ((rc = replay_run(logpath, newrun, &stop_signal, &sum, err)) < 0) {
		fprintf(stderr, "gem-sim: %s: %s\n", logpath, err);
		return prog_exit(rc);
	}
	printf("# version\tsamples\tcommits\tworkers\tlines\tseconds\n");
	printf("%llu\t%llu\t%llu\t%d\t%llu\t%.3f\n", (unsigned long long)sum.version,
	       (unsigned long long)sum.samples, (unsigned long long)sum.commits, sum.workers,
	       (unsigned long long)sum.lines, sum.seconds);
	if (!quiet)
		fprintf(stderr, "gem-sim: replayed %llu log lines (%llu commits of %d worker%s) into %s: "
				"version %llu in %.1f s\n",
			(unsigned long long)sum.lines, (unsigned long long)sum.commits, sum.workers,
			GEM_S(sum.workers), newrun,
			(unsigned long long)sum.version, sum.seconds);
	if (stop_signal) {
		fprintf(stderr, "gem-sim: interrupted; parameters saved at version %llu\n",
			(unsigned long long)sum.version);
		return 128 + stop_signal;
	}
	return 0;
}

/* The progress line: out of the simulation's samples, with its virtual time and workers. */
static void progress(void *ctx, const struct ps_now *st, double vtime)
{
	struct progress_show *sh = ctx;
	char line[320], text[384];
	size_t len;
	if (!progress_show_due(sh, clock_mono()))
		return;
	progress_line(&st->p, line, sizeof line);
	len = strlen(line);
	snprintf(line + len, sizeof line - len, "  vtime %.1f  %d worker%s", vtime, st->active,
		 GEM_S(st->active));
	fputs(progress_show_text(sh, "gem-sim", line, text, sizeof text), stderr);
}

/* Split the arguments: gem-init's options (with their values) into iargv, ours (and RUNDIR)
 * into sargv; argv[0] heads both. */
static void split_args(int argc, char **argv, int *sargc, int *iargc)
{
	sargv[(*sargc)++] = argv[0];
	iargv[(*iargc)++] = argv[0];
	for (int i = 1; i < argc; i++) {
		int c, value;
		if (!strcmp(argv[i], "--")) {
			while (i < argc)
				sargv[(*sargc)++] = argv[i++];
			break;
		}
		/* --workers is ours: it goes to the new run too */
		if ((c = run_opts_match(argv[i], &value)) >= 0 && c != 'n') {
			iargv[(*iargc)++] = argv[i];
			if (value) {
				if (i + 1 >= argc)
					bad_usage("option needs a value: ", argv[i]);
				iargv[(*iargc)++] = argv[++i];
			}
			continue;
		}
		sargv[(*sargc)++] = argv[i];
		if (sim_takes_value(argv[i]) && i + 1 < argc)
			sargv[(*sargc)++] = argv[++i];
	}
	iargv[*iargc] = NULL;
}

/* "A,B": two numbers >= 0: 0, or -1. */
static int parse_cost(const char *s, double *a, double *b)
{
	char buf[64];
	const char *comma = strchr(s, ',');
	size_t len = comma ? (size_t)(comma - s) : 0;
	if (!comma || len >= sizeof buf)
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	return num_double(buf, 0, 1e9, a) || num_double(comma + 1, 0, 1e9, b) ? -1 : 0;
}

/* Our option c (of getopt_long) into o; exits on a bad value. */
static void sim_option(int c, struct sim_opts *o, struct sim_death *deaths, double *joins)
{
	char err[GEM_ERRMAX];
	long v;
	switch (c) {
	case 'n':
		if (num_long(optarg, 1, SIM_MAX_WORKERS, &v)) {
			snprintf(err, sizeof err, "--workers: not an integer in [1, %d]: ", SIM_MAX_WORKERS);
			bad_usage(err, optarg);
		}
		o->nworkers = (int)v;
		break;
	case 't':
		if (num_u64(optarg, &o->steps) || o->steps == 0)
			bad_usage("--steps: not a positive integer: ", optarg);
		break;
	case O_STEPTIME:
		if (sim_parse_dist(optarg, &o->step, err) < 0)
			bad_usage("--step-time: ", err);
		break;
	case O_JITTER:
		if (num_double(optarg, 0, 0.999999, &o->jitter))
			bad_usage("--jitter: not in [0, 1): ", optarg);
		break;
	case O_SPREAD:
		if (num_double(optarg, 0, 10, &o->speed_spread))
			bad_usage("--speed-spread: not in [0, 10]: ", optarg);
		break;
	case O_TIMING:
		if (sim_timing_preset(optarg, o, err) < 0)
			bad_usage("--timing: ", err);
		break;
	case O_STRAG:
		if (sim_parse_stragglers(optarg, &o->stragglers, &o->straggler_factor, err) < 0)
			bad_usage("--stragglers: ", err);
		break;
	case O_LAT:
		if (num_double(optarg, 0, 1e9, &o->latency))
			bad_usage("--latency: not a number of seconds >= 0: ", optarg);
		break;
	case O_COST:
		if (!strcmp(optarg, "auto"))
			o->cost_a = -1; /* the codec's, once every option is read */
		else if (parse_cost(optarg, &o->cost_a, &o->cost_b))
			bad_usage("--server-cost: not A,B (seconds >= 0) or auto: ", optarg);
		break;
	case O_BW:
		if (num_double(optarg, 0, 1e15, &o->bandwidth))
			bad_usage("--bandwidth: not a number of bytes/s >= 0: ", optarg);
		break;
	case O_SRV:
		if (num_double(optarg, 0, 1e9, &o->server_time))
			bad_usage("--server-time: not a number of seconds >= 0: ", optarg);
		break;
	case O_DIE:
		if (o->ndeaths == MAX_EVENTS)
			bad_usage("--die: too many", NULL);
		if (sim_parse_death(optarg, &deaths[o->ndeaths++], err) < 0)
			bad_usage("--die: ", err);
		break;
	case O_JOIN:
		if (o->njoins == MAX_EVENTS)
			bad_usage("--join: too many", NULL);
		if (num_double(optarg, 0, 1e12, &joins[o->njoins++]))
			bad_usage("--join: not a time >= 0: ", optarg);
		break;
	case 'j':
		if (num_long(optarg, 1, 256, &v))
			bad_usage("--threads: not an integer in [1, 256]: ", optarg);
		o->threads = (int)v;
		break;
	case O_SLICES:
		if (num_long(optarg, 1, 64, &v))
			bad_usage("--slices: not an integer in [1, 64]: ", optarg);
		o->slices = (int)v;
		break;
	case O_CODEC:
		if (blob_codec_check(optarg, err) < 0)
			bad_usage("--codec: ", err);
		o->codec = optarg;
		break;
	}
}

/* Whether o holds anything but the defaults a replay runs with. */
static int sim_opts_given(const struct sim_opts *o)
{
	return o->nworkers != 1 || o->steps || o->ndeaths || o->njoins || o->threads != 1 ||
	       o->slices > 1 || o->jitter > 0 || o->speed_spread > 0 || o->stragglers ||
	       o->latency > 0 || o->server_time > 0 || o->cost_a != 0 || o->cost_b > 0 ||
	       o->bandwidth > 0 || o->step.kind != SIM_CONST || o->step.a != 1 ||
	       o->codec;
}

/* A column of gem's π statistics: "-" for a rule that has none (NaN). */
static const char *pi_col(char *buf, size_t cap, double v)
{
	if (isnan(v))
		return "-";
	snprintf(buf, cap, "%.6g", v);
	return buf;
}

/* The run's line of TSV, and (but with -q) what its workers did; a divergence is said always.
 * Rates and shares are of the virtual time. */
static void report(const struct sim_summary *sum, const char *rundir, int quiet)
{
	char loss[32], pi[3][32];
	double vt = sum->vtime > 0 ? sum->vtime : 1;
	printf("# workers\tversion\tsamples\tvtime\tloss\ttau_mean\ttau_max\tpi_median\tscale\tfailed\tseconds\tzero"
	       "\tcommits_per_s\tserver_util\tlink_util\twait_mean\twait_p99\ttau_p50\ttau_p99"
	       "\tbytes_in\tbytes_out\n");
	printf("%d\t%llu\t%llu\t%.6f\t%s\t%.4f\t%llu\t%s\t%s\t%d\t%.3f\t%s\t%.6g\t%.4f\t%.4f\t%.6g\t%.6g\t%llu\t%llu"
	       "\t%llu\t%llu\n",
	       sum->workers, (unsigned long long)sum->version, (unsigned long long)sum->samples, sum->vtime,
	       num_format(loss, sizeof loss, "%.6g", sum->loss_tail), sum->tau_mean,
	       (unsigned long long)sum->tau_max, pi_col(pi[0], sizeof pi[0], sum->pi_median),
	       pi_col(pi[1], sizeof pi[1], sum->scale_mean), sum->failed, sum->seconds,
	       pi_col(pi[2], sizeof pi[2], sum->zero_mean), (double)sum->commits / vt, sum->busy / vt,
	       sum->link_busy / vt, sum->wait_mean, sum->wait_p99, (unsigned long long)sum->tau_p50,
	       (unsigned long long)sum->tau_p99, (unsigned long long)sum->bytes_in,
	       (unsigned long long)sum->bytes_out);
	if (!quiet)
		fprintf(stderr,
			"gem-sim: %d worker%s (%d finished, %d died, %d failed): %llu updates in %.6g virtual s, "
			"%.1f s (%.0f updates/s), %llu bytes in, %llu out\n",
			sum->workers, GEM_S(sum->workers), sum->finished, sum->died, sum->failed,
			(unsigned long long)sum->updates, sum->vtime, sum->seconds,
			(double)sum->updates / (sum->seconds > 0 ? sum->seconds : 1),
			(unsigned long long)sum->bytes_in, (unsigned long long)sum->bytes_out);
	if (sum->diverged) {
		/* the options that matter are the rule's: an outer step's too */
		char err[GEM_ERRMAX];
		struct run r;
		const char *what = "a lower --lr";
		if (run_open(rundir, &r, err) == 0)
			what = rule_step_options(&r.spec.rule);
		fprintf(stderr, "gem-sim: warning: the run diverged (%d worker%s' loss did); %s may "
				"help\n", sum->diverged, GEM_S(sum->diverged), what);
		run_close(&r);
	}
}

/* The simulation of rundir, and its summary: the exit status. */
static int simulate(const char *rundir, struct sim_opts *o, struct progress_show *show, int quiet)
{
	struct sim_summary sum;
	char err[GEM_ERRMAX];
	int rc;

	prog_blas_init();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	o->stop = &stop_signal;
	if (show->mode != PROGRESS_OFF) {
		o->progress = progress;
		o->progress_ctx = show;
	}
	log_over_line(show->mode == PROGRESS_TTY);
	rc = sim_run(rundir, o, &sum, err);
	fputs(progress_show_end(show), stderr);
	if (rc < 0) {
		fprintf(stderr, "gem-sim: %s\n", err);
		return prog_exit(rc);
	}
	report(&sum, rundir, quiet);
	if (stop_signal) {
		/* the virtual workers' state (their x, data positions, the event queue) is not
		 * saved: say so rather than let a second run pass for a resumed one */
		fprintf(stderr, "gem-sim: interrupted; parameters saved at version %llu. A simulation "
				"is not resumed: gem-sim on %s again starts new workers with a full budget "
				"from these parameters\n",
			(unsigned long long)sum.version, rundir);
		return 128 + stop_signal;
	}
	return sum.failed ? EXIT_JOB : 0;
}

int main(int argc, char **argv)
{
	struct sim_opts o;
	static struct sim_death deaths[MAX_EVENTS];
	static double joins[MAX_EVENTS];
	char err[GEM_ERRMAX], runjson[PATH_MAX + 16];
	const char *rundir, *replay_log = NULL;
	int sargc = 0, iargc = 0, c, quiet = 0, rc;
	struct progress_show show;
	struct stat stt;

	if (log_init("gem-sim", err) < 0) {
		fprintf(stderr, "gem-sim: %s\n", err);
		return EXIT_USAGE;
	}
	sim_opts_default(&o);
	sargv = calloc((size_t)argc + 1, sizeof *sargv);
	iargv = calloc((size_t)argc + 1, sizeof *iargv);
	if (!sargv || !iargv) {
		fprintf(stderr, "gem-sim: out of memory\n");
		return EXIT_JOB;
	}
	split_args(argc, argv, &sargc, &iargc);
	while ((c = getopt_long(sargc, sargv, shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case O_REPLAY: replay_log = optarg; break;
		case 'q': quiet = 1; log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-sim"); return 0;
		case '?': fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		default: sim_option(c, &o, deaths, joins);
		}
	}
	if (optind == sargc)
		bad_usage("no RUNDIR given", NULL);
	if (optind + 1 != sargc)
		bad_usage("unexpected argument: ", sargv[optind + 1]);
	rundir = sargv[optind];
	if (replay_log) {
		/* the log says who commits when: timing, workers and a new run's options do not apply */
		if (iargc > 1 || sim_opts_given(&o))
			bad_usage("--replay takes no other option but -q", NULL);
		return replay(replay_log, rundir, quiet);
	}
	o.deaths = deaths;
	o.joins = joins;
	if (o.cost_a < 0)
		sim_server_cost(o.codec, &o.cost_a, &o.cost_b);
	if (sim_opts_check(&o, err) < 0)
		bad_usage("", err);
	if (progress_show_init(&show, getenv("GEM_PROGRESS"), isatty(2), quiet, err) < 0)
		bad_usage("", err);

	/* Make the run first when gem-init options are given; without them RUNDIR must be a run
	 * (a mistyped name is not a new cnn run) */
	run_dir_file(rundir, RUN_JSON, runjson, sizeof runjson);
	if (iargc == 1 && stat(runjson, &stt) != 0) {
		fprintf(stderr, "gem-sim: %s: not a run (no %s); give gem-init options (--model, "
				"--data, ...) to make one\n%s\n", rundir, RUN_JSON, usage_line);
		return EXIT_USAGE;
	}
	if (iargc > 1 && (rc = make_run(rundir, o.nworkers, iargc, iargv)) != 0)
		return rc;
	return simulate(rundir, &o, &show, quiet);
}
