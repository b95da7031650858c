#include "run/run.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <fnmatch.h>
#include <math.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nn/data.h"
#include "nn/model.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "base/jget.h"
#include "base/log.h"
#include "run/runjson.h"
#include "wire/msg.h"
#include "wire/proto.h"

static int lock_dir(const char *dir, int *fd, char *err);

/* dir/name with one slash between them, whatever dir ends with. */
static int dir_file(const char *dir, const char *name, char *out, size_t cap)
{
	size_t len = strlen(dir);
	int n;
	while (len > 1 && dir[len - 1] == '/')
		len--;
	n = snprintf(out, cap, "%.*s%s%s", (int)len, dir, len && dir[len - 1] == '/' ? "" : "/", name);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* mkdir -p dir. */
static int make_dirs(const char *dir, char *err)
{
	char path[PATH_MAX];
	if (strlen(dir) >= sizeof path)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	snprintf(path, sizeof path, "%s", dir);
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char c = *p;
		*p = 0;
		if (mkdir(path, 0777) < 0 && errno != EEXIST)
			return gem_errf(err, GEM_EFAIL, "%s: cannot create: %s", path, strerror(errno));
		if (!(*p = c))
			return 0;
	}
}

/* Every file a run leaves beside run.json: its log, checkpoints and states, the server's URL,
 * SGP's node files and peer list, gem-run's worker logs, token and TLS certificate, and the
 * server's messages. */
static const char *const run_leaves[] = {
	RUN_LOG, RUN_PARAMS, RUN_PARAMS_PREV, RUN_LOCAL_STATE, RUN_RULE_STATE, RUN_LOCAL_STATE_PREV,
	RUN_RULE_STATE_PREV, RUN_SERVER_URL, RUN_PEERS,
	RUN_PEERS_TMP, RUN_SERVE_ERR, "serve-*.err", "serve-*.url", "serve.out", "node-*.gem", "node-*.jsonl", "node-*.url",
	"node-*.log", "worker-*.log", RUN_TOKEN, RUN_TLS_CERT, RUN_TLS_KEY, RUN_OPENSSL_ERR,
};

static int remove_run_files(const char *dir, char *err);

/* A slice's directory (RUN_SLICE_DIR) goes with its files. */
static int remove_slice_dir(const char *path, char *err)
{
	char lock[PATH_MAX + 16];
	int rc = remove_run_files(path, err);
	dir_file(path, RUN_LOCK, lock, sizeof lock);
	unlink(lock);
	if (rc == 0 && rmdir(path) < 0)
		rc = gem_errf(err, GEM_EFAIL, "%s: cannot remove: %s", path, strerror(errno));
	return rc;
}

static int remove_run_files(const char *dir, char *err)
{
	char path[PATH_MAX + 16];
	struct dirent *e;
	DIR *d = opendir(dir);
	if (!d)
		return gem_errf(err, GEM_EFAIL, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		if (!fnmatch("slice-*-of-*", e->d_name, FNM_PERIOD) ||
		    !fnmatch("shard-*-of-*", e->d_name, FNM_PERIOD)) { /* older spelling */
			dir_file(dir, e->d_name, path, sizeof path);
			if (remove_slice_dir(path, err) < 0) {
				closedir(d);
				return GEM_EFAIL;
			}
			continue;
		}
		for (size_t i = 0; i < sizeof run_leaves / sizeof *run_leaves; i++)
			if (!fnmatch(run_leaves[i], e->d_name, FNM_PERIOD)) {
				dir_file(dir, e->d_name, path, sizeof path);
				if (unlink(path) < 0 && errno != ENOENT) {
					gem_errf(err, GEM_EFAIL, "%s: cannot remove: %s", path, strerror(errno));
					closedir(d);
					return GEM_EFAIL;
				}
				break;
			}
	}
	closedir(d);
	return 0;
}

