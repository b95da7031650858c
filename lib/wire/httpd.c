#include "wire/httpd.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/num.h"
#include "wire/proto.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTPD_MAX_BODY (64u << 20)
#define HTTPD_TIMEOUT_S 30
#define HTTPD_MAX_CONNS 512
/* libmicrohttpd's memory per connection (default 32 KiB), about half of it its read buffer: a
 * 655 KB commit then arrives in ~5 reads of ~128 KiB, not ~40 of 16 KiB (the pages are touched
 * only as they are used) */
#define HTTPD_CONN_POOL ((size_t)256 << 10)
/* Connections past max_conns that libmicrohttpd still admits: an evicted connection holds its
 * place until its thread has seen the shutdown. */
#define HTTPD_EVICT_SLACK 64
/* Request headers in all (names, values, separators): gem's clients send a few short ones */
#define HTTPD_HEADERS_MAX (16u << 10)
#define HTTPD_NHDR 8
/* A connection keeps its body buffer between requests (the next update has the same size);
 * beyond this it is given back after each request. */
#define HTTPD_KEEP_BUF (16u << 20)
/* How long httpd_stop lets in-flight requests finish before cutting their connections. */
#define HTTPD_GRACE_S 10
/* An authorized request whose Content-Length is over its route's cap is answered (413) once its
 * body has been read and dropped, up to this many bytes: a client sends the whole body before
 * it reads, and a socket closed on unread bytes is reset, so that it would see a reset instead
 * of the answer. A longer body is answered at once, and its connection closed; so is a client
 * that waits for "100 Continue" before it sends (it gets the answer instead), and one refused
 * before (no route, no token), whose body is not worth reading. */
#define HTTPD_DRAIN_MAX (64ull << 20)

struct httpd {
	struct MHD_Daemon *mhd;
	struct httpd_route *routes;
	size_t n_routes;
	char *token;
	size_t token_len;
	char *tls_cert, *tls_key; /* PEM, or NULL */
	size_t max_body;
	int port;
	/* Requests between their first byte and their completion, so httpd_stop can let them
	 * finish before MHD tears the sockets down. */
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned active;
	/* Every open connection (under lock), to make room for a new one when max_conns are open
	 * by closing an idle one (httpd_evict). */
	struct httpd_conn *conns;
	unsigned nlive, max_conns, timeout_s;
	uint64_t tick;
	size_t held; /* the bytes of every connection's body buffer */
};

enum httpd_state {
	HTTPD_RECV,    /* accumulating the body */
	HTTPD_DISCARD, /* body over the cap: drop the rest, answer 413 at the end */
	HTTPD_DONE,    /* a response is queued */
};

/* Per-connection state (MHD's socket context): one request at a time on a connection. */
struct httpd_conn {
	struct httpd *d;
	struct MHD_Connection *mc;
	unsigned char *buf;
	size_t len, cap;
	size_t body_cap; /* this request's body cap (its route's) */
	enum httpd_state state;
	const struct httpd_route *route;
	/* A 413 decided before the body, queued once the body has been dropped (HTTPD_DISCARD);
	 * late_detail[0] 0: the body went over the cap as it came (chunked). */
	char late_detail[1024];
	size_t nhdr, hused;
	const char *hname[HTTPD_NHDR], *hval[HTTPD_NHDR];
	char hbuf[1024];
	char client[INET6_ADDRSTRLEN + 16];
	/* Under d->lock: the list of connections, the socket, whether a request is in progress,
	 * whether one was ever routed and authorized, when it last began or ended (d->tick). */
	struct httpd_conn *prev, *next;
	int fd, busy, trusted, evicted;
	uint64_t last;
};

int httpd_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (!host)
		return 0;
	if (!strcasecmp(host, "localhost"))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (host[0] == '[') { /* "[::1]" as in a URL */
		char buf[INET6_ADDRSTRLEN];
		size_t n = strlen(host);
		if (n < 3 || n - 2 >= sizeof buf || host[n - 1] != ']')
			return 0;
		memcpy(buf, host + 1, n - 2);
		buf[n - 2] = 0;
		return inet_pton(AF_INET6, buf, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
	}
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return 0;
}

/* Compare the presented token with ours in time that depends only on the presented length:
 * no early exit, and a length mismatch is folded into the same accumulator. */
