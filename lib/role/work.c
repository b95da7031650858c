#include "role/work.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fsutil.h"
#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "nn/batcher.h"
#include "nn/data.h"
#include "nn/model.h"
#include "role/feedback.h"
#include "role/trainer.h"
#include "rules/worker_half.h"
#include "rules/rule.h"
#include "run/run.h"
#include "run/slice.h"
#include "run/srvset.h"
#include "wire/blob.h"
#include "wire/delta.h"
#include "wire/httpc.h"
#include "wire/msg.h"
#include "wire/proto.h"

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

/* One server of the run: the only one, or the k-th of K (gem-serve --slice k/K), which holds
 * θ's slice k, the elements [off, off + len) of θ, and has its own version counter, commit
 * numbers and worker record. Its two clients and replies: [0] the main thread's, [1] the
 * background commit's. */
struct wserver {
	struct worker *w;
	int k;
	size_t off, len;
	struct httpc *http[2];
	struct httpc_resp resp[2];
	struct msg_buf buf;      /* the commit message of this server's slice */
	struct blob_codec codec; /* this server's encoding and decoding */
	struct delta dl;         /* int8, int4, topk: the copy of the slice the server keeps too */
	uint64_t deltas;         /* replies that came as deltas */
	uint32_t crc;            /* the last copy_crc32 the server sent */
	uint64_t version, seq;
	int rc[2];               /* the last post's result, per client */
	char err[2][GEM_ERRMAX];
	pthread_t thread;
};

/* A background commit (dma's delta of the last boundary, or a fragment's commit with an
 * overlap), in flight on a thread of its own. While busy the thread owns each server's buf (the
 * message it sends), http[1], resp[1], rc[1] and err[1], and reads w->o and w->nsrv; the
 * training thread owns all the rest (x, the worker half's optimiser and buffers, the feed and
 * its batcher, w->v, the clients [0] that leave uses) and touches the thread's only after
 * bg_wait has joined it. */
struct bg_post {
	struct worker *w;
	pthread_t thread;
	int busy; /* a thread runs: join it before touching buf or resp */
};

/* A worker's connection, model, data and buffers, allocated once. */
struct worker {
	struct work_opts o;
	struct work_info info;
	struct srvset set;   /* the servers' URLs and slices */
	struct wserver *srv; /* the servers: one, or K, slice k of θ on srv[k] */
	int nsrv;
	struct httpc *http;  /* server 0's main client (GET /v1/run) */
	struct httpc_resp resp;
	struct feedback fb;  /* the commits' codec and its error feedback */
	struct run run;
	struct dataset ds;
	struct trainer t;
	struct feed f;
	int feed_open;
	struct rule_half l;
	size_t n;
	float *v;            /* a reply's vector when it is not θ for x (easgd's d, dma's X_{j+1}) */
	struct bg_post post;
	double idle;         /* background commits: seconds blocked waiting for a reply */
	double commit_s;     /* seconds the training thread spent in commits (background ones: */
	double encode_s;     /* building, waiting and the fold); CPU seconds in commit_build */
	uint64_t commit_sent, commit_received; /* the commits' messages' bytes, each way */
	int id;
	uint64_t version;    /* server 0's */
	uint64_t done_samples, done_commits; /* the server's count of this worker's work at join */
	uint64_t target;     /* samples at which the budget is spent */
	int part_i, part_n;   /* the data: trains on part I of N of the training set */
};

/* Every failure of a worker is the job's, but for want of memory. */
static int job_failure(int rc)
{
	return rc == GEM_ENOMEM ? rc : GEM_EFAIL;
}

/* θ of server srv's reply m, blob b (θ whole, or a delta from the copy), into the copy and v; 1
 * if the copy is no longer the server's (its copy_crc32 differs). */
static int take_theta(struct wserver *srv, const struct proto_vec *h, const struct msg_blob *b,
		      float *v, char *err)
{
	int is_delta = !strcmp(b->name, DELTA_BLOB), rc;
	const float *got;
	if ((rc = blob_decode_view(&srv->codec, b->data, &b->meta, srv->len, &got, err)) < 0 ||
	    (rc = delta_take(&srv->dl, is_delta, got, v, err)) < 0)
		return rc;
	srv->deltas += (uint64_t)is_delta;
	if (!srv->dl.copy || !h->has_crc)
		return 0;
	srv->crc = h->copy_crc32;
	if (srv->crc == delta_crc(&srv->dl))
		return 0;
	gem_errf(err, GEM_EFAIL, "the copy of θ is not the server's (CRC-32 %08x, the server's %08x)",
		 delta_crc(&srv->dl), srv->crc);
	return 1;
}

