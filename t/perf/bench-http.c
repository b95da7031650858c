/* bench-http: httpd + httpc on loopback. Small JSON GET latency, a 4 MiB POST echoed back,
 * and throughput of ~650 KB POST echoes (a cnn-sized parameter update) from 1, 4 and 16
 * client threads, each with its own keep-alive client. TSV on stdout under a '#' header. */
#include "base/clock.h"
#include "base/err.h"
#include "wire/httpc.h"
#include "wire/httpd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GET_N 2000
#define BIG_N 20
#define BIG_LEN (4u << 20)
#define UPD_LEN (650u * 1000)
#define UPD_SECONDS 1.5

static char url[64];
static unsigned char *payload;

static int on_status(struct httpd_req *req, void *ctx)
{
	json_t *j = json_pack("{s:I, s:I, s:f}", "version", (json_int_t)12345, "workers", (json_int_t)16,
			      "loss", 0.4321);
	int rc;
	(void)ctx;
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int on_echo(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	return httpd_reply_bytes(req, 200, "application/octet-stream", req->body, req->body_len, 1);
}

struct client {
	pthread_t th;
	double until;
	long done;
	int fail;
};

static void *client_run(void *arg)
{
	struct client *cl = arg;
	struct httpc *c;
	struct httpc_resp r = {0};
	char err[GEM_ERRMAX];
	if (httpc_new(url, NULL, 30000, &c, err)) {
		cl->fail = 1;
		return NULL;
	}
	while (clock_mono() < cl->until) {
		if (httpc_post(c, "/v1/update", "application/octet-stream", payload, UPD_LEN, &r, err) ||
		    r.len != UPD_LEN) {
			fprintf(stderr, "bench-http: %s\n", err);
			cl->fail = 1;
			break;
		}
		cl->done++;
	}
	httpc_resp_free(&r);
	httpc_free(c);
	return NULL;
}

static double throughput(int nthreads, int *fail)
{
	struct client cl[16] = {{0}};
	double t0 = clock_mono(), dt;
	long total = 0;
	for (int i = 0; i < nthreads; i++) {
		cl[i].until = t0 + UPD_SECONDS;
		pthread_create(&cl[i].th, NULL, client_run, &cl[i]);
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(cl[i].th, NULL);
		total += cl[i].done;
		*fail |= cl[i].fail;
	}
	dt = clock_mono() - t0;
	return total / dt;
}

int main(void)
{
	static const struct httpd_route routes[] = {
		{"GET", "/v1/status", on_status, NULL, 0, 0},
		{"POST", "/v1/update", on_echo, NULL, 0, 0},
	};
	struct httpd_config cfg = {.routes = routes, .n_routes = 2};
	struct httpd *d;
	struct httpc *c;
	struct httpc_resp r = {0};
	char err[GEM_ERRMAX];
	double t0, get_us, big_ms;
	int fail = 0;

	if (httpd_start(&cfg, &d, err) || (snprintf(url, sizeof url, "http://127.0.0.1:%d", httpd_port(d)),
					   httpc_new(url, NULL, 30000, &c, err))) {
		fprintf(stderr, "bench-http: %s\n", err);
		return 1;
	}
	payload = malloc(BIG_LEN);
	for (size_t i = 0; i < BIG_LEN; i++)
		payload[i] = (unsigned char)(i * 2654435761u >> 11);

	for (int i = 0; i < 50; i++) /* warm up: connection, buffers */
		fail |= httpc_get(c, "/v1/status", &r, err) != 0;
	t0 = clock_mono();
	for (int i = 0; i < GET_N; i++)
		fail |= httpc_get(c, "/v1/status", &r, err) != 0;
	get_us = (clock_mono() - t0) / GET_N * 1e6;

	fail |= httpc_post(c, "/v1/update", "application/octet-stream", payload, BIG_LEN, &r, err) != 0;
	t0 = clock_mono();
	for (int i = 0; i < BIG_N; i++)
		fail |= httpc_post(c, "/v1/update", "application/octet-stream", payload, BIG_LEN, &r, err) ||
			r.len != BIG_LEN;
	big_ms = (clock_mono() - t0) / BIG_N * 1e3;

	printf("# what\tvalue\tunit\n");
	printf("json_get_latency\t%.1f\tus\n", get_us);
	printf("post_echo_4MiB\t%.2f\tms\n", big_ms);
	fflush(stdout);
	for (int n = 1; n <= 16; n *= 4) {
		double rps = throughput(n, &fail);
		printf("post_echo_650KB_%dthreads\t%.0f\treq/s\n", n, rps);
		printf("post_echo_650KB_%dthreads_bw\t%.0f\tMB/s\n", n, rps * UPD_LEN * 2 / 1e6);
		fflush(stdout);
	}
	if (fail)
		fprintf(stderr, "bench-http: some requests failed: %s\n", err);
	httpc_resp_free(&r);
	httpc_free(c);
	httpd_stop(d);
	free(payload);
	return fail;
}
