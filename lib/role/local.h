/* local: local training as an object: sequential steps of the run's optimiser (momentum SGD,
 * or AdamW) on a run directory, GEM's proxy and gem-work --local. local_open locks the run and
 * resumes θ from params.gem and the momentum or moments from the optimiser's state of the same
 * version; local_run trains with trainer_step (the feed
 * of TRAINER_LOCAL, where θ's samples put it), logs every update to log.jsonl, checkpoints
 * every checkpoint_every seconds and at the end; local_close frees it. Nothing here prints (but
 * log warnings), installs a signal handler or exits: the caller sets *stop. */
#ifndef GEM_ROLE_LOCAL_H
#define GEM_ROLE_LOCAL_H
#include <stdint.h>

#include "base/prog.h"
#include "role/progress.h"
#include "role/trainer.h"

struct local_opts {
	struct train_opts t;     /* the budget, the data part and the slowdown (no server, token,
				  * certificate or codec: nothing is sent) */
	double checkpoint_every; /* seconds between checkpoints; 0: only at the end */
};

/* Where the run stands at local_open. */
struct local_info {
	int epochs;       /* the run's budget, in epochs */
	uint64_t steps;   /* or, when not 0, in steps */
	uint64_t epoch;   /* samples in one epoch (of the part) */
	uint64_t version; /* θ's, from params.gem */
	uint64_t samples; /* consumed by θ's updates */
	int spent;        /* the budget is spent already: local_run trains nothing */
};

/* Why local_run returned. */
enum local_end {
	LOCAL_BUDGET,   /* --epochs, --steps or the run's budget is done; θ saved */
	LOCAL_SPENT,    /* the budget was spent before: nothing trained, nothing written */
	LOCAL_STOPPED,  /* *stop was set; θ saved */
	LOCAL_DIVERGED, /* a step's loss was not finite; θ stays at the last checkpoint */
};

/* Where local_run stands (to the progress callback, after each update) or how it ended. */
struct local_result {
	enum local_end end;
	uint64_t steps;   /* updates of this session */
	uint64_t samples; /* samples of this session */
	uint64_t version; /* θ's version (LOCAL_DIVERGED: of the last update that did not diverge) */
	uint64_t total;   /* samples consumed by θ's updates, over every session */
	float loss;       /* of the last step (LOCAL_DIVERGED: the one that diverged) */
	double seconds;   /* of training in this session */
	struct progress_now p; /* to the progress callback: out of the budget's samples (of --steps
				* full batches), rates, ETA, smoothed loss */
};

typedef void (*local_progress_fn)(const struct local_result *now, void *ctx);

struct local;

/* Open and lock the run in rundir, with θ and the optimiser's state where it stopped. GEM_EUSAGE:
 * rundir is not a run; GEM_EFAIL: it is locked, its params, model or data cannot be loaded. */
int local_open(const char *rundir, const struct local_opts *o, struct local **out, char *err);
const struct local_info *local_info(const struct local *l);
/* Train until the budget is spent, *stop is set (stop may be NULL) or the loss diverges; save θ
 * and the optimiser's state unless it diverged. progress (may be NULL) is called after every
 * update. Returns 0 with *r saying why it ended, or a negative code (err says why: the final
 * save failed). */
int local_run(struct local *l, prog_stop_flag *stop, local_progress_fn progress, void *ctx,
	      struct local_result *r, char *err);
/* Unlock the run and free everything; NULL is a no-op. */
void local_close(struct local *l);
#endif