/* Decode the vector named name of server srv's reply resp into v (its slice, or with fragments
 * the fragment's len floats), once its header names srv's slice (srvset_check); header fields
 * into its version. θ comes whole or as a delta (take_theta); a fragment's θ comes whole. 1: the
 * copy of θ is not the server's (err says so), v is undefined. */
static int take_reply(struct wserver *srv, const struct httpc_resp *resp, const char *name,
		      float *v, size_t len, int *found, json_t **head, char *err)
{
	struct msg m;
	const struct msg_blob *b;
	struct proto_vec h;
	int rc;
	if ((rc = msg_parse(resp->body, resp->len, &m, err)) < 0)
		return rc;
	if ((rc = proto_vec_from_json(m.header, &h, err)) < 0 ||
	    (rc = srvset_check(&srv->w->set, srv->k, &h.slice, 0, err)) < 0) {
		msg_free(&m);
		return rc;
	}
	b = msg_find(&m, name);
	/* found (may be NULL): 1 if the blob named name came, 0 if θ came instead */
	if (found && !(*found = b != NULL))
		b = msg_find(&m, MSG_PARAMS);
	if (!b && (found || !strcmp(name, MSG_PARAMS)))
		b = msg_find(&m, DELTA_BLOB);
	if (!b || (len != srv->len && strcmp(b->name, MSG_PARAMS))) {
		msg_free(&m);
		return gem_errf(err, GEM_EFAIL, "the server's reply has no \"%s\" blob",
				b ? MSG_PARAMS : name);
	}
	rc = (strcmp(b->name, MSG_PARAMS) && strcmp(b->name, DELTA_BLOB)) || len != srv->len
		     ? blob_decode(&srv->codec, b->data, &b->meta, v, len, err)
		     : take_theta(srv, &h, b, v, err);
	if (rc != 0) {
		msg_free(&m);
		return rc;
	}
	if (h.has_version)
		srv->version = h.version;
	if (srv->k == 0)
		srv->w->version = srv->version;
	/* dynamic local updates: the inner steps to take next, at most the run's H */
	if (srv->k == 0 && h.window >= 1 && h.window <= srv->w->run.spec.rule.window)
		srv->w->l.window = h.window;
	if (head)
		*head = json_incref(m.header);
	msg_free(&m);
	return 0;
}

/* Join server srv (again) as worker id (< 0: a new id, server 0 only): its slice of θ into x;
 * what its reply says in *r. */
static int join_server(struct wserver *srv, int id, float *x, struct proto_join_reply *r,
		       char *err)
{
	struct worker *w = srv->w;
	/* what this session trains, for the server's progress */
	struct proto_join j = {.worker = id, .codec = w->fb.codec, .steps = w->o.t.steps,
			       .epochs = (uint64_t)w->o.t.epochs};
	json_t *body = proto_join_to_json(&j), *head = NULL;
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	int rc;
	json_decref(body);
	if (!text)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	rc = httpc_post_retry(srv->http[0], "/v1/join", "application/json", text, strlen(text),
			      w->o.t.retry_for, &srv->resp[0], err);
	free(text);
	if (rc < 0)
		return rc;
	/* θ whole: the copy is what came, so a CRC that differs is the server's fault */
	if ((rc = take_reply(srv, &srv->resp[0], MSG_PARAMS, x + srv->off, srv->len, NULL, &head,
			     err)) != 0)
		return rc < 0 ? rc : GEM_EFAIL;
	feedback_restart(&w->fb, srv->off, srv->len);
	rc = proto_join_reply_from_json(head, RUN_MAX_WORKERS, r, err);
	json_decref(head);
	if (rc == 0)
		srv->seq = r->seq;
	return rc;
}

/* Join (again) every server: θ into x, where the rule's worker half starts (over). Server 0 gives
 * the worker its id, which the other servers take too. */
