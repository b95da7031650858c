/* gem-run: make a run, serve it, train it with N workers, evaluate it, stop the server; or, with
 * --rule sgp, train it with N SGP nodes wired to each other (no server) and evaluate their
 * average. Killing gem-run (Ctrl-C) stops everything it started.
 *
 * One loop looks after every child (pump): a signalfd for SIGCHLD, SIGINT, SIGTERM and SIGHUP
 * (blocked, so that they wait in it) and the pipes of the children whose first line is their
 * URL, in one poll with the next deadline as its timeout: nothing runs on a tick. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "base/prog.h"
#include "nn/exec.h"
#include "role/launch.h"
#include "role/progress.h"
#include "run/run.h"
#include "run/runlog.h"
#include "run/spec.h"
#include "wire/httpc.h"
#include "wire/proto.h"

static const char usage_line[] =
	"usage: gem-run -n N [--steps S] [--hosts FILE] [--resume] [options] RUNDIR\n"
	"   or: gem-run -n N --rule sgp [--hosts FILE] [--work-opt OPT] [options] RUNDIR";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Make a run in RUNDIR as gem-init does, start gem-serve on a free port, start N\n"
	      "gem-work workers (locally, or over ssh on the hosts of --hosts), wait for them,\n"
	      "evaluate the result with gem-eval, stop the server and print gem-eval's TSV.\n"
	      "With --rule sgp there is no server: N gem-work nodes of Stochastic Gradient Push\n"
	      "train on disjoint parts, wired to each other on free ports, and gem-eval\n"
	      "--nodes evaluates each node and their average.\n"
	      "\n"
	      "  -n, --workers N     number of workers; default 4, or with --hosts the slots\n"
	      "                      listed, or with --resume the run's (not more)\n"
	      "  -t, --steps S       every worker trains S steps (minibatches), not the run's\n"
	      "                      epochs: the run's budget, stored in it (gem-serve\n"
	      "                      --steps), which --resume finishes; given with --resume,\n"
	      "                      it replaces the stored one (this is how a run is extended)\n"
	      "      --hosts FILE    start the workers over ssh: one \"host [slots]\" per line;\n"
	      "                      the server listens on every address (--public) behind a\n"
	      "                      fresh token, and the workers reach it by this host's name\n"
	      "                      ($GEM_HOST overrides it)\n"
	      "  -l, --listen H:P    where gem-serve listens; default 127.0.0.1:0 (with\n"
	      "                      --hosts: 0.0.0.0:0)\n"
	      "      --tls           serve HTTPS: a certificate made for this run (openssl) in\n"
	      "                      RUNDIR, copied to the hosts of --hosts; the workers trust\n"
	      "                      it alone (gem-work --cacert); the default with --hosts.\n"
	      "                      With --rule sgp every node listens on HTTPS with it (its\n"
	      "                      key copied too) and trusts it alone in its peers\n"
	      "      --no-tls        plain HTTP with --hosts, SGP nodes too (the token then\n"
	      "                      crosses the network in clear)\n"
	      "      --resume        continue the run in RUNDIR instead of making a new one\n"
	      "      --work-opt OPT  pass OPT to every gem-work (repeatable), e.g.\n"
	      "                      --work-opt=--slowdown=2; with --rule sgp e.g.\n"
	      "                      --work-opt=--overlap, --work-opt=--topology=ring\n"
	      "      --serve-opt OPT pass OPT to gem-serve (repeatable), e.g.\n"
	      "                      --serve-opt=--max-updates=100\n"
	      "      --slices K      serve θ with K gem-serve processes, one slice each\n"
	      "                      (--slice I/K, on this host); the workers commit to all of\n"
	      "                      them. Default 1. --shards K is its older spelling\n"
	      "      --slice-hosts FILE\n"
	      "                      start slice I over ssh on the I-th host of FILE (one\n"
	      "                      per line, taken in turn), listening on every address\n"
	      "                      behind the run's token; a host that does not share\n"
	      "                      RUNDIR gets a copy of the run and gives its slice\n"
	      "                      directory back at the end. Needs --slices 2 or more.\n"
	      "                      --shard-hosts FILE is its older spelling\n"
	      "      --codec C       every gem-work's --codec (raw, zlib, zlib+shuffle, fp16,\n"
	      "                      int8, int4, topk:F); default raw\n"
	      "      --ssh CMD       the ssh command for --hosts and --slice-hosts, its words\n"
	      "                      split as a shell would (e.g. \"ssh -J gateway -p 2222\");\n"
	      "                      default $GEM_SSH, else ssh\n"
	      "  -r, --rule sgp      train with SGP nodes instead of a server (other rules go\n"
	      "                      to gem-init)\n"
	      "  -q, --quiet         no progress\n"
	      "  -h, --help          show this help\n"
	      "  -V, --version       show the version\n"
	      "Every other option goes to gem-init (see gem-init --help); --workers N is passed\n"
	      "on too.\n",
	      f);
}

/* ---- options ---- */

/* gem-run's own letters; gem-init's (RUN_OPTS_SHORT) are added to them, its options taken by
 * name from its table (run/spec.h), so that gem-run knows which take a value */
static const char shortopts[] = "n:t:l:r:qhV";

enum { O_HOSTS = 256, O_RESUME, O_TLS, O_NO_TLS, O_WORK_OPT, O_SERVE_OPT, O_SLICES, O_SLICE_HOSTS,
       O_CODEC, O_SSH, O_INIT = 1024 };

static const struct option own_opts[] = {
	{"workers", required_argument, 0, 'n'},    {"steps", required_argument, 0, 't'},
	{"hosts", required_argument, 0, O_HOSTS},  {"listen", required_argument, 0, 'l'},
	{"resume", no_argument, 0, O_RESUME},       {"tls", no_argument, 0, O_TLS},
	{"no-tls", no_argument, 0, O_NO_TLS},       {"work-opt", required_argument, 0, O_WORK_OPT},
	{"serve-opt", required_argument, 0, O_SERVE_OPT}, {"slices", required_argument, 0, O_SLICES},
	{"slice-hosts", required_argument, 0, O_SLICE_HOSTS},
	{"codec", required_argument, 0, O_CODEC},   {"ssh", required_argument, 0, O_SSH},
	{"rule", required_argument, 0, 'r'},        {"quiet", no_argument, 0, 'q'},
	{"help", no_argument, 0, 'h'},              {"version", no_argument, 0, 'V'},
	{"shards", required_argument, 0, O_SLICES}, /* older spelling of --slices, until a later release */
	{"shard-hosts", required_argument, 0, O_SLICE_HOSTS}, /* older spelling of --slice-hosts */
	{0},
};

/* What the command line asks for. */
static struct cfg {
	int workers, workers_set, resume, tls, quiet, sgp, slices;
	const char *steps, *hosts, *listen, *slice_hosts, *ssh, *rundir;
	struct argv init, work, serve;          /* options for gem-init, gem-work, gem-serve */
	struct argv slots, shosts;              /* a host per worker slot; per slice in turn */
	struct progress_show show;
	int ssh_timeout;
} C = {.workers = 4, .tls = -1, .slices = 1};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
	va_list ap;
	fputs("gem-run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s\n", usage_line);
	exit(EXIT_USAGE);
}

static void oom(void)
{
	fputs("gem-run: out of memory\n", stderr);
	exit(EXIT_JOB);
}

static void push(struct argv *a, const char *s)
{
	if (argv_push(a, s) < 0)
		oom();
}

/* The long options: gem-run's, then gem-init's but those gem-run takes itself (their val
 * O_INIT + its index in run_opts_long). */
static void options_table(struct option *t, size_t cap, char *letters, size_t lcap)
{
	size_t n = 0;
	for (const struct option *o = own_opts; o->name; o++)
		t[n++] = *o;
	for (int i = 0; run_opts_long[i].name && n + 1 < cap; i++) {
		if (!strcmp(run_opts_long[i].name, "workers") || !strcmp(run_opts_long[i].name, "rule"))
			continue;
		t[n] = run_opts_long[i];
		t[n++].val = O_INIT + i;
	}
	t[n] = (struct option){0};
	/* ':' first: a missing value is told apart from an unknown option */
	snprintf(letters, lcap, ":%s%s", shortopts, RUN_OPTS_SHORT);
}

/* A gem-init option (its short letter c, or O_INIT + i) with its value, for gem-init. */
static void take_init(int c, const char *arg)
{
	const struct option *o = NULL;
	if (c >= O_INIT)
		o = &run_opts_long[c - O_INIT];
	else
		for (const struct option *p = run_opts_long; p->name; p++)
			if (p->val == c)
				o = p;
	if (!o)
		die_usage("unrecognized option '-%c'", c);
	if (argv_pushf(&C.init, "--%s", o->name) < 0 || (arg && argv_push(&C.init, arg) < 0))
		oom();
}

/* The option that getopt_long could not take (argv[optind - 1]), named without its value. */
static void bad_option(int c, char **argv)
{
	const char *a = argv[optind - 1];
	if (c == ':')
		die_usage("%.*s needs a value", (int)strcspn(a, "="), a);
	if (optopt && a[0] == '-' && a[1] != '-')
		die_usage("unrecognized option '-%c'", optopt);
	die_usage("unrecognized option '%.*s'", (int)strcspn(a, "="), a);
}

