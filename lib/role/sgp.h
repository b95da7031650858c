/* sgp: Stochastic Gradient Push (Assran et al., 2019), push-sum gossip between training nodes
 * with no parameter server (DESIGN.md §4). Each node keeps x and a push-sum weight w (w₀ = 1),
 * takes gradients at z = x/w, a local Nesterov momentum step on x, then keeps 1/(m+1) of (x, w)
 * and pushes 1/(m+1) to each of its m out-peers of this iteration. The pure part (topologies,
 * mixing, the topology hash) is what the tests drive; sgp_node_run is one node over HTTP. */
#ifndef GEM_SGP_H
#define GEM_SGP_H
#include <stddef.h>
#include <stdint.h>

#define SGP_MAX_NODES 4096
#define SGP_MAX_PEERS 16 /* out-peers per iteration */

enum sgp_topology {
	SGP_EXP,  /* time-varying directed exponential graph: i → i + 2^k mod n */
	SGP_RING, /* static directed ring: i → i + 1, ..., i + m mod n */
};

/* "exp" or "ring" into *t; -1 for anything else. */
int sgp_topology_parse(const char *name, enum sgp_topology *t);
const char *sgp_topology_name(enum sgp_topology t);
/* The exponents the exponential graph cycles over: ⌊log2(n−1)⌋ + 1 for n >= 2, 0 for n = 1. */
int sgp_exp_cycle(int n);
/* The out-peers per iteration actually used: m, at most the distinct peers the topology has
 * (exp: sgp_exp_cycle(n); ring: n − 1). */
int sgp_peers_per_iter(enum sgp_topology t, int n, int m);
/* The offsets o (peer = i + o mod n) of iteration iter, the same for every node: exp with m
 * peers per iteration uses 2^k for k = (iter·m + j) mod K, j < m; ring uses 1..m. Returns how
 * many (sgp_peers_per_iter) were written to off. */
int sgp_offsets(enum sgp_topology t, int n, int m, uint64_t iter, int *off);
/* Node i's out-peers (i + o mod n) and in-peers (i − o mod n) of iteration iter. */
int sgp_out_peers(enum sgp_topology t, int n, int m, int i, uint64_t iter, int *out);
int sgp_in_peers(enum sgp_topology t, int n, int m, int i, uint64_t iter, int *in);

/* Push-sum's split: x ← x/(m+1), w ← w/(m+1). What stays is also the share each out-peer gets. */
void sgp_split(float *x, size_t len, double *w, int m);
/* Push-sum's receive: x ← x + xj, w ← w + wj. */
void sgp_receive(float *x, size_t len, double *w, const float *xj, double wj);
/* The de-biased parameters z = x/w, where gradients are taken. */
void sgp_debias(const float *x, double w, float *z, size_t len);
/* ‖a − b‖₂ */
double sgp_distance(const float *a, const float *b, size_t len);
/* What every node must agree on before it runs: n, the topology, m and the peer list in order
 * (it fixes the node ids); FNV-1a 64. */
uint64_t sgp_topology_hash(enum sgp_topology t, int m, const char *const *peers, int n);

/* Read a peer list: URLs separated by commas, blanks or newlines; '#' starts a comment to the
 * end of the line. Trailing slashes are dropped. *peers (malloc'd, each entry malloc'd) and *n
 * are set; GEM_EUSAGE names a bad entry. sgp_peers_free releases them. */
int sgp_peers_parse(const char *text, char ***peers, int *n, char *err);
void sgp_peers_free(char **peers, int n);

/* One node of an SGP run. */
struct sgp_opts {
	const char *rundir;     /* run.json, params.gem (θ₀); node-I.gem and node-I.jsonl go here */
	const char *host;       /* where to listen; NULL: 127.0.0.1 */
	int port;               /* 0: any free port */
	int allow_public;       /* bind a non-loopback address */
	const char *peers;      /* the peer list (sgp_peers_parse), or NULL with peers_file */
	const char *peers_file; /* a file holding it, waited for until it appears (retry_for) */
	int node;               /* this node's index in the list; -1: the entry of host:port */
	enum sgp_topology topology;
	int peers_per_iter;     /* m >= 1 */
	int overlap;            /* non-blocking sends, mass added as it arrives */
	int tau;                /* overlap: wait after τ iterations with no message; 0: default */
	int epochs;             /* 0: the run's budget */
	uint64_t steps;         /* > 0: exactly this many iterations */
	int shard_i, shard_n, shard_set; /* default: shard node/n */
	const char *token_file; /* bearer token of every node (pushes, hellos) */
	double retry_for;       /* seconds to wait for the peer list, a peer, a message */
	double slowdown;        /* >= 1: each step this many times as long */
	int quiet;
};

/* Run one node: print its URL on stdout (one line) once it listens, wait for the peer list,
 * check that every peer agrees on the topology (hello), train, save RUNDIR/node-I.gem; returns
 * a process exit status (0, 1 failed, 2 bad usage or topology mismatch, 128+N on signal N). */
int sgp_node_run(const struct sgp_opts *o);
#endif
