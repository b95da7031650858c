#include "report/plot.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/fsutil.h"
#include "base/grow.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "nn/model.h"
#include "report/eval.h"
#include "run/run.h"
#include "run/runlog.h"

/* Past this many, malformed lines of one log are counted, not each reported. */
#define PLOT_MAXREPORT 20
/* The throughput view refuses windows so small that the table would be absurd. */
#define PLOT_MAXWINDOWS 10000000

static const char *const view_names[] = {"loss", "pi", "staleness", "throughput", "workers"};
static const char *stat_names[] = {"median", "mean", "zero", "scale"};
static const char *term_names[] = {"png", "svg", "dumb"};

void plot_opts_init(struct plot_opts *o)
{
	memset(o, 0, sizeof *o);
	o->view = PLOT_LOSS;
	o->smooth = 50;
	o->bins = 200;
	o->stat = PLOT_MEDIAN;
	o->window = 1.0;
	o->term = PLOT_PNG;
}

static int name_index(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

int plot_view_parse(const char *s, enum plot_view *out, char *err)
{
	int i = name_index(s, view_names, 5);
	if (i < 0)
		return gem_err_unknown(err, GEM_EUSAGE, "view", s, view_names, 5);
	*out = (enum plot_view)i;
	return 0;
}

int plot_stat_parse(const char *s, enum plot_stat *out)
{
	int i = name_index(s, stat_names, 4);
	if (i >= 0)
		*out = (enum plot_stat)i;
	return i < 0 ? -1 : 0;
}

int plot_term_parse(const char *s, enum plot_term *out)
{
	int i = name_index(s, term_names, 3);
	if (i >= 0)
		*out = (enum plot_term)i;
	return i < 0 ? -1 : 0;
}

int plot_x_parse(const char *s, enum plot_x *out)
{
	static const char *names[] = {"version", "samples", "seconds", "bytes"};
	int i = name_index(s, names, 4);
	if (i >= 0)
		*out = (enum plot_x)(i + PLOT_X_VERSION);
	return i < 0 ? -1 : 0;
}

/* ---- reading ---- */

/* Grow *p (of *cap elements of size sz) to hold at least need elements. */
static int grow(void *p, size_t *cap, size_t need, size_t sz)
{
	return grow_array(p, cap, need, sz, 64);
}

struct reader {
	struct plot_log *lg;
	const char *name; /* for messages */
	long line;
	int want_pi;
	enum plot_stat stat;
	long quiet_upto; /* lines up to this one were reported before: counted, not reported */
	uint64_t bytes;  /* on the wire, over the lines read so far */
};

static void bad_line(struct reader *r, const char *fmt, const char *a, const char *b)
{
	char msg[256];
	r->lg->nbad++;
	if (r->lg->nbad > PLOT_MAXREPORT || r->line <= r->quiet_upto)
		return;
	snprintf(msg, sizeof msg, fmt, a, b);
	log_warn("%s:%ld: %s, skipped", r->name, r->line, msg);
	if (r->lg->nbad == PLOT_MAXREPORT)
		log_warn("%s: further malformed lines are counted, not shown", r->name);
}

static int set_tensor_names(struct plot_log *lg, json_t *names, size_t n)
{
	lg->tensors = calloc(n ? n : 1, sizeof *lg->tensors);
	if (!lg->tensors)
		return -1;
	lg->ntensors = n;
	for (size_t i = 0; i < n; i++) {
		char buf[32];
		json_t *s = names ? json_array_get(names, i) : NULL;
		const char *name = s && json_is_string(s) ? json_string_value(s) : NULL;
		if (!name) {
			snprintf(buf, sizeof buf, "tensor%zu", i);
			name = buf;
		}
		if (!(lg->tensors[i] = strdup(name)))
			return -1;
	}
	return 0;
}

static void start_event(struct reader *r, const json_t *o)
{
	json_t *t = json_object_get(o, "tensors");
	struct plot_log *lg = r->lg;
	if (!json_is_array(t) || json_array_size(t) == 0)
		return;
	if (!lg->tensors) {
		if (set_tensor_names(lg, t, json_array_size(t)) < 0)
			log_error("%s:%ld: out of memory for tensor names", r->name, r->line);
		return;
	}
	/* π rows came before any start event: their names are placeholders until now. */
	if (json_array_size(t) == lg->ntensors) {
		for (size_t i = 0; i < lg->ntensors; i++) {
			json_t *s = json_array_get(t, i);
			char *d;
			if (json_is_string(s) && (d = strdup(json_string_value(s)))) {
				free(lg->tensors[i]);
				lg->tensors[i] = d;
			}
		}
	} else {
		log_warn("%s:%ld: start event names %zu tensors, the log had %zu; keeping the first",
			 r->name, r->line, json_array_size(t), lg->ntensors);
	}
}

/* The events the views need: start (tensor names, the rule), stop, sgp (an SGP node's log). */
static int add_worker(struct plot_log *lg, int64_t w);

/* An event line; -1 only when out of memory. A worker that joined or had a commit held by a
 * round (diloco, sync: the update line names only the worker that closed it) is one of the
 * run's workers. */
static int other_event(struct reader *r, const char *ev, const json_t *o, int64_t worker)
{
	struct plot_log *lg = r->lg;
	if (worker >= 0 && (!strcmp(ev, "join") || !strcmp(ev, "held")) && add_worker(lg, worker) < 0)
		return -1;
	if (!strcmp(ev, "held") && worker >= 0) { /* a held event without its worker: ignored */
		long long n = 0;
		if (grow(&lg->held, &lg->hcap, lg->nheld + 1, sizeof *lg->held) < 0)
			return -1;
		jget_integral(o, "n", 0, LLONG_MAX, &n);
		/* an event's time is wall-clock in a served run: the round's update gives its t */
		lg->held[lg->nheld++] = (struct plot_held){.t = NAN, .worker = worker, .n = (uint64_t)n};
	}
	if (!strcmp(ev, "start")) {
		const char *rule;
		start_event(r, o);
		lg->stopped = 0;
		if (jget_str(o, "rule", 0, &rule) == JGET_OK)
			snprintf(lg->rule, sizeof lg->rule, "%s", rule);
	} else if (!strcmp(ev, "stop")) {
		lg->stopped = 1;
	} else if (!strcmp(ev, "sgp")) {
		long long v;
		if (jget_integral(o, "node", 0, INT32_MAX - 1, &v) == JGET_OK)
			lg->node = v;
		if (jget_integral(o, "iters", 1, LLONG_MAX, &v) == JGET_OK)
			lg->iters = (uint64_t)v;
	}
	return 0;
}

/* Grow the tensor names to n, "tensorN" beyond those the start event gave. */
static int fit_tensor_names(struct reader *r, size_t n)
{
	struct plot_log *lg = r->lg;
	char **t;
	log_warn("%s:%ld: %zu pi values per statistic, but the start event named %zu tensors", r->name,
		 r->line, n, lg->ntensors);
	if (!(t = realloc(lg->tensors, n * sizeof *t)))
		return -1;
	lg->tensors = t;
	for (size_t i = lg->ntensors; i < n; i++) {
		char buf[32];
		snprintf(buf, sizeof buf, "tensor%zu", i);
		if (!(t[i] = strdup(buf)))
			return -1;
		lg->ntensors = i + 1;
	}
	return 0;
}

/* The π statistic of an update line into row (ntensors floats), or -1 with a message. */
static int read_pi(struct reader *r, json_t *pi, float *row, size_t n)
{
	const char *sn = stat_names[r->stat];
	json_t *a = json_object_get(pi, sn);
	char key[32];
	snprintf(key, sizeof key, "pi.%s", sn);
	if (!json_is_array(a)) {
		bad_line(r, a ? "\"%s\" is not an array%s" : "missing \"%s\"%s", key, "");
		return -1;
	}
	if (json_array_size(a) != n) {
		char want[64];
		snprintf(want, sizeof want, " has %zu values, the log's tensors %zu",
			 json_array_size(a), n);
		bad_line(r, "\"%s\"%s", key, want);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(a, i);
		if (json_is_null(v)) {
			row[i] = NAN; /* a NaN written by the server reads back as null */
		} else if (json_is_number(v)) {
			row[i] = (float)json_number_value(v);
		} else {
			bad_line(r, "\"%s\" holds a value that is not a number%s", key, "");
			return -1;
		}
	}
	return 0;
}

static int add_worker(struct plot_log *lg, int64_t w)
{
	size_t lo = 0, hi = lg->nworkers;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (lg->workers[mid] == w)
			return 0;
		if (lg->workers[mid] < w)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (grow(&lg->workers, &lg->wcap, lg->nworkers + 1, sizeof *lg->workers) < 0)
		return -1;
	memmove(lg->workers + lo + 1, lg->workers + lo, (lg->nworkers - lo) * sizeof *lg->workers);
	lg->workers[lo] = w;
	lg->nworkers++;
	return 0;
}

/* An update line's π object into the next row of lg->pi: 0, 1 a bad line (reported), -1 no
 * memory. */
static int line_pi(struct reader *r, json_t *pi)
{
	struct plot_log *lg = r->lg;
	json_t *a;
	size_t na;
	if (!json_is_object(pi)) {
		bad_line(r, "\"%s\" is %s", "pi", "not an object");
		return 1;
	}
	a = json_object_get(pi, stat_names[r->stat]);
	na = json_is_array(a) ? json_array_size(a) : 0;
	if (!lg->tensors && na > 0 && set_tensor_names(lg, NULL, na) < 0)
		return -1;
	/* A start event naming fewer tensors than the first π row has values had its list cut
	 * short: the row decides, names beyond those given read "tensorN". */
	if (lg->npi == 0 && na > lg->ntensors && fit_tensor_names(r, na) < 0)
		return -1;
	if (grow(&lg->pi, &lg->picap, (lg->npi + 1) * (lg->ntensors ? lg->ntensors : 1),
		 sizeof *lg->pi) < 0)
		return -1;
	return read_pi(r, pi, lg->pi + lg->npi * lg->ntensors, lg->ntensors) < 0 ? 1 : 0;
}

/* Keep update u (and the π row just read, if any). */
static int keep_update(struct plot_log *lg, const struct plot_update *u, int with_pi)
{
	if (grow(&lg->u, &lg->ucap, lg->n + 1, sizeof *lg->u) < 0 || add_worker(lg, u->worker) < 0)
		return -1;
	lg->u[lg->n++] = *u;
	for (; lg->held_open < lg->nheld; lg->held_open++)
		lg->held[lg->held_open].t = u->t;
	if (with_pi) {
		/* pi_version grows with npi; its capacity is tracked by the row count itself. */
		uint64_t *pv = realloc(lg->pi_version, (lg->npi + 1) * sizeof *pv);
		if (!pv)
			return -1;
		lg->pi_version = pv;
		lg->pi_version[lg->npi++] = u->version;
	}
	return 0;
}

/* One line of the log: an event, or an update kept; -1 only when out of memory. */
static int take_line(struct reader *r, const struct run_log_line *l)
{
	struct plot_update u = {.t = l->u.vtime >= 0 ? l->u.vtime : l->u.elapsed, .loss = l->u.loss,
				.version = l->u.version, .samples = l->u.samples,
				.worker = l->u.worker, .tau = (int64_t)l->u.tau,
				.has_n = l->u.has_n, .n = l->u.n, .by_leave = l->u.by_leave};
	json_t *pi;
	int rc, with_pi;

	r->bytes += run_log_line_bytes(l);
	u.bytes = r->bytes;
	if (l->event)
		return other_event(r, l->event, l->json, l->u.worker);
	pi = json_object_get(l->json, "pi");
	with_pi = r->want_pi && pi;
	rc = with_pi ? line_pi(r, pi) : 0;
	if (rc == 0)
		rc = keep_update(r->lg, &u, with_pi);
	return rc > 0 ? 0 : rc;
}

static int file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether model spec is a sequence model's (a loss at every position: a text's bytes). */
static int spec_is_text(const json_t *spec)
{
	char err[GEM_ERRMAX];
	struct model *m;
	int text;
	if (!spec || model_from_json(spec, &m, err) < 0)
		return 0;
	text = model_labels(m) > 1;
	model_free(m);
	return text;
}

