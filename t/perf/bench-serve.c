/* bench-serve: commits/s a gem-serve sustains for cnn-sized updates with 1, 4 and 16
 * concurrent clients on loopback (raw codec, as workers use there), and two slices
 * (--slice I/2) at 4 and 16 clients (each client commits its slices one after the other),
 * the server's CPU time per
 * commit (the server runs in a child process: getrusage of it alone, user + system), and its
 * wall time per commit split into decode, rule and encode (from /v1/stats). Prints TSV.
 * BENCH_SERVE_ROW=RULE/SLICES/CLIENTS runs that row alone (for a profiler). */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wire/blob.h"
#include "base/clock.h"
#include "base/prog.h"
#include "base/err.h"
#include "base/log.h"
#include "wire/httpc.h"
#include "nn/model.h"
#include "wire/msg.h"
#include "rules/rule.h"
#include "run/run.h"
#include "run/spec.h"
#include "role/serve.h"
#include "run/slice.h"

#define SECONDS 2.0

static char urls[SLICE_MAX][160]; /* the servers: one, or the K slices */
static int nslices;
static size_t nparams;

struct client {
	long commits;
	int failed;
};

/* One client's connection to server k: its slice, worker id and version. */
struct cslice {
	struct httpc *h;
	struct slice s;
	int id;
	uint64_t version, seq;
};

/* Commit upd's slice to server k and take the reply's version: 0, or -1 (err). */
static int commit_one(struct cslice *cs, const float *upd, struct blob_codec *codec,
		      struct msg_buf *buf, struct httpc_resp *r, char *err)
{
	struct msg_blob blob = {.name = "update"};
	struct msg m;
	const void *enc;
	json_t *head = json_pack("{s:i, s:I, s:I, s:i, s:f}", "worker", cs->id, "base",
				 (json_int_t)cs->version, "seq", (json_int_t)++cs->seq, "samples", 64,
				 "loss", 1.0);
	blob_encode(codec, upd + cs->s.off, cs->s.len, BLOB_RAW, 0, &enc, &blob.meta, err);
	blob.data = enc;
	msg_build(buf, head, &blob, 1, err);
	json_decref(head);
	if (httpc_post(cs->h, "/v1/commit", MSG_CONTENT_TYPE, buf->data, buf->len, r, err) < 0 ||
	    msg_parse(r->body, r->len, &m, err) < 0)
		return -1;
	cs->version = (uint64_t)json_integer_value(json_object_get(m.header, "version"));
	msg_free(&m);
	return 0;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	char err[GEM_ERRMAX];
	struct cslice cs[SLICE_MAX] = {{0}};
	struct httpc_resp r = {0};
	struct blob_codec codec;
	struct msg_buf buf = {0};
	struct msg m;
	float *upd = malloc(sizeof(float) * nparams);
	double t0;

	blob_codec_init(&codec);
	for (size_t i = 0; i < nparams; i++)
		upd[i] = -1e-6f * (float)((i % 7) + 1);
	for (int k = 0; k < nslices; k++) {
		cs[k].s = slice_of(nparams, k, nslices > 1 ? nslices : 0);
		if (httpc_new(urls[k], NULL, 30000, &cs[k].h, err) < 0 ||
		    httpc_post(cs[k].h, "/v1/join", "application/json", "{\"codec\":\"raw\"}", 15, &r,
			       err) < 0 ||
		    msg_parse(r.body, r.len, &m, err) < 0) {
			fprintf(stderr, "bench-serve: join: %s\n", err);
			c->failed = 1;
			return NULL;
		}
		cs[k].id = (int)json_integer_value(json_object_get(m.header, "worker"));
		cs[k].version = (uint64_t)json_integer_value(json_object_get(m.header, "version"));
		msg_free(&m);
	}
	t0 = clock_mono();
	while (clock_mono() - t0 < SECONDS && !c->failed) {
		for (int k = 0; k < nslices; k++)
			if (commit_one(&cs[k], upd, &codec, &buf, &r, err) < 0) {
				fprintf(stderr, "bench-serve: commit: %s\n", err);
				c->failed = 1;
				break;
			}
		c->commits += !c->failed;
	}
	for (int k = 0; k < nslices; k++) {
		char body[64];
		int n = snprintf(body, sizeof body, "{\"worker\":%d,\"done\":false}", cs[k].id);
		httpc_post(cs[k].h, "/v1/leave", "application/json", body, (size_t)n, &r, err);
		httpc_free(cs[k].h);
	}
	httpc_resp_free(&r);
	msg_buf_free(&buf);
	blob_codec_free(&codec);
	free(upd);
	return NULL;
}

/* A cnn run with rule `rule` in a fresh temporary directory. */
static int make_run(char *dir, const char *rule, char *err)
{
	char spec_path[4096];
	json_error_t je;
	struct run_spec spec = {.created = "bench", .model_name = "cnn", .data_name = "none",
				.data_dir = "/nonexistent", .mean = 0.5, .std = 0.5,
				.train = {.lr = 0.05, .momentum = 0.9, .batch = 64, .epochs = 1, .seed = 1}};
	int rc;
	if (!mkdtemp(dir))
		return gem_errf(err, GEM_EFAIL, "mkdtemp failed");
	if (prog_share_path("models/cnn.json", spec_path, sizeof spec_path) < 0)
		return gem_errf(err, GEM_EFAIL, "share/gem/models/cnn.json not found (set GEM_SHARE_DIR)");
	if (!(spec.model = json_load_file(spec_path, 0, &je)))
		return gem_errf(err, GEM_EFAIL, "%s: %s", spec_path, je.text);
	if ((rc = rule_config_default(rule, &spec.rule, err)) == 0) {
		spec.rule.lr = 0.05f;
		spec.rule.nworkers = 1;
		rc = run_make(dir, &spec, RUN_MAKE_FORCE, err);
	}
	nparams = spec.nparams;
	run_spec_free(&spec);
	return rc;
}

