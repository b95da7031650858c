#include "role/sgp.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wire/blob.h"
#include "base/cli.h"
#include "nn/data.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "wire/httpc.h"
#include "wire/httpd.h"
#include "base/log.h"
#include "nn/model.h"
#include "wire/msg.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "wire/reply.h"
#include "run/run.h"
#include "role/work.h"

/* ---- the pure part: topologies and push-sum ---- */

int sgp_topology_parse(const char *name, enum sgp_topology *t)
{
	if (!strcmp(name, "exp"))
		*t = SGP_EXP;
	else if (!strcmp(name, "ring"))
		*t = SGP_RING;
	else
		return -1;
	return 0;
}

const char *sgp_topology_name(enum sgp_topology t)
{
	return t == SGP_RING ? "ring" : "exp";
}

int sgp_exp_cycle(int n)
{
	int k = 0;
	if (n < 2)
		return 0;
	while ((2L << k) <= n - 1) /* largest k with 2^k <= n − 1 */
		k++;
	return k + 1;
}

int sgp_peers_per_iter(enum sgp_topology t, int n, int m)
{
	int most = t == SGP_EXP ? sgp_exp_cycle(n) : n - 1;
	if (m > most)
		m = most;
	if (m > SGP_MAX_PEERS)
		m = SGP_MAX_PEERS;
	return m < 0 ? 0 : m;
}

int sgp_offsets(enum sgp_topology t, int n, int m, uint64_t iter, int *off)
{
	int k = sgp_exp_cycle(n);
	m = sgp_peers_per_iter(t, n, m);
	for (int j = 0; j < m; j++) {
		/* 2^k < n for every k of the cycle: the offsets are distinct and nonzero mod n */
		if (t == SGP_EXP)
			off[j] = 1 << (int)((iter * (uint64_t)m + (uint64_t)j) % (uint64_t)k);
		else
			off[j] = j + 1;
	}
	return m;
}

int sgp_out_peers(enum sgp_topology t, int n, int m, int i, uint64_t iter, int *out)
{
	int c = sgp_offsets(t, n, m, iter, out);
	for (int j = 0; j < c; j++)
		out[j] = (i + out[j]) % n;
	return c;
}

int sgp_in_peers(enum sgp_topology t, int n, int m, int i, uint64_t iter, int *in)
{
	int c = sgp_offsets(t, n, m, iter, in);
	for (int j = 0; j < c; j++)
		in[j] = ((i - in[j]) % n + n) % n;
	return c;
}

void sgp_split(float *x, size_t len, double *w, int m)
{
	float s = 1.0f / (float)(m + 1);
	if (m == 0)
		return;
	for (size_t i = 0; i < len; i++)
		x[i] *= s;
	*w /= m + 1;
}

void sgp_receive(float *x, size_t len, double *w, const float *xj, double wj)
{
	for (size_t i = 0; i < len; i++)
		x[i] += xj[i];
	*w += wj;
}

void sgp_debias(const float *x, double w, float *z, size_t len)
{
	float inv = (float)(1.0 / w);
	for (size_t i = 0; i < len; i++)
		z[i] = x[i] * inv;
}

