/* sgp_impl: what the files of an SGP node share (not part of libgem's interface): the node
 * object, its inbox of pushed shares and the send queue of Overlap-SGP. sgp.c opens, trains
 * and closes a node; sgp_http.c serves its endpoints; sgp_gossip.c talks to its peers (what it
 * says, what they answer) and keeps its inbox. sgp.c calls both, sgp_http.c calls
 * sgp_gossip.c, never the other way round. */
#ifndef GEM_ROLE_SGP_IMPL_H
#define GEM_ROLE_SGP_IMPL_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/prog.h"
#include "nn/data.h"
#include "role/sgp.h"
#include "role/trainer.h"
#include "run/run.h"
#include "wire/blob.h"
#include "wire/httpc.h"
#include "wire/httpd.h"
#include "wire/msg.h"
#include "wire/proto.h"
#include "wire/reply.h"

#define SGP_POLL_MS 50
#define SGP_MAX_JOBS 4 /* overlap: messages queued for sending before the trainer waits */

/* Why a node refused a peer's request (counted, and logged as "refused" events). */
enum sgp_refusal {
	SGP_REFUSE_BAD,       /* a malformed push or hello: bad JSON, fields, blob or weight */
	SGP_REFUSE_NOT_PEER,  /* the sender is not an in-peer of this node at that iteration */
	SGP_REFUSE_DUPLICATE, /* a second push from the sender for an iteration it has pushed */
	SGP_REFUSE_WINDOW,    /* an iteration outside the window this node takes */
	SGP_REFUSE_N,
};

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
	int npeers, peers[PUSHSUM_MAX_PEERS];
};

/* One node. Fixed once it listens: o, run, n, token, url, get. Written by the trainer before it
 * sets ready under mu, then fixed (a handler reads them only after it has seen ready under mu):
 * peers, mper, tau, hash, iters, bye, hello. id and nn change only under mu (with ready). */
struct sgp_node {
	struct sgp_opts o;
	struct run run;
	struct trainer tr;
	struct dataset ds;
	size_t n;
	float *x, *scratch; /* push-sum's numerator x (θ₀ at first), scratch for the mixing */
	char *token;
	struct httpd *httpd;
	char url[300];
	struct reply_get get; /* GET /v1/health, /v1/run, /v1/params */
	prog_stop_flag *stop;
	int ran;

	int id, nn, mper, tau;
	char **peers;
	uint64_t hash, iters;
	const char *codec_name;
	float *resid; /* a lossy codec's error feedback of the shares pushed (blob_encode_feedback):
		       * the sender thread's with overlap, else the loop's; NULL when lossless */
	struct httpc **http; /* one per peer (NULL for this node): used by one thread at a time */
	double t0;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	int ready, closed, mismatch;
	char mismatch_msg[GEM_ERRMAX];
	struct inmsg *inbox, *free_msgs;
	int *bye, nbye;
	int *hello, nhello; /* the peers that have said hello (and agree) */
	uint64_t *pushed;   /* per peer: 1 + the last iteration of its pushes taken, 0: none */
	unsigned refused[SGP_REFUSE_N]; /* refusals not yet logged, by reason */
	uint64_t bytes_in, bytes_out;   /* the messages of the pushes taken and delivered */
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

/* What mix_in added at one iteration. */
struct mixed {
	int got;          /* messages added */
	int last_from;    /* the last peer heard from, -1: none */
	double dist;      /* ‖z − z_j‖ to it, before adding */
	uint64_t age_max; /* iterations between a message's and ours */
	double waited;    /* seconds spent waiting */
};

/* A node's answer to a peer's request: a status, and for an error its name and detail. */
struct sgp_answer {
	unsigned status;
	const char *error;
	char detail[GEM_ERRMAX];
};

/* sgp_http.c */
/* Listen on o->host:o->port with every route of the node; sets s->url. */
int sgp_http_start(struct sgp_node *s, char *err);
/* POST /v1/hello's body, from client, answered in *a (its status returned): 200 a hello that agrees (the peer counted), 400 a
 * malformed one (counted), 409 one that disagrees (the node then stops: a topology mismatch),
 * 503 not ready yet. */
unsigned sgp_hello_take(struct sgp_node *s, const void *body, size_t len, const char *client,
			struct sgp_answer *a);
/* POST /v1/push's body, answered in *a (its status returned): a share of a peer's (x, w), checked whole and queued for the trainer
 * (200), or refused: 400 malformed, 409 not a push push-sum sends now (both counted by
 * reason), 410 the node has finished, 503 not ready yet or out of memory. */
unsigned sgp_push_take(struct sgp_node *s, const void *body, size_t len, struct sgp_answer *a);
/* "sgp" or "overlap-sgp". */
const char *sgp_rule_name(const struct sgp_node *s);

/* sgp_gossip.c */
/* The name of a refusal in the log and in a reply's "error". */
const char *sgp_refusal_name(enum sgp_refusal r);
/* The hello this node sends and checks peers' against (its topology points into s). */
void sgp_hello_of(const struct sgp_node *s, struct proto_hello *h);
/* A free message (x of n floats), or NULL when out of memory. */
struct inmsg *sgp_msg_new(struct sgp_node *s);
/* Under mu: put m back on the free list. */
void sgp_msg_recycle(struct sgp_node *s, struct inmsg *m);
/* Under mu: append m to the inbox (arrival order) and wake the waiters. */
void sgp_inbox_add(struct sgp_node *s, struct inmsg *m);
/* Say hello to every other node, then wait until each has said hello to this one. */
int sgp_hello_all(struct sgp_node *s, char *err);
/* Send the share of iteration iter (x, w already split) to the out-peers: at once, or through
 * the sender thread with o.overlap. */
int sgp_push_shares(struct sgp_node *s, const float *x, double w, uint64_t iter,
		    struct blob_codec *c, struct msg_buf *buf, struct httpc_resp *resp, char *err);
/* Add the messages due at iteration iter into (x, w); z is scratch. See sgp_gossip.c. */
int sgp_mix_in(struct sgp_node *s, float *x, double *w, uint64_t iter, uint64_t *quiet, float *z,
	       struct mixed *mx, char *err);
/* Overlap's sender thread (arg: the node). */
void *sgp_sender_main(void *arg);
/* Overlap: stop the sender thread once its queue is empty, and wait for it. */
void sgp_sender_stop(struct sgp_node *s, pthread_t t);
/* Overlap: tell every peer still there that this node has finished. */
void sgp_bye_all(struct sgp_node *s);
/* 1 once the caller's stop flag is set. */
int sgp_stopping(const struct sgp_node *s);
#endif
