/* plot: read runs' log.jsonl (gem-protocol(7), section THE LOG) and write the views
 * gem-plot-data prints — training loss, π per tensor, staleness, throughput, per-worker
 * figures — as gnuplot data blocks (one per run or per worker, two blank lines apart) or as a
 * complete gnuplot script with the data inline. Malformed log lines are reported through log.h
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

/* One update line: what the views need of it. */
struct plot_update {
	double t;          /* training seconds: "vtime" when the line has it, else "elapsed" */
	double loss;       /* NAN when the line's loss is null */
	uint64_t version;  /* central version after this update */
	uint64_t samples;  /* samples consumed by all central updates so far */
	int64_t worker;
	int64_t tau;
};

/* One run's log, read whole. */
struct plot_log {
	char path[PATH_MAX];    /* the log file read, "-" for stdin */
	char label[PATH_MAX + 64]; /* "gem, 4 workers" from run.json beside the log, else path */
	struct plot_update *u;
	size_t n;
	int64_t *workers;       /* distinct worker ids, ascending */
	size_t nworkers;
	char **tensors;         /* names from the start event ("tensor0", ... if none) */
	size_t ntensors;
	float *pi;              /* npi rows of ntensors values of the chosen statistic */
	uint64_t *pi_version;   /* the version of each pi row */
	size_t npi;
	long nbad;              /* malformed lines skipped */
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
};

/* Defaults: loss view, smooth 50, bins 200, median, window 1 s, data only, png. */
void plot_opts_init(struct plot_opts *o);

/* Names to enums ("loss", "median", "png", ...); -1 for an unknown name. */
int plot_view_parse(const char *s, enum plot_view *out);
int plot_stat_parse(const char *s, enum plot_stat *out);
int plot_term_parse(const char *s, enum plot_term *out);
const char *plot_view_name(enum plot_view v);

/* Read a log: a file, a RUNDIR holding log.jsonl, or "-" for stdin. The pi statistic `stat`
 * is read only when want_pi. Malformed lines are logged (file:line) and skipped; a log with no
 * update line is an error. The label is not final until plot_logs_label. */
int plot_log_read(const char *arg, int want_pi, enum plot_stat stat, struct plot_log *lg,
		  char *err);
void plot_log_free(struct plot_log *lg);

/* Make the labels of several runs tell them apart: equal labels get their path appended. */
void plot_logs_label(struct plot_log *logs, size_t nlogs);

/* Write the view of the runs to f: data blocks, or a gnuplot script when o->gnuplot. Fails
 * (GEM_EFAIL) when there is nothing to show, e.g. the pi view on a log without π. */
int plot_write(FILE *f, const struct plot_opts *o, const struct plot_log *logs, size_t nlogs,
	       char *err);
#endif