static int httpd_token_ok(const struct httpd *d, const char *got, size_t got_len)
{
	volatile unsigned char diff = (unsigned char)(got_len != d->token_len);
	for (size_t i = 0; i < got_len; i++)
		diff |= (unsigned char)got[i] ^ (unsigned char)d->token[i % d->token_len];
	return diff == 0;
}

static int httpd_auth_ok(const struct httpd *d, struct MHD_Connection *mc)
{
	const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!d->token)
		return 1;
	if (!h || strncasecmp(h, "Bearer ", 7))
		return 0;
	h += 7;
	while (*h == ' ')
		h++;
	return httpd_token_ok(d, h, strlen(h));
}

static void httpd_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;
	(void)cls;
	vsnprintf(msg, sizeof msg, fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	log_warn("httpd: %s", msg);
}

static void httpd_format_addr(const struct sockaddr *sa, char *out, size_t n)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
		snprintf(out, n, "%s:%u", host, ntohs(s->sin_port));
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
		snprintf(out, n, "[%s]:%u", host, ntohs(s->sin6_port));
	} else {
		snprintf(out, n, "?");
	}
}

/* A connection's place in the list of open connections; d->lock held. */
static void httpd_link(struct httpd *d, struct httpd_conn *hc)
{
	hc->next = d->conns;
	if (d->conns)
		d->conns->prev = hc;
	d->conns = hc;
	d->nlive++;
}

static void httpd_unlink(struct httpd *d, struct httpd_conn *hc)
{
	if (hc->prev)
		hc->prev->next = hc->next;
	else
		d->conns = hc->next;
	if (hc->next)
		hc->next->prev = hc->prev;
	if (!hc->evicted)
		d->nlive--;
}

/* Make room for one more connection: shut down the idle connection (no request in progress)
 * least recently used, one that never had a request routed and authorized first; d->lock held.
 * 0 if one was shut down, -1 if every connection is busy. Its socket stays open until
 * libmicrohttpd has told httpd_notify_conn it closed, so it is this connection's. */
static int httpd_evict(struct httpd *d)
{
	struct httpd_conn *v = NULL;
	for (struct httpd_conn *c = d->conns; c; c = c->next) {
		if (c->busy || c->evicted || c->fd < 0)
			continue;
		if (!v || (v->trusted && !c->trusted) ||
		    (v->trusted == c->trusted && c->last < v->last))
			v = c;
	}
	if (!v)
		return -1;
	shutdown(v->fd, SHUT_RDWR);
	v->evicted = 1;
	d->nlive--;
	return 0;
}

/* Accept policy: a new connection gets in while fewer than max_conns are open, or by evicting
 * an idle one. */
static enum MHD_Result httpd_accept(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct httpd *d = cls;
	int ok;
	(void)addr, (void)len;
	pthread_mutex_lock(&d->lock);
	ok = d->nlive < d->max_conns || httpd_evict(d) == 0;
	pthread_mutex_unlock(&d->lock);
	return ok ? MHD_YES : MHD_NO;
}

static void httpd_notify_conn(void *cls, struct MHD_Connection *mc, void **socket_context,
			      enum MHD_ConnectionNotificationCode code)
{
	struct httpd *d = cls;
	struct httpd_conn *hc = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci;
		hc = calloc(1, sizeof *hc);
		if (!hc)
			return; /* the access handler refuses connections without state */
		hc->d = d;
		hc->mc = mc;
		ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		httpd_format_addr(ci ? ci->client_addr : NULL, hc->client, sizeof hc->client);
		ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		hc->fd = ci ? (int)ci->connect_fd : -1;
		*socket_context = hc;
		pthread_mutex_lock(&d->lock);
		hc->last = ++d->tick;
		httpd_link(d, hc);
		pthread_mutex_unlock(&d->lock);
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && hc) {
		pthread_mutex_lock(&d->lock);
		httpd_unlink(d, hc);
		d->held -= hc->cap;
		pthread_mutex_unlock(&d->lock);
		free(hc->buf);
		free(hc);
		*socket_context = NULL;
	}
}

/* hc's body buffer is now cap bytes (0: freed), in d->held. */
static void httpd_held(struct httpd_conn *hc, size_t cap)
{
	pthread_mutex_lock(&hc->d->lock);
	hc->d->held += cap - hc->cap;
	pthread_mutex_unlock(&hc->d->lock);
	hc->cap = cap;
}

