/* run: one training run's directory. RUNDIR/run.json (model spec, data, rule, hyper-parameters,
 * seed), RUNDIR/params.gem (θ as a message: JSON line + blob, written atomically), RUNDIR/log.jsonl
 * (one JSON object per central update), RUNDIR/server.url while a server runs, RUNDIR/.lock. */
#ifndef GEM_RUN_H
#define GEM_RUN_H
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "rules/rule.h"

#define RUN_FORMAT 1

/* The hyper-parameters of local training, as recorded in run.json "train". */
struct run_train {
	float lr, momentum, weight_decay;
	int nesterov;
	int batch;
	int epochs; /* the run's budget: epochs per worker */
	uint64_t seed;
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
};

/* Where θ's state stands: what a params file records beside θ. */
struct run_progress {
	uint64_t version; /* central updates applied */
	uint64_t samples; /* training samples consumed by those updates */
	double elapsed;   /* training seconds, accumulated over every session */
};

/* Create RUNDIR (or reuse an empty one) and write run.json atomically. An existing run is
 * refused (GEM_EUSAGE) unless force. */
int run_create(const char *dir, json_t *runjson, int force, char *err);
/* Read and check RUNDIR/run.json; every missing or ill-typed field is named. */
int run_open(const char *dir, struct run *r, char *err);
/* A run described by json (taken over: run_close releases it), with no directory: a worker's
 * copy from the server's GET /v1/run. */
int run_from_json(json_t *json, struct run *r, char *err);
void run_close(struct run *r);
/* Path of a file in the run: RUNDIR/name. */
int run_file(const struct run *r, const char *name, char *out, size_t cap);
/* Take RUNDIR/.lock exclusively (no other trainer or server on this run); -1 if held. */
int run_lock(struct run *r, char *err);

/* The progress recorded in a params message's header (missing fields are 0). */
void run_progress_of(const json_t *header, struct run_progress *p);

/* θ to RUNDIR/params.gem atomically, with its progress. */
int run_params_save(const struct run *r, const float *theta, size_t n, const struct run_progress *p,
		    char *err);
/* θ from a params file (RUNDIR/params.gem when path is NULL); n must match. */
int run_params_load(const struct run *r, const char *path, float *theta, size_t n,
		    struct run_progress *p, char *err);

/* Local training's optimiser state (the momentum buffer v, n floats) at version, in
 * RUNDIR/state.gem, written before params.gem at each save. Load returns 1 when a state of that
 * version was there and is now in v, 0 when there was none of that version (v untouched). */
int run_local_state_save(const struct run *r, const float *v, size_t n, uint64_t version, char *err);
int run_local_state_load(const struct run *r, float *v, size_t n, uint64_t version, char *err);

/* Write one update line of log.jsonl (see gem-protocol(7)): wall time, elapsed training
 * seconds, virtual time (vtime < 0: none), version, worker, staleness, loss (NaN: null),
 * samples, and GEM's π statistics when st has tensors (st may be NULL). */
void run_log_update(FILE *f, double time, double elapsed, double vtime, uint64_t version,
		    int worker, uint64_t tau, float loss, uint64_t samples, const struct rule_stats *st);

/* Write the start event of log.jsonl: rule, model, the server's url (NULL: none), version and
 * the tensor names of the layout. */
void run_log_start(FILE *f, const struct run *r, const char *rule, const char *url, uint64_t version,
		   const struct layout *l);

/* Append-only log.jsonl; lines are written whole, flushed by run_log_flush and at close. */
int run_log_open(const struct run *r, FILE **out, char *err);
#endif
