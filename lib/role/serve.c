#include "role/serve.h"

#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wire/blob.h"
#include "base/cli.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "wire/httpd.h"
#include "base/log.h"
#include "nn/model.h"
#include "wire/msg.h"
#include "rules/rule.h"
#include "wire/reply.h"
#include "base/rng.h"
#include "run/run.h"

#define MAX_WORKERS 4096
#define STATE_BLOB "rule"

/* One worker as the server sees it. Its buffers are allocated at its first join and reused by
 * every request; `lock` keeps two requests of one worker from sharing them. */
struct slot {
	int id;
	int active;  /* connected: joined, and not left or gone */
	int in_rule; /* the rule holds this worker's state (kept while it is away after a stop) */
	int done, waiting;
	uint64_t commits, samples, refused, tau_sum, tau_min, tau_max, last_seq;
	double joined_at, last_contact, loss_sum;
	double idle; /* seconds the worker says it waited for the server (rule dma) */
	int shard_i, shard_n;
	pthread_mutex_t lock;
	float *in, *out;
	struct blob_codec codec;
	struct msg_buf buf;
};

struct server {
	struct run run;
	struct serve_opts opts;
	struct httpd *http;
	char url[128];
	char path_url[PATH_MAX + 16], path_state[PATH_MAX + 16];
	struct layout layout;
	size_t n;
	float *theta;
	struct rule *rule;
	struct run_progress prog; /* version, samples; elapsed as of start */
	double started;           /* monotonic time of serve_open */
	FILE *log;
	char *token;

	/* Everything below is guarded by mu. Commits pass through in ticket order (FIFO). */
	pthread_mutex_t mu;
	pthread_cond_t fifo_cv, round_cv, stop_cv;
	uint64_t ticket_next, ticket_serving;
	struct slot *slot[MAX_WORKERS];
	int nslots, nactive, ndone;
	int nknown; /* workers that have joined, ever */
	int stop;            /* 1: stop requested */
	const char *stop_why;
	int stopping;        /* 1: serve_close runs; waiters give up */
	int failed;          /* the stop is a failure (idle timeout) */
	double last_commit;  /* monotonic time of the last commit (or of the start) */
	struct rng drop_rng; /* --drop-rate's draws */
	uint64_t applied_since_start;
	double last_checkpoint;
	struct rule_stats st; /* of the last applied commit */

	/* Where a commit's server time goes (seconds, summed over commits): a leaf lock. */
	pthread_mutex_t tmu;
	double t_decode, t_rule, t_encode;
	uint64_t t_commits;
};

static double elapsed_of(const struct server *s)
{
	return s->prog.elapsed + (cli_now() - s->started);
}

/* ---- FIFO ordering of commits: a ticket lock on top of mu ---- */

static void fifo_enter(struct server *s)
{
	uint64_t t;
	pthread_mutex_lock(&s->mu);
	t = s->ticket_next++;
	while (t != s->ticket_serving)
		pthread_cond_wait(&s->fifo_cv, &s->mu);
}

/* Let the next ticket in; mu stays held. */
static void fifo_pass(struct server *s)
{
	s->ticket_serving++;
	pthread_cond_broadcast(&s->fifo_cv);
}

static void request_stop(struct server *s, const char *why)
{
	if (!s->stop) {
		s->stop = 1;
		s->stop_why = why;
	}
	pthread_cond_broadcast(&s->stop_cv);
}

/* ---- the log ---- */

static void log_event(struct server *s, const char *event, int worker, const char *extra)
{
	fprintf(s->log, "{\"event\":\"%s\",\"time\":%.3f", event, cli_wall());
	if (worker >= 0)
		fprintf(s->log, ",\"worker\":%d", worker);
	fprintf(s->log, ",\"version\":%llu%s%s}\n", (unsigned long long)s->prog.version,
		extra && *extra ? "," : "", extra ? extra : "");
	fflush(s->log);
}

static void log_update(struct server *s, int worker, float loss)
{
	run_log_update(s->log, cli_wall(), elapsed_of(s), -1, s->prog.version, worker, s->st.staleness,
		       loss, s->prog.samples, &s->st);
}

/* ---- checkpoints: θ in params.gem, the rule's state and the workers in state.gem ---- */

static json_t *workers_json(const struct server *s)
{
	json_t *a = json_array();
	for (int i = 0; i < s->nslots; i++) {
		const struct slot *w = s->slot[i];
		if (!w)
			continue;
		json_array_append_new(
			a, json_pack("{s:i, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "id", w->id,
				     "in_rule", w->in_rule, "done", w->done, "commits", (json_int_t)w->commits,
				     "samples", (json_int_t)w->samples, "refused", (json_int_t)w->refused,
				     "tau_sum", (json_int_t)w->tau_sum, "tau_min", (json_int_t)w->tau_min,
				     "tau_max", (json_int_t)w->tau_max, "last_seq", (json_int_t)w->last_seq,
				     "loss_sum", w->loss_sum));
	}
	return a;
}

