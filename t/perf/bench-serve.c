/* bench-serve: commits/s a gem-serve sustains for cnn-sized updates with 1, 4 and 16
 * concurrent clients on loopback (raw codec, as workers use there), the server's CPU time per
 * commit (the server runs in a child process: getrusage of it alone, user + system), and its
 * wall time per commit split into decode, rule and encode (from /v1/stats). Prints TSV. */
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
#include "base/cli.h"
#include "base/err.h"
#include "base/log.h"
#include "wire/httpc.h"
#include "nn/model.h"
#include "wire/msg.h"
#include "rules/rule.h"
#include "run/run.h"
#include "role/serve.h"

#define SECONDS 2.0

static const char *url;
static size_t nparams;

struct client {
	long commits;
	int failed;
};

static void *client_main(void *arg)
{
	struct client *c = arg;
	char err[GEM_ERRMAX];
	struct httpc *h;
	struct httpc_resp r = {0};
	struct blob_codec codec;
	struct msg_buf buf = {0};
	struct msg m;
	float *upd = malloc(sizeof(float) * nparams);
	json_t *head;
	uint64_t version = 0, seq = 0;
	int id;
	double t0;

	blob_codec_init(&codec);
	for (size_t i = 0; i < nparams; i++)
		upd[i] = -1e-6f * (float)((i % 7) + 1);
	if (httpc_new(url, NULL, 30000, &h, err) < 0 ||
	    httpc_post(h, "/v1/join", "application/json", "{\"codec\":\"raw\"}", 15, &r, err) < 0 ||
	    msg_parse(r.body, r.len, &m, err) < 0) {
		fprintf(stderr, "bench-serve: join: %s\n", err);
		c->failed = 1;
		return NULL;
	}
	id = (int)json_integer_value(json_object_get(m.header, "worker"));
	version = (uint64_t)json_integer_value(json_object_get(m.header, "version"));
	msg_free(&m);
	t0 = cli_now();
	while (cli_now() - t0 < SECONDS) {
		struct msg_blob blob = {.name = "update"};
		const void *enc;
		head = json_pack("{s:i, s:I, s:I, s:i, s:f}", "worker", id, "base", (json_int_t)version, "seq",
				 (json_int_t)++seq, "samples", 64, "loss", 1.0);
		blob_encode(&codec, upd, nparams, BLOB_RAW, 0, &enc, &blob.meta, err);
		blob.data = enc;
		msg_build(&buf, head, &blob, 1, err);
		json_decref(head);
		if (httpc_post(h, "/v1/commit", MSG_CONTENT_TYPE, buf.data, buf.len, &r, err) < 0 ||
		    msg_parse(r.body, r.len, &m, err) < 0) {
			fprintf(stderr, "bench-serve: commit: %s\n", err);
			c->failed = 1;
			break;
		}
		version = (uint64_t)json_integer_value(json_object_get(m.header, "version"));
		msg_free(&m);
		c->commits++;
	}
	{
		char body[64];
		int n = snprintf(body, sizeof body, "{\"worker\":%d,\"done\":false}", id);
		httpc_post(h, "/v1/leave", "application/json", body, (size_t)n, &r, err);
	}
	httpc_resp_free(&r);
	httpc_free(h);
	msg_buf_free(&buf);
	blob_codec_free(&codec);
	free(upd);
	return NULL;
}

