/* sgp: one node of a Stochastic Gradient Push run (Assran et al., 2019; doc/rules.md), push-sum
 * gossip between training nodes with no parameter server, as a library object: open (listen),
 * run (peer list, hello, train, save node-I.gem), close. It prints nothing and never exits. */
#ifndef GEM_SGP_H
#define GEM_SGP_H
#include <stddef.h>
#include <stdint.h>

#include "base/prog.h"
#include "role/trainer.h"
#include "rules/pushsum.h"

/* One node of an SGP run. */
struct sgp_opts {
	const char *rundir;     /* run.json, params.gem (θ₀); node-I.gem and node-I.jsonl go here */
	const char *host;       /* where to listen; NULL: 127.0.0.1 */
	int port;               /* 0: any free port */
	int allow_public;       /* bind a non-loopback address */
	const char *peers;      /* the peer list (pushsum_peers_parse), or NULL with peers_file */
	const char *peers_file; /* a file holding it, waited for until it appears (retry_for) */
	int node;               /* this node's index in the list; -1: the entry of host:port */
	enum pushsum_topology topology;
	int peers_per_iter;     /* m >= 1 */
	int overlap;            /* non-blocking sends, mass added as it arrives */
	int tau;                /* overlap: wait after τ iterations with no message; 0: default */
	struct train_opts t;    /* steps: iterations; default part: node/n; codec: of the pushes;
				 * cacert: the peers' CA, with tls_cert */
	const char *tls_cert;   /* PEM files of this node's certificate (chain) and its key: listen */
	const char *tls_key;    /* on HTTPS, and every peer must too; both NULL: plain HTTP */
};

/* Where a node stands: given to the progress callback (once when training starts, with iter 0,
 * then after each iteration) and returned by sgp_node_run. */
struct sgp_status {
	int node, nodes;         /* this node's index, of how many (-1, 0 before the peer list) */
	int peers_per_iter, tau; /* m as used, Overlap-SGP's τ */
	int part_i, part_n;
	size_t part_samples;
	const char *rule;        /* "sgp" or "overlap-sgp" */
	uint64_t iter, iters;    /* iterations done, of how many */
	uint64_t samples;
	float loss;              /* the last iteration's mean loss; NaN before the first */
	double w, seconds;       /* the push-sum weight; seconds since training started */
	uint64_t bytes_in, bytes_out; /* the messages of the pushes taken and delivered */
	int saved;               /* node-I.gem written */
};

typedef void (*sgp_progress_fn)(const struct sgp_status *st, void *ctx);

struct sgp_node;

/* Open the run, load θ₀ and the data, listen (o is copied, its strings are not). GEM_EUSAGE: a
 * bad run, token, certificate or key file, or address. */
int sgp_node_open(const struct sgp_opts *o, struct sgp_node **out, char *err);
/* The URL the node listens on ("http://127.0.0.1:PORT", https:// with o.tls_cert). */
const char *sgp_node_url(const struct sgp_node *s);
/* Wait for the peer list, check that every peer agrees on the topology (hello), train, save
 * RUNDIR/node-I.gem (also when stopped or failed while training). Returns 0, GEM_EUSAGE (a bad
 * peer list, one that mixes http:// and https://, a topology mismatch) or GEM_EFAIL (a peer whose
 * certificate is not trusted, too; also when *stop was set: err says
 * "interrupted"); *st (may be NULL) gets where the node stands. Once per node. */
int sgp_node_run(struct sgp_node *s, prog_stop_flag *stop, sgp_progress_fn progress,
		 void *ctx, struct sgp_status *st, char *err);
/* Stop serving and free everything (NULL is fine). */
void sgp_node_close(struct sgp_node *s);
#endif
