/* plot_script: the gnuplot script around gem-plot-data's tables (--gnuplot): its head, and the
 * plot commands of each view over the blocks plot_table wrote (plot_impl.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "report/plot_impl.h"

/* ---- gnuplot ---- */

/* Start the next series of a plot command for block b: 0 to skip an empty block, else 1
 * after the separator that goes before every series but the first. */
static int series_next(FILE *f, const struct block *b, int *first)
{
	if (!b->rows)
		return 0;
	if (!*first)
		fputs(", \\\n     ", f);
	*first = 0;
	return 1;
}

/* A gnuplot single-quoted string: only '' needs escaping. */
static void put_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		if (*s != '\n')
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* A series title: "worker 3" (one run, loss --by worker), else "what, run label" or the label. */
static void block_title(const struct writer *w, const struct block *b, const char *what, FILE *f)
{
	char t[PATH_MAX + 160];
	const char *label = w->logs[b->run].label;
	int per_worker = w->o->view == PLOT_LOSS && w->o->by_worker;
	if (per_worker && w->nlogs == 1)
		snprintf(t, sizeof t, "worker %lld", (long long)b->worker);
	else if (per_worker)
		snprintf(t, sizeof t, "%s: worker %lld", label, (long long)b->worker);
	else
		snprintf(t, sizeof t, "%s%s%s", what, *what ? ", " : "", label);
	put_quoted(f, t);
}

void plot_script_head(const struct writer *w, int nplots)
{
	FILE *f = w->f;
	int h = 640;
	fprintf(f, "# gem-plot-data %s: a gnuplot script with its data inline; pipe it into gnuplot\n",
		plot_view_names[w->o->view]);
	if (w->o->view == PLOT_PI && nplots > 1)
		h = 360 * nplots;
	switch (w->o->term) {
	case PLOT_PNG: fprintf(f, "set terminal pngcairo size 1024,%d noenhanced\n", h); break;
	case PLOT_SVG: fprintf(f, "set terminal svg size 1024,%d dynamic noenhanced\n", h); break;
	case PLOT_DUMB: fprintf(f, "set terminal dumb size 79,24\nset termoption noenhanced\n"); break;
	}
	if (w->o->output) {
		fputs("set output ", f);
		put_quoted(f, w->o->output);
		fputc('\n', f);
	} else if (w->o->term == PLOT_PNG) {
		/* PNG bytes on gnuplot's standard output: not when that is a terminal (Linux: the
		 * shell system() runs is gnuplot's child, its /proc/PPID/fd/1 gnuplot's stdout) */
		fputs("if (system('f=$(readlink /proc/$PPID/fd/1 2>/dev/null); case \"$f\" in "
		      "/dev/pts/*|/dev/tty*|/dev/console) echo 1;; *) echo 0;; esac') eq '1') {\n"
		      "  print 'gem-plot-data: not writing a PNG to a terminal: redirect gnuplot''s "
		      "output to a file, or use -o FILE or --term dumb'\n  exit status 2\n}\n",
		      f);
	}
}

/* The x-axis label of the loss view. An SGP node's version counts its iterations: it has no
 * server. */
static const char *loss_xlabel(const struct writer *w)
{
	size_t sgp = 0;
	for (size_t r = 0; r < w->nlogs; r++)
		sgp += w->logs[r].node >= 0;
	switch (plot_loss_x(w->o)) {
	case PLOT_X_SAMPLES: return "training samples";
	case PLOT_X_SECONDS: return "training seconds";
	case PLOT_X_BYTES: return "bytes on the wire";
	case PLOT_X_STEP: return "worker steps";
	default:
		if (sgp == w->nlogs)
			return "iterations";
		return sgp ? "central updates (version); SGP: iterations" : "central updates (version)";
	}
}

/* pi on a text terminal, where an image is unreadable: one line per tensor (its values over
 * the matrix's columns), one picture per run. */
static void script_pi_lines(struct writer *w, size_t i)
{
	FILE *f = w->f;
	const struct plot_log *lg = &w->logs[w->b[i].run];
	fprintf(f, "set ylabel 'pi (%s)'\nplot ", plot_stat_names[w->o->stat]);
	for (size_t k = 0; k < lg->ntensors; k++) {
		fprintf(f, "%s$data index %zu matrix nonuniform using 1:($2 == %zu ? $3 : NaN) with lines "
			   "title ", k ? ", \\\n     " : "", i, k);
		put_quoted(f, lg->tensors[k]);
	}
	fputc('\n', f);
}