/* The label of a run's log from its rule (the log's start event's, else run.json's in dir):
 * "gem, 4 workers", "local", "sgp, node 2"; -1 when dir has no run.json or no rule is known. */
static int run_label(const char *dir, struct plot_log *lg, char *out, size_t cap)
{
	char err[GEM_ERRMAX], shard[32] = "";
	struct run_peek pk;
	const char *name;
	/* read leniently: a label needs the rule and the model alone */
	if (run_peek(dir, &pk, err) < 0)
		return -1;
	if (pk.shard_k) /* a shard's log */
		snprintf(shard, sizeof shard, ", shard %d/%d", pk.shard_i, pk.shard_k);
	lg->text = spec_is_text(pk.model);
	name = lg->rule[0] ? lg->rule : pk.rule;
	if (name && !strcmp(name, "local"))
		snprintf(out, cap, "local");
	else if (name && lg->node >= 0)
		snprintf(out, cap, "%s, node %lld", name, (long long)lg->node);
	else if (name)
		snprintf(out, cap, "%s, %zu worker%s%s", name, lg->nworkers,
			 lg->nworkers == 1 ? "" : "s", shard);
	else
		log_debug("%s: its run.json names no rule, labelling the run by its log", dir);
	run_peek_free(&pk);
	return name ? 0 : -1;
}

