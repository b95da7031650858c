#include "report/eval.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "wire/msg.h"
#include "base/rng.h"
#include "run/shard.h"
#include "run/srvset.h"
#include "wire/proto.h"

/* ---- evaluation ---- */

int eval_buf_init(struct eval_buf *b, struct model *m, char *err)
{
	size_t labels = (size_t)model_labels(m);
	memset(b, 0, sizeof *b);
	/* a sequence model's activations are T rows per sample: a training batch's worth */
	b->chunk = labels > 1 ? EVAL_TEXT_BATCH : EVAL_CHUNK;
	b->x = model_input_alloc(m, b->chunk);
	b->y = malloc((size_t)b->chunk * labels * sizeof *b->y);
	b->pred = malloc((size_t)b->chunk * labels * sizeof *b->pred);
	if (!b->x || !b->y || !b->pred) {
		eval_buf_free(b);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	return model_reserve(m, b->chunk, err);
}

void eval_buf_free(struct eval_buf *b)
{
	free(b->x);
	free(b->y);
	free(b->pred);
	memset(b, 0, sizeof *b);
}

/* A text's fixed windows: EVAL_TEXT_BATCHES batches of b->chunk (byte values: not normalised). */
/* The first n predictions of b counted by class (the first EVAL_MAX_CLASSES classes). */
static void tally(struct eval_result *res, const struct eval_buf *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b->y[i] < EVAL_MAX_CLASSES) {
			res->class_n[b->y[i]]++;
			res->class_correct[b->y[i]] += b->pred[i] == b->y[i];
		}
}

static void eval_text(struct eval_buf *b, struct model *m, const struct dataset *d, struct eval_result *res)
{
	size_t labels = (size_t)model_labels(m);
	double loss = 0;
	long correct = 0;
	struct rng r;
	rng_seed(&r, EVAL_TEXT_SEED, RNG_EVAL_SUBSET);
	for (int k = 0; k < EVAL_TEXT_BATCHES; k++) {
		for (int i = 0; i < b->chunk; i++)
			dataset_fill_window(d, rng_below(&r, (uint32_t)(d->len - labels)), b->x + (size_t)i * labels,
					    b->y + (size_t)i * labels);
		loss += model_evaluate(m, b->x, b->y, b->chunk, &correct, b->pred);
		tally(res, b, (size_t)b->chunk * labels);
	}
	res->n = (long)EVAL_TEXT_BATCHES * b->chunk;
	res->loss = loss / ((double)res->n * (double)labels);
	res->accuracy = (double)correct / ((double)res->n * (double)labels);
}

int eval_run(struct eval_buf *b, struct model *m, const struct dataset *d, float mean, float std,
	     struct eval_result *res, char *err)
{
	int classes = model_classes(m);
	double loss = 0;
	long correct = 0;

	if (model_fits(m, d, err) < 0)
		return GEM_EUSAGE;
	memset(res, 0, sizeof *res);
	res->classes = classes;
	if (model_exec_info(m)) {
		/* its own test split, all of it, as the child scores it (no classes tallied) */
		uint64_t count;
		long long right;
		int rc = model_eval_ext(m, &loss, &count, &right, err);
		if (rc < 0)
			return rc;
		res->n = (long)count;
		res->loss = loss / (double)count;
		res->accuracy = right >= 0 ? (double)right / (double)count : NAN;
		return 0;
	}
	if (d->text) {
		if (d->n < 1 || b->chunk != EVAL_TEXT_BATCH)
			return gem_errf(err, GEM_EUSAGE, "the text has no window to evaluate");
		eval_text(b, m, d, res);
		return 0;
	}
	for (int start = 0; start < d->n; start += b->chunk) {
		int n = d->n - start < b->chunk ? d->n - start : b->chunk;
		dataset_fill(d, NULL, (size_t)start, (size_t)n, mean, std, b->x, b->y);
		loss += model_evaluate(m, b->x, b->y, n, &correct, b->pred);
		tally(res, b, (size_t)n);
	}
	res->n = d->n;
	res->loss = d->n ? loss / d->n : 0;
	res->accuracy = d->n ? (double)correct / d->n : 0;
	return 0;
}

/* The nodes' parameters z_0..z_{k-1} (n floats each): avg gets their average z̄ and dist[i] the
 * consensus distance ‖z_i − z̄‖₂. */
