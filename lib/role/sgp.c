/* sgp: an SGP node's life (sgp.h): open (θ₀, the data, listen), run (the peer list, the hello
 * barrier, the training loop over trainer_step, the end of the run, node-I.gem and
 * node-I.jsonl), close. The endpoints are in sgp_http.c, the talk to peers in sgp_gossip.c. */
#include "role/sgp_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "nn/optim.h"
#include "role/work.h"
#include "run/runlog.h"

/* One run of the node: the trainer's data and optimiser, (x, w), the log, the sender. */
struct loop {
	struct feed feed;
	struct optim opt;
	FILE *log;
	struct blob_codec codec;
	struct msg_buf buf;
	struct httpc_resp resp;
	pthread_t sender;
	int sender_started;
	float *x, *scratch, loss;
	double w;
	uint64_t iter, quiet;
	uint64_t logged_in, logged_out; /* the node's bytes on the wire its log has counted */
};

/* Read the peer list: given, or from the file once it appears (written whole by a rename). */
static int get_peers(struct sgp_node *s, char ***peers, int *nn, char *err)
{
	double t0 = clock_mono();
	void *text = NULL;
	size_t len;
	int rc;
	if (s->o.peers)
		return pushsum_peers_parse(s->o.peers, peers, nn, err);
	while (access(s->o.peers_file, F_OK) < 0) {
		struct timespec ts = {0, SGP_POLL_MS * 1000000L};
		if (sgp_stopping(s))
			return gem_errf(err, GEM_EFAIL, "interrupted while waiting for %s",
					s->o.peers_file);
		if (errno != ENOENT || clock_mono() - t0 > s->o.t.retry_for)
			return gem_errf(err, GEM_EUSAGE, "%s: %s", s->o.peers_file,
					errno == ENOENT ? "no peer list after --retry-for seconds"
							: strerror(errno));
		nanosleep(&ts, NULL);
	}
	if (fs_read_all(s->o.peers_file, &text, &len, 1 << 24, err) < 0)
		return GEM_EUSAGE;
	if ((rc = pushsum_peers_parse(text, peers, nn, err)) < 0)
		gem_errprefix(err, "%s: ", s->o.peers_file);
	free(text);
	return rc;
}

/* The port of an http://HOST:PORT URL, or -1. */
static int url_port(const char *url)
{
	const char *h = strstr(url, "://"), *end, *colon;
	long p;
	char *e;
	if (!h)
		return -1;
	h += 3;
	end = h + strcspn(h, "/");
	colon = end;
	while (colon > h && colon[-1] != ':' && colon[-1] != ']')
		colon--;
	if (colon == h || colon[-1] != ':')
		return strncmp(url, "https", 5) ? 80 : 443;
	p = strtol(colon, &e, 10);
	return e == end && p > 0 && p < 65536 ? (int)p : -1;
}

/* Which entry of the list is this node (*id), and is it where this node listens? */
static int find_self(const struct sgp_node *s, char **peers, int nn, int *id, char *err)
{
	int port = httpd_port(s->httpd);
	if (s->o.node >= nn)
		return gem_errf(err, GEM_EUSAGE, "--node %d: the peer list has %d nodes (0 to %d)",
				s->o.node, nn, nn - 1);
	*id = s->o.node;
	for (int i = 0; *id < 0 && i < nn; i++)
		if (!strcmp(peers[i], s->url))
			*id = i;
	if (*id < 0)
		return gem_errf(err, GEM_EUSAGE,
				"this node (%s) is not in the peer list: give --node I", s->url);
	if (url_port(peers[*id]) != port)
		return gem_errf(err, GEM_EUSAGE, "peer %d is %s, but this node listens on port %d",
				*id, peers[*id], port);
	return 0;
}

/* Exactly the iterations every node runs: its --steps, the run's budget of steps, or the epochs
 * of the largest part, so that nodes whose part is one sample smaller run as many (their last
 * batch starts their next epoch). */
