/* gem-serve: the parameter server of a gem run, over HTTP. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/num.h"
#include "base/prog.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "wire/httpd.h"
#include "base/log.h"
#include "role/progress.h"
#include "wire/blob.h"
#include "role/ps.h"
#include "role/serve.h"
#include "run/run.h"
#include "run/runlog.h"
#include "run/slice.h"

static const char usage_line[] = "usage: gem-serve [options] RUNDIR\n"
				 "   or: gem-serve --check [options] [RUNDIR]";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Serve a run's parameters to asynchronous workers and apply their commits with\n"
	      "the run's update rule. Prints the base URL on stdout and writes it to\n"
	      "RUNDIR/server.url.\n"
	      "\n"
	      "  -l, --listen HOST:PORT      address to listen on; port 0 picks a free port;\n"
	      "                              default 127.0.0.1:7470\n"
	      "      --public                allow listening on a non-loopback address (needs\n"
	      "                              --token-file, or --no-token)\n"
	      "      --token-file FILE       require this bearer token on mutating requests\n"
	      "      --no-token              allow --public without a token: anyone who reaches\n"
	      "                              the port can change the run\n"
	      "      --tls-cert FILE         serve HTTPS with this PEM certificate (chain); the\n"
	      "                              URL is then https://HOST:PORT\n"
	      "      --tls-key FILE          the PEM private key of --tls-cert (both or\n"
	      "                              neither)\n"
	      "      --checkpoint-every SEC  save θ and the rule's state this often; 0: only at\n"
	      "                              the end; default 60\n"
	      "      --max-updates N         stop after N central updates in all; default: no\n"
	      "                              limit\n"
	      "  -t, --steps S               the run's budget becomes S steps (minibatches)\n"
	      "                              per worker, in place of its epochs; stored in\n"
	      "                              run.json, where a resume finds it\n"
	      "      --keep-running          don't stop when every worker has finished\n"
	      "      --codec NAME            codec of parameter replies, θ whole: raw, zlib,\n"
	      "                              zlib+shuffle or fp16 (lossy; not int8, int4,\n"
	      "                              topk:F); default: the codec of the worker's\n"
	      "                              commit\n"
	      "      --worker-timeout SEC    a worker silent this long is gone; 0: never;\n"
	      "                              default 60\n"
	      "      --idle-timeout SEC      no commit this long: checkpoint and exit 1; 0:\n"
	      "                              never; default 600\n"
	      "      --max-staleness K       refuse commits more than K versions stale (the\n"
	      "                              worker recomputes); default: no bound\n"
	      "      --drop-rate P           refuse a fraction P of commits with 503 (fault\n"
	      "                              injection); default 0\n"
	      "      --max-workers N         workers joined at once (each holds about 24 bytes\n"
	      "                              per parameter); default 256, at most 4096\n"
	      "      --max-memory BYTES      refuse (503) a join that would take the rule's\n"
	      "                              state, delta copies, workers' buffers and request\n"
	      "                              bodies past BYTES, and a resumed run whose state\n"
	      "                              is past it (suffixes K, M, G, T: powers of\n"
	      "                              1024); default: no limit\n"
	      "      --check                 check the options (not the files they name) and\n"
	      "                              that RUNDIR, if it holds a run, can be resumed;\n"
	      "                              print \"complete VERSION\" when its workers have\n"
	      "                              spent their budget (and --steps does not change\n"
	      "                              it); serve nothing\n"
	      "  -q, --quiet                 no informational messages on stderr\n"
	      "      --slice I/K             serve slice I of K of theta (0 <= I < K <= 64):\n"
	      "                              its version, rule state, checkpoint and log, in\n"
	      "                              RUNDIR/slice-I-of-K/ (URL in its server.url\n"
	      "                              there); --shard I/K is its older spelling\n"
	      "  -h, --help                  show this help\n"
	      "  -V, --version               show the version\n",
	      f);
}

enum { O_PUBLIC = 256, O_TOKEN, O_CKPT, O_MAXUPD, O_KEEP, O_CODEC, O_WTO, O_ITO, O_STALE, O_DROP,
       O_NOTOKEN, O_MAXW, O_CERT, O_KEY, O_SLICE, O_CHECK, O_MAXMEM };

static const struct option longopts[] = {
	{"listen", required_argument, 0, 'l'},         {"public", no_argument, 0, O_PUBLIC},
	{"token-file", required_argument, 0, O_TOKEN}, {"checkpoint-every", required_argument, 0, O_CKPT},
	{"max-updates", required_argument, 0, O_MAXUPD}, {"keep-running", no_argument, 0, O_KEEP},
	{"codec", required_argument, 0, O_CODEC},      {"worker-timeout", required_argument, 0, O_WTO},
	{"idle-timeout", required_argument, 0, O_ITO}, {"max-staleness", required_argument, 0, O_STALE},
	{"drop-rate", required_argument, 0, O_DROP},   {"no-token", no_argument, 0, O_NOTOKEN},
	{"max-workers", required_argument, 0, O_MAXW}, {"tls-cert", required_argument, 0, O_CERT},
	{"tls-key", required_argument, 0, O_KEY},      {"help", no_argument, 0, 'h'},
	{"quiet", no_argument, 0, 'q'},               {"slice", required_argument, 0, O_SLICE},
	{"check", no_argument, 0, O_CHECK},            {"version", no_argument, 0, 'V'},
	{"steps", required_argument, 0, 't'},          {"max-memory", required_argument, 0, O_MAXMEM},
	{"shard", required_argument, 0, O_SLICE}, /* --slice's older spelling, until a later release */
	{0, 0, 0, 0},
};