int plot_log_paths(const char *arg, char ***paths, size_t *n, char *err)
{
	char p[PATH_MAX], name[64];
	char **v = NULL;
	size_t k = 0, cap = 0;
	int ns;
	p[0] = 0;
	*paths = NULL;
	*n = 0;
	if (fs_is_dir(arg) && run_dir_file(arg, RUN_LOG, p, sizeof p) == 0 && !file_exists(p)) {
		/* no log.jsonl: an SGP run's node logs, node-0.jsonl, node-1.jsonl, ... */
		for (int i = 0; i < INT32_MAX; i++) {
			snprintf(name, sizeof name, RUN_NODE_LOG, i);
			if (run_dir_file(arg, name, p, sizeof p) < 0 || !file_exists(p))
				break;
			if (grow(&v, &cap, k + 1, sizeof *v) < 0 || !(v[k] = strdup(p)))
				goto nomem;
			k++;
		}
	}
	if (k == 0 && fs_is_dir(arg) && !file_exists(p) && (ns = run_shards(arg, err)) > 0) {
		/* no log.jsonl: a sharded run's, one per shard (shard-I-of-K/log.jsonl) */
		for (int i = 0; i < ns; i++) {
			snprintf(name, sizeof name, RUN_SHARD_DIR "/" RUN_LOG, i, ns);
			if (run_dir_file(arg, name, p, sizeof p) < 0 || !file_exists(p))
				continue;
			if (grow(&v, &cap, k + 1, sizeof *v) < 0 || !(v[k] = strdup(p)))
				goto nomem;
			k++;
		}
	}
	if (k == 0) {
		if (grow(&v, &cap, 1, sizeof *v) < 0 || !(v[0] = strdup(arg)))
			goto nomem;
		k = 1;
	}
	*paths = v;
	*n = k;
	return 0;
nomem:
	while (k)
		free(v[--k]);
	free(v);
	return gem_errf(err, GEM_ENOMEM, "out of memory");
}

