/* sim: many asynchronous workers of one run, simulated in one process on a virtual clock.
 * Each virtual worker is a gem-work (role/vworker: the same training step and rule half, its
 * own data order, dropout and stale θ); their commits reach gem-serve's own core (role/ps) one
 * at a time in order of arrival (FIFO), which decides and logs them as it does in gem-serve
 * (log.jsonl, with vtime). When a worker's message arrives follows from a timing model: step
 * times, stragglers, latency, server time, deaths and late joins. Nothing depends on the wall
 * clock or on the number of threads: the same run and options give the same log and θ, bit for
 * bit. Threads only compute independent gradients (those of workers that already hold their θ)
 * ahead of time. */
#ifndef GEM_SIM_H
#define GEM_SIM_H
#include <stddef.h>
#include <stdint.h>

#include "base/prog.h"
#include "role/ps.h"

#define SIM_MAX_WORKERS PS_MAX_WORKERS

struct ps_now;

/* A distribution of step times, in virtual seconds. */
enum { SIM_CONST, SIM_NORMAL, SIM_LOGNORMAL };
struct sim_dist {
	int kind;
	double a, b; /* const: T, –; normal: mean, sd (negative draws become 0); lognormal: μ, σ */
};

/* Worker `worker` stops at virtual time `at` (its work in progress is lost; it leaves). */
struct sim_death {
	int worker;
	double at;
};

struct sim_opts {
	int nworkers;             /* workers 0..N−1, started at time 0 */
	uint64_t steps;           /* local steps per worker; 0: the run's budget of epochs */
	struct sim_dist step;     /* time of one local step (minibatch) */
	double jitter;            /* each step time × U(1−J, 1+J), J in [0, 1); 0: none */
	double speed_spread;      /* σ_w: worker w's step times × e^(σ_w z_w), z_w ~ N(0, 1); 0: none */
	int stragglers;           /* workers 0..K−1 ... */
	double straggler_factor;  /* ... take F times as long per step */
	double latency;           /* seconds a message takes, each way */
	double server_time;       /* seconds the server spends on one commit */
	/* The server as a queue (off while cost_a, cost_b and bandwidth are 0): each slice's host
	 * takes a commit's slice of n_k parameters through its link (FIFO, bytes/bandwidth seconds,
	 * the bytes of the message as the virtual worker encodes it: header and blob), then its CPU
	 * (FIFO, server_time + cost_a·n_k + cost_b seconds); its reply goes out through the link
	 * the same way, in the bytes it was encoded to. */
	double cost_a, cost_b;
	double bandwidth;         /* bytes/s of each server host's link, each way; 0: no limit */
	const struct sim_death *deaths;
	int ndeaths;
	const double *joins;      /* a new worker (ids N, N+1, ... in time order) joins at each time */
	int njoins;
	int threads;              /* gradient threads (>= 1), each with its own model instance */
	int slices;               /* K > 1: θ served by K cores in this process, one per slice (as
				   * gem-serve --slice I/K), each with its own files; 0, 1: one */
	const char *codec;        /* the workers' commits' codec (gem-work --codec; NULL: raw), with
				   * gem-work's error feedback and replies in blob_codec_for_theta */
	/* Called about 20 times a second of wall time and once at the end (may be NULL), with
	 * where the run stands (out of the simulation's total of samples) and its virtual time;
	 * for a progress line. */
	void (*progress)(void *ctx, const struct ps_now *now, double vtime);
	void *progress_ctx;
	/* When *stop becomes non-zero (a signal), the simulation ends early and saves θ (may be
	 * NULL). */
	prog_stop_flag *stop;
};

/* What a simulated run did. */
struct sim_summary {
	uint64_t version, samples; /* central updates and training samples, as in params.gem */
	uint64_t updates;          /* updates applied by this simulation */
	double vtime;              /* virtual time of the last event */
	double seconds;            /* wall time of the simulation */
	int workers;               /* workers started */
	int finished, died, failed; /* workers that spent their budget, were killed (--die), stopped
				     * on a diverged loss or a non-finite update (as gem-work does) */
	int diverged;              /* of the failed, those whose loss diverged (trainer_diverged) */
	double loss_tail;          /* mean minibatch loss of the last 100 updates (NaN: none) */
	double tau_mean;           /* mean staleness */
	uint64_t tau_max;
	double pi_median;          /* gem: median over updates and tensors of the per-tensor median π */
	double scale_mean;         /* gem: mean over updates of |π⊙Δθ|₁ / |Δθ|₁ */
	double zero_mean;          /* gem: mean over updates of the fraction of π clamped to 0 */
	uint64_t tau_p50, tau_p99; /* staleness of the applied updates: median, 99th percentile */
	uint64_t commits;          /* commits the server took */
	double busy, link_busy;    /* the busiest slice's CPU, link (in or out) seconds */
	double wait_mean, wait_p99; /* seconds a commit waited for the server's link and CPU */
	uint64_t bytes_in, bytes_out; /* on the wire, over the slices: the commits, and the replies
				       * to them and to the joins (the messages gem-work and gem-serve
				       * would send, headers included) */
};

/* Set o to the defaults: 1 worker, const:1 step time, no jitter, stragglers, latency, server
 * time, events; 1 thread. */
void sim_opts_default(struct sim_opts *o);
/* Check o's fields; GEM_EUSAGE names the first bad one. */
int sim_opts_check(const struct sim_opts *o, char *err);

/* Parse "const:T", "normal:MEAN,SD" or "lognormal:MU,SIGMA" (GEM_EUSAGE on anything else). */
int sim_parse_dist(const char *s, struct sim_dist *d, char *err);
/* Set the timing options of a named preset: "roundrobin" (const:1: workers arrive in strict
 * turn) or "measured" (lognormal step times with per-worker speeds, fitted to real gem-run
 * workers on 2 cores: gem-sim(1) and share/gem/experiments/calibrate.sh). GEM_EUSAGE: no such
 * preset (err lists them). */
int sim_timing_preset(const char *name, struct sim_opts *o, char *err);
/* The server cost of codec (NULL: raw) fitted on this project's test machine
 * (t/perf/bench-sim-server.sh): *a seconds per parameter, *b seconds per commit. */
void sim_server_cost(const char *codec, double *a, double *b);
/* Parse "K:F" (K >= 0 workers, F >= 1 times slower). */
int sim_parse_stragglers(const char *s, int *k, double *f, char *err);
/* Parse "W@T" (worker W >= 0 dies at time T >= 0). */
int sim_parse_death(const char *s, struct sim_death *d, char *err);

/* Simulate the run in rundir (made by gem-init; θ from its params.gem) with o: append to its
 * log.jsonl, save θ to params.gem at the end. GEM_EUSAGE: not a run, or options that do not fit
 * it; GEM_EFAIL: I/O; GEM_ENOMEM. Workers that fail (a non-finite loss) do not make it fail:
 * see sum->failed. sum may be NULL. */
int sim_run(const char *rundir, const struct sim_opts *o, struct sim_summary *sum, char *err);
#endif
