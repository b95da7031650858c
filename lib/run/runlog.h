/* runlog: a run's log.jsonl (gem-protocol(7), THE LOG), its one writer and its one reader. A
 * line is one JSON object: an update (a central update of θ, a local step, an SGP node's
 * iteration) or an event ("start", "join", "leave", "stop", ...). The writer writes whole lines;
 * the reader checks a line's common fields into a struct run_log_line and keeps the line's JSON
 * for what only one event has (read with base/jget). */
#ifndef GEM_RUNLOG_H
#define GEM_RUNLOG_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "nn/layout.h"
#include "rules/rule.h"
#include "run/run.h"

/* An SGP node's iteration: its push-sum weight, the messages it mixed, the seconds it waited,
 * and the last peer it mixed with (-1: none) at distance dist. */
struct run_log_gossip {
	double w, wait, dist;
	int msgs, peer;
};

/* An update line's fields, as the writer takes them and the reader finds them. */
/* How an update's loss is written: what a replay compares its own with. */
#define RUN_LOG_LOSS_FORMAT "%.6g"

struct run_log_update {
	double time;      /* wall clock (s since the epoch); the reader: NAN when the line has none */
	double elapsed;   /* training seconds; the reader: NAN when the line has vtime instead */
	double vtime;     /* virtual seconds (gem-sim, a replay); < 0: none */
	uint64_t version; /* central updates applied, this one included */
	int worker;
	uint64_t tau;     /* staleness: updates between the version computed on and this one */
	double loss;      /* NAN: none (written null) */
	uint64_t samples; /* training samples consumed by all the updates so far */
	int has_n;        /* a server's commit: n is its own samples (a replay redoes them) */
	uint64_t n;
	int by_leave;     /* a round closed by a worker's leave, not by a commit of its own */
	const struct run_log_gossip *gossip; /* an SGP node's iteration; NULL: none (writer only) */
	const struct rule_stats *st;         /* GEM's π statistics when st->ntensors (writer only) */
	/* a server's: the bytes on the wire (messages, headers included) of the commits received
	 * and the replies sent since the line before; both 0: none counted, no field */
	uint64_t bytes_in, bytes_out;
};

/* One line of the log, read. */
struct run_log_line {
	json_t *json;       /* the line (run_log_line_free): an event's own members */
	const char *event;  /* the event's name; NULL: an update line */
	int has_version;    /* an event's line says a version (an update's always does) */
	struct run_log_update u; /* an update's fields; of an event's: time, vtime, worker (-1: none)
				  * and version */
};

/* Parse one line (text, len bytes, no newline needed) into *l: 0, or GEM_EUSAGE with why (cap
 * bytes) saying what is malformed ("not JSON", "missing \"tau\""). l->json is the caller's to
 * release with run_log_line_free, whatever the result. */
int run_log_parse(const char *text, size_t len, struct run_log_line *l, char *why, size_t cap);
void run_log_line_free(struct run_log_line *l);

/* Reading a log line by line: run_log_reader_open sets it up. */
struct run_log_reader {
	FILE *f;
	const char *name; /* the path read, "stdin" for "-": for messages */
	long line;        /* the number of the line read last */
	int follow;       /* a last line without its newline is left for a later read */
	char *buf;
	size_t cap;
	char why[128];
	struct run_log_line cur;
};

/* Open path for reading ("-": standard input); follow: the log may still grow. */
int run_log_reader_open(struct run_log_reader *rd, const char *path, int follow, char *err);
/* The next line that is not blank: 1 with *l that line (until the next call) and *why NULL, or
 * *l NULL and *why saying why the line is malformed; 0 at the end of the log; GEM_EFAIL when it
 * cannot be read. */
int run_log_next(struct run_log_reader *rd, const struct run_log_line **l, const char **why,
		 char *err);
void run_log_reader_close(struct run_log_reader *rd);

/* The bytes on the wire a line counts: an update line's and a stop event's bytes_in plus
 * bytes_out (those since the line before); 0 for the other events. */
uint64_t run_log_line_bytes(const struct run_log_line *l);
/* The bytes an SGP node's log has it send (node-I.jsonl): the sum of bytes_out over its lines.
 * A push delivered is counted by its sender in bytes_out and by its receiver in bytes_in, so
 * the run's bytes on the wire are the nodes' sums of this, each push once. */
int run_log_bytes_sent(const char *path, uint64_t *out, char *err);

/* The bytes a served run had on the wire up to a version: the sum of bytes_in and bytes_out
 * over its log's update lines and stop events of that version or before, read on line by line
 * as the versions asked grow (the log may still be written). */
struct run_log_bytes {
	struct run_log_reader rd;
	uint64_t total;   /* of the lines counted */
	int ahead;        /* a line of a later version was read: its version and bytes */
	uint64_t ahead_version, ahead_bytes;
};
int run_log_bytes_open(struct run_log_bytes *b, const char *path, char *err);
/* *bytes: the sum up to version; versions asked must not decrease. */
int run_log_bytes_at(struct run_log_bytes *b, uint64_t version, uint64_t *bytes, char *err);
void run_log_bytes_close(struct run_log_bytes *b);

/* Append-only log.jsonl, cut back first to θ's checkpoint of version: a session that restarts
 * from it drops what the log says of later versions (a crash's lost updates, which would be
 * logged twice) and a torn last line. Lines are written whole, flushed at checkpoints and at
 * close. */
int run_log_open(const struct run *r, uint64_t version, FILE **out, char *err);

/* Write one update line (see gem-protocol(7)). */
void run_log_update(FILE *f, const struct run_log_update *u);
/* One JSON object as a line. */
void run_log_json(FILE *f, json_t *obj);

/* Write one event line of log.jsonl: {"event":E,"time":…[,"vtime":…][,"worker":W],"version":V
 * [,extra]} where extra (may be NULL) is more JSON members, written as given. */
void run_log_event(FILE *f, const char *event, double vtime, int worker, uint64_t version,
		   const char *extra);

/* Write the start event of log.jsonl: rule, model, the server's url (NULL: none), version and
 * the tensor names of the layout. */
void run_log_start(FILE *f, const struct run *r, const char *rule, const char *url, uint64_t version,
		   const struct layout *l);
/* The same with the members of more (may be NULL) added: a server's options. */
void run_log_start_x(FILE *f, const struct run *r, const char *rule, const char *url,
		     uint64_t version, const struct layout *l, json_t *more);

/* How a run's last session ended: the log's "end" event, which its server writes before its
 * "stop" once the run is over (gem-protocol(7)). A run without one was interrupted, stopped
 * early or never served: it may be resumed. */
enum { RUN_GOING = 0, RUN_COMPLETE = 1, RUN_DIVERGED = 2 };
struct run_end {
	int how;          /* RUN_GOING, RUN_COMPLETE (every worker spent its budget), RUN_DIVERGED */
	uint64_t version; /* θ's when it ended */
	int worker;       /* RUN_DIVERGED: the first worker whose loss was not finite */
	float loss;       /* RUN_DIVERGED: that loss (NaN or ±inf) */
};
/* Write the "end" event (e->how not RUN_GOING); vtime < 0: none. */
void run_log_end(FILE *f, double vtime, const struct run_end *e);
/* How the run whose files are in dir ended (a sliced run's RUNDIR: every slice's log; complete
 * when each is, diverged when one is): its log's last two lines, an "end" and the "stop" after
 * it. A run that diverged is refused (GEM_EUSAGE, err says why: resuming it would diverge
 * again); *e is filled either way. */
int run_end_read(const char *dir, struct run_end *e, char *err);
#endif
