/* gem-work: a worker. With --local RUNDIR it trains in this process with sequential momentum
 * SGD (GEM's proxy); with --server URL it trains against a gem-serve parameter server; with
 * --rule sgp it is one node of a Stochastic Gradient Push run (lib/role/sgp.c), with no server. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/num.h"
#include "base/prog.h"
#include "nn/data.h"
#include "nn/layers.h"
#include "wire/blob.h"
#include "wire/httpd.h"
#include "base/err.h"
#include "base/log.h"
#include "role/local.h"
#include "role/progress.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "run/run.h"
#include "role/sgp.h"
#include "role/work.h"

static const char usage_line[] =
	"usage: gem-work (--local RUNDIR | --server URL|RUNDIR) [-e E | -t S] [options]\n"
	"   or: gem-work --rule sgp --run RUNDIR (--peers URL,... | --peers-file F) ...\n"
	"   or: gem-work --check OPTIONS...";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Train a model: alone (--local), as one worker of a gem-serve run (--server), or\n"
	      "as one node of a Stochastic Gradient Push run (--rule sgp): no server, push-sum\n"
	      "gossip.\n"
	      "\n"
	      "  -L, --local RUNDIR        train in this process with sequential momentum SGD\n"
	      "  -S, --server URL|RUNDIR   join the parameter server at URL (see gem-serve), or\n"
	      "                            the one of RUNDIR, once RUNDIR/server.url appears; a\n"
	      "                            sliced run: URL1,URL2,... (gem-serve --slice I/K,\n"
	      "                            in slice order), or RUNDIR once every slice has its\n"
	      "                            URL\n"
	      "  -e, --epochs E            train E epochs (default: the run's budget)\n"
	      "  -t, --steps S             train S steps (minibatches)\n"
	      "      --part I/N            see only part I of N of the training set (0 <= I <\n"
	      "                            N); --shard I/N is its older spelling\n"
	      "      --worker-id ID        rejoin under an earlier worker id (--server)\n"
	      "      --token-file FILE     send the bearer token in FILE (--server)\n"
	      "      --cacert FILE         trust only the CA certificate(s) in this PEM file\n"
	      "                            for an https:// server (--server) or HTTPS peers\n"
	      "                            (--rule sgp); default: the system's CAs\n"
	      "      --codec C             how commits and theta replies (--server), or pushes\n"
	      "                            (--rule sgp), are encoded: raw, zlib, zlib+shuffle,\n"
	      "                            or lossy with error feedback: fp16 (half the\n"
	      "                            bytes), int8, int4 (blocks of 8 and 4 bits: 1/4 and\n"
	      "                            1/8), topk:F (the fraction F of largest elements);\n"
	      "                            theta comes back in fp16 for the last three; default\n"
	      "                            raw\n"
	      "      --retry-for SEC       keep retrying an unreachable server this long;\n"
	      "                            default 60\n"
	      "      --round-timeout SEC   wait this long for a reply (--server): a commit of\n"
	      "                            sync, dma or diloco waits for the round's slowest\n"
	      "                            worker; 0: no limit; default 1800\n"
	      "      --checkpoint-every SEC  save the parameters this often (--local); default\n"
	      "                              60\n"
	      "      --slowdown F          make each step F times slower (fault injection);\n"
	      "                            default 1\n"
	      "      --die-after N         die abruptly (SIGKILL) after N commits (fault\n"
	      "                            injection)\n"
	      "  -j, --threads T           compute on T threads (every kernel and pass, or a\n"
	      "                            micro-batch each: gem-init --microbatches; the\n"
	      "                            same result; 1 to 64); default 1\n"
	      "\n"
	      "SGP nodes (--rule sgp):\n"
	      "      --rule sgp            be one node of an SGP run\n"
	      "      --run RUNDIR          the run (model, data, hyper-parameters, initial\n"
	      "                            parameters); node-I.gem and node-I.jsonl are written\n"
	      "                            there\n"
	      "      --listen HOST:PORT    where this node receives pushes; default 127.0.0.1:0\n"
	      "      --public              allow listening on a non-loopback address (needs\n"
	      "                            --token-file, or --no-token)\n"
	      "      --no-token            allow --public without a token: anyone who reaches\n"
	      "                            the port can push into the run\n"
	      "      --tls-cert FILE       listen on HTTPS with this PEM certificate (chain);\n"
	      "                            every peer then speaks HTTPS and is verified\n"
	      "                            (--cacert)\n"
	      "      --tls-key FILE        the PEM private key of --tls-cert (both or\n"
	      "                            neither)\n"
	      "      --peers URL,...       every node's URL, in node order (this node's too)\n"
	      "      --peers-file FILE     the same, one per line, read once FILE appears\n"
	      "      --node I              this node's index in the list; default: the entry of\n"
	      "                            --listen\n"
	      "      --topology T          exp (time-varying exponential graph) or ring;\n"
	      "                            default exp\n"
	      "      --peers-per-iter M    out-peers per iteration; default 1\n"
	      "      --overlap             Overlap-SGP: non-blocking sends, mass added as it\n"
	      "                            arrives\n"
	      "      --tau T               with --overlap, wait after T iterations with no\n"
	      "                            message; default twice the exponential graph's cycle\n"
	      "\n"
	      "      --check               check the options (not the files, runs or servers\n"
	      "                            they name) and exit: 0 if they would be taken\n"
	      "  -q, --quiet               no progress line, no summary\n"
	      "  -h, --help                show this help\n"
	      "  -V, --version             show the version\n",
	      f);
}

static void bad_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "gem-work: %s%s\n%s\n", msg, arg ? arg : "", usage_line);
	exit(EXIT_USAGE);
}

enum { O_PART = 256, O_WID, O_TOKEN, O_RETRY, O_ROUND, O_CKPT, O_SLOW, O_DIE, O_RULE, O_RUN,
       O_LISTEN, O_PUBLIC, O_PEERS, O_PEERS_FILE, O_NODE, O_TOPO, O_PPI, O_OVERLAP, O_TAU,
       O_NOTOKEN, O_CACERT, O_CODEC, O_CHECK, O_CERT, O_KEY };

static const struct option longopts[] = {
	{"local", required_argument, 0, 'L'},       {"server", required_argument, 0, 'S'},
	{"epochs", required_argument, 0, 'e'},      {"steps", required_argument, 0, 't'},
	{"part", required_argument, 0, O_PART},     {"worker-id", required_argument, 0, O_WID},
	{"token-file", required_argument, 0, O_TOKEN}, {"retry-for", required_argument, 0, O_RETRY},
	{"round-timeout", required_argument, 0, O_ROUND},
	{"checkpoint-every", required_argument, 0, O_CKPT}, {"slowdown", required_argument, 0, O_SLOW},
	{"die-after", required_argument, 0, O_DIE}, {"threads", required_argument, 0, 'j'},
	{"rule", required_argument, 0, O_RULE},     {"run", required_argument, 0, O_RUN},
	{"listen", required_argument, 0, O_LISTEN}, {"public", no_argument, 0, O_PUBLIC},
	{"peers", required_argument, 0, O_PEERS},   {"peers-file", required_argument, 0, O_PEERS_FILE},
	{"node", required_argument, 0, O_NODE},     {"topology", required_argument, 0, O_TOPO},
	{"peers-per-iter", required_argument, 0, O_PPI}, {"overlap", no_argument, 0, O_OVERLAP},
	{"tau", required_argument, 0, O_TAU},       {"no-token", no_argument, 0, O_NOTOKEN},
	{"cacert", required_argument, 0, O_CACERT}, {"codec", required_argument, 0, O_CODEC},
	{"check", no_argument, 0, O_CHECK},         {"quiet", no_argument, 0, 'q'},
	{"shard", required_argument, 0, O_PART},    /* --part's older spelling, until a later release */
	{"tls-cert", required_argument, 0, O_CERT}, {"tls-key", required_argument, 0, O_KEY},
	{"help", no_argument, 0, 'h'},
	{"version", no_argument, 0, 'V'},           {0, 0, 0, 0},
};

