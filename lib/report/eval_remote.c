/* eval_remote: a server seen from outside, as gem-eval sees it (report/eval.h): its run, its
 * θ (of every server of a sliced run, each its slice), its health. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "report/eval_impl.h"
#include "run/slice.h"
#include "run/srvset.h"
#include "wire/msg.h"
#include "wire/proto.h"

#define REMOTE_TIMEOUT_MS 60000L /* a whole request: θ of a large model on a slow link */

/* The connect timeout of a server given retry_for seconds: a server that does not even accept
 * connections is an unreachable one, not a slow one. */
static long connect_ms_of(double retry_for)
{
	long ms = (long)(retry_for * 1000);
	return ms < 500 ? 500 : ms > 5000 ? 5000 : ms;
}

int eval_remote_open(struct eval_remote *r, const char *url, double retry_for, const char *cacert,
		     char *err)
{
	int rc;

	memset(r, 0, sizeof *r);
	r->retry_for = retry_for;
	blob_codec_init(&r->codec);
	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
		return gem_errf(err, GEM_EUSAGE, "%s: not an http:// URL", url);
	if ((rc = httpc_new(url, NULL, REMOTE_TIMEOUT_MS, &r->http, err)) < 0 ||
	    (rc = httpc_set_cacert(r->http, cacert, err)) < 0)
		return rc;
	httpc_set_timeout(r->http, REMOTE_TIMEOUT_MS, connect_ms_of(retry_for));
	return 0;
}

/* GET path from r, a small answer due after wait seconds (retried for retry_for in all when
 * retry): a server that accepted the connection and has not answered r->retry_for seconds after
 * that is away, not slow (θ's fetch keeps REMOTE_TIMEOUT_MS). */
static int get_small(struct eval_remote *r, const char *path, double wait, int retry, char *err)
{
	int rc;
	httpc_set_timeout(r->http, (long)((wait + r->retry_for) * 1000), connect_ms_of(r->retry_for));
	rc = retry ? httpc_get_retry(r->http, path, r->retry_for, &r->resp, err)
		   : httpc_get(r->http, path, &r->resp, err);
	httpc_set_timeout(r->http, REMOTE_TIMEOUT_MS, connect_ms_of(r->retry_for));
	return rc;
}

void eval_remote_close(struct eval_remote *r)
{
	httpc_free(r->http);
	httpc_resp_free(&r->resp);
	blob_codec_free(&r->codec);
	memset(r, 0, sizeof *r);
}

int eval_remote_run(struct eval_remote *r, struct run *run, char *err)
{
	json_error_t je;
	json_t *j;
	int rc;

	memset(run, 0, sizeof *run);
	run->lock_fd = -1;
	if ((rc = get_small(r, "/v1/run", 0, 1, err)) < 0)
		return rc;
	if (!(j = json_loadb(r->resp.body, r->resp.len, 0, &je)))
		return gem_errf(err, GEM_EFAIL, "%s/v1/run: not JSON: %s", httpc_base_url(r->http), je.text);
	if ((rc = run_from_json(j, run, err)) < 0) {
		gem_errprefix(err, "%s/v1/run: ", httpc_base_url(r->http));
		return GEM_EFAIL;
	}
	return 0;
}

/* θ from a params message in r->resp, with the progress its header records. */
int eval_remote_decode(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
		  char *err)
{
	json_t *h = NULL;
	int rc = msg_decode_params(r->resp.body, r->resp.len, &r->codec, &h, theta, n, err);
	if (rc < 0) {
		gem_errprefix(err, "%s/v1/params: ", httpc_base_url(r->http));
		return GEM_EFAIL;
	}
	run_progress_of(h, p);
	json_decref(h);
	return 0;
}

int eval_remote_params(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
		       char *err)
{
	int rc = httpc_get_retry(r->http, "/v1/params?codec=raw", r->retry_for, &r->resp, err);
	return rc < 0 ? rc : eval_remote_decode(r, theta, n, p, err);
}


/* The health in r->resp. */
static int health_parse(struct eval_remote *r, struct proto_health *h, char *err)
{
	json_t *j = json_loadb(r->resp.body, r->resp.len, 0, NULL);
	int rc = proto_health_from_json(j, SLICE_MAX, h, err);
	json_decref(j);
	if (rc < 0)
		gem_errprefix(err, "%s/v1/health: ", httpc_base_url(r->http));
	return rc < 0 ? GEM_EFAIL : 0;
}

/* GET /v1/health once as a follower; wait > 0: a long poll, answered when the server starts
 * stopping or after wait seconds (gem-protocol(7)), so that the stop is seen while connected. */
int eval_remote_health(struct eval_remote *r, double wait, struct proto_health *h, char *err)
{
	char path[64];
	int rc;
	/* ?wait even when 0: the server knows a follower polls it, and waits for its next poll
	 * when it stops (gem-protocol(7)) */
	snprintf(path, sizeof path, "/v1/health?wait=%.3f", wait > 0 ? wait : 0);
	rc = get_small(r, path, wait > 0 ? wait : 0, 0, err);
	return rc < 0 ? rc : health_parse(r, h, err);
}

int eval_remote_open_run(const char *urls, double retry_for, const char *cacert, struct run *run,
			 char *err)
{
	char first[SRVSET_URL_MAX];
	struct eval_remote r;
	size_t len = strcspn(urls, ",");
	int rc;
	if (len >= sizeof first)
		return gem_errf(err, GEM_EUSAGE, "a URL of %zu bytes is too long", len);
	memcpy(first, urls, len);
	first[len] = 0;
	memset(run, 0, sizeof *run);
	run->lock_fd = -1;
	if ((rc = eval_remote_open(&r, first, retry_for, cacert, err)) == 0)
		rc = eval_remote_run(&r, run, err);
	eval_remote_close(&r);
	return rc;
}

int eval_remote_theta(const char *urls, double retry_for, const char *cacert, float *theta, size_t n,
		      struct run_progress *p, char *err)
{
	struct srvset *set = malloc(sizeof *set);
	struct eval_remote r;
	int rc = set ? srvset_parse(set, urls, err) : gem_errf(err, GEM_ENOMEM, "out of memory");

	if (rc == 0)
		srvset_layout(set, n);
	for (int i = 0; rc == 0 && i < set->n; i++) {
		struct run_progress q;
		if ((rc = eval_remote_open(&r, set->url[i], retry_for, cacert, err)) == 0 &&
		    (rc = get_small(&r, "/v1/health", 0, 1, err)) == 0 &&
		    (rc = srvset_check_health(set, i, r.resp.body, r.resp.len, NULL, err)) == 0 &&
		    (rc = eval_remote_params(&r, theta + set->slice[i].off, set->slice[i].len, &q,
					     err)) == 0)
			run_progress_merge(p, &q, i == 0);
		eval_remote_close(&r);
	}
	free(set);
	return rc;
}
