#include "wire/reply.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wire/blob.h"
#include "base/clock.h"
#include "base/err.h"
#include "wire/msg.h"
#include "wire/proto.h"

/* 400 unless codec (from ?codec=, may be NULL) is one a sender can encode with; 0 if fine. */
static int reply_check_codec(struct httpd_req *req, const char *codec)
{
	char err[GEM_ERRMAX];
	if (codec && blob_codec_check(codec, err) < 0) {
		httpd_reply_error(req, 400, "bad_codec", "%s", err);
		return -1;
	}
	return 0;
}

/* A codec for one request: from g's (*slot its index), or a fresh one (*slot −1). */
static void codec_take(struct reply_get *g, struct blob_codec *own, struct blob_codec **c,
		       int *slot)
{
	for (*slot = 0; *slot < REPLY_CODECS; ++*slot)
		if (!atomic_exchange(&g->codec_busy[*slot], 1)) {
			*c = &g->codec[*slot];
			return;
		}
	*slot = -1;
	blob_codec_init(own);
	*c = own;
}

static void codec_give(struct reply_get *g, struct blob_codec *c, int slot)
{
	if (slot < 0)
		blob_codec_free(c);
	else
		atomic_store(&g->codec_busy[slot], 0);
}

/* Encode θ (n floats, the caller's copy) with codec under header head and reply 200 with the
 * message, or 500 when encoding fails. */
static int reply_params(struct reply_get *g, struct httpd_req *req, json_t *head,
			const float *theta, size_t n, const char *codec)
{
	char err[GEM_ERRMAX];
	struct blob_codec own, *c;
	struct msg_buf b = {0};
	int rc, slot;

	codec_take(g, &own, &c, &slot);
	rc = msg_encode_params(&b, c, head, theta, n, codec, -1, err);
	if (rc == 0) {
		/* the buffer goes to libmicrohttpd, which frees it once sent */
		rc = httpd_reply_owned(req, 200, MSG_CONTENT_TYPE, b.data, b.len, free, b.data);
		b.data = NULL;
	} else {
		rc = httpd_reply_error(req, 500, "encode", "%s", err);
	}
	codec_give(g, c, slot);
	msg_buf_free(&b);
	return rc;
}

/* ?wait=SEC (0 <= SEC, at most REPLY_HEALTH_WAIT_MAX is waited; *have_w: it was given) and
 * ?version=V (decimal) of a long poll: 0, or -1 after a 400. */
static int health_args(struct httpd_req *req, int *have_w, double *wait, int *have_v,
		       unsigned long long *v)
{
	const char *w = httpd_query(req, "wait"), *q = httpd_query(req, "version");
	char *end;
	*wait = 0;
	*have_w = w != NULL;
	*have_v = 0;
	if (w) {
		errno = 0;
		*wait = strtod(w, &end);
		if (!*w || *end || errno || !(*wait >= 0)) {
			httpd_reply_error(req, 400, "bad_request", "wait: not a number of seconds >= 0");
			return -1;
		}
		if (*wait > REPLY_HEALTH_WAIT_MAX)
			*wait = REPLY_HEALTH_WAIT_MAX;
	}
	if (q) {
		errno = 0;
		*v = strtoull(q, &end, 10);
		if (!*q || *q < '0' || *q > '9' || *end || errno) {
			httpd_reply_error(req, 400, "bad_request", "version: not a version number");
			return -1;
		}
		*have_v = 1;
	}
	return 0;
}

/* GET /v1/health[?wait=SEC[&version=V]]: {"ok": true, the owner's fields}; with wait, the reply
 * waits (a long poll) until the owner is stopping, its version is not V (when given), or SEC
 * seconds have passed, so that a client polling from outside is connected when a run stops. */
static int get_health(struct httpd_req *req, void *ctx)
{
	struct reply_get *g = ctx;
	json_t *j, *fields;
	double wait, t0 = clock_mono();
	unsigned long long v = 0;
	int rc, have_v, follower;

	if (health_args(req, &follower, &wait, &have_v, &v) < 0)
		return 0;
	if (follower) {
		atomic_store(&g->follow_last_ms, (long long)(t0 * 1000));
		atomic_fetch_add(&g->follow_polls, 1);
		/* a long poll holds a connection's thread: past REPLY_HEALTH_WAITERS, none waits */
		if (atomic_fetch_add(&g->follow_inflight, 1) >= REPLY_HEALTH_WAITERS)
			wait = 0;
	}
	for (;;) {
		uint64_t version;
		int stopping, known;
		if (!(fields = g->health(g->ctx)))
			break;
		known = proto_health_peek(fields, &version, &stopping);
		if (clock_mono() - t0 >= wait || stopping || (have_v && (!known || version != v)))
			break;
		json_decref(fields);
		nanosleep(&(struct timespec){0, REPLY_HEALTH_POLL_NS}, NULL);
	}
	j = proto_ok_to_json(-1);
	if (!j || !fields || json_object_update(j, fields) < 0)
		rc = httpd_reply_error(req, 503, "busy", "out of memory");
	else
		rc = httpd_reply_json(req, 200, j);
	json_decref(fields);
	json_decref(j);
	if (follower)
		atomic_fetch_sub(&g->follow_inflight, 1);
	return rc;
}

void reply_followers(const struct reply_get *g, struct reply_followers *f)
{
	long long last = atomic_load(&g->follow_last_ms);
	f->polls = atomic_load(&g->follow_polls);
	f->inflight = atomic_load(&g->follow_inflight);
	f->since_last = last < 0 ? -1 : clock_mono() - (double)last / 1000;
}

/* GET /v1/run: run.json as it is. */
static int get_run(struct httpd_req *req, void *ctx)
{
	const struct reply_get *g = ctx;
	return httpd_reply_json(req, 200, g->run);
}

/* GET /v1/params[?codec=C]: a snapshot of θ with the owner's header. A query string decodes
 * '+' as a space, and no codec name has one: "zlib shuffle" is zlib+shuffle (as is %2B). */
static int get_params(struct httpd_req *req, void *ctx)
{
	struct reply_get *g = ctx;
	const char *q = httpd_query(req, "codec");
	char name[64], *codec = NULL;
	float *copy;
	json_t *head;
	int rc;

	if (q) {
		snprintf(name, sizeof name, "%s", q);
		for (codec = name; (codec = strchr(codec, ' '));)
			*codec = '+';
		codec = name;
	}
	if (reply_check_codec(req, codec) < 0)
		return 0;
	if (!(copy = malloc(sizeof *copy * g->n)))
		return httpd_reply_error(req, 503, "busy", "out of memory");
	if ((head = g->params(g->ctx, copy)))
		rc = reply_params(g, req, head, copy, g->n, codec);
	else
		rc = httpd_reply_error(req, 503, "busy", "out of memory");
	free(copy);
	json_decref(head);
	return rc;
}

void reply_get_routes(struct reply_get *g, struct httpd_route r[REPLY_GET_ROUTES])
{
	void *ctx = g; /* the handlers read its data and count in its state */
	atomic_store(&g->follow_last_ms, -1);
	r[0] = (struct httpd_route){"GET", "/v1/health", get_health, ctx, 0, 0};
	r[1] = (struct httpd_route){"GET", "/v1/run", get_run, ctx, 0, 0};
	r[2] = (struct httpd_route){"GET", "/v1/params", get_params, ctx, 0, 0};
}

void reply_get_close(struct reply_get *g)
{
	for (int i = 0; i < REPLY_CODECS; i++)
		blob_codec_free(&g->codec[i]);
}
