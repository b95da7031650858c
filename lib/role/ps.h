/* ps: the parameter server's core, with no transport. It holds the rule (which holds θ) and θ's
 * version, keeps the record of every worker, decides every join, commit and leave (what is
 * applied, refused, held for a round, answered twice), makes their replies, logs them and
 * checkpoints. gem-serve's HTTP
 * handlers and gem-sim's virtual server both call it for every decision, so a simulated or
 * replayed run applies exactly what a served one does. Not thread-safe: the caller serialises
 * calls (gem-serve holds its lock, in commit arrival order). */
#ifndef GEM_PS_H
#define GEM_PS_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "role/progress.h"
#include "rules/rule.h"
#include "run/run.h"
#include "wire/proto.h"

#define PS_MAX_WORKERS RUN_MAX_WORKERS /* ids in [0, PS_MAX_WORKERS) */

struct ps_opts {
	uint64_t max_updates;  /* stop after this many central updates in all; 0: no limit */
	uint64_t steps;        /* > 0: the run's budget becomes this many steps per worker, stored */
	long max_staleness;    /* refuse commits staler than this (SSP); < 0: no bound */
	int keep_running;      /* don't stop when every worker has finished and left */
	double worker_timeout; /* a worker silent this long is gone; 0: never */
	double idle_timeout;   /* no commit this long: stop, failed; 0: never */
	int slice_i, slice_k;  /* serve slice i of k of θ (gem-serve --slice I/K, run/slice.h);
				* k = 0: all of θ */
	const char *reply_codec; /* gem-serve --codec (NULL: none): in the start event, for a replay */
};

/* What a request came to. The negative ones are refusals (gem-protocol(7) gives each its HTTP
 * status); a refused commit changes nothing but the worker's refusal count. */
enum ps_status {
	PS_APPLIED = 0,    /* θ moved (or a round closed); the reply is θ, or easgd's d */
	PS_PENDING = 1,    /* held for its round (sync, dma): the reply is θ once the round closes */
	PS_DUPLICATE = 2,  /* a commit sent again (seq already seen): nothing applied; reply θ */
	PS_STALE = 3,      /* staler than --max-staleness: not applied; reply θ to recompute at */
	PS_RESENT = 4,     /* the held commit sent again while its round is open: nothing applied;
			    * it waits for the round in the first one's place, as PS_PENDING */
	PS_E_STOPPING = -1,
	PS_E_FULL = -2,
	PS_E_UNKNOWN = -3, /* no such worker, or not joined */
	PS_E_REFUSED = -4, /* the rule refused it (a second commit in a round, a base ahead...) */
	PS_E_NON_FINITE = -5,
	PS_E_NOMEM = -6,
	PS_E_NON_FINITE_RESULT = -7, /* finite, but applied it would make θ or the rule's state
				      * non-finite (an overflow): refused, nothing changed */
	PS_E_RESENT = -8, /* gem-serve: a held commit sent again; the round's reply goes to the resend */
	PS_E_REJOINED = -9, /* gem-serve: a held commit whose worker joined again meanwhile: its
			     * session is over (its update stays in the round), no reply */
};

/* The short error code of a refusal ("stopping", "full", ...), for the protocol and the log. */
const char *ps_status_code(int status);

/* The answer to a join. */
struct ps_joined {
	int worker;
	int rejoin;       /* the worker had committed before */
	uint64_t version; /* of θ, copied to the caller's buffer */
	uint64_t seq, commits, samples; /* what the server saw of it so far */
	int part_i, part_n;   /* its data part when the run splits its data (part_n 0: no) */
	int window;           /* dynamic local updates: the inner steps it is to take (H until its
			       * speed is known; 0: none said) */
};

/* One commit: the update (Δθ, easgd's x, dma's Δ), n floats. */
struct ps_commit {
	int worker;
	uint64_t base;    /* the version the update was computed from */
	uint64_t seq;     /* the worker's commit number (0: none) to recognise a resend */
	uint64_t samples; /* training samples behind it */
	float loss;       /* NaN: none */
	double idle;      /* dma: seconds the worker waited; < 0: not said */
	const float *update;
	int checked;      /* the caller has already run ps_check_update on it */
	uint64_t bytes;   /* its message's bytes on the wire, header included (0: none sent) */
	int fragment;     /* rule.fragments > 1: the fragment p it is (rule_commit_fragment); update
			   * is that slice of θ only, layout_slice(n, p, P), and the reply holds it
			   * at its place in θ */
};

