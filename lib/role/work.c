#include "role/work.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wire/blob.h"
#include "base/cli.h"
#include "nn/data.h"
#include "base/err.h"
#include "wire/httpc.h"
#include "base/log.h"
#include "nn/model.h"
#include "wire/msg.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "run/run.h"

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

/* dma: the delta of the last boundary, in flight on a thread of its own with its own client. */
struct dma_post {
	const struct worker *w;
	struct httpc *http;
	struct httpc_resp resp;
	pthread_t thread;
	int busy; /* a thread runs: join it before touching buf or resp */
	int rc;
	char err[GEM_ERRMAX];
};

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
	float *xg;           /* dma: X_j, the last global model received */
	struct sgd opt;      /* dma: local momentum SGD */
	struct dma_post post;
	double idle;         /* dma: seconds blocked waiting for X_{j+1} */
	int dma;
	int id;
	uint64_t version, seq;
	uint64_t done_samples, done_commits; /* the server's count of this worker's work at join */
	int shard_i, shard_n;
};

/* Decode the vector named name of the reply resp into v; header fields into *version. */
static int take_reply(struct worker *w, const struct httpc_resp *resp, const char *name, float *v,
		      json_t **head, char *err)
{
	struct msg m;
	const struct msg_blob *b;
	json_t *jv;
	int rc;
	if ((rc = msg_parse(resp->body, resp->len, &m, err)) < 0)
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
	if ((rc = take_reply(w, &w->resp, MSG_PARAMS, model_params(w->m), &head, err)) < 0)
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

/* The commit message of the update v into w->buf. */
static int commit_build(struct worker *w, const float *v, float loss, uint64_t samples, char *err)
{
	json_t *head;
	struct msg_blob blob = {.name = "update"};
	const void *enc;
	int rc;

	head = json_pack("{s:i, s:I, s:I, s:I}", "worker", w->id, "base", (json_int_t)w->version, "seq",
			 (json_int_t)++w->seq, "samples", (json_int_t)samples);
	if (isfinite(loss))
		json_object_set_new(head, "loss", json_real(loss));
	if (w->dma)
		json_object_set_new(head, "idle", json_real(w->idle));
	rc = blob_encode(&w->codec, v, w->n, w->codec_name, -1, &enc, &blob.meta, err);
	blob.data = enc;
	if (rc == 0)
		rc = msg_build(&w->buf, head, &blob, 1, err);
	json_decref(head);
	return rc;
}

/* What a commit's answer means: 0 a reply to take, 1 the server forgot us or our base (a
 * restart): rejoined if rejoin, nothing applied; 2 the run is over; < 0 an error (in err). */
static int commit_status(struct worker *w, int rc, const struct httpc_resp *resp, int rejoin,
			 char *err)
{
	if (rc == HTTPC_EHTTP && resp->status == 410)
		return 2;
	if (rc == HTTPC_EHTTP && resp->status == 409 && rejoin) {
		log_warn("worker %d: %s; joining again", w->id, err);
		if ((rc = join(w, err)) < 0)
			return w->resp.status == 410 ? 2 : rc;
		return 1;
	}
	return rc < 0 ? rc : 0;
}

/* Send one commit: the update (or easgd's x) in v. 0: applied and the reply taken; 1: the
 * server forgot us or our base (a restart): rejoined, nothing applied; 2: the run is over. */
static int commit(struct worker *w, const float *v, float loss, uint64_t samples, int easgd, char *err)
{
	int rc;

	if ((rc = commit_build(w, v, loss, samples, err)) < 0)
		return rc;
	rc = httpc_post_retry(w->http, "/v1/commit", MSG_CONTENT_TYPE, w->buf.data, w->buf.len,
			      w->o->retry_for, &w->resp, err);
	if ((rc = commit_status(w, rc, &w->resp, 1, err)) != 0)
		return rc;
	if (easgd) {
		/* x ← x − d: the worker keeps its own x, pulled towards the center */
		float *x = model_params(w->m);
		if ((rc = take_reply(w, &w->resp, "elastic", w->delta, NULL, err)) < 0)
			return rc;
		for (size_t i = 0; i < w->n; i++)
			x[i] -= w->delta[i];
		return 0;
	}
	return take_reply(w, &w->resp, MSG_PARAMS, model_params(w->m), NULL, err);
}

/* ---- dma: delayed model averaging, the worker's half (DESIGN.md §4) ----
 *
 * Cycles of β local steps of momentum SGD on x_w. At boundary j, with X_j the global model
 * (X_0 = θ at join; for j ≥ 1 the reply to the delta sent at boundary j − 1):
 *
 *     Δ_w^j = x_w − x_w^init                   this cycle's local progress
 *     x_w   = x_w^init = X_j + Δ_w^j           own progress on top of the newest average
 *     send Δ_w^j (base version j), go on       the server: X_{j+1} = X_j + (1/W)·Σ_w Δ_w^j
 *
 * The commit's round trip (the server holds it until every worker's Δ^j is in) overlaps the
 * next β steps; the worker blocks, and counts idle time, only if X_{j+1} has not come back by
 * boundary j + 1. At boundary 0, X_0 = x_w^init, so x_w is unchanged. */

static void *dma_post_run(void *arg)
{
	struct dma_post *p = arg;
	p->rc = httpc_post_retry(p->http, "/v1/commit", MSG_CONTENT_TYPE, p->w->buf.data,
				 p->w->buf.len, p->w->o->retry_for, &p->resp, p->err);
	return NULL;
}

/* Send Δ in the background: the message is built here, the thread only posts it. */
static int dma_send(struct worker *w, const float *delta, float loss, uint64_t samples, char *err)
{
	sigset_t all, old;
	int rc;

	if ((rc = commit_build(w, delta, loss, samples, err)) < 0)
		return rc;
	/* SIGINT and SIGTERM are for the main thread's loop */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&w->post.thread, NULL, dma_post_run, &w->post);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return gem_errf(err, GEM_EFAIL, "pthread_create: %s", strerror(rc));
	w->post.busy = 1;
	return 0;
}