static void httpd_request_done(void *cls, struct MHD_Connection *mc, void **req_cls,
			       enum MHD_RequestTerminationCode toe)
{
	struct httpd *d = cls;
	struct httpd_conn *hc = *req_cls;
	(void)mc, (void)toe;
	if (!hc)
		return;
	pthread_mutex_lock(&d->lock);
	if (!--d->active)
		pthread_cond_broadcast(&d->idle);
	hc->busy = 0;
	hc->last = ++d->tick;
	pthread_mutex_unlock(&d->lock);
	if (hc->cap > HTTPD_KEEP_BUF) {
		free(hc->buf);
		hc->buf = NULL;
		httpd_held(hc, 0);
	}
	hc->len = 0;
	*req_cls = NULL;
}

/* Queue resp with the content type and pending extra headers, then drop our reference. */
static int httpd_queue(struct httpd_conn *hc, unsigned status, const char *content_type,
		       struct MHD_Response *resp)
{
	enum MHD_Result r = MHD_NO;
	if (!resp)
		return GEM_ENOMEM;
	if (hc->state == HTTPD_DONE) {
		MHD_destroy_response(resp);
		log_warn("httpd: second reply to %s ignored", hc->client);
		return GEM_EUSAGE;
	}
	if (content_type &&
	    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) == MHD_NO)
		goto out;
	for (size_t i = 0; i < hc->nhdr; i++)
		if (MHD_add_response_header(resp, hc->hname[i], hc->hval[i]) == MHD_NO)
			goto out;
	r = MHD_queue_response(hc->mc, status, resp);
	if (r == MHD_YES)
		hc->state = HTTPD_DONE;
out:
	MHD_destroy_response(resp);
	return r == MHD_YES ? 0 : GEM_EFAIL;
}