/* The answer to a commit or a leave. */
struct ps_reply {
	int status;        /* enum ps_status */
	uint64_t version;  /* θ's after the call */
	uint64_t tau;      /* this commit's staleness: version before it − base */
	int elastic;       /* the reply vector is easgd's d (blob "elastic"), not θ */
	int round_closed;  /* a round completed: workers held in it may have θ now */
	int window;        /* dynamic local updates: the inner steps the worker is to take next
			    * (rule_dynamic_window; 0: none said) */
	const struct rule_stats *st; /* the applied update's statistics (valid until the next call) */
};

struct ps;

/* Open RUNDIR (locked): θ from params.gem (or a newer rule-state.gem), the rule and the
 * workers from rule-state.gem when it is of θ's version, the log for appending. */
int ps_open(const char *rundir, const struct ps_opts *o, struct ps **out, char *err);
/* Free everything (no checkpoint: call ps_checkpoint first). */
void ps_close(struct ps *s);
const struct run *ps_run(const struct ps *s);
size_t ps_nparams(const struct ps *s);
uint64_t ps_version(const struct ps *s);
/* θ's progress now (elapsed includes this session). */
struct run_progress ps_progress(const struct ps *s);
/* θ into out (n floats). */
void ps_copy_theta(const struct ps *s, float *out);
/* The virtual time of the log's next lines (gem-sim); < 0 (the default): none. */
void ps_set_vtime(struct ps *s, double vtime);
/* The log (gem-sim adds its own "sim" event). */
FILE *ps_log(struct ps *s);

/* The "start" event, with the server's URL (NULL: none). */
void ps_log_start(struct ps *s, const char *url);
/* The "stop" event and a final flush. */
void ps_log_stop(struct ps *s, const char *reason);
/* θ and the rule's state to RUNDIR, atomically: ps_checkpoint_take then ps_checkpoint_write. */
int ps_checkpoint(struct ps *s, char *err);
/* The two halves, for a server that writes outside its lock: take a snapshot into ck (memory
 * only, under the lock; flushes the log), then write it (the files, fsync'd; no lock needed,
 * but one writer at a time, and snapshots written in the order taken). */
int ps_checkpoint_take(struct ps *s, struct run_ckpt *ck, char *err);
int ps_checkpoint_write(const struct ps *s, const struct run_ckpt *ck, char *err);

/* Worker `worker` (-1: a new id; once every id has been had, that of a worker long gone)
 * joins, committing in codec (its name as the worker gave it, in the join event for a replay;
 * NULL: not said): θ into theta_out (n floats; NULL: not now). Returns PS_APPLIED or a refusal
 * (err says why). */
int ps_join(struct ps *s, int worker, const char *codec, float *theta_out, struct ps_joined *j,
	    char *err);
/* Worker `worker`'s record starts over, as the record of a new worker that ps_join gave its id
 * once every id had been had (its join event says "new"; a replay calls this before that join).
 * PS_E_REFUSED if the worker is joined or the rule holds its state. */
int ps_forget(struct ps *s, int worker, char *err);
/* What worker means to train in the session it has joined for (gem-work --steps or --epochs;
 * both 0: the run's budget), for the progress's total. */
void ps_plan(struct ps *s, int worker, uint64_t steps, uint64_t epochs);
/* The bytes of the rule's state (rule_state_bytes: θ's buffers, every worker's vectors). */
size_t ps_rule_bytes(const struct ps *s);
/* What ps_join of worker id (< 0: a new one) would add to ps_rule_bytes: 0 for a worker whose
 * state the rule kept. */
size_t ps_join_bytes(const struct ps *s, int id);
/* The check every update gets, of its n floats (all finite): PS_APPLIED or PS_E_NON_FINITE. */
int ps_check_update(const float *u, size_t n, char *err);
/* Apply commit c. out (n floats) receives the reply's vector: θ, or easgd's d when r->elastic
 * (written in the rule's pass); undefined after a refusal, and after PS_PENDING until
 * ps_reply_held. */
int ps_commit(struct ps *s, const struct ps_commit *c, float *out, struct ps_reply *r, char *err);
/* Worker's session: its joins so far (0: unknown). A commit held for its round waits only while
 * the session it came in lasts: a join under its id (a restarted worker, or one that gave up
 * waiting) ends it, and the held commit is answered PS_E_REJOINED. */
