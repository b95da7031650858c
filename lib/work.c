#include "work.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "cli.h"
#include "data.h"
#include "err.h"
#include "httpc.h"
#include "log.h"
#include "model.h"
#include "msg.h"
#include "rng.h"
#include "run.h"

#define COMMIT_TIMEOUT_MS (600L * 1000) /* a sync round waits for the slowest worker */

void work_slowdown(double step_seconds, double factor)
{
	double extra = step_seconds * (factor - 1);
	struct timespec ts;
	if (extra <= 0)
		return;
	ts.tv_sec = (time_t)extra;
	ts.tv_nsec = (long)((extra - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}

static volatile sig_atomic_t work_signal;
static void on_signal(int sig)
{
	work_signal = sig;
}

/* A worker's connection and buffers, allocated once. */
struct worker {
	const struct work_opts *o;
	struct httpc *http;
	struct httpc_resp resp;
	struct blob_codec codec;
	struct msg_buf buf;
	const char *codec_name;
	struct run run;
	struct model *m;
	size_t n;
	float *x0, *delta;
	int id;
	uint64_t version, seq;
	uint64_t done_samples, done_commits; /* the server's count of this worker's work at join */
	int shard_i, shard_n;
};

/* Decode the vector named name of a reply message into v; header fields into *version. */
static int take_reply(struct worker *w, const char *name, float *v, json_t **head, char *err)
{
	struct msg m;
	const struct msg_blob *b;
	json_t *jv;
	int rc;
	if ((rc = msg_parse(w->resp.body, w->resp.len, &m, err)) < 0)
		return rc;
	if (!(b = msg_find(&m, name))) {
		msg_free(&m);
		return gem_errf(err, GEM_EFAIL, "the server's reply has no \"%s\" blob", name);
	}
	if ((rc = blob_decode(&w->codec, b->data, &b->meta, v, w->n, err)) < 0) {
		msg_free(&m);
		return rc;
	}
	if (json_is_integer(jv = json_object_get(m.header, "version")))
		w->version = (uint64_t)json_integer_value(jv);
	if (head)
		*head = json_incref(m.header);
	msg_free(&m);
	return 0;
}

static int join(struct worker *w, char *err)
{
	json_t *body = json_pack("{s:s}", "codec", w->codec_name), *head = NULL, *v;
	char *text;
	int rc;
	if (w->id >= 0)
		json_object_set_new(body, "worker", json_integer(w->id));
	text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	rc = httpc_post_retry(w->http, "/v1/join", "application/json", text, strlen(text), w->o->retry_for,
			      &w->resp, err);
	free(text);
	if (rc < 0)
		return rc;
	if ((rc = take_reply(w, MSG_PARAMS, model_params(w->m), &head, err)) < 0)
		return rc;
	w->id = (int)json_integer_value(json_object_get(head, "worker"));
	if (json_is_integer(v = json_object_get(head, "seq")))
		w->seq = (uint64_t)json_integer_value(v);
	if (json_is_integer(v = json_object_get(head, "samples")))
		w->done_samples = (uint64_t)json_integer_value(v);
	if (json_is_integer(v = json_object_get(head, "commits")))
		w->done_commits = (uint64_t)json_integer_value(v);
	v = json_object_get(head, "shard");
	if (!w->o->shard_set && json_is_array(v)) {
		w->shard_i = (int)json_integer_value(json_array_get(v, 0));
		w->shard_n = (int)json_integer_value(json_array_get(v, 1));
	}
	json_decref(head);
	return 0;
}

static void leave(struct worker *w, int done)
{
	char body[96], err[GEM_ERRMAX];
	int n = snprintf(body, sizeof body, "{\"worker\":%d,\"done\":%s}", w->id, done ? "true" : "false");
	if (httpc_post_retry(w->http, "/v1/leave", "application/json", body, (size_t)n, 5, &w->resp, err) < 0)
		log_debug("leave: %s", err);
}

/* Send one commit: the update (or easgd's x) in v. 0: applied and the reply taken; 1: the
 * server forgot us or our base (a restart): rejoined, nothing applied; 2: the run is over. */
static int commit(struct worker *w, const float *v, float loss, uint64_t samples, int easgd, char *err)
{
	json_t *head;
	struct msg_blob blob = {.name = "update"};
	const void *enc;
	int rc;

	head = json_pack("{s:i, s:I, s:I, s:I}", "worker", w->id, "base", (json_int_t)w->version, "seq",
			 (json_int_t)++w->seq, "samples", (json_int_t)samples);
	if (isfinite(loss))
		json_object_set_new(head, "loss", json_real(loss));
	rc = blob_encode(&w->codec, v, w->n, w->codec_name, -1, &enc, &blob.meta, err);
	blob.data = enc;
	if (rc == 0)
		rc = msg_build(&w->buf, head, &blob, 1, err);
	json_decref(head);
	if (rc < 0)
		return rc;
	rc = httpc_post_retry(w->http, "/v1/commit", "application/x-gem-message", w->buf.data, w->buf.len,
			      w->o->retry_for, &w->resp, err);
	if (rc == HTTPC_EHTTP && w->resp.status == 410)
		return 2;
	if (rc == HTTPC_EHTTP && w->resp.status == 409) {
		log_warn("worker %d: %s; joining again", w->id, err);
		if ((rc = join(w, err)) < 0)
			return w->resp.status == 410 ? 2 : rc;
		return 1;
	}
	if (rc < 0)
		return rc;
	if (easgd) {
		/* x ← x − d: the worker keeps its own x, pulled towards the center */
		float *x = model_params(w->m);
		if ((rc = take_reply(w, "elastic", w->delta, NULL, err)) < 0)
			return rc;
		for (size_t i = 0; i < w->n; i++)
			x[i] -= w->delta[i];
		return 0;
	}
	return take_reply(w, MSG_PARAMS, model_params(w->m), NULL, err);
}

static int codec_for(const char *url)
{
	/* on this machine, compression costs more CPU than the bytes it saves */
	return strstr(url, "://127.") || strstr(url, "://localhost") || strstr(url, "://[::1]");
}

int work_serve(const char *url, const struct work_opts *o)
{
	char err[GEM_ERRMAX];
	struct worker w = {.o = o, .id = o->worker_id, .shard_i = o->shard_i, .shard_n = o->shard_n};
	struct dataset ds = {0};
	struct batcher b = {0};
	struct rng drop;
	char *token = NULL;
	float *x = NULL, *params;
	uint8_t *y = NULL;
	json_t *runjson;
	uint64_t samples = 0, target, steps = 0, commits = 0;
	double t0, last_progress = 0;
	int rc = EXIT_JOB, easgd, window, tty = isatty(2) && !o->quiet, c;
	float lr, loss = 0;

	w.codec_name = codec_for(url) ? BLOB_RAW : BLOB_CODEC_DEFAULT;
	blob_codec_init(&w.codec);
	if (o->token_file && cli_read_token(o->token_file, &token, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return EXIT_USAGE;
	}
	if (httpc_new(url, token, COMMIT_TIMEOUT_MS, &w.http, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		free(token);
		return EXIT_USAGE;
	}
	free(token);
	if (httpc_get_retry(w.http, "/v1/run", o->retry_for, &w.resp, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		goto out;
	}
	if (!(runjson = json_loadb(w.resp.body, w.resp.len, 0, NULL)) ||
	    run_from_json(runjson, &w.run, err) < 0) {
		fprintf(stderr, "gem-work: %s: %s\n", url, runjson ? err : "GET /v1/run: not JSON");
		goto out;
	}
	if (model_from_json(w.run.model, &w.m, err) < 0 || model_reserve(w.m, w.run.train.batch, err) < 0 ||
	    dataset_load(w.run.data_dir, "train", &ds, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		goto out;
	}
	w.n = model_nparams(w.m);
	params = model_params(w.m);
	x = malloc(sizeof *x * (size_t)w.run.train.batch * model_input_size(w.m));
	y = malloc((size_t)w.run.train.batch);
	w.x0 = malloc(sizeof(float) * w.n);
	w.delta = malloc(sizeof(float) * w.n);
	if (!x || !y || !w.x0 || !w.delta) {
		fprintf(stderr, "gem-work: out of memory\n");
		goto out;
	}
	if (join(&w, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		goto out;
	}
	/* Each worker its own shuffled copy of the data (the paper's setup), or a disjoint shard. */
	if (batcher_init(&b, &ds, w.run.train.batch, w.run.train.seed, 1 + (uint64_t)w.id, w.shard_i,
			 w.shard_n, w.run.mean, w.run.std, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		goto out;
	}
	/* A worker that comes back under its id continues its data order where the server saw it
	 * stop, so that a run interrupted and resumed is the run left alone. */
	batcher_seek(&b, (long)(w.done_samples / b.count), w.done_samples % b.count);
	samples = w.done_samples;
	easgd = !strcmp(w.run.rule.name, "easgd");
	window = (easgd || !strcmp(w.run.rule.name, "downpour")) && w.run.rule.window > 1 ? w.run.rule.window : 1;
	lr = w.run.train.lr;
	target = o->steps ? UINT64_MAX
		 : o->epochs ? samples + (uint64_t)o->epochs * b.count
			     : (uint64_t)w.run.train.epochs * b.count;
	if (!o->quiet)
		log_info("worker %d of %s: rule %s, %zu samples per epoch%s", w.id, url, w.run.rule.name,
			 b.count, w.shard_n > 1 ? " (a shard)" : "");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	t0 = cli_now();
	rc = 0;
	while (!work_signal && samples < target && (!o->steps || steps < o->steps)) {
		uint64_t got = 0;
		double lsum = 0, step_start = cli_now();
		/* λ local steps of plain SGD from the parameters received; the update is where they
		 * led: Δθ = x_λ − x_0, which for λ = 1 is −η∇L at the parameters received. */
		if (window > 1 && !easgd)
			memcpy(w.x0, params, sizeof(float) * w.n);
		for (int k = 0; k < window && samples + got < target; k++) {
			int nb = batcher_next(&b, x, y);
			const float *g;
			/* dropout's randomness is a function of the worker and its data position */
			rng_seed(&drop, w.run.train.seed ^ ((uint64_t)w.id << 40), 0x776f726bULL + samples + got);
			lsum += model_train_step(w.m, x, y, nb, &drop);
			got += (uint64_t)nb;
			g = model_grads(w.m);
			if (window == 1 && !easgd) {
				for (size_t i = 0; i < w.n; i++)
					w.delta[i] = -lr * g[i];
			} else {
				for (size_t i = 0; i < w.n; i++)
					params[i] -= lr * g[i];
			}
			steps++;
			c = k + 1;
			loss = (float)(lsum / c);
		}
		if (window > 1 && !easgd)
			for (size_t i = 0; i < w.n; i++)
				w.delta[i] = params[i] - w.x0[i];
		if (!isfinite(loss)) {
			fprintf(stderr, "gem-work: worker %d: the loss is %g at version %llu: diverged\n", w.id,
				(double)loss, (unsigned long long)w.version);
			rc = EXIT_JOB;
			break;
		}
		if (o->slowdown > 1)
			work_slowdown(cli_now() - step_start, o->slowdown);
		c = commit(&w, easgd ? params : w.delta, loss, got, easgd, err);
		if (c < 0) {
			fprintf(stderr, "gem-work: worker %d: %s\n", w.id, err);
			rc = EXIT_JOB;
			break;
		}
		if (c == 2) {
			if (!o->quiet)
				log_info("worker %d: the server ended the run", w.id);
			break;
		}
		samples += got;
		commits++;
		if (o->die_after && commits >= o->die_after) {
			/* fault injection: die as a crash would, without a word to the server */
			fprintf(stderr, "gem-work: worker %d: --die-after %llu: dying\n", w.id,
				(unsigned long long)o->die_after);
			raise(SIGKILL);
		}
		if (tty && cli_now() - last_progress > 0.25) {
			last_progress = cli_now();
			fprintf(stderr, "\rgem-work %d: version %llu  epoch %.2f  loss %.4f  %.0f samples/s   ",
				w.id, (unsigned long long)w.version, (double)samples / (double)b.count,
				(double)loss, (double)samples / (last_progress - t0));
		}
	}
	if (tty)
		fputc('\n', stderr);
	leave(&w, rc == 0 && !work_signal);
	if (rc == 0 && !o->quiet)
		log_info("worker %d: %llu steps, %llu samples in %.1f s, last loss %.4f, version %llu", w.id,
			 (unsigned long long)steps, (unsigned long long)samples, cli_now() - t0, (double)loss,
			 (unsigned long long)w.version);
	if (work_signal)
		rc = 128 + work_signal;
out:
	batcher_free(&b);
	dataset_free(&ds);
	free(x);
	free(y);
	free(w.x0);
	free(w.delta);
	model_free(w.m);
	if (w.run.json)
		run_close(&w.run);
	blob_codec_free(&w.codec);
	msg_buf_free(&w.buf);
	httpc_resp_free(&w.resp);
	httpc_free(w.http);
	return rc;
}
