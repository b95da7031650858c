/* reply: the HTTP replies of the protocol that every training process serves the same way:
 * GET /v1/params (a message of the caller's header and one "params" blob), and the read-only
 * routes GET /v1/health, /v1/run and /v1/params of gem-serve and of SGP nodes (reply_get). */
#ifndef GEM_REPLY_H
#define GEM_REPLY_H
#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>

#include "wire/blob.h"
#include "wire/httpd.h"

/* Codecs kept from one GET /v1/params to the next (a compressor and its buffers are worth
 * keeping); a request that finds them all in use makes its own. */
#define REPLY_CODECS 4

/* What a training process serves on its GET routes: its data, read through its callbacks (which
 * take its own lock). Must outlive the server it is routed on. */
struct reply_get {
	const json_t *run; /* GET /v1/run: run.json, unchanged while serving */
	size_t n;          /* floats in θ */
	/* GET /v1/health's fields after "ok": true (a new reference; NULL: out of memory). */
	json_t *(*health)(void *ctx);
	/* Copy θ (n floats) into theta and return GET /v1/params' header of the same moment (a
	 * new reference: version, samples, elapsed, model, the owner's own fields; NULL: no memory). */
	json_t *(*params)(void *ctx, float *theta);
	void *ctx;
	/* the routes' own state, zero at first (reply_get_routes sets it up) */
	struct blob_codec codec[REPLY_CODECS];
	atomic_int codec_busy[REPLY_CODECS];
	/* followers' polls (GET /v1/health with ?wait): how many so far, how many being answered
	 * (long polls past REPLY_HEALTH_WAITERS of them do not wait), when the last began
	 * (clock_mono, in ms; -1: none) */
	atomic_ulong follow_polls;
	atomic_int follow_inflight;
	atomic_llong follow_last_ms;
};

/* GET /v1/health?wait=SEC waits at most this long, and looks at the owner this often; past
 * REPLY_HEALTH_WAITERS such requests at once in the process, a request replies at once. */
#define REPLY_HEALTH_WAIT_MAX 30.0
#define REPLY_HEALTH_POLL_NS 20000000L
#define REPLY_HEALTH_WAITERS 32

/* The followers (GET /v1/health?wait=..., as gem-eval --follow polls) g's routes have seen:
 * polls so far, how many are being answered now, seconds since the last began (< 0: none). A
 * server about to close can wait for a follower's next poll, so that it hears of the stop. */
struct reply_followers {
	unsigned long polls;
	int inflight;
	double since_last;
};
void reply_followers(const struct reply_get *g, struct reply_followers *f);

#define REPLY_GET_ROUTES 3
/* Fill r[0..2] with GET /v1/health, /v1/run and /v1/params served from g (its data not
 * mutated; its own state is). */
void reply_get_routes(struct reply_get *g, struct httpd_route r[REPLY_GET_ROUTES]);
/* Free g's codecs, once no route is served any more. */
void reply_get_close(struct reply_get *g);
#endif