uint64_t ps_session(const struct ps *s, int worker);
/* 1 if worker's commit seq is held for its round and the round is open: that commit sent again
 * is PS_RESENT (its update not read, nothing applied). */
int ps_held_resend(const struct ps *s, int worker, uint64_t seq);
/* The reply of a commit held for its round (PS_PENDING) once the round has closed: its vector
 * (θ) into out, r->version the round's. */
void ps_reply_held(const struct ps *s, float *out, struct ps_reply *r);
/* A reply of bytes (its message, header included) to a commit or a join went out: counted in
 * the next update line of the log and in ps_now. */
void ps_sent(struct ps *s, uint64_t bytes);
/* The header of the reply to a commit (gem-protocol(7)): θ's version, the commit's τ, and
 * whether it was applied or held for its round (a new reference; NULL: out of memory). gem-serve
 * sends it, gem-sim and a replay measure their replies with it. */
json_t *ps_commit_reply_head(const struct ps_reply *r, int applied);
/* The header of the reply to a join: what the server saw of the worker so far (as above). */
json_t *ps_join_reply_head(const struct ps_joined *j);
/* Add to a reply's header head, from a slice's server, the slice of θ its vector is
 * ("theta_slice", ps_theta_slice): 0, or -1 when out of memory (head NULL too). */
int ps_reply_sliced(const struct ps *s, json_t *head);
/* How a worker left: to come back, having spent its budget, or having diverged (its loss was not
 * finite: it will not come back, and the run fails once every worker has left). */
enum { PS_LEFT_PAUSED = PROTO_LEFT_PAUSED, PS_LEFT_DONE = PROTO_LEFT_DONE,
       PS_LEFT_DIVERGED = PROTO_LEFT_DIVERGED }; /* the protocol's leave */
/* Worker `worker` leaves (how: PS_LEFT_*; loss: the loss a diverged worker saw, NaN if it did
 * not say) or, with gone, was declared gone. */
int ps_leave(struct ps *s, int worker, int how, float loss, int gone, struct ps_reply *r,
	     char *err);
/* Log a refusal decided outside the core (a bad message): worker -1 if unknown. */
void ps_refused(struct ps *s, int worker, const char *reason);

/* Declare gone the workers silent for worker_timeout; stop as failed after idle_timeout with no
 * commit. Calls back gone(ctx, worker, seconds) for each (may be NULL). */
void ps_liveness(struct ps *s, void (*gone)(void *ctx, int worker, double silent), void *ctx);
/* Ask the run to stop (the first reason stays). */
void ps_stop(struct ps *s, const char *why);
/* Why the run stops, or NULL while it goes on. */
const char *ps_stopping(const struct ps *s);
/* 1 if the stop is a failure (idle timeout). */
int ps_failed(const struct ps *s);
/* Workers connected now. */
int ps_active(const struct ps *s);
/* A held worker waits for its round (it is not silent meanwhile). */
void ps_waiting(struct ps *s, int worker, int waiting);

/* Where the run stands, for a status line and a summary. */
struct ps_now {
	struct progress_now p;  /* version, samples out of the run's total, rates, ETA, loss */
	double elapsed;         /* training seconds (while a worker is joined), every session */
	uint64_t updates;       /* applied in this session */
	int active, known, done; /* workers joined now, ever seen, that spent their budget */
	int slowest;            /* the joined worker with the fewest samples/s (-1: none yet) */
	double slowest_rate;    /* its samples/s in this session */
	uint64_t bytes_in, bytes_out; /* bytes of the commits, and of the replies to them and to the
				       * joins, in this session */
};
void ps_now(const struct ps *s, struct ps_now *st);
/* The run's total of samples, for the progress, when the caller knows it better than the run's
 * budget × the workers expected (gem-sim: its workers and their budgets). */
void ps_set_total(struct ps *s, uint64_t total);

/* GET /v1/health's fields (beside "ok") and GET /v1/stats's object (new references), whose
 * "progress" is ps_now's. */
json_t *ps_health_json(const struct ps *s);
json_t *ps_stats_json(const struct ps *s);
/* The slice of θ a server serves, as every reply of a slice server names it (k = 0: the server
 * holds the whole of θ). */
void ps_slice(const struct ps *s, struct proto_slice *out);
#endif
