/* gem-eval: evaluate a run's parameters (a run directory, a params file, a live server, or a live
 * server version after version) on its test set; TSV or JSON lines on stdout. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/clock.h"
#include "base/num.h"
#include "base/prog.h"
#include "nn/data.h"
#include "nn/layers.h"
#include "base/err.h"
#include "report/eval.h"
#include "role/trainer.h"
#include "base/log.h"
#include "nn/model.h"
#include "run/run.h"
#include "run/runlog.h"

static const char usage_line[] =
	"usage: gem-eval [options] (RUNDIR | PARAMS_FILE | URL)...\n"
	"   or: gem-eval [options] --follow (URL | RUNDIR)\n"
	"   or: gem-eval [options] --nodes (URL | NODE_FILE | RUNDIR),...";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Evaluate parameters on the run's test set; print TSV under a '#' header line:\n"
	      "elapsed seconds, version (central updates), samples seen, test loss, test\n"
	      "accuracy, then train_loss (--train-subset), acc_0 ... acc_<C-1> (--per-class),\n"
	      "and bytes: the bytes on the wire up to that version (from the run's log; 0\n"
	      "without one; nan for a URL). A text run's losses are in bits per byte\n"
	      "(test_bpb, train_bpb) and its accuracy is of the next byte, over 20 fixed\n"
	      "batches of 32 windows of each split.\n"
	      "Several runs make one table, the run (as named) in a first column. An SGP\n"
	      "RUNDIR has its nodes evaluated (--nodes). A sliced run's servers are one\n"
	      "URL argument: URL1,URL2,... (gem-serve --slice I/K, slice 0's first).\n"
	      "\n"
	      "      --run RUNDIR        the run a PARAMS_FILE belongs to (default: the file's\n"
	      "                          directory)\n"
	      "  -d, --data NAME|DIR|SPEC  evaluate on this dataset's test split instead of\n"
	      "                          the run's (all of it when it has none; never the\n"
	      "                          run's --holdout); said on stderr\n"
	      "      --train-subset N    add train_loss: the loss on N training samples, fixed\n"
	      "                          by the run's seed\n"
	      "  -c, --per-class         add acc_0 ... acc_<C-1>: the test accuracy per class\n"
	      "      --json              print JSON lines (one object per evaluation)\n"
	      "  -F, --follow            follow the one URL or RUNDIR as it trains: poll a live\n"
	      "                          server (RUNDIR: the one in its server.url, every\n"
	      "                          slice's of a sliced run, or the checkpoints of a\n"
	      "                          local training; URL1,URL2,...: a sliced run's\n"
	      "                          servers; a RUNDIR not made yet is waited for,\n"
	      "                          --retry-for); print a line per new version until\n"
	      "                          the run ends\n"
	      "  -i, --interval SEC      seconds between polls with --follow; default 2\n"
	      "      --cacert FILE       trust only the CA certificate(s) in this PEM file for\n"
	      "                          an https:// server; default: the system's CAs\n"
	      "      --retry-for SEC     wait this long for an unreachable server, or with\n"
	      "                          --follow for a RUNDIR to be made; default 10\n"
	      "  -j, --threads T         compute on T threads (every kernel and pass; the same\n"
	      "                          result; 1 to 64); default 1\n"
	      "  -N, --nodes LIST        an SGP run: evaluate each node's parameters (a node's\n"
	      "                          URL, its node-I.gem, or RUNDIR for all its node-*.gem;\n"
	      "                          comma-separated), then their mean, spread and average;\n"
	      "                          columns node, version, samples, test_loss, test_acc,\n"
	      "                          consensus, bytes (a node's: the pushes it sent, from\n"
	      "                          its node-I.jsonl; the average's: all nodes' together)\n"
	      "  -q, --quiet             no informational messages on stderr\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n",
	      f);
}

enum { O_RETRY = 256, O_CACERT, O_RUN, O_TRAIN, O_JSON };

static const struct option longopts[] = {
	{"run", required_argument, 0, O_RUN},    {"data", required_argument, 0, 'd'},
	{"train-subset", required_argument, 0, O_TRAIN}, {"per-class", no_argument, 0, 'c'},
	{"json", no_argument, 0, O_JSON},        {"follow", no_argument, 0, 'F'},
	{"interval", required_argument, 0, 'i'}, {"retry-for", required_argument, 0, O_RETRY},
	{"nodes", required_argument, 0, 'N'},    {"threads", required_argument, 0, 'j'},
	{"cacert", required_argument, 0, O_CACERT}, {"help", no_argument, 0, 'h'},
	{"quiet", no_argument, 0, 'q'},
	{"version", no_argument, 0, 'V'},        {0, 0, 0, 0},
};

/* What every evaluation needs, set up once: the model, the data, the buffers. */
struct evaluator {
	struct model *m;
	struct eval_buf buf;
	struct dataset test, train; /* train: the --train-subset samples only */
	int train_subset, per_class, json, header_done;
	float mean, std;
	struct eval_result res, tres;
	const char *name;  /* several runs: this one's name, the first column; else NULL */
	int header_classes; /* the classes of the header printed (--per-class) */
	const char *what;  /* the run evaluated as named, for messages */
	int diverged;      /* an evaluation's loss said its parameters diverged: exit 1 */
	const char *warned; /* the run a divergence was last said of */
	int header_text;    /* the header printed is a text's (bits per byte) */
	struct run_log_bytes *logs; /* the logs of the run's servers (one per slice); NULL: no
				     * log (a URL): bytes NaN */
	int nlogs;
	double bytes;      /* of the row: the logs' bytes up to its version, or NaN */
};