static prog_stop_flag got_signal;
/* no status line, no summary (-q) */
static int quiet;

/* The status line: where the run stands, its workers and the slowest of them. */
static void status_tick(struct server *s, void *ctx)
{
	struct progress_show *sh = ctx;
	struct ps_now st;
	char line[384], text[448];
	size_t len;
	if (!progress_show_due(sh, clock_mono()))
		return;
	serve_now(s, &st);
	progress_line(&st.p, line, sizeof line);
	len = strlen(line);
	snprintf(line + len, sizeof line - len, "  %d worker%s", st.active, st.active == 1 ? "" : "s");
	len = strlen(line);
	if (st.slowest >= 0 && st.active > 1)
		snprintf(line + len, sizeof line - len, "  slowest %d (%.0f samples/s)", st.slowest,
			 st.slowest_rate);
	fputs(progress_show_text(sh, "gem-serve", line, text, sizeof text), stderr);
}

/* What the run did, at its end (but with -q). */
static void summary(const struct ps_now *st, const struct serve_memory *m, const char *why)
{
	char loss[32] = "", rule[32], all[32], peak[32];
	if (quiet)
		return;
	if (isfinite(st->p.loss))
		snprintf(loss, sizeof loss, ", loss %.4f", st->p.loss);
	fprintf(stderr, "gem-serve: %s: version %llu (%llu update%s in this session), %llu samples, "
			"%d worker%s (%d finished), %.1f s of training%s, %llu bytes in, %llu out, "
			"rule state %s, %s with copies and buffers (peak %s)\n",
		why, (unsigned long long)st->p.version, (unsigned long long)st->updates,
		st->updates == 1 ? "" : "s", (unsigned long long)st->p.samples, st->known,
		st->known == 1 ? "" : "s", st->done, st->elapsed, loss,
		(unsigned long long)st->bytes_in, (unsigned long long)st->bytes_out,
		num_size_text(rule, sizeof rule, m->rule), num_size_text(all, sizeof all, m->total),
		num_size_text(peak, sizeof peak, m->peak));
}

static void on_signal(int sig)
{
	got_signal = sig;
}

/* A PEM file's text (NUL-terminated) for --tls-cert or --tls-key, or NULL after a message. */
static char *read_pem(const char *opt, const char *file)
{
	char err[GEM_ERRMAX], *pem;
	if (fs_read_pem(file, &pem, err) < 0) {
		fprintf(stderr, "gem-serve: %s: %s\n", opt, err);
		return NULL;
	}
	return pem;
}

/* --check RUNDIR: a run there (else there is nothing to check: gem-init will make it) that can
 * be served: its run.json sound, not ended by a divergence. A complete one is told on stdout
 * ("complete VERSION"): serving it would end as soon as its workers came back. Not so when steps
 * (--steps) is a budget other than the run's: served with it, the run goes on to it. */