static int take_own(int c, const char *arg)
{
	switch (c) {
	case 'n': { long v;
		  if (num_long(arg, 1, LONG_MAX, &v) < 0)
			  die_usage("-n: not a positive integer: %s", arg);
		  if (v > RUN_MAX_WORKERS)
			  die_usage("-n: at most %d workers: %s", RUN_MAX_WORKERS, arg);
		  C.workers = (int)v;
		  C.workers_set = 1;
		  return 1; }
	case 't': C.steps = arg; return 1;
	case O_HOSTS: C.hosts = arg; return 1;
	case 'l': C.listen = arg; return 1;
	case O_RESUME: C.resume = 1; return 1;
	case O_TLS: C.tls = 1; return 1;
	case O_NO_TLS: C.tls = 0; return 1;
	case O_WORK_OPT: push(&C.work, arg); return 1;
	case O_SERVE_OPT: push(&C.serve, arg); return 1;
	case O_SLICES: { long v;
		  if (strspn(arg, "0123456789") != strlen(arg) || arg[0] == '0' ||
		      num_long(arg, 1, 64, &v) < 0)
			  die_usage("--slices: not an integer in [1, 64]: %s", arg);
		  C.slices = (int)v; return 1; }
	case O_SLICE_HOSTS: C.slice_hosts = arg; return 1;
	case O_CODEC: if (argv_pushf(&C.work, "--codec=%s", arg) < 0) oom(); return 1;
	case O_SSH: C.ssh = arg; return 1;
	case 'r': if (!strcmp(arg, "sgp")) C.sgp = 1; else take_init('r', arg); return 1;
	case 'q': C.quiet = 1; return 1;
	case 'h': usage(stdout); exit(0);
	case 'V': prog_print_version("gem-run"); exit(0);
	}
	return 0;
}

/* The command line into C; bad usage exits. */
static void parse(int argc, char **argv)
{
	struct option t[64];
	char letters[64];
	int c;
	options_table(t, sizeof t / sizeof *t, letters, sizeof letters);
	opterr = 0;
	while ((c = getopt_long(argc, argv, letters, t, NULL)) != -1) {
		if (c == '?' || c == ':')
			bad_option(c, argv);
		if (take_own(c, optarg))
			continue;
		take_init(c, optarg);
	}
	if (optind < argc)
		C.rundir = argv[optind++];
	if (optind < argc)
		die_usage("more than one RUNDIR");
	if (!C.rundir)
		die_usage("no RUNDIR given");
}

/* ---- children: started here or over ssh, looked after by one loop (role/launch) ---- */

static struct launch_set S = {.sigfd = -1};

static int open_append(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "gem-run: %s: %s\n", path, strerror(errno));
		exit(EXIT_JOB);
	}
	return fd;
}

/* A pipe whose both ends gem-run keeps from its children (close-on-exec). */
static void pipe_cloexec(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) < 0) {
		fprintf(stderr, "gem-run: pipe: %s\n", strerror(errno));
		exit(EXIT_JOB);
	}
}

