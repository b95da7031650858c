/* eval: a model's loss and accuracy (overall and per class) over a dataset, in chunks, no
 * dropout (a text: per byte, over fixed windows), with buffers allocated once and reused from evaluation to evaluation; a fixed subset
 * of a training set; and a live gem-serve watched from outside (GET /v1/run, /v1/health,
 * /v1/params), version after version, until it stops; the average and spread over the nodes of
 * a decentralised (SGP) run. gem-eval is built on it. */
#ifndef GEM_EVAL_H
#define GEM_EVAL_H
#include <stddef.h>
#include <stdint.h>

#include "wire/blob.h"
#include "nn/data.h"
#include "wire/httpc.h"
#include "nn/model.h"
#include "run/run.h"

#define EVAL_CHUNK 500
/* A text is evaluated on EVAL_TEXT_BATCHES batches of EVAL_TEXT_BATCH windows of its bytes at
 * offsets drawn from seed EVAL_TEXT_SEED's stream RNG_EVAL_SUBSET: the same for every run and
 * every call, and those of doc/results/gpt-kjv.md (seed 1). */
#define EVAL_TEXT_BATCHES 20
#define EVAL_TEXT_BATCH 32
#define EVAL_TEXT_SEED 1
#define EVAL_MAX_CLASSES 256 /* classes counted one by one (--per-class): the first 256 */
/* The rng stream of eval_subset's permutation (with the run's seed): no worker's shuffle. */

struct eval_result {
	double loss;     /* mean NLL over the dataset (a text: per byte predicted, in nats) */
	double accuracy; /* fraction of correct predictions (a text: of next bytes) */
	long n;          /* samples (a text: windows) */
	int classes;                         /* the model's classes */
	long class_n[EVAL_MAX_CLASSES];      /* samples of each class */
	long class_correct[EVAL_MAX_CLASSES]; /* of which predicted right */
};

/* The input, label and prediction buffers of a chunk of samples of one model. */
struct eval_buf {
	float *x;
	uint16_t *y, *pred;
	int chunk;       /* samples: EVAL_CHUNK, or a sequence model's EVAL_TEXT_BATCH windows */
};

/* Allocate b for m and reserve m for b->chunk samples (a training model must model_reserve
 * its batch again afterwards). */
int eval_buf_init(struct eval_buf *b, struct model *m, char *err);
void eval_buf_free(struct eval_buf *b);
/* Evaluate m's current parameters on d, normalised with mean/std; allocates nothing. A label
 * the model has no output for is refused. A text (windowed) is evaluated on its fixed windows
 * (EVAL_TEXT_BATCHES × EVAL_TEXT_BATCH windows at any offset, drawn with replacement), every
 * byte after every position a prediction: its bits per byte are res->loss / ln 2. */
int eval_run(struct eval_buf *b, struct model *m, const struct dataset *d, float mean, float std,
	     struct eval_result *res, char *err);
/* Accuracy on class k (NaN when d has no sample of it). */
double eval_class_accuracy(const struct eval_result *res, int k);

/* out: a copy of the first n samples (all, if d has fewer) of a permutation of d fixed by seed
 * (stream RNG_EVAL_SUBSET): the same samples on every call and every machine. A text is copied
 * whole: eval_run takes its own fixed windows of it, whatever n. */
int eval_subset(const struct dataset *d, long n, uint64_t seed, struct dataset *out, char *err);


/* A decentralised (SGP) run's nodes evaluated (eval_nodes): each node's row, the mean and
 * spread of the rows over the nodes, and the evaluation of their average z̄. */
struct eval_nodes {
	int k;
	struct run_progress *p;   /* each node's version and samples */
	struct eval_result *res;  /* each node's */
	double *dist;             /* each node's consensus distance ‖z_i − z̄‖₂ */
	double loss[2], acc[2], dist_spread[2]; /* over the nodes: mean, (population) sd */
	double version, samples;  /* the nodes' lowest version; their samples, summed */
	struct eval_result avg;   /* z̄'s */
};
/* Evaluate on d (normalised with mean/std) each of the k nodes' parameters: item[i] a node's
 * URL (its GET /v1/params) or a node file of run; then their average, which m keeps as its
 * parameters. Free r with eval_nodes_free whatever this returns. */
int eval_nodes(struct eval_nodes *r, struct eval_buf *b, struct model *m, const struct dataset *d,
	       float mean, float std, const struct run *run, char *const *item, int k,
	       double retry_for, char *err);