static int check_run(const char *dir, uint64_t steps)
{
	char err[GEM_ERRMAX], path[PATH_MAX];
	struct run r;
	struct run_end e;
	int rc, rebudget = 0;
	if (run_dir_file(dir, RUN_JSON, path, sizeof path) < 0 || access(path, F_OK) < 0)
		return 0;
	if ((rc = run_open(dir, &r, err)) == 0) {
		rebudget = steps && steps != r.spec.train.steps;
		run_close(&r);
		rc = run_end_read(dir, &e, err);
	}
	if (rc < 0) {
		fprintf(stderr, "gem-serve: %s\n", err);
		return prog_exit(rc);
	}
	if (e.how == RUN_COMPLETE && !rebudget)
		printf("complete %llu\n", (unsigned long long)e.version);
	return 0;
}

static void bad_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "gem-serve: %s%s\n%s\n", msg, arg ? arg : "", usage_line);
	exit(EXIT_USAGE);
}

/* What the command line says beyond the server's options: where its secrets are, and
 * whether it only checks a run. */
struct cli {
	char host[256]; /* --listen's */
	const char *token_file, *cert_file, *key_file;
	int no_token, check;
};

/* The options into *o and *c: -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct serve_opts *o, struct cli *c)
{
	char err[GEM_ERRMAX];
	long max_workers = SERVE_MAX_WORKERS;
	int opt;
	while ((opt = getopt_long(argc, argv, "l:t:qhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			if (httpd_listen_parse(optarg, c->host, sizeof c->host, &o->port))
				bad_usage("--listen: want HOST:PORT: ", optarg);
			o->host = c->host;
			break;
		case O_PUBLIC: o->allow_public = 1; break;
		case O_TOKEN: c->token_file = optarg; break;
		case O_CKPT:
			if (num_double(optarg, 0, 1e9, &o->checkpoint_every))
				bad_usage("--checkpoint-every: not a number of seconds: ", optarg);
			break;
		case O_MAXUPD:
			if (num_u64(optarg, &o->max_updates))
				bad_usage("--max-updates: not an unsigned integer: ", optarg);
			break;
		case 't':
			if (num_u64(optarg, &o->steps) || o->steps == 0 || o->steps > RUN_MAX_STEPS)
				bad_usage("--steps: not an integer in [1, 2^40]: ", optarg);
			break;
		case O_KEEP: o->keep_running = 1; break;
		case O_CODEC:
			if (blob_codec_check(optarg, err) < 0)
				bad_usage("--codec: ", err);
			/* every reply is θ whole in it: int8, int4 and topk are made for increments,
			 * and θ itself in them would lose most of what it is */
			if (strcmp(blob_codec_for_theta(optarg), optarg))
				bad_usage("--codec: a codec for θ itself (raw, zlib, zlib+shuffle or fp16), "
					  "not one for increments: ", optarg);
			o->codec = optarg;
			break;
		case O_WTO:
			if (num_double(optarg, 0, 1e9, &o->worker_timeout))
				bad_usage("--worker-timeout: not a number of seconds: ", optarg);
			break;
		case O_ITO:
			if (num_double(optarg, 0, 1e9, &o->idle_timeout))
				bad_usage("--idle-timeout: not a number of seconds: ", optarg);
			break;
		case O_STALE:
			if (num_long(optarg, 0, 1L << 40, &o->max_staleness))
				bad_usage("--max-staleness: not an integer >= 0: ", optarg);
			break;
		case O_DROP:
			if (num_double(optarg, 0, 1, &o->drop_rate))
				bad_usage("--drop-rate: not a fraction in [0, 1]: ", optarg);
			break;
		case O_NOTOKEN: c->no_token = 1; break;
		case O_CERT: c->cert_file = optarg; break;
		case O_KEY: c->key_file = optarg; break;
		case O_MAXW:
			if (num_long(optarg, 1, SERVE_WORKERS_LIMIT, &max_workers))
				bad_usage("--max-workers: not an integer in [1, 4096]: ", optarg);
			o->max_workers = (int)max_workers;
			break;
		case O_MAXMEM:
			if (num_size(optarg, &o->max_memory))
				bad_usage("--max-memory: not a size in bytes (512M, 2G): ", optarg);
			break;
		case 'q': log_quiet(); quiet = 1; break;
		case O_SLICE:
			if (slice_parse(optarg, &o->slice_i, &o->slice_k))
				bad_usage("--slice: want I/K with 0 <= I < K <= 64: ", optarg);
			break;
		case O_CHECK: c->check = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-serve"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1 && !(c->check && optind == argc))
		bad_usage(optind == argc ? "no RUNDIR given" : "too many arguments", NULL);
	if (!o->allow_public && !httpd_is_loopback(o->host))
		bad_usage("refusing to listen on a non-loopback address without --public: ", o->host);
	if (c->token_file && c->no_token)
		bad_usage("--token-file and --no-token contradict each other", NULL);
	if (o->allow_public && !c->token_file && !c->no_token)
		bad_usage("--public needs --token-file (or --no-token, to let anyone who reaches the "
			  "port change the run)", NULL);
	if (!c->cert_file != !c->key_file)
		bad_usage("--tls-cert and --tls-key go together", NULL);
	return -1;
}

