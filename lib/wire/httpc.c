#include "wire/httpc.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "base/grow.h"
#include "wire/proto.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HTTPC_CONNECT_MS 5000L
#define HTTPC_BACKOFF0_MS 100L
#define HTTPC_BACKOFF_MAX_MS 2000L

struct httpc {
	CURL *curl;
	char *base;
	size_t base_len;
	char *url; /* base + path, grown as needed */
	size_t url_cap;
	char *auth; /* "Authorization: Bearer ..." or NULL */
	struct curl_slist *hdr_get;  /* Authorization (if any) */
	struct curl_slist *hdr_post; /* Authorization, Expect:, Content-Type of the last POST */
	char *post_ctype;
	struct httpc_resp *cur;
	int oom;
	int tls; /* https:// */
	int timed_out; /* the last request was sent and its timeout passed before the reply */
	int (*abort)(void *ctx); /* httpc_set_abort */
	void *abort_ctx;
	char curl_err[CURL_ERROR_SIZE];
};

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;
static CURLcode httpc_init_rc;

static void httpc_init_once(void)
{
	httpc_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int httpc_global_init(char *err)
{
	pthread_once(&httpc_once, httpc_init_once);
	if (httpc_init_rc != CURLE_OK)
		return gem_errf(err, GEM_EFAIL, "curl_global_init: %s", curl_easy_strerror(httpc_init_rc));
	return 0;
}

static int httpc_reserve(struct httpc_resp *r, size_t need)
{
	/* room for a terminating NUL */
	return need == SIZE_MAX ? GEM_ENOMEM : grow_array(&r->body, &r->cap, need + 1, 1, 4096);
}

static size_t httpc_write(char *data, size_t size, size_t nmemb, void *cls)
{
	struct httpc *c = cls;
	struct httpc_resp *r = c->cur;
	size_t n = size * nmemb;
	if (!r->len) { /* first chunk: headers are in, size the buffer once */
		curl_off_t cl = -1;
		if (!curl_easy_getinfo(c->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) && cl > 0 &&
		    (uint64_t)cl < SIZE_MAX / 2 && httpc_reserve(r, (size_t)cl)) {
			c->oom = 1;
			return 0;
		}
	}
	if (httpc_reserve(r, r->len + n)) {
		c->oom = 1;
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	}
	memcpy(r->body + r->len, data, n);
	r->len += n;
	return n;
}

static struct curl_slist *httpc_slist_add(struct curl_slist *l, const char *s, int *fail)
{
	struct curl_slist *n;
	if (*fail || !s)
		return l;
	if (!(n = curl_slist_append(l, s)))
		*fail = 1;
	return n ? n : l;
}

void httpc_set_timeout(struct httpc *c, long timeout_ms, long connect_timeout_ms)
{
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
	curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS,
			 connect_timeout_ms > 0 ? connect_timeout_ms : 0L);
}

/* libcurl's progress callback: non-zero ends the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int httpc_progress(void *cls, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			  curl_off_t ulnow)
{
	struct httpc *c = cls;
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return c->abort(c->abort_ctx) != 0;
}

void httpc_set_abort(struct httpc *c, int (*abort)(void *ctx), void *ctx)
{
	c->abort = abort;
	c->abort_ctx = ctx;
	curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, abort ? httpc_progress : NULL);
	curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, c);
	curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, abort ? 0L : 1L);
}

int httpc_new(const char *base_url, const char *token, long timeout_ms, struct httpc **out,
	      char *err)
{
	struct httpc *c;
	int rc, fail = 0;
	size_t n;
	*out = NULL;
	if ((rc = httpc_global_init(err)))
		return rc;
	if (!base_url || (strncmp(base_url, "http://", 7) && strncmp(base_url, "https://", 8)))
		return gem_errf(err, GEM_EUSAGE, "server URL %s: must start with http:// or https://",
				base_url ? base_url : "(null)");
	if (!(c = calloc(1, sizeof *c)) || !(c->base = strdup(base_url)))
		goto nomem;
	n = strlen(c->base);
	c->tls = !strncmp(base_url, "https://", 8);
	while (n > 7u + (unsigned)c->tls && c->base[n - 1] == '/')
		c->base[--n] = 0;
	c->base_len = n;
	if (token && token[0]) {
		size_t tl = strlen(token) + sizeof "Authorization: Bearer ";
		if (!(c->auth = malloc(tl)))
			goto nomem;
		snprintf(c->auth, tl, "Authorization: Bearer %s", token);
	}
	c->hdr_get = httpc_slist_add(NULL, c->auth, &fail);
	if (fail || !(c->curl = curl_easy_init()))
		goto nomem;
	curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L); /* timeouts without SIGALRM: thread-safe */
	curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPALIVE, 1L);
	/* θ (655 KB for cnn) in a few large reads and writes rather than 16 KiB and 64 KiB ones */
	curl_easy_setopt(c->curl, CURLOPT_BUFFERSIZE, 256L << 10);
	curl_easy_setopt(c->curl, CURLOPT_UPLOAD_BUFFERSIZE, 256L << 10);
	curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, c->tls ? "https" : "http");
	curl_easy_setopt(c->curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(c->curl, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->curl_err);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, httpc_write);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "gem/" GEM_VERSION);
	httpc_set_timeout(c, timeout_ms,
			  timeout_ms > 0 && timeout_ms < HTTPC_CONNECT_MS ? timeout_ms : HTTPC_CONNECT_MS);
	*out = c;
	return 0;
