/* serve: gem-serve's HTTP front of the parameter-server core (role/ps). Here live only what
 * HTTP needs: parsing requests, one set of reply buffers per worker, the FIFO order in which
 * commits reach the core, the wait of a commit held for its round, timers and timing. */
#include "role/serve.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "base/rng.h"
#include "nn/layout.h"
#include "role/ps.h"
#include "wire/blob.h"
#include "wire/delta.h"
#include "wire/httpd.h"
#include "wire/msg.h"
#include "wire/reply.h"

/* One reply to a worker: room for the message's first line, then the reply vector, which the
 * core writes in place; libmicrohttpd sends it from there without a copy and gives it back
 * when it is done with it (reply_done). A compressed reply is built in msg instead. */
#define REPLY_HEAD_ROOM 4096
#define SLOT_REPLIES 3 /* replies of one worker out at once: 1 but for a resend's overlap */
/* At its stop, a server whose follower polled in the last SERVE_FOLLOWER_RECENT s (one polls
 * at least every 20 s) waits up to SERVE_FOLLOWER_WAIT s for its next poll (follower_wait). */
#define SERVE_FOLLOWER_RECENT 30.0
#define SERVE_FOLLOWER_WAIT 5.0

struct reply_buf {
	struct slot *slot;
	int busy;           /* libmicrohttpd holds it (under the server's mu) */
	unsigned char *mem; /* REPLY_HEAD_ROOM bytes, then n floats */
	struct msg_buf msg;
};

/* A worker's buffers, allocated at its join and freed when it leaves (or is gone); `lock` keeps
 * two requests of one worker from sharing them. `refs` (under the server's mu) counts the slot
 * table's reference, each request's that uses the buffers and each reply's that
 * libmicrohttpd still holds: a worker may leave while a request of its own still holds them,
 * and the last reference frees them. */
struct slot {
	struct server *s;
	pthread_mutex_t lock;
	int refs;
	struct reply_buf *rb[SLOT_REPLIES]; /* made when first needed (the first at the join) */
	struct blob_codec codec;
	struct msg_buf head; /* a raw reply's first line */
	struct delta dl;     /* a worker of int8, int4 or topk: the copy of θ it holds */
	uint64_t hold;       /* under mu: the number of the last of its commits to wait for a round */
	/* under mu, what serve_memory counts of the buffers under lock: dl's copy, and the
	 * codec's and the messages' scratch as the last request left them (slot_scratch) */
	uint64_t copy_bytes, scratch_bytes;
};

struct server {
	struct ps *ps;
	struct serve_opts opts;
	struct httpd *http;
	struct reply_get get; /* the GET routes it shares with SGP nodes */
	char url[128];
	size_t n;

	/* Everything below is guarded by mu, and the core with it. Commits pass through in ticket
	 * order (FIFO). */
	pthread_mutex_t mu;
	pthread_cond_t fifo_cv, round_cv, stop_cv;
	uint64_t ticket_next, ticket_serving;
	struct slot *slot[PS_MAX_WORKERS];
	int nslots;          /* workers with buffers: at most opts.max_workers */
	int stopping;        /* serve_close runs: waiters give up */
	double last_checkpoint;
	uint64_t mem_peak;   /* serve_memory's largest total */

	/* One checkpoint at a time: its snapshot is taken under mu, written under ckmu alone
	 * (lock order: ckmu, then mu). */
	pthread_mutex_t ckmu;
	struct run_ckpt ck;

	/* Leaf locks: --drop-rate's draws, where a commit's server time goes (seconds, summed). */
	pthread_mutex_t tmu;
	struct rng drop_rng;
	double t_decode, t_rule, t_encode;
	uint64_t t_commits;
};