void eval_nodes_free(struct eval_nodes *r);

/* Is a process training RUNDIR now? 1 when RUNDIR/.lock (run_lock) names a live process: a
 * gem-work --local, gem-serve or gem-sim on the run; 0 when none (never run, ended, killed).
 * Only looks: never takes the lock, so a trainer starting meanwhile is not refused. */
int eval_run_active(const char *dir);

/* Sleep s seconds (nothing when s <= 0), resumed after a signal handler. */
void eval_sleep(double s);

/* A gem-serve seen from outside. Zero-initialise, then eval_remote_open. */
struct eval_remote {
	struct httpc *http;
	struct httpc_resp resp; /* reused: one params message of buffer, grown once */
	struct blob_codec codec;
	double retry_for;       /* how long an unreachable server is waited for */
};

/* A client for url; connect timeouts are bounded by retry_for. cacert: the PEM CA file an
 * https:// server's certificate must be signed by (NULL: the system's CAs). */
int eval_remote_open(struct eval_remote *r, const char *url, double retry_for, const char *cacert,
		     char *err);
void eval_remote_close(struct eval_remote *r);
/* The run the server trains, from GET /v1/run (run_from_json: the dataset is found by name on
 * this machine). Retries for r->retry_for. */
int eval_remote_run(struct eval_remote *r, struct run *run, char *err);
/* θ[0..n) and its progress from GET /v1/params?codec=raw. Retries for r->retry_for. */
int eval_remote_params(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
		       char *err);

/* The run the servers of urls train (one URL, or a sliced run's K, gem-serve --slice I/K,
 * slice 0's first, comma-separated): eval_remote_run of the first. */
int eval_remote_open_run(const char *urls, double retry_for, const char *cacert, struct run *run,
			 char *err);
/* θ[0..n) from the servers of urls, each the slice of its place in the list (GET /v1/health's
 * "theta_slice"; a slice given alone is refused, GEM_EUSAGE), with the merged progress
 * (run_progress_merge). Each request retries for retry_for. */
int eval_remote_theta(const char *urls, double retry_for, const char *cacert, float *theta, size_t n,
		      struct run_progress *p, char *err);

/* Called with θ loaded and its progress, once per new version; a negative return ends
 * eval_follow with that code (err filled). */
typedef int (*eval_follow_fn)(void *ctx, const struct run_progress *p, char *err);

struct eval_follow {
	const char *url;    /* the server (or a list, as eval_remote_open_run's); NULL:
			     * RUNDIR/server.url, read again when it goes away */
	const char *rundir; /* the run's directory, or NULL (only a URL known) */
	double interval;    /* seconds between polls of GET /v1/health */
	double retry_for;   /* how long a server gone without a sign of stopping is waited for */
	const char *cacert; /* CA file for an https:// server (eval_remote_open), or NULL */
	float *theta;       /* where θ is loaded (the model's parameters), n floats */
	size_t n;
	eval_follow_fn fn;
	void *ctx;
};

/* Poll the server's health every interval; when its version is not the one last seen, fetch
 * θ and call fn with the version actually fetched. Returns 0 once the server has stopped
 * normally: it answered "stopping": true or a 410 before going away, or (with rundir)
 * RUNDIR/server.url was removed, as gem-serve does when it exits; then, with rundir, fn gets
 * the final RUNDIR/params.gem too if its version is new. A server unreachable for retry_for
 * seconds without such a sign (killed, crashed, never started) is an error; so is an HTTP error
 * other than 503 (retried) and a corrupt message. With rundir, a server.url that names a new
 * URL (a restarted server) is followed. A rundir trained without a server (gem-work --local:
 * eval_run_active, no server.url) has its checkpoints followed: each new version of
 * RUNDIR/params.gem goes to fn, and once the training has exited, the last one if new; then
 * 0 is returned. A sliced rundir (run_slices) has each slice's server followed so, into its
 * slice of θ: fn gets the whole θ once every slice has been seen and whenever the slowest
 * slice's version moves, with the merged progress of run_params_load_merged; so is a url that
 * lists the K slices' servers. A server that does not hold the slice of θ expected (a slice
 * followed alone, a list out of order) is an error (GEM_EUSAGE). */
int eval_follow_run(const struct eval_follow *f, char *err);
#endif