nomem:
	httpc_free(c);
	return gem_errf(err, GEM_ENOMEM, "out of memory creating an HTTP client");
}

int httpc_set_cacert(struct httpc *c, const char *cafile, char *err)
{
	FILE *f;
	if (!cafile)
		return 0;
	if (!c->tls)
		return gem_errf(err, GEM_EUSAGE, "a CA certificate is for https:// servers, not %s",
				c->base);
	/* curl only finds out at the first request: say now that the file is missing */
	if (!(f = fopen(cafile, "r")))
		return gem_errf(err, GEM_EUSAGE, "CA certificate %s: %s", cafile, strerror(errno));
	fclose(f);
	if (curl_easy_setopt(c->curl, CURLOPT_CAINFO, cafile) != CURLE_OK ||
	    curl_easy_setopt(c->curl, CURLOPT_CAPATH, NULL) != CURLE_OK)
		return gem_errf(err, GEM_EFAIL, "libcurl refuses the CA file %s", cafile);
	return 0;
}

void httpc_free(struct httpc *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	curl_slist_free_all(c->hdr_get);
	curl_slist_free_all(c->hdr_post);
	free(c->post_ctype);
	fs_free_secret(c->auth);
	free(c->url);
	free(c->base);
	free(c);
}

int httpc_timed_out(const struct httpc *c)
{
	return c->timed_out;
}

const char *httpc_base_url(const struct httpc *c)
{
	return c->base;
}

void httpc_resp_free(struct httpc_resp *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

static int httpc_set_url(struct httpc *c, const char *path, char *err)
{
	size_t need = c->base_len + strlen(path) + 2;
	if (need > c->url_cap) {
		char *p = realloc(c->url, need);
		if (!p)
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		c->url = p;
		c->url_cap = need;
	}
	snprintf(c->url, c->url_cap, "%s%s%s", c->base, path[0] == '/' ? "" : "/", path);
	curl_easy_setopt(c->curl, CURLOPT_URL, c->url);
	return 0;
}

/* The POST header list is rebuilt only when the content type changes. */
static int httpc_post_headers(struct httpc *c, const char *ctype)
{
	struct curl_slist *l = NULL;
	char line[256];
	int fail = 0;
	if (c->hdr_post && c->post_ctype && !strcmp(c->post_ctype, ctype))
		return 0;
	snprintf(line, sizeof line, "Content-Type: %s", ctype);
	l = httpc_slist_add(l, c->auth, &fail);
	l = httpc_slist_add(l, "Expect:", &fail); /* no 100-continue round trip */
	l = httpc_slist_add(l, line, &fail);
	free(c->post_ctype);
	c->post_ctype = strdup(ctype);
	if (fail || !c->post_ctype) {
		curl_slist_free_all(l);
		return GEM_ENOMEM;
	}
	curl_slist_free_all(c->hdr_post);
	c->hdr_post = l;
	return 0;
}

/* Make err from an HTTP error reply: "<url>: 413 too_large: <detail>". */
static int httpc_http_error(struct httpc *c, struct httpc_resp *r, char *err)
{
	json_t *j = r->len ? json_loadb(r->body, r->len, 0, NULL) : NULL;
	const char *e = NULL, *d = NULL;
	if (j && json_is_object(j))
		proto_error_from_json(j, &e, &d);
	if (e)
		gem_errf(err, HTTPC_EHTTP, "%s: %ld %s%s%s", c->url, r->status, e, d ? ": " : "", d ? d : "");
	else
		gem_errf(err, HTTPC_EHTTP, "%s: HTTP status %ld%s%.*s", c->url, r->status,
			 r->len ? ": " : "", (int)(r->len < 200 ? r->len : 200), r->len ? r->body : "");
	json_decref(j);
	return HTTPC_EHTTP;
}

/* The cause of a transport error, as short as we can make it: the OS error when there is one
 * ("Connection refused"), else curl's own message. */
static void httpc_cause(struct httpc *c, CURLcode cc, char *buf, size_t n)
{
	long oserr = 0;
	curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &oserr);
	if (oserr && cc == CURLE_COULDNT_CONNECT) {
		char tmp[128];
		if (strerror_r((int)oserr, tmp, sizeof tmp))
			snprintf(tmp, sizeof tmp, "errno %ld", oserr);
		snprintf(buf, n, "%s", tmp);
	} else {
		snprintf(buf, n, "%s", c->curl_err[0] ? c->curl_err : curl_easy_strerror(cc));
	}
}