/* The pi view's script: one heat map per run, or lines on a terminal. */
static void script_pi(struct writer *w, size_t nonempty)
{
	FILE *f = w->f;
	const struct plot_opts *o = w->o;
	if (nonempty > 1)
		fprintf(f, "set multiplot layout %zu,1\n", nonempty);
	fprintf(f, "set xlabel 'central updates (version)'\nset autoscale xfix\nset cbrange [0:*]\n"
		   "set palette rgbformulae 33,13,10\n");
	for (size_t i = 0; i < w->nb; i++) {
		const struct plot_log *lg = &w->logs[w->b[i].run];
		if (!w->b[i].rows)
			continue;
		fprintf(f, "set title ");
		char t[PATH_MAX + 128];
		snprintf(t, sizeof t, "%s pi per tensor: %s", plot_stat_names[o->stat], lg->label);
		put_quoted(f, t);
		fputc('\n', f);
		if (o->term == PLOT_DUMB) {
			script_pi_lines(w, i);
			continue;
		}
		fprintf(f, "set yrange [-0.5:%zu.5]\nset ytics (", lg->ntensors - 1);
		for (size_t k = 0; k < lg->ntensors; k++) {
			if (k)
				fputs(", ", f);
			put_quoted(f, lg->tensors[k]);
			fprintf(f, " %zu", k);
		}
		fprintf(f, ")\nplot $data index %zu matrix nonuniform with image notitle\n", i);
	}
	if (nonempty > 1)
		fprintf(f, "unset multiplot\n");
}

/* The plot commands for the blocks written into $data. */
int plot_script_plot(struct writer *w, char *err)
{
	FILE *f = w->f;
	const struct plot_opts *o = w->o;
	int first = 1, multi = w->nlogs > 1, bits = 1;
	size_t nonempty = 0;
	/* the log's loss is in nats; runs of texts only are drawn in bits per byte */
	for (size_t i = 0; i < w->nlogs; i++)
		bits &= w->logs[i].text;
	for (size_t i = 0; i < w->nb; i++)
		nonempty += w->b[i].rows > 0;
	if (!nonempty)
		return gem_errf(err, GEM_EFAIL, "nothing to plot in the %s view", plot_view_names[o->view]);
	/* the key below the plot, where it covers no curve */
	fprintf(f, "set key below\nset grid\n");
	switch (o->view) {
	case PLOT_LOSS:
		fprintf(f, "set title 'training loss (moving average over %ld)'\n", o->smooth);
		fprintf(f, "set xlabel '%s'\nset ylabel 'training loss%s'\n", loss_xlabel(w),
			bits ? " (bits per byte)" : "");
		fputs("plot ", f);
		for (size_t i = 0; i < w->nb; i++) {
			if (!series_next(f, &w->b[i], &first))
				continue;
			if (!multi && !o->by_worker)
				fprintf(f, "$data index %zu using 1:%s with dots lc rgb '#a0a0a0' title 'loss', \\\n     ",
					i, bits ? "($3/log(2))" : "3");
			fprintf(f, "$data index %zu using 1:%s with lines lw 2 title ", i, bits ? "($4/log(2))" : "4");
			block_title(w, &w->b[i], multi || o->by_worker ? "" : "moving average", f);
		}
		fputc('\n', f);
		break;
	case PLOT_PI:
		script_pi(w, nonempty);
		break;
	case PLOT_STALENESS:
		/* a log scale: the long tail of rare large tau shows beside the common small ones */
		fprintf(f, "set title 'staleness'\nset xlabel 'staleness tau (central updates)'\n"
			   "set ylabel 'fraction of commits (log scale)'\nset logscale y\n"
			   "set style fill solid 0.5\nset boxwidth 0.8\nset xrange [-0.5:*]\n");
		fputs("plot ", f);
		for (size_t i = 0; i < w->nb; i++) {
			if (!series_next(f, &w->b[i], &first))
				continue;
			fprintf(f, "$data index %zu using 1:3 with %s title ", i, multi ? "linespoints" : "boxes");
			block_title(w, &w->b[i], "", f);
		}
		fputc('\n', f);
		break;
	case PLOT_THROUGHPUT:
		fprintf(f, "set title 'throughput (window %g s)'\nset xlabel 'seconds since the first update'\n"
			   "set ylabel 'updates/s'\nset y2label 'samples/s'\nset ytics nomirror\nset y2tics\n"
			   "set yrange [0:*]\nset y2range [0:*]\n", o->window);
		fputs("plot ", f);
		for (size_t i = 0; i < w->nb; i++) {
			if (!series_next(f, &w->b[i], &first))
				continue;
			fprintf(f, "$data index %zu using 1:2 with lines lw 2 title ", i);
			block_title(w, &w->b[i], "updates/s", f);
			fprintf(f, ", \\\n     $data index %zu using 1:3 axes x1y2 with lines dt 2 title ", i);
			block_title(w, &w->b[i], "samples/s", f);
		}
		fputc('\n', f);
		break;
	case PLOT_WORKERS:
		fprintf(f, "set title 'commits per worker'\nset xlabel 'worker'\nset ylabel 'commits'\n"
			   "set style fill solid 0.5\nset boxwidth 0.8\nset yrange [0:*]\n"
			   "set offsets 0.5, 0.5, graph 0.1, 0\n");
		fputs("plot ", f);
		for (size_t i = 0; i < w->nb; i++) {
			if (!series_next(f, &w->b[i], &first))
				continue;
			fprintf(f, "$data index %zu using 1:2 with %s title ", i, multi ? "linespoints" : "boxes");
			block_title(w, &w->b[i], "", f);
		}
		fputc('\n', f);
		break;
	}
	return 0;
}