/* HTTP status of a core status. */
static unsigned http_status(int st)
{
	switch (st) {
	case PS_E_STOPPING: return 410;
	case PS_E_FULL: case PS_E_NOMEM: return 503;
	case PS_E_UNKNOWN: case PS_E_REFUSED: case PS_E_RESENT: case PS_E_REJOINED: return 409;
	case PS_E_NON_FINITE: case PS_E_NON_FINITE_RESULT: return 400;
	}
	return 200;
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

/* Let the next ticket in; mu stays held. A stop the core decided wakes serve_wait. */
static void fifo_pass(struct server *s)
{
	s->ticket_serving++;
	pthread_cond_broadcast(&s->fifo_cv);
	if (ps_stopping(s->ps))
		pthread_cond_broadcast(&s->stop_cv);
}

/* Let the next ticket in and release mu. */
static void fifo_leave(struct server *s)
{
	fifo_pass(s);
	pthread_mutex_unlock(&s->mu);
}

/* ---- worker buffers ---- */

static float *reply_vec(const struct reply_buf *b)
{
	return (float *)(b->mem + REPLY_HEAD_ROOM);
}

static struct reply_buf *reply_buf_new(struct slot *w, size_t n)
{
	struct reply_buf *b = calloc(1, sizeof *b);
	if (b && !(b->mem = malloc(REPLY_HEAD_ROOM + sizeof(float) * n))) {
		free(b);
		return NULL;
	}
	if (b)
		b->slot = w;
	return b;
}

static void slot_free(struct slot *w)
{
	for (int i = 0; i < SLOT_REPLIES; i++) {
		if (!w->rb[i])
			continue;
		free(w->rb[i]->mem);
		msg_buf_free(&w->rb[i]->msg);
		free(w->rb[i]);
	}
	blob_codec_free(&w->codec);
	msg_buf_free(&w->head);
	delta_close(&w->dl);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

/* Worker id's buffers with a reference for the caller (slot_put), made if it has none; mu held.
 * NULL and err set when out of memory. (h_join has checked --max-workers before the join.) */
static struct slot *slot_get(struct server *s, int id, char *err)
{
	struct slot *w;
	if ((w = s->slot[id])) {
		w->refs++;
		return w;
	}
	w = calloc(1, sizeof *w);
	if (!w || !(w->rb[0] = reply_buf_new(w, s->n))) {
		free(w);
		gem_errf(err, GEM_ENOMEM, "out of memory for worker %d", id);
		return NULL;
	}
	w->s = s;
	pthread_mutex_init(&w->lock, NULL);
	blob_codec_init(&w->codec);
	w->refs = 2; /* the table's and the caller's */
	s->nslots++;
	return s->slot[id] = w;
}

/* Worker id's buffers with a reference for the caller, or NULL if it has none; mu held. */
static struct slot *slot_ref(struct server *s, int id)
{
	struct slot *w = s->slot[id];
	if (w)
		w->refs++;
	return w;
}

/* Drop a reference taken by slot_get or slot_ref, or (b not NULL) reply_take's. */
static void slot_release(struct server *s, struct slot *w, struct reply_buf *b)
{
	int last;
	pthread_mutex_lock(&s->mu);
	if (b)
		b->busy = 0;
	last = !--w->refs;
	pthread_mutex_unlock(&s->mu);
	if (last)
		slot_free(w);
}

static void slot_put(struct server *s, struct slot *w)
{
	slot_release(s, w, NULL);
}

/* The worker left or is gone: its buffers go once no request uses them; mu held. */
static void slot_drop(struct server *s, int id)
{
	struct slot *w = s->slot[id];
	if (!w)
		return;
	s->slot[id] = NULL;
	s->nslots--;
	if (!--w->refs)
		slot_free(w);
}

/* A reply buffer of w that libmicrohttpd does not hold, with a reference on w for the reply;
 * mu held. NULL when every one is out (a worker resending while its replies are still being
 * sent) or memory ran out. */
static struct reply_buf *reply_take(struct server *s, struct slot *w)
{
	for (int i = 0; i < SLOT_REPLIES; i++) {
		if (!w->rb[i] && !(w->rb[i] = reply_buf_new(w, s->n)))
			return NULL;
		if (!w->rb[i]->busy) {
			w->rb[i]->busy = 1;
			w->refs++;
			return w->rb[i];
		}
	}
	return NULL;
}

/* libmicrohttpd is done with a reply (sent, or the connection dropped). */
static void reply_done(void *cls)
{
	struct reply_buf *b = cls;
	slot_release(b->slot->s, b->slot, b);
}

/* The codec of a reply vector: the server's --codec, or the worker's (θ in fp16 for int8, int4
 * and topk, which are made for increments) */
static const char *codec_of(const struct server *s, const char *worker_codec)
{
	return s->opts.codec ? s->opts.codec : blob_codec_for_theta(worker_codec);
}

/* The reply vector reply_vec(b), θ or easgd's d (elastic), into w's codec: θ to a worker that
 * holds a copy (a worker of int8, int4 or topk, and no --codec) as wire/delta says, a delta or
 * θ whole, with the copy's CRC-32 in head; else the vector in codec. */
static int reply_encode(struct server *s, struct slot *w, struct reply_buf *b, json_t *head,
			int elastic, int fragment, const char *codec, struct msg_blob *blob, char *err)
{
	const char *name = elastic ? "elastic" : MSG_PARAMS;
	const void *enc = NULL;
	size_t off = 0, len = s->n;
	int rc;
	if (fragment >= 0)
		layout_slice(s->n, fragment, ps_run(s->ps)->spec.rule.fragments, &off, &len);
	/* a fragment's θ goes whole: a copy of θ follows no fragment (copy_wanted) */
	if (elastic || !w->dl.copy || s->opts.codec || fragment >= 0)
		rc = blob_encode(&w->codec, reply_vec(b) + off, len, codec, -1, &enc, &blob->meta, err);
	else if ((rc = delta_encode(&w->dl, &w->codec, reply_vec(b), &enc, &blob->meta, &name,
				    err)) == 0 &&
		 proto_crc_add(head, delta_crc(&w->dl)) < 0)
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	snprintf(blob->name, sizeof blob->name, "%s", name);
	blob->data = enc;
	return rc;
}

/* Send reply_vec(b) as the reply message (header fields + one blob: θ, or easgd's d when
 * elastic, or fragment's slice of θ when fragment >= 0), and b with it: libmicrohttpd gives b
 * back. A raw vector goes out from where it is, its first line written just before it; w->lock
 * held. *len: the message's bytes (0 when none went out). */
static int reply_vector(struct server *s, struct httpd_req *req, struct slot *w,
			struct reply_buf *b, json_t *head, int elastic, int fragment, const char *codec,
			size_t *len)
{
	char err[GEM_ERRMAX];
	struct msg_blob blob;
	const void *enc;
	memset(&blob, 0, sizeof blob);
	*len = 0;
	/* a slice server's vector says which slice of θ it is, so that a worker given the servers in
	 * another order (or through proxies that swap them) cannot take it for another one */
	if (ps_reply_sliced(s->ps, head) < 0) {
		reply_done(b);
		return httpd_reply_error(req, 503, "busy", "out of memory");
	}
	if (reply_encode(s, w, b, head, elastic, fragment, codec, &blob, err) < 0 ||
	    (enc = blob.data, msg_build_head(&w->head, head, &blob, 1, err)) < 0) {
		reply_done(b);
		return httpd_reply_error(req, 500, "encode", "%s", err);
	}
	if (enc == reply_vec(b) && w->head.len <= REPLY_HEAD_ROOM) {
		unsigned char *start = b->mem + REPLY_HEAD_ROOM - w->head.len;
		memcpy(start, w->head.data, w->head.len);
		*len = w->head.len + blob.meta.nbytes;
		return httpd_reply_owned(req, 200, MSG_CONTENT_TYPE, start, *len, reply_done, b);
	}
	if (msg_build(&b->msg, head, &blob, 1, err) < 0) {
		reply_done(b);
		return httpd_reply_error(req, 500, "encode", "%s", err);
	}
	*len = b->msg.len;
	return httpd_reply_owned(req, 200, MSG_CONTENT_TYPE, b->msg.data, b->msg.len, reply_done, b);
}

/* A refusal the core decided or a bad request: counted and logged by the core, told to the
 * worker. */
static int refuse(struct server *s, int worker, struct httpd_req *req, unsigned status,
		  const char *error, const char *detail)
{
	pthread_mutex_lock(&s->mu);
	ps_refused(s->ps, worker, error);
	pthread_mutex_unlock(&s->mu);
	log_warn("commit refused (%s): %s", error, detail);
	return httpd_reply_error(req, status, error, "%s", detail);
}

/* ---- handlers ---- */

static int reply_json_new(struct httpd_req *req, json_t *j)
{
	int rc = j ? httpd_reply_json(req, 200, j) : httpd_reply_error(req, 503, "busy", "out of memory");
	json_decref(j);
	return rc;
}

/* ---- memory ---- */

/* The bytes of one reply buffer. */
static uint64_t reply_buf_bytes(const struct server *s)
{
	return REPLY_HEAD_ROOM + (uint64_t)s->n * sizeof(float);
}

/* The bytes of w's codec and message scratch (theirs under w->lock, rb under mu); both held. */
static uint64_t slot_scratch(const struct slot *w)
{
	uint64_t n = w->codec.out_cap + w->codec.tmp_cap + w->codec.tmp2_cap + w->head.cap;
	for (int i = 0; i < SLOT_REPLIES; i++)
		n += w->rb[i] ? w->rb[i]->msg.cap : 0;
	return n;
}

/* serve_memory's figures; mu held. */
static void memory_now(struct server *s, struct serve_memory *m)
{
	memset(m, 0, sizeof *m);
	m->rule = ps_rule_bytes(s->ps);
	for (int id = 0; id < PS_MAX_WORKERS; id++) {
		const struct slot *w = s->slot[id];
		if (!w)
			continue;
		m->copies += w->copy_bytes;
		m->buffers += w->scratch_bytes;
		for (int i = 0; i < SLOT_REPLIES; i++)
			m->buffers += w->rb[i] ? reply_buf_bytes(s) : 0;
	}
	m->bodies = s->http ? httpd_body_bytes(s->http) : 0;
	m->total = m->rule + m->copies + m->buffers + m->bodies;
	if (m->total > s->mem_peak)
		s->mem_peak = m->total;
	m->peak = s->mem_peak;
}

/* 1 if worker id (< 0: a new one) committing in codec gets a copy of θ (wire/delta.h): not
 * with fragments, whose replies are each a slice */
static int copy_wanted(const struct server *s, const char *codec)
{
	return !s->opts.codec && codec && delta_wanted(codec) &&
	       ps_run(s->ps)->spec.rule.fragments == 1;
}

/* PS_E_FULL if joining worker id (< 0: a new one), committing in codec, would take the
 * server's memory past --max-memory, else 0; mu held. */
static int memory_check(struct server *s, int id, const char *codec, char *err)
{
	const struct slot *w = id >= 0 ? s->slot[id] : NULL;
	struct serve_memory m;
	uint64_t need;
	char a[32], b[32], c[32];
	if (!s->opts.max_memory)
		return 0;
	memory_now(s, &m);
	/* a worker without a slot gets a reply buffer, and its connection one for its commits'
	 * bodies, an uncompressed update's at most */
	need = ps_join_bytes(s->ps, id) +
	       (w ? 0 : reply_buf_bytes(s) + httpd_body_room(reply_buf_bytes(s))) +
	       (copy_wanted(s, codec) && !(w && w->copy_bytes) ? (uint64_t)s->n * sizeof(float) : 0);
	if (!need || m.total + need <= s->opts.max_memory)
		return 0;
	num_size_text(a, sizeof a, need);
	num_size_text(b, sizeof b, s->opts.max_memory);
	num_size_text(c, sizeof c, m.total);
	if (id >= 0)
		return gem_errf(err, PS_E_FULL, "joining worker %d needs %s more of rule state; the "
				"server's --max-memory is %s (%s in use)", id, a, b, c);
	return gem_errf(err, PS_E_FULL, "joining a new worker needs %s more of rule state; the "
			"server's --max-memory is %s (%s in use)", a, b, c);
}

/* GEM_EUSAGE if what the server starts with (θ's buffers, and the rule state of the workers of
 * the checkpoint it resumes) is past --max-memory: refused before it serves rather than
 * refusing every join after. */
static int memory_start_check(struct server *s, char *err)
{
	struct serve_memory m;
	char a[32], b[32], c[32];
	if (!s->opts.max_memory)
		return 0;
	memory_now(s, &m);
	if (m.total <= s->opts.max_memory)
		return 0;
	return gem_errf(err, GEM_EUSAGE, "the run's state takes %s (%s of rule state, its checkpoint's "
			"workers' with it), past --max-memory %s: give more",
			num_size_text(a, sizeof a, m.total), num_size_text(b, sizeof b, m.rule),
			num_size_text(c, sizeof c, s->opts.max_memory));
}

void serve_memory(struct server *s, struct serve_memory *m)
{
	pthread_mutex_lock(&s->mu);
	memory_now(s, m);
	pthread_mutex_unlock(&s->mu);
}

/* GET /v1/health's fields after "ok" (reply_get). */
static json_t *get_health(void *ctx)
{
	struct server *s = ctx;
	json_t *j;
	struct serve_memory m;
	pthread_mutex_lock(&s->mu);
	j = ps_health_json(s->ps);
	memory_now(s, &m);
	pthread_mutex_unlock(&s->mu);
	proto_memory_add(j, &(struct proto_memory){.rule = m.rule, .copies = m.copies,
						   .buffers = m.buffers, .bodies = m.bodies,
						   .total = m.total, .peak = m.peak,
						   .max = s->opts.max_memory});
	return j;
}

/* θ and GET /v1/params' header of the same moment (reply_get). */
static json_t *get_params(void *ctx, float *theta)
{
	struct server *s = ctx;
	struct run_progress p;
	struct proto_params h = {.model = ps_run(s->ps)->spec.model_name, .node = -1};
	pthread_mutex_lock(&s->mu);
	ps_copy_theta(s->ps, theta);
	p = ps_progress(s->ps);
	pthread_mutex_unlock(&s->mu);
	h.version = p.version;
	h.samples = p.samples;
	h.elapsed = p.elapsed;
	ps_slice(s->ps, &h.slice);
	return proto_params_to_json(&h);
}

/* POST /v1/join's body (proto_join; an empty one says nothing): the codec BLOB_CODEC_DEFAULT
 * when not said. */
static int join_parse(struct httpd_req *req, struct proto_join *j, json_t **body)
{
	char err[GEM_ERRMAX];
	json_error_t je;
	int rc;
	*body = NULL;
	/* parsed before json_is_object, a macro that evaluates its argument twice */
	if (req->body_len)
		*body = json_loadb((const char *)req->body, req->body_len, 0, &je);
	if (req->body_len && !json_is_object(*body))
		return httpd_reply_error(req, 400, "bad_json", "join: %s", je.text), -1;
	if ((rc = proto_join_from_json(*body, PS_MAX_WORKERS, RUN_MAX_EPOCHS, j, err)) < 0)
		return httpd_reply_error(req, 400, rc == GEM_EFAIL ? "bad_codec" : "bad_field", "%s",
					 err), -1;
	if (!j->codec)
		j->codec = BLOB_CODEC_DEFAULT;
	return 0;
}

static int h_join(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	struct ps_joined j;
	struct serve_memory mem;
	struct proto_join in;
	const char *codec;
	json_t *body, *head;
	struct slot *w = NULL;
	struct reply_buf *b = NULL;
	size_t len;
	int id, st, rc;

	if (join_parse(req, &in, &body) < 0) {
		json_decref(body);
		return 0;
	}
	id = in.worker;
	codec = in.codec;
	/* the θ the rule records as sent (GEM's s_w) is the θ the worker gets: taken in the same
	 * critical section as the join, before any later commit moves it */
	pthread_mutex_lock(&s->mu);
	if ((id < 0 || !s->slot[id]) && s->nslots >= s->opts.max_workers)
		st = gem_errf(err, PS_E_FULL, "%d worker%s joined, the limit (--max-workers)",
			      s->nslots, s->nslots == 1 ? " is" : "s are");
	else if ((st = memory_check(s, id, codec, err)) < 0)
		;
	else if ((st = ps_join(s->ps, id, codec, NULL, &j, err)) == PS_APPLIED &&
		 (!(w = slot_get(s, j.worker, err)) || !(b = reply_take(s, w))))
		st = gem_errf(err, PS_E_NOMEM, "out of memory, or replies to worker %d still going out",
			      j.worker);
	if (st == PS_APPLIED) {
		/* a commit of the worker's old session held for its round gives way (wait_round),
		 * and a round the old session's leave closed answers its waiters */
		pthread_cond_broadcast(&s->round_cv);
		ps_plan(s->ps, j.worker, in.steps, in.epochs);
		w->copy_bytes = copy_wanted(s, codec) ? (uint64_t)s->n * sizeof(float) : 0;
		memory_now(s, &mem);
	}
	if (b)
		ps_copy_theta(s->ps, reply_vec(b));
	else if (w)
		w->refs--; /* the table keeps its own */
	pthread_mutex_unlock(&s->mu);
	if (st < 0) {
		json_decref(body);
		return httpd_reply_error(req, http_status(st), ps_status_code(st), "%s", err);
	}
	log_info("worker %d joined from %s", j.worker, req->client);
	/* what the worker did so far, so that it continues its data order where it stopped */
	head = ps_join_reply_head(&j);
	pthread_mutex_lock(&w->lock);
	/* its copy of θ starts over from this reply, in the codec it names now */
	delta_close(&w->dl);
	if (delta_open(&w->dl, copy_wanted(s, codec) ? codec : NULL, s->n, err) < 0) {
		json_decref(head);
		head = NULL; /* 503 */
	}
	rc = reply_vector(s, req, w, b, head, 0, -1, codec_of(s, codec), &len);
	pthread_mutex_lock(&s->mu); /* w->lock, then mu: commit_apply's order */
	w->scratch_bytes = slot_scratch(w);
	pthread_mutex_unlock(&w->lock);
	ps_sent(s->ps, len);
	pthread_mutex_unlock(&s->mu);
	slot_put(s, w);
	json_decref(head);
	json_decref(body);
	return rc;
}

/* The commit message's header into c (update not set), for a run of nfrag fragments of θ; a
 * refusal's detail in err: PS_E_UNKNOWN (no worker id), or another negative (bad_field). */
static int commit_parse(const json_t *h, int nfrag, struct ps_commit *c, char *err)
{
	struct proto_commit pc;
	int rc = proto_commit_from_json(h, PS_MAX_WORKERS, nfrag, &pc, err);
	memset(c, 0, sizeof *c);
	if (rc < 0)
		return rc == PROTO_E_WORKER ? PS_E_UNKNOWN : -1;
	*c = (struct ps_commit){.worker = pc.worker, .base = pc.base, .seq = pc.seq,
				.samples = pc.samples, .loss = pc.loss, .idle = pc.idle,
				.fragment = pc.fragment};
	return 0;
}

static int drop_now(struct server *s)
{
	int drop;
	if (s->opts.drop_rate <= 0)
		return 0;
	pthread_mutex_lock(&s->tmu);
	drop = rng_float(&s->drop_rng) < s->opts.drop_rate;
	pthread_mutex_unlock(&s->tmu);
	return drop;
}

/* A held commit (sync, dma) waits, in order, until its round closes, a resend of it waits in
 * its place (w->hold moved on), or its worker joins again (a new session: the waiter holds
 * w->lock, which the join needs); mu held. 0 the round closed, 1 a resend took its place, 2 the
 * worker joined again, -1 the server stops. */
static int wait_round(struct server *s, struct slot *w, int worker, uint64_t round,
		      uint64_t session)
{
	uint64_t me = ++w->hold;
	ps_waiting(s->ps, worker, 1);
	while (ps_version(s->ps) == round && !s->stopping && w->hold == me &&
	       ps_session(s->ps, worker) == session)
		pthread_cond_wait(&s->round_cv, &s->mu);
	if (ps_session(s->ps, worker) != session)
		return 2; /* the new session's flags are not this one's to clear */
	if (w->hold != me)
		return 1; /* the worker's flag is the resend's now */
	ps_waiting(s->ps, worker, 0);
	return ps_version(s->ps) == round ? -1 : 0;
}

/* Wait for the round of a held commit or of its resend (st): a resend takes the wait over, so
 * that the one reply the round makes (and the worker's copy of θ advanced once) goes to where
 * the worker listens now. mu held, released on return. */
static int commit_held(struct server *s, struct ps_commit *c, struct slot *w, int st,
		       struct ps_reply *r, struct reply_buf *b, char *err)
{
	uint64_t round = ps_version(s->ps), session = ps_session(s->ps, c->worker);
	int held;
	fifo_pass(s);
	if (st == PS_RESENT)
		pthread_cond_broadcast(&s->round_cv); /* the first one gives way (wait_round) */
	held = wait_round(s, w, c->worker, round, session);
	if (held == 0)
		ps_reply_held(s->ps, reply_vec(b), r);
	pthread_mutex_unlock(&s->mu);
	if (held < 0)
		return gem_errf(err, PS_E_STOPPING, "the server stopped mid-round");
	if (held == 2)
		return gem_errf(err, PS_E_REJOINED, "worker %d joined again: this commit's session is "
				"over (its update stays in the round)", c->worker);
	if (held > 0)
		return gem_errf(err, PS_E_RESENT, "sent again: the round's reply goes to the resend");
	return st;
}

/* The core's part of a commit whose update is decoded and checked (c->update; NULL for a resend
 * of a held commit, ps_held_resend): FIFO, apply, wait for the round; *bp gets a reply buffer
 * holding the reply vector (unless the commit fails). */
static int commit_apply(struct server *s, struct ps_commit *c, struct slot *w, struct ps_reply *r,
			struct reply_buf **bp, double *t_rule, char *err)
{
	struct reply_buf *b;
	double t0;
	int st;
	fifo_enter(s);
	if (!(*bp = b = reply_take(s, w))) {
		fifo_leave(s);
		return gem_errf(err, PS_E_NOMEM, "out of memory, or replies to worker %d still going out",
				c->worker);
	}
	t0 = clock_mono();
	st = ps_commit(s->ps, c, reply_vec(b), r, err);
	*t_rule = clock_mono() - t0;
	if (r->round_closed)
		pthread_cond_broadcast(&s->round_cv);
	if (st == PS_PENDING || st == PS_RESENT)
		return commit_held(s, c, w, st, r, b, err);
	fifo_leave(s);
	return st;
}

static void time_commit(struct server *s, double decode, double rule, double encode)
{
	pthread_mutex_lock(&s->tmu);
	s->t_decode += decode;
	s->t_rule += rule;
	s->t_encode += encode;
	s->t_commits++;
	pthread_mutex_unlock(&s->tmu);
}

/* Decode and check the update of m, fragment's slice of θ (w->lock held): *u is where it lies in
 * the request (a raw update) or in w's codec buffer; 0, or a refusal sent. */
static int commit_decode(struct server *s, struct httpd_req *req, const struct msg *m,
			 struct slot *w, int id, int fragment, const float **u)
{
	char err[GEM_ERRMAX];
	const struct msg_blob *blob = msg_find(m, "update");
	size_t off, len;
	layout_slice(s->n, fragment, ps_run(s->ps)->spec.rule.fragments, &off, &len);
	if (!blob)
		return refuse(s, id, req, 400, "bad_message", "no blob named \"update\""), -1;
	if (blob_decode_view(&w->codec, blob->data, &blob->meta, len, u, err) < 0)
		return refuse(s, id, req, 400, "bad_blob", err), -1;
	/* the decode's CRC pass found it finite, or the check here finds where it is not */
	if (!w->codec.finite && ps_check_update(*u, len, err) < 0)
		return refuse(s, id, req, 400, "non_finite", err), -1;
	return 0;
}

static int h_commit(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	struct msg m;
	struct ps_commit c;
	struct ps_reply r;
	struct slot *w;
	struct reply_buf *b = NULL;
	json_t *head;
	double t0, t1, t_rule = 0;
	size_t len;
	int st, rc, resend;

	if (msg_parse(req->body, req->body_len, &m, err) < 0)
		return refuse(s, -1, req, 400, "bad_message", err);
	if ((st = commit_parse(m.header, ps_run(s->ps)->spec.rule.fragments, &c, err)) < 0) {
		msg_free(&m);
		return st == PS_E_UNKNOWN ? refuse(s, -1, req, 409, "unknown_worker", err)
					  : refuse(s, -1, req, 400, "bad_field", err);
	}
	pthread_mutex_lock(&s->mu);
	w = slot_ref(s, c.worker);
	resend = ps_held_resend(s->ps, c.worker, c.seq);
	pthread_mutex_unlock(&s->mu);
	if (!w) {
		msg_free(&m);
		return refuse(s, -1, req, 409, "unknown_worker", "join first (POST /v1/join)");
	}
	if (drop_now(s)) {
		slot_put(s, w);
		msg_free(&m);
		httpd_add_header(req, "Retry-After", "0");
		return refuse(s, c.worker, req, 503, "busy", "dropped on purpose (--drop-rate)");
	}
	c.bytes = req->body_len;
	t0 = t1 = clock_mono();
	if (resend) {
		/* nothing of it is applied: it is not decoded, nor queued behind the first one, which
		 * holds w->lock while it waits */
		c.checked = 1;
		st = commit_apply(s, &c, w, &r, &b, &t_rule, err);
		pthread_mutex_lock(&w->lock);
	} else {
		pthread_mutex_lock(&w->lock);
		if (commit_decode(s, req, &m, w, c.worker, c.fragment, &c.update) < 0) {
			pthread_mutex_unlock(&w->lock);
			slot_put(s, w);
			msg_free(&m);
			return 0;
		}
		c.checked = 1;
		t1 = clock_mono();
		st = commit_apply(s, &c, w, &r, &b, &t_rule, err);
	}
	if (st < 0) {
		if (b)
			reply_done(b); /* not sent: back to the worker's buffers */
		pthread_mutex_unlock(&w->lock);
		slot_put(s, w);
		msg_free(&m);
		if (st != PS_E_STOPPING && st != PS_E_UNKNOWN && st != PS_E_RESENT &&
		    st != PS_E_REJOINED)
			log_warn("commit refused (%s): %s", ps_status_code(st), err);
		return httpd_reply_error(req, http_status(st), ps_status_code(st), "%s", err);
	}
	head = ps_commit_reply_head(&r, st == PS_APPLIED || st == PS_PENDING || st == PS_RESENT);
	t0 = t1 - t0;
	t1 = clock_mono();
	/* a resend: the reply to the first one may never have reached the worker's copy */
	if (st == PS_DUPLICATE)
		delta_restart(&w->dl);
	/* with fragments, the reply is the commit's fragment of θ */
	rc = reply_vector(s, req, w, b, head, r.elastic,
			  ps_run(s->ps)->spec.rule.fragments > 1 ? c.fragment : -1,
			  codec_of(s, msg_find(&m, "update")->meta.codec), &len);
	pthread_mutex_lock(&s->mu);
	w->scratch_bytes = slot_scratch(w);
	pthread_mutex_unlock(&w->lock);
	ps_sent(s->ps, len);
	pthread_mutex_unlock(&s->mu);
	slot_put(s, w);
	time_commit(s, t0, t_rule, clock_mono() - t1);
	json_decref(head);
	msg_free(&m);
	return rc;
}

static int h_leave(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	json_error_t je;
	json_t *body = json_loadb((const char *)req->body, req->body_len, 0, &je);
	struct proto_leave l;
	struct ps_reply r;
	int id, st;

	if (!json_is_object(body)) {
		json_decref(body);
		return httpd_reply_error(req, 400, "bad_json", "leave: %s", je.text);
	}
	st = proto_leave_from_json(body, PS_MAX_WORKERS, &l, err);
	json_decref(body);
	if (st < 0)
		return httpd_reply_error(req, 400, "bad_field", "%s", err);
	id = l.worker;
	fifo_enter(s);
	st = ps_leave(s->ps, id, l.how, (float)l.loss, 0, &r, err);
	if (st >= 0)
		slot_drop(s, id);
	if (r.round_closed)
		pthread_cond_broadcast(&s->round_cv);
	fifo_leave(s);
	if (st < 0)
		return httpd_reply_error(req, http_status(st), ps_status_code(st), "%s", err);
	return reply_json_new(req, proto_left_to_json(id, r.version));
}

static int h_stats(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	struct proto_commit_us t;
	json_t *j;
	double n;
	pthread_mutex_lock(&s->mu);
	j = ps_stats_json(s->ps);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->tmu);
	n = s->t_commits ? (double)s->t_commits : 1;
	t = (struct proto_commit_us){.commits = s->t_commits, .decode = 1e6 * s->t_decode / n,
				     .rule = 1e6 * s->t_rule / n, .encode = 1e6 * s->t_encode / n};
	pthread_mutex_unlock(&s->tmu);
	proto_commit_us_add(j, &t);
	return reply_json_new(req, j);
}

/* A checkpoint: its snapshot under mu, its files (and their fsync) written with mu released, so
 * that commits go on meanwhile; mu not held. *version (may be NULL): the version saved. */
static int serve_checkpoint(struct server *s, uint64_t *version, char *err)
{
	int rc;
	pthread_mutex_lock(&s->ckmu);
	pthread_mutex_lock(&s->mu);
	rc = ps_checkpoint_take(s->ps, &s->ck, err);
	if (version)
		*version = ps_version(s->ps);
	s->last_checkpoint = clock_mono();
	pthread_mutex_unlock(&s->mu);
	if (rc == 0)
		rc = ps_checkpoint_write(s->ps, &s->ck, err);
	pthread_mutex_unlock(&s->ckmu);
	return rc;
}

static int h_checkpoint(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	char err[GEM_ERRMAX];
	uint64_t version;
	int rc = serve_checkpoint(s, &version, err);
	if (rc < 0)
		return httpd_reply_error(req, 500, "checkpoint", "%s", err);
	return reply_json_new(req, proto_checkpointed_to_json(version));
}

static int h_stop(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	uint64_t version;
	pthread_mutex_lock(&s->mu);
	ps_stop(s->ps, "stopped by POST /v1/stop");
	version = ps_version(s->ps);
	pthread_cond_broadcast(&s->stop_cv);
	pthread_mutex_unlock(&s->mu);
	return reply_json_new(req, proto_stopping_to_json(version));
}

/* ---- life cycle ---- */

static void server_free(struct server *s)
{
	if (!s)
		return;
	for (int i = 0; i < PS_MAX_WORKERS; i++)
		slot_drop(s, i); /* the server has stopped: no request holds one */
	ps_close(s->ps);
	reply_get_close(&s->get);
	run_ckpt_free(&s->ck);
	pthread_mutex_destroy(&s->ckmu);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->tmu);
	pthread_cond_destroy(&s->fifo_cv);
	pthread_cond_destroy(&s->round_cv);
	pthread_cond_destroy(&s->stop_cv);
	free(s);
}