/* The server of one row (slice k of K; K = 0: the only one) in a child process: its URL goes
 * up the pipe, it serves until POST /v1/stop, and exits; the parent reads its CPU time from
 * wait4. */
static pid_t serve_child(const char *dir, int k, int nk, char *url_out, size_t cap, char *err)
{
	int fd[2];
	pid_t pid;
	ssize_t got;
	if (pipe(fd) < 0)
		return gem_errf(err, GEM_EFAIL, "pipe failed"), -1;
	if ((pid = fork()) < 0)
		return gem_errf(err, GEM_EFAIL, "fork failed"), -1;
	if (pid == 0) {
		static prog_stop_flag never;
		struct serve_opts o = {.host = "127.0.0.1", .port = 0, .keep_running = 1,
				       .slice_i = k, .slice_k = nk};
		struct server *s;
		close(fd[0]);
		if (serve_open(dir, &o, &s, err) < 0) {
			fprintf(stderr, "bench-serve: %s\n", err);
			_exit(1);
		}
		if (write(fd[1], serve_url(s), strlen(serve_url(s)) + 1) < 0)
			_exit(1);
		close(fd[1]);
		serve_close(s, serve_wait(s, &never), err);
		_exit(0);
	}
	close(fd[1]);
	got = read(fd[0], url_out, cap - 1);
	close(fd[0]);
	if (got <= 0)
		return gem_errf(err, GEM_EFAIL, "the server did not start"), -1;
	url_out[got] = 0;
	return pid;
}

/* The /v1/stats "commit_us" field f of slice 0's stats, and stop every server: their CPU
 * seconds in all. */
static double stop_servers(const pid_t *pids, json_t **stats, char *err)
{
	struct httpc_resp r = {0};
	double cpu = 0;
	*stats = NULL;
	for (int k = 0; k < nslices; k++) {
		struct httpc *h;
		struct rusage ru;
		int status;
		httpc_new(urls[k], NULL, 5000, &h, err);
		if (k == 0 && httpc_get(h, "/v1/stats", &r, err) == 0)
			*stats = json_loadb(r.body, r.len, 0, NULL);
		httpc_post(h, "/v1/stop", "application/json", "{}", 2, &r, err);
		httpc_free(h);
		if (wait4(pids[k], &status, 0, &ru) != pids[k] || !WIFEXITED(status) || WEXITSTATUS(status))
			fprintf(stderr, "bench-serve: a server failed\n");
		cpu += (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
		       (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
	}
	httpc_resp_free(&r);
	return cpu;
}

/* One row: rule, n clients, against nk servers (slices when nk > 1) of its own. */
static int bench_row(const char *rule, int n, int nk, char *err)
{
	char dir[] = "/tmp/gem-bench-serve.XXXXXX", cmd[128];
	struct client cl[16] = {{0}};
	pthread_t th[16];
	pid_t pids[SLICE_MAX];
	long total = 0;
	json_t *stats, *t;
	double cpu;

	if (make_run(dir, rule, err) < 0)
		return -1;
	nslices = nk;
	for (int k = 0; k < nk; k++)
		if ((pids[k] = serve_child(dir, k, nk > 1 ? nk : 0, urls[k], sizeof urls[k], err)) < 0)
			return -1;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		total += cl[i].commits;
	}
	cpu = stop_servers(pids, &stats, err);
	t = json_object_get(stats, "commit_us");
	printf("%s\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\n", rule, nk, n, (double)total / SECONDS,
	       total ? 1e6 * cpu / (double)total : 0.0, json_number_value(json_object_get(t, "decode")),
	       json_number_value(json_object_get(t, "rule")),
	       json_number_value(json_object_get(t, "encode")));
	fflush(stdout);
	json_decref(stats);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-serve: could not remove %s\n", dir);
	return 0;
}

/* 1 if BENCH_SERVE_ROW is unset or names this row */
static int row_wanted(const char *rule, int nk, int n)
{
	const char *only = getenv("BENCH_SERVE_ROW");
	char name[64];
	if (!only || !*only)
		return 1;
	snprintf(name, sizeof name, "%s/%d/%d", rule, nk, n);
	return strcmp(only, name) == 0;
}

int main(void)
{
	static const char *rules[] = {"gem", "downpour"};
	/* clients and servers: one server at 1, 4, 16 clients; two slices at 4 and 16 */
	static const int rows[][2] = {{1, 1}, {4, 1}, {16, 1}, {4, 2}, {16, 2}};
	char err[GEM_ERRMAX];

	signal(SIGPIPE, SIG_IGN);
	/* the servers' "worker N joined" lines would bury the table */
	setenv("GEM_LOG", "warn", 0);
	if (log_init("bench-serve", err) < 0 || httpc_global_init(err) < 0) {
		fprintf(stderr, "bench-serve: %s\n", err);
		return 1;
	}
	/* server_cpu_us: the server processes' user + system CPU per commit (of all of θ), join
	 * to stop; decode, rule, encode: slice 0's wall time per commit of its slice */
	printf("# rule\tslices\tclients\tcommits_per_s\tserver_cpu_us\tdecode_us\trule_us\tencode_us\n");
	for (size_t ri = 0; ri < sizeof rules / sizeof *rules; ri++)
		for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
			if (row_wanted(rules[ri], rows[i][1], rows[i][0]) &&
			    bench_row(rules[ri], rows[i][0], rows[i][1], err) < 0) {
				fprintf(stderr, "bench-serve: %s\n", err);
				return 1;
			}
	return 0;
}
