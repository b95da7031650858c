/* plot_table: gem-plot-data's tables, one per view, from the logs plot.c read: TSV (gnuplot's
 * data blocks), CSV or JSON lines (plot_impl.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "report/plot_impl.h"

/* The throughput view refuses windows so small that the table would be absurd. */
#define PLOT_MAXWINDOWS 10000000

/* A JSON string (jansson's escaping). */
static void put_json_str(FILE *f, const char *s)
{
	json_t *j = json_string(s);
	if (!j || json_dumpf(j, f, JSON_ENCODE_ANY) < 0)
		fputs("null", f); /* not UTF-8, or no memory */
	json_decref(j);
}

/* A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
static void put_csv_str(FILE *f, const char *s)
{
	if (!s[strcspn(s, ",\"\r\n")]) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Start a new block of columns cols[0..ncols) (none: the pi matrix, TSV only). TSV: two blank
 * lines after the previous block (gnuplot's `index`), the column names as a plain header line,
 * then "# run: label" (and "# worker W"); CSV: the header row once, with "run" (and "worker")
 * first; JSON lines: nothing. */
static struct block *block_begin(struct writer *w, size_t run, int64_t worker,
				 const char *const *cols, size_t ncols)
{
	FILE *f = w->f;
	struct block *b;
	if (grow_array(&w->b, &w->bcap, w->nb + 1, sizeof *w->b, 64) < 0)
		return NULL;
	b = &w->b[w->nb++];
	b->run = run;
	b->worker = worker;
	b->rows = 0;
	w->cols = cols;
	w->ncols = ncols;
	w->col = 0;
	if (w->o->format == PLOT_TSV) {
		if (w->nb > 1)
			fputs("\n\n", f);
		for (size_t i = 0; i < ncols; i++)
			fprintf(f, "%s%s", i ? "\t" : "", cols[i]);
		if (ncols)
			fputc('\n', f);
		fprintf(f, "# run: %s\n", w->logs[run].label);
		if (worker >= 0)
			fprintf(f, "# worker %lld\n", (long long)worker);
	} else if (w->o->format == PLOT_CSV && !w->csv_head) {
		fputs(worker >= 0 ? "run,worker" : "run", f);
		for (size_t i = 0; i < ncols; i++)
			fprintf(f, ",%s", cols[i]);
		fputc('\n', f);
		w->csv_head = 1;
	}
	return b;
}

/* Before the next cell of a row: the separator, and at a row's start in CSV and JSON its run
 * (and worker); in JSON the column's key. */
static void cell_start(struct writer *w)
{
	FILE *f = w->f;
	const struct block *b = &w->b[w->nb - 1];
	const char *label = w->logs[b->run].label;
	if (w->o->format == PLOT_TSV) {
		if (w->col)
			fputc('\t', f);
	} else if (w->o->format == PLOT_CSV) {
		if (!w->col) {
			put_csv_str(f, label);
			if (b->worker >= 0)
				fprintf(f, ",%lld", (long long)b->worker);
		}
		fputc(',', f);
	} else {
		if (!w->col) {
			fputs("{\"run\":", f);
			put_json_str(f, label);
			if (b->worker >= 0)
				fprintf(f, ",\"worker\":%lld", (long long)b->worker);
		}
		fputc(',', f);
		put_json_str(f, w->col < w->ncols ? w->cols[w->col] : "?");
		fputc(':', f);
	}
	w->col++;
}

static void cell_u(struct writer *w, uint64_t v)
{
	cell_start(w);
	fprintf(w->f, "%llu", (unsigned long long)v);
}

static void cell_i(struct writer *w, int64_t v)
{
	cell_start(w);
	fprintf(w->f, "%lld", (long long)v);
}

/* A number in fmt; one that is not finite reads nan, inf or -inf (num_format; JSON: null). */
static void cell_num(struct writer *w, const char *fmt, double v)
{
	char buf[64];
	cell_start(w);
	if (w->o->format == PLOT_JSON && !isfinite(v))
		fputs("null", w->f);
	else
		fputs(num_format(buf, sizeof buf, fmt, v), w->f);
}