static int start_http(struct server *s, const struct serve_opts *o, char *err)
{
	static const struct {
		const char *method, *path;
		httpd_handler_fn fn;
		int mutating;
		size_t max_body; /* 0: an update's (only /v1/commit) */
	} routes[] = {
		{"GET", "/v1/stats", h_stats, 0, 0},
		{"POST", "/v1/join", h_join, 1, HTTPD_JSON_BODY},
		{"POST", "/v1/commit", h_commit, 1, 0},
		{"POST", "/v1/leave", h_leave, 1, HTTPD_JSON_BODY},
		{"POST", "/v1/checkpoint", h_checkpoint, 1, HTTPD_JSON_BODY},
		{"POST", "/v1/stop", h_stop, 1, HTTPD_JSON_BODY},
	};
	struct httpd_route r[REPLY_GET_ROUTES + sizeof routes / sizeof *routes];
	struct httpd_config hc = {0};
	const char *host = o->host ? o->host : "127.0.0.1";
	int rc;

	s->get.run = ps_run(s->ps)->json;
	s->get.n = s->n;
	s->get.health = get_health;
	s->get.params = get_params;
	s->get.ctx = s;
	reply_get_routes(&s->get, r);
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
		r[REPLY_GET_ROUTES + i] = (struct httpd_route){routes[i].method, routes[i].path,
							       routes[i].fn, s, routes[i].mutating,
							       routes[i].max_body};
	hc.host = host;
	hc.port = o->port;
	hc.allow_public = o->allow_public;
	hc.token = o->token;
	hc.tls_cert = o->tls_cert;
	hc.tls_key = o->tls_key;
	/* the largest honest body: an uncompressed update plus a header */
	hc.max_body = o->max_body ? o->max_body : s->n * 4 + s->n / 64 + (1 << 16);
	hc.routes = r;
	hc.n_routes = REPLY_GET_ROUTES + sizeof routes / sizeof *routes;
	if ((rc = httpd_start(&hc, &s->http, err)) < 0)
		return rc;
	if (httpd_url(s->http, o->tls_cert ? "https" : "http", host, s->url, sizeof s->url) < 0) {
		httpd_stop(s->http);
		s->http = NULL;
		return gem_errf(err, GEM_EUSAGE, "%s: the server's URL is too long", host);
	}
	return 0;
}