/* A text's losses are shown in bits per byte ("test_bpb"), others' as they are; an external
 * language model's text is its own (windows, no bytes here). */
static int is_text(const struct evaluator *e)
{
	return e->test.text != NULL || (e->test.external && e->test.seq > 0);
}

static double shown_loss(const struct evaluator *e, double loss)
{
	return is_text(e) ? loss / M_LN2 : loss;
}

static const char *loss_key(const struct evaluator *e, int train)
{
	if (is_text(e))
		return train ? "train_bpb" : "test_bpb";
	return train ? "train_loss" : "test_loss";
}

static int is_url(const char *s)
{
	return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

static void bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "gem-eval: %s%s\n%s\n", what, arg, usage_line);
	exit(EXIT_USAGE);
}

/* A JSON number, or null for what JSON cannot say (NaN, ∞). */
static void json_num(const char *key, const char *fmt, double v)
{
	printf(",\"%s\":", key);
	if (isfinite(v))
		printf(fmt, v);
	else
		fputs("null", stdout);
}

/* A JSON string: a run's name as given (jansson's escaping; null if not UTF-8). */
static void json_str(const char *s)
{
	json_t *j = json_string(s);
	if (!j || json_dumpf(j, stdout, JSON_ENCODE_ANY) < 0)
		fputs("null", stdout);
	json_decref(j);
}

static void print_header(const struct evaluator *e)
{
	printf("# %selapsed\tversion\tsamples\t%s\ttest_acc", e->name ? "run\t" : "", loss_key(e, 0));
	if (e->train_subset)
		printf("\t%s", loss_key(e, 1));
	if (e->per_class)
		for (int k = 0; k < e->res.classes; k++)
			printf("\tacc_%d", k);
	fputs("\tbytes\n", stdout);
}

static void print_row(const struct evaluator *e, const struct run_progress *p)
{
	char loss[48];
	if (e->json) {
		if (e->name) {
			fputs("{\"run\":", stdout);
			json_str(e->name);
			putchar(',');
		} else {
			putchar('{');
		}
		printf("\"elapsed\":%.3f,\"version\":%llu,\"samples\":%llu", p->elapsed,
		       (unsigned long long)p->version, (unsigned long long)p->samples);
		json_num(loss_key(e, 0), "%.6f", shown_loss(e, e->res.loss));
		json_num("test_acc", "%.4f", e->res.accuracy);
		if (e->train_subset)
			json_num(loss_key(e, 1), "%.6f", shown_loss(e, e->tres.loss));
		for (int k = 0; e->per_class && k < e->res.classes; k++) {
			char key[16];
			snprintf(key, sizeof key, "acc_%d", k);
			json_num(key, "%.4f", eval_class_accuracy(&e->res, k));
		}
		json_num("bytes", "%.0f", e->bytes);
		fputs("}\n", stdout);
		return;
	}
	if (e->name)
		printf("%s\t", e->name);
	printf("%.3f\t%llu\t%llu\t%s\t%.4f", p->elapsed, (unsigned long long)p->version,
	       (unsigned long long)p->samples, num_format(loss, sizeof loss, "%.6f", shown_loss(e, e->res.loss)),
	       e->res.accuracy);
	if (e->train_subset)
		printf("\t%s", num_format(loss, sizeof loss, "%.6f", shown_loss(e, e->tres.loss)));
	for (int k = 0; e->per_class && k < e->res.classes; k++)
		printf("\t%.4f", eval_class_accuracy(&e->res, k));
	printf("\t%s\n", num_format(loss, sizeof loss, "%.0f", e->bytes));
}

