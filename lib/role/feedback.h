/* feedback: a worker's commits in its codec, the same in gem-work and gem-sim (role/vworker): which
 * codec a rule's commits can take, the error feedback of a lossy one (blob_encode_feedback's
 * residual, one per worker, cut as θ is cut across slices) and when it starts over. gem-sim
 * models a worker bit for bit only because both go through here. */
#ifndef GEM_FEEDBACK_H
#define GEM_FEEDBACK_H
#include <stddef.h>

#include "rules/rule.h"
#include "wire/blob.h"

struct feedback {
	char *codec;       /* the commits' codec, as a sender names it ("topk:0.01"); f's own
			    * copy: a caller's name may not outlive f (a replay's, from a log line) */
	float *resid;      /* what the codec has not sent yet, n floats; NULL when it is lossless
			    * or the rule commits x whole (easgd: its rounding does not add up) */
	size_t n;
};

/* For a worker of the rule described by d, n parameters, committing in codec (NULL: raw; f
 * keeps a copy). GEM_EUSAGE: not a codec a sender can use, or one the rule cannot take (topk,
 * with a rule that commits the worker's whole x); GEM_ENOMEM. feedback_close frees f even then. */
int feedback_open(struct feedback *f, const char *codec, const struct rule_desc *d, size_t n,
		  char *err);
void feedback_close(struct feedback *f);
/* The worker (re)joins the server of elements [off, off + len): it starts over from θ there, and
 * what it had not sent goes with what it computed before. */
void feedback_restart(struct feedback *f, size_t off, size_t len);
/* The commit message's blob of the slice [off, off + len) of v (the whole commit vector) in f's
 * codec, with error feedback: blob_encode_feedback on c. */
int feedback_encode(struct feedback *f, struct blob_codec *c, const float *v, size_t off,
		    size_t len, const void **out, struct blob_meta *meta, char *err);
#endif
