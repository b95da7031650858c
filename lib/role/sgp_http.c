/* sgp_http: an SGP node's endpoints. POST /v1/hello (a peer's topology), /v1/push (a share of a
 * peer's (x, w)) and /v1/bye (Overlap-SGP: a peer has finished) are the node's own; GET
 * /v1/health, /v1/run and /v1/params are gem-serve's (wire/reply.h), served from z. */
#include "role/sgp_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fsutil.h"

const char *sgp_rule_name(const struct sgp_node *s)
{
	return s->o.overlap ? "overlap-sgp" : "sgp";
}

/* GET /v1/health's fields: the node, its progress, whether it has its peers. */
static json_t *get_health(void *ctx)
{
	struct sgp_node *s = ctx;
	struct proto_node_health h;
	pthread_mutex_lock(&s->mu);
	h = (struct proto_node_health){.rule = sgp_rule_name(s), .node = s->id, .nodes = s->nn,
				       .version = s->pub_iter, .w = s->pub_w, .ready = s->ready,
				       .stopping = s->closed};
	pthread_mutex_unlock(&s->mu);
	return proto_node_health_to_json(&h);
}

/* GET /v1/params: z, the node's de-biased parameters, as at the end of its last iteration. */
static json_t *get_params(void *ctx, float *theta)
{
	struct sgp_node *s = ctx;
	struct proto_params h;
	pthread_mutex_lock(&s->mu);
	memcpy(theta, s->zpub, sizeof *theta * s->n);
	h = (struct proto_params){.version = s->pub_iter, .samples = s->pub_samples,
				  .elapsed = s->pub_elapsed, .model = s->run.spec.model_name,
				  .node = s->id, .nodes = s->nn, .w = s->pub_w};
	pthread_mutex_unlock(&s->mu);
	return proto_params_to_json(&h);
}

/* Set answer a (status, and for an error its name and detail); returns the status. */
static unsigned answer(struct sgp_answer *a, unsigned status, const char *error, const char *fmt,
		       ...) __attribute__((format(printf, 4, 5)));
static unsigned answer(struct sgp_answer *a, unsigned status, const char *error, const char *fmt,
		       ...)
{
	va_list ap;
	a->status = status;
	a->error = error;
	va_start(ap, fmt);
	vsnprintf(a->detail, sizeof a->detail, fmt, ap);
	va_end(ap);
	return status;
}

/* Count a refusal of reason r and make it the answer: status, error (NULL: r's name) and
 * detail. */
static unsigned refuse(struct sgp_node *s, struct sgp_answer *a, enum sgp_refusal r,
		       unsigned status, const char *error, const char *detail)
{
	pthread_mutex_lock(&s->mu);
	s->refused[r]++;
	pthread_mutex_unlock(&s->mu);
	return answer(a, status, error ? error : sgp_refusal_name(r), "%s", detail);
}

/* Under ready (the fields are fixed): why a peer's well-formed hello h does not agree with this
 * node's, in why; empty if it agrees. */
static void hello_check(const struct sgp_node *s, const struct proto_hello *h, const char *client,
			char *why, size_t len)
{
	struct proto_hello mine;
	sgp_hello_of(s, &mine);
	*why = 0;
	if (strcmp(h->hash, mine.hash) || h->nodes != mine.nodes)
		snprintf(why, len,
			 "node %d (%s) has another topology: %lld nodes, %s, %lld peers per iteration, "
			 "peer list hash %s; this node %d has %d nodes, %s, %d peers per iteration, hash "
			 "%s (every node needs the same --peers list, in the same order, and the same "
			 "--topology and --peers-per-iter)",
			 h->node, client, h->nodes, h->topology, h->peers_per_iter, h->hash, s->id,
			 s->nn, pushsum_topology_name(s->o.topology), s->mper, mine.hash);
	else if (h->iters != mine.iters)
		snprintf(why, len,
			 "node %d runs %lld iterations, this node %d runs %llu (give every node the "
			 "same --epochs, --steps and --part)",
			 h->node, h->iters, s->id, (unsigned long long)s->iters);
	else if (h->overlap != mine.overlap)
		snprintf(why, len, "node %d %s --overlap and this node %d %s", h->node,
			 h->overlap ? "runs with" : "runs without", s->id,
			 s->o.overlap ? "with" : "without");
}