int plot_log_over(const struct plot_log *lg)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(lg->path, '/');
	if (lg->stopped)
		return 1;
	if (lg->node >= 0) /* an SGP node's log says when it is done (its lock is its node's) */
		return lg->iters && lg->n && lg->u[lg->n - 1].version >= lg->iters;
	if (!strcmp(lg->path, "-"))
		return 1;
	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - lg->path) : 1, slash ? lg->path : ".");
	return !eval_run_active(dir[0] ? dir : "/");
}

int plot_log_read(const char *arg, const struct plot_opts *o, long quiet_upto,
		  struct plot_log *lg, char *err)
{
	struct reader r = {.lg = lg, .want_pi = o->view == PLOT_PI, .stat = o->stat, .quiet_upto = quiet_upto};
	struct run_log_reader rd;
	const struct run_log_line *l;
	const char *why;
	char dir[PATH_MAX];
	int rc;

	memset(lg, 0, sizeof *lg);
	lg->node = -1;
	if (!strcmp(arg, "-")) {
		snprintf(lg->path, sizeof lg->path, "-");
		dir[0] = 0;
	} else {
		const char *slash;
		if (fs_is_dir(arg)) {
			if (run_dir_file(arg, RUN_LOG, lg->path, sizeof lg->path) < 0)
				return gem_errf(err, GEM_EUSAGE, "%s: path too long", arg);
			snprintf(dir, sizeof dir, "%s", arg);
		} else {
			snprintf(lg->path, sizeof lg->path, "%s", arg);
			slash = strrchr(arg, '/');
			snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - arg) : 1, slash ? arg : ".");
			if (slash == arg)
				snprintf(dir, sizeof dir, "/");
		}
	}
	if ((rc = run_log_reader_open(&rd, lg->path, o->follow, err)) < 0)
		return rc;
	r.name = rd.name;
	while ((rc = run_log_next(&rd, &l, &why, err)) > 0) {
		r.line = rd.line;
		if (why)
			bad_line(&r, "%s%s", why, "");
		else if (take_line(&r, l) < 0) {
			rc = gem_errf(err, GEM_ENOMEM, "%s:%ld: out of memory", r.name, r.line);
			break;
		}
	}
	r.line = rd.line;
	run_log_reader_close(&rd);
	if (rc < 0)
		return rc;
	lg->nlines = r.line;
	if (lg->nbad > PLOT_MAXREPORT && !quiet_upto)
		log_warn("%s: %ld malformed lines skipped in all", r.name, lg->nbad);
	if (lg->n == 0)
		return gem_errf(err, GEM_EFAIL, "%s: no update lines (%ld line%s read)", r.name, r.line,
				GEM_S(r.line));
	if (!dir[0] || run_label(dir, lg, lg->label, sizeof lg->label) < 0)
		snprintf(lg->label, sizeof lg->label, "%s", dir[0] ? lg->path : "stdin");
	/* The label goes into "# run: " comment lines and gnuplot titles: one line. */
	for (char *c = lg->label; *c; c++)
		if ((unsigned char)*c < 0x20)
			*c = ' ';
	return 0;
}