static int join(struct worker *w, char *err)
{
	struct proto_join_reply r;
	float *x = model_params(w->t.m);
	int rc;
	for (int k = 0; k < w->nsrv; k++) {
		if ((rc = join_server(&w->srv[k], w->id, x, &r, err)) < 0) {
			if (w->nsrv > 1)
				gem_errprefix(err, "slice %d: ", k);
			return rc;
		}
		if (k)
			continue;
		w->id = r.worker;
		w->done_samples = r.samples;
		w->done_commits = r.commits;
		if (!w->o.t.part_set && r.part_n > 0) {
			w->part_i = r.part_i;
			w->part_n = r.part_n;
		}
	}
	return 0;
}

/* The worker's half of the rule from θ just received: its schedule where its feed stands, the
 * cosine ending at the run's budget of its feed. */
static void start_local(struct worker *w)
{
	rule_half_start(&w->l, model_params(w->t.m), feed_steps(&w->f, w->f.samples),
			feed_steps(&w->f, run_budget(&w->run, feed_epoch(&w->f))));
	rule_half_schedule(&w->l, w->version);
}

/* Leave every server: done (the budget spent), diverged (the loss was not finite, and which it
 * was: the run fails once every worker has left), or neither (to come back). */
static void leave(struct worker *w, int done, int diverged, float loss)
{
	char err[GEM_ERRMAX];
	struct proto_leave l = {.worker = w->id, .loss = loss,
				.how = diverged ? PROTO_LEFT_DIVERGED
				       : done	? PROTO_LEFT_DONE
						: PROTO_LEFT_PAUSED};
	json_t *j = proto_leave_to_json(&l);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!body) {
		log_debug("leave: out of memory");
		return;
	}
	for (int k = 0; k < w->nsrv; k++) {
		struct wserver *srv = &w->srv[k];
		if (srv->dl.copy)
			log_debug("slice %d: %llu replies as deltas; the copy's CRC-32 %08x, the "
				  "server's last %08x", k, (unsigned long long)srv->deltas,
				  delta_crc(&srv->dl), srv->crc);
		if (httpc_post_retry(srv->http[0], "/v1/leave", "application/json", body, strlen(body),
				     5, &srv->resp[0], err) < 0)
			log_debug("leave: %s", err);
	}
	free(body);
}

/* The commit messages of the vector v (with fragments: the fragment's slice, rule_half_commit):
 * each server's slice, or the one server's fragment, into its buf. */
