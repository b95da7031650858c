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
#include "run/shard.h"

#define RUN_FORMAT 1
#define RUN_MAX_BATCH 65536       /* run.json "train": batch in [1, RUN_MAX_BATCH] */
#define RUN_MAX_EPOCHS (1 << 20)  /* epochs in [1, RUN_MAX_EPOCHS] */

/* Every file in RUNDIR. */
#define RUN_JSON        "run.json"        /* model spec, data, rule, hyper-parameters, seed */
#define RUN_PARAMS      "params.gem"      /* θ and its progress: a message, written atomically */
#define RUN_LOG         "log.jsonl"       /* one JSON object per central update or event */
#define RUN_SERVER_URL  "server.url"      /* the server's base URL, while gem-serve runs */
#define RUN_LOCK        ".lock"           /* flock'd by the one trainer or server of the run */
#define RUN_NODE_LOCK   ".node-%d.lock"   /* flock'd by SGP node I while it runs */
#define RUN_LOCAL_STATE "local-state.gem" /* gem-work --local's optimiser state (momentum) */
#define RUN_RULE_STATE  "rule-state.gem"  /* gem-serve's rule state and workers */
/* A state's save before the last: a crash after a state's save and before θ's leaves θ of the
 * save before, and the state that goes with it here. */
#define RUN_LOCAL_STATE_PREV "local-state.prev.gem"
#define RUN_RULE_STATE_PREV  "rule-state.prev.gem"
#define RUN_NODE_PARAMS "node-%d.gem"     /* SGP node I's de-biased parameters */
#define RUN_NODE_LOG    "node-%d.jsonl"   /* SGP node I's log */
#define RUN_PEERS       "peers"           /* gem-run's SGP peer list */
#define RUN_SERVE_ERR   "serve.err"       /* gem-run's server's messages */
#define RUN_WORKER_LOG  "worker-%d.log"   /* gem-run's worker I's messages */
/* A sharded run (gem-serve --shard I/K): shard I's server keeps its own params.gem (its slice of
 * θ), rule-state.gem, log.jsonl, server.url and .lock in this subdirectory of RUNDIR. */
#define RUN_SHARD_DIR   "shard-%d-of-%d"

/* The hyper-parameters of local training, as recorded in run.json "train". */
struct run_train {
	float lr, momentum, weight_decay;
	int nesterov;
	int batch;
	int epochs; /* the run's budget: epochs per worker */
	uint64_t seed;
	enum optim_kind optimizer;
	uint64_t warmup;
	enum lr_shape schedule;
	float clip;
};

struct run {
	char dir[PATH_MAX];
	json_t *json;        /* run.json, owned */
	json_t *model;       /* the model spec, borrowed from json */
	char model_name[64];
	char data_name[256];
	char data_dir[PATH_MAX]; /* resolved on open: the recorded dir, else the name again */
	float mean, std;         /* normalisation, from the training set at init */
	struct run_train train;
	struct rule_config rule;
	int lock_fd;
	char fdir[PATH_MAX];     /* where the server's files are: RUNDIR, or its shard's directory */
	struct shard shard;      /* k = 0: not sharded */
};

/* The optimiser of r's local steps: its run.json "train" as given, the cosine ending at step
 * total (a trainer's budget in steps). */
void run_optim_config(const struct run *r, uint64_t total, struct optim_config *c);

/* Where θ's state stands: what a params file records beside θ. */
struct run_progress {
	uint64_t version; /* central updates applied */
	uint64_t samples; /* training samples consumed by those updates */
	double elapsed;   /* training seconds, accumulated over every session */
};
/* Merge shard progress q into m (first: m is q): a sharded run is as far as its slowest shard
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
/* Split "train" or "test" of the run's data (of dir instead when dir is non-NULL), checked
 * against the run's model with model_fits: every program where a run meets its data loads it
 * here, so a model spec that does not fit its data (from a lying server) is refused. */
int run_data_load(const struct run *r, const char *dir, const char *split, struct dataset *ds,
		  char *err);
/* Make r the run of shard i of k of θ's n elements: its files are in RUNDIR/shard-I-of-K/
 * (made if missing), and a shard that has no params.gem yet starts from its slice of
 * RUNDIR/params.gem. */
int run_set_shard(struct run *r, int i, int k, size_t n, char *err);
/* K of the sharded run in dir (its shard-0-of-K directory), 0 if it is not sharded, < 0 if it
 * holds shards of two different K. */
int run_shards(const char *dir, char *err);
/* θ of the run: params.gem, or for a sharded run every shard's slice end to end (its progress
 * then is the slowest shard's version and samples and the longest elapsed time). */
int run_params_load_merged(const struct run *r, float *theta, size_t n, struct run_progress *p,
			   char *err);
/* The server URLs of dir, comma-separated: server.url, or every shard's in shard order. */
int run_server_urls_read(const char *dir, char *urls, size_t cap, char *err);
/* Path of a file in the run: RUNDIR/name (a shard's own files: in its directory); run_dir_file:
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

/* θ to RUNDIR/params.gem atomically, with its progress. */
int run_params_save(const struct run *r, const float *theta, size_t n, const struct run_progress *p,
		    char *err);
/* θ from a params file (RUNDIR/params.gem when path is NULL); n must match. */
int run_params_load(const struct run *r, const char *path, float *theta, size_t n,
		    struct run_progress *p, char *err);

/* Local training's optimiser state (the momentum buffer v, n floats) at version, in
 * RUNDIR/local-state.gem, written before params.gem at each save (the one it replaces becomes
 * RUN_LOCAL_STATE_PREV). Load returns 1 when a state of that version was there (in either
 * file) and is now in v, 0 when there was none of that version (v untouched). */
int run_local_state_save(const struct run *r, const float *v, size_t n, uint64_t version, char *err);
int run_local_state_load(const struct run *r, float *v, size_t n, uint64_t version, char *err);

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
/* Write a snapshot: RUNDIR/rule-state.gem (the one it replaces becomes RUN_RULE_STATE_PREV),
 * then RUNDIR/params.gem, each atomically: a crash at any point leaves θ and a state of its
 * version. */
int run_ckpt_write(const struct run *r, const struct run_ckpt *ck, char *err);
void run_ckpt_free(struct run_ckpt *ck);
/* Restore a state saved at version (from rule-state.gem, or the save before it) into rule (just
 * created, no worker); *workers gets the saved workers (new reference). Returns 1 restored, 0
 * none saved of that version (told in err, rule untouched), < 0 a state that does not fit. */
int run_rule_state_load(const struct run *r, struct rule *rule, uint64_t version, json_t **workers,
			char *err);

/* Write RUNDIR/server.url (url and a newline) atomically; remove it. */
int run_server_url_write(const struct run *r, const char *url, char *err);
void run_server_url_remove(const struct run *r);
/* The URL in RUNDIR/server.url (the directory of a run, not yet opened). */
int run_server_url_read(const char *dir, char *url, size_t cap, char *err);
#endif