/* A loss that says the parameters diverged (trainer_diverged): said once per run, and the exit
 * status will be 1. */
static void diverged(struct evaluator *e, const char *what, uint64_t version, double loss)
{
	char l[16];
	e->diverged = 1;
	if (e->warned == what)
		return;
	e->warned = what;
	fprintf(stderr, "gem-eval: warning: %s: the test loss is %s at version %llu: the parameters have "
			"diverged\n", what, num_format(l, sizeof l, "%g", loss), (unsigned long long)version);
}

static void logs_close(struct evaluator *e)
{
	for (int i = 0; e->logs && i < e->nlogs; i++)
		run_log_bytes_close(&e->logs[i]);
	free(e->logs);
	e->logs = NULL;
	e->nlogs = 0;
}

/* The run's logs (RUNDIR's, or each slice's of a sliced run) for the bytes column. A log not
 * there is a server that never ran (a run not trained yet, made with --init-from, or trained
 * by gem-work --local): no bytes. None for a run whose logs cannot be read (its bytes are
 * then NaN). */
static void logs_open(struct evaluator *e, const char *rundir)
{
	char err[GEM_ERRMAX], name[64], path[PATH_MAX + 64];
	int k = run_slices(rundir, err), ok = 1;
	if (k < 0 || !(e->logs = calloc(k ? (size_t)k : 1, sizeof *e->logs)))
		return;
	e->nlogs = 0;
	for (int i = 0; ok && i < (k ? k : 1); i++) {
		if (k) {
			run_slice_dir(rundir, i, k, name, sizeof name - sizeof "/" RUN_LOG);
			strcat(name, "/" RUN_LOG);
		} else
			snprintf(name, sizeof name, RUN_LOG);
		if (run_dir_file(rundir, name, path, sizeof path) < 0) {
			snprintf(err, sizeof err, "%s: path too long", rundir);
			ok = 0;
		} else if (access(path, F_OK) < 0 && errno == ENOENT) {
			continue;
		} else if (run_log_bytes_open(&e->logs[e->nlogs], path, err) < 0) {
			ok = 0;
		} else {
			e->nlogs++;
		}
	}
	if (!ok) {
		log_info("no bytes on the wire: %s", err);
		logs_close(e);
	}
}

/* The bytes on the wire up to version (NaN: not known). */
static double logs_bytes(struct evaluator *e, uint64_t version, char *err)
{
	double sum = 0;
	for (int i = 0; e->logs && i < e->nlogs; i++) {
		uint64_t b;
		if (run_log_bytes_at(&e->logs[i], version, &b, err) < 0)
			return NAN;
		sum += (double)b;
	}
	return e->logs ? sum : NAN;
}

/* Evaluate the model's current θ and print its line (eval_follow_fn). */
static int evaluate(void *ctx, const struct run_progress *p, char *err)
{
	struct evaluator *e = ctx;
	int rc;
	e->bytes = logs_bytes(e, p->version, err);
	if ((rc = eval_run(&e->buf, e->m, &e->test, e->mean, e->std, &e->res, err)) < 0)
		return rc;
	if (e->train_subset &&
	    (rc = eval_run(&e->buf, e->m, &e->train, e->mean, e->std, &e->tres, err)) < 0)
		return rc;
	if (trainer_diverged(e->res.loss, e->res.classes))
		diverged(e, e->what, p->version, e->res.loss);
	if (e->per_class && e->res.classes > EVAL_MAX_CLASSES)
		return gem_errf(err, GEM_EUSAGE, "%s: %d classes: --per-class shows at most %d",
				e->name ? e->name : "run", e->res.classes, EVAL_MAX_CLASSES);
	if (e->per_class && e->header_done && e->res.classes != e->header_classes)
		return gem_errf(err, GEM_EUSAGE, "%s: %d classes, the runs before %d: not one table "
				"with --per-class", e->name ? e->name : "run", e->res.classes,
				e->header_classes);
	if (!e->json && e->header_done && is_text(e) != e->header_text)
		return gem_errf(err, GEM_EUSAGE, "%s: a %s run after %s ones: not one table (use --json)",
				e->name ? e->name : "run", is_text(e) ? "text" : "non-text",
				e->header_text ? "text" : "non-text");
	if (!e->json && !e->header_done)
		print_header(e);
	e->header_done = 1;
	e->header_classes = e->res.classes;
	e->header_text = is_text(e);
	print_row(e, p);
	if (fflush(stdout) == EOF || ferror(stdout))
		return gem_errf(err, GEM_EFAIL, "stdout: write error");
	return 0;
}

