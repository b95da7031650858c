/* t3002: handlers that block (a sync barrier, a long poll) do not hold up other requests,
 * 100 of them at once included; the client's timeout fires; httpd_stop lets a request in
 * flight finish and reply. */
#include "base/clock.h"
#include "base/err.h"
#include "wire/httpc.h"
#include "wire/httpd.h"
#include "tap.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define NWAIT 100

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open, waiting, slow_in, slow_done;
static char url[64];

/* Blocks until /v1/release opens the gate. */
static int on_wait(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&gate_lock);
	waiting++;
	pthread_cond_broadcast(&gate_cond);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	waiting--;
	pthread_mutex_unlock(&gate_lock);
	return httpd_reply_bytes(req, 200, "text/plain", "released\n", 9, 0);
}

static int on_release(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	return httpd_reply_bytes(req, 200, "text/plain", "ok\n", 3, 0);
}

static int on_ping(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	return httpd_reply_bytes(req, 200, "text/plain", "pong\n", 5, 0);
}

static int on_slow(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	__atomic_store_n(&slow_in, 1, __ATOMIC_SEQ_CST);
	usleep(300 * 1000);
	__atomic_store_n(&slow_done, 1, __ATOMIC_SEQ_CST);
	return httpd_reply_bytes(req, 200, "text/plain", "slow\n", 5, 0);
}

struct waiter {
	pthread_t th;
	const char *path;
	int rc;
	long status;
	char body[16];
	char err[GEM_ERRMAX];
};

static void *waiter_run(void *arg)
{
	struct waiter *w = arg;
	struct httpc *c;
	struct httpc_resp r = {0};
	w->rc = httpc_new(url, NULL, 20000, &c, w->err);
	if (w->rc)
		return NULL;
	w->rc = httpc_get(c, w->path, &r, w->err);
	w->status = r.status;
	snprintf(w->body, sizeof w->body, "%s", r.body ? r.body : "");
	httpc_resp_free(&r);
	httpc_free(c);
	return NULL;
}

/* Wait until n handlers are parked at the gate (or 10 s pass). */
static int wait_parked(int n)
{
	double t0 = clock_mono();
	int got;
	for (;;) {
		pthread_mutex_lock(&gate_lock);
		got = waiting;
		pthread_mutex_unlock(&gate_lock);
		if (got >= n || clock_mono() - t0 > 10)
			return got;
		usleep(5000);
	}
}

int main(void)
{
	static const struct httpd_route routes[] = {
		{"GET", "/v1/wait", on_wait, NULL, 0, 0},
		{"POST", "/v1/release", on_release, NULL, 0, 0},
		{"GET", "/v1/ping", on_ping, NULL, 0, 0},
		{"GET", "/v1/slow", on_slow, NULL, 0, 0},
	};
	struct httpd_config cfg = {.routes = routes, .n_routes = 4};
	static struct waiter w[NWAIT];
	struct waiter slow = {.path = "/v1/slow"};
	struct httpd *d;
	struct httpc *c, *impatient;
	struct httpc_resp r = {0};
	char err[GEM_ERRMAX];
	double t0, dt;
	int rc, all = 1, parked;

	if (httpd_start(&cfg, &d, err)) {
		ok(0, "server starts: %s", err);
		return done_testing();
	}
	snprintf(url, sizeof url, "http://127.0.0.1:%d", httpd_port(d));
	httpc_new(url, NULL, 5000, &c, err);

	/* One blocked handler, then a hundred. */
	w[0].path = "/v1/wait";
	pthread_create(&w[0].th, NULL, waiter_run, &w[0]);
	ok(wait_parked(1) == 1, "a request is parked in a blocking handler");
	t0 = clock_mono();
	rc = httpc_get(c, "/v1/ping", &r, err);
	dt = clock_mono() - t0;
	ok(rc == 0 && r.status == 200 && !strcmp(r.body, "pong\n"),
	   "another request is served meanwhile (%.2f ms)", dt * 1e3);
	for (int i = 1; i < NWAIT; i++) {
		w[i].path = "/v1/wait";
		pthread_create(&w[i].th, NULL, waiter_run, &w[i]);
	}
	parked = wait_parked(NWAIT);
	ok(parked == NWAIT, "%d requests parked at once", parked);
	t0 = clock_mono();
	rc = httpc_get(c, "/v1/ping", &r, err);
	dt = clock_mono() - t0;
	ok(rc == 0 && r.status == 200 && dt < 1.0, "with %d parked, a ping takes %.2f ms", parked,
	   dt * 1e3);

	/* The client gives up on a handler that does not answer in time. */
	httpc_new(url, NULL, 300, &impatient, err);
	t0 = clock_mono();
	rc = httpc_get(impatient, "/v1/wait", &r, err);
	dt = clock_mono() - t0;
	ok(rc == HTTPC_ETRANSPORT && r.status == 0, "client timeout is a transport error: %s", err);
	ok(dt >= 0.29 && dt < 2.0, "timeout fired after %.3f s (300 ms asked)", dt);
	ok(strstr(err, "timed out") != NULL, "message says it timed out");
	httpc_free(impatient);

	rc = httpc_post(c, "/v1/release", "text/plain", "", 0, &r, err);
	ok(rc == 0 && r.status == 200, "release request served");
	for (int i = 0; i < NWAIT; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].rc || w[i].status != 200 || strcmp(w[i].body, "released\n")) {
			if (all)
				diag("waiter %d: rc %d status %ld %s", i, w[i].rc, w[i].status, w[i].err);
			all = 0;
		}
	}
	ok(all, "all %d parked requests got their reply", NWAIT);

	/* httpd_stop while a request is in its handler: the handler finishes and the reply goes out. */
	pthread_create(&slow.th, NULL, waiter_run, &slow);
	for (t0 = clock_mono(); !__atomic_load_n(&slow_in, __ATOMIC_SEQ_CST) && clock_mono() - t0 < 10;)
		usleep(1000);
	ok(__atomic_load_n(&slow_in, __ATOMIC_SEQ_CST), "the slow request is in its handler");
	t0 = clock_mono();
	httpd_stop(d);
	dt = clock_mono() - t0;
	ok(__atomic_load_n(&slow_done, __ATOMIC_SEQ_CST),
	   "httpd_stop waited for the in-flight handler (%.0f ms)", dt * 1e3);
	pthread_join(slow.th, NULL);
	ok(slow.rc == 0 && slow.status == 200 && !strcmp(slow.body, "slow\n"),
	   "the in-flight request got its reply (%s)", slow.rc ? slow.err : "ok");
	rc = httpc_get(c, "/v1/ping", &r, err);
	ok(rc == HTTPC_ETRANSPORT, "a stopped server refuses: %s", err);

	httpc_resp_free(&r);
	httpc_free(c);
	return done_testing();
}
