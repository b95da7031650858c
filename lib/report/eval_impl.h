/* eval_impl: what the parts of the evaluation module share (report/eval.h is its contract):
 * eval.c the metrics, eval_remote.c the client of a run's servers, eval_follow.c the loop that
 * follows a run while it trains. */
#ifndef GEM_EVAL_IMPL_H
#define GEM_EVAL_IMPL_H
#include "report/eval.h"
#include "wire/proto.h"

#define HEALTH_MAX_WAIT 0.5      /* poll at least this often while a server is away */
#define HEALTH_LONG_POLL 20.0    /* a long poll's wait at most (the server's cap is 30 s) */

/* eval_remote.c: θ from the params message in r->resp, with the progress its header records;
 * GET /v1/health once as a follower (wait > 0: a long poll of wait seconds). */
int eval_remote_decode(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
		  char *err);
int eval_remote_health(struct eval_remote *r, double wait, struct proto_health *h, char *err);

#endif
