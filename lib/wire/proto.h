/* proto: the messages of gem-protocol(7), each one struct with one to-JSON and one from-JSON
 * function, as runlog is for the log: nothing else in libgem names a field of these headers and
 * bodies. A to-JSON function returns a new reference (NULL: out of memory) whose members come in
 * the order the man page gives (a message's bytes are counted in the log, so their order is part
 * of what a replay reproduces); a from-JSON function checks every member's type and range (the
 * bytes come from the network) and returns 0, or a negative code with a message in err. The
 * binary blobs after a header are msg's and blob's. */
#ifndef GEM_PROTO_H
#define GEM_PROTO_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the parameter server (gem-serve, and gem-sim's virtual one) ---- */

/* The slice of θ a server of a sliced run holds, as every reply of it that carries a vector
 * names it: "theta_slice":[I,K,OFF,LEN]; k = 0: the whole of θ (the member is left out). */
struct proto_slice {
	int i, k;
	uint64_t off, len;
};
/* Add s to header head (nothing when s->k is 0): 0, or -1 when out of memory. */
int proto_slice_add(json_t *head, const struct proto_slice *s);
/* The slice head names into s (k = 0 when it names none). GEM_EFAIL when the member is there but
 * is not four integers with 0 <= I < K <= max_k. */
int proto_slice_from_json(const json_t *head, int max_k, struct proto_slice *s, char *err);

/* A reply's copy_crc32 (gem-protocol(7), "Replies as deltas"): the CRC-32 of the server's copy
 * of θ as the worker holds it. proto_crc_from_json: 1 and *crc when the member is there. */
int proto_crc_add(json_t *head, uint32_t crc);
int proto_crc_from_json(const json_t *head, uint32_t *crc);

/* POST /v1/join's body. */
struct proto_join {
	int worker;          /* rejoin under this id; -1: a new one */
	const char *codec;   /* the codec of its commits; NULL: not said (from JSON: points into it) */
	uint64_t steps;      /* what the worker trains in this session (0: not said) */
	uint64_t epochs;
};
#define PROTO_JOIN_STEPS_MAX (1ULL << 40)
json_t *proto_join_to_json(const struct proto_join *j);
/* GEM_EUSAGE for a body that is not an object or a member out of its range (err says which,
 * bad_field), GEM_EFAIL for a codec no gem knows (bad_codec). */
int proto_join_from_json(const json_t *o, int max_workers, int max_epochs, struct proto_join *j,
			 char *err);

/* What a reply that carries θ says of it besides the blob. */
struct proto_vec {
	uint64_t version;       /* θ's version */
	int has_version;        /* from JSON: version was there */
	int window;             /* the inner steps to take next (dynamic local updates; 0: none) */
	struct proto_slice slice; /* a slice's: which slice of θ the vector is */
	int has_crc;            /* copy_crc32 was there (added by proto_crc_add after the blob) */
	uint32_t copy_crc32;
};

/* The header of the reply to a join (beside the params or delta blob). */
struct proto_join_reply {
	int worker;             /* the id to use */
	uint64_t version, seq, commits, samples; /* what the server saw of the worker so far */
	int part_i, part_n;     /* its data part (part_n 0: the run assigns none) */
	int window;             /* dynamic local updates (0: none said) */
};
json_t *proto_join_reply_to_json(const struct proto_join_reply *r);
/* The members r and v hold: GEM_EFAIL when worker is missing or out of [0, max_workers). */
int proto_join_reply_from_json(const json_t *head, int max_workers, struct proto_join_reply *r,
			       char *err);

/* The header of a commit (beside the update blob). */
struct proto_commit {
	int worker;
	uint64_t base;    /* the version the update was computed at */
	uint64_t seq;     /* the worker's commit number */
	uint64_t samples; /* training samples behind it */
	float loss;       /* NaN: not said */
	double idle;      /* dma: seconds the worker waited; < 0: not said */
	int fragment;     /* rule.fragments > 1: the fragment p it is; < 0: not said */
};
#define PROTO_SAMPLES_MAX (1LL << 40)
json_t *proto_commit_to_json(const struct proto_commit *c);
/* The header of a commit into c, for a run of nfrag fragments of θ (1: none). PROTO_E_WORKER when
 * worker is missing or out of range (409 unknown_worker: join first), GEM_EUSAGE for another
 * member out of its range (400 bad_field); err says which. */
enum { PROTO_E_WORKER = -10 };
int proto_commit_from_json(const json_t *h, int max_workers, int nfrag, struct proto_commit *c,
			   char *err);

/* The header of the reply to a commit (beside the params, delta or elastic blob). */
struct proto_commit_reply {
	uint64_t version, tau;
	int applied;
	int window; /* dynamic local updates (0: none said) */
};
json_t *proto_commit_reply_to_json(const struct proto_commit_reply *r);

/* What a worker takes from the header of a reply of θ (to a join or a commit): version, window,
 * slice and copy_crc32 into v; 0, or GEM_EFAIL for a theta_slice that is no slice. */
int proto_vec_from_json(const json_t *head, struct proto_vec *v, char *err);

/* POST /v1/leave's body. */
enum { PROTO_LEFT_PAUSED = 0, PROTO_LEFT_DONE = 1, PROTO_LEFT_DIVERGED = 2 };
struct proto_leave {
	int worker;
	int how;    /* PROTO_LEFT_* */
	double loss; /* diverged: the loss it saw (NaN, ±inf, or a number); else NaN, not said */
};
json_t *proto_leave_to_json(const struct proto_leave *l);
int proto_leave_from_json(const json_t *o, int max_workers, struct proto_leave *l, char *err);