/* Called with mu held (θ and the rule must not move while they are written). The state goes
 * first: a crash between the two writes leaves a state newer than θ, which resume detects by
 * the version and drops. */
static int checkpoint_locked(struct server *s, char *err)
{
	struct run_progress p = s->prog;
	json_t *meta = NULL, *head;
	struct rule_vec *vecs = NULL;
	int nvec = 0, rc;
	float *all = NULL;

	p.elapsed = elapsed_of(s);
	rc = rule_state_save(s->rule, &meta, &vecs, &nvec, err);
	if (rc < 0)
		return rc;
	head = json_pack("{s:I, s:o, s:o, s:[]}", "version", (json_int_t)s->prog.version, "rule", meta,
			 "workers", workers_json(s), "vecs");
	all = nvec ? malloc(sizeof *all * s->n * (size_t)nvec) : NULL;
	if (!head || (nvec && !all)) {
		rc = gem_errf(err, GEM_ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	for (int i = 0; i < nvec; i++) {
		json_array_append_new(json_object_get(head, "vecs"), json_string(vecs[i].name));
		memcpy(all + (size_t)i * s->n, vecs[i].data, sizeof *all * s->n);
	}
	{
		struct blob_codec c;
		struct msg_buf b = {0};
		const void *enc;
		struct msg_blob blob = {.name = STATE_BLOB};
		float dummy = 0;
		blob_codec_init(&c);
		rc = blob_encode(&c, nvec ? all : &dummy, nvec ? s->n * (size_t)nvec : 1, BLOB_RAW, 0, &enc,
				 &blob.meta, err);
		blob.data = enc;
		if (rc == 0)
			rc = msg_write_file(s->path_state, head, &blob, 1, err);
		blob_codec_free(&c);
		msg_buf_free(&b);
	}
	if (rc == 0)
		rc = run_params_save(&s->run, s->theta, s->n, &p, err);
	if (rc == 0)
		s->last_checkpoint = cli_now();
out:
	free(all);
	free(vecs);
	json_decref(head);
	return rc;
}

static int slot_alloc(struct server *s, int id, struct slot **out, char *err);

/* Resume the rule and the workers from state.gem if it matches θ's version. */
static int resume_state(struct server *s, char *err)
{
	struct msg_buf b = {0};
	struct msg m;
	const struct msg_blob *blob;
	json_t *vecs, *workers, *w;
	struct rule_vec *rv = NULL;
	float *all = NULL;
	size_t i, nvec;
	int rc = 0;

	if (access(s->path_state, F_OK) < 0)
		return 0;
	if (msg_read_file(s->path_state, (size_t)1 << 40, &b, &m, err) < 0) {
		log_warn("%s; the rule's state starts afresh", err);
		msg_buf_free(&b);
		return 0;
	}
	if (json_integer_value(json_object_get(m.header, "version")) != (json_int_t)s->prog.version) {
		log_warn("%s is of version %lld, the parameters of %llu: the rule's state starts afresh",
			 s->path_state, (long long)json_integer_value(json_object_get(m.header, "version")),
			 (unsigned long long)s->prog.version);
		goto out;
	}
	vecs = json_object_get(m.header, "vecs");
	nvec = json_array_size(vecs);
	blob = msg_find(&m, STATE_BLOB);
	if (!blob || (nvec && blob->meta.count != nvec * s->n)) {
		rc = gem_errf(err, GEM_EFAIL, "%s: the rule's state does not fit the model", s->path_state);
		goto out;
	}
	all = malloc(sizeof *all * (nvec ? nvec * s->n : 1));
	rv = calloc(nvec ? nvec : 1, sizeof *rv);
	if (!all || !rv) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto out;
	}
	{
		struct blob_codec c;
		blob_codec_init(&c);
		rc = blob_decode(&c, blob->data, &blob->meta, all, blob->meta.count, err);
		blob_codec_free(&c);
		if (rc < 0)
			goto out;
	}
	for (i = 0; i < nvec; i++) {
		snprintf(rv[i].name, sizeof rv[i].name, "%s", json_string_value(json_array_get(vecs, i)));
		rv[i].data = all + i * s->n;
		rv[i].n = s->n;
	}
	if ((rc = rule_state_load(s->rule, json_object_get(m.header, "rule"), rv, (int)nvec, err)) < 0) {
		gem_errprefix(err, "%s: ", s->path_state);
		goto out;
	}
	workers = json_object_get(m.header, "workers");
	json_array_foreach(workers, i, w)
	{
		struct slot *sl;
		int id = (int)json_integer_value(json_object_get(w, "id"));
		if (id < 0 || id >= MAX_WORKERS || slot_alloc(s, id, &sl, err) < 0)
			continue;
		sl->commits = (uint64_t)json_integer_value(json_object_get(w, "commits"));
		sl->samples = (uint64_t)json_integer_value(json_object_get(w, "samples"));
		sl->refused = (uint64_t)json_integer_value(json_object_get(w, "refused"));
		sl->tau_sum = (uint64_t)json_integer_value(json_object_get(w, "tau_sum"));
		sl->tau_min = (uint64_t)json_integer_value(json_object_get(w, "tau_min"));
		sl->tau_max = (uint64_t)json_integer_value(json_object_get(w, "tau_max"));
		sl->last_seq = (uint64_t)json_integer_value(json_object_get(w, "last_seq"));
		sl->loss_sum = json_number_value(json_object_get(w, "loss_sum"));
		sl->done = json_is_true(json_object_get(w, "done"));
		if (sl->done)
			s->ndone++;
		/* the rule kept this worker's state: it may come back under its id and carry on */
		sl->in_rule = json_is_true(json_object_get(w, "in_rule"));
		sl->last_contact = cli_now();
	}
	log_info("resumed the rule's state and %d workers from %s", s->nslots, s->path_state);
out:
	free(all);
	free(rv);
	msg_free(&m);
	msg_buf_free(&b);
	return rc;
}

/* ---- workers ---- */

static int slot_alloc(struct server *s, int id, struct slot **out, char *err)
{
	struct slot *w = s->slot[id];
	if (!w) {
		w = calloc(1, sizeof *w);
		if (!w || !(w->in = malloc(sizeof(float) * s->n)) || !(w->out = malloc(sizeof(float) * s->n))) {
			if (w) {
				free(w->in);
				free(w);
			}
			return gem_errf(err, GEM_ENOMEM, "out of memory for worker %d", id);
		}
		w->id = id;
		w->tau_min = UINT64_MAX;
		s->nknown++;
		pthread_mutex_init(&w->lock, NULL);
		blob_codec_init(&w->codec);
		s->slot[id] = w;
		if (id >= s->nslots)
			s->nslots = id + 1;
	}
	*out = w;
	return 0;
}

static struct slot *slot_get(struct server *s, int id)
{
	struct slot *w = NULL;
	if (id < 0 || id >= MAX_WORKERS)
		return NULL;
	pthread_mutex_lock(&s->mu);
	w = s->slot[id];
	pthread_mutex_unlock(&s->mu);
	return w;
}

static const char *codec_of(const struct server *s, const char *worker_codec)
{
	return s->opts.codec ? s->opts.codec : worker_codec;
}

/* Encode v as the reply message of w (header fields + one blob named name) and send it. */
static int reply_vector(struct httpd_req *req, struct slot *w, json_t *head, const char *name,
			const float *v, size_t n, const char *codec)
{
	char err[GEM_ERRMAX];
	struct msg_blob blob;
	const void *enc;
	memset(&blob, 0, sizeof blob);
	snprintf(blob.name, sizeof blob.name, "%s", name);
	if (blob_encode(&w->codec, v, n, codec, -1, &enc, &blob.meta, err) < 0 ||
	    (blob.data = enc, msg_build(&w->buf, head, &blob, 1, err)) < 0)
		return httpd_reply_error(req, 500, "encode", "%s", err);
	return httpd_reply_bytes(req, 200, MSG_CONTENT_TYPE, w->buf.data, w->buf.len, 1);
}

/* Worker w leaves (event "leave") or is declared gone ("gone"); mu held. Its rule state is
 * released, so that rules that count workers go on with the others; but once the run is
 * stopping the state stays for the checkpoint, and the worker may come back to it later. */
static void worker_release(struct server *s, struct slot *w, const char *event, int done)
{
	char extra[32];
	if (w->in_rule && !s->stop) {
		if (rule_leave(s->rule, w->id, s->theta, &s->prog.version, &s->st, NULL) == 1) {
			/* the worker's leave completed a sync round */
			s->applied_since_start++;
			log_update(s, w->id, NAN);
			pthread_cond_broadcast(&s->round_cv);
		}
		w->in_rule = 0;
	}
	if (w->active) {
		w->active = 0;
		s->nactive--;
	}
	if (done && !w->done) {
		w->done = 1;
		s->ndone++;
	}
	snprintf(extra, sizeof extra, "\"done\":%s", w->done ? "true" : "false");
	log_event(s, event, w->id, extra);
	/* the run is over once no worker is left, one at least finished, and as many as the run
	 * expects (gem-init --workers) have come: a fast worker done before a slow one joined
	 * does not end it, a dead one does not hold it up */
	if (s->nactive == 0 && s->ndone > 0 && s->nknown >= s->run.rule.nworkers &&
	    !s->opts.keep_running)
		request_stop(s, "every worker has finished");
}

/* ---- handlers ---- */

static int h_health(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	json_t *j;
	int rc;
	pthread_mutex_lock(&s->mu);
	j = json_pack("{s:b, s:I, s:i, s:b}", "ok", 1, "version", (json_int_t)s->prog.version, "workers",
		      s->nactive, "stopping", s->stop);
	pthread_mutex_unlock(&s->mu);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int h_run(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	return httpd_reply_json(req, 200, s->run.json);
}

static int h_params(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	const char *codec = httpd_query(req, "codec");
	float *copy;
	json_t *head;
	int rc;

	if (reply_check_codec(req, codec) < 0)
		return 0;
	if (!(copy = malloc(sizeof *copy * s->n)))
		return httpd_reply_error(req, 503, "busy", "out of memory");
	pthread_mutex_lock(&s->mu);
	memcpy(copy, s->theta, sizeof *copy * s->n);
	head = json_pack("{s:I, s:I, s:f, s:s}", "version", (json_int_t)s->prog.version, "samples",
			 (json_int_t)s->prog.samples, "elapsed", elapsed_of(s), "model", s->run.model_name);
	pthread_mutex_unlock(&s->mu);
	rc = reply_params(req, head, copy, s->n, codec);
	free(copy);
	json_decref(head);
	return rc;
}

static int h_join(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX], extra[64];
	json_error_t je;
	json_t *body = NULL, *v, *head;
	struct slot *w;
	int id = -1, rc;
	const char *codec = BLOB_CODEC_DEFAULT;

	if (req->body_len) {
		body = json_loadb((const char *)req->body, req->body_len, 0, &je);
		if (!json_is_object(body)) {
			json_decref(body);
			return httpd_reply_error(req, 400, "bad_json", "join: %s", je.text);
		}
		v = json_object_get(body, "worker");
		if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
			  json_integer_value(v) >= MAX_WORKERS)) {
			json_decref(body);
			return httpd_reply_error(req, 400, "bad_field", "worker: an integer in [0, %d)",
						 MAX_WORKERS);
		}
		if (v)
			id = (int)json_integer_value(v);
		v = json_object_get(body, "codec");
		if (json_is_string(v)) {
			if (!blob_codec_known(json_string_value(v))) {
				json_decref(body);
				return httpd_reply_error(req, 400, "bad_codec", "unknown codec");
			}
			codec = json_string_value(v) ;
		}
	}
	pthread_mutex_lock(&s->mu);
	if (s->stop) {
		pthread_mutex_unlock(&s->mu);
		json_decref(body);
		return httpd_reply_error(req, 410, "stopping", "the server is stopping");
	}
	if (id < 0) {
		for (id = 0; id < MAX_WORKERS && s->slot[id]; id++)
			;
		if (id == MAX_WORKERS) {
			pthread_mutex_unlock(&s->mu);
			json_decref(body);
			return httpd_reply_error(req, 503, "full", "%d workers is the limit", MAX_WORKERS);
		}
	}
	if (slot_alloc(s, id, &w, err) < 0) {
		pthread_mutex_unlock(&s->mu);
		json_decref(body);
		return httpd_reply_error(req, 503, "busy", "%s", err);
	}
	if (w->in_rule && !w->active) {
		/* back after a stop or a restart of the server: the rule kept its state */
		rule_sent(s->rule, id, s->theta);
	} else {
		if (w->in_rule) /* a restarted worker: its old state goes */
			rule_leave(s->rule, id, s->theta, &s->prog.version, &s->st, NULL);
		if (rule_join(s->rule, id, s->theta, err) < 0) {
			w->in_rule = 0;
			pthread_mutex_unlock(&s->mu);
			json_decref(body);
			return httpd_reply_error(req, 409, "refused", "%s", err);
		}
	}
	w->in_rule = 1;
	if (!w->active)
		s->nactive++;
	if (w->done)
		s->ndone--;
	w->active = 1;
	w->done = 0;
	w->joined_at = w->last_contact = cli_now();
	if (json_is_true(json_object_get(s->run.json, "shard")) ||
	    json_is_true(json_object_get(json_object_get(s->run.json, "train"), "shard"))) {
		int n = s->run.rule.nworkers > 0 ? s->run.rule.nworkers : 1;
		w->shard_i = id % n;
		w->shard_n = n;
	}
	memcpy(w->out, s->theta, sizeof(float) * s->n);
	snprintf(extra, sizeof extra, "\"rejoin\":%s", w->commits ? "true" : "false");
	log_event(s, "join", id, extra);
	/* what the worker did so far, so that it continues its data order where it stopped */
	head = json_pack("{s:i, s:I, s:I, s:I, s:I}", "worker", id, "version", (json_int_t)s->prog.version,
			 "seq", (json_int_t)w->last_seq, "commits", (json_int_t)w->commits, "samples",
			 (json_int_t)w->samples);
	if (w->shard_n > 0)
		json_object_set_new(head, "shard", json_pack("[i,i]", w->shard_i, w->shard_n));
	pthread_mutex_unlock(&s->mu);
	log_info("worker %d joined from %s", id, req->client);
	pthread_mutex_lock(&w->lock);
	rc = reply_vector(req, w, head, MSG_PARAMS, w->out, s->n, codec_of(s, codec));
	pthread_mutex_unlock(&w->lock);
	json_decref(head);
	json_decref(body);
	return rc;
}