static void nodes_average(const float *const *z, int k, size_t n, float *avg, double *dist)
{
	for (size_t j = 0; j < n; j++) {
		double sum = 0;
		for (int i = 0; i < k; i++)
			sum += z[i][j];
		avg[j] = (float)(sum / k);
	}
	for (int i = 0; i < k; i++) {
		double d2 = 0;
		for (size_t j = 0; j < n; j++) {
			double d = (double)z[i][j] - avg[j];
			d2 += d * d;
		}
		dist[i] = sqrt(d2);
	}
}

/* Mean and (population) standard deviation of v[0..k). */
static void spread(const double *v, int k, double *mean, double *sd)
{
	double s = 0, s2 = 0;
	for (int i = 0; i < k; i++)
		s += v[i];
	*mean = k ? s / k : NAN;
	for (int i = 0; i < k; i++)
		s2 += (v[i] - *mean) * (v[i] - *mean);
	*sd = k ? sqrt(s2 / k) : NAN;
}

double eval_class_accuracy(const struct eval_result *res, int k)
{
	if (k < 0 || k >= res->classes || k >= EVAL_MAX_CLASSES || res->class_n[k] == 0)
		return NAN;
	return (double)res->class_correct[k] / (double)res->class_n[k];
}

/* out: a copy of the windowed text d. */
static int text_copy(const struct dataset *d, struct dataset *out, char *err)
{
	*out = *d;
	if (!(out->text = malloc(d->len ? d->len : 1))) {
		memset(out, 0, sizeof *out);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	memcpy(out->text, d->text, d->len);
	return 0;
}

int eval_subset(const struct dataset *d, long n, uint64_t seed, struct dataset *out, char *err)
{
	uint32_t *idx;
	struct rng r;

	memset(out, 0, sizeof *out);
	if (d->text)
		return text_copy(d, out, err);
	if (n > d->n)
		n = d->n;
	if (n < 1)
		return gem_errf(err, GEM_EUSAGE, "an empty subset");
	size_t row = (size_t)d->dim * (d->images ? 1 : sizeof *d->xf);
	uint8_t *x = malloc((size_t)n * row);
	const uint8_t *from = d->images ? d->images : (const uint8_t *)d->xf;
	idx = malloc(sizeof *idx * (size_t)d->n);
	if (d->images)
		out->images = x;
	else
		out->xf = (float *)(void *)x;
	out->labels = malloc((size_t)n * sizeof *out->labels);
	if (!idx || !x || !out->labels) {
		free(idx);
		dataset_free(out);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	for (int i = 0; i < d->n; i++)
		idx[i] = (uint32_t)i;
	rng_seed(&r, seed, RNG_EVAL_SUBSET);
	rng_shuffle(&r, idx, (size_t)d->n);
	for (long i = 0; i < n; i++) {
		memcpy(x + (size_t)i * row, from + (size_t)idx[i] * row, row);
		out->labels[i] = d->labels[idx[i]];
		if (out->labels[i] + 1 > out->classes)
			out->classes = out->labels[i] + 1;
	}
	free(idx);
	out->n = (int)n;
	out->rows = d->rows;
	out->cols = d->cols;
	out->dim = d->dim;
	out->groups = d->groups;
	if (d->gscale) {
		size_t bytes = (size_t)d->groups * sizeof *d->gscale;
		out->gscale = malloc(bytes);
		out->gshift = malloc(bytes);
		if (!out->gscale || !out->gshift) {
			dataset_free(out);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		memcpy(out->gscale, d->gscale, bytes);
		memcpy(out->gshift, d->gshift, bytes);
	}
	return 0;
}

/* ---- a run seen from outside ---- */

/* A process that has exited but is not reaped yet (Linux: its /proc state is Z). */
static int pid_is_zombie(long pid)
{
	char path[64], buf[512], *p;
	size_t n;
	FILE *f;
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	/* "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')' */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'Z';
}

int eval_run_active(const char *dir)
{
	char path[PATH_MAX + 16], buf[32];
	struct run r;
	long pid = 0;
	ssize_t n;
	int fd;
	memset(&r, 0, sizeof r);
	snprintf(r.dir, sizeof r.dir, "%s", dir);
	if (run_file(&r, RUN_LOCK, path, sizeof path) < 0 || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	if (sscanf(buf, "%ld", &pid) != 1 || pid <= 0 || pid > INT32_MAX)
		return 0;
	/* the holder writes its pid; it stays after the holder exits, hence the check */
	if (kill((pid_t)pid, 0) < 0 && errno != EPERM)
		return 0;
	return !pid_is_zombie(pid);
}

/* ---- a server seen from outside ---- */

#define REMOTE_TIMEOUT_MS 60000L /* a whole request: θ of a large model on a slow link */
#define HEALTH_MAX_WAIT 0.5      /* poll at least this often while a server is away */
#define HEALTH_LONG_POLL 20.0    /* a long poll's wait at most (the server's cap is 30 s) */

/* The connect timeout of a server given retry_for seconds: a server that does not even accept
 * connections is an unreachable one, not a slow one. */
static long connect_ms_of(double retry_for)
{
	long ms = (long)(retry_for * 1000);
	return ms < 500 ? 500 : ms > 5000 ? 5000 : ms;
}

int eval_remote_open(struct eval_remote *r, const char *url, double retry_for, const char *cacert,
		     char *err)
{
	int rc;

	memset(r, 0, sizeof *r);
	r->retry_for = retry_for;
	blob_codec_init(&r->codec);
	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
		return gem_errf(err, GEM_EUSAGE, "%s: not an http:// URL", url);
	if ((rc = httpc_new(url, NULL, REMOTE_TIMEOUT_MS, &r->http, err)) < 0 ||
	    (rc = httpc_set_cacert(r->http, cacert, err)) < 0)
		return rc;
	httpc_set_timeout(r->http, REMOTE_TIMEOUT_MS, connect_ms_of(retry_for));
	return 0;
}

/* GET path from r, a small answer due after wait seconds (retried for retry_for in all when
 * retry): a server that accepted the connection and has not answered r->retry_for seconds after
 * that is away, not slow (θ's fetch keeps REMOTE_TIMEOUT_MS). */
static int get_small(struct eval_remote *r, const char *path, double wait, int retry, char *err)
{
	int rc;
	httpc_set_timeout(r->http, (long)((wait + r->retry_for) * 1000), connect_ms_of(r->retry_for));
	rc = retry ? httpc_get_retry(r->http, path, r->retry_for, &r->resp, err)
		   : httpc_get(r->http, path, &r->resp, err);
	httpc_set_timeout(r->http, REMOTE_TIMEOUT_MS, connect_ms_of(r->retry_for));
	return rc;
}

void eval_remote_close(struct eval_remote *r)
{
	httpc_free(r->http);
	httpc_resp_free(&r->resp);
	blob_codec_free(&r->codec);
	memset(r, 0, sizeof *r);
}

int eval_remote_run(struct eval_remote *r, struct run *run, char *err)
{
	json_error_t je;
	json_t *j;
	int rc;

	memset(run, 0, sizeof *run);
	run->lock_fd = -1;
	if ((rc = get_small(r, "/v1/run", 0, 1, err)) < 0)
		return rc;
	if (!(j = json_loadb(r->resp.body, r->resp.len, 0, &je)))
		return gem_errf(err, GEM_EFAIL, "%s/v1/run: not JSON: %s", httpc_base_url(r->http), je.text);
	if ((rc = run_from_json(j, run, err)) < 0) {
		gem_errprefix(err, "%s/v1/run: ", httpc_base_url(r->http));
		return GEM_EFAIL;
	}
	return 0;
}

/* θ from a params message in r->resp, with the progress its header records. */
static int decode_params(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
			 char *err)
{
	json_t *h = NULL;
	int rc = msg_decode_params(r->resp.body, r->resp.len, &r->codec, &h, theta, n, err);
	if (rc < 0) {
		gem_errprefix(err, "%s/v1/params: ", httpc_base_url(r->http));
		return GEM_EFAIL;
	}
	run_progress_of(h, p);
	json_decref(h);
	return 0;
}

int eval_remote_params(struct eval_remote *r, float *theta, size_t n, struct run_progress *p,
		       char *err)
{
	int rc = httpc_get_retry(r->http, "/v1/params?codec=raw", r->retry_for, &r->resp, err);
	return rc < 0 ? rc : decode_params(r, theta, n, p, err);
}

/* The nodes' parameters into z[i], each node's evaluated as it comes. */
static int nodes_load(struct eval_nodes *r, float **z, struct eval_buf *b, struct model *m,
		      const struct dataset *d, float mean, float std, const struct run *run,
		      char *const *item, double retry_for, char *err)
{
	size_t n = model_nparams(m);
	int rc = 0;
	for (int i = 0; i < r->k && rc == 0; i++) {
		if (!(z[i] = malloc(sizeof(float) * n)))
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		if (strncmp(item[i], "http://", 7) == 0 || strncmp(item[i], "https://", 8) == 0) {
			struct eval_remote remote;
			memset(&remote, 0, sizeof remote);
			if ((rc = eval_remote_open(&remote, item[i], retry_for, NULL, err)) == 0)
				rc = eval_remote_params(&remote, z[i], n, &r->p[i], err);
			eval_remote_close(&remote);
		} else {
			rc = run_params_load(run, item[i], z[i], n, &r->p[i], err);
		}
		if (rc == 0) {
			memcpy(model_params(m), z[i], sizeof(float) * n);
			rc = eval_run(b, m, d, mean, std, &r->res[i], err);
		}
	}
	return rc;
}

/* The mean and spread of the nodes' rows, and the version and samples of the summary rows. */
static int nodes_summarise(struct eval_nodes *r, char *err)
{
	double *v = calloc((size_t)r->k, sizeof *v);
	if (!v)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	r->version = INFINITY;
	r->samples = 0;
	for (int i = 0; i < r->k; i++) {
		r->samples += (double)r->p[i].samples;
		if ((double)r->p[i].version < r->version)
			r->version = (double)r->p[i].version;
	}
	for (int i = 0; i < r->k; i++)
		v[i] = r->res[i].loss;
	spread(v, r->k, &r->loss[0], &r->loss[1]);
	for (int i = 0; i < r->k; i++)
		v[i] = r->res[i].accuracy;
	spread(v, r->k, &r->acc[0], &r->acc[1]);
	spread(r->dist, r->k, &r->dist_spread[0], &r->dist_spread[1]);
	free(v);
	return 0;
}

int eval_nodes(struct eval_nodes *r, struct eval_buf *b, struct model *m, const struct dataset *d,
	       float mean, float std, const struct run *run, char *const *item, int k,
	       double retry_for, char *err)
{
	float **z = calloc((size_t)k, sizeof *z);
	int rc;
	memset(r, 0, sizeof *r);
	r->k = k;
	r->p = calloc((size_t)k, sizeof *r->p);
	r->res = calloc((size_t)k, sizeof *r->res);
	r->dist = calloc((size_t)k, sizeof *r->dist);
	if (!z || !r->p || !r->res || !r->dist)
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	else
		rc = nodes_load(r, z, b, m, d, mean, std, run, item, retry_for, err);
	if (rc == 0) {
		nodes_average((const float *const *)z, k, model_nparams(m), model_params(m), r->dist);
		rc = eval_run(b, m, d, mean, std, &r->avg, err);
	}
	if (rc == 0)
		rc = nodes_summarise(r, err);
	for (int i = 0; z && i < k; i++)
		free(z[i]);
	free(z);
	return rc;
}

void eval_nodes_free(struct eval_nodes *r)
{
	free(r->p);
	free(r->res);
	free(r->dist);
	memset(r, 0, sizeof *r);
}

/* ---- following a live server ---- */

void eval_sleep(double s)
{
	struct timespec ts;
	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The health in r->resp. */
static int health_parse(struct eval_remote *r, struct proto_health *h, char *err)
{
	json_t *j = json_loadb(r->resp.body, r->resp.len, 0, NULL);
	int rc = proto_health_from_json(j, SHARD_MAX, h, err);
	json_decref(j);
	if (rc < 0)
		gem_errprefix(err, "%s/v1/health: ", httpc_base_url(r->http));
	return rc < 0 ? GEM_EFAIL : 0;
}

/* GET /v1/health once as a follower; wait > 0: a long poll, answered when the server starts
 * stopping or after wait seconds (gem-protocol(7)), so that the stop is seen while connected. */
static int health(struct eval_remote *r, double wait, struct proto_health *h, char *err)
{
	char path[64];
	int rc;
	/* ?wait even when 0: the server knows a follower polls it, and waits for its next poll
	 * when it stops (gem-protocol(7)) */
	snprintf(path, sizeof path, "/v1/health?wait=%.3f", wait > 0 ? wait : 0);
	rc = get_small(r, path, wait > 0 ? wait : 0, 0, err);
	return rc < 0 ? rc : health_parse(r, h, err);
}

int eval_remote_open_run(const char *urls, double retry_for, const char *cacert, struct run *run,
			 char *err)
{
	char first[SRVSET_URL_MAX];
	struct eval_remote r;
	size_t len = strcspn(urls, ",");
	int rc;
	if (len >= sizeof first)
		return gem_errf(err, GEM_EUSAGE, "a URL of %zu bytes is too long", len);
	memcpy(first, urls, len);
	first[len] = 0;
	memset(run, 0, sizeof *run);
	run->lock_fd = -1;
	if ((rc = eval_remote_open(&r, first, retry_for, cacert, err)) == 0)
		rc = eval_remote_run(&r, run, err);
	eval_remote_close(&r);
	return rc;
}

int eval_remote_theta(const char *urls, double retry_for, const char *cacert, float *theta, size_t n,
		      struct run_progress *p, char *err)
{
	struct srvset *set = malloc(sizeof *set);
	struct eval_remote r;
	int rc = set ? srvset_parse(set, urls, err) : gem_errf(err, GEM_ENOMEM, "out of memory");

	if (rc == 0)
		srvset_layout(set, n);
	for (int i = 0; rc == 0 && i < set->n; i++) {
		struct run_progress q;
		if ((rc = eval_remote_open(&r, set->url[i], retry_for, cacert, err)) == 0 &&
		    (rc = get_small(&r, "/v1/health", 0, 1, err)) == 0 &&
		    (rc = srvset_check_health(set, i, r.resp.body, r.resp.len, NULL, err)) == 0 &&
		    (rc = eval_remote_params(&r, theta + set->slice[i].off, set->slice[i].len, &q,
					     err)) == 0)
			run_progress_merge(p, &q, i == 0);
		eval_remote_close(&r);
	}
	free(set);
	return rc;
}

/* Where a followed server stands. */
struct follower {
	const struct eval_follow *f;
	struct eval_remote r;
	char url[1024];
	int connected;     /* had an answer from a server at least once */
	int stopping;      /* the server said it was stopping (health or 410) */
	int have_last;     /* fn was called at least once */
	uint64_t last;     /* the version fn got last */
	double away_since; /* monotonic time of the first failure in a row; < 0: none */
	char away_why[GEM_ERRMAX];
	int local;         /* a local training was seen on the run (no server) */
	struct stat ckpt;  /* RUNDIR/params.gem when last loaded (local) */
	const struct srvset *set; /* the run's servers: this one must hold slice k of them */
	int k;
	double poll_at;       /* when the next poll is due (clock_mono; 0: now): its health request
			       * waits on the server until then (a long poll) */
	const int *run_stopping; /* a shard's: another shard of the run said it was stopping */
	int no_long_poll;     /* the server answered a long poll at once */
};

static int follower_connect(struct follower *w, const char *url, char *err)
{
	eval_remote_close(&w->r);
	snprintf(w->url, sizeof w->url, "%s", url);
	return eval_remote_open(&w->r, url, w->f->retry_for, w->f->cacert, err);
}

/* The run's final parameters, if the server wrote a version fn has not seen. */
static int follow_final(struct follower *w, char *err)
{
	char path[PATH_MAX + 16];
	struct run_progress p;
	struct run none;
	int rc;

	if (!w->f->rundir)
		return 0;
	/* gem-serve checkpoints, then removes server.url: wait for the latter, so as to read the
	 * former whole and final */
	for (double t0 = clock_mono(); clock_mono() - t0 < w->f->retry_for; eval_sleep(0.05)) {
		char url[sizeof w->url];
		if (run_server_url_read(w->f->rundir, url, sizeof url, NULL) < 0 || strcmp(url, w->url))
			break;
	}
	run_dir_file(w->f->rundir, RUN_PARAMS, path, sizeof path);
	memset(&none, 0, sizeof none);
	if ((rc = run_params_load(&none, path, w->f->theta, w->f->n, &p, err)) < 0)
		return rc;
	if (w->have_last && p.version <= w->last)
		return 0;
	w->have_last = 1;
	w->last = p.version;
	return w->f->fn(w->f->ctx, &p, err);
}

/* A local training's checkpoint: when RUNDIR/params.gem is another file than the one last
 * read (it is replaced whole at each checkpoint) and holds a new version, fn gets it. */
static int follow_local(struct follower *w, char *err)
{
	char path[PATH_MAX + 16];
	struct run_progress p;
	struct stat st;
	struct run none;
	int rc;
	memset(&none, 0, sizeof none);
	snprintf(none.dir, sizeof none.dir, "%s", w->f->rundir);
	run_file(&none, RUN_PARAMS, path, sizeof path);
	if (stat(path, &st) < 0)
		return 0; /* between two checkpoints' rename: the next poll reads it */
	if (st.st_ino == w->ckpt.st_ino && st.st_dev == w->ckpt.st_dev &&
	    st.st_size == w->ckpt.st_size && st.st_mtim.tv_sec == w->ckpt.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == w->ckpt.st_mtim.tv_nsec)
		return 0;
	memset(&none, 0, sizeof none);
	if ((rc = run_params_load(&none, path, w->f->theta, w->f->n, &p, err)) < 0)
		return rc;
	w->ckpt = st;
	if (w->have_last && p.version == w->last)
		return 0;
	w->have_last = 1;
	w->last = p.version;
	return w->f->fn(w->f->ctx, &p, err);
}

/* RUNDIR trained by a local training (a live holder of its lock, no server.url): 1 after
 * following its checkpoints one poll, 2 when the training that was followed has ended, 0 when
 * the run is not trained locally. */
static int follow_local_poll(struct follower *w, char *err)
{
	char url[sizeof w->url];
	int rc;
	if (!w->f->rundir || w->r.http || run_server_url_read(w->f->rundir, url, sizeof url, NULL) == 0)
		return 0;
	if (!eval_run_active(w->f->rundir))
		return w->local ? 2 : 0;
	w->local = 1;
	return (rc = follow_local(w, err)) < 0 ? rc : 1;
}

/* One poll: 1 after a new version went to fn or nothing changed, 0 when the server is away
 * (w->away_why says why), 2 when it has stopped, < 0 on an error that ends the follow. */
static int follow_poll(struct follower *w, char *err)
{
	struct run_progress p;
	struct proto_health h;
	double t0, pace;
	int rc;

	if (!w->r.http) {
		/* RUNDIR with no server.url yet, or a URL not reachable at all */
		char url[sizeof w->url];
		if (run_server_url_read(w->f->rundir, url, sizeof url, w->away_why) < 0)
			return 0;
		if ((rc = follower_connect(w, url, err)) < 0)
			return rc;
	}
	t0 = clock_mono();
	pace = w->poll_at - t0;
	pace = pace < HEALTH_LONG_POLL ? pace : HEALTH_LONG_POLL;
	rc = health(&w->r, pace, &h, w->away_why);
	/* a server that answers a long poll at once does not know it: pause here from now on */
	if (rc == 0 && pace > 0.1 && !h.stopping && clock_mono() - t0 < pace / 2)
		w->no_long_poll = 1;
	if (rc == 0) {
		if ((rc = srvset_check_at(w->set, w->k, w->url, &h.slice, 1, err)) < 0)
			return rc;
		w->connected = 1;
		w->stopping |= h.stopping;
		if (!h.stopping && clock_mono() < w->poll_at - 0.005)
			return 1; /* a long poll cut short (the server's cap): the pause goes on */
		if (w->have_last && h.version == w->last)
			return 1;
		rc = httpc_get(w->r.http, "/v1/params?codec=raw", &w->r.resp, w->away_why);
		if (rc == 0) {
			if ((rc = decode_params(&w->r, w->f->theta, w->f->n, &p, err)) < 0)
				return rc;
			if (w->have_last && p.version == w->last)
				return 1;
			w->have_last = 1;
			w->last = p.version;
			return (rc = w->f->fn(w->f->ctx, &p, err)) < 0 ? rc : 1;
		}
	}
	if (rc == HTTPC_EHTTP && w->r.resp.status == 410)
		return 2;
	if (rc == HTTPC_ETRANSPORT || (rc == HTTPC_EHTTP && w->r.resp.status == 503))
		return w->stopping || (w->run_stopping && *w->run_stopping) ? 2 : 0;
	if (err)
		memcpy(err, w->away_why, GEM_ERRMAX);
	return rc < 0 ? rc : GEM_EFAIL;
}

/* The server is away: has it stopped normally (1), moved (switched to, 2), or neither (0)? */
static int follow_away(struct follower *w, char *err)
{
	char url[sizeof w->url];
	if (!w->f->rundir)
		return 0;
	if (run_server_url_read(w->f->rundir, url, sizeof url, NULL) < 0)
		return w->connected ? 1 : 0; /* gem-serve removes server.url when it exits */
	if (w->r.http && strcmp(url, w->url) == 0)
		return 0;
	return follower_connect(w, url, err) < 0 ? GEM_EFAIL : 2;
}

/* Before the next round, wait seconds: on the server, as the next health poll's long poll,
 * when it answered the last one (so that a stop meanwhile is seen), else here. */
static void follow_pause(struct follower *w, double wait)
{
	if (w->r.http && !w->local && w->away_since < 0 && !w->stopping && !w->no_long_poll &&
	    wait > 0)
		w->poll_at = clock_mono() + wait;
	else
		eval_sleep(wait);
}

/* One round of a follow: < 0 an error that ends it, 0 to poll again after *wait seconds, 1 when
 * the server has stopped (follow_final next), 2 when the local training followed has ended
 * (follow_local next). */
static int follow_step(struct follower *w, double *wait, char *err)
{
	const struct eval_follow *f = w->f;
	double t0 = clock_mono(), now;
	int rc, moved;

	*wait = 0;
	if ((rc = follow_local_poll(w, err)) < 0)
		return rc;
	if (rc == 2)
		return 2;
	if (rc == 0) {
		if ((rc = follow_poll(w, err)) < 0)
			return rc;
		if (rc == 2)
			return 1;
	}
	if (rc == 1) {
		w->away_since = -1;
		now = clock_mono();
		if (w->stopping) {
			*wait = HEALTH_MAX_WAIT; /* soon, to see it go */
			w->poll_at = 0;
		} else if (now < w->poll_at) {
			*wait = w->poll_at - now; /* the rest of a pause */
		} else {
			/* the interval counts from the poll's answer: a long poll's end */
			*wait = f->interval - (now - (t0 > w->poll_at ? t0 : w->poll_at));
			w->poll_at = 0;
		}
		return 0;
	}
	if ((moved = follow_away(w, err)) < 0)
		return moved;
	if (moved == 1)
		return 1;
	if (moved == 2)
		return 0;
	if (w->away_since < 0)
		w->away_since = t0;
	if (clock_mono() - w->away_since >= f->retry_for) {
		if (!w->r.http)
			return gem_errf(err, GEM_EFAIL, "%s: no server running (waited %g s): %s",
					f->rundir, f->retry_for, w->away_why);
		if (!w->connected)
			return gem_errf(err, GEM_EFAIL, "server %s unreachable for %g s: %s", w->url,
					f->retry_for, w->away_why);
		return gem_errf(err, GEM_EFAIL,
				"server %s went away without stopping (unreachable for %g s: %s)",
				w->url, f->retry_for, w->away_why);
	}
	*wait = f->interval < HEALTH_MAX_WAIT ? f->interval : HEALTH_MAX_WAIT;
	return 0;
}

/* ---- following a sharded run ---- */

/* The shards' followers report to this: each shard's last progress (its slice of θ is in
 * place), and whether one moved since the caller last looked. */
struct shard_news {
	struct run_progress p[SHARD_MAX];
	int have[SHARD_MAX];
	int changed;
};

struct shard_ctx {
	struct shard_news *news;
	int i;
};

static int shard_got(void *ctx, const struct run_progress *p, char *err)
{
	struct shard_ctx *c = ctx;
	(void)err;
	c->news->p[c->i] = *p;
	c->news->have[c->i] = 1;
	c->news->changed = 1;
	return 0;
}

/* Follow the K shard servers of a sharded run (gem-serve --shard I/K), each into its slice of θ:
 * with urls, server I at urls[I]; else each as a run of its own in RUNDIR/shard-I-of-K/. f->fn
 * gets the whole θ once every shard has been seen, and again whenever the slowest shard's
 * version moves, with the merged progress (run_progress_merge). Ends when every shard has
 * ended, with the final checkpoints of a RUNDIR. */
static int follow_shards(const struct eval_follow *f, struct srvset *set, int urls, char *err)
{
	int k = set->n;
	struct shards {
		struct follower w[SHARD_MAX];
		struct eval_follow fk[SHARD_MAX];
		struct shard_ctx cx[SHARD_MAX];
		char dirs[SHARD_MAX][PATH_MAX];
		struct shard_news news;
		int done[SHARD_MAX];
		int stopping; /* a shard said the run was stopping */
	} *sh = calloc(1, sizeof *sh);
	struct follower *w;
	struct eval_follow *fk;
	struct shard_ctx *cx;
	struct shard_news *newsp;
	char (*dirs)[PATH_MAX], name[64];
	int *done, ndone = 0, have_last = 0, rc = 0;
	uint64_t last = 0;

	if (!sh)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	w = sh->w, fk = sh->fk, cx = sh->cx, dirs = sh->dirs, done = sh->done, newsp = &sh->news;
	srvset_layout(set, f->n);
	for (int i = 0; i < k; i++) {
		struct shard s = set->slice[i];
		snprintf(name, sizeof name, RUN_SHARD_DIR, i, k);
		if (!urls && run_dir_file(f->rundir, name, dirs[i], sizeof dirs[i]) < 0) {
			free(sh);
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", f->rundir);
		}
		fk[i] = *f;
		fk[i].url = urls ? set->url[i] : NULL;
		fk[i].rundir = urls ? NULL : dirs[i];
		fk[i].theta = f->theta + s.off;
		fk[i].n = s.len;
		fk[i].fn = shard_got;
		cx[i] = (struct shard_ctx){newsp, i};
		fk[i].ctx = &cx[i];
		w[i].f = &fk[i];
		w[i].away_since = -1;
		w[i].set = set;
		w[i].k = i;
		w[i].run_stopping = &sh->stopping;
		blob_codec_init(&w[i].r.codec);
		if (urls && (rc = follower_connect(&w[i], set->url[i], err)) < 0) {
			k = i + 1;
			goto out;
		}
	}
	while (ndone < k) {
		double wait = f->interval, wi;
		for (int i = 0; i < k; i++) {
			if (done[i])
				continue;
			rc = follow_step(&w[i], &wi, err);
			if (rc == 1)
				rc = follow_final(&w[i], err) < 0 ? -1 : 1;
			else if (rc == 2)
				rc = follow_local(&w[i], err) < 0 ? -1 : 2;
			if (rc < 0) {
				gem_errprefix(err, "shard %d/%d: ", i, k);
				rc = rc == GEM_EUSAGE ? rc : GEM_EFAIL;
				goto out;
			}
			sh->stopping |= w[i].stopping;
			if (rc) {
				done[i] = 1;
				ndone++;
			} else if (wi < wait) {
				wait = wi;
			}
		}
		rc = 0;
		if (newsp->changed) {
			struct run_progress m;
			int all = 1;
			for (int i = 0; i < k; i++) {
				all &= newsp->have[i];
				run_progress_merge(&m, &newsp->p[i], i == 0);
			}
			newsp->changed = 0;
			if (all && (!have_last || m.version != last)) {
				have_last = 1;
				last = m.version;
				if ((rc = f->fn(f->ctx, &m, err)) < 0)
					goto out;
			}
		}
		/* the first shard still followed waits on its server, the others poll at once */
		for (int i = 0; i < k && ndone < k; i++)
			if (!done[i]) {
				follow_pause(&w[i], wait);
				break;
			}
	}
out:
	for (int i = 0; i < k; i++)
		eval_remote_close(&w[i].r);
	free(sh);
	return rc;
}

int eval_follow_run(const struct eval_follow *f, char *err)
{
	struct srvset *set = calloc(1, sizeof *set);
	struct follower w;
	double wait;
	int rc;

	if (!set)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	/* the servers: a RUNDIR's K shards, a list of K URLs, or one server */
	if (f->rundir && !f->url && (rc = run_shards(f->rundir, err)) != 0) {
		set->n = rc;
		rc = rc < 0 ? rc : follow_shards(f, set, 0, err);
		free(set);
		return rc;
	}
	if (f->url && strchr(f->url, ',')) {
		if ((rc = srvset_parse(set, f->url, err)) == 0)
			rc = follow_shards(f, set, 1, err);
		free(set);
		return rc;
	}
	set->n = 1;
	srvset_layout(set, f->n);
	memset(&w, 0, sizeof w);
	w.f = f;
	w.set = set;
	w.away_since = -1;
	blob_codec_init(&w.r.codec);
	if (f->url && (rc = follower_connect(&w, f->url, err)) < 0)
		goto out;
	while ((rc = follow_step(&w, &wait, err)) == 0)
		follow_pause(&w, wait);
	if (rc == 1)
		rc = follow_final(&w, err);
	else if (rc == 2)
		rc = follow_local(&w, err); /* the last checkpoint, if new */
out:
	eval_remote_close(&w.r);
	free(set);
	return rc;
}