/* The model, the test set and the training subset of run (or of the dataset data). */
static int evaluator_init(struct evaluator *e, const struct run *run, const char *data, char *err)
{
	char dir[PATH_MAX];
	struct dataset full;
	int rc;

	if (data) {
		if ((rc = dataset_resolve(data, dir, sizeof dir, err)) < 0)
			return GEM_EUSAGE;
	}
	e->mean = (float)run->spec.mean;
	e->std = (float)run->spec.std;
	/* data that does not fit the model is refused (GEM_EUSAGE) as gem-init refuses it */
	if ((rc = model_from_json(run->spec.model, &e->m, err)) < 0 ||
	    (rc = eval_buf_init(&e->buf, e->m, err)) < 0 ||
	    (rc = run_data_load(run, data ? dir : NULL, "test", &e->test, err)) < 0)
		return rc;
	e->res.classes = model_classes(e->m);
	/* other data than the run's: which of its samples are scored, in words (no holdout of the
	 * run's is drawn from it) */
	if (data && e->test.whole)
		log_info("-d %s: all its %d samples are scored (it has no test split%s)", dir, e->test.n,
			 run->spec.holdout > 0
				 ? "; the run's --holdout is drawn from the run's data only" : "");
	else if (data)
		log_info("-d %s: its test split is scored (%d %s)", dir, e->test.n,
			 e->test.text ? "windows" : "samples");
	if (e->train_subset) {
		if ((rc = run_data_load(run, data ? dir : NULL, "train", &full, err)) < 0)
			return rc;
		rc = eval_subset(&full, e->train_subset, run->spec.train.seed, &e->train, err);
		dataset_free(&full);
		if (rc < 0)
			return GEM_EFAIL;
	}
	return 0;
}

/* --nodes: the nodes to evaluate (eval_nodes). */
struct nodes {
	char **item; /* URLs and node files */
	int k;
};

static void nodes_free(struct nodes *nd)
{
	for (int i = 0; i < nd->k; i++)
		free(nd->item[i]);
	free(nd->item);
}

static int nodes_add(struct nodes *nd, const char *item, size_t len)
{
	char **grown = realloc(nd->item, sizeof *grown * (size_t)(nd->k + 1));
	if (!grown)
		return -1;
	nd->item = grown;
	if (!(nd->item[nd->k] = strndup(item, len)))
		return -1;
	nd->k++;
	return 0;
}

/* The comma-separated list, a RUNDIR standing for its node-0.gem, node-1.gem, ... */
static int nodes_parse(struct nodes *nd, const char *list, char *err)
{
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		char item[PATH_MAX];
		if (len >= sizeof item)
			return gem_errf(err, GEM_EUSAGE, "--nodes: an entry is too long");
		snprintf(item, sizeof item, "%.*s", (int)len, p);
		if (len && !is_url(item) && fs_is_dir(item)) {
			int before = nd->k;
			for (int i = 0;; i++) {
				char f[PATH_MAX + 32];
				struct stat st;
				snprintf(f, sizeof f, "%s/" RUN_NODE_PARAMS, item, i);
				if (stat(f, &st) < 0)
					break;
				if (nodes_add(nd, f, strlen(f)) < 0)
					return gem_errf(err, GEM_ENOMEM, "out of memory");
			}
			if (nd->k == before)
				return gem_errf(err, GEM_EUSAGE, "%s: no node-0.gem (not an SGP run, or not run)",
						item);
		} else if (len && nodes_add(nd, item, len) < 0) {
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		p += len;
		if (*p == ',')
			p++;
	}
	if (nd->k == 0)
		return gem_errf(err, GEM_EUSAGE, "--nodes: no node given");
	return 0;
}

