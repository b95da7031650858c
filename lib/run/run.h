/* run: one training run's directory, and the one module that names and formats the files in
 * it (gem-protocol(7) documents them; its log: run/runlog.h). Whoever trains or serves a run
 * reads and writes RUNDIR through these functions only. */
#ifndef GEM_RUN_H
#define GEM_RUN_H
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "nn/data.h"
#include "nn/optim.h"
#include "rules/rule.h"
#include "run/runjson.h"
#include "run/slice.h"

/* Worker ids are in [0, RUN_MAX_WORKERS) and gem-init --workers at most this: room for gem-sim's
 * ten thousand virtual workers and their late joiners. */
#define RUN_MAX_WORKERS 16384

/* Every file in RUNDIR. */
#define RUN_JSON        "run.json"        /* model spec, data, rule, hyper-parameters, seed */
#define RUN_PARAMS      "params.gem"      /* θ and its progress: a message, written atomically */
#define RUN_LOG         "log.jsonl"       /* one JSON object per central update or event */
#define RUN_SERVER_URL  "server.url"      /* the server's base URL, while gem-serve runs */
#define RUN_LOCK        ".lock"           /* flock'd by the one trainer or server of the run */
#define RUN_NODE_LOCK   ".node-%d.lock"   /* flock'd by SGP node I while it runs */
#define RUN_LOCAL_STATE "local-state.gem" /* gem-work --local's optimiser state (momentum) */
#define RUN_RULE_STATE  "rule-state.gem"  /* gem-serve's rule state and workers */
/* Each checkpoint file's save before the last: the operator's way back when one is damaged. */
#define RUN_PARAMS_PREV      "params.prev.gem"
#define RUN_LOCAL_STATE_PREV "local-state.prev.gem"
#define RUN_RULE_STATE_PREV  "rule-state.prev.gem"
#define RUN_NODE_PARAMS "node-%d.gem"     /* SGP node I's de-biased parameters */
#define RUN_NODE_LOG    "node-%d.jsonl"   /* SGP node I's log */
#define RUN_PEERS       "peers"           /* gem-run's SGP peer list */
#define RUN_PEERS_TMP   "peers.tmp"       /* ... while it is written (renamed to RUN_PEERS) */
#define RUN_NODE_URL    "node-%d.url"     /* gem-run's SGP node I's URL, during the handshake */
#define RUN_NODE_MSG    "node-%d.log"     /* gem-run's SGP node I's messages */
#define RUN_SERVE_ERR   "serve.err"       /* gem-run's server's messages */
#define RUN_SLICE_ERR   "serve-%d.err"    /* gem-run's slice I's server's messages */
#define RUN_SLICE_URL   "serve-%d.url"    /* gem-run --slice-hosts: slice I's server's URL */
#define RUN_WORKER_LOG  "worker-%d.log"   /* gem-run's worker I's messages */
#define RUN_TOKEN       "token"           /* gem-run's bearer token for a run on the network */
#define RUN_TLS_CERT    "tls-cert.pem"    /* gem-run's certificate for the run (--tls) */
#define RUN_TLS_KEY     "tls-key.pem"     /* ... and its key */
#define RUN_OPENSSL_ERR "openssl.err"     /* what openssl said making them */
#define RUN_HOST_MARKER ".gem-run-marker-%d" /* gem-run PID's test of a host that shares RUNDIR */
/* A sliced run (gem-serve --slice I/K): slice I's server keeps its own params.gem (its slice of
 * θ), rule-state.gem, log.jsonl, server.url and .lock in this subdirectory of RUNDIR. */
#define RUN_SLICE_DIR   "slice-%d-of-%d"
#define RUN_SLICE_DIR_OLD "shard-%d-of-%d" /* its older spelling, in runs of 0.1.0: still read */

struct run {
	char dir[PATH_MAX];
	json_t *json;            /* run.json, owned */
	struct run_spec spec;    /* what run.json records, read and checked (runjson.h) */
	char data_dir[PATH_MAX]; /* where the data is on this host: spec.data_dir, else the
				  * dataset found again by spec.data_name (run_open) */
	int lock_fd;
	char fdir[PATH_MAX];     /* where the server's files are: RUNDIR, or its slice's directory */
	struct slice slice;      /* k = 0: not sliced */
};

/* The optimiser of r's local steps: its run.json "train" as given (narrowed to floats), the
 * cosine ending at step total (a trainer's budget in steps). */
void run_optim_config(const struct run *r, uint64_t total, struct optim_config *c);

/* One worker's budget in samples, of data whose epoch is epoch samples: those of the run's
 * steps (each a batch, but the short one that ends each epoch), else of its epochs. */
