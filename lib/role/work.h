/* work: a worker of a gem-serve run as an object. work_open joins the server (token, GET
 * /v1/run, model and data, POST /v1/join); work_run trains: every step is trainer_step (the
 * worker's feed continues where the server saw it stop) and the rule's worker half is
 * rules/worker_half (window, what is committed, what the reply does, dma's cycle); dma's commits
 * and those of an overlap go out on a thread of their own while the next window trains;
 * work_close frees it. Nothing here prints (but log warnings), installs a signal handler or
 * exits: the caller's handler sets *stop, which work_run polls. */
#ifndef GEM_WORK_H
#define GEM_WORK_H
#include <jansson.h>
#include <stdint.h>

#include "base/prog.h"
#include "role/trainer.h"

struct work_opts {
	struct train_opts t; /* the codec: of commits (θ replies: blob_codec_for_theta) */
	int worker_id;     /* -1: a new id from the server */
	double checkpoint_every;
	/* Seconds a request waits for its reply (0: no limit): a commit's reply comes when its
	 * round closes, which waits for the slowest worker. Past it the commit fails (or, within
	 * retry_for, is sent again) and the error names gem-work's --round-timeout. */
	double round_timeout;
	uint64_t die_after; /* > 0: work_run returns after this many commits, without leaving */
	int quiet;         /* for the caller: the library prints nothing anyway */
	/* Called once when the server does not answer the first request (may be NULL): the worker
	 * retries for retry_for seconds, and the caller may say so. */
	void (*waiting)(void *ctx, const char *url, double retry_for);
	void *waiting_ctx;
};

/* What the worker is, once joined. */
struct work_info {
	int worker;         /* its id */
	const char *rule;   /* the run's rule */
	uint64_t epoch;     /* samples in one epoch of its data (its part) */
	int part_n;         /* parts of the training set (1: the whole set) */
	int background;     /* the rule commits in the background (dma): idle times mean something */
};

/* Why work_run returned. */
enum work_end {
	WORK_BUDGET,       /* --epochs, --steps or the run's budget is spent; left as done */
	WORK_SERVER_ENDED, /* the server ended the run (410); left as done if the budget is spent */
	WORK_STOPPED,      /* *stop was set; left, not done */
	WORK_DIVERGED,     /* a step's loss was not finite (loss says which); left, not done */
	WORK_DIE_AFTER,    /* die_after commits made: returned at once, without a word to the server */
};

/* Where work_run stands (to the progress callback, after each commit) or how it ended. */
struct work_result {
	enum work_end end;
	uint64_t steps;    /* local steps of this session */
	uint64_t commits;  /* commits of this session */
	uint64_t samples;  /* samples of the worker's commits, this session's and the earlier ones
			    * the server counted at join */
	uint64_t version;  /* θ's version last received */
	float loss;        /* mean loss of the last window (WORK_DIVERGED: the step's) */
	double seconds;    /* since work_run began */
	double idle;       /* background commits (dma, an overlap): seconds blocked waiting for a
			    * reply */
	double idle_last;  /* of which at the end, waiting for the last round */
	double commit_seconds; /* spent in this session's commits by the training thread: encode,
				* round trip (background ones: the wait for it), decode of the reply */
	double encode_seconds; /* CPU seconds encoding the commits (the codec, error feedback, framing) */
	uint64_t commit_sent, commit_received; /* their messages' bytes, each way */
	int unfinished;    /* the budget (--epochs, --steps, the run's) was not spent: the worker
			    * left as not done, and comes back to it under its id */
	uint64_t target;   /* samples at which the budget is spent (UINT64_MAX with --steps) */
};

typedef void (*work_progress_fn)(const struct work_result *now, void *ctx);

struct worker;

/* Sleep so that a step that took step_seconds takes factor times as long. */
void work_slowdown(double step_seconds, double factor);
/* Join the gem-serve at url. GEM_EUSAGE: the token file, the CA file or the URL is bad (a CA
 * file with an http:// URL too); GEM_EFAIL: the server
 * could not be reached or refused, the run or its data could not be loaded. */
int work_open(const char *url, const struct work_opts *o, struct worker **out, char *err);
const struct work_info *work_info(const struct worker *w);
/* Train until the budget is spent, the server ends the run, *stop is set (stop may be NULL),
 * the loss diverges or die_after commits are made; then leave (but after die_after). progress
 * (may be NULL) is called after each commit. Returns 0 with *r saying why it ended, or a
 * negative code (err says why; *r as far as it got; the worker left, not done). */
int work_run(struct worker *w, prog_stop_flag *stop, work_progress_fn progress, void *ctx,
	     struct work_result *r, char *err);
/* Free everything (waits for a commit still in flight after WORK_DIE_AFTER). NULL is a no-op. */
void work_close(struct worker *w);
#endif
