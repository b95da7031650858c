/* plot_impl: what the three parts of gem-plot-data's module share (report/plot.h is its
 * contract): plot.c reads the logs and writes through plot_write, plot_table.c the tables of
 * each view, plot_script.c the gnuplot script around them. */
#ifndef GEM_PLOT_IMPL_H
#define GEM_PLOT_IMPL_H
#include <stdint.h>
#include <stdio.h>

#include "base/grow.h"
#include "report/plot.h"

/* A data block written: which run, which worker (loss --by worker), how many rows. */
struct block {
	size_t run;
	int64_t worker;
	size_t rows;
};

struct writer {
	FILE *f;
	const struct plot_opts *o;
	const struct plot_log *logs;
	size_t nlogs;
	struct block *b;
	size_t nb, bcap;
	const char *const *cols; /* the current block's column names */
	size_t ncols, col;       /* how many, and the next cell's */
	int csv_head;            /* CSV: the header row is written */
};

/* plot.c's names of the views and of the pi statistics, in their enums' order */
extern const char *const plot_view_names[];
extern const char *const plot_stat_names[];

/* plot_table.c: each view's table (plot_write picks one) */
int plot_view_loss(struct writer *w, char *err);
int plot_view_pi(struct writer *w, char *err);
int plot_view_staleness(struct writer *w, char *err);
int plot_view_throughput(struct writer *w, char *err);
int plot_view_workers(struct writer *w, char *err);
/* The loss view's x-axis: --x, else the worker's step (--by worker) or the version. */
enum plot_x plot_loss_x(const struct plot_opts *o);

/* plot_script.c: the script's head (before the data), and its plot commands (after) */
void plot_script_head(const struct writer *w, int nplots);
int plot_script_plot(struct writer *w, char *err);

#endif