int serve_open(const char *rundir, const struct serve_opts *o, struct server **out, char *err)
{
	struct server *s = calloc(1, sizeof *s);
	struct ps_opts po = {.max_updates = o->max_updates, .steps = o->steps,
			     .max_staleness = o->max_staleness, .keep_running = o->keep_running,
			     .worker_timeout = o->worker_timeout, .idle_timeout = o->idle_timeout,
			     .slice_i = o->slice_i, .slice_k = o->slice_k, .reply_codec = o->codec};
	int rc;

	if (!s)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->opts = *o;
	if (s->opts.max_workers <= 0 || s->opts.max_workers > SERVE_WORKERS_LIMIT)
		s->opts.max_workers = o->max_workers > 0 ? SERVE_WORKERS_LIMIT : SERVE_MAX_WORKERS;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->ckmu, NULL);
	pthread_mutex_init(&s->tmu, NULL);
	pthread_cond_init(&s->fifo_cv, NULL);
	pthread_cond_init(&s->round_cv, NULL);
	clock_cond_init(&s->stop_cv);
	if ((rc = ps_open(rundir, &po, &s->ps, err)) < 0)
		goto fail;
	s->n = ps_nparams(s->ps);
	if ((o->codec && (rc = blob_codec_check(o->codec, err)) < 0) ||
	    (rc = memory_start_check(s, err)) < 0)
		goto fail;
	if ((rc = start_http(s, o, err)) < 0)
		goto fail;
	if ((rc = run_server_url_write(ps_run(s->ps), s->url, err)) < 0) {
		httpd_stop(s->http);
		goto fail;
	}
	ps_log_start(s->ps, s->url);
	s->last_checkpoint = clock_mono();
	rng_seed(&s->drop_rng, ps_run(s->ps)->spec.train.seed, RNG_DROP_RATE);
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

