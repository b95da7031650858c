/* work: what a worker does besides computing gradients: its options, the loop against a
 * parameter server (join, compute the rule's local update, commit, continue from the reply),
 * and fault injection for experiments. */
#ifndef GEM_WORK_H
#define GEM_WORK_H
#include <stdint.h>

struct work_opts {
	int epochs;        /* 0: the run's budget */
	uint64_t steps;    /* 0: no step limit */
	int shard_i, shard_n, shard_set;
	int worker_id;     /* -1: a new id from the server */
	const char *token_file;
	double retry_for;  /* seconds to keep retrying an unreachable server */
	double checkpoint_every;
	double slowdown;   /* >= 1: each step takes this many times as long */
	uint64_t die_after; /* > 0: die (SIGKILL) after this many commits, as a crash would */
	int quiet;
};

/* Sleep so that a step that took step_seconds takes factor times as long. */
void work_slowdown(double step_seconds, double factor);

/* Train as one worker of the gem-serve at url; returns a process exit status. */
int work_serve(const char *url, const struct work_opts *o);
#endif
