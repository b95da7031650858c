/* httpd: gem's HTTP server layer, a thin route table over GNU libmicrohttpd. One thread per
 * connection, so a handler may block (a sync barrier, a long poll) without holding up other
 * clients. Bodies are accumulated per connection up to their route's cap (413 beyond it; GET
 * routes take none); past max_conns an idle connection is closed to make room; errors are JSON
 * {"error": "...", "detail": "..."}; routes marked mutating may require a bearer token. */
#ifndef GEM_HTTPD_H
#define GEM_HTTPD_H

#include <jansson.h>
#include <stddef.h>

struct httpd;
struct httpd_conn;

/* One request, valid only while its handler runs (copy what must outlive it). */
struct httpd_req {
	const char *method;        /* "GET", "POST", ... */
	const char *path;          /* "/v1/params", without the query string */
	const unsigned char *body; /* the whole body, NUL-terminated (the NUL not counted) */
	size_t body_len;
	const char *client;        /* peer address, "127.0.0.1:50312" or "[::1]:50312" */
	struct httpd_conn *conn;   /* private */
};

/* A handler returns 0 after replying with one of httpd_reply_*; if it returns without a reply
 * (or returns < 0), the client gets a 500 JSON error. */
typedef int (*httpd_handler_fn)(struct httpd_req *req, void *ctx);

struct httpd_route {
	const char *method;   /* "GET", "POST", "PUT", "DELETE" */
	const char *path;     /* exact match, e.g. "/v1/update" */
	httpd_handler_fn fn;
	void *ctx;
	int mutating;         /* needs the bearer token when the server has one */
	size_t max_body;      /* body cap of this route; 0: the server's max_body. GET and HEAD
			       * routes take no body at all (413) */
};

/* The body cap of routes that take a small JSON document. */
#define HTTPD_JSON_BODY (64u << 10)

struct httpd_config {
	const char *host;     /* numeric address or name to bind; NULL = "127.0.0.1" */
	int port;             /* 0 = any free port (see httpd_port) */
	int allow_public;     /* must be 1 to bind anything but loopback */
	const char *token;    /* bearer token for mutating routes; NULL or "" = no auth */
	size_t max_body;      /* request body cap in bytes; 0 = 64 MiB */
	unsigned timeout_s;   /* idle connection timeout; 0 = 30 s */
	unsigned max_conns;   /* open connections (one thread each); 0 = 512. A new one beyond it
			       * closes the idle connection least recently used (one that never
			       * had a request authorized first), or is refused if all are busy */
	const char *tls_cert; /* PEM text of the certificate (chain) and its key: serve HTTPS; */
	const char *tls_key;  /* both NULL: plain HTTP. Copied */
	const struct httpd_route *routes;
	size_t n_routes;
};

/* Bind, listen and start serving. Route and token strings are copied. */
int httpd_start(const struct httpd_config *c, struct httpd **out, char *err);
/* Parse a listen address, HOST:PORT, [V6]:PORT or :PORT (host 127.0.0.1), into host (cap
 * bytes) and port; -1 when it is not of that form or the host does not fit. */
int httpd_listen_parse(const char *arg, char *host, size_t cap, int *port);
/* The bound port (useful after port 0). */
int httpd_port(const struct httpd *d);
/* The server's base URL, SCHEME://HOST:PORT ([HOST] for IPv6), HOST being the one it was
 * started on, except a wildcard (0.0.0.0, ::): then an address others can reach it at (the
 * first non-loopback address of this machine, if it has one). -1 if it does not fit in cap. */
int httpd_url(const struct httpd *d, const char *scheme, const char *host, char *out, size_t cap);
/* Stop accepting, wait for in-flight handlers to return, close everything. Handlers blocked
 * on the caller's conditions must be released first (or this waits for them). NULL is a no-op. */
void httpd_stop(struct httpd *d);

/* The bytes every open connection holds for request bodies: a body coming in or handled, or
 * the buffer a connection keeps for its next one (up to 16 MiB). */
size_t httpd_body_bytes(struct httpd *d);
/* The buffer a connection takes for a body of len bytes. */
size_t httpd_body_room(size_t len);

/* 1 if host is a loopback address or "localhost" (127.0.0.0/8, ::1), else 0. */
int httpd_is_loopback(const char *host);

/* A query argument ("?worker=3") or request header (case-insensitive), or NULL. */
const char *httpd_query(const struct httpd_req *req, const char *key);
const char *httpd_header(const struct httpd_req *req, const char *name);

/* Add a header to the reply that follows (e.g. Retry-After); at most 8 per request. */
int httpd_add_header(struct httpd_req *req, const char *name, const char *value);
/* Reply with a JSON document (not stolen: the caller still owns its reference). */
int httpd_reply_json(struct httpd_req *req, unsigned status, const json_t *j);
/* Reply with bytes. copy=1: copied now; copy=0: buf must stay valid and unchanged until the
 * server stops (static data) — use httpd_reply_owned for anything else. */
int httpd_reply_bytes(struct httpd_req *req, unsigned status, const char *content_type,
		      const void *buf, size_t len, int copy);
/* Reply with bytes without copying; free_fn(cls) runs once the response is sent or dropped,
 * also when this call fails (for a malloc'd buffer: free_fn = free, cls = buf). */
int httpd_reply_owned(struct httpd_req *req, unsigned status, const char *content_type,
		      const void *buf, size_t len, void (*free_fn)(void *cls), void *cls);
/* Reply {"error": error, "detail": printf(fmt, ...)}. */
int httpd_reply_error(struct httpd_req *req, unsigned status, const char *error,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#endif