/* JSON text plus a newline, so `curl ... | head -1 | jq` works on any reply. */
static char *httpd_dump_json(const json_t *j, size_t *len)
{
	size_t n = json_dumpb(j, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
	char *s;
	if (!n || !(s = malloc(n + 1)))
		return NULL;
	json_dumpb(j, s, n, JSON_COMPACT | JSON_ENCODE_ANY);
	s[n] = '\n';
	*len = n + 1;
	return s;
}

static int httpd_reply_json_conn(struct httpd_conn *hc, unsigned status, const json_t *j)
{
	size_t len = 0;
	char *s = httpd_dump_json(j, &len);
	if (!s)
		return GEM_ENOMEM;
	return httpd_queue(hc, status, "application/json",
			   MHD_create_response_from_buffer_with_free_callback(len, s, free));
}

/* src as printable ASCII into dst (n > 0 bytes, always terminated): every other byte as \xNN,
 * so that a detail quoting a client's bytes (a path, a method, a codec) is valid UTF-8 however
 * it was cut. */
static void httpd_ascii(char *dst, size_t n, const char *src)
{
	static const char hex[] = "0123456789abcdef";
	size_t k = 0;
	for (; *src; src++) {
		unsigned char c = (unsigned char)*src;
		if (c >= 0x20 && c < 0x7f) {
			if (k + 1 >= n)
				break;
			dst[k++] = (char)c;
		} else {
			if (k + 4 >= n)
				break;
			dst[k++] = '\\', dst[k++] = 'x', dst[k++] = hex[c >> 4], dst[k++] = hex[c & 15];
		}
	}
	dst[k] = 0;
}

/* The reply when even an error reply cannot be built (no memory): static, so it cannot fail. */
static const char httpd_fallback[] = "{\"error\":\"internal\",\"detail\":\"no memory for the reply\"}\n";

/* The client asked for "100 Continue" and waits for it before it sends its body. */
static int httpd_continue_asked(struct httpd_conn *hc)
{
	const char *ex = MHD_lookup_connection_value(hc->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
	return ex && !strcasecmp(ex, "100-continue");
}

/* Queue an error reply; it is always queued unless libmicrohttpd itself refuses (the connection
 * is then closed). */
static int httpd_verror(struct httpd_conn *hc, unsigned status, const char *error, const char *fmt,
			va_list ap)
{
	char raw[1024], detail[1024];
	json_t *j;
	int rc = GEM_ENOMEM;
	vsnprintf(raw, sizeof raw, fmt, ap);
	httpd_ascii(detail, sizeof detail, raw);
	if ((j = proto_error_to_json(error, detail))) {
		rc = httpd_reply_json_conn(hc, status, j);
		json_decref(j);
	}
	if (rc < 0 && hc->state != HTTPD_DONE)
		rc = httpd_queue(hc, status, "application/json",
				 MHD_create_response_from_buffer(sizeof httpd_fallback - 1,
								 (void *)httpd_fallback,
								 MHD_RESPMEM_PERSISTENT));
	return rc;
}

static int httpd_error(struct httpd_conn *hc, unsigned status, const char *error,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int httpd_error(struct httpd_conn *hc, unsigned status, const char *error,
		       const char *fmt, ...)
{
	va_list ap;
	int rc;
	va_start(ap, fmt);
	rc = httpd_verror(hc, status, error, fmt, ap);
	va_end(ap);
	return rc;
}

static int httpd_push_header(struct httpd_conn *hc, const char *name, const char *value)
{
	size_t nl = strlen(name) + 1, vl = strlen(value) + 1;
	if (hc->nhdr == HTTPD_NHDR || hc->hused + nl + vl > sizeof hc->hbuf)
		return GEM_EUSAGE;
	hc->hname[hc->nhdr] = memcpy(hc->hbuf + hc->hused, name, nl);
	hc->hused += nl;
	hc->hval[hc->nhdr++] = memcpy(hc->hbuf + hc->hused, value, vl);
	hc->hused += vl;
	return 0;
}

/* Find the route; on failure queue the 404/405 reply and return NULL. */
static const struct httpd_route *httpd_route_find(struct httpd_conn *hc, const char *method,
						  const char *path)
{
	char allow[128] = "";
	size_t n = 0;
	for (size_t i = 0; i < hc->d->n_routes; i++) {
		const struct httpd_route *r = &hc->d->routes[i];
		if (strcmp(r->path, path))
			continue;
		if (!strcmp(r->method, method))
			return r;
		n += snprintf(allow + n, sizeof allow - n, "%s%s", n ? ", " : "", r->method);
		if (n >= sizeof allow)
			n = sizeof allow - 1;
	}
	if (!allow[0]) {
		httpd_error(hc, MHD_HTTP_NOT_FOUND, "not_found", "no resource at %s", path);
	} else {
		httpd_push_header(hc, MHD_HTTP_HEADER_ALLOW, allow);
		httpd_error(hc, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
			    "%s does not accept %s (allowed: %s)", path, method, allow);
	}
	return NULL;
}

size_t httpd_body_room(size_t len)
{
	size_t cap = 4096;
	while (cap < len + 1)
		cap = cap > SIZE_MAX / 2 ? len + 1 : cap * 2;
	return cap;
}

static int httpd_reserve(struct httpd_conn *hc, size_t need)
{
	size_t cap = httpd_body_room(need);
	unsigned char *p;
	if (need + 1 <= hc->cap)
		return 0;
	if (!(p = realloc(hc->buf, cap)))
		return GEM_ENOMEM;
	hc->buf = p;
	httpd_held(hc, cap);
	return 0;
}

/* MHD_get_connection_values callback: count the Content-Length headers, and whether they
 * disagree (libmicrohttpd frames the body by the first one). */
struct httpd_clen {
	const char *first;
	int n, differ;
};

static enum MHD_Result httpd_clen_each(void *cls, enum MHD_ValueKind kind, const char *key,
				       const char *value)
{
	struct httpd_clen *c = cls;
	(void)kind;
	if (!key || strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
		return MHD_YES;
	if (c->n++ && strcmp(c->first, value ? value : ""))
		c->differ = 1;
	else if (c->n == 1)
		c->first = value ? value : "";
	return MHD_YES;
}

/* The request's headers as libmicrohttpd parsed them: their bytes in all, and its
 * Transfer-Encoding headers (the first one's value). */
struct httpd_heads {
	size_t bytes;
	int nte;
	const char *te;
};

static enum MHD_Result httpd_heads_each(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct httpd_heads *h = cls;
	(void)kind;
	h->bytes += (key ? strlen(key) : 0) + (value ? strlen(value) : 0) + 4; /* ": ", CRLF */
	if (key && !strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) && !h->nte++)
		h->te = value ? value : "";
	return MHD_YES;
}

/* Headers past HTTPD_HEADERS_MAX, or a body in a transfer coding other than chunked alone,
 * refused at once (431, 501; gem-protocol(7)): libmicrohttpd would take headers up to its
 * buffer's size, and would wait for the end of a body it cannot frame until the idle timeout. */
static int httpd_check_heads(struct httpd_conn *hc)
{
	struct httpd_heads h = {0};
	char te[64];
	MHD_get_connection_values(hc->mc, MHD_HEADER_KIND, httpd_heads_each, &h);
	if (h.bytes > HTTPD_HEADERS_MAX)
		return httpd_error(hc, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large",
				   "%zu bytes of headers: more than the limit of %u", h.bytes,
				   HTTPD_HEADERS_MAX), -1;
	if (h.nte > 1 || (h.nte && strcasecmp(h.te, "chunked"))) {
		httpd_ascii(te, sizeof te, h.te);
		return httpd_error(hc, MHD_HTTP_NOT_IMPLEMENTED, "not_implemented",
				   "Transfer-Encoding: %s%s: a body comes with Content-Length or "
				   "chunked alone", te, h.nte > 1 ? " (and more)" : ""), -1;
	}
	return 0;
}

/* A request's body cap: none for GET and HEAD, else its route's or the server's. */
static size_t httpd_body_cap(const struct httpd *d, const struct httpd_route *r)
{
	if (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD"))
		return 0;
	return r->max_body ? r->max_body : d->max_body;
}

/* The body's framing and size, before any of it is read: 0, or an error reply queued. */
static int httpd_check_length(struct httpd_conn *hc, const char *method, const char *url)
{
	struct httpd_clen c = {0};
	unsigned long long n;
	char raw[1024];
	MHD_get_connection_values(hc->mc, MHD_HEADER_KIND, httpd_clen_each, &c);
	if (c.differ)
		return httpd_error(hc, MHD_HTTP_BAD_REQUEST, "bad_request",
				   "conflicting Content-Length headers"), -1;
	if (!c.n)
		return 0;
	n = strtoull(c.first, NULL, 10);
	if (n > hc->body_cap) {
		snprintf(raw, sizeof raw, "%s %s: a body of %llu bytes exceeds its limit of %zu", method,
			 url, n, hc->body_cap);
		if (n > HTTPD_DRAIN_MAX || httpd_continue_asked(hc))
			return httpd_error(hc, MHD_HTTP_CONTENT_TOO_LARGE, "too_large", "%s", raw), -1;
		/* answered once the body is dropped (HTTPD_DRAIN_MAX) */
		httpd_ascii(hc->late_detail, sizeof hc->late_detail, raw);
		hc->state = HTTPD_DISCARD;
		return -1;
	}
	if (httpd_reserve(hc, (size_t)n))
		return httpd_error(hc, MHD_HTTP_SERVICE_UNAVAILABLE, "no_memory",
				   "cannot buffer a body of %llu bytes", n), -1;
	return 0;
}

/* First call of a request: route, authorize and size-check it before any body is read. */
static void httpd_begin(struct httpd_conn *hc, const char *method, const char *url)
{
	hc->state = HTTPD_RECV;
	hc->len = 0;
	hc->nhdr = 0;
	hc->hused = 0;
	hc->body_cap = 0;
	hc->late_detail[0] = 0;
	hc->route = NULL;
	if (httpd_check_heads(hc) < 0 || !(hc->route = httpd_route_find(hc, method, url)))
		return;
	if (hc->route->mutating && !httpd_auth_ok(hc->d, hc->mc)) {
		httpd_push_header(hc, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
		httpd_error(hc, MHD_HTTP_UNAUTHORIZED, "unauthorized",
			    "%s %s needs a valid 'Authorization: Bearer' token", method, url);
		return;
	}
	pthread_mutex_lock(&hc->d->lock);
	hc->trusted = 1;
	pthread_mutex_unlock(&hc->d->lock);
	hc->body_cap = httpd_body_cap(hc->d, hc->route);
	httpd_check_length(hc, method, url);
}

static void httpd_dispatch(struct httpd_conn *hc, const char *method, const char *url)
{
	struct httpd_req req;
	int rc;
	if (httpd_reserve(hc, hc->len)) {
		httpd_error(hc, MHD_HTTP_SERVICE_UNAVAILABLE, "no_memory", "cannot buffer the body");
		return;
	}
	hc->buf[hc->len] = 0;
	req.method = method;
	req.path = url;
	req.body = hc->buf;
	req.body_len = hc->len;
	req.client = hc->client;
	req.conn = hc;
	rc = hc->route->fn(&req, hc->route->ctx);
	/* A handler may block longer than the idle timeout (a round of sync): the reply still
	 * goes out (setting the timeout from 0 restarts the clock). */
	MHD_set_connection_option(hc->mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_set_connection_option(hc->mc, MHD_CONNECTION_OPTION_TIMEOUT, hc->d->timeout_s);
	if (hc->state != HTTPD_DONE)
		httpd_error(hc, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
			    "%s %s: handler returned %d without a reply", method, url, rc);
}

static enum MHD_Result httpd_access(void *cls, struct MHD_Connection *mc, const char *url,
				   const char *method, const char *version, const char *upload_data,
				   size_t *upload_data_size, void **req_cls)
{
	const union MHD_ConnectionInfo *ci;
	struct httpd_conn *hc = *req_cls;
	(void)cls, (void)version;
	if (!hc) {
		ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		if (!ci || !(hc = ci->socket_context))
			return MHD_NO; /* out of memory when the connection started */
		*req_cls = hc;
		pthread_mutex_lock(&hc->d->lock);
		hc->d->active++;
		hc->busy = 1;
		hc->last = ++hc->d->tick;
		pthread_mutex_unlock(&hc->d->lock);
		httpd_begin(hc, method, url);
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (hc->state != HTTPD_RECV)
			return MHD_YES;
		if (n > hc->body_cap - hc->len) {
			/* Chunked or lying about its length: stop buffering, answer at the end. */
			hc->state = HTTPD_DISCARD;
			return MHD_YES;
		}
		if (httpd_reserve(hc, hc->len + n)) {
			hc->state = HTTPD_DISCARD;
			return MHD_YES;
		}
		memcpy(hc->buf + hc->len, upload_data, n);
		hc->len += n;
		return MHD_YES;
	}
	if (hc->state == HTTPD_DISCARD && hc->late_detail[0])
		httpd_error(hc, MHD_HTTP_CONTENT_TOO_LARGE, "too_large", "%s", hc->late_detail);
	else if (hc->state == HTTPD_DISCARD)
		httpd_error(hc, MHD_HTTP_CONTENT_TOO_LARGE, "too_large",
			    "%s %s: the body exceeds its limit of %zu bytes (or memory ran out)", method,
			    url, hc->body_cap);
	else if (hc->state == HTTPD_RECV && hc->route)
		httpd_dispatch(hc, method, url);
	return hc->state == HTTPD_DONE ? MHD_YES : MHD_NO;
}

/* libmicrohttpd's unescaping of the path and of query arguments, but %00 stays as it is: a NUL
 * would end the string early, and "/v1/params%00x" would be routed as /v1/params. */
static size_t httpd_unescape(void *cls, struct MHD_Connection *mc, char *s)
{
	static const char hex[] = "0123456789abcdef";
	char *out = s, *in = s, *h1, *h2;
	(void)cls, (void)mc;
	while (*in) {
		if (in[0] == '%' && in[1] && in[2] && (h1 = strchr(hex, tolower((unsigned char)in[1]))) &&
		    (h2 = strchr(hex, tolower((unsigned char)in[2]))) && (h1 != hex || h2 != hex)) {
			*out++ = (char)((h1 - hex) << 4 | (h2 - hex));
			in += 3;
		} else {
			*out++ = *in++;
		}
	}
	*out = 0;
	return (size_t)(out - s);
}

static int httpd_listen(const char *host, int port, int *fd_out, char *err)
{
	struct addrinfo hints = {0}, *res, *ai;
	char portstr[16];
	int fd = -1, rc, one = 1, saved = 0;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(portstr, sizeof portstr, "%d", port);
	if ((rc = getaddrinfo(host, portstr, &hints, &res)))
		return gem_errf(err, GEM_EUSAGE, "listen address %s: %s", host, gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, SOMAXCONN))
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return gem_errf(err, GEM_EFAIL, "cannot listen on %s:%d: %s", host, port, strerror(saved));
	*fd_out = fd;
	return 0;
}

static int httpd_port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t n = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &n))
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

static void httpd_free(struct httpd *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n_routes; i++) {
		free((char *)d->routes[i].method);
		free((char *)d->routes[i].path);
	}
	free(d->routes);
	fs_free_secret(d->token);
	free(d->tls_cert);
	fs_free_secret(d->tls_key);
	pthread_cond_destroy(&d->idle);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* The certificate and key, both or neither; libmicrohttpd must have been built with TLS. */
static int httpd_tls_copy(struct httpd *d, const struct httpd_config *c, char *err)
{
	if (!c->tls_cert && !c->tls_key)
		return 0;
	if (!c->tls_cert || !c->tls_key)
		return gem_errf(err, GEM_EUSAGE, "TLS needs both a certificate and its key");
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return gem_errf(err, GEM_EUSAGE, "this libmicrohttpd was built without TLS support");
	if (!(d->tls_cert = strdup(c->tls_cert)) || !(d->tls_key = strdup(c->tls_key)))
		return gem_errf(err, GEM_ENOMEM, "out of memory starting the HTTP server");
	return 0;
}

int httpd_start(const struct httpd_config *c, struct httpd **out, char *err)
{
	const char *host = c->host ? c->host : "127.0.0.1";
	struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL},
					 {MHD_OPTION_END, 0, NULL}};
	struct httpd *d;
	int fd = -1, rc;
	*out = NULL;
	if (c->port < 0 || c->port > 65535)
		return gem_errf(err, GEM_EUSAGE, "bad port %d", c->port);
	if (!httpd_is_loopback(host) && !c->allow_public)
		return gem_errf(err, GEM_EUSAGE,
				"refusing to listen on non-loopback address %s without an explicit request",
				host);
	for (size_t i = 0; i < c->n_routes; i++)
		if (!c->routes[i].method || !c->routes[i].path || !c->routes[i].fn)
			return gem_errf(err, GEM_EUSAGE, "route %zu: method, path and handler are required", i);
	if (!(d = calloc(1, sizeof *d)))
		return gem_errf(err, GEM_ENOMEM, "out of memory starting the HTTP server");
	pthread_mutex_init(&d->lock, NULL);
	clock_cond_init(&d->idle);
	if (!(d->routes = calloc(c->n_routes + 1, sizeof *d->routes)))
		goto nomem;
	for (size_t i = 0; i < c->n_routes; i++) {
		d->routes[i] = c->routes[i];
		d->routes[i].method = strdup(c->routes[i].method);
		d->routes[i].path = strdup(c->routes[i].path);
		d->n_routes++;
		if (!d->routes[i].method || !d->routes[i].path)
			goto nomem;
	}
	if (c->token && c->token[0]) {
		if (!(d->token = strdup(c->token)))
			goto nomem;
		d->token_len = strlen(d->token);
	}
	if ((rc = httpd_tls_copy(d, c, err)) < 0)
		goto fail;
	d->max_body = c->max_body ? c->max_body : HTTPD_MAX_BODY;
	d->max_conns = c->max_conns ? c->max_conns : HTTPD_MAX_CONNS;
	d->timeout_s = c->timeout_s ? c->timeout_s : HTTPD_TIMEOUT_S;
	if ((rc = httpd_listen(host, c->port, &fd, err)))
		goto fail;
	d->port = httpd_port_of(fd);
	/* One thread per connection: the sync rule parks a worker's request in its handler until
	 * the others arrive, so a fixed pool of N threads would deadlock at N+1 waiting workers. */
	tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, d->tls_cert};
	tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, d->tls_key};
	if (!d->tls_cert)
		tls[0].option = MHD_OPTION_END;
	d->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
			MHD_USE_ITC | MHD_USE_ERROR_LOG | (d->tls_cert ? MHD_USE_TLS : 0),
		0, httpd_accept, d, httpd_access, d,
		MHD_OPTION_EXTERNAL_LOGGER, httpd_mhd_log, d, /* first, so MHD never prints itself */
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_TIMEOUT, d->timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, d->max_conns + HTTPD_EVICT_SLACK,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTPD_CONN_POOL,
		MHD_OPTION_NOTIFY_CONNECTION, httpd_notify_conn, d,
		MHD_OPTION_UNESCAPE_CALLBACK, httpd_unescape, d,
		MHD_OPTION_NOTIFY_COMPLETED, httpd_request_done, d,
		MHD_OPTION_ARRAY, tls,
		MHD_OPTION_END);
	if (!d->mhd) {
		close(fd);
		rc = gem_errf(err, GEM_EFAIL, "cannot start the HTTP%s server on %s:%d%s",
			      d->tls_cert ? "S" : "", host, d->port,
			      d->tls_cert ? " (is the key the certificate's, both PEM?)" : "");
		goto fail;
	}
	*out = d;
	return 0;