/* 503 (with Retry-After): the node has no peer list yet. */
static unsigned not_ready(struct sgp_answer *a)
{
	return answer(a, 503, "not_ready", "this node has no peer list yet");
}

unsigned sgp_hello_take(struct sgp_node *s, const void *body, size_t len, const char *client,
			struct sgp_answer *a)
{
	json_error_t je;
	json_t *j = json_loadb(body, len, 0, &je);
	struct proto_hello h;
	char why[GEM_ERRMAX];
	int from, ready;

	if (!json_is_object(j)) {
		snprintf(why, sizeof why, "hello: %s", j ? "not an object" : je.text);
		json_decref(j);
		return refuse(s, a, SGP_REFUSE_BAD, 400, "bad_json", why);
	}
	pthread_mutex_lock(&s->mu);
	ready = s->ready;
	pthread_mutex_unlock(&s->mu);
	if (!ready) {
		json_decref(j);
		return not_ready(a);
	}
	/* a hello no node sends is a bad request, not a peer that disagrees */
	if (proto_hello_from_json(j, s->nn, s->id, &h, why, sizeof why) < 0) {
		json_decref(j);
		return refuse(s, a, SGP_REFUSE_BAD, 400, "bad_field", why);
	}
	hello_check(s, &h, client, why, sizeof why);
	from = h.node;
	json_decref(j);
	pthread_mutex_lock(&s->mu);
	if (*why && !s->mismatch)
		snprintf(s->mismatch_msg, sizeof s->mismatch_msg, "%s", why);
	if (*why)
		s->mismatch = 1;
	else if (!s->hello[from]) {
		s->hello[from] = 1;
		s->nhello++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (*why)
		return answer(a, 409, "topology_mismatch", "%s", why);
	return answer(a, 200, NULL, "%s", "");
}

/* Decode push message m's "x" blob into in (n floats, all finite). */
static int decode_share(const struct msg *m, struct inmsg *in, size_t n, char *err)
{
	const struct msg_blob *b = msg_find(m, "x");
	struct blob_codec c;
	int rc;
	if (!b)
		return gem_errf(err, GEM_EUSAGE, "no \"x\" blob");
	blob_codec_init(&c);
	rc = blob_decode(&c, b->data, &b->meta, in->x, n, err);
	blob_codec_free(&c);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (!isfinite(in->x[i]))
			rc = gem_errf(err, GEM_EUSAGE, "x[%zu] is not finite", i);
	return rc;
}

/* Under mu, with ready: whether node from's push of iteration iter is one to take
 * (SGP_REFUSE_N; with take, the iteration is then marked pushed) or why not (in why).
 * Synchronous SGP takes the pushes of its own iteration and of the next nn + 1: no node gets
 * further ahead of another, since each iteration waits for its in-peers' pushes and within nn
 * iterations every node is an in-peer of an in-peer (doc/rules.md). Overlap-SGP adds whatever
 * has come, so a node may be far behind its peers; there only the run's iterations bound it. */
static enum sgp_refusal push_admit(struct sgp_node *s, int from, uint64_t iter, int take,
				   char *why, size_t len)
{
	int in[PUSHSUM_MAX_PEERS], np = pushsum_in_peers(s->o.topology, s->nn, s->mper, s->id, iter, in), k = 0;
	uint64_t lo = s->o.overlap ? 0 : s->pub_iter;
	uint64_t hi = s->o.overlap ? s->iters - 1 : s->pub_iter + (uint64_t)s->nn + 1;
	while (k < np && in[k] != from)
		k++;
	if (iter < lo || iter > hi || iter >= s->iters) {
		snprintf(why, len, "push: iteration %llu is outside the iterations %llu to %llu node %d "
			 "takes now", (unsigned long long)iter, (unsigned long long)lo,
			 (unsigned long long)(hi < s->iters ? hi : s->iters - 1), s->id);
		return SGP_REFUSE_WINDOW;
	}
	if (k == np) {
		snprintf(why, len, "push: node %d does not push to node %d at iteration %llu", from,
			 s->id, (unsigned long long)iter);
		return SGP_REFUSE_NOT_PEER;
	}
	if (iter < s->pushed[from]) {
		snprintf(why, len, "push: node %d's push of iteration %llu is taken already", from,
			 (unsigned long long)iter);
		return SGP_REFUSE_DUPLICATE;
	}
	if (take)
		s->pushed[from] = iter + 1;
	return SGP_REFUSE_N;
}

/* A share weighs at most the run's whole mass, nn (every node starts with w = 1; push-sum
 * keeps the sum). The node's id and size are read under mu, with ready (before it they are
 * being set). */
unsigned sgp_push_take(struct sgp_node *s, const void *body, size_t len, struct sgp_answer *a)
{
	char err[GEM_ERRMAX];
	struct msg m;
	struct inmsg *in;
	struct proto_push p;
	int rc, ready, closed, id, nn;
	enum sgp_refusal why;

	if (msg_parse(body, len, &m, err) < 0)
		return refuse(s, a, SGP_REFUSE_BAD, 400, "bad_message", err);
	pthread_mutex_lock(&s->mu);
	ready = s->ready, closed = s->closed, id = s->id, nn = s->nn;
	pthread_mutex_unlock(&s->mu);
	if (!ready || closed) {
		msg_free(&m);
		return closed ? answer(a, 410, "finished", "node %d has finished", id) : not_ready(a);
	}
	if (proto_push_from_json(m.header, nn, id, &p) < 0) {
		msg_free(&m);
		snprintf(err, sizeof err, "push: want node (another node's index), iter >= 0 and "
			 "0 < w <= %d (the run's whole mass)", nn);
		return refuse(s, a, SGP_REFUSE_BAD, 400, "bad_field", err);
	}
	/* checked before the blob is decoded, and taken after (a push sent twice at once) */
	pthread_mutex_lock(&s->mu);
	why = push_admit(s, p.node, p.iter, 0, err, sizeof err);
	pthread_mutex_unlock(&s->mu);
	if (why != SGP_REFUSE_N) {
		msg_free(&m);
		return refuse(s, a, why, 409, NULL, err);
	}
	if (!(in = sgp_msg_new(s))) {
		msg_free(&m);
		return answer(a, 503, "busy", "out of memory");
	}
	rc = decode_share(&m, in, s->n, err);
	in->from = p.node;
	in->iter = p.iter;
	in->w = p.w;
	msg_free(&m);
	pthread_mutex_lock(&s->mu);
	if (rc == 0 && !s->closed &&
	    (why = push_admit(s, in->from, in->iter, 1, err, sizeof err)) == SGP_REFUSE_N) {
		sgp_inbox_add(s, in);
		s->bytes_in += len;
		pthread_mutex_unlock(&s->mu);
		return answer(a, 200, NULL, "%s", "");
	}
	sgp_msg_recycle(s, in);
	closed = s->closed;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		return refuse(s, a, SGP_REFUSE_BAD, 400, "bad_blob", err);
	if (closed)
		return answer(a, 410, "finished", "node %d has finished", id);
	return refuse(s, a, why, 409, NULL, err);
}

/* Reply with answer a: {"ok": true} (and, to a hello, the node) or the error. */
static int reply_answer(struct sgp_node *s, struct httpd_req *req, const struct sgp_answer *a,
			int hello)
{
	json_t *j;
	int rc;
	if (a->status != 200) {
		if (a->status == 503 && !strcmp(a->error, "not_ready"))
			httpd_add_header(req, "Retry-After", "0");
		return httpd_reply_error(req, a->status, a->error, "%s", a->detail);
	}
	j = proto_ok_to_json(hello ? s->id : -1);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

/* POST /v1/hello: a peer says which topology it runs; the same as ours, or both refuse to run.
 * A hello no node would send is a bad request (400), which stops nothing. */
static int h_hello(struct httpd_req *req, void *ctx)
{
	struct sgp_answer a;
	sgp_hello_take(ctx, req->body, req->body_len, req->client, &a);
	return reply_answer(ctx, req, &a, 1);
}

/* POST /v1/push: a share of a peer's (x, w), checked whole, then queued for the trainer to add. */
static int h_push(struct httpd_req *req, void *ctx)
{
	struct sgp_answer a;
	sgp_push_take(ctx, req->body, req->body_len, &a);
	return reply_answer(ctx, req, &a, 0);
}

/* POST /v1/bye {"node": J}: Overlap-SGP's peer J has finished; nobody waits for its messages
 * any more. Anything but another node's index is refused. */
static int h_bye(struct httpd_req *req, void *ctx)
{
	struct sgp_node *s = ctx;
	struct sgp_answer a;
	json_t *j = json_loadb((const char *)req->body, req->body_len, 0, NULL);
	long long from = -1;
	int ok = proto_bye_from_json(j, &from) == 0;
	json_decref(j);
	pthread_mutex_lock(&s->mu);
	if (!s->ready) {
		pthread_mutex_unlock(&s->mu);
		not_ready(&a);
		return reply_answer(s, req, &a, 0);
	}
	if (!ok || from < 0 || from >= s->nn || from == s->id) {
		pthread_mutex_unlock(&s->mu);
		return httpd_reply_error(req, 400, "bad_field",
					 "bye: want {\"node\": J}, J another node's index");
	}
	if (!s->bye[from]) {
		s->bye[from] = 1;
		s->nbye++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	answer(&a, 200, NULL, "%s", "");
	return reply_answer(s, req, &a, 0);
}

int sgp_http_start(struct sgp_node *s, char *err)
{
	struct httpd_route r[REPLY_GET_ROUTES + 3];
	struct httpd_config hc = {0};
	const char *host = s->o.host ? s->o.host : "127.0.0.1";
	char *cert = NULL, *key = NULL;
	int rc;
	s->get.run = s->run.json;
	s->get.n = s->n;
	s->get.health = get_health;
	s->get.params = get_params;
	s->get.ctx = s;
	reply_get_routes(&s->get, r);
	r[REPLY_GET_ROUTES] = (struct httpd_route){"POST", "/v1/hello", h_hello, s, 1,
						   HTTPD_JSON_BODY};
	r[REPLY_GET_ROUTES + 1] = (struct httpd_route){"POST", "/v1/push", h_push, s, 1, 0};
	r[REPLY_GET_ROUTES + 2] = (struct httpd_route){"POST", "/v1/bye", h_bye, s, 1,
						       HTTPD_JSON_BODY};
	if (!s->o.tls_cert != !s->o.tls_key)
		return gem_errf(err, GEM_EUSAGE, "a TLS certificate needs its key, and a key its certificate");
	if (s->o.tls_cert && ((rc = fs_read_pem(s->o.tls_cert, &cert, err)) < 0 ||
			      (rc = fs_read_pem(s->o.tls_key, &key, err)) < 0)) {
		gem_errprefix(err, "TLS %s: ", key || !cert ? "certificate" : "key");
		free(cert);
		return rc;
	}
	hc.host = host;
	hc.port = s->o.port;
	hc.allow_public = s->o.allow_public;
	hc.token = s->token;
	hc.max_body = s->n * 8 + (size_t)MSG_HEAD_MAX + 4096;
	hc.tls_cert = cert;
	hc.tls_key = key;
	hc.routes = r;
	hc.n_routes = sizeof r / sizeof *r;
	rc = httpd_start(&hc, &s->httpd, err);
	free(cert);
	fs_free_secret(key);
	if (rc < 0)
		return rc;
	if (httpd_url(s->httpd, s->o.tls_cert ? "https" : "http", host, s->url, sizeof s->url) < 0) {
		httpd_stop(s->httpd);
		s->httpd = NULL;
		return gem_errf(err, GEM_EUSAGE, "%s: the node's URL is too long", host);
	}
	return 0;
}
