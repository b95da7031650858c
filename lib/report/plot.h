/* plot: read runs' log.jsonl (gem-protocol(7), section THE LOG) and write the views
 * gem-plot-data prints — training loss, π per tensor, staleness, throughput, per-worker
 * figures — as gnuplot data blocks (one per run or per worker, two blank lines apart), as one
 * CSV table or JSON lines (the run in a first column), or as a complete gnuplot script with the
 * data inline. Malformed log lines are reported through log.h
 * and skipped. */
#ifndef GEM_PLOT_H
#define GEM_PLOT_H
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum plot_view { PLOT_LOSS, PLOT_PI, PLOT_STALENESS, PLOT_THROUGHPUT, PLOT_WORKERS };
/* Which per-tensor π statistic of an update line the pi view shows. */
enum plot_stat { PLOT_MEDIAN, PLOT_MEAN, PLOT_ZERO, PLOT_SCALE };
enum plot_term { PLOT_PNG, PLOT_SVG, PLOT_DUMB };
/* How the data is written: TSV blocks for gnuplot, one CSV table, or JSON lines. */
enum plot_format { PLOT_TSV, PLOT_CSV, PLOT_JSON };
/* The loss view's first column (its x-axis): the view's default (version per update, the
 * worker's step per worker), or the one named. */
enum plot_x { PLOT_X_AUTO, PLOT_X_VERSION, PLOT_X_SAMPLES, PLOT_X_SECONDS, PLOT_X_BYTES, PLOT_X_STEP };

/* One update line: what the views need of it. */
struct plot_update {
	double t;          /* training seconds: "vtime" when the line has it, else "elapsed" */
	double loss;       /* NAN when the line's loss is null */
	uint64_t version;  /* central version after this update */
	uint64_t samples;  /* samples consumed by all central updates so far */
	uint64_t bytes;    /* a server's bytes on the wire so far (0 in logs that count none) */
	int64_t worker;
	int64_t tau;
	int has_n;         /* a server's commit: n is the worker's own samples */
	uint64_t n;
	int by_leave;      /* a round closed by a worker's leave: no commit of its own */
};

/* A commit a round held until its last worker's ("held" event: no update of its own). */
struct plot_held {
	double t;          /* the time of the update that closed its round (NaN: none yet) */
	int64_t worker;
	uint64_t n;        /* its samples (0: not logged) */
};

/* One run's log, read whole. */
struct plot_log {
	char path[PATH_MAX];    /* the log file read, "-" for stdin */
	char label[PATH_MAX + 64]; /* "gem, 4 workers", "local", "sgp, node 2" (with a run.json
				    * beside the log: its start event's rule, else run.json's), else path */
	struct plot_update *u;
	size_t n;
	int64_t *workers;       /* distinct worker ids, ascending: of the updates, joins and held
				 * commits (a round's workers, not only those whose commit closed it) */
	size_t nworkers;
	struct plot_held *held; /* the commits rounds held */
	size_t nheld, hcap;
	size_t held_open;       /* held[held_open..nheld) wait for their round's update */
	char **tensors;         /* names from the start event ("tensor0", ... if none) */
	size_t ntensors;
	float *pi;              /* npi rows of ntensors values of the chosen statistic */
	uint64_t *pi_version;   /* the version of each pi row */
	size_t npi;
	long nbad;              /* malformed lines skipped */
	long nlines;            /* whole lines read */
	int stopped;            /* a stop event came after the last start event */
	int64_t node;           /* an SGP node's log: the node ("sgp" event), else -1 */
	uint64_t iters;         /* an SGP node's log: its iterations to do ("sgp" event), or 0 */
	char rule[64];          /* the last start event's rule, "" if none */
	int text;               /* run.json beside the log has a sequence model: its loss is per
				 * byte (the loss view draws it in bits) */
	size_t ucap, wcap, picap;
};

/* What to write, and how. */
struct plot_opts {
	enum plot_view view;
	int by_worker;          /* loss: one block per worker, per worker-step */
	long smooth;            /* loss: moving-average window (updates) */
	long bins;              /* pi: at most this many columns */
	enum plot_stat stat;    /* pi: which statistic */
	double window;          /* throughput: window in seconds */
	int gnuplot;            /* write a gnuplot script with the data inline */
	enum plot_term term;
	const char *output;     /* gnuplot: `set output` to this file, when not NULL */
	enum plot_format format; /* data only: TSV (default), CSV or JSON lines */
	enum plot_x x;          /* loss: the first column */
	int follow;             /* the logs grow: leave a half-written last line */
};

/* Defaults: loss view, smooth 50, bins 200, median, window 1 s, data only, png. */
void plot_opts_init(struct plot_opts *o);

/* Names to enums ("loss", "median", "png", ...); -1 for an unknown name (a view's: err names
 * the valid ones). */
int plot_view_parse(const char *s, enum plot_view *out, char *err);
int plot_stat_parse(const char *s, enum plot_stat *out);
int plot_term_parse(const char *s, enum plot_term *out);
int plot_x_parse(const char *s, enum plot_x *out); /* version, samples, seconds, bytes */

/* The logs an argument stands for, into paths[0..*n) (each to free, the array too): a RUNDIR
 * holding log.jsonl stands for it; one holding SGP node logs (node-0.jsonl, ...) for those;
 * anything else for itself. 0, or GEM_ENOMEM. */
int plot_log_paths(const char *arg, char ***paths, size_t *n, char *err);

/* Is the run a log belongs to over? 1 when the log says it stopped (a stop event after the
 * last start; an SGP node past its iterations), or, but for an SGP node's log, no process
 * trains its directory (eval_run_active: a training ended or killed); 0 while it goes on. */
int plot_log_over(const struct plot_log *lg);

/* Read a log: a file, a RUNDIR holding log.jsonl, or "-" for stdin, for the view of o (the pi
 * statistic o->stat only for the pi view). Malformed lines are logged (file:line) and skipped,
 * but for those up to line quiet_upto (reported by an earlier read of a growing log); with
 * o->follow a last line without its newline is left for the next read. A log with no update
 * line is an error. The label is not final until plot_logs_label. */
int plot_log_read(const char *arg, const struct plot_opts *o, long quiet_upto,
		  struct plot_log *lg, char *err);
void plot_log_free(struct plot_log *lg);

/* Make the labels of several runs tell them apart: equal labels get their path appended. */
void plot_logs_label(struct plot_log *logs, size_t nlogs);

/* Write the view of the runs to f: data blocks, or a gnuplot script when o->gnuplot. Fails
 * (GEM_EFAIL) when there is nothing to show, e.g. the pi view on a log without π. */
int plot_write(FILE *f, const struct plot_opts *o, const struct plot_log *logs, size_t nlogs,
	       char *err);
#endif