void plot_log_free(struct plot_log *lg)
{
	for (size_t i = 0; lg->tensors && i < lg->ntensors; i++)
		free(lg->tensors[i]);
	free(lg->tensors);
	free(lg->u);
	free(lg->workers);
	free(lg->held);
	free(lg->pi);
	free(lg->pi_version);
	memset(lg, 0, sizeof *lg);
}

void plot_logs_label(struct plot_log *logs, size_t nlogs)
{
	char *same = calloc(nlogs ? nlogs : 1, 1);
	if (!same)
		return;
	for (size_t i = 0; i < nlogs; i++)
		for (size_t j = i + 1; j < nlogs; j++)
			if (!strcmp(logs[i].label, logs[j].label))
				same[i] = same[j] = 1;
	for (size_t i = 0; i < nlogs; i++) {
		size_t l = strlen(logs[i].label);
		if (same[i] && strcmp(logs[i].label, logs[i].path))
			snprintf(logs[i].label + l, sizeof logs[i].label - l, " (%s)", logs[i].path);
	}
	free(same);
}

/* ---- views ---- */

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
	if (grow(&w->b, &w->bcap, w->nb + 1, sizeof *w->b) < 0)
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
static enum plot_x loss_x(const struct plot_opts *o)
{
	return o->x != PLOT_X_AUTO ? o->x : o->by_worker ? PLOT_X_STEP : PLOT_X_VERSION;
}

static enum plot_x loss_x2(const struct plot_opts *o)
{
	enum plot_x x = loss_x(o);
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
	enum plot_x x = loss_x(w->o), x2 = loss_x2(w->o);
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
static int view_loss(struct writer *w, char *err)
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
static int view_pi(struct writer *w, char *err)
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
				stat_names[w->o->stat], U, ncols);
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
static int view_staleness(struct writer *w, char *err)
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
static int view_throughput(struct writer *w, char *err)
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
static int view_workers(struct writer *w, char *err)
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

static void script_head(const struct writer *w, int nplots)
{
	FILE *f = w->f;
	int h = 640;
	fprintf(f, "# gem-plot-data %s: a gnuplot script with its data inline; pipe it into gnuplot\n",
		view_names[w->o->view]);
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
	switch (loss_x(w->o)) {
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
	fprintf(f, "set ylabel 'pi (%s)'\nplot ", stat_names[w->o->stat]);
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
		snprintf(t, sizeof t, "%s pi per tensor: %s", stat_names[o->stat], lg->label);
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
static int script_plot(struct writer *w, char *err)
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
		return gem_errf(err, GEM_EFAIL, "nothing to plot in the %s view", view_names[o->view]);
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

int plot_write(FILE *f, const struct plot_opts *o, const struct plot_log *logs, size_t nlogs,
	       char *err)
{
	struct writer w = {.f = f, .o = o, .logs = logs, .nlogs = nlogs};
	int rc = 0;
	if (o->view == PLOT_PI) {
		size_t have = 0;
		for (size_t r = 0; r < nlogs; r++) {
			if (logs[r].npi)
				have++;
			else
				log_warn("%s: no pi in the update lines (rule gem only)", logs[r].path);
		}
		if (!have)
			return gem_errf(err, GEM_EFAIL, "no pi to show: the logs are not of rule gem");
	}
	if (o->gnuplot) {
		script_head(&w, (int)nlogs);
		fputs("$data << EOD\n", f);
	}
	switch (o->view) {
	case PLOT_LOSS: rc = view_loss(&w, err); break;
	case PLOT_PI: rc = view_pi(&w, err); break;
	case PLOT_STALENESS: rc = view_staleness(&w, err); break;
	case PLOT_THROUGHPUT: rc = view_throughput(&w, err); break;
	case PLOT_WORKERS: rc = view_workers(&w, err); break;
	}
	if (rc == 0 && o->gnuplot) {
		fputs("EOD\n", f);
		rc = script_plot(&w, err);
	}
	free(w.b);
	if (rc == 0 && (fflush(f) != 0 || ferror(f)))
		rc = gem_errf(err, GEM_EFAIL, "writing the output: %s", strerror(errno));
	return rc;
}