/* Wait for the answer to the delta in flight: X_{j+1} into w->xg and its version. As commit():
 * 0 taken, 1 rejoined (θ in the model's parameters; only if rejoin), 2 the run is over, < 0 an
 * error. */
static int dma_wait(struct worker *w, int rejoin, char *err)
{
	double t = cli_now();
	int rc;

	pthread_join(w->post.thread, NULL);
	w->post.busy = 0;
	w->idle += cli_now() - t;
	if (w->post.rc < 0)
		snprintf(err, GEM_ERRMAX, "%s", w->post.err);
	if ((rc = commit_status(w, w->post.rc, &w->post.resp, rejoin, err)) != 0)
		return rc;
	return take_reply(w, &w->post.resp, MSG_PARAMS, w->xg, NULL, err);
}

/* Boundary j: fold X_j in and send Δ_w^j. 1: rejoined after a restart, nothing sent (x_w starts
 * over from θ); else as dma_wait. */
static int dma_boundary(struct worker *w, float loss, uint64_t samples, char *err)
{
	float *x = model_params(w->m);
	int rc;

	if (w->post.busy && (rc = dma_wait(w, 1, err)) != 0) {
		if (rc == 1) {
			memcpy(w->x0, x, sizeof(float) * w->n);
			memcpy(w->xg, x, sizeof(float) * w->n);
			sgd_reset(&w->opt);
		}
		return rc;
	}
	for (size_t i = 0; i < w->n; i++) {
		/* Δ_w = x_w − x_w^init ; x_w = x_w^init = X_j + Δ_w */
		float d = x[i] - w->x0[i];
		w->delta[i] = d;
		x[i] = w->x0[i] = w->xg[i] + d;
	}
	return dma_send(w, w->delta, loss, samples, err);
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
	double t0, last_progress = 0, wall, idle_last = 0;
	int rc = EXIT_JOB, easgd, window, tty = isatty(2) && !o->quiet, c, left = 0;
	float lr, loss = 0;

	w.codec_name = codec_for(url) ? BLOB_RAW : BLOB_CODEC_DEFAULT;
	blob_codec_init(&w.codec);
	if (o->token_file && cli_read_token(o->token_file, &token, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		return EXIT_USAGE;
	}
	if (httpc_new(url, token, COMMIT_TIMEOUT_MS, &w.http, err) < 0 ||
	    httpc_new(url, token, COMMIT_TIMEOUT_MS, &w.post.http, err) < 0) {
		fprintf(stderr, "gem-work: %s\n", err);
		free(token);
		httpc_free(w.http);
		return EXIT_USAGE;
	}
	free(token);
	w.post.w = &w;
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
	w.dma = !strcmp(w.run.rule.name, "dma");
	if (w.dma && !(w.xg = malloc(sizeof(float) * w.n)))
		w.dma = -1;
	if (!x || !y || !w.x0 || !w.delta || w.dma < 0) {
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
	window = (easgd || w.dma || !strcmp(w.run.rule.name, "downpour")) && w.run.rule.window > 1
		 ? w.run.rule.window : 1;
	if (w.dma) {
		/* the local steps are momentum SGD with the run's μ, Nesterov and weight decay: the
		 * server averages models and keeps no momentum of its own */
		if (sgd_init(&w.opt, w.n, w.run.train.lr, w.run.train.momentum, w.run.train.weight_decay,
			     w.run.train.nesterov, err) < 0) {
			fprintf(stderr, "gem-work: %s\n", err);
			rc = EXIT_JOB;
			goto out;
		}
		/* x_w = x_w^init = X_0 */
		memcpy(w.x0, params, sizeof(float) * w.n);
		memcpy(w.xg, params, sizeof(float) * w.n);
	}
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
		if (window > 1 && !easgd && !w.dma)
			memcpy(w.x0, params, sizeof(float) * w.n);
		for (int k = 0; k < window && samples + got < target; k++) {
			int nb = batcher_next(&b, x, y);
			const float *g;
			/* dropout's randomness is a function of the worker and its data position */
			rng_seed(&drop, w.run.train.seed ^ ((uint64_t)w.id << 40), 0x776f726bULL + samples + got);
			lsum += model_train_step(w.m, x, y, nb, &drop);
			got += (uint64_t)nb;
			g = model_grads(w.m);
			if (w.dma) {
				sgd_step(&w.opt, params, g);
			} else if (window == 1 && !easgd) {
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
		if (window > 1 && !easgd && !w.dma)
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
		c = w.dma ? dma_boundary(&w, loss, got, err)
			  : commit(&w, easgd ? params : w.delta, loss, got, easgd, err);
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
	if (w.post.busy) {
		/* dma: the last delta's round. Interrupted, leave first: the round then completes
		 * without us even if every worker was interrupted at once. */
		if (rc != 0 || work_signal) {
			leave(&w, 0);
			left = 1;
		}
		idle_last = w.idle;
		c = dma_wait(&w, !left, err);
		idle_last = w.idle - idle_last;
		if (c < 0 && rc == 0 && !work_signal) {
			fprintf(stderr, "gem-work: worker %d: %s\n", w.id, err);
			rc = EXIT_JOB;
		}
	}
	if (!left)
		leave(&w, rc == 0 && !work_signal);
	wall = cli_now() - t0;
	if (rc == 0 && !o->quiet) {
		char idle[96] = "";
		if (w.dma)
			snprintf(idle, sizeof idle, ", idle %.2f s (%.1f%%), %.2f s of it in the last round",
				 w.idle, wall > 0 ? 100 * w.idle / wall : 0.0, idle_last);
		log_info("worker %d: %llu steps, %llu samples in %.1f s, last loss %.4f, version %llu%s",
			 w.id, (unsigned long long)steps, (unsigned long long)samples, wall, (double)loss,
			 (unsigned long long)w.version, idle);
	}
	if (work_signal)
		rc = 128 + work_signal;
out:
	if (w.post.busy)
		pthread_join(w.post.thread, NULL);
	sgd_free(&w.opt);
	free(w.xg);
	httpc_resp_free(&w.post.resp);
	httpc_free(w.post.http);
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
