/* replay: re-run a real run from its log in one process. The log of gem-serve (or gem-sim)
 * names every decision of the server in the order it took them: joins, commits (applied, held
 * for a round, refused as stale, resent), leaves, stops. Replaying that order through the same
 * server core (role/ps) with the same workers (role/vworker) gives the same θ, bit for bit: a
 * crash or a divergence seen on a cluster can be re-run and debugged on one machine. */
#ifndef GEM_REPLAY_H
#define GEM_REPLAY_H
#include <stdint.h>

#include "base/prog.h"

struct replay_summary {
	uint64_t version, samples; /* θ's at the end */
	uint64_t lines, commits;   /* log lines read, commits recomputed */
	int workers;               /* workers that joined */
	double seconds;            /* wall time of the replay */
};

/* Replay the log at logpath into newrun. A newrun that is not a run yet is made from the run
 * beside the log (its run.json, θ₀ from its seed, as gem-init makes it). GEM_EUSAGE: a log or
 * a run that cannot be replayed (a rule whose workers commit in the background, a log of local
 * training, a server killed without its final checkpoint), said in err; GEM_EFAIL: the replay
 * went another way than the log (the line is named) or I/O. stop (may be NULL): a signal ends
 * it early, θ saved. */
int replay_run(const char *logpath, const char *newrun, prog_stop_flag *stop,
	       struct replay_summary *sum, char *err);
#endif