static void print_node_row(const struct evaluator *e, const char *node, double version, double samples,
			   double loss, double acc, double dist, double bytes)
{
	if (e->json) {
		if (strspn(node, "0123456789") == strlen(node))
			printf("{\"node\":%s", node);
		else
			printf("{\"node\":\"%s\"", node);
		printf(",\"version\":%.0f,\"samples\":%.0f", version, samples);
		json_num(loss_key(e, 0), "%.6f", shown_loss(e, loss));
		json_num("test_acc", "%.4f", acc);
		json_num("consensus", "%.6g", dist);
		json_num("bytes", "%.0f", bytes);
		fputs("}\n", stdout);
		return;
	}
	char l[48], b[48];
	printf("%s\t%.0f\t%.0f\t%s\t%.4f\t%.6g\t%s\n", node, version, samples,
	       num_format(l, sizeof l, "%.6f", shown_loss(e, loss)), acc, dist,
	       num_format(b, sizeof b, "%.0f", bytes));
}

/* The bytes the node of a node file (DIR/node-I.gem) sent, from its log DIR/node-I.jsonl; NaN
 * for a URL or a node without its log. */
static double node_bytes(const char *item)
{
	char err[GEM_ERRMAX], path[PATH_MAX + 64];
	const char *slash = strrchr(item, '/'), *base = slash ? slash + 1 : item;
	uint64_t out;
	int id, end = -1;
	if (is_url(item) || sscanf(base, RUN_NODE_PARAMS "%n", &id, &end) != 1 ||
	    end != (int)strlen(base))
		return NAN;
	snprintf(path, sizeof path, "%.*s" RUN_NODE_LOG, slash ? (int)(base - item) : 0, item, id);
	if (run_log_bytes_sent(path, &out, err) < 0) {
		log_info("no bytes on the wire: %s", err);
		return NAN;
	}
	return (double)out;
}

/* Evaluate the nodes and print their table: a row per node, then the mean and spread over the
 * nodes and their average z̄ (consensus: ‖z_i − z̄‖). */
