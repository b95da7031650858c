/* sgp_gossip: what an SGP node says to its peers and how it takes what they push: the hello
 * barrier, pushing shares (at once, or by Overlap-SGP's sender thread), the inbox and mixing
 * what is due into (x, w), and Overlap-SGP's bye. */
#include "role/sgp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"

void sgp_hello_of(const struct sgp_node *s, struct proto_hello *h)
{
	*h = (struct proto_hello){.node = s->id, .nodes = s->nn,
				  .topology = pushsum_topology_name(s->o.topology),
				  .peers_per_iter = s->mper, .iters = (long long)s->iters,
				  .overlap = s->o.overlap};
	snprintf(h->hash, sizeof h->hash, "%016llx", (unsigned long long)s->hash);
}

static const char *const refusal_names[SGP_REFUSE_N] = {
	[SGP_REFUSE_BAD] = "bad_request",
	[SGP_REFUSE_NOT_PEER] = "not_in_peer",
	[SGP_REFUSE_DUPLICATE] = "duplicate_push",
	[SGP_REFUSE_WINDOW] = "outside_window",
};

const char *sgp_refusal_name(enum sgp_refusal r)
{
	return refusal_names[r];
}

int sgp_stopping(const struct sgp_node *s)
{
	return s->stop && *s->stop;
}

struct inmsg *sgp_msg_new(struct sgp_node *s)
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

void sgp_msg_recycle(struct sgp_node *s, struct inmsg *m)
{
	m->next = s->free_msgs;
	s->free_msgs = m;
}

void sgp_inbox_add(struct sgp_node *s, struct inmsg *m)
{
	struct inmsg **p = &s->inbox;
	while (*p) {
		/* Overlap-SGP adds whatever has come, so a second message from a sender is added into
		 * its first here: the inbox holds at most one per peer however fast pushes come. */
		if (s->o.overlap && (*p)->from == m->from) {
			pushsum_receive((*p)->x, s->n, &(*p)->w, m->x, m->w);
			if (m->iter > (*p)->iter)
				(*p)->iter = m->iter;
			sgp_msg_recycle(s, m);
			pthread_cond_broadcast(&s->cv);
			return;
		}
		p = &(*p)->next;
	}
	m->next = NULL;
	*p = m;
	pthread_cond_broadcast(&s->cv);
}