static int refuse(struct server *s, struct slot *w, struct httpd_req *req, unsigned status,
		  const char *error, const char *detail)
{
	char extra[300];
	pthread_mutex_lock(&s->mu);
	if (w)
		w->refused++;
	snprintf(extra, sizeof extra, "\"reason\":\"%s\"", error);
	log_event(s, "refused", w ? w->id : -1, extra);
	pthread_mutex_unlock(&s->mu);
	log_warn("commit refused (%s): %s", error, detail);
	return httpd_reply_error(req, status, error, "%s", detail);
}

static int h_commit(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	struct msg m;
	const struct msg_blob *blob;
	json_t *v, *head;
	struct slot *w;
	int id, rc, applied, stale = 0;
	uint64_t base, seq, nsamples;
	double t0, t1, t2 = 0, t3, idle;
	float loss = NAN;
	const char *reply_name = MSG_PARAMS;

	if (msg_parse(req->body, req->body_len, &m, err) < 0)
		return refuse(s, NULL, req, 400, "bad_message", err);
	v = json_object_get(m.header, "worker");
	if (!json_is_integer(v) || !(w = slot_get(s, (int)json_integer_value(v))) || !w->active) {
		msg_free(&m);
		return refuse(s, NULL, req, 409, "unknown_worker", "join first (POST /v1/join)");
	}
	id = w->id;
	if (s->opts.drop_rate > 0) {
		int drop;
		pthread_mutex_lock(&s->tmu);
		drop = rng_float(&s->drop_rng) < s->opts.drop_rate;
		pthread_mutex_unlock(&s->tmu);
		if (drop) {
			msg_free(&m);
			httpd_add_header(req, "Retry-After", "0");
			return refuse(s, w, req, 503, "busy", "dropped on purpose (--drop-rate)");
		}
	}
	if (!json_is_integer(v = json_object_get(m.header, "base")) || json_integer_value(v) < 0) {
		msg_free(&m);
		return refuse(s, w, req, 400, "bad_field", "base: missing or not an integer >= 0");
	}
	base = (uint64_t)json_integer_value(v);
	v = json_object_get(m.header, "seq");
	seq = json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(m.header, "samples");
	nsamples = json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	if (json_is_number(v = json_object_get(m.header, "loss")))
		loss = (float)json_number_value(v);
	v = json_object_get(m.header, "idle");
	idle = json_is_number(v) ? json_number_value(v) : -1;
	if (!(blob = msg_find(&m, "update"))) {
		msg_free(&m);
		return refuse(s, w, req, 400, "bad_message", "no blob named \"update\"");
	}

	pthread_mutex_lock(&w->lock);
	t0 = cli_now();
	if (blob_decode(&w->codec, blob->data, &blob->meta, w->in, s->n, err) < 0) {
		pthread_mutex_unlock(&w->lock);
		msg_free(&m);
		return refuse(s, w, req, 400, "bad_blob", err);
	}
	for (size_t i = 0; i < s->n; i++)
		if (!isfinite(w->in[i])) {
			pthread_mutex_unlock(&w->lock);
			msg_free(&m);
			snprintf(err, sizeof err, "element %zu of the update is %g", i, (double)w->in[i]);
			return refuse(s, w, req, 400, "non_finite", err);
		}

	t1 = cli_now();
	fifo_enter(s);
	w->last_contact = s->last_commit = cli_now();
	if (idle >= 0)
		w->idle = idle;
	if (s->stop) {
		fifo_pass(s);
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_unlock(&w->lock);
		msg_free(&m);
		return httpd_reply_error(req, 410, "stopping", "the server is stopping");
	}
	if (seq && seq <= w->last_seq) {
		/* a commit sent again after a lost reply: answer with θ, apply nothing */
		rc = RULE_APPLIED;
		applied = 0;
		nsamples = 0;
		w->commits--; /* counted once already */
	} else if (s->opts.max_staleness >= 0 && !rule_desc_of(s->rule)->rounds &&
		   base < s->prog.version && s->prog.version - base > (uint64_t)s->opts.max_staleness) {
		/* bounded staleness: not applied; the worker recomputes at the current θ */
		char extra[96];
		rc = RULE_APPLIED;
		applied = 0;
		stale = 1;
		w->refused++;
		snprintf(extra, sizeof extra, "\"reason\":\"stale\",\"tau\":%llu",
			 (unsigned long long)(s->prog.version - base));
		log_event(s, "refused", id, extra);
	} else {
		t2 = cli_now();
		rc = rule_commit(s->rule, id, w->in, base, s->theta, &s->prog.version, w->out, &s->st, err);
		t2 = cli_now() - t2;
		applied = rc == RULE_APPLIED;
	}
	if (rc < 0) {
		fifo_pass(s);
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_unlock(&w->lock);
		msg_free(&m);
		return refuse(s, w, req, 409, "refused", err);
	}
	if (seq)
		w->last_seq = seq;
	w->commits++;
	w->samples += nsamples; /* the worker's data position, also for a refused stale commit */
	if (isfinite(loss) && nsamples)
		w->loss_sum += loss;
	if (!stale)
		s->prog.samples += nsamples;
	if (rc == RULE_PENDING) {
		/* sync: the round completes when the last worker commits; wait for it in order */
		uint64_t round = s->prog.version;
		fifo_pass(s);
		w->waiting = 1;
		while (s->prog.version == round && !s->stopping)
			pthread_cond_wait(&s->round_cv, &s->mu);
		w->waiting = 0;
		w->last_contact = cli_now();
		if (s->prog.version == round) {
			pthread_mutex_unlock(&s->mu);
			pthread_mutex_unlock(&w->lock);
			msg_free(&m);
			return httpd_reply_error(req, 410, "stopping", "the server stopped mid-round");
		}
	} else {
		if (applied) {
			s->applied_since_start++;
			w->tau_sum += s->st.staleness;
			if (s->st.staleness < w->tau_min)
				w->tau_min = s->st.staleness;
			if (s->st.staleness > w->tau_max)
				w->tau_max = s->st.staleness;
			log_update(s, id, loss);
			/* a round of a synchronous rule (sync, dma) may have completed */
			pthread_cond_broadcast(&s->round_cv);
			if (s->opts.max_updates && s->prog.version >= s->opts.max_updates)
				request_stop(s, "reached --max-updates");
		}
		fifo_pass(s);
	}
	/* easgd replies with the elastic difference rule_commit wrote into w->out */
	if (!strcmp(s->run.rule.name, "easgd") && applied)
		reply_name = "elastic";
	else
		memcpy(w->out, s->theta, sizeof(float) * s->n);
	head = json_pack("{s:I, s:I, s:b}", "version", (json_int_t)s->prog.version, "tau",
			 (json_int_t)s->st.staleness, "applied", applied || rc == RULE_PENDING);
	pthread_mutex_unlock(&s->mu);
	t3 = cli_now();
	rc = reply_vector(req, w, head, reply_name, w->out, s->n, codec_of(s, blob->meta.codec));
	t3 = cli_now() - t3;
	pthread_mutex_unlock(&w->lock);
	pthread_mutex_lock(&s->tmu);
	s->t_decode += t1 - t0;
	s->t_rule += t2;
	s->t_encode += t3;
	s->t_commits++;
	pthread_mutex_unlock(&s->tmu);
	json_decref(head);
	msg_free(&m);
	return rc;
}

