/* vworker: a gem-work worker inside one process (gem-sim's virtual workers, a replay): its x,
 * its data feed and its half of the rule. Between two messages it computes what gem-work
 * computes, with the same training step (role/trainer) and rule half (rules/local), on a model
 * instance lent by the caller, so that many workers share a few models. */
#ifndef GEM_VWORKER_H
#define GEM_VWORKER_H
#include <stdint.h>

#include "role/ps.h"
#include "role/trainer.h"
#include "rules/local.h"

struct vworker {
	int id;
	int has_feed;
	size_t n;
	float *x;              /* its parameters: θ received, or its own x */
	const float *update;   /* the commit computed last (n floats, into l or x) */
	struct rule_local l;
	struct feed f;
	uint64_t base;         /* the version of the θ it last received */
	float loss;            /* mean loss of the commit's steps */
	int diverged;          /* a step's loss was not finite: gem-work stops there */
	uint64_t got;          /* samples behind the commit */
	int steps;             /* local steps of the commit */
};

/* Worker id of run (its parameters laid out as lo): x and the rule's half allocated; no data
 * yet. */
int vworker_open(struct vworker *w, int id, const struct run *run, const struct layout *lo, char *err);
void vworker_close(struct vworker *w);
/* The server took it (j) and sent θ: its feed starts where the server saw it stop, x = θ. */
int vworker_joined(struct vworker *w, const struct run *run, const struct dataset *ds,
		   const struct ps_joined *j, const float *theta, char *err);
/* Compute the next commit on t's model: `steps` local steps, or (steps 0) steps until `samples`
 * samples are behind it (a replay's log says how many). */
void vworker_compute(struct vworker *w, struct trainer *t, int steps, uint64_t samples);
/* The reply v: θ, or easgd's d when elastic, of the given version. */
void vworker_reply(struct vworker *w, const float *v, int elastic, uint64_t version);
#endif