uint64_t run_budget(const struct run *r, uint64_t epoch);
/* Make steps the run's budget (run.json "train" "steps"): in r and in RUNDIR/run.json, rewritten
 * atomically; its caller holds the run (run_lock). GEM_EUSAGE: steps not in [1, RUN_MAX_STEPS],
 * or a cosine schedule's warm-up as long. */
int run_set_steps(struct run *r, uint64_t steps, char *err);

/* Where θ's state stands: what a params file records beside θ. */
struct run_progress {
	uint64_t version; /* central updates applied */
	uint64_t samples; /* training samples consumed by those updates */
	double elapsed;   /* training seconds, accumulated over every session */
};
/* Merge slice progress q into m (first: m is q): a sliced run is as far as its slowest slice
 * (the least version and samples) and has trained as long as its longest (elapsed). */
void run_progress_merge(struct run_progress *m, const struct run_progress *q, int first);

/* Create RUNDIR and its parents (or take an empty one) and write θ₀ (n floats) to params.gem at
 * version 0 and then runjson to run.json, each atomically, under the run's lock throughout
 * (run_make, run/spec.h, is how a run is made). An existing run is refused (GEM_EUSAGE) unless
 * force, which removes its run.json first and then every file the old run left; a run in use
 * (locked) is refused (GEM_EUSAGE, naming the holder). */
int run_create(const char *dir, json_t *runjson, const float *theta, size_t n, int force, char *err);
/* Read and check RUNDIR/run.json; every missing or ill-typed field is named. */
int run_open(const char *dir, struct run *r, char *err);
/* A run described by json (taken over: run_close releases it), with no directory: a worker's
 * copy from the server's GET /v1/run. */
int run_from_json(json_t *json, struct run *r, char *err);
void run_close(struct run *r);
struct model;
/* Check ds against model m (model_fits), a text cut first into windows of m's positions. */
int run_data_fit(const struct model *m, struct dataset *ds, char *err);
/* Split "train" or "test" of the run's data (of dir instead when dir is non-NULL: without the
 * run's holdout, its own test split, or all its samples when it has none), checked
 * against the run's model with model_fits and normalised as run.json says: every program
 * where a run meets its data loads it here, so a model spec that does not fit its data (from a
 * lying server) is refused. */
int run_data_load(const struct run *r, const char *dir, const char *split, struct dataset *ds,
		  char *err);
struct data_source;
/* The run's data as dataset_open reads it (of dir instead when dir is non-NULL, as
 * run_data_load says); borrows r. */
void run_data_source(const struct run *r, const char *dir, struct data_source *src);
/* Make r the run of slice i of k of θ's n elements: its files are in RUNDIR/slice-I-of-K/
 * (made if missing), and a slice that has no params.gem yet starts from its slice of
 * RUNDIR/params.gem. */
int run_set_slice(struct run *r, int i, int k, size_t n, char *err);
/* K of the sliced run in dir (its slice-0-of-K directory), 0 if it is not sliced, < 0 if it
 * holds slices of two different K. */
int run_slices(const char *dir, char *err);
/* 0 and slice i of k when name is a slice's directory's (RUN_SLICE_DIR, or RUN_SLICE_DIR_OLD),
 * else -1. */
int run_slice_dir_parse(const char *name, int *i, int *k);
/* What a reader of a run's log wants of its run.json (gem-plot-data's label: the rule and the
 * model), read leniently: any JSON object, of a run.json that may be partial. */
struct run_peek {
	json_t *json;         /* run.json, owned (run_peek_free) */
	const char *rule;     /* its rule's name (run_spec_rule_name), NULL when it has none */
	const json_t *model;  /* its model spec, NULL when it has none */
	int slice_i, slice_k; /* dir is slice i of k's directory, its run.json the run's one up;
			       * k = 0: dir is the run's */
};
/* The run.json of the run in dir, or of the run whose slice's directory dir is; -1 when there
 * is none or it is no JSON (err says which). */
int run_peek(const char *dir, struct run_peek *p, char *err);
void run_peek_free(struct run_peek *p);
/* The name in dir of slice i of k's directory, into name (size bytes): RUN_SLICE_DIR, or
 * RUN_SLICE_DIR_OLD when that one alone is there (a run of 0.1.0). */
void run_slice_dir(const char *dir, int i, int k, char *name, size_t size);
/* θ of the run: params.gem, or for a sliced run every server's slice end to end (its progress
 * then is the slowest slice's version and samples and the longest elapsed time). */
int run_params_load_merged(const struct run *r, float *theta, size_t n, struct run_progress *p,
			   char *err);
/* The server URLs of dir, comma-separated: server.url, or every slice's in slice order. */
int run_server_urls_read(const char *dir, char *urls, size_t cap, char *err);
/* Path of a file in the run: RUNDIR/name (a slice's own files: in its directory); run_dir_file:
 * dir/name, for a run not opened. One slash between them, whatever dir ends with; -1 when it
 * does not fit in cap. */
