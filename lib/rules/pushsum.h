/* pushsum: the arithmetic of Stochastic Gradient Push (Assran et al., 2019; doc/rules.md), with
 * no I/O: the topologies (who pushes to whom at an iteration), push-sum's split, receive and
 * de-bias of (x, w), the topology hash every node agrees on, and the peer list's parser. */
#ifndef GEM_RULES_PUSHSUM_H
#define GEM_RULES_PUSHSUM_H
#include <stddef.h>
#include <stdint.h>

#define PUSHSUM_MAX_NODES 4096
#define PUSHSUM_MAX_PEERS 16 /* out-peers per iteration */

enum pushsum_topology {
	PUSHSUM_EXP,  /* time-varying directed exponential graph: i → i + 2^k mod n */
	PUSHSUM_RING, /* static directed ring: i → i + 1, ..., i + m mod n */
};

/* "exp" or "ring" into *t; -1 for anything else. */
int pushsum_topology_parse(const char *name, enum pushsum_topology *t);
/* "exp" or "ring". */
const char *pushsum_topology_name(enum pushsum_topology t);
/* The exponents the exponential graph cycles over: ⌊log2(n−1)⌋ + 1 for n >= 2, 0 for n = 1. */
int pushsum_exp_cycle(int n);
/* The out-peers per iteration actually used: m, at most the distinct peers the topology has
 * (exp: pushsum_exp_cycle(n); ring: n − 1). */
int pushsum_peers_per_iter(enum pushsum_topology t, int n, int m);
/* The offsets o (peer = i + o mod n) of iteration iter, the same for every node: exp with m
 * peers per iteration uses 2^k for k = (iter·m + j) mod K, j < m; ring uses 1..m. Returns how
 * many (pushsum_peers_per_iter) were written to off. */
int pushsum_offsets(enum pushsum_topology t, int n, int m, uint64_t iter, int *off);
/* Node i's out-peers (i + o mod n) of iteration iter; returns how many. */
int pushsum_out_peers(enum pushsum_topology t, int n, int m, int i, uint64_t iter, int *out);
/* Node i's in-peers (i − o mod n) of iteration iter; returns how many. */
int pushsum_in_peers(enum pushsum_topology t, int n, int m, int i, uint64_t iter, int *in);

/* Push-sum's split: x ← x/(m+1), w ← w/(m+1). What stays is also the share each out-peer gets. */
void pushsum_split(float *x, size_t len, double *w, int m);
/* Push-sum's receive: x ← x + xj, w ← w + wj. */
void pushsum_receive(float *x, size_t len, double *w, const float *xj, double wj);
/* The de-biased parameters z = x/w, where gradients are taken. */
void pushsum_debias(const float *x, double w, float *z, size_t len);
/* ‖z − xj/wj‖₂: how far a peer's de-biased parameters (its share has the same ratio) are. */
double pushsum_share_distance(const float *z, const float *xj, double wj, size_t len);
/* What every node must agree on before it runs: n, the topology, m and the peer list in order
 * (it fixes the node ids); FNV-1a 64. */
uint64_t pushsum_topology_hash(enum pushsum_topology t, int m, const char *const *peers, int n);

/* Read a peer list: URLs separated by commas, blanks or newlines; '#' starts a comment to the
 * end of the line. Trailing slashes are dropped. *peers (malloc'd, each entry malloc'd) and *n
 * are set; GEM_EUSAGE names a bad entry. */
int pushsum_peers_parse(const char *text, char ***peers, int *n, char *err);
/* Release what pushsum_peers_parse returned (NULL is fine). */
void pushsum_peers_free(char **peers, int n);
#endif