static int evaluate_nodes(struct evaluator *e, const struct run *run, const struct nodes *nd,
			  double retry_for, char *err)
{
	struct eval_nodes r;
	char name[32];
	double *bytes, sum = 0, sq = 0;
	int rc = eval_nodes(&r, &e->buf, e->m, &e->test, e->mean, e->std, run, nd->item, nd->k,
			    retry_for, err);
	if (rc < 0) {
		eval_nodes_free(&r);
		return rc;
	}
	if (!(bytes = malloc(sizeof *bytes * (size_t)r.k))) {
		eval_nodes_free(&r);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	for (int i = 0; i < r.k; i++) {
		bytes[i] = node_bytes(nd->item[i]);
		sum += bytes[i];
	}
	for (int i = 0; i < r.k; i++)
		sq += (bytes[i] - sum / r.k) * (bytes[i] - sum / r.k);
	if (!e->json)
		printf("# node\tversion\tsamples\t%s\ttest_acc\tconsensus\tbytes\n", loss_key(e, 0));
	for (int i = 0; i < r.k; i++) {
		snprintf(name, sizeof name, "%d", i);
		print_node_row(e, name, (double)r.p[i].version, (double)r.p[i].samples, r.res[i].loss,
			       r.res[i].accuracy, r.dist[i], bytes[i]);
	}
	print_node_row(e, "mean", r.version, r.samples, r.loss[0], r.acc[0], r.dist_spread[0],
		       sum / r.k);
	print_node_row(e, "sd", r.version, r.samples, r.loss[1], r.acc[1], r.dist_spread[1],
		       sqrt(sq / r.k));
	/* the nodes' average stands for the run: every push of every node behind it */
	print_node_row(e, "average", r.version, r.samples, r.avg.loss, r.avg.accuracy, 0, sum);
	free(bytes);
	if (trainer_diverged(r.avg.loss, r.avg.classes))
		diverged(e, "the nodes' average", (uint64_t)r.version, r.avg.loss);
	eval_nodes_free(&r);
	if (fflush(stdout) == EOF || ferror(stdout))
		return gem_errf(err, GEM_EFAIL, "stdout: write error");
	return 0;
}

static void evaluator_free(struct evaluator *e)
{
	eval_buf_free(&e->buf);
	dataset_free(&e->test);
	dataset_free(&e->train);
	model_free(e->m);
	e->m = NULL;
}

/* An SGP run's directory: its nodes saved their parameters (node-0.gem, ...), and its
 * params.gem is only θ₀. */
static int is_sgp_run(const char *dir)
{
	char f[PATH_MAX + 32];
	struct stat st;
	snprintf(f, sizeof f, "%s/" RUN_NODE_PARAMS, dir, 0);
	return fs_is_dir(dir) && stat(f, &st) == 0;
}

/* What an argument names: a server's URL, a RUNDIR, or a PARAMS_FILE of rundir. */
struct target {
	const char *url, *rundir, *params;
	char dirbuf[PATH_MAX];
};

static void target_of(const char *arg, const char *run_opt, struct target *t)
{
	memset(t, 0, sizeof *t);
	if (is_url(arg)) {
		t->url = arg;
	} else if (fs_is_dir(arg)) {
		t->rundir = run_opt ? run_opt : arg;
	} else {
		const char *slash = strrchr(arg, '/');
		t->params = arg;
		t->rundir = run_opt;
		if (!t->rundir) {
			snprintf(t->dirbuf, sizeof t->dirbuf, "%.*s", slash ? (int)(slash - arg) : 1,
				 slash ? arg : ".");
			t->rundir = t->dirbuf;
		}
	}
}

/* Evaluate what arg names and print its line (the run's name first when e->name); the exit
 * status. */
static int eval_target(struct evaluator *e, const char *arg, const char *run_opt,
		       const char *data, const char *cacert, double retry_for)
{
	char err[GEM_ERRMAX];
	struct run_progress p;
	struct target t;
	struct run run;
	struct stat st;
	int c, rc = EXIT_JOB;

	if (!is_url(arg) && stat(arg, &st) < 0) {
		/* named as given: not as the directory a PARAMS_FILE would be in */
		fprintf(stderr, "gem-eval: %s: %s\n", arg, strerror(errno));
		return EXIT_USAGE;
	}
	target_of(arg, run_opt, &t);
	e->what = arg;
	if (t.rundir) {
		if (run_open(t.rundir, &run, err) < 0) {
			fprintf(stderr, "gem-eval: %s\n", err);
			return EXIT_USAGE;
		}
	} else if ((c = eval_remote_open_run(t.url, retry_for, cacert, &run, err)) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		return prog_exit(c);
	}
	if ((c = evaluator_init(e, &run, data, err)) < 0) {
		rc = prog_exit(c);
	} else {
		if (t.url)
			c = eval_remote_theta(t.url, retry_for, cacert, model_params(e->m),
					      model_nparams(e->m), &p, err);
		else
			/* a sliced run's θ: its servers' slices end to end (the merged view) */
			c = t.params ? run_params_load(&run, t.params, model_params(e->m),
						       model_nparams(e->m), &p, err)
				     : run_params_load_merged(&run, model_params(e->m), model_nparams(e->m),
							      &p, err);
		if (t.rundir)
			logs_open(e, t.rundir);
		if (c == 0)
			c = evaluate(e, &p, err);
		logs_close(e);
		rc = prog_exit(c);
	}
	if (rc)
		fprintf(stderr, "gem-eval: %s\n", err);
	evaluator_free(e);
	run_close(&run);
	return rc;
}

/* gem-eval RUN...: one table, a line per run, the run's name (its argument) first. */
static int eval_many(struct evaluator *e, char **args, int n, const char *run_opt,
		     const char *data, const char *cacert, double retry_for)
{
	for (int i = 0; i < n; i++)
		if (!is_url(args[i]) && is_sgp_run(args[i])) {
			fprintf(stderr, "gem-eval: %s: an SGP run: evaluate its nodes alone "
					"(gem-eval %s)\n", args[i], args[i]);
			return EXIT_USAGE;
		}
	for (int i = 0; i < n; i++) {
		int rc;
		e->name = args[i];
		if ((rc = eval_target(e, args[i], run_opt, data, cacert, retry_for)) != 0)
			return rc;
	}
	return 0;
}

/* --nodes LIST (or an SGP RUNDIR): the nodes' table. */
static int eval_nodes_main(struct evaluator *e, const char *nodes_opt, const char *run_opt,
			   const char *data, double retry_for)
{
	char err[GEM_ERRMAX], dirbuf[PATH_MAX];
	const char *rundir = NULL;
	struct eval_remote remote;
	struct nodes nd = {0};
	struct run run;
	int c, rc = EXIT_JOB;

	memset(&remote, 0, sizeof remote);
	if (nodes_parse(&nd, nodes_opt, err) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		nodes_free(&nd);
		return EXIT_USAGE;
	}
	/* the run: --run, the first node's directory, or the first node's GET /v1/run */
	if (run_opt) {
		rundir = run_opt;
	} else if (!is_url(nd.item[0])) {
		const char *slash = strrchr(nd.item[0], '/');
		snprintf(dirbuf, sizeof dirbuf, "%.*s", slash ? (int)(slash - nd.item[0]) : 1,
			 slash ? nd.item[0] : ".");
		rundir = dirbuf;
	}
	if (rundir && run_open(rundir, &run, err) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		nodes_free(&nd);
		return EXIT_USAGE;
	}
	if (!rundir && (eval_remote_open(&remote, nd.item[0], retry_for, NULL, err) < 0 ||
			eval_remote_run(&remote, &run, err) < 0)) {
		fprintf(stderr, "gem-eval: %s\n", err);
		eval_remote_close(&remote);
		nodes_free(&nd);
		return EXIT_JOB;
	}
	eval_remote_close(&remote);
	if ((c = evaluator_init(e, &run, data, err)) < 0)
		rc = prog_exit(c);
	else if ((c = evaluate_nodes(e, &run, &nd, retry_for, err)) < 0)
		rc = EXIT_JOB;
	else
		rc = e->diverged ? EXIT_JOB : 0;
	if (rc)
		fprintf(stderr, "gem-eval: %s\n", err);
	nodes_free(&nd);
	evaluator_free(e);
	run_close(&run);
	return rc;
}

/* --follow RUNDIR started before its run is made (RUNDIR is not there yet): wait --retry-for
 * seconds for its run.json, as gem-work --server RUNDIR waits for its server. 0, or an exit
 * status. */
static int wait_for_run(const char *dir, double retry_for)
{
	char path[PATH_MAX];
	double t0 = clock_mono();
	if (access(dir, F_OK) == 0 || run_dir_file(dir, RUN_JSON, path, sizeof path) < 0)
		return 0;
	log_info("waiting for %s to be made (retrying for %g s)", dir, retry_for);
	while (access(path, F_OK) < 0) {
		if (clock_mono() - t0 >= retry_for) {
			fprintf(stderr, "gem-eval: %s: not a run after %g s (no %s)\n", dir, retry_for, path);
			return EXIT_JOB;
		}
		eval_sleep(0.1);
	}
	return 0;
}

/* --follow URL|RUNDIR: a line per new version until the run ends. */
static int eval_follow_main(struct evaluator *e, const char *follow, const char *data,
			    const char *cacert, double interval, double retry_for)
{
	char err[GEM_ERRMAX];
	struct run run;
	int c, rc = EXIT_JOB;
	const char *url = is_url(follow) ? follow : NULL, *rundir = url ? NULL : follow;

	if (rundir && is_sgp_run(rundir)) {
		fprintf(stderr, "gem-eval: --follow %s: an SGP run has no server or checkpoint to "
				"follow; once it has ended, gem-eval %s evaluates its nodes\n",
			rundir, rundir);
		return EXIT_USAGE;
	}
	if (rundir && (c = wait_for_run(rundir, retry_for)))
		return c;
	e->what = follow;
	if (rundir) {
		if (run_open(rundir, &run, err) < 0) {
			fprintf(stderr, "gem-eval: %s\n", err);
			return EXIT_USAGE;
		}
	} else if ((c = eval_remote_open_run(url, retry_for, cacert, &run, err)) < 0) {
		fprintf(stderr, "gem-eval: %s\n", err);
		return prog_exit(c);
	}
	if ((c = evaluator_init(e, &run, data, err)) < 0) {
		rc = prog_exit(c);
	} else {
		struct eval_follow f = {.url = url, .rundir = rundir, .interval = interval,
					.retry_for = retry_for, .cacert = cacert,
					.theta = model_params(e->m), .n = model_nparams(e->m),
					.fn = evaluate, .ctx = e};
		if (rundir)
			logs_open(e, rundir);
		c = eval_follow_run(&f, err);
		logs_close(e);
		rc = c == GEM_EUSAGE ? EXIT_USAGE : c < 0 || e->diverged ? EXIT_JOB : 0;
	}
	if (rc)
		fprintf(stderr, "gem-eval: %s\n", err);
	evaluator_free(e);
	run_close(&run);
	return rc;
}

/* The options' combinations checked (bad_usage exits); the SGP nodes to evaluate, if any: given
 * by --nodes, or a lone SGP RUNDIR's (taken from argv). */
static const char *check_usage(const struct evaluator *e, const char *nodes_opt,
			       const char *run_opt, const char *cacert, int follow, int argc,
			       char **argv)
{
	/* a lone SGP RUNDIR: its params.gem is θ₀, its nodes hold the training */
	if (!nodes_opt && !follow && optind == argc - 1 && !run_opt && is_sgp_run(argv[optind])) {
		if (e->per_class || e->train_subset)
			bad_usage("an SGP run: its nodes are evaluated (--nodes), without --per-class "
				  "or --train-subset: ", argv[optind]);
		log_info("%s: an SGP run: evaluating its nodes (--nodes %s)", argv[optind],
			 argv[optind]);
		nodes_opt = argv[optind++];
	}
	if (nodes_opt) {
		if (follow || e->per_class || e->train_subset)
			bad_usage("--nodes: not with --follow, --per-class or --train-subset", "");
		if (cacert)
			bad_usage("--cacert: not with --nodes (SGP nodes speak plain HTTP)", "");
		if (optind != argc)
			bad_usage("--nodes: no other parameters to evaluate: ", argv[optind]);
	} else if (follow && optind != argc - 1) {
		bad_usage(optind == argc ? "--follow: which URL or RUNDIR?" : "--follow: one URL or RUNDIR, "
			  "not also ", optind == argc ? "" : argv[optind + 1]);
	} else if (!follow && optind == argc) {
		bad_usage("nothing to evaluate", "");
	}
	if (cacert && !follow && !nodes_opt) {
		for (int i = optind; i < argc; i++)
			if (!is_url(argv[i]))
				bad_usage("--cacert: only with a server's URL (or --follow): ", argv[i]);
	}
	if (run_opt && !nodes_opt) {
		if (follow)
			bad_usage("--run: only with a PARAMS_FILE or a RUNDIR to evaluate", "");
		for (int i = optind; i < argc; i++)
			if (is_url(argv[i]))
				bad_usage("--run: only with a PARAMS_FILE or a RUNDIR to evaluate: ", argv[i]);
	}
	return nodes_opt;
}

int main(int argc, char **argv)
{
	const char *run_opt = NULL, *data = NULL, *nodes_opt = NULL;
	const char *cacert = NULL;
	double interval = 2, retry_for = 10;
	long n;
	int threads = 1;
	int c, follow = 0;
	struct evaluator e;

	memset(&e, 0, sizeof e);
	{
		char err[GEM_ERRMAX];
		if (log_init("gem-eval", err) < 0) {
			fprintf(stderr, "gem-eval: %s\n", err);
			return EXIT_USAGE;
		}
	}
	while ((c = getopt_long(argc, argv, "d:cFi:N:j:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case O_RUN: run_opt = optarg; break;
		case 'd': data = optarg; break;
		case O_TRAIN:
			if (num_long(optarg, 1, INT_MAX, &n))
				bad_usage("--train-subset: not a positive number of samples: ", optarg);
			e.train_subset = (int)n;
			break;
		case 'c': e.per_class = 1; break;
		case O_JSON: e.json = 1; break;
		case 'F': follow = 1; break;
		case 'N': nodes_opt = optarg; break;
		case O_CACERT: cacert = optarg; break;
		case 'i':
			if (num_double(optarg, 0.01, 86400, &interval))
				bad_usage("--interval: not a number of seconds in [0.01, 86400]: ", optarg);
			break;
		case O_RETRY:
			if (num_double(optarg, 0, 1e6, &retry_for))
				bad_usage("--retry-for: not a number of seconds: ", optarg);
			break;
		case 'j':
			if (layers_threads_arg(optarg, &threads))
				bad_usage(LAYERS_THREADS_BAD, optarg);
			break;
		case 'q': log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-eval"); return 0;
		default: fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		}
	}
	nodes_opt = check_usage(&e, nodes_opt, run_opt, cacert, follow, argc, argv);
	prog_blas_init();
	layers_set_threads(threads);

	if (nodes_opt)
		return eval_nodes_main(&e, nodes_opt, run_opt, data, retry_for);
	if (follow)
		return eval_follow_main(&e, argv[optind], data, cacert, interval, retry_for);
	/* a run that diverged was said so, its line printed: the job did not succeed */
	if ((c = argc - optind == 1 ? eval_target(&e, argv[optind], run_opt, data, cacert, retry_for)
				    : eval_many(&e, argv + optind, argc - optind, run_opt, data, cacert,
						retry_for)))
		return c;
	return e.diverged ? EXIT_JOB : 0;
}