static void cell_g(struct writer *w, double v)
{
	cell_num(w, "%.6g", v);
}

static void cell_str(struct writer *w, const char *s)
{
	cell_start(w);
	if (w->o->format == PLOT_JSON)
		put_json_str(w->f, s);
	else if (w->o->format == PLOT_CSV)
		put_csv_str(w->f, s);
	else
		fputs(s, w->f);
}

static void row_end(struct writer *w)
{
	if (w->o->format == PLOT_JSON)
		fputc('}', w->f);
	fputc('\n', w->f);
	w->col = 0;
	w->b[w->nb - 1].rows++;
}

static void put_num(FILE *f, double v, const char *sep)
{
	char buf[64];
	fprintf(f, "%s%s", num_format(buf, sizeof buf, "%.6g", v), sep);
}

/* Trailing moving average over the last `win` values, written beside each value. */
struct movavg {
	double *ring, sum;
	long win, n, at;
};

static double movavg_push(struct movavg *m, double v)
{
	if (m->n == m->win)
		m->sum -= m->ring[m->at];
	else
		m->n++;
	m->ring[m->at] = v;
	m->sum += v;
	m->at = (m->at + 1) % m->win;
	return m->sum / (double)m->n;
}

/* Where worker id w is in lg->workers (it is there: every update's worker was added). */
static size_t worker_index(const struct plot_log *lg, int64_t w)
{
	size_t lo = 0, hi = lg->nworkers;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (lg->workers[mid] < w)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The loss view's first two columns: the x-axis chosen, then the version (the worker's step
 * with --by worker), or the samples when the x-axis is the version. */
enum plot_x plot_loss_x(const struct plot_opts *o)
{
	return o->x != PLOT_X_AUTO ? o->x : o->by_worker ? PLOT_X_STEP : PLOT_X_VERSION;
}

static enum plot_x loss_x2(const struct plot_opts *o)
{
	enum plot_x x = plot_loss_x(o);
	if (o->by_worker)
		return x == PLOT_X_STEP ? PLOT_X_VERSION : PLOT_X_STEP;
	return x == PLOT_X_VERSION ? PLOT_X_SAMPLES : PLOT_X_VERSION;
}

static const char *x_names[] = {"", "version", "samples", "seconds", "bytes", "step"};

static void cell_x(struct writer *w, enum plot_x x, const struct plot_update *u, long step)
{
	switch (x) {
	case PLOT_X_AUTO:
	case PLOT_X_VERSION: cell_u(w, u->version); break;
	case PLOT_X_SAMPLES: cell_u(w, u->samples); break;
	case PLOT_X_SECONDS: cell_num(w, "%.3f", u->t); break;
	case PLOT_X_BYTES: cell_u(w, u->bytes); break;
	case PLOT_X_STEP: cell_i(w, step); break;
	}
}

/* One block of the loss view: the updates idx[0..n) of run r (all of them when idx is NULL),
 * null losses left out of the rows but counted as worker steps. */
static int loss_block(struct writer *w, size_t r, int64_t worker, const size_t *idx, size_t n,
		      struct movavg *m)
{
	const struct plot_log *lg = &w->logs[r];
	enum plot_x x = plot_loss_x(w->o), x2 = loss_x2(w->o);
	char avg[32];
	const char *cols[] = {x_names[x], x_names[x2], "loss", avg};
	snprintf(avg, sizeof avg, "loss_avg%ld", m->win);
	if (!block_begin(w, r, worker, cols, 4))
		return -1;
	m->n = m->at = 0;
	m->sum = 0;
	for (size_t i = 0; i < n; i++) {
		const struct plot_update *u = &lg->u[idx ? idx[i] : i];
		if (isnan(u->loss))
			continue;
		cell_x(w, x, u, (long)i + 1);
		cell_x(w, x2, u, (long)i + 1);
		cell_g(w, u->loss);
		cell_g(w, movavg_push(m, u->loss));
		row_end(w);
	}
	return 0;
}