double sgp_distance(const float *a, const float *b, size_t len)
{
	double s = 0;
	for (size_t i = 0; i < len; i++) {
		double d = (double)a[i] - (double)b[i];
		s += d * d;
	}
	return sqrt(s);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

uint64_t sgp_topology_hash(enum sgp_topology t, int m, const char *const *peers, int n)
{
	char head[64];
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	int len = snprintf(head, sizeof head, "sgp n=%d %s m=%d\n", n, sgp_topology_name(t),
			   sgp_peers_per_iter(t, n, m));
	h = fnv1a(h, head, (size_t)len);
	for (int i = 0; i < n; i++) {
		h = fnv1a(h, peers[i], strlen(peers[i]));
		h = fnv1a(h, "\n", 1);
	}
	return h;
}

void sgp_peers_free(char **peers, int n)
{
	for (int i = 0; peers && i < n; i++)
		free(peers[i]);
	free(peers);
}

int sgp_peers_parse(const char *text, char ***peers, int *n, char *err)
{
	char **list = NULL;
	int count = 0, cap = 0;
	const char *p = text;
	*peers = NULL;
	*n = 0;
	while (*p) {
		size_t len;
		if (*p == '#') {
			while (*p && *p != '\n')
				p++;
			continue;
		}
		if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
			p++;
			continue;
		}
		len = strcspn(p, ", \t\r\n#");
		while (len > 0 && p[len - 1] == '/')
			len--;
		if (strncmp(p, "http://", 7) && strncmp(p, "https://", 8)) {
			sgp_peers_free(list, count);
			return gem_errf(err, GEM_EUSAGE, "peer %d: not an http:// URL: %.*s", count,
					(int)strcspn(p, ", \t\r\n#"), p);
		}
		if (count == SGP_MAX_NODES) {
			sgp_peers_free(list, count);
			return gem_errf(err, GEM_EUSAGE, "more than %d peers", SGP_MAX_NODES);
		}
		if (count == cap) {
			char **grown = realloc(list, sizeof *list * (size_t)(cap = cap ? 2 * cap : 8));
			if (!grown) {
				sgp_peers_free(list, count);
				return gem_errf(err, GEM_ENOMEM, "out of memory");
			}
			list = grown;
		}
		if (!(list[count] = strndup(p, len))) {
			sgp_peers_free(list, count);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		count++;
		p += strcspn(p, ", \t\r\n#");
	}
	if (count == 0)
		return gem_errf(err, GEM_EUSAGE, "the peer list is empty");
	for (int i = 0; i < count; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(list[i], list[j])) {
				gem_errf(err, GEM_EUSAGE, "peers %d and %d are both %s", j, i, list[i]);
				sgp_peers_free(list, count);
				return GEM_EUSAGE;
			}
	*peers = list;
	*n = count;
	return 0;
}

/* ---- one node over HTTP ---- */

#define SGP_POLL_MS 50
#define SGP_MAX_JOBS 4 /* overlap: messages queued for sending before the trainer waits */

/* A message received: 1/(m+1) of the sender's (x, w) at its iteration iter. from = self for a
 * share that could not be delivered and comes back. */
struct inmsg {
	struct inmsg *next;
	int from;
	uint64_t iter;
	double w;
	float *x;
};

/* Overlap: a share to push to some peers, by the sender thread. */
struct job {
	struct job *next;
	uint64_t iter;
	double w;
	float *x;
	int npeers, peers[SGP_MAX_PEERS];
};

struct node {
	const struct sgp_opts *o;
	struct run run;
	struct model *m;
	size_t n;
	int id, nn, mper, tau;
	char **peers;
	uint64_t hash, iters;
	char *token;
	const char *codec_name;
	struct httpc **http; /* one per peer (NULL for this node): used by one thread at a time */
	struct httpd *httpd;
	char url[300];
	double t0;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	int ready, closed, mismatch;
	char mismatch_msg[GEM_ERRMAX];
	struct inmsg *inbox, *free_msgs;
	int *bye, nbye;
	int *hello, nhello; /* the peers that have said hello (and agree) */
	float *zpub;
	uint64_t pub_iter, pub_samples;
	double pub_w, pub_elapsed;
	struct job *jobs, *jobs_tail;
	int njobs, sender_quit;
	/* the sender thread only */
	int *gone;
	struct blob_codec send_codec;
	struct msg_buf send_buf;
	struct httpc_resp send_resp;
};

static volatile sig_atomic_t sgp_signal;
static void on_signal(int sig)
{
	sgp_signal = sig;
}

static struct inmsg *msg_new(struct node *s)
{
	struct inmsg *m;
	pthread_mutex_lock(&s->mu);
	if ((m = s->free_msgs))
		s->free_msgs = m->next;
	pthread_mutex_unlock(&s->mu);
	if (m)
		return m;
	if (!(m = calloc(1, sizeof *m)))
		return NULL;
	if (!(m->x = malloc(sizeof(float) * s->n))) {
		free(m);
		return NULL;
	}
	return m;
}

/* Under mu. */
static void msg_recycle(struct node *s, struct inmsg *m)
{
	m->next = s->free_msgs;
	s->free_msgs = m;
}

/* Under mu: append to the inbox (arrival order). */
static void inbox_add(struct node *s, struct inmsg *m)
{
	struct inmsg **p = &s->inbox;
	while (*p)
		p = &(*p)->next;
	m->next = NULL;
	*p = m;
	pthread_cond_broadcast(&s->cv);
}

static int h_health(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	json_t *j;
	int rc;
	pthread_mutex_lock(&s->mu);
	j = json_pack("{s:b, s:s, s:i, s:i, s:I, s:f, s:b, s:b}", "ok", 1, "rule",
		      s->o->overlap ? "overlap-sgp" : "sgp", "node", s->id, "nodes", s->nn, "version",
		      (json_int_t)s->pub_iter, "w", s->pub_w, "ready", s->ready, "stopping", s->closed);
	pthread_mutex_unlock(&s->mu);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

static int h_run(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	return httpd_reply_json(req, 200, s->run.json);
}

/* z, the node's de-biased parameters, as at the end of its last iteration. */
static int h_params(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	const char *codec = httpd_query(req, "codec");
	float *copy;
	json_t *head;
	int rc;

	if (reply_check_codec(req, codec) < 0)
		return 0;
	if (!(copy = malloc(sizeof *copy * s->n)))
		return httpd_reply_error(req, 503, "busy", "out of memory");
	pthread_mutex_lock(&s->mu);
	memcpy(copy, s->zpub, sizeof *copy * s->n);
	head = json_pack("{s:I, s:I, s:f, s:s, s:i, s:i, s:f}", "version", (json_int_t)s->pub_iter,
			 "samples", (json_int_t)s->pub_samples, "elapsed", s->pub_elapsed, "model",
			 s->run.model_name, "node", s->id, "nodes", s->nn, "w", s->pub_w);
	pthread_mutex_unlock(&s->mu);
	rc = reply_params(req, head, copy, s->n, codec);
	free(copy);
	json_decref(head);
	return rc;
}

static json_t *hello_body(const struct node *s)
{
	char hash[17];
	snprintf(hash, sizeof hash, "%016llx", (unsigned long long)s->hash);
	return json_pack("{s:i, s:i, s:s, s:i, s:I, s:b, s:s}", "node", s->id, "nodes", s->nn, "topology",
			 sgp_topology_name(s->o->topology), "peers_per_iter", s->mper, "iters",
			 (json_int_t)s->iters, "overlap", s->o->overlap, "hash", hash);
}

static const char *str_or(const json_t *v)
{
	return json_is_string(v) ? json_string_value(v) : "?";
}

/* A peer says which topology it runs: the same as ours, or both refuse to run. */
static int h_hello(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	json_error_t je;
	json_t *j = json_loadb((const char *)req->body, req->body_len, 0, &je), *mine;
	char why[GEM_ERRMAX] = "";
	int rc, from;

	if (!json_is_object(j)) {
		json_decref(j);
		return httpd_reply_error(req, 400, "bad_json", "hello: %s", j ? "not an object" : je.text);
	}
	pthread_mutex_lock(&s->mu);
	if (!s->ready) {
		pthread_mutex_unlock(&s->mu);
		json_decref(j);
		httpd_add_header(req, "Retry-After", "0");
		return httpd_reply_error(req, 503, "not_ready", "this node has no peer list yet");
	}
	pthread_mutex_unlock(&s->mu);
	mine = hello_body(s);
	from = (int)json_integer_value(json_object_get(j, "node"));
	if (!json_equal(json_object_get(j, "hash"), json_object_get(mine, "hash")) ||
	    !json_equal(json_object_get(j, "nodes"), json_object_get(mine, "nodes")))
		snprintf(why, sizeof why,
			 "node %d (%s) has another topology: %lld nodes, %s, %lld peers per iteration, "
			 "peer list hash %s; this node %d has %d nodes, %s, %d peers per iteration, hash "
			 "%s (every node needs the same --peers list, in the same order, and the same "
			 "--topology and --peers-per-iter)",
			 from, req->client, json_integer_value(json_object_get(j, "nodes")),
			 str_or(json_object_get(j, "topology")),
			 json_integer_value(json_object_get(j, "peers_per_iter")),
			 str_or(json_object_get(j, "hash")), s->id, s->nn,
			 sgp_topology_name(s->o->topology), s->mper,
			 json_string_value(json_object_get(mine, "hash")));
	else if (from < 0 || from >= s->nn || from == s->id)
		snprintf(why, sizeof why, "a hello from %s names node %d", req->client, from);
	else if (!json_equal(json_object_get(j, "iters"), json_object_get(mine, "iters")))
		snprintf(why, sizeof why,
			 "node %d runs %lld iterations, this node %d runs %llu (give every node the "
			 "same --epochs, --steps and --shard)",
			 from, json_integer_value(json_object_get(j, "iters")), s->id,
			 (unsigned long long)s->iters);
	else if (!json_equal(json_object_get(j, "overlap"), json_object_get(mine, "overlap")))
		snprintf(why, sizeof why, "node %d %s --overlap and this node %d %s", from,
			 json_is_true(json_object_get(j, "overlap")) ? "runs with" : "runs without", s->id,
			 s->o->overlap ? "with" : "without");
	json_decref(j);
	json_decref(mine);
	if (*why) {
		pthread_mutex_lock(&s->mu);
		if (!s->mismatch)
			snprintf(s->mismatch_msg, sizeof s->mismatch_msg, "%s", why);
		s->mismatch = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		return httpd_reply_error(req, 409, "topology_mismatch", "%s", why);
	}
	pthread_mutex_lock(&s->mu);
	if (!s->hello[from]) {
		s->hello[from] = 1;
		s->nhello++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	j = json_pack("{s:b, s:i}", "ok", 1, "node", s->id);
	rc = httpd_reply_json(req, 200, j);
	json_decref(j);
	return rc;
}

/* A share of a peer's (x, w): checked whole, then queued for the trainer to add. */
static int h_push(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	char err[GEM_ERRMAX];
	struct msg m;
	const struct msg_blob *b;
	struct blob_codec c;
	struct inmsg *in;
	json_t *jn, *ji, *jw;
	int rc;

	if (msg_parse(req->body, req->body_len, &m, err) < 0)
		return httpd_reply_error(req, 400, "bad_message", "%s", err);
	jn = json_object_get(m.header, "node");
	ji = json_object_get(m.header, "iter");
	jw = json_object_get(m.header, "w");
	if (!json_is_integer(jn) || json_integer_value(jn) < 0 || json_integer_value(jn) >= s->nn ||
	    json_integer_value(jn) == s->id || !json_is_integer(ji) || json_integer_value(ji) < 0 ||
	    !json_is_number(jw) || !(json_number_value(jw) > 0) || !isfinite(json_number_value(jw))) {
		msg_free(&m);
		return httpd_reply_error(req, 400, "bad_field",
					 "push: want node (another node's index), iter >= 0 and w > 0");
	}
	if (!(b = msg_find(&m, "x"))) {
		msg_free(&m);
		return httpd_reply_error(req, 400, "bad_message", "push: no \"x\" blob");
	}
	if (!(in = msg_new(s))) {
		msg_free(&m);
		return httpd_reply_error(req, 503, "busy", "out of memory");
	}
	blob_codec_init(&c);
	rc = blob_decode(&c, b->data, &b->meta, in->x, s->n, err);
	blob_codec_free(&c);
	for (size_t i = 0; rc == 0 && i < s->n; i++)
		if (!isfinite(in->x[i]))
			rc = gem_errf(err, GEM_EUSAGE, "x[%zu] is not finite", i);
	in->from = (int)json_integer_value(jn);
	in->iter = (uint64_t)json_integer_value(ji);
	in->w = json_number_value(jw);
	msg_free(&m);
	pthread_mutex_lock(&s->mu);
	if (rc < 0) {
		msg_recycle(s, in);
		pthread_mutex_unlock(&s->mu);
		return httpd_reply_error(req, 400, "bad_blob", "push: %s", err);
	}
	if (!s->ready || s->closed) {
		msg_recycle(s, in);
		pthread_mutex_unlock(&s->mu);
		if (s->closed)
			return httpd_reply_error(req, 410, "finished", "node %d has finished", s->id);
		httpd_add_header(req, "Retry-After", "0");
		return httpd_reply_error(req, 503, "not_ready", "this node has no peer list yet");
	}
	inbox_add(s, in);
	pthread_mutex_unlock(&s->mu);
	return httpd_reply_bytes(req, 200, "application/json", "{\"ok\":true}\n", 12, 0);
}

/* Overlap: a peer has finished; nobody waits for its messages any more. */
static int h_bye(struct httpd_req *req, void *ctx)
{
	struct node *s = ctx;
	json_t *j = json_loadb((const char *)req->body, req->body_len, 0, NULL);
	json_int_t from = json_integer_value(json_object_get(j, "node"));
	json_decref(j);
	if (from < 0 || from >= s->nn || from == s->id)
		return httpd_reply_error(req, 400, "bad_field", "bye: want node, another node's index");
	pthread_mutex_lock(&s->mu);
	if (!s->bye[from]) {
		s->bye[from] = 1;
		s->nbye++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return httpd_reply_bytes(req, 200, "application/json", "{\"ok\":true}\n", 12, 0);
}

/* POST a share (already encoded in buf) to peer p. */
static int post_share(struct node *s, int p, const struct msg_buf *buf, struct httpc_resp *resp,
		      int retry, char *err)
{
	if (retry)
		return httpc_post_retry(s->http[p], "/v1/push", MSG_CONTENT_TYPE, buf->data, buf->len,
					s->o->retry_for, resp, err);
	return httpc_post(s->http[p], "/v1/push", MSG_CONTENT_TYPE, buf->data, buf->len, resp, err);
}

static int encode_share(struct node *s, struct blob_codec *c, struct msg_buf *buf, const float *x,
			double w, uint64_t iter, char *err)
{
	struct msg_blob blob = {.name = "x"};
	const void *enc;
	json_t *head = json_pack("{s:i, s:I, s:f}", "node", s->id, "iter", (json_int_t)iter, "w", w);
	int rc = head ? blob_encode(c, x, s->n, s->codec_name, -1, &enc, &blob.meta, err)
		      : gem_errf(err, GEM_ENOMEM, "out of memory");
	blob.data = enc;
	if (rc == 0)
		rc = msg_build(buf, head, &blob, 1, err);
	json_decref(head);
	return rc;
}

/* Overlap's sender: push each queued share to its peers; a share that cannot be delivered (the
 * peer has finished or is gone) comes back to this node's inbox, so no mass is lost. */
static void *sender_main(void *arg)
{
	struct node *s = arg;
	char err[GEM_ERRMAX];
	for (;;) {
		struct job *j;
		pthread_mutex_lock(&s->mu);
		while (!s->jobs && !s->sender_quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!(j = s->jobs)) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		pthread_mutex_unlock(&s->mu);
		int rc = encode_share(s, &s->send_codec, &s->send_buf, j->x, j->w, j->iter, err);
		int back = 0;
		for (int k = 0; k < j->npeers; k++) {
			int p = j->peers[k];
			if (rc == 0 && !s->gone[p] &&
			    post_share(s, p, &s->send_buf, &s->send_resp, 0, err) == 0)
				continue;
			if (!s->gone[p])
				log_debug("node %d: push to node %d: %s; its share stays here", s->id, p, err);
			s->gone[p] = 1;
			back++;
		}
		struct inmsg *in = back ? msg_new(s) : NULL;
		if (in) {
			for (size_t i = 0; i < s->n; i++)
				in->x[i] = j->x[i] * (float)back;
			in->w = j->w * back;
			in->from = s->id;
			in->iter = j->iter;
		}
		pthread_mutex_lock(&s->mu);
		if (in)
			inbox_add(s, in);
		s->jobs = j->next;
		if (!s->jobs)
			s->jobs_tail = NULL;
		s->njobs--;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		free(j->x);
		free(j);
	}
	return NULL;
}

/* Read the peer list: given, or from the file once it appears (written whole by a rename). */
static int get_peers(struct node *s, char *err)
{
	double t0 = cli_now();
	void *text = NULL;
	size_t len;
	int rc;
	if (s->o->peers)
		return sgp_peers_parse(s->o->peers, &s->peers, &s->nn, err);
	while (access(s->o->peers_file, F_OK) < 0) {
		struct timespec ts = {0, SGP_POLL_MS * 1000000L};
		if (sgp_signal)
			return gem_errf(err, GEM_EFAIL, "interrupted while waiting for %s", s->o->peers_file);
		if (errno != ENOENT || cli_now() - t0 > s->o->retry_for)
			return gem_errf(err, GEM_EUSAGE, "%s: %s", s->o->peers_file,
					errno == ENOENT ? "no peer list after --retry-for seconds"
							: strerror(errno));
		nanosleep(&ts, NULL);
	}
	if ((rc = fs_read_all(s->o->peers_file, &text, &len, 1 << 24, err)) < 0)
		return GEM_EUSAGE;
	rc = sgp_peers_parse(text, &s->peers, &s->nn, err);
	if (rc < 0)
		gem_errprefix(err, "%s: ", s->o->peers_file);
	free(text);
	return rc;
}

/* The port of an http://HOST:PORT URL, or -1. */
static int url_port(const char *url)
{
	const char *h = strstr(url, "://"), *end, *colon;
	long p;
	char *e;
	if (!h)
		return -1;
	h += 3;
	end = h + strcspn(h, "/");
	colon = end;
	while (colon > h && colon[-1] != ':' && colon[-1] != ']')
		colon--;
	if (colon == h || colon[-1] != ':')
		return strncmp(url, "https", 5) ? 80 : 443;
	p = strtol(colon, &e, 10);
	return e == end && p > 0 && p < 65536 ? (int)p : -1;
}

/* Which entry of the list is this node, and is it where this node listens? */
static int find_self(struct node *s, char *err)
{
	int port = httpd_port(s->httpd);
	if (s->o->node >= 0) {
		if (s->o->node >= s->nn)
			return gem_errf(err, GEM_EUSAGE, "--node %d: the peer list has %d nodes (0 to %d)",
					s->o->node, s->nn, s->nn - 1);
		s->id = s->o->node;
	} else {
		s->id = -1;
		for (int i = 0; i < s->nn; i++)
			if (!strcmp(s->peers[i], s->url))
				s->id = i;
		if (s->id < 0)
			return gem_errf(err, GEM_EUSAGE,
					"this node (%s) is not in the peer list: give --node I", s->url);
	}
	if (url_port(s->peers[s->id]) != port)
		return gem_errf(err, GEM_EUSAGE, "peer %d is %s, but this node listens on port %d",
				s->id, s->peers[s->id], port);
	return 0;
}

/* Say hello to every other node, until each has answered that it runs the same topology. */
static int hello_all(struct node *s, char *err)
{
	json_t *body = hello_body(s);
	char *text = json_dumps(body, JSON_COMPACT);
	struct httpc_resp resp = {0};
	int rc = 0;
	json_decref(body);
	if (!text)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int p = 0; p < s->nn && rc == 0; p++) {
		if (p == s->id)
			continue;
		rc = httpc_post_retry(s->http[p], "/v1/hello", "application/json", text, strlen(text),
				      s->o->retry_for, &resp, err);
		if (rc == HTTPC_EHTTP && resp.status == 409)
			rc = GEM_EUSAGE;
		if (rc < 0)
			gem_errprefix(err, "hello to node %d (%s): ", p, s->peers[p]);
	}
	free(text);
	httpc_resp_free(&resp);
	if (rc < 0)
		return rc;
	/* the start barrier: every peer has checked our topology and serves pushes */
	pthread_mutex_lock(&s->mu);
	for (double t0 = cli_now(); s->nhello < s->nn - 1 && !s->mismatch && !sgp_signal;) {
		struct timespec ts;
		if (cli_now() - t0 > s->o->retry_for) {
			rc = gem_errf(err, GEM_EFAIL, "%d of %d peers said hello in %.0f s", s->nhello,
				      s->nn - 1, s->o->retry_for);
			break;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += SGP_POLL_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->cv, &s->mu, &ts);
	}
	if (rc == 0 && s->mismatch)
		rc = gem_errf(err, GEM_EUSAGE, "%s", s->mismatch_msg);
	else if (rc == 0 && sgp_signal)
		rc = gem_errf(err, GEM_EFAIL, "interrupted");
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Exactly the iterations every node runs: the epochs of the largest shard, so that nodes whose
 * shard is one sample smaller run as many (their last batch starts their next epoch). */
static uint64_t count_iters(const struct node *s, const struct dataset *d, int shard_n)
{
	uint64_t shard = ((uint64_t)d->n + (uint64_t)shard_n - 1) / (uint64_t)shard_n;
	uint64_t per_epoch = (shard + (uint64_t)s->run.train.batch - 1) / (uint64_t)s->run.train.batch;
	if (s->o->steps)
		return s->o->steps;
	return per_epoch * (uint64_t)(s->o->epochs ? s->o->epochs : s->run.train.epochs);
}

/* Send the node's share of iteration iter (x, w already split) to its out-peers: at once
 * (synchronous) or through the sender thread (overlap). */
static int push_shares(struct node *s, const float *x, double w, uint64_t iter, struct blob_codec *c,
		       struct msg_buf *buf, struct httpc_resp *resp, char *err)
{
	int peers[SGP_MAX_PEERS], np = sgp_out_peers(s->o->topology, s->nn, s->mper, s->id, iter, peers);
	int rc;
	if (np == 0)
		return 0;
	if (s->o->overlap) {
		struct job *j = calloc(1, sizeof *j);
		if (!j || !(j->x = malloc(sizeof(float) * s->n))) {
			free(j);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		memcpy(j->x, x, sizeof(float) * s->n);
		j->w = w;
		j->iter = iter;
		j->npeers = np;
		memcpy(j->peers, peers, sizeof peers);
		pthread_mutex_lock(&s->mu);
		while (s->njobs >= SGP_MAX_JOBS)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->jobs_tail)
			s->jobs_tail->next = j;
		else
			s->jobs = j;
		s->jobs_tail = j;
		s->njobs++;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	if ((rc = encode_share(s, c, buf, x, w, iter, err)) < 0)
		return rc;
	for (int k = 0; k < np; k++)
		if ((rc = post_share(s, peers[k], buf, resp, 1, err)) < 0) {
			gem_errprefix(err, "push to node %d: ", peers[k]);
			return rc;
		}
	return 0;
}

struct mixed {
	int got;          /* messages added */
	int last_from;    /* the last peer heard from, -1: none */
	double dist;      /* ‖z − z_j‖ to it, before adding */
	uint64_t age_max; /* iterations between a message's and ours */
	double waited;    /* seconds spent waiting */
};

/* Add the messages due at iteration iter: synchronous, exactly those of iter from its in-peers
 * (waiting for them); overlap, everything that has arrived, waiting only when nothing has come
 * from an in-peer for τ iterations (and some peer is still running). z is scratch. */
static int mix_in(struct node *s, float *x, double *w, uint64_t iter, uint64_t *quiet, float *z,
		  struct mixed *mx, char *err)
{
	int in[SGP_MAX_PEERS], need = 0, have[SGP_MAX_PEERS] = {0};
	double t0 = cli_now(), last = t0;
	int rc = 0;

	memset(mx, 0, sizeof *mx);
	mx->last_from = -1;
	if (!s->o->overlap)
		need = sgp_in_peers(s->o->topology, s->nn, s->mper, s->id, iter, in);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct inmsg **p = &s->inbox, *m;
		int peer_msgs = 0;
		while ((m = *p)) {
			int k = -1;
			if (!s->o->overlap) {
				for (int j = 0; j < need; j++)
					if (in[j] == m->from && m->iter == iter && !have[j])
						k = j;
				if (k < 0) {
					p = &m->next;
					continue;
				}
				have[k] = 1;
			}
			*p = m->next;
			pthread_mutex_unlock(&s->mu);
			if (m->from != s->id) {
				sgp_debias(x, *w, z, s->n);
				{
					/* the peer's z_j = x_j/w_j: its share has the same ratio */
					double d2 = 0, inv = 1.0 / m->w;
					for (size_t i = 0; i < s->n; i++) {
						double d = (double)z[i] - m->x[i] * inv;
						d2 += d * d;
					}
					mx->dist = sqrt(d2);
				}
				mx->last_from = m->from;
				if (iter > m->iter && iter - m->iter > mx->age_max)
					mx->age_max = iter - m->iter;
				peer_msgs++;
			}
			sgp_receive(x, s->n, w, m->x, m->w);
			mx->got++;
			pthread_mutex_lock(&s->mu);
			msg_recycle(s, m);
			last = cli_now();
		}
		if (s->mismatch) {
			rc = gem_errf(err, GEM_EUSAGE, "%s", s->mismatch_msg);
			break;
		}
		if (!s->o->overlap) {
			int all = 1;
			for (int j = 0; j < need; j++)
				all &= have[j];
			if (all)
				break;
		} else {
			if (peer_msgs)
				*quiet = 0;
			/* While every node runs, each push is taken by someone, so not all can be
			 * waiting: the last message taken was followed by a push of the node that took
			 * it. Once a node has finished, pushes to it come back, that no longer holds, and
			 * the nodes left run out their iterations without waiting. */
			if (*quiet < (uint64_t)s->tau || s->nbye > 0)
				break;
		}
		if (sgp_signal) {
			rc = gem_errf(err, GEM_EFAIL, "interrupted");
			break;
		}
		if (cli_now() - last > s->o->retry_for) {
			int j = 0;
			while (j < need - 1 && have[j])
				j++;
			rc = s->o->overlap ? gem_errf(err, GEM_EFAIL,
						      "no message from any peer for %.0f s at iteration %llu",
						      s->o->retry_for, (unsigned long long)iter)
					   : gem_errf(err, GEM_EFAIL,
						      "no message from node %d for iteration %llu in %.0f s",
						      in[j], (unsigned long long)iter, s->o->retry_for);
			break;
		}
		{
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 200L * 1000000;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&s->cv, &s->mu, &ts);
		}
	}
	pthread_mutex_unlock(&s->mu);
	mx->waited = cli_now() - t0;
	return rc;
}

static void log_iter(FILE *f, const struct node *s, uint64_t iter, float loss, uint64_t samples,
		     double w, const struct mixed *mx)
{
	fprintf(f, "{\"time\":%.3f,\"elapsed\":%.3f,\"version\":%llu,\"worker\":%d,\"tau\":%llu,",
		cli_wall(), cli_now() - s->t0, (unsigned long long)iter + 1, s->id,
		(unsigned long long)mx->age_max);
	if (isfinite(loss))
		fprintf(f, "\"loss\":%.6g,", (double)loss);
	else
		fputs("\"loss\":null,", f);
	fprintf(f, "\"samples\":%llu,\"w\":%.9g,\"msgs\":%d,\"wait\":%.4f", (unsigned long long)samples, w,
		mx->got, mx->waited);
	if (mx->last_from >= 0)
		fprintf(f, ",\"peer\":%d,\"dist\":%.6g", mx->last_from, mx->dist);
	fputs("}\n", f);
}

/* node-I.gem: z as the "params" blob (so that gem-eval reads it as a params file of the run),
 * with the node, w and the node's progress in the header; x is w·z. */
static int save_node(struct node *s, const float *z, double w, uint64_t iters, uint64_t samples,
		     char *err)
{
	char name[64], path[PATH_MAX + 80];
	struct msg_buf b = {0};
	struct blob_codec c;
	json_t *h;
	int rc;
	snprintf(name, sizeof name, "node-%d.gem", s->id);
	run_file(&s->run, name, path, sizeof path);
	h = json_pack("{s:I, s:I, s:f, s:s, s:i, s:i, s:f}", "version", (json_int_t)iters, "samples",
		      (json_int_t)samples, "elapsed", cli_now() - s->t0, "rule",
		      s->o->overlap ? "overlap-sgp" : "sgp", "node", s->id, "nodes", s->nn, "w", w);
	if (!h)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	blob_codec_init(&c);
	rc = msg_write_params_file(path, &b, &c, h, z, s->n, NULL, -1, err);
	blob_codec_free(&c);
	msg_buf_free(&b);
	json_decref(h);
	return rc;
}

static void publish(struct node *s, const float *z, uint64_t iter, uint64_t samples, double w)
{
	pthread_mutex_lock(&s->mu);
	memcpy(s->zpub, z, sizeof(float) * s->n);
	s->pub_iter = iter;
	s->pub_samples = samples;
	s->pub_w = w;
	s->pub_elapsed = cli_now() - s->t0;
	pthread_mutex_unlock(&s->mu);
}

static int start_httpd(struct node *s, char *err)
{
	static const struct {
		const char *method, *path;
		httpd_handler_fn fn;
		int mutating;
	} routes[] = {
		{"GET", "/v1/health", h_health, 0}, {"GET", "/v1/run", h_run, 0},
		{"GET", "/v1/params", h_params, 0}, {"POST", "/v1/hello", h_hello, 1},
		{"POST", "/v1/push", h_push, 1},    {"POST", "/v1/bye", h_bye, 1},
	};
	struct httpd_route r[sizeof routes / sizeof *routes];
	struct httpd_config hc = {0};
	const char *host = s->o->host ? s->o->host : "127.0.0.1";
	int rc;
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
		r[i] = (struct httpd_route){routes[i].method, routes[i].path, routes[i].fn, s,
					    routes[i].mutating};
	hc.host = host;
	hc.port = s->o->port;
	hc.allow_public = s->o->allow_public;
	hc.token = s->token;
	hc.max_body = s->n * 8 + (size_t)MSG_HEAD_MAX + 4096;
	hc.routes = r;
	hc.n_routes = sizeof r / sizeof *r;
	if ((rc = httpd_start(&hc, &s->httpd, err)) < 0)
		return rc;
	snprintf(s->url, sizeof s->url, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host,
		 httpd_port(s->httpd));
	return 0;
}

static int codec_for(const char *url)
{
	/* on this machine, compression costs more CPU than the bytes it saves */
	return strstr(url, "://127.") || strstr(url, "://localhost") || strstr(url, "://[::1]");
}

int sgp_node_run(const struct sgp_opts *o)
{
	char err[GEM_ERRMAX], name[64], path[PATH_MAX + 80];
	struct node *s = calloc(1, sizeof *s);
	struct dataset ds = {0};
	struct batcher b = {0};
	struct sgd opt = {0};
	struct rng drop;
	struct blob_codec codec;
	struct msg_buf buf = {0};
	struct httpc_resp resp = {0};
	pthread_t sender;
	int sender_started = 0, rc = EXIT_JOB, tty = isatty(2) && !o->quiet, shard_i, shard_n;
	float *xb = NULL, *x = NULL, *z, *scratch = NULL, loss = NAN;
	uint8_t *yb = NULL;
	double w = 1, last_progress = 0;
	uint64_t samples = 0, quiet = 0, iter = 0;
	FILE *log = NULL;

	if (!s) {
		fprintf(stderr, "gem-work: out of memory\n");
		return EXIT_JOB;
	}
	s->o = o;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	blob_codec_init(&codec);
	blob_codec_init(&s->send_codec);
	s->id = -1;
	if (o->token_file && cli_read_token(o->token_file, &s->token, err) < 0) {
		log_error("%s", err);
		rc = EXIT_USAGE;
		goto out;
	}
	if (run_open(o->rundir, &s->run, err) < 0) {
		log_error("%s", err);
		rc = EXIT_USAGE;
		goto out;
	}
	if (model_from_json(s->run.model, &s->m, err) < 0 || model_reserve(s->m, s->run.train.batch, err) < 0) {
		log_error("%s", err);
		goto out;
	}
	s->n = model_nparams(s->m);
	z = model_params(s->m);
	x = malloc(sizeof(float) * s->n);
	scratch = malloc(sizeof(float) * s->n);
	s->zpub = malloc(sizeof(float) * s->n);
	xb = malloc(sizeof(float) * (size_t)s->run.train.batch * model_input_size(s->m));
	yb = malloc((size_t)s->run.train.batch);
	if (!x || !scratch || !s->zpub || !xb || !yb) {
		log_error("out of memory");
		goto out;
	}
	{
		struct run_progress p0;
		/* every node starts from the run's θ₀ */
		if (run_params_load(&s->run, NULL, x, s->n, &p0, err) < 0 ||
		    dataset_load(s->run.data_dir, "train", &ds, err) < 0) {
			log_error("%s", err);
			goto out;
		}
	}
	memcpy(z, x, sizeof(float) * s->n);
	memcpy(s->zpub, x, sizeof(float) * s->n);
	s->pub_w = 1;
	if (start_httpd(s, err) < 0) {
		log_error("%s", err);
		rc = EXIT_USAGE;
		goto out;
	}
	/* the handshake: our URL out, then the peer list in */
	printf("%s\n", s->url);
	fflush(stdout);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if ((rc = get_peers(s, err)) < 0 || (rc = find_self(s, err)) < 0) {
		log_error("%s", err);
		rc = rc == GEM_EUSAGE ? EXIT_USAGE : EXIT_JOB;
		goto out;
	}
	rc = EXIT_JOB;
	s->mper = sgp_peers_per_iter(o->topology, s->nn, o->peers_per_iter);
	s->tau = o->tau > 0 ? o->tau : 2 * (sgp_exp_cycle(s->nn) > 0 ? sgp_exp_cycle(s->nn) : 1);
	s->hash = sgp_topology_hash(o->topology, o->peers_per_iter, (const char *const *)s->peers, s->nn);
	shard_i = o->shard_set ? o->shard_i : s->id;
	shard_n = o->shard_set ? o->shard_n : s->nn;
	s->iters = count_iters(s, &ds, shard_n);
	s->codec_name = BLOB_RAW;
	if (!(s->http = calloc((size_t)s->nn, sizeof *s->http)) || !(s->gone = calloc((size_t)s->nn, sizeof(int))) ||
	    !(s->bye = calloc((size_t)s->nn, sizeof(int))) ||
	    !(s->hello = calloc((size_t)s->nn, sizeof(int)))) {
		log_error("out of memory");
		goto out;
	}
	for (int p = 0; p < s->nn; p++) {
		if (p == s->id)
			continue;
		if (!codec_for(s->peers[p]))
			s->codec_name = BLOB_CODEC_DEFAULT;
		if (httpc_new(s->peers[p], s->token, 600L * 1000, &s->http[p], err) < 0) {
			log_error("peer %d: %s", p, err);
			rc = EXIT_USAGE;
			goto out;
		}
	}
	if (batcher_init(&b, &ds, s->run.train.batch, s->run.train.seed, 1 + (uint64_t)s->id, shard_i, shard_n,
			 s->run.mean, s->run.std, err) < 0 ||
	    /* the local optimiser: the run's lr, momentum and weight decay, Nesterov (as SGP's paper) */
	    sgd_init(&opt, s->n, s->run.train.lr, s->run.train.momentum, s->run.train.weight_decay,
		     s->run.train.momentum > 0, err) < 0) {
		log_error("%s", err);
		goto out;
	}
	pthread_mutex_lock(&s->mu);
	s->ready = 1;
	pthread_mutex_unlock(&s->mu);
	rc = hello_all(s, err);
	pthread_mutex_lock(&s->mu);
	if (s->mismatch) {
		/* what the peer said is the cause, whatever became of our own hellos */
		snprintf(err, sizeof err, "%s", s->mismatch_msg);
		rc = GEM_EUSAGE;
	}
	pthread_mutex_unlock(&s->mu);
	if (rc < 0) {
		log_error("node %d: %s", s->id, err);
		rc = rc == GEM_EUSAGE ? EXIT_USAGE : EXIT_JOB;
		goto out;
	}
	rc = EXIT_JOB;
	snprintf(name, sizeof name, "node-%d.jsonl", s->id);
	run_file(&s->run, name, path, sizeof path);
	if (!(log = fopen(path, "w"))) {
		log_error("%s: %s", path, strerror(errno));
		goto out;
	}
	run_log_start(log, &s->run, o->overlap ? "overlap-sgp" : "sgp", s->url, 0, model_layout(s->m));
	{
		json_t *ev = json_pack("{s:s, s:i, s:i, s:s, s:i, s:I, s:b, s:i, s:[i,i]}", "event", "sgp",
				       "node", s->id, "nodes", s->nn, "topology", sgp_topology_name(o->topology),
				       "peers_per_iter", s->mper, "iters", (json_int_t)s->iters, "overlap",
				       o->overlap, "tau", s->tau, "shard", shard_i, shard_n);
		json_t *pl = json_array();
		for (int p = 0; p < s->nn; p++)
			json_array_append_new(pl, json_string(s->peers[p]));
		json_object_set_new(ev, "peers", pl);
		json_dumpf(ev, log, JSON_COMPACT | JSON_PRESERVE_ORDER);
		fputc('\n', log);
		json_decref(ev);
	}
	if (o->overlap) {
		if (pthread_create(&sender, NULL, sender_main, s) != 0) {
			log_error("cannot start the sender thread");
			goto out;
		}
		sender_started = 1;
	}
	if (!o->quiet)
		log_info("node %d of %d at %s: %s, %s graph, %d peer%s per iteration, %llu iterations, "
			 "shard %d/%d (%zu samples)",
			 s->id, s->nn, s->url, o->overlap ? "overlap-sgp" : "sgp", sgp_topology_name(o->topology),
			 s->mper, s->mper == 1 ? "" : "s", (unsigned long long)s->iters, shard_i, shard_n, b.count);
	s->t0 = cli_now();
	rc = 0;
	for (iter = 0; iter < s->iters && !sgp_signal; iter++) {
		struct mixed mx;
		double step_start = cli_now();
		int nb = batcher_next(&b, xb, yb);
		/* the gradient at z = x/w; dropout's randomness a function of the node and iteration */
		sgp_debias(x, w, z, s->n);
		rng_seed(&drop, s->run.train.seed ^ ((uint64_t)s->id << 40), 0x73677000ULL + iter);
		loss = model_train_step(s->m, xb, yb, nb, &drop);
		if (!isfinite(loss)) {
			log_error("node %d: the loss is %g at iteration %llu: diverged", s->id, (double)loss,
				  (unsigned long long)iter);
			rc = EXIT_JOB;
			break;
		}
		/* the local momentum step on z, then back to the numerator x = w·z (as the authors'
		 * code does): a step on x itself would move z by lr/w, up to ten times the run's lr
		 * when Overlap-SGP's weights drift (a straggler), and diverge. With w = 1 it is the
		 * same step. */
		sgd_step(&opt, z, model_grads(s->m));
		for (size_t i = 0; i < s->n; i++)
			x[i] = z[i] * (float)w;
		samples += (uint64_t)nb;
		if (o->slowdown > 1)
			work_slowdown(cli_now() - step_start, o->slowdown);
		/* keep 1/(m+1) of (x, w), push 1/(m+1) to each out-peer, add what comes in */
		sgp_split(x, s->n, &w, s->mper);
		quiet++;
		if (push_shares(s, x, w, iter, &codec, &buf, &resp, err) < 0 ||
		    mix_in(s, x, &w, iter, &quiet, scratch, &mx, err) < 0) {
			log_error("node %d: %s", s->id, err);
			rc = s->mismatch ? EXIT_USAGE : EXIT_JOB;
			break;
		}
		log_iter(log, s, iter, loss, samples, w, &mx);
		sgp_debias(x, w, z, s->n);
		publish(s, z, iter + 1, samples, w);
		if (tty && cli_now() - last_progress > 0.25) {
			last_progress = cli_now();
			fprintf(stderr, "\rgem-work node %d: iteration %llu/%llu  loss %.4f  w %.3f   ", s->id,
				(unsigned long long)iter + 1, (unsigned long long)s->iters, (double)loss, w);
		}
	}
	if (tty)
		fputc('\n', stderr);
	/* the end: flush what is being sent, say bye, stop receiving, add what came in */
	if (sender_started) {
		pthread_mutex_lock(&s->mu);
		s->sender_quit = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(sender, NULL);
		sender_started = 0;
		for (int p = 0; p < s->nn; p++) {
			char body[48];
			int len = snprintf(body, sizeof body, "{\"node\":%d}", s->id);
			if (p == s->id || s->gone[p])
				continue;
			httpc_set_timeout(s->http[p], 5000, 2000);
			if (httpc_post(s->http[p], "/v1/bye", "application/json", body, (size_t)len, &resp, err) < 0)
				log_debug("bye to node %d: %s", p, err);
		}
	}
	pthread_mutex_lock(&s->mu);
	s->closed = 1;
	pthread_mutex_unlock(&s->mu);
	httpd_stop(s->httpd);
	s->httpd = NULL;
	if (o->overlap) {
		struct mixed mx;
		uint64_t q = 0;
		s->tau = 1 << 30;
		if (mix_in(s, x, &w, iter, &q, scratch, &mx, err) < 0)
			log_warn("node %d: %s", s->id, err);
	}
	sgp_debias(x, w, z, s->n);
	if (log && fflush(log) == EOF) {
		log_error("node %d: log: %s", s->id, strerror(errno));
		rc = EXIT_JOB;
	}
	if (save_node(s, z, w, iter, samples, err) < 0) {
		log_error("node %d: %s", s->id, err);
		rc = EXIT_JOB;
	}
	if (rc == 0 && !o->quiet)
		log_info("node %d: %llu iterations, %llu samples in %.1f s, last loss %.4f, w %.4f", s->id,
			 (unsigned long long)iter, (unsigned long long)samples, cli_now() - s->t0, (double)loss,
			 w);
out:
	if (sgp_signal)
		rc = 128 + sgp_signal;
	if (sender_started) {
		pthread_mutex_lock(&s->mu);
		s->sender_quit = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(sender, NULL);
	}
	httpd_stop(s->httpd);
	if (log)
		fclose(log);
	for (int p = 0; s->http && p < s->nn; p++)
		httpc_free(s->http[p]);
	free(s->http);
	free(s->gone);
	free(s->bye);
	free(s->hello);
	while (s->inbox) {
		struct inmsg *m = s->inbox;
		s->inbox = m->next;
		free(m->x);
		free(m);
	}
	while (s->free_msgs) {
		struct inmsg *m = s->free_msgs;
		s->free_msgs = m->next;
		free(m->x);
		free(m);
	}
	while (s->jobs) {
		struct job *j = s->jobs;
		s->jobs = j->next;
		free(j->x);
		free(j);
	}
	sgp_peers_free(s->peers, s->nn);
	sgd_free(&opt);
	batcher_free(&b);
	dataset_free(&ds);
	model_free(s->m);
	if (s->run.json)
		run_close(&s->run);
	blob_codec_free(&codec);
	blob_codec_free(&s->send_codec);
	msg_buf_free(&buf);
	msg_buf_free(&s->send_buf);
	httpc_resp_free(&resp);
	httpc_resp_free(&s->send_resp);
	free(x);
	free(scratch);
	free(s->zpub);
	free(xb);
	free(yb);
	free(s->token);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return rc;
}
