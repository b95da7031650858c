/* eval_follow: gem-eval --follow (report/eval.h): a run watched while it trains, θ handed on at
 * each new version, from its server (long polls of its health), from the slices of a sliced
 * run, or from the checkpoints of a local training, until the run ends. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "report/eval_impl.h"
#include "run/slice.h"
#include "run/srvset.h"
#include "wire/proto.h"

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
	const int *run_stopping; /* a slice server's: another server of the run said it was stopping */
	int no_long_poll;     /* the server answered a long poll at once */
	int have_v0;          /* RUNDIR/params.gem could be read when the follow began: */
	uint64_t v0;          /* its version then */
};

/* A RUNDIR's follower notes the version of its checkpoint, to tell a run trained while it was
 * not looking. */
static void follower_rundir_start(struct follower *w)
{
	struct run_progress p;
	if (w->f->rundir && run_params_progress(w->f->rundir, &p, NULL) == 0) {
		w->have_v0 = 1;
		w->v0 = p.version;
	}
}

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
	rc = eval_remote_health(&w->r, pace, &h, w->away_why);
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
			if ((rc = eval_remote_decode(&w->r, w->f->theta, w->f->n, &p, err)) < 0)
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
	/* gem-serve removes server.url when it exits, not when it is killed: gone after it named
	 * a server, the run has stopped, even if it stopped before its first answer (a short
	 * run); never named, the run has stopped if it moved meanwhile (a shorter one) */
	if (run_server_url_read(w->f->rundir, url, sizeof url, NULL) < 0) {
		struct run_progress p;
		if (w->r.http)
			return 1;
		return w->have_v0 && !eval_run_active(w->f->rundir) &&
		       run_params_progress(w->f->rundir, &p, NULL) == 0 && p.version != w->v0;
	}
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

/* ---- following a sliced run ---- */

/* The servers' followers report to this: each server's last progress (its slice of θ is in
 * place), and whether one moved since the caller last looked. */
struct slice_news {
	struct run_progress p[SLICE_MAX];
	int have[SLICE_MAX];
	int changed;
};

struct slice_ctx {
	struct slice_news *news;
	int i;
};

static int slice_got(void *ctx, const struct run_progress *p, char *err)
{
	struct slice_ctx *c = ctx;
	(void)err;
	c->news->p[c->i] = *p;
	c->news->have[c->i] = 1;
	c->news->changed = 1;
	return 0;
}

/* When a slice moved and every one of the k has been seen: f->fn with their merged progress,
 * if the slowest slice's version moved since *last (*have_last: fn was called before). */
static int slices_report(const struct eval_follow *f, struct slice_news *news, int k,
			 int *have_last, uint64_t *last, char *err)
{
	struct run_progress m;
	int all = 1;
	if (!news->changed)
		return 0;
	for (int i = 0; i < k; i++) {
		all &= news->have[i];
		run_progress_merge(&m, &news->p[i], i == 0);
	}
	news->changed = 0;
	if (all && (!*have_last || m.version != *last)) {
		*have_last = 1;
		*last = m.version;
		return f->fn(f->ctx, &m, err);
	}
	return 0;
}

/* Follow the K slice servers of a sliced run (gem-serve --slice I/K), each into its slice of θ:
 * with urls, server I at urls[I]; else each as a run of its own in RUNDIR/slice-I-of-K/. f->fn
 * gets the whole θ once every slice has been seen, and again whenever the slowest slice's
 * version moves, with the merged progress (run_progress_merge). Ends when every slice has
 * ended, with the final checkpoints of a RUNDIR. */
static int follow_slices(const struct eval_follow *f, struct srvset *set, int urls, char *err)
{
	int k = set->n;
	struct slices {
		struct follower w[SLICE_MAX];
		struct eval_follow fk[SLICE_MAX];
		struct slice_ctx cx[SLICE_MAX];
		char dirs[SLICE_MAX][PATH_MAX];
		struct slice_news news;
		int done[SLICE_MAX];
		int stopping; /* a slice said the run was stopping */
	} *sh = calloc(1, sizeof *sh);
	struct follower *w;
	struct eval_follow *fk;
	struct slice_ctx *cx;
	struct slice_news *newsp;
	char (*dirs)[PATH_MAX], name[64];
	int *done, ndone = 0, have_last = 0, rc = 0;
	uint64_t last = 0;

	if (!sh)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	w = sh->w, fk = sh->fk, cx = sh->cx, dirs = sh->dirs, done = sh->done, newsp = &sh->news;
	srvset_layout(set, f->n);
	for (int i = 0; i < k; i++) {
		struct slice s = set->slice[i];
		if (!urls)
			run_slice_dir(f->rundir, i, k, name, sizeof name);
		if (!urls && run_dir_file(f->rundir, name, dirs[i], sizeof dirs[i]) < 0) {
			free(sh);
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", f->rundir);
		}
		fk[i] = *f;
		fk[i].url = urls ? set->url[i] : NULL;
		fk[i].rundir = urls ? NULL : dirs[i];
		fk[i].theta = f->theta + s.off;
		fk[i].n = s.len;
		fk[i].fn = slice_got;
		cx[i] = (struct slice_ctx){newsp, i};
		fk[i].ctx = &cx[i];
		w[i].f = &fk[i];
		w[i].away_since = -1;
		w[i].set = set;
		w[i].k = i;
		w[i].run_stopping = &sh->stopping;
		blob_codec_init(&w[i].r.codec);
		follower_rundir_start(&w[i]);
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
				gem_errprefix(err, "slice %d/%d: ", i, k);
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
		if ((rc = slices_report(f, newsp, k, &have_last, &last, err)) < 0)
			goto out;
		/* the first slice still followed waits on its server, the others poll at once */
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
	/* the servers: a RUNDIR's K slices, a list of K URLs, or one server */
	if (f->rundir && !f->url && (rc = run_slices(f->rundir, err)) != 0) {
		set->n = rc;
		rc = rc < 0 ? rc : follow_slices(f, set, 0, err);
		free(set);
		return rc;
	}
	if (f->url && strchr(f->url, ',')) {
		if ((rc = srvset_parse(set, f->url, err)) == 0)
			rc = follow_slices(f, set, 1, err);
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
	follower_rundir_start(&w);
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