static int h_leave(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	json_error_t je;
	json_t *body = json_loadb((const char *)req->body, req->body_len, 0, &je), *v, *j;
	struct slot *w;
	int done, rc, id;

	if (!json_is_object(body)) {
		json_decref(body);
		return httpd_reply_error(req, 400, "bad_json", "leave: %s", je.text);
	}
	v = json_object_get(body, "worker");
	id = json_is_integer(v) ? (int)json_integer_value(v) : -1;
	done = json_is_true(json_object_get(body, "done"));
	json_decref(body);
	if (!(w = slot_get(s, id)))
		return httpd_reply_error(req, 409, "unknown_worker", "no such worker");
	fifo_enter(s);
	if (w->active)
		worker_release(s, w, "leave", done);
	j = json_pack("{s:i, s:I}", "worker", w->id, "version", (json_int_t)s->prog.version);
	fifo_pass(s);
	pthread_mutex_unlock(&s->mu);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int h_stats(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	json_t *j, *ws = json_array(), *timing;
	double now = cli_now(), up, n;
	int rc;

	pthread_mutex_lock(&s->mu);
	up = now - s->started;
	for (int i = 0; i < s->nslots; i++) {
		struct slot *w = s->slot[i];
		double alive;
		if (!w)
			continue;
		/* a worker that has left worked from its join to its last contact */
		alive = (w->active ? now : w->last_contact) - w->joined_at;
		json_array_append_new(
			ws, json_pack("{s:i, s:b, s:b, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:f, s:f}", "worker",
				      w->id, "active", w->active, "done", w->done, "commits",
				      (json_int_t)w->commits, "samples", (json_int_t)w->samples, "refused",
				      (json_int_t)w->refused, "tau_mean",
				      w->commits ? (double)w->tau_sum / (double)w->commits : 0.0, "tau_min",
				      (json_int_t)(w->commits ? w->tau_min : 0), "tau_max",
				      (json_int_t)w->tau_max, "samples_per_s",
				      alive > 0 ? (double)w->samples / alive : 0.0, "loss_mean",
				      w->commits ? w->loss_sum / (double)w->commits : 0.0, "since_contact",
				      now - w->last_contact));
		json_object_set_new(json_array_get(ws, json_array_size(ws) - 1), "idle", json_real(w->idle));
	}
	pthread_mutex_lock(&s->tmu);
	n = s->t_commits ? (double)s->t_commits : 1;
	timing = json_pack("{s:I, s:f, s:f, s:f}", "commits", (json_int_t)s->t_commits, "decode",
			   1e6 * s->t_decode / n, "rule", 1e6 * s->t_rule / n, "encode", 1e6 * s->t_encode / n);
	pthread_mutex_unlock(&s->tmu);
	j = json_pack("{s:I, s:I, s:f, s:f, s:s, s:i, s:o, s:o}", "version", (json_int_t)s->prog.version,
		      "samples", (json_int_t)s->prog.samples, "uptime", up, "updates_per_s",
		      up > 0 ? (double)s->applied_since_start / up : 0.0, "rule", s->run.rule.name,
		      "active", s->nactive, "workers", ws, "commit_us", timing);
	pthread_mutex_unlock(&s->mu);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int h_checkpoint(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	json_t *j;
	int rc;
	pthread_mutex_lock(&s->mu);
	rc = checkpoint_locked(s, err);
	j = json_pack("{s:I}", "version", (json_int_t)s->prog.version);
	pthread_mutex_unlock(&s->mu);
	if (rc < 0) {
		json_decref(j);
		return httpd_reply_error(req, 500, "checkpoint", "%s", err);
	}
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int h_stop(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	json_t *j;
	int rc;
	pthread_mutex_lock(&s->mu);
	request_stop(s, "stopped by POST /v1/stop");
	j = json_pack("{s:b, s:I}", "stopping", 1, "version", (json_int_t)s->prog.version);
	pthread_mutex_unlock(&s->mu);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

/* ---- life cycle ---- */

static void server_free(struct server *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nslots; i++) {
		struct slot *w = s->slot[i];
		if (!w)
			continue;
		free(w->in);
		free(w->out);
		blob_codec_free(&w->codec);
		msg_buf_free(&w->buf);
		pthread_mutex_destroy(&w->lock);
		free(w);
	}
	rule_destroy(s->rule);
	free(s->theta);
	if (s->log)
		fclose(s->log);
	run_close(&s->run);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->tmu);
	pthread_cond_destroy(&s->fifo_cv);
	pthread_cond_destroy(&s->round_cv);
	pthread_cond_destroy(&s->stop_cv);
	free(s);
}

int serve_open(const char *rundir, const struct serve_opts *o, struct server **out, char *err)
{
	struct server *s = calloc(1, sizeof *s);
	struct model *m = NULL;
	const char *host = o->host ? o->host : "127.0.0.1";
	int rc;
	static const struct {
		const char *method, *path;
		httpd_handler_fn fn;
		int mutating;
	} routes[] = {
		{"GET", "/v1/health", h_health, 0},       {"GET", "/v1/run", h_run, 0},
		{"GET", "/v1/params", h_params, 0},       {"GET", "/v1/stats", h_stats, 0},
		{"POST", "/v1/join", h_join, 1},          {"POST", "/v1/commit", h_commit, 1},
		{"POST", "/v1/leave", h_leave, 1},        {"POST", "/v1/checkpoint", h_checkpoint, 1},
		{"POST", "/v1/stop", h_stop, 1},
	};
	struct httpd_route r[sizeof routes / sizeof *routes];
	struct httpd_config hc = {0};

	if (!s)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->opts = *o;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->tmu, NULL);
	pthread_cond_init(&s->fifo_cv, NULL);
	pthread_cond_init(&s->round_cv, NULL);
	pthread_cond_init(&s->stop_cv, NULL);
	s->started = cli_now();
	if ((rc = run_open(rundir, &s->run, err)) < 0) {
		free(s);
		return rc;
	}
	if ((rc = run_lock(&s->run, err)) < 0 || (rc = model_from_json(s->run.model, &m, err)) < 0)
		goto fail;
	s->layout = *model_layout(m);
	s->n = model_nparams(m);
	model_free(m);
	run_file(&s->run, "server.url", s->path_url, sizeof s->path_url);
	run_file(&s->run, "state.gem", s->path_state, sizeof s->path_state);
	if (!(s->theta = malloc(sizeof(float) * s->n))) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = run_params_load(&s->run, NULL, s->theta, s->n, &s->prog, err)) < 0)
		goto fail;
	if ((rc = rule_create(&s->run.rule, &s->layout, &s->rule, err)) < 0 ||
	    (rc = resume_state(s, err)) < 0 || (rc = run_log_open(&s->run, &s->log, err)) < 0)
		goto fail;
	if (s->opts.codec && !blob_codec_known(s->opts.codec)) {
		rc = gem_errf(err, GEM_EUSAGE, "unknown codec \"%s\"", s->opts.codec);
		goto fail;
	}
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
		r[i] = (struct httpd_route){routes[i].method, routes[i].path, routes[i].fn, s,
					    routes[i].mutating};
	hc.host = host;
	hc.port = o->port;
	hc.allow_public = o->allow_public;
	hc.token = o->token;
	/* the largest honest body: an uncompressed update plus a header */
	hc.max_body = o->max_body ? o->max_body : s->n * 4 + s->n / 64 + (1 << 16);
	hc.routes = r;
	hc.n_routes = sizeof routes / sizeof *routes;
	if ((rc = httpd_start(&hc, &s->http, err)) < 0)
		goto fail;
	snprintf(s->url, sizeof s->url, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host,
		 httpd_port(s->http));
	{
		char line[160];
		int n = snprintf(line, sizeof line, "%s\n", s->url);
		if ((rc = fs_write_atomic(s->path_url, line, (size_t)n, err)) < 0) {
			httpd_stop(s->http);
			goto fail;
		}
	}
	run_log_start(s->log, &s->run, s->run.rule.name, s->url, s->prog.version, &s->layout);
	s->last_checkpoint = s->last_commit = cli_now();
	rng_seed(&s->drop_rng, s->run.train.seed, RNG_DROP_RATE);
	*out = s;
	return 0;