/* A cnn run with rule `rule` in a fresh temporary directory. */
static int make_run(char *dir, const char *rule, char *err)
{
	char spec_path[4096];
	json_t *spec, *runjson;
	struct model *m;
	struct rule_config rc;
	struct run run;
	struct run_progress p = {0};
	if (!mkdtemp(dir))
		return gem_errf(err, GEM_EFAIL, "mkdtemp failed");
	if (cli_share_path("models/cnn.json", spec_path, sizeof spec_path) < 0)
		return gem_errf(err, GEM_EFAIL, "share/gem/models/cnn.json not found (set GEM_SHARE_DIR)");
	if (model_from_file(spec_path, &spec, &m, err) < 0 || rule_config_default(rule, &rc, err) < 0)
		return GEM_EFAIL;
	rc.lr = 0.05f;
	rc.nworkers = 1;
	runjson = json_pack("{s:i, s:s, s:s, s:O, s:{s:s, s:s, s:f, s:f}, s:{s:f, s:f, s:f, s:i, s:i, s:i},"
			    " s:o}",
			    "gem_run", RUN_FORMAT, "created", "bench", "model_name", "cnn", "model", spec,
			    "data", "name", "none", "dir", "/nonexistent", "mean", 0.5, "std", 0.5, "train", "lr",
			    0.05, "momentum", 0.9, "weight_decay", 0.0, "batch", 64, "epochs", 1, "seed", 1, "rule",
			    rule_config_to_json(&rc));
	model_init_params(m, 1);
	nparams = model_nparams(m);
	if (run_create(dir, runjson, 1, err) < 0 || run_open(dir, &run, err) < 0)
		return GEM_EFAIL;
	if (run_params_save(&run, model_params(m), nparams, &p, err) < 0)
		return GEM_EFAIL;
	run_close(&run);
	json_decref(runjson);
	json_decref(spec);
	model_free(m);
	return 0;
}

/* The server of one row in a child process: its URL goes up the pipe, it serves until
 * POST /v1/stop, and exits; the parent reads its CPU time from wait4. */
static pid_t serve_child(const char *dir, char *url_out, size_t cap, char *err)
{
	int fd[2];
	pid_t pid;
	ssize_t got;
	if (pipe(fd) < 0)
		return gem_errf(err, GEM_EFAIL, "pipe failed"), -1;
	if ((pid = fork()) < 0)
		return gem_errf(err, GEM_EFAIL, "fork failed"), -1;
	if (pid == 0) {
		static volatile sig_atomic_t never;
		struct serve_opts o = {.host = "127.0.0.1", .port = 0, .keep_running = 1};
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

/* One row: rule, n clients, against a server of its own. */
static int bench_row(const char *rule, int n, char *err)
{
	char dir[] = "/tmp/gem-bench-serve.XXXXXX", surl[160], cmd[128];
	struct client cl[16] = {{0}};
	pthread_t th[16];
	long total = 0;
	struct httpc *h;
	struct httpc_resp r = {0};
	struct rusage ru;
	json_t *stats, *t;
	double cpu;
	pid_t pid;
	int status;

	if (make_run(dir, rule, err) < 0 || (pid = serve_child(dir, surl, sizeof surl, err)) < 0)
		return -1;
	url = surl;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		total += cl[i].commits;
	}
	httpc_new(url, NULL, 5000, &h, err);
	httpc_get(h, "/v1/stats", &r, err);
	stats = json_loadb(r.body, r.len, 0, NULL);
	t = json_object_get(stats, "commit_us");
	httpc_post(h, "/v1/stop", "application/json", "{}", 2, &r, err);
	if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		fprintf(stderr, "bench-serve: the server failed\n");
	cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
	      (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
	printf("%s\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\n", rule, n, (double)total / SECONDS,
	       total ? 1e6 * cpu / (double)total : 0.0, json_number_value(json_object_get(t, "decode")),
	       json_number_value(json_object_get(t, "rule")),
	       json_number_value(json_object_get(t, "encode")));
	fflush(stdout);
	json_decref(stats);
	httpc_resp_free(&r);
	httpc_free(h);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-serve: could not remove %s\n", dir);
	return 0;
}

int main(void)
{
	static const char *rules[] = {"gem", "downpour"};
	static const int counts[] = {1, 4, 16};
	char err[GEM_ERRMAX];

	signal(SIGPIPE, SIG_IGN);
	/* the servers' "worker N joined" lines would bury the table */
	setenv("GEM_LOG", "warn", 0);
	log_init("bench-serve");
	httpc_global_init(err);
	/* server_cpu_us: the server process's user + system CPU per commit, join to stop */
	printf("# rule\tclients\tcommits_per_s\tserver_cpu_us\tdecode_us\trule_us\tencode_us\n");
	for (size_t ri = 0; ri < sizeof rules / sizeof *rules; ri++)
		for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
			if (bench_row(rules[ri], counts[ci], err) < 0) {
				fprintf(stderr, "bench-serve: %s\n", err);
				return 1;
			}
	return 0;
}
