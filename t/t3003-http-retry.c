/* t3003: the retry helpers: connection refused is retried for retry_for seconds then fails
 * with "server URL unreachable for N s: Connection refused"; 503 is retried until it clears;
 * other HTTP errors are not retried. */
#include "base/clock.h"
#include "base/err.h"
#include "wire/httpc.h"
#include "wire/httpd.h"
#include "tap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int busy_left, hits;

/* 503 while busy_left > 0, then echo the body length. */
static int on_update(struct httpd_req *req, void *ctx)
{
	char msg[64];
	(void)ctx;
	__atomic_add_fetch(&hits, 1, __ATOMIC_SEQ_CST);
	if (__atomic_fetch_sub(&busy_left, 1, __ATOMIC_SEQ_CST) > 0) {
		httpd_add_header(req, "Retry-After", "1");
		return httpd_reply_error(req, 503, "busy", "try again");
	}
	snprintf(msg, sizeof msg, "%zu\n", req->body_len);
	return httpd_reply_bytes(req, 200, "text/plain", msg, strlen(msg), 1);
}

static int on_bad(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	__atomic_add_fetch(&hits, 1, __ATOMIC_SEQ_CST);
	return httpd_reply_error(req, 400, "bad_request", "nope");
}

int main(void)
{
	static const struct httpd_route routes[] = {
		{"POST", "/v1/update", on_update, NULL, 0, 0},
		{"GET", "/v1/bad", on_bad, NULL, 0, 0},
	};
	struct httpd_config cfg = {.routes = routes, .n_routes = 2};
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t salen = sizeof sa;
	struct httpd *d;
	struct httpc *c;
	struct httpc_resp r = {0};
	char err[GEM_ERRMAX], url[64], want[128];
	double t0, dt;
	int fd, rc;

	/* A port that is bound but not listening refuses connections, and nobody can take it. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, (struct sockaddr *)&sa, sizeof sa);
	getsockname(fd, (struct sockaddr *)&sa, &salen);
	snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
	httpc_new(url, NULL, 2000, &c, err);
	rc = httpc_get(c, "/v1/params", &r, err);
	ok(rc == HTTPC_ETRANSPORT && r.status == 0, "refused without retry: transport error (%s)", err);
	t0 = clock_mono();
	rc = httpc_get_retry(c, "/v1/params", 1.0, &r, err);
	dt = clock_mono() - t0;
	snprintf(want, sizeof want, "server %s unreachable for 1 s: Connection refused", url);
	ok(rc == HTTPC_ETRANSPORT && !strcmp(err, want), "gives up with: %s", err);
	ok(dt >= 1.0 && dt < 2.5, "after %.2f s of retrying (retry_for 1 s)", dt);
	httpc_free(c);
	close(fd);

	if (httpd_start(&cfg, &d, err)) {
		ok(0, "server starts: %s", err);
		return done_testing();
	}
	snprintf(url, sizeof url, "http://127.0.0.1:%d", httpd_port(d));
	httpc_new(url, NULL, 2000, &c, err);

	busy_left = 3;
	hits = 0;
	t0 = clock_mono();
	rc = httpc_post_retry(c, "/v1/update", "application/octet-stream", "abcde", 5, 10.0, &r, err);
	dt = clock_mono() - t0;
	ok(rc == 0 && r.status == 200 && !strcmp(r.body, "5\n"), "503 three times, then 200 (%s)",
	   rc ? err : "ok");
	ok(hits == 4, "4 attempts (%d)", hits);
	ok(dt >= 0.65 && dt < 2.0, "backoff 100+200+400 ms: %.2f s", dt);

	busy_left = 1000;
	t0 = clock_mono();
	rc = httpc_post_retry(c, "/v1/update", "text/plain", "x", 1, 0.5, &r, err);
	dt = clock_mono() - t0;
	snprintf(want, sizeof want, "server %s unavailable for 0.5 s: 503 busy: try again", url);
	ok(rc == HTTPC_EHTTP && r.status == 503 && !strcmp(err, want), "503 for good: %s", err);
	ok(dt >= 0.5 && dt < 1.5, "gave up after %.2f s", dt);

	hits = 0;
	rc = httpc_get_retry(c, "/v1/bad", 5.0, &r, err);
	ok(rc == HTTPC_EHTTP && r.status == 400 && hits == 1 && strstr(err, "400 bad_request: nope"),
	   "400 is not retried: %s", err);

	httpc_resp_free(&r);
	httpc_free(c);
	httpd_stop(d);
	return done_testing();
}
