/* vworker: a gem-work worker inside one process (gem-sim's virtual workers, a replay): its x,
 * its data feed, its half of the rule and its codec. Between two messages it computes what
 * gem-work computes, with the same training step (role/trainer) and rule half
 * (rules/worker_half), on a model instance lent by the caller, so that many workers share a few
 * models; and what crosses the wire goes through the same encoder and decoder as in gem-work and
 * gem-serve (role/feedback, wire/blob, and for θ the copies of wire/delta), so that a lossy codec
 * is modelled bit for bit. */
#ifndef GEM_VWORKER_H
#define GEM_VWORKER_H
#include <stdint.h>

#include "role/feedback.h"
#include "role/ps.h"
#include "role/trainer.h"
#include "rules/worker_half.h"
#include "run/slice.h"
#include "wire/blob.h"
#include "wire/delta.h"
#include "wire/msg.h"

/* A thread's scratch for the messages it models: a codec's buffers, n floats, and a message's
 * header line (to measure the message). */
struct vwire {
	struct blob_codec c;
	float *v;
	struct msg_buf head;
};

struct vworker {
	int id;
	int has_feed;
	size_t n;
	float *x;              /* its parameters: θ received, or its own x */
	const float *update;   /* the commit computed last (n floats, into l, x or sent), as the
			        * server decodes it; NULL: its codec could not encode it */
	struct rule_half l;
	struct feed f;
	uint64_t base;         /* the version of the θ it last received */
	float loss;            /* mean loss of the commit's steps */
	int diverged;          /* a step's loss was not finite: gem-work stops there */
	uint64_t got;          /* samples behind the commit */
	int steps;             /* local steps of the commit */
	struct feedback fb;    /* its commits' codec and error feedback */
	char *reply_codec;     /* the codec of what the server sends it (its own copy) */
	float *sent;           /* a lossy codec: its commit decoded */
	struct slice cut[SLICE_MAX]; /* the slices of θ its servers hold: a message per slice */
	struct delta dl[SLICE_MAX];  /* the copy of each slice it and its server hold (int8, int4,
				      * topk, and no reply codec of the server's) */
	int ncut;
	uint64_t seq;                /* its commits' number, as gem-work counts them */
	/* the bytes on the wire of each slice's message: of the commit computed last, and of the
	 * reply taken last (0: not measured), header included, as gem-work and gem-serve build them */
	uint64_t commit_bytes[SLICE_MAX], reply_bytes[SLICE_MAX];
};

/* n floats of scratch. */
int vwire_open(struct vwire *x, size_t n, char *err);
void vwire_close(struct vwire *x);

/* Worker id of run (its parameters laid out as lo): x and the rule's half allocated; no data
 * yet; raw messages to one server. */
int vworker_open(struct vworker *w, int id, const struct run *run, const struct layout *lo, char *err);
void vworker_close(struct vworker *w);
/* Its messages from now on: commits in codec (with error feedback; NULL: raw), replies in
 * reply_codec (NULL: blob_codec_for_theta(codec), θ as deltas from its copies when
 * delta_wanted(codec)), one message per slice of cut[0..ncut) (ncut 0: θ whole); w keeps copies
 * of the names. GEM_EUSAGE: a codec the rule cannot take (role/feedback). */
int vworker_codec(struct vworker *w, const struct run *run, const char *codec,
		  const char *reply_codec, const struct slice *cut, int ncut, char *err);
/* The server took it (j) and sent θ whole: its feed starts where the server saw it stop, x = θ
 * as received. Its feed's count and batch stay readable; its index arrays are released until
 * it computes. heads (NULL: not measured): each slice's reply header, as its server builds it,
 * for reply_bytes. */
int vworker_joined(struct vworker *w, const struct run *run, const struct dataset *ds,
		   const struct ps_joined *j, const float *theta, struct vwire *wire,
		   json_t *const *heads, char *err);
/* Compute the next commit on t's model: `steps` local steps, or (steps 0) steps until `samples`
 * samples are behind it (a replay's log says how many); encode and decode it with wire, and
 * measure its messages (commit_bytes). GEM_ENOMEM: its data's order could not be made again
 * (its feed's index arrays are held only while it computes). */
int vworker_compute(struct vworker *w, struct trainer *t, struct vwire *wire, int steps,
		    uint64_t samples, char *err);
/* The reply v: θ, or easgd's d when elastic, of the given version, as received; θ whole (its
 * copies start over) when whole (the reply to a resent commit); heads as vworker_joined's.
 * GEM_EFAIL (err says why): v cannot be encoded. */
int vworker_reply(struct vworker *w, struct vwire *wire, const float *v, int elastic, int whole,
		  uint64_t version, json_t *const *heads, char *err);
#endif