/* The certificate checks failed, or the CA file is unusable: trying again will not help. */
static int httpc_tls_refused(CURLcode cc)
{
	return cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
	       cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_ISSUER_ERROR ||
	       cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH;
}

static int httpc_perform(struct httpc *c, struct httpc_resp *r, char *err)
{
	CURLcode cc;
	const char *ct = NULL;
	r->status = 0;
	r->len = 0;
	r->content_type[0] = 0;
	c->curl_err[0] = 0;
	c->cur = r;
	c->oom = 0;
	cc = curl_easy_perform(c->curl);
	c->cur = NULL;
	c->timed_out = 0;
	if (cc == CURLE_OPERATION_TIMEDOUT) {
		/* not the connect timeout: the request had gone out */
		double sent = 0;
		curl_easy_getinfo(c->curl, CURLINFO_PRETRANSFER_TIME, &sent);
		c->timed_out = sent > 0;
	}
	if (httpc_reserve(r, r->len))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", c->url);
	r->body[r->len] = 0;
	if (cc != CURLE_OK) {
		char cause[CURL_ERROR_SIZE + 64];
		if (c->oom)
			return gem_errf(err, GEM_ENOMEM, "%s: out of memory for the response", c->url);
		httpc_cause(c, cc, cause, sizeof cause);
		r->len = 0;
		r->body[0] = 0;
		if (httpc_tls_refused(cc))
			return gem_errf(err, HTTPC_ETLS, "%s: TLS: the server is not trusted (%s)",
					c->url, cause);
		if (cc == CURLE_ABORTED_BY_CALLBACK)
			return gem_errf(err, HTTPC_ETRANSPORT, "%s: aborted", c->url);
		return gem_errf(err, HTTPC_ETRANSPORT, "%s: %s", c->url, cause);
	}
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (!curl_easy_getinfo(c->curl, CURLINFO_CONTENT_TYPE, &ct) && ct)
		snprintf(r->content_type, sizeof r->content_type, "%s", ct);
	if (r->status >= 400)
		return httpc_http_error(c, r, err);
	return 0;
}

int httpc_get(struct httpc *c, const char *path, struct httpc_resp *r, char *err)
{
	int rc;
	if ((rc = httpc_set_url(c, path, err)))
		return rc;
	curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->hdr_get);
	return httpc_perform(c, r, err);
}

int httpc_post(struct httpc *c, const char *path, const char *content_type, const void *body,
	       size_t len, struct httpc_resp *r, char *err)
{
	int rc;
	if ((rc = httpc_set_url(c, path, err)))
		return rc;
	if (httpc_post_headers(c, content_type ? content_type : "application/octet-stream"))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	curl_easy_setopt(c->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, len ? body : "");
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->hdr_post);
	return httpc_perform(c, r, err);
}

static void httpc_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int httpc_retry(struct httpc *c, const char *path, const char *ctype, const void *body,
		       size_t len, int post, double retry_for, struct httpc_resp *r, char *err)
{
	char last[GEM_ERRMAX];
	double t0 = clock_mono();
	long backoff = HTTPC_BACKOFF0_MS;
	int rc;
	for (;;) {
		rc = post ? httpc_post(c, path, ctype, body, len, r, last)
			  : httpc_get(c, path, r, last);
		if (rc == 0 || !(rc == HTTPC_ETRANSPORT || (rc == HTTPC_EHTTP && r->status == 503)) ||
		    (c->abort && c->abort(c->abort_ctx)))
			break;
		double left = retry_for - (clock_mono() - t0);
		if (left <= 0) {
			/* last is "<url>: <cause>"; keep the cause only, the server is named. */
			const char *cause = last, *p = strstr(last, c->url);
			if (p == last)
				cause = last + strlen(c->url) + 2;
			return gem_errf(err, rc, "server %s %s for %g s: %s", c->base,
					rc == HTTPC_ETRANSPORT ? "unreachable" : "unavailable", retry_for, cause);
		}
		httpc_sleep_ms(backoff < left * 1000 ? backoff : (long)(left * 1000) + 1);
		backoff = backoff * 2 < HTTPC_BACKOFF_MAX_MS ? backoff * 2 : HTTPC_BACKOFF_MAX_MS;
	}
	if (rc && err)
		memcpy(err, last, GEM_ERRMAX);
	return rc;
}

int httpc_get_retry(struct httpc *c, const char *path, double retry_for, struct httpc_resp *r,
		    char *err)
{
	return httpc_retry(c, path, NULL, NULL, 0, 0, retry_for, r, err);
}

int httpc_post_retry(struct httpc *c, const char *path, const char *content_type, const void *body,
		     size_t len, double retry_for, struct httpc_resp *r, char *err)
{
	return httpc_retry(c, path, content_type, body, len, 1, retry_for, r, err);
}