void serve_now(struct server *s, struct ps_now *st)
{
	pthread_mutex_lock(&s->mu);
	ps_now(s->ps, st);
	pthread_mutex_unlock(&s->mu);
}

int serve_failed(const struct server *s)
{
	return ps_failed(s->ps);
}

static void on_gone(void *ctx, int worker, double silent)
{
	struct server *s = ctx;
	log_warn("worker %d: no contact for %.0f s, at version %llu: gone", worker, silent,
		 (unsigned long long)ps_version(s->ps));
	slot_drop(s, worker); /* mu held (serve_wait) */
}

const char *serve_wait(struct server *s, prog_stop_flag *sigflag)
{
	const char *why;
	char err[GEM_ERRMAX];
	pthread_mutex_lock(&s->mu);
	while (!ps_stopping(s->ps) && !*sigflag) {
		struct timespec ts = clock_deadline(0.2);
		pthread_cond_timedwait(&s->stop_cv, &s->mu, &ts);
		fflush(ps_log(s->ps));
		ps_liveness(s->ps, on_gone, s);
		pthread_cond_broadcast(&s->round_cv);
		if (s->opts.checkpoint_every > 0 && clock_mono() - s->last_checkpoint >= s->opts.checkpoint_every) {
			pthread_mutex_unlock(&s->mu);
			if (serve_checkpoint(s, NULL, err) < 0)
				log_warn("checkpoint failed: %s", err);
			pthread_mutex_lock(&s->mu);
		}
		if (s->opts.tick) {
			pthread_mutex_unlock(&s->mu);
			s->opts.tick(s, s->opts.tick_ctx);
			pthread_mutex_lock(&s->mu);
		}
	}
	why = ps_stopping(s->ps) ? ps_stopping(s->ps) : "stopped by a signal";
	pthread_mutex_unlock(&s->mu);
	return why;
}

