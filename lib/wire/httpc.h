/* httpc: gem's HTTP client, a thin layer over libcurl. A client object holds one easy handle
 * (keep-alive, TCP_NODELAY, no "Expect: 100-continue") for one base URL; it is not
 * thread-safe, so use one client per thread. Transport failures and HTTP errors (status >= 400,
 * whose JSON {"error","detail"} becomes the message) return distinct codes; the *_retry calls
 * ride out a restarting or busy (503) server with capped exponential backoff. */
#ifndef GEM_HTTPC_H
#define GEM_HTTPC_H

#include <stddef.h>

enum {
	HTTPC_ETRANSPORT = -10, /* no HTTP answer: refused, reset, timed out, bad URL */
	HTTPC_EHTTP = -11,      /* the server answered with status >= 400 */
	HTTPC_ETLS = -12,       /* https:// and the server's certificate was not trusted (not
				 * signed by the CA, wrong name) or the CA file is bad: not retried */
};

struct httpc;

/* A response. Zero-initialise it; the body buffer grows and is reused across calls, so
 * release it once with httpc_resp_free. */
struct httpc_resp {
	long status;            /* 0 after a transport error */
	char *body;             /* NUL-terminated (the NUL not counted in len) */
	size_t len, cap;
	char content_type[128]; /* "" when the server sent none */
};

/* Initialise libcurl once per process; thread-safe, called by httpc_new. */
int httpc_global_init(char *err);

/* A client for base_url ("http://127.0.0.1:8080" or "https://...", no trailing slash needed).
 * https:// verifies the server's certificate and name, against the system's CAs or those of
 * httpc_set_cacert; the client then speaks nothing but HTTPS. token (NULL for
 * none) is sent as "Authorization: Bearer <token>". timeout_ms bounds a whole request (0 = no
 * limit); the connect timeout is min(timeout_ms, 5 s) until changed. */
int httpc_new(const char *base_url, const char *token, long timeout_ms, struct httpc **out,
	      char *err);
void httpc_free(struct httpc *c);
/* Trust only the CA certificates of the PEM file cafile (NULL: the system's). GEM_EUSAGE if the
 * client's URL is not https:// or the file cannot be read. */
int httpc_set_cacert(struct httpc *c, const char *cafile, char *err);
void httpc_set_timeout(struct httpc *c, long timeout_ms, long connect_timeout_ms);
/* Give up a request in progress (libcurl asks about once a second, more often while data
 * flows) and any retry once abort(ctx) returns non-zero: HTTPC_ETRANSPORT, "aborted". A caller
 * that is stopping is then not held for the whole timeout by a peer that took the connection
 * and went silent (SIGSTOPped). abort NULL: never. */
void httpc_set_abort(struct httpc *c, int (*abort)(void *ctx), void *ctx);
const char *httpc_base_url(const struct httpc *c);
/* 1 if the last request (a *_retry call's last attempt) was sent and no reply came within the
 * client's timeout (HTTPC_ETRANSPORT); 0 otherwise, a connect timeout included. */
int httpc_timed_out(const struct httpc *c);

/* GET/POST base_url + path ("/v1/params?x=1"). 0 on a status < 400; HTTPC_ETRANSPORT or
 * HTTPC_EHTTP (r filled with the error reply) otherwise; GEM_ENOMEM. */
int httpc_get(struct httpc *c, const char *path, struct httpc_resp *r, char *err);
int httpc_post(struct httpc *c, const char *path, const char *content_type, const void *body,
	       size_t len, struct httpc_resp *r, char *err);

/* The same, retrying transport errors and 503 with backoff from 100 ms doubling to 2 s, for up
 * to retry_for seconds in all; then "server URL unreachable for N s: <last cause>". Other HTTP
 * errors are returned at once. Only for idempotent requests, or ones the server deduplicates. */
int httpc_get_retry(struct httpc *c, const char *path, double retry_for, struct httpc_resp *r,
		    char *err);
int httpc_post_retry(struct httpc *c, const char *path, const char *content_type, const void *body,
		     size_t len, double retry_for, struct httpc_resp *r, char *err);

void httpc_resp_free(struct httpc_resp *r);
#endif