/* Start argv here with io (launch_here); exits when it cannot be started. */
static struct launch_child *here(char *const argv[], struct launch_io io, const char *outfile)
{
	char err[GEM_ERRMAX];
	struct launch_child *c;
	if (launch_here(&S, argv, io, outfile, &c, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		exit(EXIT_JOB);
	}
	return c;
}

/* Start argv on host under ssh (launch_remote); exits when it cannot be started. */
static struct launch_child *remote(const char *host, int token, const char *outfile,
				   const char *errfile, char *const argv[])
{
	char err[GEM_ERRMAX];
	struct launch_child *c;
	if (launch_remote(&S, host, token, outfile, errfile, argv, &c, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		exit(EXIT_JOB);
	}
	return c;
}

static void on_signal(int sig) __attribute__((noreturn));

/* Look after the children until something happens or until passes; SIGINT, SIGTERM and SIGHUP
 * stop the run (on_signal), but while it is stopping. */
static void pump(double until)
{
	char err[GEM_ERRMAX];
	int sig = launch_pump(&S, until, err);
	if (sig < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		exit(EXIT_JOB);
	}
	if (sig > 0 && !S.stopping)
		on_signal(sig);
}

/* Wait for c to end (looking after the others meanwhile): its status. */
static int wait_child(struct launch_child *c)
{
	while (launch_running(c))
		pump(clock_mono() + 3600);
	return c->status;
}

/* Wait up to secs for c to end: 1 if it did. */
static int wait_child_for(struct launch_child *c, double secs)
{
	double until = clock_mono() + secs;
	while (launch_running(c) && clock_mono() < until)
		pump(until);
	return !launch_running(c);
}

/* Pause secs (the children looked after meanwhile). */
static void pause_for(double secs)
{
	double until = clock_mono() + secs;
	while (clock_mono() < until)
		pump(until);
}

/* Block the signals gem-run waits for, to read them from sigfd. */
static void signals_init(void)
{
	static const int stops[] = {SIGINT, SIGTERM, SIGHUP};
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGCHLD);
	/* one ignored when gem-run started (SIGINT in a background job) stays ignored: blocked,
	 * it would be queued instead */
	for (int i = 0; i < 3; i++) {
		struct sigaction old;
		if (sigaction(stops[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaddset(&s, stops[i]);
	}
	if (sigprocmask(SIG_BLOCK, &s, NULL) < 0 ||
	    (S.sigfd = signalfd(-1, &s, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
		fprintf(stderr, "gem-run: signalfd: %s\n", strerror(errno));
		exit(EXIT_JOB);
	}
	/* a child's stdin pipe read no more (it ended) is an error on write, not a death */
	signal(SIGPIPE, SIG_IGN);
}

/* ---- helpers that run a program and wait ---- */

/* A descriptor for a child's output that gem-run reads back once it ended. */
static int memfile(void)
{
	int fd = memfd_create("gem-run", MFD_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "gem-run: memfd_create: %s\n", strerror(errno));
		exit(EXIT_JOB);
	}
	return fd;
}

/* What fd (a memfile) holds, malloc'ed, a C string; fd closed. */
static char *slurp(int fd)
{
	char *s = NULL;
	size_t len = 0, cap = 0;
	ssize_t got;
	lseek(fd, 0, SEEK_SET);
	do {
		if (len + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 8192;
			if (!(s = realloc(s, cap)))
				oom();
		}
		got = read(fd, s + len, 4096);
		if (got > 0)
			len += (size_t)got;
	} while (got > 0);
	s[len] = 0;
	close(fd);
	return s;
}

/* Run argv here and wait: its status, its stdout and stderr into *out and *errtext
 * (malloc'ed; NULL: discarded). */
static int capture(char *const argv[], int in, char **out, char **errtext)
{
	int o = out ? memfile() : LAUNCH_NULL, e = errtext ? memfile() : LAUNCH_NULL;
	int rc = wait_child(here(argv, (struct launch_io){.in = in, .out = o, .err = e}, NULL));
	if (out)
		*out = slurp(o);
	if (errtext)
		*errtext = slurp(e);
	return rc;
}

/* PROG's complaint (text) as gem-run's own: its lines with the prefix "gem-run: WHO" and
 * without PROG's usage lines (the options were given to gem-run, whose usage line follows when
 * PROG says the usage was bad, status 2). */
static void relay(const char *prog, int status, const char *who, const char *text)
{
	size_t plen = strlen(prog);
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		int len = nl ? (int)(nl - l) : (int)strlen(l);
		int usage_l = (!strncmp(l, "usage: ", 7) && !strncmp(l + 7, prog, plen) && l[7 + plen] == ' ') ||
			      (!strncmp(l, "   or: ", 7) && !strncmp(l + 7, prog, plen) && l[7 + plen] == ' ');
		if (!usage_l) {
			if (!strncmp(l, prog, plen) && !strncmp(l + plen, ": ", 2))
				fprintf(stderr, "gem-run: %s%.*s\n", who, len - (int)plen - 2, l + plen + 2);
			else
				fprintf(stderr, "%.*s\n", len, l);
		}
		l += len + (nl != NULL);
	}
	if (status == EXIT_USAGE)
		fprintf(stderr, "%s\n", usage_line);
}

/* prog --check ARG... with more: exits as gem-run (its complaint as gem-run's) when prog
 * would refuse them. */
static void check_prog(const char *prog, struct argv *a, const struct argv *more)
{
	char *errtext;
	int rc;
	if (argv_pushv(a, more->v) < 0)
		oom();
	rc = capture(a->v, LAUNCH_NULL, NULL, &errtext);
	if (rc != 0) {
		char who[32];
		snprintf(who, sizeof who, "%s: ", prog);
		relay(prog, rc, who, errtext);
		exit(rc);
	}
	free(errtext);
	argv_free(a);
}

/* A path in RUNDIR (name a RUN_* name, its %d's filled); in a static ring of buffers. */
static const char *rpath(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *rpath(const char *fmt, ...)
{
	static char ring[8][PATH_MAX + 64];
	static int next;
	char name[256];
	char *out = ring[next++ % 8];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	if (run_dir_file(C.rundir, name, out, sizeof ring[0]) < 0) {
		fprintf(stderr, "gem-run: %s: path too long\n", C.rundir);
		exit(EXIT_USAGE);
	}
	return out;
}

/* Slice k's directory in RUNDIR, its name (run_slice_dir: a run of 0.1.0 has its own); in a
 * static ring of buffers. */
static const char *slice_dir(int k)
{
	static char ring[4][64];
	static int next;
	char *out = ring[next++ % 4];
	run_slice_dir(C.rundir, k, C.slices, out, sizeof ring[0]);
	return out;
}

static char rrun[PATH_MAX]; /* RUNDIR's absolute path: where it is on the other hosts */

/* The same path on the other hosts: RUNDIR's absolute path and name. */
static const char *rrpath(const char *name)
{
	static char ring[8][PATH_MAX + 64];
	static int next;
	char *out = ring[next++ % 8];
	run_dir_file(rrun, name, out, sizeof ring[0]);
	return out;
}

/* The last n lines of text on stderr, but the remote watchdog's first words. */
static void put_tail(const char *text, int n)
{
	const char *start[64];
	int k = 0;
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		if (strncmp(l, LAUNCH_REMOTE_START, strlen(LAUNCH_REMOTE_START)))
			start[k++ % 64] = l;
		l = nl ? nl + 1 : l + strlen(l);
	}
	for (int i = k > n ? k - n : 0; i < k; i++) {
		const char *l = start[i % 64];
		fprintf(stderr, "%.*s\n", (int)strcspn(l, "\n"), l);
	}
}

/* ---- the other hosts: every connection and every copy goes through rsh ---- */

/* Start cmd (a shell's command line) on host over the ssh command, with these streams. */
static struct launch_child *rsh(const char *host, const char *cmd, int in, int out, int err)
{
	char e[GEM_ERRMAX];
	struct argv a = {0};
	struct launch_child *c;
	if (launch_ssh_argv(C.ssh, C.ssh_timeout, host, cmd, &a, e) < 0) {
		fprintf(stderr, "gem-run: %s\n", e);
		exit(EXIT_USAGE);
	}
	c = here(a.v, (struct launch_io){.in = in, .out = out, .err = err}, NULL);
	argv_free(&a);
	return c;
}

/* A shell command line made by printf, its %s arguments quoted. */
static char *shell_cmd(const char *fmt, ...)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	va_list ap;
	if (!f)
		oom();
	va_start(ap, fmt);
	for (const char *p = fmt; *p; p++) {
		if (p[0] == '%' && p[1] == 's') {
			launch_quote(f, va_arg(ap, const char *));
			p++;
		} else {
			fputc(*p, f);
		}
	}
	va_end(ap);
	if (fclose(f) != 0)
		oom();
	return s;
}

/* The distinct hosts of a, in a (sorted, as the shell's sort -u). */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}
static void distinct(const struct argv *a, struct argv *out)
{
	struct argv all = {0};
	if (argv_pushv(&all, a->v) < 0)
		oom();
	if (all.n)
		qsort(all.v, (size_t)all.n, sizeof *all.v, cmp_str);
	for (int i = 0; i < all.n; i++)
		if (i == 0 || strcmp(all.v[i], all.v[i - 1]))
			push(out, all.v[i]);
	argv_free(&all);
}

/* After the i-th connection (from 0), a pause every 8: a few connections at a time, under
 * sshd's MaxStartups (10 unauthenticated connections before it starts dropping some). */
static void stagger(int i)
{
	if ((i + 1) % 8 == 0)
		pause_for(0.3);
}

/* Pre-flight: before anything starts there, each host is checked once, over one ssh: ssh
 * reaches it, prog (gem-work, gem-serve) is in the PATH of its ssh shell and, name given, the
 * host resolves name (the name the workers reach this host by). This is the one place where
 * a host is checked before a run starts: a check more is a test more in the script and a
 * message more for its exit status. Says what is wrong, by host; 0 or -1. */
static int preflight(const char *prog, const char *name, const struct argv *hosts)
{
	struct argv hs = {0};
	struct launch_child **c;
	int *errs, bad = 0;
	char *cmd = shell_cmd("command -v %s >/dev/null || exit 4\n"
			      "[ -z %s ] || ! command -v getent >/dev/null || getent hosts %s >/dev/null || exit 3",
			      prog, name ? name : "", name ? name : "");
	distinct(hosts, &hs);
	if (!(c = calloc((size_t)hs.n + 1, sizeof *c)) || !(errs = calloc((size_t)hs.n + 1, sizeof *errs)))
		oom();
	for (int i = 0; i < hs.n; i++) {
		errs[i] = memfile();
		c[i] = rsh(hs.v[i], cmd, LAUNCH_NULL, LAUNCH_NULL, errs[i]);
		stagger(i);
	}
	for (int i = 0; i < hs.n; i++) {
		int rc = wait_child(c[i]);
		char *text = slurp(errs[i]);
		if (rc == 3)
			fprintf(stderr, "gem-run: %s cannot resolve %s, the name the workers reach this host by;"
				" set GEM_HOST to a name or address that %s resolves\n", hs.v[i], name, hs.v[i]);
		else if (rc == 4)
			fprintf(stderr, "gem-run: %s: no %s in the PATH of its ssh shell\n", hs.v[i], prog);
		else if (rc != 0) {
			fprintf(stderr, "gem-run: cannot run a command on %s over ssh (exit status %d):\n",
				hs.v[i], rc);
			put_tail(text, 3);
		}
		bad |= rc != 0;
		free(text);
	}
	free(c);
	free(errs);
	free(cmd);
	argv_free(&hs);
	return bad ? -1 : 0;
}

/* Run cmd on host and wait: its status (stdin, stdout: /dev/null; stderr: gem-run's). */
static int rsh_wait(const char *host, const char *cmd)
{
	return wait_child(rsh(host, cmd, LAUNCH_NULL, LAUNCH_NULL, LAUNCH_KEEP));
}

/* A dataset given by the paths of its files (csv:, npy:, npz:, cifar: in the run's data
 * directory) must be readable at those paths on every host, where the workers read it:
 * gem-run copies no data (a run is small, a dataset need not be). Names each host and path
 * that lacks it, says how to put it there; 0 or -1. */
static int check_data_hosts(const struct argv *hosts)
{
	static const char *const kinds[] = {"csv:", "npy:", "npz:", "cifar:"};
	char err[GEM_ERRMAX], loc[PATH_MAX], *save = NULL;
	struct argv hs = {0}, paths = {0};
	struct run r;
	int bad = 0, kind = -1;
	if (run_open(C.rundir, &r, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		return -1;
	}
	snprintf(loc, sizeof loc, "%s", r.data_dir);
	run_close(&r);
	for (int k = 0; k < 4; k++)
		if (!strncmp(loc, kinds[k], strlen(kinds[k])))
			kind = k;
	if (kind < 0)
		return 0;
	for (char *p = strtok_r(loc + strlen(kinds[kind]), ",", &save); p; p = strtok_r(NULL, ",", &save))
		if (kind != 2 || paths.n == 0) /* npz: the names of its arrays follow its path */
			push(&paths, p);
	distinct(hosts, &hs);
	for (int i = 0; i < hs.n; i++)
		for (int j = 0; j < paths.n; j++) {
			char *cmd = shell_cmd("test -r %s", paths.v[j]);
			if (rsh_wait(hs.v[i], cmd) != 0) {
				fprintf(stderr, "gem-run: %s cannot read %s (the run's --data %.*s); gem-run copies"
					" no data: put it at the same path on %s (scp -r %s %s:%s) or on a file"
					" system %s shares, then gem-run --resume\n", hs.v[i], paths.v[j],
					(int)strlen(kinds[kind]), kinds[kind], hs.v[i], paths.v[j], hs.v[i],
					paths.v[j], hs.v[i]);
				bad = 1;
			}
			free(cmd);
		}
	argv_free(&hs);
	argv_free(&paths);
	return bad ? -1 : 0;
}

/* An external model's program (--model exec:CMD, gem-exec(7)) runs on every host where a
 * worker does: CMD's program (its first word after any VAR=value) must be a command there and
 * each absolute path in it must exist, or every worker there would fail at its first step.
 * Names each host and word that lacks it; 0 or -1. */
static int check_exec_hosts(const struct argv *hosts)
{
	char err[GEM_ERRMAX], line[EXEC_CMD_MAX], cmd[EXEC_CMD_MAX], *save = NULL;
	struct argv hs = {0}, words = {0};
	struct run r;
	int bad = 0, prog = -1;
	if (run_open(C.rundir, &r, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		return -1;
	}
	/* run.json's, copied before the run is closed */
	if (jget_strcpy(r.spec.model, "exec", cmd, sizeof cmd) != JGET_OK)
		cmd[0] = 0;
	snprintf(line, sizeof line, "%s", cmd);
	run_close(&r);
	for (char *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (prog < 0 && !strchr(w, '='))
			prog = words.n;
		if (words.n == prog || w[0] == '/')
			push(&words, w);
	}
	if (prog < 0)
		return 0;
	distinct(hosts, &hs);
	for (int i = 0; i < hs.n; i++)
		for (int j = 0; j < words.n; j++) {
			char *test = shell_cmd(j == prog ? "command -v %s >/dev/null" : "test -e %s", words.v[j]);
			if (rsh_wait(hs.v[i], test) != 0) {
				fprintf(stderr, "gem-run: %s: %s %s, which the run's model runs (--model exec:%s,"
					" gem-exec(7)): every worker there would fail; install it or put it at the"
					" same path there\n", hs.v[i], j == prog ? "no command" : "no file",
					words.v[j], cmd);
				bad = 1;
			}
			free(test);
		}
	argv_free(&hs);
	argv_free(&words);
	return bad ? -1 : 0;
}

/* The distinct hosts that do not see RUNDIR at its absolute path (a marker made there is not
 * found), into out: they get copies of the run's files. */
static int hosts_apart(const struct argv *hosts, struct argv *out)
{
	struct argv hs = {0};
	char name[64];
	int fd;
	snprintf(name, sizeof name, RUN_HOST_MARKER, (int)getpid());
	if ((fd = open(rpath("%s", name), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
		return -1;
	close(fd);
	distinct(hosts, &hs);
	for (int i = 0; i < hs.n; i++) {
		char *cmd = shell_cmd("test -e %s", rrpath(name));
		if (rsh_wait(hs.v[i], cmd) != 0)
			push(out, hs.v[i]);
		free(cmd);
	}
	unlink(rpath("%s", name));
	argv_free(&hs);
	return 0;
}

/* A tar stream between here and host: the files names of RUNDIR to host's copy (to), or back
 * (from; stderr: /dev/null when quiet). 0 when both ends did their part. */
static int copy(const char *host, int to, const struct argv *names, int quiet)
{
	struct argv tar = {0};
	struct launch_child *a, *b;
	char *cmd, *list = NULL;
	size_t len = 0;
	int p[2];
	FILE *f = open_memstream(&list, &len);
	if (!f)
		oom();
	for (int i = 0; i < names->n; i++) {
		fputc(' ', f);
		launch_quote(f, names->v[i]);
	}
	if (fclose(f) != 0)
		oom();
	pipe_cloexec(p);
	if (to) {
		cmd = shell_cmd("mkdir -p %s && tar -C %s -xf -", rrun, rrun);
		if (argv_pushv(&tar, (char *[]){"tar", "-C", (char *)C.rundir, "-cf", "-", NULL}) < 0 ||
		    argv_pushv(&tar, names->v) < 0)
			oom();
		a = here(tar.v, (struct launch_io){.in = LAUNCH_NULL, .out = p[1], .err = LAUNCH_KEEP}, NULL);
		b = rsh(host, cmd, p[0], LAUNCH_NULL, LAUNCH_KEEP);
	} else {
		char *head = shell_cmd("tar -C %s -cf -", rrun);
		if (asprintf(&cmd, "%s%s", head, list) < 0)
			oom();
		free(head);
		a = rsh(host, cmd, LAUNCH_NULL, p[1], quiet ? LAUNCH_NULL : LAUNCH_KEEP);
		if (argv_pushv(&tar, (char *[]){"tar", "-C", (char *)C.rundir, "-xf", "-", NULL}) < 0)
			oom();
		b = here(tar.v, (struct launch_io){.in = p[0], .out = LAUNCH_NULL,
						   .err = quiet ? LAUNCH_NULL : LAUNCH_KEEP}, NULL);
	}
	close(p[0]);
	close(p[1]);
	free(cmd);
	free(list);
	argv_free(&tar);
	return wait_child(a) == 0 && wait_child(b) == 0 ? 0 : -1;
}

/* ---- the run's files ---- */

/* RUNDIR/tls-cert.pem and its key RUNDIR/tls-key.pem, a certificate made for this run, valid for
 * every name of names (a host name or an IPv4 address), localhost and 127.0.0.1, its own CA;
 * exits after openssl's complaint when it cannot be made. */
static void make_cert(const struct argv *names)
{
	struct argv a = {0}, seen = {0};
	char *san = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&san, &len);
	int e;
	if (!f)
		oom();
	fputs("subjectAltName=", f);
	for (int i = 0; i < names->n; i++) {
		const char *h = names->v[i];
		int ip = strspn(h, "0123456789.") == strlen(h), dup = 0;
		for (int j = 0; j < seen.n; j++)
			dup |= !strcmp(seen.v[j], h);
		if (dup)
			continue;
		push(&seen, h);
		fprintf(f, "%s:%s,", ip ? "IP" : "DNS", h);
	}
	fputs("DNS:localhost,IP:127.0.0.1", f);
	if (fclose(f) != 0)
		oom();
	if (argv_pushv(&a, (char *[]){"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
				     "30", "-subj", NULL}) < 0 ||
	    argv_pushf(&a, "/CN=%s", names->n ? names->v[0] : "localhost") < 0 ||
	    argv_pushv(&a, (char *[]){"-addext", san, "-keyout", (char *)rpath(RUN_TLS_KEY), "-out",
				     (char *)rpath(RUN_TLS_CERT), NULL}) < 0)
		oom();
	e = open(rpath(RUN_OPENSSL_ERR), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (e < 0 || wait_child(here(a.v, (struct launch_io){.in = LAUNCH_NULL, .out = LAUNCH_NULL,
						     .err = e, .umask_set = 1, .umask = 077}, NULL)) != 0) {
		char *text = NULL;
		size_t n;
		if (fs_read_all(rpath(RUN_OPENSSL_ERR), (void **)&text, &n, 1 << 20, NULL) == 0)
			fputs(text, stderr);
		fputs("gem-run: openssl could not make a certificate\n", stderr);
		exit(EXIT_JOB);
	}
	close(e);
	free(san);
	argv_free(&a);
	argv_free(&seen);
}

/* A fresh bearer token in RUNDIR/token (fs_make_token) and in the set of children (S.token),
 * which hands it to the remote programs on their standard input; exits when it cannot. */
static void make_token(void)
{
	char err[GEM_ERRMAX], *t;
	if (fs_make_token(rpath(RUN_TOKEN), &t, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		exit(EXIT_JOB);
	}
	S.token = t;
}

/* Make the run as gem-init would, with its options and --workers N (in this process: gem-run is
 * a program over the same library); exits as gem-init would have, its complaint gem-run's. */
static void init_run(void)
{
	char err[GEM_ERRMAX], n[16];
	struct run_opts o;
	struct run_spec spec;
	int rc = 0, c, value;
	run_opts_init(&o);
	snprintf(n, sizeof n, "%d", C.workers);
	rc = run_opts_take(&o, 'n', n, err);
	for (int i = 0; rc == 0 && i < C.init.n; i++) {
		c = run_opts_match(C.init.v[i], &value);
		rc = run_opts_take(&o, c, value ? C.init.v[++i] : NULL, err);
	}
	if (rc < 0)
		die_usage("%s", err);
	log_quiet();
	prog_blas_init();
	rc = run_make_new(C.rundir, &o, &spec, err);
	run_spec_free(&spec);
	if (rc < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		if (rc == GEM_EUSAGE)
			fprintf(stderr, "%s\n", usage_line);
		exit(prog_exit(rc));
	}
}

/* How the run in RUNDIR stands (as gem-serve --check says it): 1 complete (*version), 0 it can
 * be served; -1 after saying why it cannot be (it diverged, its run.json is not sound). With
 * C.steps, a budget other than the run's makes it go on. */
static int run_state(uint64_t *version)
{
	char err[GEM_ERRMAX];
	struct run r;
	struct run_end e;
	uint64_t steps = 0;
	int rc, rebudget = 0;
	if ((rc = run_open(C.rundir, &r, err)) == 0) {
		if (C.steps && num_u64(C.steps, &steps) == 0)
			rebudget = steps != r.spec.train.steps;
		run_close(&r);
		rc = run_end_read(C.rundir, &e, err);
	}
	if (rc < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		return -1;
	}
	*version = e.version;
	return e.how == RUN_COMPLETE && !rebudget;
}

/* The version in dir's params.gem, as text ("?" when it cannot be read). */
static const char *version_text(const char *dir, char *buf, size_t cap)
{
	struct run_progress p;
	if (run_params_progress(dir, &p, NULL) < 0)
		return "?";
	snprintf(buf, cap, "%llu", (unsigned long long)p.version);
	return buf;
}

/* Say what stopped the run (what), the version each server checkpointed, and the command that
 * continues the run. */
static void checkpointed(const char *what)
{
	char v[32];
	if (C.slices == 1) {
		fprintf(stderr, "gem-run: %s; the server checkpointed at version %s\n", what,
			version_text(C.rundir, v, sizeof v));
	} else {
		fprintf(stderr, "gem-run: %s; the slices checkpointed at versions ", what);
		for (int k = 0; k < C.slices; k++)
			fprintf(stderr, "%s%s", k ? ", " : "",
				version_text(rpath("%s", slice_dir(k)), v, sizeof v));
		fputc('\n', stderr);
	}
	fprintf(stderr, "gem-run: gem-run --resume -n %d", C.workers);
	if (C.steps)
		fprintf(stderr, " --steps %s", C.steps);
	if (C.hosts)
		fprintf(stderr, " --hosts %s", C.hosts);
	if (C.slices != 1)
		fprintf(stderr, " --slices %d", C.slices);
	if (C.slice_hosts)
		fprintf(stderr, " --slice-hosts %s", C.slice_hosts);
	fprintf(stderr, " %s continues the run\n", C.rundir);
}

/* Say that worker or node i (on its host, if any) failed with status, and the end of its log. */
static void slot_failed(const char *what, int i, int status, const char *log)
{
	char *text = NULL;
	size_t len;
	fprintf(stderr, "gem-run: %s %d", what, i);
	if (C.slots.n)
		fprintf(stderr, " on %s", C.slots.v[i % C.slots.n]);
	if (status == 255 && C.slots.n)
		fprintf(stderr, " failed (ssh failed, exit status 255):\n");
	else if (status > 128 && status != 255)
		fprintf(stderr, " failed (killed by signal %d):\n", status - 128);
	else
		fprintf(stderr, " failed (exit status %d):\n", status);
	if (fs_read_all(log, (void **)&text, &len, (size_t)1 << 30, NULL) == 0)
		put_tail(text, 3);
	free(text);
}

/* ---- a served run ---- */

static struct launch_child *servers[64];
static char *serve_errs[64]; /* their messages' files */
static int nservers, served; /* served: a server started, so it checkpoints when stopped */
static struct argv copy_slice_hosts, copy_hosts;
static const char *server_host;
static int public_, tls_on;

/* Stop everything gem-run started, the servers first: they checkpoint and answer the workers
 * still running, remote ones too, that the run is over (410), so they leave; then what is left
 * here is stopped. Once; at exit too. */
static void cleanup(void)
{
	static int done;
	if (done)
		return;
	done = S.stopping = 1;
	for (int k = 0; k < nservers; k++) {
		launch_stop(servers[k]);
		wait_child_for(servers[k], 11);
	}
	for (int i = 0; i < S.n; i++)
		launch_stop(S.kids[i]);
	for (int i = 0; i < S.n; i++)
		wait_child(S.kids[i]);
	if (C.sgp && C.rundir)
		run_node_files_remove(C.rundir, 1, NULL); /* the handshake's, as gem-serve its url */
}

/* Each slice's directory back from a host that does not share RUNDIR (its server stopped). */
static void copy_slices_back(void)
{
	for (int k = 0; k < C.slices && copy_slice_hosts.n; k++) {
		const char *h = C.shosts.v[k % C.shosts.n];
		struct argv names = {0};
		int apart = 0;
		for (int j = 0; j < copy_slice_hosts.n; j++)
			apart |= !strcmp(copy_slice_hosts.v[j], h);
		if (!apart)
			continue;
		if (argv_push(&names, slice_dir(k)) < 0)
			oom();
		if (copy(h, 0, &names, 0) < 0)
			fprintf(stderr, "gem-run: cannot copy slice %d back from %s\n", k, h);
		argv_free(&names);
	}
}

/* A signal stops the run: everything stopped, and once a server has checkpointed, where it
 * stands and how to go on. */
static void on_signal(int sig)
{
	const char *how = sig == SIGINT ? "interrupted" : sig == SIGTERM ? "terminated" : "hung up";
	fprintf(stderr, "gem-run: %s; stopping\n", how);
	cleanup();
	if (served && !C.sgp) {
		copy_slices_back();
		checkpointed(how);
	}
	exit(sig == SIGINT ? 130 : sig == SIGTERM ? 143 : 129);
}

/* A server of the run has stopped on its own with status (its messages in errf): what it said,
 * and gem-run's exit (2 when the usage was bad, as --serve-opt's). */
static void serve_failed(int status, const char *errf)
{
	char *text = NULL;
	size_t len;
	if (fs_read_all(errf, (void **)&text, &len, (size_t)1 << 30, NULL) == 0)
		relay("gem-serve", status, "gem-serve: ", text);
	free(text);
	if (status == EXIT_USAGE)
		exit(EXIT_USAGE);
	fprintf(stderr, "gem-run: gem-serve failed (exit status %d); no result\n", status);
	exit(EXIT_JOB);
}

/* The options a server or worker here gets for the token and TLS. */
static void push_token(struct argv *a)
{
	if (C.hosts || C.slice_hosts || public_)
		if (argv_push(a, "--token-file") < 0 || argv_push(a, rpath(RUN_TOKEN)) < 0)
			oom();
}

/* gem-serve [--check] and the options of server k here: where it listens, its token and
 * certificate, its slice. */
static void serve_argv(struct argv *a, int check, int k)
{
	push(a, "gem-serve");
	if (check)
		push(a, "--check");
	push(a, "--listen");
	push(a, C.listen);
	if (public_)
		push(a, "--public");
	push_token(a);
	if (tls_on && argv_pushv(a, (char *[]){"--tls-cert", (char *)rpath(RUN_TLS_CERT), "--tls-key",
					      (char *)rpath(RUN_TLS_KEY), NULL}) < 0)
		oom();
	if (C.slices != 1 && (argv_push(a, "--slice") < 0 || argv_pushf(a, "%d/%d", k, C.slices) < 0))
		oom();
}

/* Before anything is made: what a server or a worker would refuse, the run to resume. */
static void served_checks(void)
{
	struct argv a = {0};
	serve_argv(&a, 1, 0);
	check_prog("gem-serve", &a, &C.serve);
	push(&a, "gem-work");
	push(&a, "--check");
	push(&a, "-q");
	push(&a, "--server");
	push(&a, C.rundir);
	push_token(&a);
	if (tls_on) {
		push(&a, "--cacert");
		push(&a, rpath(RUN_TLS_CERT));
	}
	check_prog("gem-work", &a, &C.work);
}

/* --resume: the run must be there, and neither complete (said so: exit 0) nor diverged; it
 * gets workers that it waits for (no more than it was made for). */
static void resume_checks(void)
{
	char err[GEM_ERRMAX];
	struct run r;
	uint64_t v;
	int st;
	if (C.init.n)
		die_usage("--resume takes no gem-init options (%s is one): the run keeps its own; to "
			  "extend it, give --resume --steps S (S steps per worker in all)", C.init.v[0]);
	if (access(rpath(RUN_JSON), F_OK) < 0) {
		fprintf(stderr, "gem-run: %s: not a run (nothing to resume)\n", C.rundir);
		exit(EXIT_USAGE);
	}
	if ((st = run_state(&v)) < 0)
		exit(EXIT_USAGE);
	if (st == 1) {
		fprintf(stderr, "gem-run: %s is complete (version %llu)\n", C.rundir, (unsigned long long)v);
		exit(0);
	}
	if (run_open(C.rundir, &r, err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		exit(EXIT_USAGE);
	}
	int planned = r.spec.rule.nworkers;
	if (planned > 0 && !C.workers_set)
		C.workers = planned;
	/* the server ends the run once the workers it was made for are done: one more would
	 * find it gone, and the run said complete without it */
	if (planned > 0 && C.workers > planned) {
		fprintf(stderr, "gem-run: %s: a run of %d worker%s (gem-init --workers), which its server "
			"waits for alone: --resume -n %d would start %d it does not; resume with -n %d or "
			"fewer, or make a run of %d\n", C.rundir, planned, GEM_S(planned),
			C.workers, C.workers - planned, planned, C.workers);
		run_close(&r);
		exit(EXIT_USAGE);
	}
	run_close(&r);
}

/* --slice-hosts: the run (run.json, params.gem, the token, the certificate and its key, and
 * with --resume the slices' directories) to every slice host that does not share RUNDIR, at
 * the same path; those hosts give their slices back at the end (copy_slices_back). */
static void copy_slices_out(void)
{
	if (hosts_apart(&C.shosts, &copy_slice_hosts) < 0)
		exit(EXIT_JOB);
	for (int i = 0; i < copy_slice_hosts.n; i++) {
		const char *h = copy_slice_hosts.v[i];
		struct argv files = {0}, stale = {0};
		char *cmd = NULL;
		if (argv_pushv(&files, (char *[]){RUN_JSON, RUN_PARAMS, RUN_TOKEN, NULL}) < 0 ||
		    (tls_on && argv_pushv(&files, (char *[]){RUN_TLS_CERT, RUN_TLS_KEY, NULL}) < 0))
			oom();
		for (int k = 0; k < C.slices; k++) {
			char name[64];
			struct stat st;
			if (strcmp(C.shosts.v[k % C.shosts.n], h))
				continue;
			snprintf(name, sizeof name, RUN_SLICE_DIR_OLD, k, C.slices); /* older spelling */
			/* a new run's slice must not resume what an earlier run left on that host */
			push(&stale, rrpath(name));
			snprintf(name, sizeof name, "%s", slice_dir(k));
			push(&stale, rrpath(name));
			if (stat(rpath("%s", name), &st) == 0 && S_ISDIR(st.st_mode))
				push(&files, name);
		}
		if (!C.resume) {
			char *list = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&list, &len);
			if (!f)
				oom();
			fputs("rm -rf", f);
			for (int j = 0; j < stale.n; j++) {
				fputc(' ', f);
				launch_quote(f, stale.v[j]);
			}
			fclose(f);
			cmd = list;
			if (rsh_wait(h, cmd) != 0) {
				fprintf(stderr, "gem-run: cannot clear %s:%s\n", h, rrun);
				exit(EXIT_JOB);
			}
		}
		if (copy(h, 1, &files, 0) < 0) {
			fprintf(stderr, "gem-run: cannot copy the run to %s\n", h);
			exit(EXIT_JOB);
		}
		free(cmd);
		argv_free(&files);
		argv_free(&stale);
	}
}

/* Before anything starts: every host can be reached, runs gem-work (or gem-serve) and resolves
 * this host's name; then the run is made, its data checked on the hosts, its certificate and
 * token made, and copied where they are needed. */
static void served_prepare(void)
{
	if (C.hosts && preflight("gem-work", server_host, &C.slots) < 0)
		exit(EXIT_JOB);
	if (C.shosts.n && preflight("gem-serve", NULL, &C.shosts) < 0)
		exit(EXIT_JOB);
	if (!C.resume)
		init_run();
	if (C.hosts && (check_data_hosts(&C.slots) < 0 || check_exec_hosts(&C.slots) < 0))
		exit(EXIT_JOB);
	if (!realpath(C.rundir, rrun)) {
		fprintf(stderr, "gem-run: %s: %s\n", C.rundir, strerror(errno));
		exit(EXIT_JOB);
	}
	if (tls_on) {
		/* for this host's name and the slices' hosts; workers trust it alone */
		struct argv names = {0};
		push(&names, server_host);
		if (argv_pushv(&names, C.shosts.v) < 0)
			oom();
		make_cert(&names);
		argv_free(&names);
		if (C.hosts) {
			struct argv apart = {0}, cert = {0};
			if (hosts_apart(&C.slots, &apart) < 0)
				exit(EXIT_JOB);
			push(&cert, RUN_TLS_CERT);
			for (int i = 0; i < apart.n; i++)
				if (copy(apart.v[i], 1, &cert, 0) < 0) {
					fprintf(stderr, "gem-run: cannot copy the certificate to %s\n", apart.v[i]);
					exit(EXIT_JOB);
				}
			argv_free(&apart);
			argv_free(&cert);
		}
	}
	if (C.hosts || C.slice_hosts || public_)
		make_token();
	if (C.shosts.n)
		copy_slices_out();
}

/* Wait for c's first line (its URL) for up to secs: 1 when it came, 0 when c ended first (or
 * the time passed: then c is still running). */
static int wait_line(struct launch_child *c, double secs)
{
	double until = clock_mono() + secs;
	while (!c->got_line && (launch_running(c) || c->retry_at > 0 || c->out >= 0) && clock_mono() < until)
		pump(until);
	return c->got_line;
}

/* scheme://host:port of a URL scheme://anything:port (a server listening on every address is
 * reached by its host's name), appended to urls with a comma. */
static void url_on(char *urls, size_t cap, const char *url, const char *host)
{
	const char *colon = strrchr(url, ':'), *sep = strstr(url, "://");
	size_t len = strlen(urls);
	if (host && colon && sep)
		snprintf(urls + len, cap - len, "%s%.*s://%s%s", len ? "," : "", (int)(sep - url), url, host,
			 colon);
	else
		snprintf(urls + len, cap - len, "%s%s", len ? "," : "", url);
}

/* Slice k's server over ssh on its host of --slice-hosts: it listens on every address (the
 * port of --listen) behind the run's token and prints its URL into RUNDIR/serve-K.url. */
static void start_remote_server(int k, char *urls, size_t cap)
{
	const char *h = C.shosts.v[k % C.shosts.n], *port = strrchr(C.listen, ':');
	const char *out = rpath(RUN_SLICE_URL, k), *errf = rpath(RUN_SLICE_ERR, k);
	struct argv a = {0};
	int fd;
	if (argv_pushv(&a, (char *[]){"gem-serve", "--listen", NULL}) < 0 ||
	    argv_pushf(&a, "0.0.0.0%s", port ? port : ":0") < 0 ||
	    argv_pushv(&a, (char *[]){"--public", "--token-file", "/dev/stdin", NULL}) < 0 ||
	    (tls_on && argv_pushv(&a, (char *[]){"--tls-cert", (char *)rrpath(RUN_TLS_CERT), "--tls-key",
						(char *)rrpath(RUN_TLS_KEY), NULL}) < 0) ||
	    argv_push(&a, "--slice") < 0 || argv_pushf(&a, "%d/%d", k, C.slices) < 0 ||
	    argv_pushv(&a, C.serve.v) < 0 || argv_push(&a, rrun) < 0)
		oom();
	for (int i = 0; i < 2; i++)
		if ((fd = open(i ? errf : out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) >= 0)
			close(fd);
	servers[nservers] = remote(h, 1, out, errf, a.v);
	if (!(serve_errs[nservers++] = strdup(errf)))
		oom();
	served = 1;
	argv_free(&a);
	if (!wait_line(servers[k], 60)) {
		if (!launch_running(servers[k]))
			serve_failed(servers[k]->status, errf);
		fprintf(stderr, "gem-run: gem-serve did not start on %s\n", h);
		exit(EXIT_JOB);
	}
	url_on(urls, cap, servers[k]->line, h);
}

/* Server k here (of K, slice k's files in RUNDIR/slice-k-of-K/). */
static void start_local_server(int k, char *urls, size_t cap)
{
	const char *errf = C.slices == 1 ? rpath(RUN_SERVE_ERR) : rpath(RUN_SLICE_ERR, k);
	struct argv a = {0};
	int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (e < 0) {
		fprintf(stderr, "gem-run: %s: %s\n", errf, strerror(errno));
		exit(EXIT_JOB);
	}
	serve_argv(&a, 0, k);
	if (argv_pushv(&a, C.serve.v) < 0 || argv_push(&a, C.rundir) < 0)
		oom();
	servers[nservers] = here(a.v, (struct launch_io){.in = LAUNCH_NULL, .err = e}, "");
	if (!(serve_errs[nservers++] = strdup(errf)))
		oom();
	served = 1;
	close(e);
	argv_free(&a);
	/* it prints its URL once it listens (and has written server.url) */
	if (!wait_line(servers[k], 30)) {
		if (!launch_running(servers[k]))
			serve_failed(wait_child(servers[k]), errf);
		fputs("gem-run: gem-serve did not start\n", stderr);
		exit(EXIT_JOB);
	}
	/* workers on other hosts reach it by this host's name */
	url_on(urls, cap, servers[k]->line, C.hosts ? server_host : NULL);
}

static struct launch_child *workers[RUN_MAX_WORKERS];

/* Worker i, over ssh on its slot's host (the token on its standard input) or here. */
static void start_worker(int i, const char *urls)
{
	struct argv a = {0};
	if (argv_pushv(&a, (char *[]){"gem-work", "-q", "--server", (char *)urls, "--worker-id", NULL}) < 0 ||
	    argv_pushf(&a, "%d", i) < 0)
		oom();
	if (C.slots.n)
		push(&a, "--token-file"), push(&a, "/dev/stdin");
	else
		push_token(&a);
	if (tls_on)
		push(&a, "--cacert"), push(&a, rrpath(RUN_TLS_CERT));
	if (argv_pushv(&a, C.work.v) < 0)
		oom();
	if (C.slots.n) {
		const char *log = rpath(RUN_WORKER_LOG, i);
		workers[i] = remote(C.slots.v[i % C.slots.n], 1, log, log, a.v);
		stagger(i);
	} else {
		int fd = open_append(rpath(RUN_WORKER_LOG, i));
		workers[i] = here(a.v, (struct launch_io){.in = LAUNCH_NULL, .out = fd, .err = fd}, NULL);
		close(fd);
	}
	argv_free(&a);
}

/* The server's progress line (GET /v1/stats "progress": version, samples out of the run's
 * total, updates/s, ETA, smoothed loss, computed by role/progress as every gem program does)
 * and its workers, on stderr; 0, or -1 when the server gave none (it stopped). */
static int show_progress(struct httpc **h, const char *urls)
{
	char url[1024], err[GEM_ERRMAX], text[1200], out[1400];
	struct httpc_resp r = {0};
	struct proto_stats st;
	json_t *j = NULL;
	int rc = -1;
	if (!*h) {
		snprintf(url, sizeof url, "%.*s", (int)strcspn(urls, ","), urls);
		if (httpc_new(url, NULL, 2000, h, err) < 0 ||
		    (tls_on && httpc_set_cacert(*h, rpath(RUN_TLS_CERT), err) < 0))
			return -1;
	}
	if (httpc_get(*h, "/v1/stats", &r, err) == 0 && (j = json_loadb(r.body, r.len, 0, NULL)) &&
	    proto_stats_from_json(j, &st, err) == 0 && st.progress.line) {
		snprintf(text, sizeof text, "%.1000s  %d worker%s", st.progress.line, st.active,
			 GEM_S(st.active));
		fputs(progress_show_text(&C.show, "gem-run", text, out, sizeof out), stderr);
		rc = 0;
	}
	json_decref(j);
	httpc_resp_free(&r);
	return rc;
}

/* Wait for every worker, showing the progress meanwhile: how many failed (each said). */
static int watch_workers(const char *urls)
{
	struct httpc *h = NULL;
	int failed = 0, live = C.show.mode != PROGRESS_OFF;
	for (;;) {
		int left = 0;
		for (int i = 0; i < C.workers; i++)
			left += launch_running(workers[i]);
		if (!left)
			break;
		/* the next line is due every seconds after the last */
		pump(live && C.show.last >= 0 ? C.show.last + C.show.every : clock_mono() + (live ? 0 : 3600));
		if (live && progress_show_due(&C.show, clock_mono()) && show_progress(&h, urls) < 0)
			live = 0;
	}
	httpc_free(h);
	for (int i = 0; i < C.workers; i++)
		if (workers[i]->status != 0) {
			failed++;
			slot_failed("worker", i, workers[i]->status, rpath(RUN_WORKER_LOG, i));
		}
	return failed;
}

/* The servers, once every worker has left: they stop by themselves and write their final
 * checkpoints (else, as with --keep-running, or when a worker failed and they would wait for
 * it, they are stopped at once, and checkpoint). The first that failed on its own: *bad. */
static void stop_servers(int failed, int *bad_status, const char **bad_err)
{
	for (int k = 0; k < nservers; k++) {
		int alone = !failed && wait_child_for(servers[k], 10);
		if (!alone)
			launch_stop(servers[k]);
		wait_child(servers[k]);
		if (alone && servers[k]->status != 0 && !*bad_err) {
			*bad_status = servers[k]->status;
			*bad_err = serve_errs[k];
		}
	}
}

/* The server's summary of the run (slice 0's, for a sliced run) as gem-run's. */
static void server_summary(void)
{
	char *text = NULL, *last = NULL;
	size_t len;
	if (fs_read_all(serve_errs[0], (void **)&text, &len, (size_t)1 << 30, NULL) < 0)
		return;
	for (char *l = text; *l;) {
		char *nl = strchr(l, '\n');
		if (!strncmp(l, "gem-serve: done: ", 17) || !strncmp(l, "gem-serve: failed: ", 19) ||
		    !strncmp(l, "gem-serve: interrupted: ", 24))
			last = l;
		if (!nl)
			break;
		l = nl + 1;
	}
	if (last) {
		char *rest = strchr(last + 11, ':') + 2;
		fprintf(stderr, "gem-run: server: %.*s\n", (int)strcspn(rest, "\n"), rest);
	}
	free(text);
}

/* gem-eval ARG RUNDIR (ARG NULL: none): its TSV is the result; 0 or 1. */
static int evaluate(const char *arg)
{
	char *argv[] = {"gem-eval", (char *)(arg ? arg : C.rundir), arg ? (char *)C.rundir : NULL, NULL};
	return wait_child(here(argv, (struct launch_io){.in = LAUNCH_NULL, .out = LAUNCH_KEEP,
							.err = LAUNCH_KEEP}, NULL)) == 0 ? 0 : EXIT_JOB;
}

static int served_run(void)
{
	char urls[8192] = "";
	const char *bad_err = NULL;
	int failed, bad_status = 0;
	uint64_t v;
	served_checks();
	if (C.resume)
		resume_checks();
	served_prepare();
	for (int k = 0; k < C.slices; k++) {
		if (C.shosts.n) {
			start_remote_server(k, urls, sizeof urls);
		} else {
			char sdir[PATH_MAX + 64], url[PATH_MAX + 64];
			snprintf(sdir, sizeof sdir, "%s", C.slices == 1 ? C.rundir : rpath("%s", slice_dir(k)));
			run_dir_file(sdir, RUN_SERVER_URL, url, sizeof url);
			unlink(url);
			start_local_server(k, urls, sizeof urls);
		}
	}
	if (!C.quiet)
		fprintf(stderr, "gem-run: %s served at %s; starting %d worker%s\n", C.rundir, urls, C.workers,
			GEM_S(C.workers));
	for (int i = 0; i < C.workers; i++)
		start_worker(i, urls);
	failed = watch_workers(urls);
	stop_servers(failed, &bad_status, &bad_err);
	copy_slices_back();
	fputs(progress_show_end(&C.show), stderr);
	if (!C.quiet)
		server_summary();
	if (failed) {
		/* no TSV: it would read as the run's result; a run that diverged is said so, not
		 * resumed */
		char what[128];
		snprintf(what, sizeof what, "%d of %d worker%s failed", failed, C.workers, GEM_S(C.workers));
		if (run_state(&v) >= 0)
			checkpointed(what);
		return EXIT_JOB;
	}
	/* a server that stopped on its own with an error (idle timeout, a failed checkpoint) */
	if (bad_err)
		serve_failed(bad_status, bad_err);
	return evaluate(NULL);
}

/* ---- SGP: N nodes and no server ---- */

/* The options every node gets: where the run is (here or at its absolute path), how it listens
 * and is reached. */
static void node_argv(struct argv *a, int i, const char *dir, int remote_)
{
	const char *tok = remote_ ? rrpath(RUN_TOKEN) : rpath(RUN_TOKEN);
	const char *peers = remote_ ? rrpath(RUN_PEERS) : rpath(RUN_PEERS);
	if (argv_pushv(a, (char *[]){"gem-work", "-q", NULL}) < 0 ||
	    argv_pushv(a, (char *[]){"--rule", "sgp", "--run", (char *)dir, "--listen",
				    (char *)C.listen, NULL}) < 0 ||
	    (public_ && argv_push(a, "--public") < 0) ||
	    ((C.hosts || public_) && argv_pushv(a, (char *[]){"--token-file", (char *)tok, NULL}) < 0))
		oom();
	if (tls_on) {
		const char *cert = remote_ || rrun[0] ? rrpath(RUN_TLS_CERT) : rpath(RUN_TLS_CERT);
		const char *key = remote_ || rrun[0] ? rrpath(RUN_TLS_KEY) : rpath(RUN_TLS_KEY);
		if (argv_pushv(a, (char *[]){"--tls-cert", (char *)cert, "--tls-key", (char *)key, "--cacert",
					    (char *)cert, NULL}) < 0)
			oom();
	}
	if (argv_push(a, "--node") < 0 || argv_pushf(a, "%d", i) < 0 ||
	    argv_pushv(a, (char *[]){"--peers-file", (char *)peers, NULL}) < 0 || argv_pushv(a, C.work.v) < 0)
		oom();
}

/* Before anything is made: what the nodes would refuse, and every host; then the run, and its
 * files where the nodes need them. */
static void sgp_prepare(void)
{
	char err[GEM_ERRMAX];
	struct argv a = {0}, files = {0}, none = {0};
	if (!strstr(C.listen, ":0") || strcmp(strrchr(C.listen, ':'), ":0"))
		die_usage("--listen: with --rule sgp the port must be 0 (each node picks a free one)");
	node_argv(&a, 0, C.rundir, 0);
	/* gem-work --check -q ...: what the nodes would refuse */
	free(a.v[1]);
	if (!(a.v[1] = strdup("--check")) || argv_push(&none, "-q") < 0)
		oom();
	check_prog("gem-work", &a, &none);
	argv_free(&none);
	if (C.hosts && preflight("gem-work", NULL, &C.slots) < 0)
		exit(EXIT_JOB);
	init_run();
	if (C.hosts && (check_data_hosts(&C.slots) < 0 || check_exec_hosts(&C.slots) < 0))
		exit(EXIT_JOB);
	if (run_node_files_remove(C.rundir, 0, err) < 0 || !realpath(C.rundir, rrun)) {
		fprintf(stderr, "gem-run: %s\n", rrun[0] ? err : strerror(errno));
		exit(EXIT_JOB);
	}
	if (C.hosts || public_)
		make_token();
	if (argv_pushv(&files, (char *[]){RUN_JSON, RUN_PARAMS, NULL}) < 0 ||
	    ((C.hosts || public_) && argv_push(&files, RUN_TOKEN) < 0))
		oom();
	if (tls_on) {
		make_cert(&C.slots);
		if (argv_pushv(&files, (char *[]){RUN_TLS_CERT, RUN_TLS_KEY, NULL}) < 0)
			oom();
	}
	if (C.hosts) {
		/* a host that shares the run directory needs no copy */
		if (hosts_apart(&C.slots, &copy_hosts) < 0)
			exit(EXIT_JOB);
		for (int i = 0; i < copy_hosts.n; i++)
			if (copy(copy_hosts.v[i], 1, &files, 0) < 0) {
				fprintf(stderr, "gem-run: cannot copy the run to %s\n", copy_hosts.v[i]);
				exit(EXIT_JOB);
			}
	}
	argv_free(&files);
}

static void start_node(int i)
{
	struct argv a = {0};
	const char *url = rpath(RUN_NODE_URL, i), *log = rpath(RUN_NODE_MSG, i);
	for (int j = 0; j < 2; j++) {
		int fd = open(j ? log : url, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0)
			close(fd);
	}
	if (C.slots.n) {
		node_argv(&a, i, rrun, 1);
		workers[i] = remote(C.slots.v[i % C.slots.n], 0, url, log, a.v);
		stagger(i);
	} else {
		int e = open_append(log);
		node_argv(&a, i, C.rundir, 0);
		workers[i] = here(a.v, (struct launch_io){.in = LAUNCH_NULL, .err = e}, url);
		close(e);
	}
	argv_free(&a);
}

/* The handshake: each node binds a free port and prints its URL; once every node has printed
 * one, the peer list (one URL per line, node order) goes to RUNDIR/peers by a rename, which the
 * nodes wait for, and to the hosts that do not share RUNDIR. A node that dies first fails the
 * run. */
static void sgp_peers(void)
{
	char urls[256];
	FILE *f = fopen(rpath(RUN_PEERS_TMP), "we");
	if (!f) {
		fprintf(stderr, "gem-run: %s: %s\n", rpath(RUN_PEERS_TMP), strerror(errno));
		exit(EXIT_JOB);
	}
	for (int i = 0; i < C.workers; i++) {
		if (!wait_line(workers[i], 60)) {
			launch_stop(workers[i]);
			slot_failed("node", i, wait_child(workers[i]), rpath(RUN_NODE_MSG, i));
			exit(EXIT_JOB);
		}
		/* a node listening on every address is reached by its host's name */
		urls[0] = 0;
		url_on(urls, sizeof urls, workers[i]->line, C.slots.n ? C.slots.v[i % C.slots.n] : NULL);
		fprintf(f, "%s\n", urls);
	}
	if (fclose(f) != 0 || rename(rpath(RUN_PEERS_TMP), rpath(RUN_PEERS)) < 0) {
		fprintf(stderr, "gem-run: %s: %s\n", rpath(RUN_PEERS), strerror(errno));
		exit(EXIT_JOB);
	}
	for (int i = 0; i < copy_hosts.n; i++) {
		char *cmd = shell_cmd("cat >%s && mv %s %s", rrpath(RUN_PEERS_TMP), rrpath(RUN_PEERS_TMP),
				      rrpath(RUN_PEERS));
		int fd = open(rpath(RUN_PEERS), O_RDONLY | O_CLOEXEC);
		if (fd < 0 || wait_child(rsh(copy_hosts.v[i], cmd, fd, LAUNCH_NULL, LAUNCH_KEEP)) != 0) {
			fprintf(stderr, "gem-run: cannot send the peer list to %s\n", copy_hosts.v[i]);
			exit(EXIT_JOB);
		}
		close(fd);
		free(cmd);
	}
}

static int sgp_run(void)
{
	int failed = 0;
	sgp_prepare();
	if (!C.quiet)
		fprintf(stderr, "gem-run: %s: starting %d SGP node%s\n", C.rundir, C.workers, GEM_S(C.workers));
	for (int i = 0; i < C.workers; i++)
		start_node(i);
	sgp_peers();
	for (int i = 0; i < C.workers; i++)
		if (wait_child(workers[i]) != 0) {
			failed++;
			slot_failed("node", i, workers[i]->status, rpath(RUN_NODE_MSG, i));
		}
	for (int i = 0; i < C.workers && copy_hosts.n; i++) {
		const char *h = C.slots.v[i % C.slots.n];
		struct argv names = {0};
		int apart = 0;
		for (int j = 0; j < copy_hosts.n; j++)
			apart |= !strcmp(copy_hosts.v[j], h);
		if (!apart)
			continue;
		if (argv_pushf(&names, RUN_NODE_PARAMS, i) < 0 || argv_pushf(&names, RUN_NODE_LOG, i) < 0)
			oom();
		copy(h, 0, &names, 1);
		argv_free(&names);
	}
	if (failed) {
		fprintf(stderr, "gem-run: %d of %d node%s failed\n", failed, C.workers, GEM_S(C.workers));
		return EXIT_JOB;
	}
	return evaluate("--nodes");
}

/* ---- main ---- */

/* The hosts of FILE, one per line, "#" a comment: with slots, each as many times as the number
 * after it says (default 1); else once. */
static void read_hosts(const char *opt, const char *file, int slots, struct argv *out)
{
	char line[1024];
	FILE *f = fopen(file, "re");
	if (!f)
		die_usage("%s: cannot read %s", opt, file);
	while (fgets(line, sizeof line, f)) {
		char *save = NULL, *h = strtok_r(line, " \t\r\n", &save), *n;
		long k = 1;
		if (!h || h[0] == '#')
			continue;
		if (slots && (n = strtok_r(NULL, " \t\r\n", &save)) && num_long(n, 0, RUN_MAX_WORKERS, &k) < 0)
			k = 1;
		for (long i = 0; i < k; i++)
			push(out, h);
	}
	fclose(f);
	if (!out->n)
		die_usage("%s: no hosts in %s", opt, file);
}

/* The name workers on other hosts reach this one by: $GEM_HOST, else hostname -f's. */
static const char *this_host(void)
{
	static char name[256];
	char *argv[] = {"hostname", "-f", NULL}, *out = NULL;
	if (getenv("GEM_HOST") && *getenv("GEM_HOST"))
		return getenv("GEM_HOST");
	for (int i = 0; i < 2 && !name[0]; i++, argv[1] = NULL) {
		if (capture(argv, LAUNCH_NULL, &out, NULL) == 0)
			snprintf(name, sizeof name, "%.*s", (int)strcspn(out, "\n"), out);
		free(out);
	}
	if (!name[0] && gethostname(name, sizeof name) < 0)
		snprintf(name, sizeof name, "localhost");
	return name;
}

/* What the options say together: defaults, and the combinations refused. */
static void settle(void)
{
	char err[GEM_ERRMAX];
	struct argv probe = {0};
	size_t len = strlen(C.rundir);
	char *dir = strdup(C.rundir);
	const char *to = getenv("GEM_SSH_TIMEOUT");
	long t = 10;
	if (!dir)
		oom();
	/* run/ and run are the same run: paths joined get one slash */
	while (len > 1 && dir[len - 1] == '/')
		dir[--len] = 0;
	C.rundir = dir;
	if (!C.ssh)
		C.ssh = getenv("GEM_SSH") ? getenv("GEM_SSH") : "ssh";
	if (launch_ssh_argv(C.ssh, 10, "h", "c", &probe, err) < 0)
		die_usage("%s", err);
	argv_free(&probe);
	if (to && *to)
		num_long(to, 1, 86400, &t);
	C.ssh_timeout = (int)t;
	S.ssh = C.ssh;
	S.ssh_timeout = C.ssh_timeout;
	if (C.steps) {
		uint64_t s;
		if (strspn(C.steps, "0123456789") != strlen(C.steps) || C.steps[0] == '0' ||
		    num_u64(C.steps, &s) < 0)
			die_usage("--steps: not a positive integer: %s", C.steps);
		/* a served run's budget is the run's (its server stores it); an SGP node's is its own */
		push(C.sgp ? &C.work : &C.serve, "--steps");
		push(C.sgp ? &C.work : &C.serve, C.steps);
	}
	if (progress_show_init(&C.show, getenv("GEM_PROGRESS"), isatty(2), C.quiet, err) < 0)
		die_usage("%s", err);
	if (C.slice_hosts) {
		read_hosts("--slice-hosts", C.slice_hosts, 0, &C.shosts);
		if (C.sgp)
			die_usage("--slice-hosts: not with --rule sgp (there is no server)");
		if (C.slices < 2)
			die_usage("--slice-hosts: needs --slices 2 or more (one server runs here)");
	}
	if (C.hosts) {
		read_hosts("--hosts", C.hosts, 1, &C.slots);
		if (!C.workers_set)
			C.workers = C.slots.n;
		if (!C.listen)
			C.listen = "0.0.0.0:0";
	}
	if (!C.listen)
		C.listen = "127.0.0.1:0";
	if (C.sgp && C.resume)
		die_usage("--resume: not with --rule sgp (an SGP run starts from params.gem)");
	if (C.sgp && C.slices != 1)
		die_usage("--slices: not with --rule sgp (there is no server)");
	public_ = strncmp(C.listen, "127.", 4) && strncmp(C.listen, "localhost:", 10) &&
		  strncmp(C.listen, "[::1]:", 6);
	/* over the network the token travels in HTTPS by default */
	tls_on = C.tls >= 0 ? C.tls : C.hosts || C.slice_hosts;
}

/* gem-run's own directory first in PATH: it starts the programs installed beside it. */
static void path_init(void)
{
	char self[PATH_MAX], *slash, *path;
	const char *old = getenv("PATH");
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return;
	self[n] = 0;
	if (!(slash = strrchr(self, '/')))
		return;
	*slash = 0;
	if (asprintf(&path, "%s%s%s", self, old ? ":" : "", old ? old : "") < 0)
		oom();
	setenv("PATH", path, 1);
	free(path);
}

int main(int argc, char **argv)
{
	char err[GEM_ERRMAX];
	/* GEM_LOG is checked as every program checks it */
	if (log_init("gem-run", err) < 0) {
		fprintf(stderr, "gem-run: %s\n", err);
		return EXIT_USAGE;
	}
	parse(argc, argv);
	settle();
	path_init();
	signals_init();
	atexit(cleanup);
	if (tls_on || C.hosts)
		server_host = this_host();
	return C.sgp ? sgp_run() : served_run();
}
