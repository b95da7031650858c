/* sim_impl: what the parts of gem-sim's simulator share (role/sim.h is its contract): sim.c
 * runs the simulation, sim_opts.c reads its options, sim_queue.c keeps the event queue and the
 * server model (each slice's host a queue), sim_stats.c the statistics it ends with. */
#ifndef GEM_SIM_IMPL_H
#define GEM_SIM_IMPL_H
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "nn/data.h"
#include "role/ps.h"
#include "base/grow.h"
#include "role/sim.h"
#include "role/trainer.h"
#include "role/vworker.h"
#include "run/slice.h"

#define LOSS_TAIL 100

/* The event queue: a binary heap ordered by (time, sequence number). */
enum { EV_JOIN, EV_COMMIT, EV_LEAVE, EV_DIE };

struct event {
	double t;
	uint64_t seq; /* ties go in the order the events were made: deterministic, and FIFO */
	int kind, worker, done;
};

struct heap {
	struct event *a;
	size_t n, cap;
};

/* The simulation. */

/* Where a worker's next commit stands. Guarded by sim.mu once threads run. */
enum { W_WAIT, W_READY, W_RUNNING, W_DONE };

/* One virtual worker: a gem-work (vworker) and its timing. */
struct simw {
	struct vworker v;
	int open, started, joined, ended, pending;
	int state;
	double start_at, die_at, send_at;
	double slow;             /* step-time factor: the straggler factor or 1 */
	int nsteps;              /* local steps of the next commit */
	int crc;                 /* its computing's result: 0, or GEM_ENOMEM */
	uint64_t planned, steps; /* samples and local steps of the commits planned so far */
	uint64_t target;         /* its budget of samples (UINT64_MAX with --steps) */
	size_t shadow_pos;       /* the data position within an epoch as the planning sees it */
	uint64_t ready_seq;      /* its entry in sim.ready, made when it last became READY */
	struct rng timing;
};

struct helper_arg {
	struct sim *s;
	int i;
};

struct sim {
	const struct sim_opts *o;
	struct ps *ps;             /* slice 0's core: the version, the log's sim events, progress */
	struct ps *core[SLICE_MAX]; /* --slices K: a core per slice of θ */
	struct slice cut[SLICE_MAX];
	int ncores;
	const struct run *run;
	size_t n;
	float *reply;
	struct dataset ds;
	struct simw *w;
	int nw;
	struct heap q;
	/* with helper threads: the READY workers by send_at (an event's t; its seq the worker's
	 * ready_seq, its worker the index), entries of workers since taken left until popped */
	struct heap ready;
	uint64_t ready_seq;
	uint64_t seq;
	double server_free, vnow, t0, last_progress, last_flush;
	int ndone;
	int total_set;            /* the progress's total, known once a worker has joined */
	struct sim_summary sum;

	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	int nthreads, nhelpers, stop_threads;
	pthread_t *tid;
	struct helper_arg *args;
	struct trainer *tr; /* one model instance per gradient thread */
	struct vwire *wire; /* and its messages' codec scratch (the main thread's: [0]) */

	float loss_ring[LOSS_TAIL];
	int ring_n, ring_i;
	float *pi_meds;
	size_t npi, pi_cap;
	double scale_sum, zero_sum, tau_sum;
	uint64_t scale_n;

	/* the server model: when each slice host's link in, link out and CPU are next free, and
	 * for how long each has been busy; the staleness of each update, each commit's wait */
	double link_in[SLICE_MAX], link_out[SLICE_MAX], cpu[SLICE_MAX];
	double busy_in[SLICE_MAX], busy_out[SLICE_MAX], busy_cpu[SLICE_MAX];
	uint64_t *taus;
	size_t ntau, tau_cap;
	double *waits, wait_sum;
	size_t nwait, wait_cap;
};

/* qsort's order of doubles. */
static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* sim_queue.c: the event queue's push and pop; the server model: when the servers take a
 * commit of slices bytes[k] arriving at t (its CPU's start in *start), a join or a leave, and
 * when worker w's reply, leaving at t, has arrived */
int sim_heap_push(struct heap *h, struct event e);
struct event sim_heap_pop(struct heap *h);
double sim_server_take(struct sim *s, double t, const uint64_t *bytes, double *start, double *wait);
double sim_server_next(struct sim *s, double t);
double sim_reply_at(struct sim *s, const struct simw *w, double t);

/* sim_stats.c: the options as the log's "sim" event; an update's loss and statistics counted;
 * the summary made at the end */
void sim_log_options(struct sim *s);
int sim_summary_add(struct sim *s, float loss, const struct rule_stats *st);
void sim_summarise(struct sim *s);

#endif