int run_file(const struct run *r, const char *name, char *out, size_t cap);
int run_dir_file(const char *dir, const char *name, char *out, size_t cap);
/* Take RUNDIR/.lock exclusively (no other trainer or server on this run) and write our pid in
 * it; GEM_EUSAGE naming the holder (its pid, its server's URL) if held. */
int run_lock(struct run *r, char *err);
/* Take SGP node i's lock (RUN_NODE_LOCK) exclusively, as run_lock: GEM_EUSAGE naming the pid of
 * the node i that runs already. */
int run_lock_node(struct run *r, int i, char *err);

/* The progress recorded in a params message's header (missing fields are 0). */
void run_progress_of(const json_t *header, struct run_progress *p);
/* The progress of θ in dir's params.gem (a run's, or a slice's directory), θ not decoded. */
int run_params_progress(const char *dir, struct run_progress *p, char *err);
/* Remove the files SGP nodes and gem-run's handshake leave in dir (RUN_NODE_*, the peer
 * list), or with urls_only the nodes' URLs alone (the handshake's, once the nodes ended). */
int run_node_files_remove(const char *dir, int urls_only, char *err);

/* θ to RUNDIR/params.gem atomically, with its progress (the one it replaces becomes
 * RUN_PARAMS_PREV). */
int run_params_save(const struct run *r, const float *theta, size_t n, const struct run_progress *p,
		    char *err);
/* θ from a params file (RUNDIR/params.gem when path is NULL); n must match. A file that cannot
 * be read (damaged: a header or blob whose checksum does not match) is refused naming it, and
 * its save before (X.prev.gem) when there is one. */
int run_params_load(const struct run *r, const char *path, float *theta, size_t n,
		    struct run_progress *p, char *err);

/* A checkpoint with a state (local training's momentum, gem-serve's rule state) is one file
 * that holds θ, its progress and the state, so that no crash parts them: the state file, then
 * params.gem (θ alone, for every other reader), each written atomically, the one each replaces
 * kept as its save before (*.prev.gem). A crash between the two leaves the state file newer
 * than params.gem, and the resume takes θ from it. */

/* Local training's checkpoint: θ (n floats), the optimiser's state (ns floats, nn/optim.h's
 * optim_state_get) and progress p to RUNDIR/local-state.gem (before params.gem at each save). */
int run_local_state_save(const struct run *r, const float *theta, size_t n, const float *state,
			 size_t ns, const struct run_progress *p, char *err);
/* The optimiser's state that goes with θ (just loaded, of progress *p) into state: from
 * local-state.gem or its save before when of θ's version, or from one newer that holds θ (θ and
 * *p are then taken from it too). 1 loaded, 0 none (the reason, if any, in err; state
 * untouched), < 0 a state file that cannot be read. */
int run_local_state_load(const struct run *r, float *theta, size_t n, float *state, size_t ns,
			 struct run_progress *p, char *err);

/* A checkpoint in two halves, so that a server takes it under its lock and writes it (fsync
 * and all) outside: a snapshot of θ, its progress, the rule's state and the server's record of
 * its workers (an array of objects), in buffers kept from one checkpoint to the next. A
 * zero-initialised struct is empty. */
struct run_ckpt {
	json_t *head;            /* rule-state.gem's header */
	float *vecs, *theta;     /* the rule's vectors end to end; θ */
	size_t nvecs, n, vecs_cap, theta_cap;
	struct run_progress p;
};
/* Snapshot the state into ck (workers is stolen). Copies only memory: no I/O. */
int run_ckpt_take(const struct rule *rule, json_t *workers, const float *theta, size_t n,
		  const struct run_progress *p, struct run_ckpt *ck, char *err);
/* Write a snapshot: RUNDIR/rule-state.gem (θ and the state), then RUNDIR/params.gem. */
int run_ckpt_write(const struct run *r, const struct run_ckpt *ck, char *err);
void run_ckpt_free(struct run_ckpt *ck);
/* Resume a server's checkpoint: the run's rule, laid out as l, created into *rule holding θ of
 * params.gem (or of a newer rule-state.gem), *p its progress, with the rule's state of θ's
 * version restored; *workers gets the saved workers (new reference). Returns 1 restored, 0 no
 * state of θ's version (why in err, empty when there was none; the rule as created), < 0 θ or
 * a state file that cannot be read or a state that does not fit (*rule NULL). */
int run_ckpt_load(const struct run *r, const struct layout *l, struct rule **rule,
		  struct run_progress *p, json_t **workers, char *err);

/* Write RUNDIR/server.url (url and a newline) atomically; remove it. */
int run_server_url_write(const struct run *r, const char *url, char *err);
void run_server_url_remove(const struct run *r);
/* The URL in RUNDIR/server.url (the directory of a run, not yet opened). */
int run_server_url_read(const char *dir, char *url, size_t cap, char *err);
#endif