fail:
	server_free(s);
	return rc;
}

const char *serve_url(const struct server *s)
{
	return s->url;
}

/* Workers silent for --worker-timeout are gone (a worker waiting in a sync round is not
 * silent); a run with no commit for --idle-timeout stops as failed. mu held. */
static void check_liveness(struct server *s)
{
	double now = cli_now();
	if (s->opts.worker_timeout > 0 && !s->stop) {
		for (int i = 0; i < s->nslots; i++) {
			struct slot *w = s->slot[i];
			if (!w || w->waiting || !w->in_rule || now - w->last_contact < s->opts.worker_timeout)
				continue;
			log_warn("worker %d: no contact for %.0f s, at version %llu: gone", w->id,
				 now - w->last_contact, (unsigned long long)s->prog.version);
			worker_release(s, w, "gone", 0);
		}
	}
	if (s->opts.idle_timeout > 0 && !s->stop && now - s->last_commit >= s->opts.idle_timeout) {
		s->failed = 1;
		request_stop(s, "no commit arrived for --idle-timeout seconds");
	}
}

int serve_failed(const struct server *s)
{
	return s->failed;
}

const char *serve_wait(struct server *s, volatile sig_atomic_t *sigflag)
{
	const char *why;
	char err[GEM_ERRMAX];
	pthread_mutex_lock(&s->mu);
	while (!s->stop && !*sigflag) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->stop_cv, &s->mu, &ts);
		fflush(s->log);
		check_liveness(s);
		if (s->opts.checkpoint_every > 0 && cli_now() - s->last_checkpoint >= s->opts.checkpoint_every &&
		    checkpoint_locked(s, err) < 0) {
			log_warn("checkpoint failed: %s", err);
			s->last_checkpoint = cli_now();
		}
	}
	why = s->stop ? s->stop_why : "stopped by a signal";
	pthread_mutex_unlock(&s->mu);
	return why;
}

int serve_close(struct server *s, const char *reason, char *err)
{
	int rc;
	char extra[200];
	double t0 = cli_now();
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	s->stopping = 1;
	pthread_cond_broadcast(&s->round_cv);
	/* Workers still active learn of the stop from their next request (410) and leave; give
	 * them a moment so that they end cleanly instead of retrying a closed port. */
	while (s->nactive > 0 && cli_now() - t0 < 3) {
		pthread_mutex_unlock(&s->mu);
		usleep(20000);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	httpd_stop(s->http);
	pthread_mutex_lock(&s->mu);
	rc = checkpoint_locked(s, err);
	snprintf(extra, sizeof extra, "\"reason\":\"%s\"", reason);
	log_event(s, "stop", -1, extra);
	pthread_mutex_unlock(&s->mu);
	unlink(s->path_url);
	server_free(s);
	return rc;
}
