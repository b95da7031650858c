/* serve: the parameter server behind gem-serve. It holds θ and the rule, applies the workers'
 * commits one at a time in arrival order (FIFO), logs every central update, checkpoints θ and
 * the rule's state atomically, and answers the HTTP protocol of gem-protocol(7). */
#ifndef GEM_SERVE_H
#define GEM_SERVE_H
#include <stddef.h>
#include <stdint.h>

#include "base/prog.h"

struct server;

struct serve_opts {
	const char *host;        /* default 127.0.0.1 */
	int port;                /* 0: any free port */
	int allow_public;        /* bind a non-loopback address */
	const char *token;       /* bearer token for mutating requests, NULL for none */
	double checkpoint_every; /* seconds between checkpoints; 0: only on stop */
	uint64_t max_updates;    /* stop after this many central updates in all; 0: no limit */
	uint64_t steps;          /* > 0: the run's budget becomes this many steps per worker */
	int keep_running;        /* don't stop when every worker has finished and left */
	size_t max_body;         /* request body cap in bytes; 0: from the model size */
	const char *codec;       /* codec of parameter replies; NULL: the worker's (blob_codec_for_theta) */
	double worker_timeout;   /* a worker silent this long is gone; 0: never */
	double idle_timeout;     /* no commit this long: checkpoint and stop, failed; 0: never */
	long max_staleness;      /* refuse commits staler than this (SSP); < 0: no bound */
	double drop_rate;        /* refuse this fraction of commits with 503 (fault injection) */
	const char *tls_cert;    /* PEM text of the certificate and of its key: serve HTTPS */
	const char *tls_key;     /* (both, or neither for plain HTTP) */
	int max_workers;         /* workers joined at once (each holds buffers of ~24 bytes per
				  * parameter); 0: SERVE_MAX_WORKERS; at most SERVE_WORKERS_LIMIT */
	/* Called by serve_wait about 5 times a second, without the server's lock (may be NULL):
	 * gem-serve's status line (serve_now tells where the run stands). */
	void (*tick)(struct server *s, void *ctx);
	void *tick_ctx;
	int slice_i, slice_k;    /* serve slice i of k of θ (gem-serve --slice I/K, run/slice.h);
				  * k = 0: all of θ */
	uint64_t max_memory;     /* refuse a join that would make serve_memory's total exceed
				  * this many bytes (503); 0: no limit */
};

/* The bytes the server holds for θ and its workers, each worker's growing with |θ|. */
struct serve_memory {
	uint64_t rule;    /* the rule's state: θ's buffers, GEM's m_w and s_w (rule_state_bytes) */
	uint64_t copies;  /* the copies x̂ of θ kept for workers answered in deltas (wire/delta.h) */
	uint64_t buffers; /* the workers' reply buffers, and their codecs' and messages' scratch */
	uint64_t bodies;  /* the request bodies its connections hold, coming in or kept for the next */
	uint64_t total, peak; /* their sum now, and the largest it has been */
};

#define SERVE_MAX_WORKERS 256
/* The most real workers joined at once (max_workers): libmicrohttpd gives each connection a
 * thread, and past a few hundred workers the server's per-commit cost binds before (doc/scale.md);
 * their ids may go up to PS_MAX_WORKERS. */
#define SERVE_WORKERS_LIMIT 4096

struct ps_now;

/* Open RUNDIR (locked), resume θ and the rule's state from its checkpoint, start listening,
 * write RUNDIR/server.url. */
int serve_open(const char *rundir, const struct serve_opts *o, struct server **out, char *err);
/* The base URL clients use: http://HOST:PORT (https:// with TLS) */
const char *serve_url(const struct server *s);
/* Block until the run should stop: *sigflag set (a signal), POST /v1/stop, --max-updates
 * reached, or every worker done. Returns a static string saying why. */
const char *serve_wait(struct server *s, prog_stop_flag *sigflag);
/* Where the run stands (version, rates, workers, loss: role/ps.h). */
void serve_now(struct server *s, struct ps_now *st);
/* What the server's state takes in memory now. */
void serve_memory(struct server *s, struct serve_memory *m);
/* 1 if the run stopped for a failure (--idle-timeout), so the exit status must say so. */
int serve_failed(const struct server *s);
/* Stop serving, checkpoint, flush and close the log, remove server.url, free everything.
 * Returns 0, or a negative code if the final checkpoint failed. */
int serve_close(struct server *s, const char *reason, char *err);
#endif