static prog_stop_flag stop_signal;
static void on_signal(int sig)
{
	stop_signal = sig;
}

static int parse_part(const char *s, int *i, int *n)
{
	char tail;
	return sscanf(s, "%d/%d%c", i, n, &tail) == 2 && *n >= 1 && *i >= 0 && *i < *n ? 0 : -1;
}

/* The progress line: on a terminal (or as GEM_PROGRESS says), not with -q. */
struct shown {
	struct progress_show sh;
	int worker;
	uint64_t epoch; /* samples per epoch */
};

static int progress_due(struct shown *p)
{
	return progress_show_due(&p->sh, clock_mono());
}

/* Out of the budget, with rate, ETA and the smoothed loss (role/progress), and the epoch. */
static void local_progress(const struct local_result *r, void *ctx)
{
	struct shown *p = ctx;
	char line[320], text[384];
	size_t len;
	if (!progress_due(p))
		return;
	progress_line(&r->p, line, sizeof line);
	len = strlen(line);
	snprintf(line + len, sizeof line - len, "  epoch %.2f", (double)r->total / (double)p->epoch);
	fputs(progress_show_text(&p->sh, "gem-work", line, text, sizeof text), stderr);
}

/* The display GEM_PROGRESS asks for: 0, or a bad value told (exit 2). */
static int show_init(struct shown *p, int quiet)
{
	char err[GEM_ERRMAX];
	memset(p, 0, sizeof *p);
	if (progress_show_init(&p->sh, getenv("GEM_PROGRESS"), isatty(2), quiet, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return EXIT_USAGE;
	}
	log_over_line(p->sh.mode == PROGRESS_TTY);
	return 0;
}

/* Local training: sequential momentum SGD on RUNDIR, resuming where its params file stands. */
static int train_local(const char *dir, const struct work_opts *o)
{
	const struct local_opts lo = {.t = o->t, .checkpoint_every = o->checkpoint_every};
	char err[GEM_ERRMAX];
	struct local *l;
	struct local_result r;
	struct shown pr;
	int rc;

	if ((rc = show_init(&pr, o->quiet)))
		return rc;
	if ((rc = local_open(dir, &lo, &l, err)) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return prog_exit(rc);
	}
	if (local_info(l)->spent) {
		const struct local_info *in = local_info(l);
		unsigned long long n = in->steps ? in->steps : (unsigned long long)in->epochs;
		if (!o->quiet)
			fprintf(stderr, "gem-work: %s: the run's budget of %llu %s%s is spent already "
					"(use --epochs to train more)\n",
				dir, n, in->steps ? "step" : "epoch", GEM_S(n));
		local_close(l);
		return 0;
	}
	pr.epoch = local_info(l)->epoch;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	rc = local_run(l, &stop_signal, local_progress, &pr, &r, err);
	local_close(l);
	fputs(progress_show_end(&pr.sh), stderr);
	if (rc < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return EXIT_JOB;
	}
	if (r.end == LOCAL_DIVERGED) {
		char loss[16];
		fprintf(stderr, "gem-work: training diverged at update %llu (loss %s); the parameters stay "
				"at the last checkpoint\n",
			(unsigned long long)r.version + 1, num_format(loss, sizeof loss, "%g", (double)r.loss));
		return EXIT_JOB;
	}
	if (!o->quiet) {
		char rate[32], loss[32];
		fprintf(stderr, "gem-work: %llu update%s, %llu samples in %.1f s (%s samples/s), last loss "
				"%s\n",
			(unsigned long long)r.steps, GEM_S(r.steps), (unsigned long long)r.samples, r.seconds,
			num_format(rate, sizeof rate, "%.0f", (double)r.samples / r.seconds),
			num_format(loss, sizeof loss, "%.4f", (double)r.loss));
	}
	if (stop_signal) {
		fprintf(stderr, "gem-work: interrupted; parameters saved at update %llu\n",
			(unsigned long long)r.version);
		return 128 + stop_signal;
	}
	return 0;
}

static void server_progress(const struct work_result *r, void *ctx)
{
	struct shown *p = ctx;
	char line[256], text[320];
	if (!progress_due(p))
		return;
	snprintf(line, sizeof line, "worker %d  version %llu  epoch %.2f  loss %.4f  %.0f samples/s",
		 p->worker, (unsigned long long)r->version, (double)r->samples / (double)p->epoch,
		 (double)r->loss, (double)r->samples / r->seconds);
	fputs(progress_show_text(&p->sh, "gem-work", line, text, sizeof text), stderr);
}

/* How a worker's session ended, in words; its exit status (a signal's is the caller's). */
static int server_report(const struct work_info *in, const struct work_opts *o,
			 const struct work_result *r, int rc, const char *err)
{
	char idle[96] = "", loss[32], comm[224] = "";
	if (rc < 0) {
		fprintf(stderr, "gem-work: worker %d: %s\n", in->worker, err);
		return EXIT_JOB;
	}
	if (r->end == WORK_DIVERGED) {
		fprintf(stderr, "gem-work: worker %d: the loss is %s at version %llu: diverged\n", in->worker,
			num_format(loss, sizeof loss, "%g", (double)r->loss), (unsigned long long)r->version);
		return EXIT_JOB;
	}
	if (r->end == WORK_SERVER_ENDED && r->unfinished) {
		/* unfinished work is not a success: a script learns that the run needs resuming */
		if (r->target == UINT64_MAX)
			fprintf(stderr, "gem-work: worker %d: the server ended the run after %llu of the "
					"%llu steps asked for\n", in->worker, (unsigned long long)r->commits,
				(unsigned long long)o->t.steps);
		else
			fprintf(stderr, "gem-work: worker %d: the server ended the run with %llu of the "
					"worker's %llu samples done (rejoin with --worker-id %d)\n", in->worker,
				(unsigned long long)r->samples, (unsigned long long)r->target, in->worker);
		return EXIT_JOB;
	}
	if (o->quiet)
		return 0;
	if (r->end == WORK_SERVER_ENDED)
		log_info("worker %d: the server ended the run", in->worker);
	if (in->background)
		snprintf(idle, sizeof idle, ", idle %.2f s (%.1f%%), %.2f s of it in the last round", r->idle,
			 r->seconds > 0 ? 100 * r->idle / r->seconds : 0.0, r->idle_last);
	if (!in->background && r->commits)
		snprintf(comm, sizeof comm, ", %llu commits, %.2f ms and %.0f bytes each (%s: %.0f "
			 "sent, %.0f received, %.0f us of CPU to encode)", (unsigned long long)r->commits,
			 1e3 * r->commit_seconds / (double)r->commits,
			 (double)(r->commit_sent + r->commit_received) / (double)r->commits,
			 o->t.codec ? o->t.codec : "raw", (double)r->commit_sent / (double)r->commits,
			 (double)r->commit_received / (double)r->commits,
			 1e6 * r->encode_seconds / (double)r->commits);
	log_info("worker %d: %llu step%s, %llu samples in %.1f s, last loss %s, version %llu%s%s",
		 in->worker, (unsigned long long)r->steps, GEM_S(r->steps), (unsigned long long)r->samples,
		 r->seconds, num_format(loss, sizeof loss, "%.4f", (double)r->loss),
		 (unsigned long long)r->version, idle, comm);
	return 0;
}

/* --server RUNDIR: the URL in RUNDIR/server.url, waiting up to --retry-for for the server to
 * write it. 0, or an exit status. */
static int server_of_run(const char *dir, const struct work_opts *o, char *url, size_t cap)
{
	char err[GEM_ERRMAX], path[PATH_MAX];
	double t0 = clock_mono();
	int said = 0;
	struct timespec ts = {0, 50 * 1000 * 1000};
	int rc = 0;
	run_dir_file(dir, RUN_JSON, path, sizeof path);
	if (access(path, F_OK) < 0) {
		fprintf(stderr, "gem-work: --server %s: neither a URL nor a run (no %s)\n", dir, path);
		return EXIT_USAGE;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	while (run_server_urls_read(dir, url, cap, err) < 0) {
		if (stop_signal) {
			rc = 128 + stop_signal;
			break;
		}
		if (clock_mono() - t0 >= o->t.retry_for) {
			fprintf(stderr, "gem-work: %s: no server after %g s (%s)\n", dir, o->t.retry_for, err);
			rc = EXIT_JOB;
			break;
		}
		if (!said++ && !o->quiet)
			fprintf(stderr, "gem-work: waiting for the server of %s (retrying for %g s)\n", dir,
				o->t.retry_for);
		nanosleep(&ts, NULL);
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	return rc;
}

/* The server does not answer yet: say that the worker waits (but with -q). */
static void waiting(void *ctx, const char *url, double retry_for)
{
	(void)ctx;
	fprintf(stderr, "gem-work: waiting for server at %s (retrying for %g s)\n", url, retry_for);
}

/* One worker of the gem-serve run at url (or of the run directory url). */
static int train_server(const char *url, const struct work_opts *o)
{
	char err[GEM_ERRMAX], found[8192];
	struct worker *w;
	struct work_result r;
	const struct work_info *in;
	struct shown pr;
	struct work_opts wo = *o;
	int rc;

	if ((rc = show_init(&pr, o->quiet)))
		return rc;
	if (!strstr(url, "://")) {
		if ((rc = server_of_run(url, o, found, sizeof found)))
			return rc;
		url = found;
	}
	if (!o->quiet)
		wo.waiting = waiting;
	if ((rc = work_open(url, &wo, &w, err)) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return prog_exit(rc);
	}
	in = work_info(w);
	if (!o->quiet)
		log_info("worker %d of %s: rule %s, %llu samples per epoch%s", in->worker, url, in->rule,
			 (unsigned long long)in->epoch, in->part_n > 1 ? " (a part)" : "");
	pr.worker = in->worker;
	pr.epoch = in->epoch;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	rc = work_run(w, &stop_signal, server_progress, &pr, &r, err);
	if (rc == 0 && r.end == WORK_DIE_AFTER) {
		/* fault injection: die as a crash would, without a word to the server */
		fprintf(stderr, "gem-work: worker %d: --die-after %llu: dying\n", in->worker,
			(unsigned long long)o->die_after);
		raise(SIGKILL);
	}
	fputs(progress_show_end(&pr.sh), stderr);
	rc = server_report(in, o, &r, rc, err);
	work_close(w);
	return stop_signal ? 128 + stop_signal : rc;
}

/* --rule sgp: where a node stands once it starts, then its progress line as a worker's. */
struct sgp_shown {
	struct shown p;
	struct progress m; /* iterations and samples, their rates and the smoothed loss */
	const struct sgp_opts *o;
	const char *url;
	int quiet;
};

/* A node's progress: where it stands once it starts, then its line (role/progress) and its w. */
static void sgp_show(const struct sgp_status *st, void *ctx)
{
	struct sgp_shown *sh = ctx;
	struct progress_now now;
	char line[320], text[384];
	size_t len;
	if (st->iter == 0) {
		if (!sh->quiet)
			log_info("node %d of %d at %s: %s, %s graph, %d peer%s per iteration, %llu "
				 "iterations, part %d/%d (%zu samples)",
				 st->node, st->nodes, sh->url, st->rule,
				 pushsum_topology_name(sh->o->topology), st->peers_per_iter,
				 st->peers_per_iter == 1 ? "" : "s", (unsigned long long)st->iters,
				 st->part_i, st->part_n, st->part_samples);
		progress_start(&sh->m, 0, 0, 0, clock_mono());
		return;
	}
	progress_at(&sh->m, st->iter, st->samples, clock_mono());
	progress_loss(&sh->m, (double)st->loss);
	if (!progress_due(&sh->p))
		return;
	progress_get(&sh->m, clock_mono(), &now);
	len = (size_t)snprintf(line, sizeof line, "node %d  ", st->node);
	len += strlen(progress_line(&now, line + len, sizeof line - len));
	snprintf(line + len, sizeof line - len, "  w %.3f  (%llu iterations)", st->w,
		 (unsigned long long)st->iters);
	fputs(progress_show_text(&sh->p.sh, "gem-work", line, text, sizeof text), stderr);
}

/* One SGP node: its URL on stdout (the handshake), SIGINT/SIGTERM stop it, its errors and
 * summary on stderr; returns 0, 1 failed, 2 bad usage or topology mismatch, 128+N on signal N. */
static int run_sgp_node(const struct sgp_opts *so, int quiet)
{
	char err[GEM_ERRMAX], loss[32];
	struct sgp_node *node;
	struct sgp_status st;
	struct sgp_shown sh = {.o = so, .quiet = quiet};
	int rc;

	if ((rc = show_init(&sh.p, quiet)))
		return rc;
	if ((rc = sgp_node_open(so, &node, err)) < 0) {
		log_error("%s", err);
		return prog_exit(rc);
	}
	sh.url = sgp_node_url(node);
	printf("%s\n", sh.url);
	fflush(stdout);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	rc = sgp_node_run(node, &stop_signal, sgp_show, &sh, &st, err);
	fputs(progress_show_end(&sh.p.sh), stderr);
	if (rc < 0)
		log_error("%s", err);
	else if (!quiet)
		log_info("node %d: %llu iteration%s, %llu samples in %.1f s, last loss %s, w %.4f, "
			 "%llu bytes in, %llu out", st.node, (unsigned long long)st.iter, GEM_S(st.iter),
			 (unsigned long long)st.samples, st.seconds,
			 num_format(loss, sizeof loss, "%.4f", (double)st.loss), st.w,
			 (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out);
	sgp_node_close(node);
	if (stop_signal)
		return 128 + stop_signal;
	return prog_exit(rc);
}

/* What the command line says beyond the worker's and the SGP node's options. */
struct cli {
	const char *local, *server, *rule;
	const char *later; /* "--local" or "--server" given before other options: its RUNDIR (or
			    * URL) is the word left after them */
	char host[256]; /* --listen's */
	int listen_set, sgp_only, threads, no_token, check;
};

/* An SGP node's option opt (optarg its argument) into *so and *c: 0 if opt is not one. */
static int sgp_option(int opt, struct sgp_opts *so, struct cli *c)
{
	long v;
	switch (opt) {
	case O_RUN: so->rundir = optarg; break;
	case O_LISTEN:
		if (httpd_listen_parse(optarg, c->host, sizeof c->host, &so->port))
			bad_usage("--listen: want HOST:PORT: ", optarg);
		c->listen_set = 1;
		break;
	case O_PUBLIC: so->allow_public = 1; c->sgp_only = 1; break;
	case O_NOTOKEN: c->no_token = 1; c->sgp_only = 1; break;
	case O_CERT: so->tls_cert = optarg; c->sgp_only = 1; break;
	case O_KEY: so->tls_key = optarg; c->sgp_only = 1; break;
	case O_PEERS: so->peers = optarg; break;
	case O_PEERS_FILE: so->peers_file = optarg; break;
	case O_NODE:
		if (num_long(optarg, 0, PUSHSUM_MAX_NODES - 1, &v))
			bad_usage("--node: not an integer in [0, 4095]: ", optarg);
		so->node = (int)v;
		break;
	case O_TOPO:
		if (pushsum_topology_parse(optarg, &so->topology))
			bad_usage("--topology: want exp or ring: ", optarg);
		c->sgp_only = 1;
		break;
	case O_PPI:
		if (num_long(optarg, 1, PUSHSUM_MAX_PEERS, &v))
			bad_usage("--peers-per-iter: not an integer in [1, 16]: ", optarg);
		so->peers_per_iter = (int)v;
		c->sgp_only = 1;
		break;
	case O_OVERLAP: so->overlap = 1; c->sgp_only = 1; break;
	case O_TAU:
		if (num_long(optarg, 1, 1 << 20, &v))
			bad_usage("--tau: not a positive integer: ", optarg);
		so->tau = (int)v;
		c->sgp_only = 1;
		break;
	default: return 0;
	}
	return 1;
}

/* The options into *o, *so and *c: -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct work_opts *o, struct sgp_opts *so,
			 struct cli *c)
{
	char err[GEM_ERRMAX];
	long v;
	int opt;
	while ((opt = getopt_long(argc, argv, "L:S:e:t:j:qhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'L':
		case 'S':
			/* --local -t 5 RUNDIR: the next word is an option, not the run; it is read as
			 * one, and the run is the word left at the end (a directory whose name
			 * starts with '-' is given as ./-dir) */
			if (optarg[0] == '-' && optarg[1]) {
				c->later = opt == 'L' ? "--local" : "--server";
				optind--;
				optarg = (char *)"";
			}
			*(opt == 'L' ? &c->local : &c->server) = optarg;
			break;
		case 'e':
			if (num_long(optarg, 1, 1 << 20, &v))
				bad_usage("--epochs: not a positive integer: ", optarg);
			o->t.epochs = (int)v;
			break;
		case 't':
			if (num_u64(optarg, &o->t.steps) || o->t.steps == 0)
				bad_usage("--steps: not a positive integer: ", optarg);
			break;
		case O_PART:
			if (parse_part(optarg, &o->t.part_i, &o->t.part_n))
				bad_usage("--part: want I/N with 0 <= I < N: ", optarg);
			o->t.part_set = 1;
			break;
		case O_WID:
			if (num_long(optarg, 0, 1 << 20, &v))
				bad_usage("--worker-id: not an integer >= 0: ", optarg);
			o->worker_id = (int)v;
			break;
		case O_TOKEN: o->t.token_file = optarg; break;
		case O_CACERT: o->t.cacert = optarg; break;
		case O_CODEC:
			if (blob_codec_check(optarg, err) < 0)
				bad_usage("--codec: ", err);
			o->t.codec = optarg;
			break;
		case O_RETRY:
			if (num_double(optarg, 0, 1e7, &o->t.retry_for))
				bad_usage("--retry-for: not a number of seconds: ", optarg);
			break;
		case O_ROUND:
			if (num_double(optarg, 0, 1e7, &o->round_timeout))
				bad_usage("--round-timeout: not a number of seconds: ", optarg);
			break;
		case O_CKPT:
			if (num_double(optarg, 0, 1e7, &o->checkpoint_every))
				bad_usage("--checkpoint-every: not a number of seconds: ", optarg);
			break;
		case O_SLOW:
			if (num_double(optarg, 1, 1e4, &o->t.slowdown))
				bad_usage("--slowdown: not a number >= 1: ", optarg);
			break;
		case O_DIE:
			if (num_u64(optarg, &o->die_after) || o->die_after == 0)
				bad_usage("--die-after: not a positive integer: ", optarg);
			break;
		case O_RULE:
			if (strcmp(optarg, "sgp"))
				bad_usage("--rule: only sgp (a server's rule is the run's: see gem-init --rule): ",
					  optarg);
			c->rule = optarg;
			break;
		case 'j':
			if (layers_threads_arg(optarg, &c->threads))
				bad_usage(LAYERS_THREADS_BAD, optarg);
			break;
		case O_CHECK: c->check = 1; break;
		case 'q': o->quiet = 1; log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-work"); return 0;
		default:
			if (sgp_option(opt, so, c))
				break;
			fprintf(stderr, "%s\n", usage_line);
			return EXIT_USAGE;
		}
	}
	return -1;
}

/* gem-work --rule sgp: its options checked, then the node run; the exit status. */
static int sgp_main(struct work_opts *o, struct sgp_opts *so, const struct cli *c)
{
	if (c->local || c->server)
		bad_usage("--rule sgp has no server: give --run RUNDIR, not --local or --server", NULL);
	if (!so->rundir)
		bad_usage("--rule sgp: give the run with --run RUNDIR", NULL);
	if (!so->peers == !so->peers_file)
		bad_usage("--rule sgp: give exactly one of --peers and --peers-file", NULL);
	if (so->tau && !so->overlap)
		bad_usage("--tau: only with --overlap", NULL);
	if (o->worker_id >= 0 || o->die_after || o->checkpoint_every != 60)
		bad_usage("--rule sgp: --worker-id, --die-after and --checkpoint-every are not for "
			  "SGP nodes", NULL);
	if (!so->allow_public && !httpd_is_loopback(c->host))
		bad_usage("refusing to listen on a non-loopback address without --public: ", c->host);
	if (o->t.token_file && c->no_token)
		bad_usage("--token-file and --no-token contradict each other", NULL);
	if (so->allow_public && !o->t.token_file && !c->no_token)
		bad_usage("--public needs --token-file (or --no-token, to let anyone who reaches "
			  "the port push into the run)", NULL);
	if (!so->tls_cert != !so->tls_key)
		bad_usage("--tls-cert and --tls-key go together", NULL);
	if (o->t.cacert && !so->tls_cert)
		bad_usage("--cacert is for HTTPS peers: give --tls-cert and --tls-key too", NULL);
	if (c->check)
		return 0;
	if (c->no_token && !httpd_is_loopback(c->host))
		log_warn("--public --no-token: anyone who reaches the port can push into the run");
	so->host = c->host;
	so->t = o->t;
	prog_blas_init();
	layers_set_threads(c->threads);
	return run_sgp_node(so, o->quiet);
}

int main(int argc, char **argv)
{
	/* the first round waits for every worker's start too (loading the data, on a loaded
	 * machine): torch.distributed's default timeout, 30 min */
	struct work_opts o = {.t = {.part_n = 1, .retry_for = 60, .slowdown = 1},
			      .checkpoint_every = 60, .round_timeout = 1800, .worker_id = -1};
	struct sgp_opts so = {.node = -1, .topology = PUSHSUM_EXP, .peers_per_iter = 1};
	struct cli c = {.host = "127.0.0.1", .threads = 1};
	char err[GEM_ERRMAX];
	int rc;

	if (log_init("gem-work", err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return EXIT_USAGE;
	}
	if ((rc = parse_options(argc, argv, &o, &so, &c)) >= 0)
		return rc;
	if (c.later && optind < argc) {
		*(c.local ? &c.local : &c.server) = argv[optind++];
		c.later = NULL;
	}
	if (c.later)
		bad_usage(!strcmp(c.later, "--local") ? "--local: which RUNDIR?"
						      : "--server: which URL or RUNDIR?", NULL);
	if (optind != argc)
		bad_usage("unexpected argument (the options' values follow them: --local RUNDIR, "
			  "--steps S, ...): ", argv[optind]);
	if (o.t.epochs && o.t.steps)
		bad_usage("give --epochs or --steps, not both", NULL);
	if (o.t.codec && c.local)
		bad_usage("--codec is for --server and --rule sgp", NULL);
	if (o.t.cacert && !c.server && !c.rule)
		bad_usage("--cacert is for --server (an https:// gem-serve) and --rule sgp", NULL);
	if (c.rule)
		return sgp_main(&o, &so, &c);
	if (so.rundir || c.listen_set || so.peers || so.peers_file || so.node >= 0 || c.sgp_only)
		bad_usage("--run, --listen, --public, --no-token, --tls-cert, --tls-key, --peers, "
			  "--peers-file, --node, --topology, --peers-per-iter, --overlap and --tau are for "
			  "SGP nodes (--rule sgp)", NULL);
	if (!c.local == !c.server)
		bad_usage("give exactly one of --local RUNDIR and --server URL", NULL);
	if (c.check)
		return 0;
	prog_blas_init();
	layers_set_threads(c.threads);
	if (c.local)
		return train_local(c.local, &o);
	return train_server(c.server, &o);
}