/* Read the token, the certificate and its key the options name into o: 0, or the exit status
 * after saying why. */
static int read_secrets(const struct cli *c, struct serve_opts *o, char **token, char **cert,
			char **key)
{
	char err[GEM_ERRMAX];
	if (c->cert_file) {
		if (!(*cert = read_pem("--tls-cert", c->cert_file)) ||
		    !(*key = read_pem("--tls-key", c->key_file)))
			return EXIT_USAGE;
		o->tls_cert = *cert;
		o->tls_key = *key;
	}
	if (c->token_file) {
		if (fs_read_token(c->token_file, token, err) < 0) {
			fprintf(stderr, "gem-serve: %s\n", err);
			return EXIT_USAGE;
		}
		o->token = *token;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct serve_opts o = {.host = "127.0.0.1", .port = 7470, .checkpoint_every = 60,
			       .worker_timeout = 60, .idle_timeout = 600, .max_staleness = -1};
	char err[GEM_ERRMAX];
	struct cli c = {.host = ""};
	const char *why;
	struct server *s;
	struct ps_now st;
	struct serve_memory mem;
	struct progress_show show;
	char *token = NULL, *cert = NULL, *key = NULL;
	int rc, failed;

	if (log_init("gem-serve", err) < 0) {
		fprintf(stderr, "gem-serve: %s\n", err);
		return EXIT_USAGE;
	}
	if ((rc = parse_options(argc, argv, &o, &c)) >= 0)
		return rc;
	if (c.check)
		return optind < argc ? check_run(argv[optind], o.steps) : 0;
	if (c.no_token && !httpd_is_loopback(o.host))
		log_warn("--public --no-token: anyone who reaches the port can change the run");
	if ((rc = read_secrets(&c, &o, &token, &cert, &key)) != 0) {
		fs_free_secret(token), free(cert), fs_free_secret(key);
		return rc;
	}
	if (progress_show_init(&show, getenv("GEM_PROGRESS"), isatty(2), quiet, err) < 0) {
		fprintf(stderr, "gem-serve: %s\n", err);
		fs_free_secret(token), free(cert), fs_free_secret(key);
		return EXIT_USAGE;
	}
	if (show.mode != PROGRESS_OFF) {
		o.tick = status_tick;
		o.tick_ctx = &show;
	}
	log_over_line(show.mode == PROGRESS_TTY);
	/* every worker's buffers (~0.7 MB a vector for cnn) are mapped and unmapped whole, so that
	 * a worker's leave gives its memory back to the system: glibc's adaptive threshold would
	 * keep them in the heap after the first free */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* a closed terminal stops the run as TERM does: checkpointed, not killed mid-write */
	signal(SIGHUP, on_signal);
	if ((rc = serve_open(argv[optind], &o, &s, err)) < 0) {
		fprintf(stderr, "gem-serve: %s\n", err);
		fs_free_secret(token), free(cert), fs_free_secret(key);
		return prog_exit(rc);
	}
	printf("%s\n", serve_url(s));
	fflush(stdout);
	log_info("serving %s at %s", argv[optind], serve_url(s));
	why = serve_wait(s, &got_signal);
	fputs(progress_show_end(&show), stderr);
	serve_now(s, &st);
	serve_memory(s, &mem);
	failed = serve_failed(s);
	if (failed)
		fprintf(stderr, "gem-serve: %s; checkpointed, stopping\n", why);
	else
		log_info("stopping: %s", why);
	rc = serve_close(s, why, err);
	fs_free_secret(token), free(cert), fs_free_secret(key);
	summary(&st, &mem, failed ? "failed" : got_signal ? "interrupted" : "done");
	if (rc < 0) {
		fprintf(stderr, "gem-serve: final checkpoint failed: %s\n", err);
		return EXIT_JOB;
	}
	/* stopped by a signal: 128 + its number, as the other programs and the shell say it */
	return failed ? EXIT_JOB : got_signal ? 128 + got_signal : 0;
}