/* Under mu: wait on cv for at most ms milliseconds. */
static void wait_ms(struct sgp_node *s, long ms)
{
	struct timespec ts = clock_deadline((double)ms * 1e-3);
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* POST to peer p, retrying what httpc_post_retry retries for o.t.retry_for in all, in slices of a
 * second, so that a stop ends the wait at once (GEM_EFAIL, "interrupted"), and, with
 * on_mismatch, a peer's mismatch too (GEM_EUSAGE, err untouched: the caller reports it). */
static int post_sliced(struct sgp_node *s, int p, const char *path, const char *ctype,
		       const void *body, size_t len, struct httpc_resp *resp, int on_mismatch,
		       char *err)
{
	double t0 = clock_mono();
	for (;;) {
		double left = s->o.t.retry_for - (clock_mono() - t0);
		int rc = httpc_post_retry(s->http[p], path, ctype, body, len,
					  left < 1 ? (left > 0 ? left : 0) : 1, resp, err), mismatch;
		if (rc == 0 || (rc != HTTPC_ETRANSPORT && !(rc == HTTPC_EHTTP && resp->status == 503)))
			return rc;
		if (left <= 1) { /* the last cause, without the last slice's "unreachable for N s" */
			const char *cause = strstr(err, " s: ");
			char last[GEM_ERRMAX];
			snprintf(last, sizeof last, "%s", cause ? cause + 4 : err);
			return gem_errf(err, rc, "no answer in %.0f s: %s", s->o.t.retry_for, last);
		}
		if (sgp_stopping(s))
			return gem_errf(err, GEM_EFAIL, "interrupted");
		if (!on_mismatch)
			continue;
		pthread_mutex_lock(&s->mu);
		mismatch = s->mismatch;
		pthread_mutex_unlock(&s->mu);
		if (mismatch) /* sgp_hello_all reports it */
			return GEM_EUSAGE;
	}
}

/* 1 if the error reply resp is a refusal of reason r. */
static int refused_as(const struct httpc_resp *resp, enum sgp_refusal r)
{
	json_t *j = json_loadb(resp->body, resp->len, 0, NULL);
	const char *code = proto_error_code(j);
	int is = code && !strcmp(code, sgp_refusal_name(r));
	json_decref(j);
	return is;
}

/* POST a share (already encoded in buf) to peer p; with retry, as post_sliced does (a node told
 * to stop while a peer is gone stops at once). */
static int post_share(struct sgp_node *s, int p, const struct msg_buf *buf,
		      struct httpc_resp *resp, int retry, char *err)
{
	int rc = retry ? post_sliced(s, p, "/v1/push", MSG_CONTENT_TYPE, buf->data, buf->len, resp,
				     0, err)
		       : httpc_post(s->http[p], "/v1/push", MSG_CONTENT_TYPE, buf->data, buf->len,
				    resp, err);
	/* a push sent again after its reply was lost: the peer has it already */
	if (rc == HTTPC_EHTTP && resp->status == 409 && refused_as(resp, SGP_REFUSE_DUPLICATE))
		rc = 0;
	/* counted once delivered, as the peer counts it once taken */
	if (rc == 0) {
		pthread_mutex_lock(&s->mu);
		s->bytes_out += buf->len;
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

/* The push message of (x, w) at iteration iter into buf. */
static int encode_share(struct sgp_node *s, struct blob_codec *c, struct msg_buf *buf,
			const float *x, double w, uint64_t iter, char *err)
{
	struct msg_blob blob = {.name = "x"};
	const void *enc = NULL;
	json_t *head = proto_push_to_json(&(struct proto_push){.node = s->id, .iter = iter, .w = w});
	int rc = head ? blob_encode_feedback(c, x, s->resid, s->n, s->codec_name, -1, &enc, &blob.meta,
					     err)
		      : gem_errf(err, GEM_ENOMEM, "out of memory");
	blob.data = enc;
	if (rc == 0)
		rc = msg_build(buf, head, &blob, 1, err);
	json_decref(head);
	return rc;
}

/* The sender's one job: push j's share to its peers; what cannot be delivered (the peer has
 * finished or is gone) comes back to this node's inbox, so no mass is lost. */
static void send_job(struct sgp_node *s, const struct job *j)
{
	char err[GEM_ERRMAX];
	int rc = encode_share(s, &s->send_codec, &s->send_buf, j->x, j->w, j->iter, err);
	int back = 0;
	struct inmsg *in;
	for (int k = 0; k < j->npeers; k++) {
		int p = j->peers[k];
		if (rc == 0 && !s->gone[p] && post_share(s, p, &s->send_buf, &s->send_resp, 0, err) == 0)
			continue;
		if (!s->gone[p])
			log_debug("node %d: push to node %d: %s; its share stays here", s->id, p, err);
		s->gone[p] = 1;
		back++;
	}
	if (!back || !(in = sgp_msg_new(s)))
		return;
	for (size_t i = 0; i < s->n; i++)
		in->x[i] = j->x[i] * (float)back;
	in->w = j->w * back;
	in->from = s->id;
	in->iter = j->iter;
	pthread_mutex_lock(&s->mu);
	sgp_inbox_add(s, in);
	pthread_mutex_unlock(&s->mu);
}

void *sgp_sender_main(void *arg)
{
	struct sgp_node *s = arg;
	for (;;) {
		struct job *j;
		pthread_mutex_lock(&s->mu);
		while (!s->jobs && !s->sender_quit)
			pthread_cond_wait(&s->cv, &s->mu);
		j = s->jobs;
		pthread_mutex_unlock(&s->mu);
		if (!j)
			break;
		send_job(s, j);
		pthread_mutex_lock(&s->mu);
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

void sgp_sender_stop(struct sgp_node *s, pthread_t t)
{
	pthread_mutex_lock(&s->mu);
	s->sender_quit = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(t, NULL);
}

void sgp_bye_all(struct sgp_node *s)
{
	char err[GEM_ERRMAX];
	struct httpc_resp resp = {0};
	json_t *j = proto_bye_to_json(s->id);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	for (int p = 0; body && p < s->nn; p++) {
		if (p == s->id || s->gone[p])
			continue;
		httpc_set_timeout(s->http[p], 5000, 2000);
		if (httpc_post(s->http[p], "/v1/bye", "application/json", body, strlen(body), &resp,
			       err) < 0)
			log_debug("bye to node %d: %s", p, err);
	}
	free(body);
	httpc_resp_free(&resp);
}

/* Under mu: wait until every peer has said hello (and agrees), the start barrier. */
static int hello_barrier(struct sgp_node *s, char *err)
{
	double t0 = clock_mono();
	while (s->nhello < s->nn - 1 && !s->mismatch && !sgp_stopping(s)) {
		if (clock_mono() - t0 > s->o.t.retry_for)
			return gem_errf(err, GEM_EFAIL, "%d of %d peers said hello in %.0f s", s->nhello,
					s->nn - 1, s->o.t.retry_for);
		wait_ms(s, SGP_POLL_MS);
	}
	if (s->mismatch)
		return gem_errf(err, GEM_EUSAGE, "%s", s->mismatch_msg);
	if (sgp_stopping(s))
		return gem_errf(err, GEM_EFAIL, "interrupted while waiting for the peers' hellos");
	return 0;
}

/* POST the hello to peer p (a stop or a peer's mismatch ends the wait at once). */
static int hello_one(struct sgp_node *s, int p, const char *text, struct httpc_resp *resp,
		     char *err)
{
	return post_sliced(s, p, "/v1/hello", "application/json", text, strlen(text), resp, 1, err);
}

int sgp_hello_all(struct sgp_node *s, char *err)
{
	struct proto_hello h;
	json_t *body;
	char *text;
	sgp_hello_of(s, &h);
	body = proto_hello_to_json(&h);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct httpc_resp resp = {0};
	int rc = 0;
	json_decref(body);
	if (!text)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int p = 0; p < s->nn && rc == 0; p++) {
		if (p == s->id)
			continue;
		rc = hello_one(s, p, text, &resp, err);
		if (rc == HTTPC_EHTTP && resp.status == 409)
			rc = GEM_EUSAGE;
		if (rc < 0)
			gem_errprefix(err, "hello to node %d (%s): ", p, s->peers[p]);
	}
	free(text);
	httpc_resp_free(&resp);
	pthread_mutex_lock(&s->mu);
	if (rc == 0)
		rc = hello_barrier(s, err);
	if (s->mismatch) /* what the peer said is the cause, whatever became of our own hellos */
		rc = gem_errf(err, GEM_EUSAGE, "%s", s->mismatch_msg);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Overlap: queue the share for the sender thread (waiting while SGP_MAX_JOBS are queued). */
static int queue_share(struct sgp_node *s, const float *x, double w, uint64_t iter,
		       const int *peers, int np, char *err)
{
	struct job *j = calloc(1, sizeof *j);
	if (!j || !(j->x = malloc(sizeof(float) * s->n))) {
		free(j);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	memcpy(j->x, x, sizeof(float) * s->n);
	j->w = w;
	j->iter = iter;
	j->npeers = np;
	memcpy(j->peers, peers, sizeof(int) * (size_t)np);
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

int sgp_push_shares(struct sgp_node *s, const float *x, double w, uint64_t iter,
		    struct blob_codec *c, struct msg_buf *buf, struct httpc_resp *resp, char *err)
{
	int peers[PUSHSUM_MAX_PEERS], rc;
	int np = pushsum_out_peers(s->o.topology, s->nn, s->mper, s->id, iter, peers);
	if (np == 0)
		return 0;
	if (s->o.overlap)
		return queue_share(s, x, w, iter, peers, np, err);
	if ((rc = encode_share(s, c, buf, x, w, iter, err)) < 0)
		return rc;
	for (int k = 0; k < np; k++)
		if ((rc = post_share(s, peers[k], buf, resp, 1, err)) < 0) {
			gem_errprefix(err, "push to node %d: ", peers[k]);
			return rc;
		}
	return 0;
}

/* Under mu: add the inbox's messages due at iter into (x, w), dropping mu while adding:
 * synchronous, those of iter from the in-peers in[0..need) not yet had, in that order (float
 * addition does not commute with rounding, so arrival order would make runs differ); overlap,
 * all, as they came. Returns how many came from peers (not shares that came back). */
static int take_due(struct sgp_node *s, float *x, double *w, uint64_t iter, const int *in,
		    int need, int *have, float *z, struct mixed *mx)
{
	struct inmsg **p = &s->inbox, *m;
	int peer_msgs = 0, next = 0;
	while ((m = *p)) {
		if (!s->o.overlap) {
			while (next < need && have[next])
				next++;
			if (next == need || in[next] != m->from || m->iter != iter) {
				p = &m->next;
				continue;
			}
			have[next] = 1;
		}
		*p = m->next;
		pthread_mutex_unlock(&s->mu);
		if (m->from != s->id) {
			pushsum_debias(x, *w, z, s->n);
			mx->dist = pushsum_share_distance(z, m->x, m->w, s->n);
			mx->last_from = m->from;
			if (iter > m->iter && iter - m->iter > mx->age_max)
				mx->age_max = iter - m->iter;
			peer_msgs++;
		}
		pushsum_receive(x, s->n, w, m->x, m->w);
		mx->got++;
		pthread_mutex_lock(&s->mu);
		sgp_msg_recycle(s, m);
		/* the next in-peer's push may have come earlier, so before this one in the inbox */
		if (!s->o.overlap)
			p = &s->inbox;
	}
	return peer_msgs;
}

/* Add the messages due at iteration iter: synchronous, exactly those of iter from its in-peers
 * (waiting for them); overlap, everything that has arrived, waiting only when nothing has come
 * from an in-peer for τ iterations (and some peer is still running). z is scratch. */
int sgp_mix_in(struct sgp_node *s, float *x, double *w, uint64_t iter, uint64_t *quiet, float *z,
	       struct mixed *mx, char *err)
{
	int in[PUSHSUM_MAX_PEERS], need = 0, have[PUSHSUM_MAX_PEERS] = {0}, rc = 0;
	double t0 = clock_mono(), last = t0;

	memset(mx, 0, sizeof *mx);
	mx->last_from = -1;
	if (!s->o.overlap)
		need = pushsum_in_peers(s->o.topology, s->nn, s->mper, s->id, iter, in);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		int got = mx->got, peer_msgs = take_due(s, x, w, iter, in, need, have, z, mx), all = 1;
		if (mx->got > got)
			last = clock_mono();
		if (s->mismatch) {
			rc = gem_errf(err, GEM_EUSAGE, "%s", s->mismatch_msg);
			break;
		}
		if (!s->o.overlap) {
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
		if (sgp_stopping(s)) {
			rc = gem_errf(err, GEM_EFAIL, "interrupted at iteration %llu",
				      (unsigned long long)iter);
			break;
		}
		if (clock_mono() - last > s->o.t.retry_for) {
			int j = 0;
			while (j < need - 1 && have[j])
				j++;
			rc = s->o.overlap ? gem_errf(err, GEM_EFAIL,
						     "no message from any peer for %.0f s at iteration %llu",
						     s->o.t.retry_for, (unsigned long long)iter)
					  : gem_errf(err, GEM_EFAIL,
						     "no message from node %d for iteration %llu in %.0f s",
						     in[j], (unsigned long long)iter, s->o.t.retry_for);
			break;
		}
		wait_ms(s, 200);
	}
	pthread_mutex_unlock(&s->mu);
	mx->waited = clock_mono() - t0;
	return rc;
}