/* A follower (gem-eval --follow) that was evaluating when the run stopped polls again soon:
 * wait for that poll (SERVE_FOLLOWER_WAIT s at most) so that it hears "stopping" rather than
 * finds the port closed. One that is waiting on the server (a long poll) hears it now. */
static void follower_wait(const struct server *s)
{
	struct reply_followers f0, f;
	double t0 = clock_mono();
	reply_followers(&s->get, &f0);
	if (f0.inflight > 0 || f0.since_last < 0 || f0.since_last > SERVE_FOLLOWER_RECENT)
		return;
	do {
		usleep(20000);
		reply_followers(&s->get, &f);
	} while (f.polls == f0.polls && clock_mono() - t0 < SERVE_FOLLOWER_WAIT);
	/* let the poll's reply go out: httpd_stop waits for requests in flight */
}

int serve_close(struct server *s, const char *reason, char *err)
{
	int rc;
	double t0 = clock_mono();
	pthread_mutex_lock(&s->mu);
	ps_stop(s->ps, reason);
	s->stopping = 1;
	pthread_cond_broadcast(&s->round_cv);
	/* Workers still active learn of the stop from their next request (410) and leave; give
	 * them a moment so that they end cleanly instead of retrying a closed port. */
	while (ps_active(s->ps) > 0 && clock_mono() - t0 < 3) {
		pthread_mutex_unlock(&s->mu);
		usleep(20000);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	follower_wait(s);
	httpd_stop(s->http);
	rc = serve_checkpoint(s, NULL, err);
	pthread_mutex_lock(&s->mu);
	ps_log_stop(s->ps, reason);
	pthread_mutex_unlock(&s->mu);
	run_server_url_remove(ps_run(s->ps));
	server_free(s);
	return rc;
}