/* loss: per central update (x, version or samples, loss, moving average) skipping null
 * losses; with --by worker, per worker-step in one block per worker. */
int plot_view_loss(struct writer *w, char *err)
{
	struct movavg m = {0};
	size_t *order = NULL, *start = NULL, *wi = NULL;
	int rc = 0;
	m.win = w->o->smooth;
	if (!(m.ring = malloc((size_t)m.win * sizeof *m.ring)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (size_t r = 0; r < w->nlogs; r++) {
		const struct plot_log *lg = &w->logs[r];
		if (!w->o->by_worker) {
			if (loss_block(w, r, -1, NULL, lg->n, &m) < 0)
				goto nomem;
			continue;
		}
		/* Bucket the updates by worker (a counting sort), keeping log order within one. */
		free(order);
		free(start);
		order = malloc(lg->n * sizeof *order);
		start = calloc(lg->nworkers + 1, sizeof *start);
		wi = malloc(lg->n * sizeof *wi);
		if (!order || !start || !wi)
			goto nomem;
		for (size_t i = 0; i < lg->n; i++) {
			wi[i] = worker_index(lg, lg->u[i].worker);
			start[wi[i] + 1]++;
		}
		for (size_t k = 0; k < lg->nworkers; k++)
			start[k + 1] += start[k];
		for (size_t i = 0; i < lg->n; i++)
			order[start[wi[i]]++] = i;
		free(wi);
		wi = NULL;
		/* start[k] now ends bucket k; bucket k begins where bucket k-1 ended. */
		for (size_t k = 0, at = 0; k < lg->nworkers; at = start[k], k++)
			if (loss_block(w, r, lg->workers[k], order + at, start[k] - at, &m) < 0)
				goto nomem;
	}
	goto out;
nomem:
	rc = gem_errf(err, GEM_ENOMEM, "out of memory");
out:
	free(wi);
	free(order);
	free(start);
	free(m.ring);
	return rc;
}

/* The pi matrix of a run in TSV (gnuplot's `matrix nonuniform`): first row ncols then each
 * column's mean version; then per tensor its index and one value per column. */
static void pi_matrix(struct writer *w, const struct plot_log *lg, const double *x,
		      const double *val, size_t ncols)
{
	fprintf(w->f, "%zu", ncols);
	for (size_t c = 0; c < ncols; c++)
		fprintf(w->f, "\t%.6g", x[c]);
	fputc('\n', w->f);
	for (size_t k = 0; k < lg->ntensors; k++) {
		fprintf(w->f, "%zu", k);
		for (size_t c = 0; c < ncols; c++) {
			fputc('\t', w->f);
			put_num(w->f, val[k * ncols + c], "");
		}
		fputc('\n', w->f);
	}
	w->b[w->nb - 1].rows = lg->ntensors;
}

/* pi: per tensor, the chosen statistic averaged over bins of consecutive updates: in TSV a
 * gnuplot `matrix nonuniform` under comment lines naming the tensors; in CSV and JSON one row
 * per column and tensor (version, tensor, value). */
int plot_view_pi(struct writer *w, char *err)
{
	static const char *const cols[] = {"version", "tensor", "value"};
	int tsv = w->o->format == PLOT_TSV;
	for (size_t r = 0; r < w->nlogs; r++) {
		const struct plot_log *lg = &w->logs[r];
		size_t U = lg->npi, nt = lg->ntensors;
		size_t ncols = U < (size_t)w->o->bins ? U : (size_t)w->o->bins;
		double *val, *x;
		size_t *cnt;
		if (!block_begin(w, r, -1, tsv ? NULL : cols, tsv ? 0 : 3))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		if (tsv) {
			fprintf(w->f, "# %s pi per tensor over central updates, %zu updates in %zu columns\n",
				plot_stat_names[w->o->stat], U, ncols);
			fprintf(w->f, "# matrix nonuniform: first row: columns, then the version at each "
				      "column; then per tensor: its index, then its values\n");
			for (size_t k = 0; k < nt; k++)
				fprintf(w->f, "# tensor %zu: %s\n", k, lg->tensors[k]);
		}
		if (ncols == 0 || nt == 0)
			continue;
		val = calloc(nt * ncols, sizeof *val);
		cnt = calloc(nt * ncols, sizeof *cnt);
		x = calloc(ncols, sizeof *x);
		if (!val || !cnt || !x) {
			free(val);
			free(cnt);
			free(x);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		/* Column c holds updates [c·U/ncols, (c+1)·U/ncols). */
		for (size_t c = 0; c < ncols; c++) {
			size_t lo = (size_t)((uint64_t)c * U / ncols), hi = (size_t)((uint64_t)(c + 1) * U / ncols);
			double vs = 0;
			for (size_t i = lo; i < hi; i++) {
				const float *row = lg->pi + i * nt;
				vs += (double)lg->pi_version[i];
				for (size_t k = 0; k < nt; k++) {
					if (isnan(row[k]))
						continue;
					val[k * ncols + c] += row[k];
					cnt[k * ncols + c]++;
				}
			}
			x[c] = vs / (double)(hi - lo);
		}
		for (size_t j = 0; j < nt * ncols; j++)
			val[j] = cnt[j] ? val[j] / (double)cnt[j] : NAN;
		if (tsv) {
			pi_matrix(w, lg, x, val, ncols);
		} else {
			for (size_t c = 0; c < ncols; c++)
				for (size_t k = 0; k < nt; k++) {
					cell_g(w, x[c]);
					cell_str(w, lg->tensors[k]);
					cell_g(w, val[k * ncols + c]);
					row_end(w);
				}
		}
		free(val);
		free(cnt);
		free(x);
	}
	return 0;
}


/* staleness: histogram of τ over commits, every τ from 0 to the largest. */
int plot_view_staleness(struct writer *w, char *err)
{
	for (size_t r = 0; r < w->nlogs; r++) {
		const struct plot_log *lg = &w->logs[r];
		static const char *const cols[] = {"tau", "count", "fraction"};
		int64_t *tau = malloc(lg->n * sizeof *tau);
		if (!tau || !block_begin(w, r, -1, cols, 3)) {
			free(tau);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < lg->n; i++)
			tau[i] = lg->u[i].tau;
		qsort(tau, lg->n, sizeof *tau, cmp_i64);
		for (size_t i = 0, t = 0; i < lg->n; t++) {
			size_t c = 0;
			while (i < lg->n && tau[i] == (int64_t)t)
				i++, c++;
			cell_u(w, t);
			cell_u(w, c);
			cell_g(w, (double)c / (double)lg->n);
			row_end(w);
		}
		free(tau);
	}
	return 0;
}

/* throughput: over windows (kW, (k+1)W] of seconds since the first update, updates per second
 * and samples per second (the growth of "samples" since the previous update line). */
int plot_view_throughput(struct writer *w, char *err)
{
	double W = w->o->window;
	for (size_t r = 0; r < w->nlogs; r++) {
		const struct plot_log *lg = &w->logs[r];
		double t0 = lg->u[0].t, tmax = t0, *ups, *sps;
		size_t K;
		static const char *const cols[] = {"time", "updates_per_s", "samples_per_s"};
		for (size_t i = 1; i < lg->n; i++)
			if (lg->u[i].t > tmax)
				tmax = lg->u[i].t;
		if ((tmax - t0) / W > PLOT_MAXWINDOWS)
			return gem_errf(err, GEM_EUSAGE, "%s: %.0f s in windows of %g s: too many windows",
					lg->path, tmax - t0, W);
		K = (size_t)ceil((tmax - t0) / W);
		ups = calloc(K ? K : 1, sizeof *ups);
		sps = calloc(K ? K : 1, sizeof *sps);
		if (!ups || !sps || !block_begin(w, r, -1, cols, 3)) {
			free(ups);
			free(sps);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		for (size_t i = 1; i < lg->n; i++) {
			double dt = lg->u[i].t - t0;
			size_t k;
			if (dt <= 0)
				continue;
			k = (size_t)ceil(dt / W) - 1;
			if (k >= K)
				k = K - 1;
			ups[k] += 1;
			sps[k] += (double)lg->u[i].samples - (double)lg->u[i - 1].samples;
		}
		for (size_t k = 0; k < K; k++) {
			cell_g(w, (double)(k + 1) * W);
			cell_g(w, ups[k] / W);
			cell_g(w, sps[k] / W);
			row_end(w);
		}
		free(ups);
		free(sps);
	}
	return 0;
}

/* workers: per worker, its commits, the samples they consumed (growth of "samples" over the
 * previous update line; the first line counts whole when it is version 1), mean and max τ,
 * mean loss, and samples/s over the span from its first to its last commit (a straggler shows
 * here). */
int plot_view_workers(struct writer *w, char *err)
{
	struct acc {
		uint64_t commits, samples, nloss, ntau;
		double tau, loss, t_first, t_last;
		int64_t maxtau;
	};
	for (size_t r = 0; r < w->nlogs; r++) {
		const struct plot_log *lg = &w->logs[r];
		static const char *const cols[] = {"worker", "commits", "samples", "mean_tau",
						   "max_tau", "mean_loss", "samples_per_s"};
		struct acc *a = calloc(lg->nworkers, sizeof *a);
		if (!a || !block_begin(w, r, -1, cols, 7)) {
			free(a);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		/* a round's held commits first: each is its worker's, with its own samples */
		for (size_t i = 0; i < lg->nheld; i++) {
			const struct plot_held *h = &lg->held[i];
			struct acc *x = &a[worker_index(lg, h->worker)];
			if (isnan(h->t))
				continue; /* its round has not closed */
			if (!x->commits++ || h->t < x->t_first)
				x->t_first = h->t;
			if (h->t > x->t_last)
				x->t_last = h->t;
			x->samples += h->n;
		}
		for (size_t i = 0; i < lg->n; i++) {
			const struct plot_update *u = &lg->u[i];
			struct acc *x = &a[worker_index(lg, u->worker)];
			uint64_t prev = i ? lg->u[i - 1].samples : 0;
			if (u->by_leave)
				continue; /* a round a leave closed: no commit of the worker's */
			if (!x->commits++ || u->t < x->t_first)
				x->t_first = u->t;
			if (u->t > x->t_last)
				x->t_last = u->t;
			/* its own samples when the server logged them (not the round's), else the
			 * growth of the total (a log of an earlier gem) */
			if (u->has_n)
				x->samples += u->n;
			else if ((i || u->version == 1) && u->samples >= prev)
				x->samples += u->samples - prev;
			x->ntau++;
			x->tau += (double)u->tau;
			if (u->tau > x->maxtau)
				x->maxtau = u->tau;
			if (!isnan(u->loss)) {
				x->loss += u->loss;
				x->nloss++;
			}
		}
		for (size_t k = 0; k < lg->nworkers; k++) {
			cell_i(w, lg->workers[k]);
			cell_u(w, a[k].commits);
			cell_u(w, a[k].samples);
			cell_num(w, "%.4f", a[k].ntau ? a[k].tau / (double)a[k].ntau : NAN);
			if (a[k].ntau)
				cell_i(w, a[k].maxtau);
			else
				cell_g(w, NAN);
			cell_g(w, a[k].nloss ? a[k].loss / (double)a[k].nloss : NAN);
			cell_g(w, a[k].t_last > a[k].t_first
					  ? (double)a[k].samples / (a[k].t_last - a[k].t_first)
					  : NAN);
			row_end(w);
		}
		free(a);
	}
	return 0;
}