nomem:
	rc = gem_errf(err, GEM_ENOMEM, "out of memory starting the HTTP server");
fail:
	httpd_free(d);
	return rc;
}

int httpd_port(const struct httpd *d)
{
	return d->port;
}

/* For a wildcard host (0.0.0.0: IPv4 only; :: or empty: any family), the first address of an
 * interface that is up and not the loopback (an IPv6 link-local one needs a scope: skipped);
 * 0 with it in out, else -1. No name lookup: nothing can hang here. */
static int reachable_address(const char *host, char *out, size_t cap)
{
	struct ifaddrs *ifs, *i;
	int v4only = !strcmp(host, "0.0.0.0"), found = -1;
	if (!v4only && *host && strcmp(host, "::") && strcmp(host, "[::]"))
		return -1;
	if (getifaddrs(&ifs) < 0)
		return -1;
	for (int fam = 0; fam < 2 && found < 0; fam++) /* IPv4 first */
		for (i = ifs; i && found < 0; i = i->ifa_next) {
			const void *a;
			if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
				continue;
			if (fam == 0 && i->ifa_addr->sa_family == AF_INET)
				a = &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr;
			else if (fam == 1 && !v4only && i->ifa_addr->sa_family == AF_INET6 &&
				 !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr))
				a = &((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr;
			else
				continue;
			if (inet_ntop(i->ifa_addr->sa_family, a, out, (socklen_t)cap))
				found = 0;
		}
	freeifaddrs(ifs);
	return found;
}

int httpd_url(const struct httpd *d, const char *scheme, const char *host, char *out, size_t cap)
{
	char addr[INET6_ADDRSTRLEN];
	int n;
	if (reachable_address(host, addr, sizeof addr) == 0)
		host = addr;
	n = snprintf(out, cap, strchr(host, ':') ? "%s://[%s]:%d" : "%s://%s:%d", scheme, host,
		     d->port);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

void httpd_stop(struct httpd *d)
{
	struct timespec until;
	MHD_socket fd;
	if (!d)
		return;
	/* Stop accepting, let requests in flight send their replies, then close what is left
	 * (MHD_stop_daemon joins every connection thread, so handlers always finish). */
	fd = MHD_quiesce_daemon(d->mhd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	until = clock_deadline(HTTPD_GRACE_S);
	pthread_mutex_lock(&d->lock);
	while (d->active && pthread_cond_timedwait(&d->idle, &d->lock, &until) == 0)
		;
	pthread_mutex_unlock(&d->lock);
	MHD_stop_daemon(d->mhd);
	httpd_free(d);
}

const char *httpd_query(const struct httpd_req *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn->mc, MHD_GET_ARGUMENT_KIND, key);
}

const char *httpd_header(const struct httpd_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn->mc, MHD_HEADER_KIND, name);
}

int httpd_add_header(struct httpd_req *req, const char *name, const char *value)
{
	return httpd_push_header(req->conn, name, value);
}

int httpd_reply_json(struct httpd_req *req, unsigned status, const json_t *j)
{
	return httpd_reply_json_conn(req->conn, status, j);
}

int httpd_reply_bytes(struct httpd_req *req, unsigned status, const char *content_type,
		      const void *buf, size_t len, int copy)
{
	return httpd_queue(req->conn, status, content_type,
			   MHD_create_response_from_buffer(len, (void *)buf,
							   copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT));
}

int httpd_reply_owned(struct httpd_req *req, unsigned status, const char *content_type,
		      const void *buf, size_t len, void (*free_fn)(void *cls), void *cls)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer_with_free_callback_cls(len, (void *)buf, free_fn, cls);
	if (!r) {
		if (free_fn)
			free_fn(cls);
		return GEM_ENOMEM;
	}
	return httpd_queue(req->conn, status, content_type, r);
}

int httpd_reply_error(struct httpd_req *req, unsigned status, const char *error,
		      const char *fmt, ...)
{
	va_list ap;
	int rc;
	va_start(ap, fmt);
	rc = httpd_verror(req->conn, status, error, fmt, ap);
	va_end(ap);
	return rc;
}

int httpd_listen_parse(const char *arg, char *host, size_t cap, int *port)
{
	const char *colon = strrchr(arg, ':');
	long p;
	size_t hl;
	if (!colon || num_long(colon + 1, 0, 65535, &p))
		return -1;
	hl = (size_t)(colon - arg);
	if (hl >= 2 && arg[0] == '[' && arg[hl - 1] == ']') {
		arg++;
		hl -= 2;
	}
	if (hl >= cap)
		return -1;
	if (hl == 0)
		snprintf(host, cap, "127.0.0.1");
	else
		snprintf(host, cap, "%.*s", (int)hl, arg);
	*port = (int)p;
	return 0;
}

size_t httpd_body_bytes(struct httpd *d)
{
	size_t n;
	pthread_mutex_lock(&d->lock);
	n = d->held;
	pthread_mutex_unlock(&d->lock);
	return n;
}