static uint64_t count_iters(const struct sgp_node *s, int part_n)
{
	uint64_t part = ((uint64_t)s->ds.n + (uint64_t)part_n - 1) / (uint64_t)part_n;
	uint64_t batch = (uint64_t)s->run.spec.train.batch, per_epoch = (part + batch - 1) / batch;
	if (s->o.t.steps)
		return s->o.t.steps;
	if (s->run.spec.train.steps && !s->o.t.epochs)
		return s->run.spec.train.steps;
	return per_epoch * (uint64_t)(s->o.t.epochs ? s->o.t.epochs : s->run.spec.train.epochs);
}

/* httpc's abort hook: a node that is stopping gives up its requests at once, even to a peer
 * that holds them (SIGSTOPped), rather than after the long timeout of a push. */
static int stopping(void *s)
{
	return sgp_stopping(s);
}

/* 1 if url is https://. */
static int is_https(const char *url)
{
	return !strncmp(url, "https://", 8);
}

/* A client for every other peer, each verified with o.t.cacert when the node speaks HTTPS; a list
 * that mixes the schemes is refused (a node would send its token in clear to some peers). */
static int connect_peers(struct sgp_node *s, char *err)
{
	if (!(s->http = calloc((size_t)s->nn, sizeof *s->http)) ||
	    !(s->gone = calloc((size_t)s->nn, sizeof(int))) ||
	    !(s->bye = calloc((size_t)s->nn, sizeof(int))) ||
	    !(s->hello = calloc((size_t)s->nn, sizeof(int))) ||
	    !(s->pushed = calloc((size_t)s->nn, sizeof *s->pushed)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	for (int p = 0; p < s->nn; p++) {
		if (p == s->id)
			continue;
		if (is_https(s->peers[p]) != is_https(s->url))
			return gem_errf(err, GEM_EUSAGE,
					"peer %d is %s but this node is %s: every node of a run speaks "
					"HTTPS (--tls-cert), or none does", p, s->peers[p], s->url);
		if (httpc_new(s->peers[p], s->token, 600L * 1000, &s->http[p], err) < 0 ||
		    httpc_set_cacert(s->http[p], s->o.t.cacert, err) < 0) {
			gem_errprefix(err, "peer %d: ", p);
			return GEM_EUSAGE;
		}
		httpc_set_abort(s->http[p], stopping, s);
	}
	return 0;
}

/* The peer list in, this node's place in it, the topology's numbers, the feed and optimiser;
 * then ready (the handlers take hellos and pushes). */
static int prepare(struct sgp_node *s, struct loop *l, struct sgp_status *st, char *err)
{
	struct optim_config oc;
	char **peers = NULL;
	int nn = 0, id = -1, rc, exp_k;
	if ((rc = get_peers(s, &peers, &nn, err)) < 0 || (rc = find_self(s, peers, nn, &id, err)) < 0 ||
	    (s->o.node < 0 && (rc = run_lock_node(&s->run, id, err)) < 0)) {
		pushsum_peers_free(peers, nn);
		return rc;
	}
	pthread_mutex_lock(&s->mu);
	s->peers = peers, s->nn = nn, s->id = id;
	pthread_mutex_unlock(&s->mu);
	exp_k = pushsum_exp_cycle(nn);
	s->mper = pushsum_peers_per_iter(s->o.topology, nn, s->o.peers_per_iter);
	s->tau = s->o.tau > 0 ? s->o.tau : 2 * (exp_k > 0 ? exp_k : 1);
	s->hash = pushsum_topology_hash(s->o.topology, s->o.peers_per_iter, (const char *const *)peers, nn);
	st->node = id, st->nodes = nn, st->peers_per_iter = s->mper, st->tau = s->tau;
	st->part_i = s->o.t.part_set ? s->o.t.part_i : id;
	st->part_n = s->o.t.part_set ? s->o.t.part_n : nn;
	st->iters = s->iters = count_iters(s, st->part_n);
	if ((rc = connect_peers(s, err)) < 0 ||
	    (rc = feed_open(&l->feed, &s->run, &s->ds, id, st->part_i, st->part_n, err)) < 0 ||
	    (rc = batcher_keep_part(&l->feed.b, &s->ds, err)) < 0)  /* a node reads its part alone */
		return rc;
	/* the local optimiser: the run's (momentum SGD with Nesterov, as SGP's paper, or AdamW),
	 * its cosine ending at the run's budget of the node's part */
	run_optim_config(&s->run, feed_steps(&l->feed, run_budget(&s->run, feed_epoch(&l->feed))), &oc);
	oc.nesterov = oc.momentum > 0;
	if ((rc = optim_init(&l->opt, &oc, model_layout(s->tr.m), err)) < 0)
		return rc;
	st->part_samples = (size_t)feed_epoch(&l->feed);
	pthread_mutex_lock(&s->mu);
	s->ready = 1;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* node-I.jsonl: the run's start line, then the node's topology and peers. */
static int log_open(struct sgp_node *s, struct loop *l, const struct sgp_status *st, char *err)
{
	char name[64], path[PATH_MAX + 80];
	json_t *ev, *pl;
	snprintf(name, sizeof name, RUN_NODE_LOG, s->id);
	run_file(&s->run, name, path, sizeof path);
	if (!(l->log = fopen(path, "w")))
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	run_log_start(l->log, &s->run, sgp_rule_name(s), s->url, 0, model_layout(s->tr.m));
	ev = json_pack("{s:s, s:i, s:i, s:s, s:i, s:I, s:b, s:i, s:[i,i]}", "event", "sgp", "node",
		       s->id, "nodes", s->nn, "topology", pushsum_topology_name(s->o.topology),
		       "peers_per_iter", s->mper, "iters", (json_int_t)s->iters, "overlap",
		       s->o.overlap, "tau", s->tau, "part", st->part_i, st->part_n);
	pl = json_array();
	if (!ev || !pl) {
		json_decref(ev);
		json_decref(pl);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	for (int p = 0; p < s->nn; p++)
		json_array_append_new(pl, json_string(s->peers[p]));
	json_object_set_new(ev, "peers", pl);
	run_log_json(l->log, ev);
	json_decref(ev);
	return 0;
}

/* The bytes of the pushes taken and delivered since the log last counted them (counted now). */
static void bytes_since(struct sgp_node *s, struct loop *l, uint64_t *in, uint64_t *out)
{
	pthread_mutex_lock(&s->mu);
	*in = s->bytes_in - l->logged_in;
	*out = s->bytes_out - l->logged_out;
	l->logged_in = s->bytes_in;
	l->logged_out = s->bytes_out;
	pthread_mutex_unlock(&s->mu);
}

/* One line of node-I.jsonl: iteration iter done (the fields of a gem-serve log's update, its
 * bytes those of the pushes this node took and delivered since the line before). */
static void log_iter(FILE *f, struct sgp_node *s, struct loop *l, const struct mixed *mx)
{
	struct run_log_gossip g = {.w = l->w, .msgs = mx->got, .wait = mx->waited,
				   .peer = mx->last_from, .dist = mx->dist};
	struct run_log_update u = {.time = clock_wall(), .elapsed = clock_mono() - s->t0,
				   .vtime = -1, .version = l->iter + 1, .worker = s->id,
				   .tau = mx->age_max, .loss = l->loss, .samples = l->feed.samples,
				   .gossip = &g};
	bytes_since(s, l, &u.bytes_in, &u.bytes_out);
	run_log_update(f, &u);
}

/* node-I.jsonl's last line: the node stopped (reason), with the bytes of the pushes taken and
 * delivered after its last iteration's line (Overlap-SGP's sender finishing, late arrivals). */
static void log_stop(FILE *f, struct sgp_node *s, struct loop *l, const char *reason)
{
	char extra[128];
	uint64_t in, out;
	bytes_since(s, l, &in, &out);
	snprintf(extra, sizeof extra, "\"reason\":\"%s\",\"bytes_in\":%llu,\"bytes_out\":%llu", reason,
		 (unsigned long long)in, (unsigned long long)out);
	run_log_event(f, "stop", -1, -1, l->iter, extra);
}

/* node-I.jsonl: the requests refused since the last call, one "refused" event per reason with
 * their count (a flood of refusals writes a line per reason and iteration, not per request). */
static void log_refusals(struct sgp_node *s, FILE *f, uint64_t version)
{
	unsigned n[SGP_REFUSE_N];
	char extra[96];
	pthread_mutex_lock(&s->mu);
	memcpy(n, s->refused, sizeof n);
	memset(s->refused, 0, sizeof s->refused);
	pthread_mutex_unlock(&s->mu);
	for (int r = 0; r < SGP_REFUSE_N; r++) {
		if (!n[r])
			continue;
		snprintf(extra, sizeof extra, "\"reason\":\"%s\",\"count\":%u",
			 sgp_refusal_name((enum sgp_refusal)r), n[r]);
		run_log_event(f, "refused", -1, -1, version, extra);
	}
}

/* z and the node's progress for GET /v1/params and /v1/health. */
static void publish(struct sgp_node *s, const float *z, uint64_t iter, uint64_t samples, double w)
{
	pthread_mutex_lock(&s->mu);
	memcpy(s->zpub, z, sizeof(float) * s->n);
	s->pub_iter = iter;
	s->pub_samples = samples;
	s->pub_w = w;
	s->pub_elapsed = clock_mono() - s->t0;
	pthread_mutex_unlock(&s->mu);
}

/* One iteration: trainer_step at z = x/w, the local momentum step, split, push, mix. */
static int iterate(struct sgp_node *s, struct loop *l, char *err)
{
	float *z = model_params(s->tr.m);
	double step_start = clock_mono();
	struct mixed mx;
	int nb, rc;
	pushsum_debias(l->x, l->w, z, s->n);
	if ((rc = trainer_step(&s->tr, &l->feed, &l->loss, &nb, err)) != 0) {
		gem_errprefix(err, "iteration %llu: ", (unsigned long long)l->iter);
		return rc < 0 ? rc : GEM_EFAIL;
	}
	/* the local momentum step on z, then back to the numerator x = w·z (as the authors' code
	 * does): a step on x itself would move z by lr/w, up to ten times the run's lr when
	 * Overlap-SGP's weights drift (a straggler), and diverge. With w = 1 it is the same step. */
	optim_step(&l->opt, z, model_grads(s->tr.m));
	for (size_t i = 0; i < s->n; i++)
		l->x[i] = z[i] * (float)l->w;
	if (s->o.t.slowdown > 1)
		work_slowdown(clock_mono() - step_start, s->o.t.slowdown);
	/* keep 1/(m+1) of (x, w), push 1/(m+1) to each out-peer, add what comes in */
	pushsum_split(l->x, s->n, &l->w, s->mper);
	l->quiet++;
	if ((rc = sgp_push_shares(s, l->x, l->w, l->iter, &l->codec, &l->buf, &l->resp, err)) < 0 ||
	    (rc = sgp_mix_in(s, l->x, &l->w, l->iter, &l->quiet, l->scratch, &mx, err)) < 0)
		return rc;
	log_iter(l->log, s, l, &mx);
	log_refusals(s, l->log, l->iter + 1);
	pushsum_debias(l->x, l->w, z, s->n);
	publish(s, z, l->iter + 1, l->feed.samples, l->w);
	return 0;
}

/* node-I.gem: z as the "params" blob (so that gem-eval reads it as a params file of the run),
 * with the node, w and the node's progress in the header; x is w·z. */
static int save_node(struct sgp_node *s, const float *z, const struct loop *l, char *err)
{
	char name[64], path[PATH_MAX + 80];
	struct msg_buf b = {0};
	struct blob_codec c;
	json_t *h;
	int rc;
	snprintf(name, sizeof name, RUN_NODE_PARAMS, s->id);
	run_file(&s->run, name, path, sizeof path);
	h = json_pack("{s:I, s:I, s:f, s:s, s:i, s:i, s:f}", "version", (json_int_t)l->iter,
		      "samples", (json_int_t)l->feed.samples, "elapsed", clock_mono() - s->t0, "rule",
		      sgp_rule_name(s), "node", s->id, "nodes", s->nn, "w", l->w);
	if (!h)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	blob_codec_init(&c);
	rc = msg_write_params_file(path, &b, &c, h, z, s->n, NULL, -1, err);
	blob_codec_free(&c);
	msg_buf_free(&b);
	json_decref(h);
	return rc;
}

/* The end, after the last iteration or a failure rc: flush what is being sent, say bye, stop
 * receiving, add what came in, save node-I.gem. Returns rc or the first failure here. */
static int finish(struct sgp_node *s, struct loop *l, struct sgp_status *st, int rc, char *err)
{
	char e2[GEM_ERRMAX];
	float *z = model_params(s->tr.m);
	if (l->sender_started) {
		sgp_sender_stop(s, l->sender);
		l->sender_started = 0;
		sgp_bye_all(s);
	}
	pthread_mutex_lock(&s->mu);
	s->closed = 1;
	pthread_mutex_unlock(&s->mu);
	httpd_stop(s->httpd);
	s->httpd = NULL;
	if (s->o.overlap) {
		struct mixed mx;
		uint64_t q = 0;
		s->tau = 1 << 30;
		if (sgp_mix_in(s, l->x, &l->w, l->iter, &q, l->scratch, &mx, e2) < 0)
			log_warn("node %d: at the end: %s", s->id, e2);
	}
	pushsum_debias(l->x, l->w, z, s->n);
	log_refusals(s, l->log, l->iter);
	log_stop(l->log, s, l, rc == 0 ? "finished" : "failed");
	if (fflush(l->log) == EOF && rc == 0)
		rc = gem_errf(err, GEM_EFAIL, "log: %s", strerror(errno));
	if (save_node(s, z, l, rc == 0 ? err : e2) == 0)
		st->saved = 1;
	else if (rc == 0)
		rc = GEM_EFAIL;
	else /* the first failure is the one to report */
		log_warn("node %d: %s", s->id, e2);
	return rc;
}

/* The status after iteration l->iter. */
static void status_of(struct sgp_node *s, const struct loop *l, struct sgp_status *st)
{
	st->iter = l->iter;
	st->samples = l->feed.samples;
	st->loss = l->loss;
	st->w = l->w;
	st->seconds = clock_mono() - s->t0;
	pthread_mutex_lock(&s->mu);
	st->bytes_in = s->bytes_in;
	st->bytes_out = s->bytes_out;
	pthread_mutex_unlock(&s->mu);
}

/* From the hello barrier to node-I.gem. */
static int train(struct sgp_node *s, struct loop *l, sgp_progress_fn progress, void *ctx,
		 struct sgp_status *st, char *err)
{
	int rc = log_open(s, l, st, err);
	if (rc < 0)
		return rc;
	if (s->o.overlap) {
		if (pthread_create(&l->sender, NULL, sgp_sender_main, s) != 0)
			return gem_errf(err, GEM_EFAIL, "cannot start the sender thread");
		l->sender_started = 1;
	}
	s->t0 = clock_mono();
	if (progress)
		progress(st, ctx);
	for (l->iter = 0; rc == 0 && l->iter < s->iters && !sgp_stopping(s);) {
		if ((rc = iterate(s, l, err)) < 0)
			break;
		l->iter++;
		status_of(s, l, st);
		if (progress)
			progress(st, ctx);
	}
	if (rc == 0 && l->iter < s->iters)
		rc = gem_errf(err, GEM_EFAIL, "interrupted at iteration %llu",
			      (unsigned long long)l->iter);
	rc = finish(s, l, st, rc, err);
	status_of(s, l, st);
	return rc;
}

/* Release a loop's resources (the sender thread is stopped first). */
static void loop_free(struct sgp_node *s, struct loop *l)
{
	if (l->sender_started)
		sgp_sender_stop(s, l->sender);
	if (l->log)
		fclose(l->log);
	feed_close(&l->feed);
	optim_free(&l->opt);
	blob_codec_free(&l->codec);
	msg_buf_free(&l->buf);
	httpc_resp_free(&l->resp);
}

int sgp_node_run(struct sgp_node *s, prog_stop_flag *stop, sgp_progress_fn progress,
		 void *ctx, struct sgp_status *st, char *err)
{
	struct sgp_status dummy;
	struct loop l = {.x = s->x, .scratch = s->scratch, .loss = NAN, .w = 1};
	int rc;
	if (!st)
		st = &dummy;
	*st = (struct sgp_status){.node = -1, .rule = sgp_rule_name(s), .loss = NAN, .w = 1};
	if (s->ran)
		return gem_errf(err, GEM_EUSAGE, "sgp_node_run: this node has run");
	s->ran = 1;
	s->stop = stop;
	blob_codec_init(&l.codec);
	if ((rc = prepare(s, &l, st, err)) == 0 && (rc = sgp_hello_all(s, err)) == 0)
		rc = train(s, &l, progress, ctx, st, err);
	if (rc < 0 && s->id >= 0)
		gem_errprefix(err, "node %d: ", s->id);
	loop_free(s, &l);
	return rc;
}

/* Load everything a node needs before it listens: the run, its model, θ₀ and the data. */
static int load(struct sgp_node *s, char *err)
{
	struct run_progress p0;
	int rc;
	if (s->o.t.token_file && fs_read_token(s->o.t.token_file, &s->token, err) < 0)
		return GEM_EUSAGE;
	if (run_open(s->o.rundir, &s->run, err) < 0)
		return GEM_EUSAGE;
	/* node I alone writes node-I's files: a second node I is refused (found in the peer list
	 * when not given, and locked then) */
	if (s->o.node >= 0 && (rc = run_lock_node(&s->run, s->o.node, err)) < 0)
		return rc;
	if ((rc = trainer_open(&s->tr, &s->run, err)) < 0)
		return rc;
	s->n = model_nparams(s->tr.m);
	s->x = malloc(sizeof(float) * s->n);
	s->scratch = malloc(sizeof(float) * s->n);
	s->zpub = malloc(sizeof(float) * s->n);
	if (blob_codec_lossy(s->codec_name))
		s->resid = calloc(s->n, sizeof(float));
	if (!s->x || !s->scratch || !s->zpub || (blob_codec_lossy(s->codec_name) && !s->resid))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	/* every node starts from the run's θ₀ */
	if ((rc = run_params_load(&s->run, NULL, s->x, s->n, &p0, err)) < 0 ||
	    (rc = run_data_load(&s->run, NULL, "train", &s->ds, err)) < 0)
		return rc;
	memcpy(s->zpub, s->x, sizeof(float) * s->n);
	s->pub_w = 1;
	return 0;
}

int sgp_node_open(const struct sgp_opts *o, struct sgp_node **out, char *err)
{
	struct sgp_node *s = calloc(1, sizeof *s);
	int rc;
	*out = NULL;
	if (!s)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	s->o = *o;
	s->id = -1;
	s->codec_name = o->t.codec ? o->t.codec : BLOB_RAW;
	if (blob_codec_check(s->codec_name, err) < 0) {
		free(s);
		return GEM_EUSAGE;
	}
	log_debug("pushes in codec %s", s->codec_name);
	pthread_mutex_init(&s->mu, NULL);
	clock_cond_init(&s->cv);
	blob_codec_init(&s->send_codec);
	if ((rc = load(s, err)) == 0 && sgp_http_start(s, err) < 0)
		rc = GEM_EUSAGE; /* the address */
	if (rc < 0) {
		sgp_node_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

const char *sgp_node_url(const struct sgp_node *s)
{
	return s->url;
}

/* Free a list of messages. */
static void msgs_free(struct inmsg *m)
{
	while (m) {
		struct inmsg *next = m->next;
		free(m->x);
		free(m);
		m = next;
	}
}

void sgp_node_close(struct sgp_node *s)
{
	if (!s)
		return;
	/* a long poll of GET /v1/health ends when it sees the node stopping */
	pthread_mutex_lock(&s->mu);
	s->closed = 1;
	pthread_mutex_unlock(&s->mu);
	httpd_stop(s->httpd);
	reply_get_close(&s->get);
	for (int p = 0; s->http && p < s->nn; p++)
		httpc_free(s->http[p]);
	free(s->http);
	free(s->gone);
	free(s->bye);
	free(s->hello);
	free(s->pushed);
	msgs_free(s->inbox);
	msgs_free(s->free_msgs);
	while (s->jobs) {
		struct job *j = s->jobs;
		s->jobs = j->next;
		free(j->x);
		free(j);
	}
	pushsum_peers_free(s->peers, s->nn);
	dataset_free(&s->ds);
	trainer_close(&s->tr);
	if (s->run.json)
		run_close(&s->run);
	blob_codec_free(&s->send_codec);
	msg_buf_free(&s->send_buf);
	httpc_resp_free(&s->send_resp);
	free(s->x);
	free(s->scratch);
	free(s->zpub);
	free(s->resid);
	fs_free_secret(s->token);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
