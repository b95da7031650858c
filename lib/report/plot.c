#include "report/plot.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/fsutil.h"
#include "base/jget.h"
#include "base/log.h"
#include "base/num.h"
#include "nn/model.h"
#include "report/eval.h"
#include "report/plot_impl.h"
#include "run/run.h"
#include "run/runlog.h"

/* Past this many, malformed lines of one log are counted, not each reported. */
#define PLOT_MAXREPORT 20

const char *const plot_view_names[] = {"loss", "pi", "staleness", "throughput", "workers"};
const char *const plot_stat_names[] = {"median", "mean", "zero", "scale"};
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
	int i = name_index(s, plot_view_names, 5);
	if (i < 0)
		return gem_err_unknown(err, GEM_EUSAGE, "view", s, plot_view_names, 5);
	*out = (enum plot_view)i;
	return 0;
}

int plot_stat_parse(const char *s, enum plot_stat *out)
{
	int i = name_index(s, plot_stat_names, 4);
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
		if (grow_array(&lg->held, &lg->hcap, lg->nheld + 1, sizeof *lg->held, 64) < 0)
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
	const char *sn = plot_stat_names[r->stat];
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
	if (grow_array(&lg->workers, &lg->wcap, lg->nworkers + 1, sizeof *lg->workers, 64) < 0)
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
	a = json_object_get(pi, plot_stat_names[r->stat]);
	na = json_is_array(a) ? json_array_size(a) : 0;
	if (!lg->tensors && na > 0 && set_tensor_names(lg, NULL, na) < 0)
		return -1;
	/* A start event naming fewer tensors than the first π row has values had its list cut
	 * short: the row decides, names beyond those given read "tensorN". */
	if (lg->npi == 0 && na > lg->ntensors && fit_tensor_names(r, na) < 0)
		return -1;
	if (grow_array(&lg->pi, &lg->picap, (lg->npi + 1) * (lg->ntensors ? lg->ntensors : 1),
		       sizeof *lg->pi, 64) < 0)
		return -1;
	return read_pi(r, pi, lg->pi + lg->npi * lg->ntensors, lg->ntensors) < 0 ? 1 : 0;
}

/* Keep update u (and the π row just read, if any). */
static int keep_update(struct plot_log *lg, const struct plot_update *u, int with_pi)
{
	if (grow_array(&lg->u, &lg->ucap, lg->n + 1, sizeof *lg->u, 64) < 0 ||
	    add_worker(lg, u->worker) < 0)
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
	char err[GEM_ERRMAX], slice[32] = "";
	struct run_peek pk;
	const char *name;
	/* read leniently: a label needs the rule and the model alone */
	if (run_peek(dir, &pk, err) < 0)
		return -1;
	if (pk.slice_k) /* a slice's log */
		snprintf(slice, sizeof slice, ", slice %d/%d", pk.slice_i, pk.slice_k);
	lg->text = spec_is_text(pk.model);
	name = lg->rule[0] ? lg->rule : pk.rule;
	if (name && !strcmp(name, "local"))
		snprintf(out, cap, "local");
	else if (name && lg->node >= 0)
		snprintf(out, cap, "%s, node %lld", name, (long long)lg->node);
	else if (name)
		snprintf(out, cap, "%s, %zu worker%s%s", name, lg->nworkers,
			 lg->nworkers == 1 ? "" : "s", slice);
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
			if (grow_array(&v, &cap, k + 1, sizeof *v, 64) < 0 || !(v[k] = strdup(p)))
				goto nomem;
			k++;
		}
	}
	if (k == 0 && fs_is_dir(arg) && !file_exists(p) && (ns = run_slices(arg, err)) > 0) {
		/* no log.jsonl: a sliced run's, one per slice (slice-I-of-K/log.jsonl) */
		for (int i = 0; i < ns; i++) {
			run_slice_dir(arg, i, ns, name, sizeof name - sizeof "/" RUN_LOG);
			strcat(name, "/" RUN_LOG);
			if (run_dir_file(arg, name, p, sizeof p) < 0 || !file_exists(p))
				continue;
			if (grow_array(&v, &cap, k + 1, sizeof *v, 64) < 0 || !(v[k] = strdup(p)))
				goto nomem;
			k++;
		}
	}
	if (k == 0) {
		if (grow_array(&v, &cap, 1, sizeof *v, 64) < 0 || !(v[0] = strdup(arg)))
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
		plot_script_head(&w, (int)nlogs);
		fputs("$data << EOD\n", f);
	}
	switch (o->view) {
	case PLOT_LOSS: rc = plot_view_loss(&w, err); break;
	case PLOT_PI: rc = plot_view_pi(&w, err); break;
	case PLOT_STALENESS: rc = plot_view_staleness(&w, err); break;
	case PLOT_THROUGHPUT: rc = plot_view_throughput(&w, err); break;
	case PLOT_WORKERS: rc = plot_view_workers(&w, err); break;
	}
	if (rc == 0 && o->gnuplot) {
		fputs("EOD\n", f);
		rc = plot_script_plot(&w, err);
	}
	free(w.b);
	if (rc == 0 && (fflush(f) != 0 || ferror(f)))
		rc = gem_errf(err, GEM_EFAIL, "writing the output: %s", strerror(errno));
	return rc;
}