/* The small JSON replies: to a leave {"worker","version"}, to POST /v1/checkpoint {"version"}, to
 * POST /v1/stop {"stopping":true,"version"}. */
json_t *proto_left_to_json(int worker, uint64_t version);
json_t *proto_checkpointed_to_json(uint64_t version);
json_t *proto_stopping_to_json(uint64_t version);

/* GET /v1/health's fields after "ok" (reply.c adds it). */
struct proto_health {
	uint64_t version;
	int workers;
	int stopping;
	struct proto_slice slice;
};
json_t *proto_health_to_json(const struct proto_health *h);
/* What a health's fields (gem-serve's or an SGP node's) say of the run's end: stopping, and the
 * version when it has one (returns 1; 0 without). */
int proto_health_peek(const json_t *o, uint64_t *version, int *stopping);
/* GEM_EFAIL when version is missing (not a gem server's health). */
int proto_health_from_json(const json_t *o, int max_k, struct proto_health *h, char *err);
/* gem-serve's "memory" member of its health: the bytes of its state. */
struct proto_memory {
	uint64_t rule, copies, buffers, bodies, total, peak, max;
};
int proto_memory_add(json_t *health, const struct proto_memory *m);

/* GET /v1/params' header (beside the params blob): gem-serve's, and an SGP node's (node >= 0:
 * with node, nodes and w). Read back by run_progress_of, as params.gem's. */
struct proto_params {
	uint64_t version, samples;
	double elapsed;
	const char *model;
	struct proto_slice slice;
	int node, nodes; /* an SGP node's; node < 0: not one */
	double w;
};
json_t *proto_params_to_json(const struct proto_params *p);
/* version, samples and elapsed of a params header (gem-serve's, an SGP node's, or a params.gem
 * file's) into p; each left as it was when missing or out of range. */
void proto_params_from_json(const json_t *head, struct proto_params *p);

/* GET /v1/stats: the server, each worker, and the progress. */
struct proto_worker_stats {
	int worker, active, done;
	uint64_t commits, samples, refused;
	double tau_mean;
	uint64_t tau_min, tau_max;
	double samples_per_s, loss_mean, since_contact, idle;
};
struct proto_progress {
	uint64_t samples, total;
	double fraction, updates_per_s, samples_per_s, eta;
	int slowest;
	double slowest_samples_per_s;
	const char *line;
	double loss; /* not finite: null */
};
struct proto_stats {
	uint64_t version, samples;
	double uptime, elapsed, updates_per_s;
	const char *rule;
	int active;
	int nworkers;
	const struct proto_worker_stats *workers;
	struct proto_progress progress;
};
/* gem-serve's commit_us member: its mean times per commit. */
struct proto_commit_us {
	uint64_t commits;
	double decode, rule, encode;
};
json_t *proto_stats_to_json(const struct proto_stats *s);
int proto_commit_us_add(json_t *stats, const struct proto_commit_us *t);
/* The server's figures and its progress (not the workers': nworkers 0, workers NULL; strings
 * point into o). GEM_EFAIL when version is missing. */
int proto_stats_from_json(const json_t *o, struct proto_stats *s, char *err);

/* A 4xx/5xx reply's body {"error": code, "detail": text}. proto_error_from_json: the code and
 * the detail (NULL each when missing; they point into o). proto_error_code: the code alone. */
json_t *proto_error_to_json(const char *error, const char *detail);
void proto_error_from_json(const json_t *o, const char **error, const char **detail);
const char *proto_error_code(const json_t *o);

/* ---- SGP: node to node ---- */

/* POST /v1/hello's body. */
struct proto_hello {
	int node;
	long long nodes;
	const char *topology; /* from JSON: points into it */
	long long peers_per_iter, iters;
	int overlap;
	char hash[17];        /* 16 hex digits */
};
json_t *proto_hello_to_json(const struct proto_hello *h);
/* GEM_EUSAGE, with the reason in err, for a hello no node sends: node not in [0, nodes_max) or
 * equal to self, hash not 16 hex digits, a member missing or of another type. */
int proto_hello_from_json(const json_t *o, int nodes_max, int self, struct proto_hello *h,
			  char *err, size_t errlen);
/* The replies {"ok":true} and, to a hello, {"ok":true,"node":I} (node < 0: without). */
json_t *proto_ok_to_json(int node);

/* POST /v1/push's header (beside the x blob). */
struct proto_push {
	int node;
	uint64_t iter;
	double w;
};
json_t *proto_push_to_json(const struct proto_push *p);
/* GEM_EUSAGE unless node is another node's index (of nodes, not self), iter >= 0 and
 * 0 < w <= nodes. */
int proto_push_from_json(const json_t *h, int nodes, int self, struct proto_push *p);

/* POST /v1/bye's body {"node": J}; from JSON: GEM_EUSAGE unless node is an integer. */
json_t *proto_bye_to_json(int node);
int proto_bye_from_json(const json_t *o, long long *node);

/* GET /v1/health's fields of an SGP node. */
struct proto_node_health {
	const char *rule;
	int node, nodes;
	uint64_t version;
	double w;
	int ready, stopping;
};
json_t *proto_node_health_to_json(const struct proto_node_health *h);
#endif