static int write_run_json(const char *path, json_t *runjson, char *err)
{
	char *text = json_dumps(runjson, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	char *withnl;
	size_t len;
	int rc;
	if (!text)
		return gem_errf(err, GEM_ENOMEM, "run.json: cannot encode");
	len = strlen(text);
	if (!(withnl = malloc(len + 2))) {
		free(text);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	memcpy(withnl, text, len);
	withnl[len] = '\n';
	rc = fs_write_atomic(path, withnl, len + 1, err);
	free(withnl);
	free(text);
	return rc;
}

static int params_write(const char *path, const float *theta, size_t n, const struct run_progress *p,
			char *err);

int run_create(const char *dir, json_t *runjson, const float *theta, size_t n, int force, char *err)
{
	char path[PATH_MAX + 16], params[PATH_MAX + 16];
	struct run_progress p0 = {0};
	struct stat st;
	int rc, fd = -1;

	if ((rc = make_dirs(dir, err)) < 0)
		return rc;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return gem_errf(err, GEM_EUSAGE, "%s: not a directory", dir);
	if (dir_file(dir, RUN_JSON, path, sizeof path) < 0 ||
	    dir_file(dir, RUN_PARAMS, params, sizeof params) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	if (!force && access(path, F_OK) == 0)
		return gem_errf(err, GEM_EUSAGE, "%s: a run exists there already (use --force to replace it)",
				dir);
	/* no server or trainer may have the run while it is made or replaced under it; a new run
	 * starts with none of the old one's files */
	if ((rc = lock_dir(dir, &fd, err)) < 0)
		return rc;
	/* run.json goes first and comes back last: a crash in between leaves no run, never the
	 * run.json of one run beside the files of another */
	if (force && unlink(path) < 0 && errno != ENOENT)
		rc = gem_errf(err, GEM_EFAIL, "%s: cannot remove: %s", path, strerror(errno));
	if (rc == 0 && force)
		rc = remove_run_files(dir, err);
	if (rc == 0 && !force && access(path, F_OK) == 0)
		rc = gem_errf(err, GEM_EUSAGE, "%s: a run exists there already (use --force to replace it)",
			      dir);
	if (rc == 0)
		rc = params_write(params, theta, n, &p0, err);
	if (rc == 0)
		rc = write_run_json(path, runjson, err);
	close(fd);
	return rc;
}

/* r->spec from its run.json (r->json), and where its data is on this host. */
static int parse_run(struct run *r, char *err)
{
	int rc = run_spec_from_json(r->json, &r->spec, err);
	if (rc == 0)
		snprintf(r->data_dir, sizeof r->data_dir, "%s", r->spec.data_dir);
	return rc;
}

/* The recorded data directory, or the dataset found again by name (another host, another path;
 * not a spec's files, given by their paths). */
static void find_data(struct run *r)
{
	char other[PATH_MAX];
	if (!dataset_present(r->data_dir) && !dataset_is_spec(r->spec.data_name) &&
	    dataset_resolve(r->spec.data_name, other, sizeof other, NULL) == 0)
		snprintf(r->data_dir, sizeof r->data_dir, "%s", other);
}

int run_open(const char *dir, struct run *r, char *err)
{
	char path[PATH_MAX + 16];
	json_error_t je;

	memset(r, 0, sizeof *r);
	r->lock_fd = -1;
	if (strlen(dir) >= sizeof r->dir)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	snprintf(r->dir, sizeof r->dir, "%s", dir);
	dir_file(dir, RUN_JSON, path, sizeof path);
	r->json = json_load_file(path, 0, &je);
	if (!r->json) {
		if (access(path, F_OK) < 0)
			return gem_errf(err, GEM_EUSAGE, "%s: not a run (no run.json; make one with gem-init)",
					dir);
		return gem_errf(err, GEM_EUSAGE, "%s: line %d: %s", path, je.line, je.text);
	}
	if (parse_run(r, err) < 0) {
		gem_errprefix(err, "%s: ", path);
		run_close(r);
		return GEM_EUSAGE;
	}
	find_data(r);
	return 0;
}

int run_from_json(json_t *json, struct run *r, char *err)
{
	memset(r, 0, sizeof *r);
	r->lock_fd = -1;
	r->json = json;
	if (parse_run(r, err) < 0) {
		gem_errprefix(err, "run: ");
		run_close(r);
		return GEM_EUSAGE;
	}
	find_data(r);
	return 0;
}

uint64_t run_budget(const struct run *r, uint64_t epoch)
{
	uint64_t batch = (uint64_t)r->spec.train.batch, per_epoch;
	if (!r->spec.train.steps)
		return (uint64_t)r->spec.train.epochs * epoch;
	if (!epoch)
		return 0;
	per_epoch = (epoch + batch - 1) / batch;
	return r->spec.train.steps / per_epoch * epoch + r->spec.train.steps % per_epoch * batch;
}

int run_set_steps(struct run *r, uint64_t steps, char *err)
{
	char path[PATH_MAX + 16];
	json_t *train = json_object_get(r->json, "train");
	if (steps < 1 || steps > RUN_MAX_STEPS)
		return gem_errf(err, GEM_EUSAGE, "--steps: not an integer in [1, 2^40]: %llu",
				(unsigned long long)steps);
	if (r->spec.train.schedule == LR_COSINE && steps <= r->spec.train.warmup)
		return gem_errf(err, GEM_EUSAGE, "--steps %llu: the cosine needs a longer budget than its "
				"warm-up of %llu steps", (unsigned long long)steps,
				(unsigned long long)r->spec.train.warmup);
	if (r->spec.train.steps == steps)
		return 0;
	if (!json_is_object(train) || json_object_set_new(train, "steps", json_integer((json_int_t)steps)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	r->spec.train.steps = steps;
	dir_file(r->dir, RUN_JSON, path, sizeof path);
	return write_run_json(path, r->json, err);
}

void run_optim_config(const struct run *r, uint64_t total, struct optim_config *c)
{
	const struct run_train_spec *t = &r->spec.train;
	*c = (struct optim_config){.kind = t->optimizer, .lr = (float)t->lr,
				   .weight_decay = (float)t->weight_decay,
				   .momentum = (float)t->momentum, .nesterov = t->nesterov,
				   .warmup = t->warmup, .schedule = t->schedule,
				   .total_steps = total, .clip = (float)t->clip};
}

int run_data_fit(const struct model *m, struct dataset *ds, char *err)
{
	int rc;
	/* a sequence model's loss has a row per position: its T, the text's window */
	if (ds->text && !ds->seq && model_labels(m) > 1 &&
	    (rc = dataset_window(ds, model_labels(m), err)) < 0)
		return rc;
	return model_fits(m, ds, err);
}

int run_data_load(const struct run *r, const char *dir, const char *split, struct dataset *ds,
		  char *err)
{
	struct model *m;
	int rc;
	memset(ds, 0, sizeof *ds);
	if ((rc = model_from_json(r->spec.model, &m, err)) < 0)
		return rc;
	struct data_source src;
	run_data_source(r, dir, &src);
	if ((rc = dataset_open(&src, split, ds, err)) == 0 &&
	    ((rc = run_data_fit(m, ds, err)) < 0 ||
	     (r->spec.norm_groups && !ds->text &&
	      (rc = dataset_set_norm(ds, r->spec.norm_groups, r->spec.norm_mean, r->spec.norm_std,
				     err)) < 0)))
		dataset_free(ds);
	model_free(m);
	return rc;
}

void run_data_source(const struct run *r, const char *dir, struct data_source *src)
{
	/* other data is the user's to score: its own test split, else all of it; the run's
	 * holdout is a draw from the run's data, not from another's */
	*src = (struct data_source){.loc = dir ? dir : r->data_dir, .label = r->spec.data_label,
				    .holdout = dir ? 0 : r->spec.holdout,
				    .seed = r->spec.train.seed, .whole = dir != NULL};
}

void run_close(struct run *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	r->lock_fd = -1;
	json_decref(r->json);
	r->json = NULL;
	run_spec_free(&r->spec);
}

int run_file(const struct run *r, const char *name, char *out, size_t cap)
{
	return dir_file(r->fdir[0] ? r->fdir : r->dir, name, out, cap);
}

int run_dir_file(const char *dir, const char *name, char *out, size_t cap)
{
	return dir_file(dir, name, out, cap);
}

/* Who holds RUNDIR/.lock, in words: the pid it wrote there and the URL of its server. */
static void lock_holder(const char *dir, int fd, char *out, size_t cap)
{
	char buf[32], url[256], e[GEM_ERRMAX];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	long pid = 0;
	buf[n > 0 ? n : 0] = 0;
	if (sscanf(buf, "%ld", &pid) != 1 || pid <= 0)
		snprintf(out, cap, "another gem-serve or gem-work --local");
	else if (run_server_url_read(dir, url, sizeof url, e) == 0)
		snprintf(out, cap, "pid %ld (gem-serve at %s)", pid, url);
	else
		snprintf(out, cap, "pid %ld", pid);
}

/* Take the lock file dir/name exclusively into *fd and write our pid in it: 0, 1 when another
 * process holds it (*fd left open on it, to name the holder), < 0 on an error. */
static int lock_take(const char *dir, const char *name, int *fd, char *err)
{
	char path[PATH_MAX + 16], pid[32];
	int n;
	*fd = -1;
	if (dir_file(dir, name, path, sizeof path) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	if (flock(*fd, LOCK_EX | LOCK_NB) < 0)
		return 1;
	n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(*fd, 0) < 0 || pwrite(*fd, pid, (size_t)n, 0) != n)
		log_debug("%s: cannot write the pid: %s", path, strerror(errno));
	return 0;
}

/* Take dir/.lock exclusively into *fd and write our pid in it; GEM_EUSAGE naming the holder. */
static int lock_dir(const char *dir, int *fd, char *err)
{
	char who[400];
	int rc = lock_take(dir, RUN_LOCK, fd, err);
	if (rc != 1)
		return rc;
	lock_holder(dir, *fd, who, sizeof who);
	close(*fd);
	*fd = -1;
	return gem_errf(err, GEM_EUSAGE, "%s: the run is in use by %s", dir, who);
}

int run_lock(struct run *r, char *err)
{
	return lock_dir(r->fdir[0] ? r->fdir : r->dir, &r->lock_fd, err);
}

int run_lock_node(struct run *r, int i, char *err)
{
	char name[64], buf[32] = "";
	ssize_t n;
	int rc;
	snprintf(name, sizeof name, RUN_NODE_LOCK, i);
	if ((rc = lock_take(r->dir, name, &r->lock_fd, err)) != 1)
		return rc;
	n = pread(r->lock_fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	close(r->lock_fd);
	r->lock_fd = -1;
	return gem_errf(err, GEM_EUSAGE, "%s: node %d runs already (pid %s)", r->dir, i,
			buf[0] ? buf : "unknown");
}

/* The largest params file for n floats: the raw bytes, zlib's worst-case growth, a header. */
static size_t params_max_bytes(size_t n)
{
	return n * 4 + n / 64 + 1024 + MSG_HEAD_MAX;
}

/* θ and its progress to path, atomically. */
static int params_write(const char *path, const float *theta, size_t n, const struct run_progress *p,
			char *err)
{
	struct msg_buf b = {0};
	struct blob_codec c;
	json_t *h;
	int rc;

	h = json_pack("{s:I, s:I, s:f}", "version", (json_int_t)p->version, "samples",
		      (json_int_t)p->samples, "elapsed", p->elapsed);
	if (!h)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	blob_codec_init(&c);
	rc = msg_write_params_file(path, &b, &c, h, theta, n, NULL, -1, err);
	blob_codec_free(&c);
	msg_buf_free(&b);
	json_decref(h);
	return rc;
}

/* After a checkpoint file could not be read: name the save before it, when there is one, as
 * the operator's way on (X.gem's save before is X.prev.gem). A state file's save before is of the
 * checkpoint before params.gem's, so going back takes params.prev.gem too (also is r's
 * params.gem pair then; NULL for params.gem or another file). */
static void hint_prev(const char *path, const struct run *also, char *err)
{
	char prev[PATH_MAX + 32], pp[PATH_MAX + 16], p[PATH_MAX + 16];
	size_t len = strlen(path), used;
	if (!err || len < 4 || strcmp(path + len - 4, ".gem") ||
	    (len >= 9 && !strcmp(path + len - 9, ".prev.gem")))
		return;
	snprintf(prev, sizeof prev, "%.*s.prev.gem", (int)(len - 4), path);
	if (access(path, F_OK) < 0 || access(prev, F_OK) < 0)
		return;
	used = strlen(err);
	if (!also) {
		snprintf(err + used, GEM_ERRMAX - used,
			 "; the checkpoint before it is %s (to continue from there: cp %s %s)", prev,
			 prev, path);
		return;
	}
	run_file(also, RUN_PARAMS_PREV, pp, sizeof pp);
	run_file(also, RUN_PARAMS, p, sizeof p);
	snprintf(err + used, GEM_ERRMAX - used,
		 "; the checkpoint before it is %s with %s (to continue from there: cp %s %s && "
		 "cp %s %s)", prev, pp, prev, path, pp, p);
}

/* Before a checkpoint file is replaced: what it holds becomes the save before (kept until the
 * next save; the file itself stays in place throughout). */
static int keep_previous(const struct run *r, const char *name, const char *prev, char *err)
{
	char path[PATH_MAX + 16], ppath[PATH_MAX + 16];
	run_file(r, name, path, sizeof path);
	run_file(r, prev, ppath, sizeof ppath);
	return fs_keep_copy(path, ppath, err);
}

int run_params_save(const struct run *r, const float *theta, size_t n, const struct run_progress *p,
		    char *err)
{
	char path[PATH_MAX + 16];
	int rc = keep_previous(r, RUN_PARAMS, RUN_PARAMS_PREV, err);
	run_file(r, RUN_PARAMS, path, sizeof path);
	return rc < 0 ? rc : params_write(path, theta, n, p, err);
}

int run_params_progress(const char *dir, struct run_progress *p, char *err)
{
	char path[PATH_MAX + 16];
	struct msg_buf b = {0};
	struct msg m;
	int rc;
	dir_file(dir, RUN_PARAMS, path, sizeof path);
	if ((rc = msg_read_file(path, (size_t)1 << 40, &b, &m, err)) == 0) {
		run_progress_of(m.header, p);
		msg_free(&m);
	}
	msg_buf_free(&b);
	return rc;
}

/* What SGP nodes and gem-run's handshake leave: their URLs first. */
static const char *const node_leaves[] = {"node-*.url", "node-*.gem", "node-*.jsonl", "node-*.log",
					  RUN_PEERS, RUN_PEERS_TMP};

int run_node_files_remove(const char *dir, int urls_only, char *err)
{
	char path[PATH_MAX + 256];
	struct dirent *e;
	size_t n = urls_only ? 1 : sizeof node_leaves / sizeof *node_leaves;
	DIR *d = opendir(dir);
	if (!d)
		return gem_errf(err, GEM_EFAIL, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		for (size_t i = 0; i < n; i++)
			if (!fnmatch(node_leaves[i], e->d_name, FNM_PERIOD)) {
				dir_file(dir, e->d_name, path, sizeof path);
				if (unlink(path) < 0 && errno != ENOENT) {
					gem_errf(err, GEM_EFAIL, "%s: cannot remove: %s", path,
						 strerror(errno));
					closedir(d);
					return GEM_EFAIL;
				}
				break;
			}
	closedir(d);
	return 0;
}

void run_progress_of(const json_t *h, struct run_progress *p)
{
	struct proto_params pp = {0};
	proto_params_from_json(h, &pp);
	*p = (struct run_progress){.version = pp.version, .samples = pp.samples,
				   .elapsed = pp.elapsed};
}

int run_params_load(const struct run *r, const char *path, float *theta, size_t n,
		    struct run_progress *p, char *err)
{
	char def[PATH_MAX + 16];
	struct blob_codec c;
	json_t *h = NULL;
	int rc;

	if (!path) {
		run_file(r, RUN_PARAMS, def, sizeof def);
		path = def;
	}
	blob_codec_init(&c);
	rc = msg_read_params_file(path, params_max_bytes(n), &c, &h, theta, n, err);
	blob_codec_free(&c);
	if (rc < 0) {
		hint_prev(path, NULL, err);
		return rc;
	}
	run_progress_of(h, p);
	json_decref(h);
	return 0;
}

/* ---- state files: a checkpoint's θ with the state that goes with it ---- */

#define STATE_RULE_BLOB "rule"         /* rule-state.gem: the rule's vectors end to end */
#define STATE_OPTIM_BLOB "optim"       /* local-state.gem: the optimiser's state */

/* A state file: its header (progress and kind) and blobs, θ ("params", raw) first, written
 * after the one it replaces is kept as the save before. One file holds θ and its state, so
 * that no crash can part them. */
static int state_write(const struct run *r, const char *name, const char *prev, json_t *head,
		       const float *theta, size_t n, const char *blob, const float *v, size_t nv,
		       char *err)
{
	char path[PATH_MAX + 16];
	struct msg_blob bl[2] = {{.name = MSG_PARAMS}};
	struct blob_codec c[2];
	float dummy = 0;
	int rc = keep_previous(r, name, prev, err);
	if (rc < 0)
		return rc;
	snprintf(bl[1].name, sizeof bl[1].name, "%s", blob);
	blob_codec_init(&c[0]);
	blob_codec_init(&c[1]);
	run_file(r, name, path, sizeof path);
	/* a vector of no element is written as one 0 (a blob has at least one) */
	if ((rc = blob_encode(&c[0], theta, n, BLOB_RAW, 0, &bl[0].data, &bl[0].meta, err)) == 0 &&
	    (rc = blob_encode(&c[1], nv ? v : &dummy, nv ? nv : 1, BLOB_RAW, 0, &bl[1].data,
			      &bl[1].meta, err)) == 0)
		rc = msg_write_file(path, head, bl, 2, err);
	blob_codec_free(&c[0]);
	blob_codec_free(&c[1]);
	return rc;
}

/* The state file name of a run to be resumed with θ of progress *p, read into b and m: 1 when
 * it is of θ's version, or newer and holding θ (a crash fell between its save and θ's: θ and
 * *p are then taken from it); 0 when there is none or it is of another version (said in why);
 * < 0 when it cannot be read (damaged: the save before it named). A file holds θ when it has
 * both "params" and the state's blob: an older gem's local-state.gem has its state alone, as
 * "params". */
static int state_open(const struct run *r, const char *name, const char *blob, float *theta,
		      size_t n, struct run_progress *p, struct msg_buf *b, struct msg *m, char *why,
		      char *err)
{
	char path[PATH_MAX + 16];
	const struct msg_blob *own;
	struct run_progress q;
	struct blob_codec c;
	int rc;

	run_file(r, name, path, sizeof path);
	if (access(path, F_OK) < 0)
		return 0;
	if ((rc = msg_read_file(path, (size_t)1 << 40, b, m, err)) < 0) {
		hint_prev(path, r, err);
		return rc;
	}
	run_progress_of(m->header, &q);
	own = msg_find(m, blob) ? msg_find(m, MSG_PARAMS) : NULL;
	if (!json_is_integer(json_object_get(m->header, "version")) ||
	    (q.version != p->version && (q.version < p->version || !own))) {
		gem_errf(why, 0, "%s is of version %llu, the parameters of %llu", path,
			 (unsigned long long)q.version, (unsigned long long)p->version);
		msg_free(m);
		return 0;
	}
	if (q.version == p->version)
		return 1;
	blob_codec_init(&c);
	rc = blob_decode(&c, own->data, &own->meta, theta, n, err);
	blob_codec_free(&c);
	if (rc < 0) {
		gem_errprefix(err, "%s: %s: ", path, MSG_PARAMS);
		msg_free(m);
		return rc;
	}
	log_info("%s is newer than %s: resuming from it (version %llu)", path, RUN_PARAMS,
		 (unsigned long long)q.version);
	*p = q;
	return 1;
}

/* The state of the run to be resumed with θ of progress *p: the first of the state file and its
 * save before that state_open takes, or none (0, the reason in err). */
static int state_find(const struct run *r, const char *name, const char *prev, const char *blob,
		      float *theta, size_t n, struct run_progress *p, struct msg_buf *b, struct msg *m,
		      char *err)
{
	char why[GEM_ERRMAX] = "";
	const char *names[2] = {name, prev};
	for (int i = 0; i < 2; i++) {
		int rc = state_open(r, names[i], blob, theta, n, p, b, m, why, err);
		if (rc != 0)
			return rc;
	}
	if (err)
		memcpy(err, why, GEM_ERRMAX);
	return 0;
}

int run_local_state_save(const struct run *r, const float *theta, size_t n, const float *state,
			 size_t ns, const struct run_progress *p, char *err)
{
	json_t *h = json_pack("{s:I, s:I, s:f, s:s}", "version", (json_int_t)p->version, "samples",
			      (json_int_t)p->samples, "elapsed", p->elapsed, "state", "local");
	int rc;
	if (!h)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	rc = state_write(r, RUN_LOCAL_STATE, RUN_LOCAL_STATE_PREV, h, theta, n, STATE_OPTIM_BLOB,
			 state, ns, err);
	json_decref(h);
	return rc;
}

int run_local_state_load(const struct run *r, float *theta, size_t n, float *state, size_t ns,
			 struct run_progress *p, char *err)
{
	struct msg_buf b = {0};
	struct msg m;
	const struct msg_blob *st;
	struct blob_codec c;
	int rc = state_find(r, RUN_LOCAL_STATE, RUN_LOCAL_STATE_PREV, STATE_OPTIM_BLOB, theta, n, p,
			    &b, &m, err);
	if (rc <= 0) {
		msg_buf_free(&b);
		return rc;
	}
	/* an older gem's file holds the optimiser's state alone, as its "params" */
	if (!(st = msg_find(&m, STATE_OPTIM_BLOB)))
		st = msg_find(&m, MSG_PARAMS);
	blob_codec_init(&c);
	rc = st ? blob_decode(&c, st->data, &st->meta, state, ns, err)
		: gem_errf(err, GEM_EFAIL, "no optimiser state");
	blob_codec_free(&c);
	if (rc < 0)
		gem_errprefix(err, "%s: ", RUN_LOCAL_STATE);
	msg_free(&m);
	msg_buf_free(&b);
	return rc < 0 ? rc : 1;
}

/* Grow *buf to hold n floats (buffers only grow: a warm snapshot allocates nothing). */
static int ckpt_reserve(float **buf, size_t *cap, size_t n)
{
	float *p;
	if (*cap >= n && *buf)
		return 0;
	if (!(p = realloc(*buf, sizeof *p * (n ? n : 1))))
		return -1;
	*buf = p;
	*cap = n;
	return 0;
}

int run_ckpt_take(const struct rule *rule, json_t *workers, const float *theta, size_t n,
		  const struct run_progress *p, struct run_ckpt *ck, char *err)
{
	json_t *meta = NULL;
	struct rule_vec *vecs = NULL;
	size_t vn;
	int nvec = 0, rc;

	json_decref(ck->head);
	ck->head = NULL;
	if ((rc = rule_state_save(rule, &meta, &vecs, &nvec, err)) < 0) {
		json_decref(workers);
		return rc;
	}
	vn = nvec ? vecs[0].n : 0;
	ck->head = json_pack("{s:I, s:I, s:f, s:o, s:o, s:[]}", "version", (json_int_t)p->version,
			     "samples", (json_int_t)p->samples, "elapsed", p->elapsed, "rule", meta,
			     "workers", workers, "vecs");
	if (!ck->head || ckpt_reserve(&ck->vecs, &ck->vecs_cap, vn * (size_t)nvec) < 0 ||
	    ckpt_reserve(&ck->theta, &ck->theta_cap, n) < 0) {
		free(vecs);
		return gem_errf(err, GEM_ENOMEM, "checkpoint: out of memory");
	}
	for (int i = 0; i < nvec; i++) {
		json_array_append_new(json_object_get(ck->head, "vecs"), json_string(vecs[i].name));
		float *to = ck->vecs + (size_t)i * vn;
		if (vecs[i].bf16) /* saved as the floats they are: a checkpoint is float32 */
			for (size_t j = 0; j < vn; j++)
				to[j] = rule_bf16_float(vecs[i].bf16[j]);
		else
			memcpy(to, vecs[i].data, sizeof(float) * vn);
	}
	ck->nvecs = vn * (size_t)nvec;
	memcpy(ck->theta, theta, sizeof(float) * n);
	ck->n = n;
	ck->p = *p;
	free(vecs);
	return 0;
}

/* rule-state.gem, holding θ and its state, is the checkpoint; params.gem, written after it, is
 * θ for every other reader. A crash between the two leaves rule-state.gem newer than
 * params.gem, and a resume takes θ from it. */
int run_ckpt_write(const struct run *r, const struct run_ckpt *ck, char *err)
{
	int rc;
	if (!ck->head)
		return gem_errf(err, GEM_EUSAGE, "checkpoint: no snapshot taken");
	if ((rc = state_write(r, RUN_RULE_STATE, RUN_RULE_STATE_PREV, ck->head, ck->theta, ck->n,
			      STATE_RULE_BLOB, ck->vecs, ck->nvecs, err)) < 0)
		return rc;
	return run_params_save(r, ck->theta, ck->n, &ck->p, err);
}

void run_ckpt_free(struct run_ckpt *ck)
{
	json_decref(ck->head);
	free(ck->vecs);
	free(ck->theta);
	memset(ck, 0, sizeof *ck);
}

/* Decode the state's vectors (named in the header's "vecs", n floats each) into rule. */
static int rule_state_restore(const struct msg *m, struct rule *rule, size_t n, const char *path,
			      char *err)
{
	json_t *vecs = json_object_get(m->header, "vecs");
	size_t nvec = json_array_size(vecs);
	const struct msg_blob *blob = msg_find(m, STATE_RULE_BLOB);
	struct rule_vec *rv = NULL;
	struct blob_codec c;
	float *all = NULL;
	int rc;

	if (!blob || (nvec && blob->meta.count != nvec * n))
		return gem_errf(err, GEM_EFAIL, "%s: the rule's state does not fit the model", path);
	all = malloc(sizeof *all * (nvec ? nvec * n : 1));
	rv = calloc(nvec ? nvec : 1, sizeof *rv);
	if (!all || !rv) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto out;
	}
	blob_codec_init(&c);
	rc = blob_decode(&c, blob->data, &blob->meta, all, blob->meta.count, err);
	blob_codec_free(&c);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < nvec; i++) {
		snprintf(rv[i].name, sizeof rv[i].name, "%s", json_string_value(json_array_get(vecs, i)));
		rv[i].data = all + i * n;
		rv[i].n = n;
	}
	if ((rc = rule_state_load(rule, json_object_get(m->header, "rule"), rv, (int)nvec, err)) < 0)
		gem_errprefix(err, "%s: ", path);
out:
	free(all);
	free(rv);
	return rc;
}

int run_ckpt_load(const struct run *r, const struct layout *l, struct rule **rule,
		  struct run_progress *p, json_t **workers, char *err)
{
	struct msg_buf b = {0};
	struct msg m;
	size_t n = l->total;
	float *theta = malloc(sizeof(float) * n);
	int rc, got = 0;

	*rule = NULL;
	*workers = NULL;
	if (!theta)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	/* θ is settled (a newer state file's, when a crash fell between the two) before the rule
	 * is created holding it */
	if ((rc = run_params_load(r, NULL, theta, n, p, err)) == 0)
		rc = got = state_find(r, RUN_RULE_STATE, RUN_RULE_STATE_PREV, STATE_RULE_BLOB, theta, n,
				      p, &b, &m, err);
	if (rc >= 0)
		rc = rule_create(&r->spec.rule, l, theta, rule, err);
	free(theta);
	if (rc == 0 && got > 0) {
		if ((rc = rule_state_restore(&m, *rule, n, RUN_RULE_STATE, err)) == 0) {
			*workers = json_incref(json_object_get(m.header, "workers"));
			rc = 1;
		} else {
			rule_destroy(*rule);
			*rule = NULL;
		}
	}
	if (got > 0)
		msg_free(&m);
	msg_buf_free(&b);
	return rc;
}

int run_server_url_write(const struct run *r, const char *url, char *err)
{
	char path[PATH_MAX + 16], line[512];
	int n = snprintf(line, sizeof line, "%s\n", url);
	run_file(r, RUN_SERVER_URL, path, sizeof path);
	if (n < 0 || (size_t)n >= sizeof line)
		return gem_errf(err, GEM_EUSAGE, "URL too long");
	return fs_write_atomic(path, line, (size_t)n, err);
}

void run_server_url_remove(const struct run *r)
{
	char path[PATH_MAX + 16];
	run_file(r, RUN_SERVER_URL, path, sizeof path);
	unlink(path);
}

int run_server_url_read(const char *dir, char *url, size_t cap, char *err)
{
	char path[PATH_MAX + 16];
	char line[1024];
	FILE *f;
	size_t len;

	dir_file(dir, RUN_SERVER_URL, path, sizeof path);
	if (!(f = fopen(path, "r")))
		return gem_errf(err, GEM_EUSAGE, "%s: %s", path, strerror(errno));
	if (!fgets(line, sizeof line, f))
		line[0] = 0;
	fclose(f);
	len = strcspn(line, "\r\n");
	line[len] = 0;
	if (!len)
		return gem_errf(err, GEM_EUSAGE, "%s: empty", path);
	if (len >= cap)
		return gem_errf(err, GEM_EUSAGE, "%s: URL too long", path);
	memcpy(url, line, len + 1);
	return 0;
}

/* ---- sliced runs ---- */

int run_set_slice(struct run *r, int i, int k, size_t n, char *err)
{
	char name[64], path[PATH_MAX + 16];
	struct run_progress p;
	struct stat st;
	float *theta;
	int rc;

	run_slice_dir(r->dir, i, k, name, sizeof name);
	if (dir_file(r->dir, name, r->fdir, sizeof r->fdir) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", r->dir);
	if (mkdir(r->fdir, 0777) < 0 && errno != EEXIST)
		return gem_errf(err, GEM_EFAIL, "%s: %s", r->fdir, strerror(errno));
	r->slice = slice_of(n, i, k);
	run_file(r, RUN_PARAMS, path, sizeof path);
	if (stat(path, &st) == 0)
		return 0;
	/* the slice's first session: its slice of the run's θ */
	if (!(theta = malloc(sizeof *theta * n)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	dir_file(r->dir, RUN_PARAMS, path, sizeof path);
	if ((rc = run_params_load(r, path, theta, n, &p, err)) == 0)
		rc = run_params_save(r, theta + r->slice.off, r->slice.len, &p, err);
	free(theta);
	return rc;
}

int run_slice_dir_parse(const char *name, int *i, int *k)
{
	char tail;
	int n = sscanf(name, RUN_SLICE_DIR "%c", i, k, &tail);
	if (n < 2)
		n = sscanf(name, RUN_SLICE_DIR_OLD "%c", i, k, &tail);
	return n == 2 && *i >= 0 && *k >= 1 && *k <= SLICE_MAX && *i < *k ? 0 : -1;
}

void run_slice_dir(const char *dir, int i, int k, char *name, size_t size)
{
	char old[64], path[PATH_MAX + 80];
	struct stat st;
	snprintf(name, size, RUN_SLICE_DIR, i, k);
	if (dir_file(dir, name, path, sizeof path) == 0 && stat(path, &st) == 0)
		return;
	snprintf(old, sizeof old, RUN_SLICE_DIR_OLD, i, k);
	if (dir_file(dir, old, path, sizeof path) == 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(name, size, "%s", old);
}

int run_peek(const char *dir, struct run_peek *p, char *err)
{
	char path[PATH_MAX + 16];
	const char *base = strrchr(dir, '/');
	struct stat st;
	json_error_t je;
	memset(p, 0, sizeof *p);
	if (dir_file(dir, RUN_JSON, path, sizeof path) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	base = base ? base + 1 : dir;
	if (!(stat(path, &st) == 0 && S_ISREG(st.st_mode)) &&
	    run_slice_dir_parse(base, &p->slice_i, &p->slice_k) == 0 &&
	    snprintf(path, sizeof path, "%.*s%s", (int)(base - dir), dir, RUN_JSON) >= (int)sizeof path)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	if (!(p->json = json_load_file(path, 0, &je)))
		return gem_errf(err, GEM_EUSAGE, "%s: %s", path, je.text);
	p->rule = run_spec_rule_name(p->json);
	p->model = run_spec_model(p->json);
	return 0;
}

void run_peek_free(struct run_peek *p)
{
	json_decref(p->json);
	memset(p, 0, sizeof *p);
}

int run_slices(const char *dir, char *err)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	int k = 0, i, kk;
	if (!d)
		return gem_errf(err, GEM_EUSAGE, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		if (run_slice_dir_parse(e->d_name, &i, &kk) < 0 || i != 0)
			continue;
		if (k && kk != k) {
			closedir(d);
			return gem_errf(err, GEM_EUSAGE, "%s: slices of %d and of %d servers", dir, k, kk);
		}
		k = kk;
	}
	closedir(d);
	return k;
}

int run_params_load_merged(const struct run *r, float *theta, size_t n, struct run_progress *p,
			   char *err)
{
	char name[64], sub[PATH_MAX + 16], path[PATH_MAX + 80];
	int k = run_slices(r->dir, err), rc;
	if (k <= 0)
		return k < 0 ? k : run_params_load(r, NULL, theta, n, p, err);
	for (int i = 0; i < k; i++) {
		struct slice s = slice_of(n, i, k);
		struct run_progress q;
		run_slice_dir(r->dir, i, k, name, sizeof name);
		dir_file(r->dir, name, sub, sizeof sub);
		dir_file(sub, RUN_PARAMS, path, sizeof path);
		if ((rc = run_params_load(r, path, theta + s.off, s.len, &q, err)) < 0)
			return rc;
		run_progress_merge(p, &q, i == 0);
	}
	return 0;
}

void run_progress_merge(struct run_progress *m, const struct run_progress *q, int first)
{
	if (first || q->version < m->version)
		m->version = q->version;
	if (first || q->samples < m->samples)
		m->samples = q->samples;
	if (first || q->elapsed > m->elapsed)
		m->elapsed = q->elapsed;
}

int run_server_urls_read(const char *dir, char *urls, size_t cap, char *err)
{
	char name[64], sub[PATH_MAX + 16];
	size_t used = 0;
	int k = run_slices(dir, err), rc;
	if (k <= 0)
		return k < 0 ? k : run_server_url_read(dir, urls, cap, err);
	for (int i = 0; i < k; i++) {
		run_slice_dir(dir, i, k, name, sizeof name);
		dir_file(dir, name, sub, sizeof sub);
		if (used + 2 >= cap)
			return gem_errf(err, GEM_EUSAGE, "%s: URLs too long", dir);
		if (i)
			urls[used++] = ',';
		if ((rc = run_server_url_read(sub, urls + used, cap - used, err)) < 0)
			return rc;
		used += strlen(urls + used);
	}
	return 0;
}
