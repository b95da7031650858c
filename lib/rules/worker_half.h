/* worker_half: the worker's half of a rule (rule_half_*), the same in gem-work and gem-sim.
 * Between two commits the worker takes the rule's window of local steps from its x, commits one
 * vector (Δθ, its x, or dma's cycle delta: the rule's descriptor says which) and folds the
 * server's reply into x. Each call is pure arithmetic over n floats; nothing here sends or
 * allocates after init. */
#ifndef GEM_RULES_WORKER_HALF_H
#define GEM_RULES_WORKER_HALF_H
#include <stddef.h>
#include <stdint.h>

#include "nn/optim.h"
#include "rules/rule.h"

struct rule_half {
	const struct rule_desc *d;
	enum rule_sends sends; /* what it commits: rule_sends_of the rule's config */
	size_t n;
	int window; /* local steps per commit */
	float lr;
	float *x0;    /* x where the window (dma: the cycle) started */
	float *delta; /* the vector committed */
	float *xg;    /* dma: X_j, the newest global model received */
	int plain;    /* the local step is x − lr·∇ (below); else it is opt's */
	/* streaming (fragments P > 1 or a mix α > 0, diloco's and async-diloco's): x0 holds each
	 * fragment's θ as last received, and a commit is one fragment's slice of θ */
	int streams;
	int nfrag;    /* P */
	float mix;    /* α */
	int frag;     /* the fragment of the next commit */
	int sent;     /* the fragment of the commit computed last (rule_half_commit) */
	size_t off, len; /* its slice of θ: [0, n) when not streaming */
	int overlap;  /* T: a reply is held, and mixed in after T local steps of the next window */
	float *held;  /* the reply's θ[p] held (len floats) */
	int holding;  /* held has a reply not mixed in yet */
	int k;        /* local steps taken since the last commit (rule_half_begin: of this window) */
	struct optim opt; /* the local optimiser when not plain */
};

/* The half of rule c for the parameters laid out as lo, whose local optimiser is oc (the
 * run's): momentum SGD for the rules whose workers take its steps (dma's cycles, diloco's and
 * async-diloco's inner steps); for the others SGD without momentum or weight decay (the server
 * keeps the momentum), which with a constant rate and no clipping is the plain step; AdamW as
 * oc says for every rule. The moments stay here, on the worker. */
int rule_half_init(struct rule_half *l, const struct rule_config *c, const struct layout *lo,
		   const struct optim_config *oc, char *err);
void rule_half_free(struct rule_half *l);
/* x is θ as the server just handed it over at a join: the worker starts (over) from it, its
 * momentum or moments at 0, its schedule at `step` of a cosine that ends at `total` (the steps
 * it has taken in the run, and its budget), its first commit fragment 0. */
void rule_half_start(struct rule_half *l, const float *x, uint64_t step, uint64_t total);
/* x was θ at version (a join's): with rounds, whose round at version synchronises fragment
 * version mod P, the next commit is that fragment; without, a worker starts at 0. */
void rule_half_schedule(struct rule_half *l, uint64_t version);
/* Before the first local step of a commit. With an overlap T, the reply held is mixed into x
 * after the T-th step (rule_half_step), or before the commit if the window is shorter. */
void rule_half_begin(struct rule_half *l, const float *x);
/* One local step with gradient g taken at x (x may move; g may be clipped in place). */
void rule_half_step(struct rule_half *l, float *x, float *g);
/* 1 when the worker has just taken the overlap's T-th local step since its commit: a reply held
 * was mixed in there, and one still in flight (gem-work's) is to be waited for there. */
int rule_half_due(const struct rule_half *l);
/* The vector to commit after the window (n floats; dma also moves x: x = X_j + Δ). Streaming:
 * fragment l->sent's l->len floats, u[p] = x[p] − x0[p]; the next commit is the next fragment. */
const float *rule_half_commit(struct rule_half *l, float *x);
/* The reply's vector v: θ (x ← θ), easgd's d when elastic (x ← x − d), or for dma X_{j+1}
 * (kept for the next boundary). Streaming: v is fragment l->sent's θ[p], l->len floats:
 * x0[p] ← θ[p] and x[p] ← α·x[p] + (1 − α)·θ[p], at once, or with an overlap T held and mixed
 * in after T local steps of the next window (x[p] as it is then); a reply that comes once
 * those T steps are taken (rule_half_due: gem-work's, in flight while it trained) is mixed in
 * at once, into the same x[p]. */
void rule_half_reply(struct rule_half *l, float *x, const float *v, int elastic);
#endif