static int commit_build(struct worker *w, const float *v, float loss, uint64_t samples, char *err)
{
	int frag = w->l.nfrag > 1; /* one server (gem-serve refuses fragments when sliced) */
	/* error feedback keeps its memory at the fragment's place in θ */
	const float *at = frag ? v - w->l.off : v;
	for (int k = 0; k < w->nsrv; k++) {
		struct wserver *srv = &w->srv[k];
		struct msg_blob blob = {.name = "update"};
		const void *enc;
		json_t *head;
		int rc;
		struct proto_commit c = {.worker = w->id, .base = srv->version, .seq = ++srv->seq,
					 .samples = samples, .loss = loss,
					 .idle = w->l.d->background ? w->idle : -1,
					 .fragment = frag ? w->l.sent : -1};
		if (!(head = proto_commit_to_json(&c)))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		rc = feedback_encode(&w->fb, &srv->codec, at, frag ? w->l.off : srv->off,
				     frag ? w->l.len : srv->len, &enc, &blob.meta, err);
		blob.data = enc;
		if (rc == 0)
			rc = msg_build(&srv->buf, head, &blob, 1, err);
		json_decref(head);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Post server srv's commit message with client c. */
static void post_one(struct wserver *srv, int c)
{
	srv->rc[c] = httpc_post_retry(srv->http[c], "/v1/commit", MSG_CONTENT_TYPE, srv->buf.data,
				      srv->buf.len, srv->w->o.t.retry_for, &srv->resp[c], srv->err[c]);
	if (srv->rc[c] == HTTPC_ETRANSPORT && httpc_timed_out(srv->http[c]))
		snprintf(srv->err[c], GEM_ERRMAX, "server %s: no reply to the commit in %g s (a "
			 "round waits for its slowest worker: --round-timeout)",
			 httpc_base_url(srv->http[c]), srv->w->o.round_timeout);
}

static void *post_main(void *arg)
{
	post_one(arg, 0);
	return NULL;
}

/* Post every server's commit with client c, in parallel: a thread per server beyond the first
 * (client 1, the background commit's thread, posts them one after the other). */
static void post_all(struct worker *w, int c)
{
	int started[SLICE_MAX] = {0};
	sigset_t all, old;
	if (c == 0 && w->nsrv > 1) {
		/* signals are for the caller's thread, which polls the flag they set */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		for (int k = 1; k < w->nsrv; k++)
			started[k] = !pthread_create(&w->srv[k].thread, NULL, post_main, &w->srv[k]);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	for (int k = 0; k < w->nsrv; k++)
		if (!started[k])
			post_one(&w->srv[k], c);
	for (int k = 1; k < w->nsrv; k++)
		if (started[k])
			pthread_join(w->srv[k].thread, NULL);
}

/* Join server srv again, for the reason in err: 1 joined (its slice of x is θ, the rule's worker
 * half starts over), 2 the run is over, < 0 an error. */
static int rejoin_server(struct wserver *srv, char *err)
{
	struct worker *w = srv->w;
	struct proto_join_reply r;
	int rc;
	log_warn("worker %d: %s; joining again", w->id, err);
	rc = join_server(srv, w->id, model_params(w->t.m), &r, err);
	if (rc < 0)
		return srv->resp[0].status == 410 ? 2 : rc;
	start_local(w);
	return 1;
}

/* What a commit's answer means: 0 a reply to take, 1 the server forgot us or our base (a
 * restart): rejoined if rejoin (that server only), nothing applied there; 2 the run is over;
 * < 0 an error (in err). */
static int commit_status(struct wserver *srv, int c, int rejoin, char *err)
{
	struct worker *w = srv->w;
	const struct httpc_resp *resp = &srv->resp[c];
	int rc = srv->rc[c];
	if (rc < 0)
		snprintf(err, GEM_ERRMAX, "%s%s", w->nsrv > 1 ? "slice: " : "", srv->err[c]);
	if (rc == HTTPC_EHTTP && resp->status == 410)
		return 2;
	if (rc == HTTPC_EHTTP && resp->status == 409 && rejoin)
		return rejoin_server(srv, err);
	return rc < 0 ? rc : 0;
}

/* easgd with servers that answered differently: the slices that came as θ (kind 0) or were
 * joined again (kind 2, x already θ there) become the d that takes x there: x − θ, or 0. */
static void elastic_mix(struct worker *w, const char *kind, float *x, float *v)
{
	for (int k = 0; k < w->nsrv; k++)
		for (size_t i = w->srv[k].off; kind[k] != 1 && i < w->srv[k].off + w->srv[k].len; i++)
			v[i] = kind[k] == 0 ? x[i] - v[i] : 0;
}

/* 1 if the reply's vector goes beside x, to fold in (easgd's d, dma's X_{j+1}, a fragment's θ
 * to mix in), 0 if it is θ into x */
static int reply_beside(const struct rule_half *l)
{
	return l->d->reply_elastic || l->d->sends == RULE_SENDS_CYCLE || l->streams;
}

/* Fold the replies of client c into x as the rule says: θ itself, easgd's d ("elastic"), dma's
 * X_{j+1} or a fragment's θ to mix in, each slice from its server's reply. 1: a server rejoined
 * (its slice is θ now); 2: the run is over; < 0 an error. */
static int fold_replies(struct worker *w, int c, int rejoin, char *err)
{
	float *x = model_params(w->t.m);
	int elastic = 0, direct = !reply_beside(&w->l);
	/* a fragment's θ at its place in v */
	float *v = direct ? x : w->v;
	int frag = w->l.nfrag > 1;
	size_t off = frag ? w->l.off : 0;
	char kind[SLICE_MAX]; /* 0: θ came, 1: easgd's d came, 2: joined again */
	int rc, any = 0, over = 0;
	for (int k = 0; k < w->nsrv; k++) {
		struct wserver *srv = &w->srv[k];
		int e = 0;
		/* an applied commit of easgd is answered with d; a refused stale one or a resend
		 * with θ; a copy of θ that is not the server's any more starts over from θ */
		if ((rc = commit_status(srv, c, rejoin, err)) == 0) {
			rc = take_reply(srv, &srv->resp[c], w->l.d->reply_elastic ? "elastic" : MSG_PARAMS,
					v + srv->off + off, frag ? w->l.len : srv->len, &e, NULL, err);
			if (rc == 0) {
				kind[k] = (char)e;
				elastic |= e;
				continue;
			}
			if (rc == 1)
				rc = rejoin ? rejoin_server(srv, err) : GEM_EFAIL;
		}
		if (rc < 0)
			return rc;
		over |= rc == 2;
		kind[k] = 2;
		if (rc == 1 && !direct)
			/* a rejoined server's slice is θ: nothing to fold there */
			memcpy(v + srv->off, x + srv->off, sizeof(float) * srv->len);
		any |= rc == 1;
	}
	elastic &= w->l.d->reply_elastic;
	if (over)
		return 2;
	if (w->nsrv == 1 && any)
		return 1; /* joined again: x is θ */
	if (w->nsrv > 1 && elastic)
		elastic_mix(w, kind, x, v);
	rule_half_reply(&w->l, x, v + off, elastic);
	return any;
}

/* Send one commit of v and fold its replies in. 0: done; 1: a server forgot us or our base (a
 * restart): rejoined, nothing applied there; 2: the run is over. */
static int commit(struct worker *w, const float *v, float loss, uint64_t samples, char *err)
{
	double t = clock_mono(), cpu = clock_thread();
	int rc;
	if ((rc = commit_build(w, v, loss, samples, err)) < 0)
		return rc;
	w->encode_s += clock_thread() - cpu;
	post_all(w, 0);
	rc = fold_replies(w, 0, 1, err);
	w->commit_s += clock_mono() - t;
	for (int k = 0; k < w->nsrv; k++) {
		w->commit_sent += w->srv[k].buf.len;
		w->commit_received += w->srv[k].resp[0].len;
	}
	return rc;
}

/* ---- background commits: dma, delayed model averaging, and the overlap (doc/rules.md) ----
 *
 * At each boundary the worker commits the vector rule_half_commit gives (dma: its cycle's
 * delta; with an overlap T: a fragment) and carries on; the commit's round trip (the server
 * holds it until the round is in) overlaps the next window. The worker blocks, and counts idle
 * time, only if the reply has not come back when it is due: dma's at the next boundary, an
 * overlap's after the T-th inner step of the next window (rule_half_due), where gem-sim mixes
 * it in; the reply then goes to rule_half_reply. A second thread rather than curl's multi
 * interface: the post and its retries (httpc_post_retry) stay one blocking call, and the
 * transfer goes on while a step computes, with nothing to pump between steps. */

/* 1 if the worker's commits go out in the background */
static int commits_behind(const struct worker *w)
{
	return w->l.d->background || w->l.overlap > 0;
}

static void *bg_post_run(void *arg)
{
	struct bg_post *p = arg;
	post_all(p->w, 1);
	return NULL;
}

/* Send v in the background: the message is built here, the thread only posts it. */
static int bg_send(struct worker *w, const float *v, float loss, uint64_t samples, char *err)
{
	double t = clock_mono(), cpu = clock_thread();
	sigset_t all, old;
	int rc;

	if ((rc = commit_build(w, v, loss, samples, err)) < 0)
		return rc;
	w->encode_s += clock_thread() - cpu;
	w->commit_s += clock_mono() - t;
	/* signals are for the caller's thread, which polls the flag they set */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&w->post.thread, NULL, bg_post_run, &w->post);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return gem_errf(err, GEM_EFAIL, "pthread_create: %s", strerror(rc));
	w->post.busy = 1;
	return 0;
}

/* Wait for the answer to the commit in flight and fold it in. As commit(): 0 taken, 1 rejoined
 * (only if rejoin), 2 the run is over, < 0 an error. */
static int bg_wait(struct worker *w, int rejoin, char *err)
{
	double t = clock_mono();
	int rc;

	pthread_join(w->post.thread, NULL);
	w->post.busy = 0;
	w->idle += clock_mono() - t;
	for (int k = 0; k < w->nsrv; k++) {
		w->commit_sent += w->srv[k].buf.len;
		w->commit_received += w->srv[k].resp[1].len;
	}
	rc = fold_replies(w, 1, rejoin, err);
	w->commit_s += clock_mono() - t;
	return rc;
}

/* A boundary: fold in the last commit's reply, then send this window's vector. 1: rejoined after
 * a restart, nothing sent (the worker starts over from θ); else as bg_wait. */
static int bg_boundary(struct worker *w, float loss, uint64_t samples, char *err)
{
	int rc;
	if (w->post.busy && (rc = bg_wait(w, 1, err)) != 0)
		return rc;
	return bg_send(w, rule_half_commit(&w->l, model_params(w->t.m)), loss, samples, err);
}

/* The token, and every server's two clients (the main thread's, the background commit's):
 * urls is one URL, or the K servers' in slice order, comma-separated (srvset). */
static int open_http(struct worker *w, const char *urls, char *err)
{
	char *token = NULL;
	int rc = 0;
	if (!(w->srv = calloc(SLICE_MAX, sizeof *w->srv)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if ((rc = srvset_parse(&w->set, urls, err)) < 0)
		return rc;
	if (w->o.t.token_file && fs_read_token(w->o.t.token_file, &token, err) < 0)
		return GEM_EUSAGE;
	for (int k = 0; k < w->set.n && rc == 0; k++) {
		struct wserver *srv = &w->srv[k];
		srv->w = w;
		srv->k = k;
		blob_codec_init(&srv->codec);
		for (int c = 0; c < 2 && rc == 0; c++)
			if (httpc_new(w->set.url[k], token, (long)(w->o.round_timeout * 1000),
				      &srv->http[c], err) < 0 ||
			    httpc_set_cacert(srv->http[c], w->o.t.cacert, err) < 0)
				rc = GEM_EUSAGE;
	}
	w->nsrv = w->set.n;
	w->http = w->srv[0].http[0];
	fs_free_secret(token);
	return rc;
}

/* The servers' slices of θ's n elements: with K > 1, each server must serve the slice of its
 * place in the list (its GET /v1/health, srvset_check_health). */
static int open_servers(struct worker *w, char *err)
{
	srvset_layout(&w->set, w->n);
	for (int k = 0; k < w->nsrv; k++) {
		struct wserver *srv = &w->srv[k];
		int rc;
		srv->off = w->set.slice[k].off;
		srv->len = w->set.slice[k].len;
		if (w->nsrv == 1)
			break;
		if ((rc = httpc_get_retry(srv->http[0], "/v1/health", w->o.t.retry_for, &srv->resp[0],
					  err)) < 0 ||
		    (rc = srvset_check_health(&w->set, k, srv->resp[0].body, srv->resp[0].len, NULL,
					      err)) < 0)
			return rc;
	}
	return 0;
}

/* The run from GET /v1/run, its model, its training set and the rule's worker half. */
static int open_run(struct worker *w, const char *url, char *err)
{
	struct optim_config oc;
	json_t *runjson;
	int rc;
	/* the first contact: once at once, then, if the server is not there yet (or busy), the
	 * caller hears that the worker waits for it, and the retries go on */
	rc = httpc_get(w->http, "/v1/run", &w->resp, err);
	if (rc == HTTPC_ETRANSPORT || (rc == HTTPC_EHTTP && w->resp.status == 503)) {
		if (w->o.waiting)
			w->o.waiting(w->o.waiting_ctx, url, w->o.t.retry_for);
		rc = httpc_get_retry(w->http, "/v1/run", w->o.t.retry_for, &w->resp, err);
	}
	if (rc < 0)
		return rc;
	if (!(runjson = json_loadb(w->resp.body, w->resp.len, 0, NULL)))
		return gem_errf(err, GEM_EFAIL, "%s: GET /v1/run: not JSON", url);
	if ((rc = run_from_json(runjson, &w->run, err)) < 0) {
		gem_errprefix(err, "%s: ", url);
		return rc;
	}
	if ((rc = trainer_open(&w->t, &w->run, err)) < 0 ||
	    (rc = run_data_load(&w->run, NULL, "train", &w->ds, err)) < 0)
		return rc;
	w->n = model_nparams(w->t.m);
	if ((rc = open_servers(w, err)) < 0)
		return rc;
	/* dma's local steps are momentum SGD with the run's μ, Nesterov and weight decay (the
	 * server averages models and keeps no momentum of its own); AdamW's every rule's. The
	 * cosine's end is the feed's budget, known once joined (start_local). */
	run_optim_config(&w->run, UINT64_MAX, &oc);
	if ((rc = rule_half_init(&w->l, &w->run.spec.rule, model_layout(w->t.m), &oc, err)) < 0)
		return rc;
	if (reply_beside(&w->l) && !(w->v = malloc(sizeof(float) * w->n)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for the worker's %zu floats", w->n);
	if ((rc = feedback_open(&w->fb, w->o.t.codec, w->l.d, w->n, err)) < 0)
		return rc;
	for (int k = 0; k < w->nsrv; k++)
		if ((rc = delta_open(&w->srv[k].dl, w->fb.codec, w->srv[k].len, err)) < 0)
			return rc;
	return 0;
}

/* Join, and the worker's feed where the server saw it stop: a worker that comes back under its
 * id continues its data order, so that a run interrupted and resumed is the run left alone. */
static int open_join(struct worker *w, char *err)
{
	int rc;
	if ((rc = join(w, err)) < 0)
		return rc;
	/* each worker its own shuffled copy of the data (the paper's setup), or a disjoint part of it */
	if ((rc = feed_open(&w->f, &w->run, &w->ds, w->id, w->part_i, w->part_n, err)) < 0)
		return rc;
	w->feed_open = 1;
	/* a worker reads no other samples than its part's: it holds no others */
	if ((rc = batcher_keep_part(&w->f.b, &w->ds, err)) < 0)
		return rc;
	feed_seek(&w->f, w->done_samples);
	start_local(w);
	w->target = w->o.t.steps ? UINT64_MAX
		    : w->o.t.epochs ? w->done_samples + (uint64_t)w->o.t.epochs * feed_epoch(&w->f)
				  : run_budget(&w->run, feed_epoch(&w->f));
	w->info = (struct work_info){.worker = w->id, .rule = w->run.spec.rule.name,
				     .epoch = feed_epoch(&w->f), .part_n = w->part_n,
				     .background = w->l.d->background};
	return 0;
}

int work_open(const char *url, const struct work_opts *o, struct worker **out, char *err)
{
	const char *codec = o->t.codec ? o->t.codec : BLOB_RAW;
	struct worker *w = calloc(1, sizeof *w);
	int rc;
	*out = NULL;
	if (!w)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	w->o = *o;
	w->id = o->worker_id;
	w->part_i = o->t.part_i;
	w->part_n = o->t.part_n;
	w->run.lock_fd = -1;
	w->post.w = w;
	if (blob_codec_check(codec, err) < 0) {
		free(w);
		return GEM_EUSAGE;
	}
	log_debug("commits in codec %s", codec);
	if ((rc = open_http(w, url, err)) < 0) {
		work_close(w);
		return rc;
	}
	if ((rc = open_run(w, url, err)) < 0 || (rc = open_join(w, err)) < 0) {
		work_close(w);
		return job_failure(rc);
	}
	*out = w;
	return 0;
}

const struct work_info *work_info(const struct worker *w)
{
	return &w->info;
}

/* One window of local steps from x (one step for most rules): every step trainer_step, the
 * rule's local step after it, and with an overlap the reply of the commit in flight waited for
 * and mixed in after the T-th (a server that forgot the worker: joined again, and the window
 * goes on from θ). *got is the samples taken. 0; 1: a loss was not finite; 2: the run is over;
 * < 0 the commit in flight failed (err says why). */
static int train_window(struct worker *w, struct work_result *r, uint64_t *got, char *err)
{
	float *x = model_params(w->t.m), loss;
	double lsum = 0;
	int n, rc;

	*got = 0;
	rule_half_begin(&w->l, x);
	for (int k = 0; k < w->l.window && r->samples + *got < w->target; k++) {
		if ((rc = trainer_step(&w->t, &w->f, &loss, &n, err)) < 0)
			return rc;
		if (rc) {
			r->loss = loss;
			return 1;
		}
		rule_half_step(&w->l, x, model_grads(w->t.m));
		if (w->post.busy && rule_half_due(&w->l)) {
			log_debug("worker %d: %d inner step%s taken with the commit in flight; its "
				  "reply is due", w->id, w->l.overlap, GEM_S(w->l.overlap));
			if ((rc = bg_wait(w, 1, err)) != 0 && rc != 1)
				return rc;
		}
		lsum += loss;
		*got += (uint64_t)n;
		r->steps++;
		r->loss = (float)(lsum / (k + 1));
	}
	return 0;
}

/* The end of a session: the background commit still in flight, then leave (done only if the
 * budget was spent). rc is the loop's; returns the session's. */
static int finish(struct worker *w, prog_stop_flag *stop, struct work_result *r, int rc,
		  char *err)
{
	int failed = rc < 0 || r->end == WORK_DIVERGED, stopped = stop && *stop, left = 0;
	/* an interrupted worker (a signal, a server that ended the run early) is not done: it
	 * comes back under its id to the rest of its budget */
	r->unfinished = r->samples < w->target && !(w->o.t.steps && r->steps >= w->o.t.steps);
	r->target = w->target;
	stopped |= r->unfinished;
	if (w->post.busy) {
		/* dma interrupted leaves first: the round then completes without us even if every
		 * worker was interrupted at once. An overlap's commit is one the worker without it
		 * would have seen answered before it left: its reply first, then the leave, which
		 * would otherwise race the commit to the server and have it refused. */
		char e[GEM_ERRMAX];
		double before = w->idle;
		int c;
		if ((failed || stopped) && w->l.d->background) {
			leave(w, 0, r->end == WORK_DIVERGED, r->loss);
			left = 1;
		}
		c = bg_wait(w, !left, e);
		r->idle_last = w->idle - before;
		if (c < 0 && !failed && !stopped) {
			snprintf(err, GEM_ERRMAX, "%s", e);
			rc = c;
			failed = 1;
		}
	}
	if (!left)
		leave(w, !failed && !stopped, r->end == WORK_DIVERGED, r->loss);
	return rc;
}

/* Where the session stands, into r: since t0, and the commits' figures so far. */
static void figures(const struct worker *w, struct work_result *r, double t0)
{
	r->version = w->version;
	r->idle = w->idle;
	r->commit_seconds = w->commit_s;
	r->encode_seconds = w->encode_s;
	r->commit_sent = w->commit_sent;
	r->commit_received = w->commit_received;
	r->seconds = clock_mono() - t0;
}

int work_run(struct worker *w, prog_stop_flag *stop, work_progress_fn progress, void *ctx,
	     struct work_result *r, char *err)
{
	double t0 = clock_mono();
	int rc = 0, c;

	memset(r, 0, sizeof *r);
	r->samples = w->done_samples;
	r->version = w->version;
	while (!(stop && *stop) && r->samples < w->target && (!w->o.t.steps || r->steps < w->o.t.steps)) {
		uint64_t got;
		double step_start = clock_mono(), idle = w->idle;
		if ((c = train_window(w, r, &got, err)) == 1) {
			r->end = WORK_DIVERGED;
			break;
		}
		/* the steps' time, not the overlap's wait for a reply */
		if (c == 0 && w->o.t.slowdown > 1)
			work_slowdown(clock_mono() - step_start - (w->idle - idle), w->o.t.slowdown);
		if (c == 0)
			c = commits_behind(w) ? bg_boundary(w, r->loss, got, err)
					      : commit(w, rule_half_commit(&w->l, model_params(w->t.m)),
						       r->loss, got, err);
		if (c < 0) {
			rc = job_failure(c);
			break;
		}
		if (c == 2) {
			r->end = WORK_SERVER_ENDED;
			break;
		}
		r->samples += got;
		r->commits++;
		figures(w, r, t0);
		if (w->o.die_after && r->commits >= w->o.die_after) {
			/* fault injection: stop as a crash would, without a word to the server */
			r->end = WORK_DIE_AFTER;
			return 0;
		}
		if (progress)
			progress(r, ctx);
	}
	if (r->end == WORK_BUDGET && stop && *stop)
		r->end = WORK_STOPPED;
	rc = finish(w, stop, r, rc, err);
	figures(w, r, t0);
	return rc < 0 ? job_failure(rc) : 0;
}

void work_close(struct worker *w)
{
	if (!w)
		return;
	if (w->post.busy)
		pthread_join(w->post.thread, NULL);
	rule_half_free(&w->l);
	free(w->v);
	feedback_close(&w->fb);
	if (w->feed_open)
		feed_close(&w->f);
	dataset_free(&w->ds);
	trainer_close(&w->t);
	if (w->run.json)
		run_close(&w->run);
	for (int k = 0; w->srv && k < w->nsrv; k++) {
		for (int c = 0; c < 2; c++) {
			httpc_resp_free(&w->srv[k].resp[c]);
			httpc_free(w->srv[k].http[c]);
		}
		blob_codec_free(&w->srv[k].codec);
		delta_close(&w->srv[k].dl);
		msg_buf_free(&w->srv[k].buf);
	}
	free(w->srv);
	httpc_resp_free(&w->resp);
	free(w);
}
