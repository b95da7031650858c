#include "wire/proto.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/jget.h"
#include "base/num.h"
#include "wire/blob.h"

/* ---- pieces of several messages ---- */

/* Set key to v (a new reference, consumed) in o: 0, or -1 (v NULL: out of memory). */
static int put(json_t *o, const char *key, json_t *v)
{
	return v ? json_object_set_new(o, key, v) : -1;
}

/* o, or NULL (o released) when rc says a member could not be added. */
static json_t *done(json_t *o, int rc)
{
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int proto_slice_add(json_t *head, const struct proto_slice *s)
{
	if (!head)
		return -1;
	if (s->k <= 0)
		return 0;
	return put(head, "theta_slice", json_pack("[i,i,I,I]", s->i, s->k, (json_int_t)s->off,
						  (json_int_t)s->len));
}

int proto_slice_from_json(const json_t *head, int max_k, struct proto_slice *s, char *err)
{
	json_t *t = json_object_get(head, "theta_slice");
	long long v[4];
	memset(s, 0, sizeof *s);
	if (!t) /* a server of 0.1.0 names it so */
		t = json_object_get(head, "theta_shard"); /* older spelling */
	if (!t)
		return 0;
	for (size_t i = 0; i < 4; i++) {
		json_t *e = json_array_get(t, i);
		if (json_array_size(t) != 4 || !json_is_integer(e) || json_integer_value(e) < 0)
			return gem_errf(err, GEM_EFAIL, "theta_slice: not [I, K, OFFSET, LENGTH]");
		v[i] = json_integer_value(e);
	}
	if (v[1] < 1 || v[1] > max_k || v[0] >= v[1])
		return gem_errf(err, GEM_EFAIL, "theta_slice: slice %lld of %lld is none of %d at most",
				v[0], v[1], max_k);
	*s = (struct proto_slice){.i = (int)v[0], .k = (int)v[1], .off = (uint64_t)v[2],
				  .len = (uint64_t)v[3]};
	return 0;
}

int proto_crc_add(json_t *head, uint32_t crc)
{
	return head ? put(head, "copy_crc32", json_integer(crc)) : -1;
}

int proto_crc_from_json(const json_t *head, uint32_t *crc)
{
	json_t *v = json_object_get(head, "copy_crc32");
	if (!json_is_integer(v))
		return 0;
	*crc = (uint32_t)json_integer_value(v);
	return 1;
}

/* ---- the parameter server ---- */

json_t *proto_join_to_json(const struct proto_join *j)
{
	json_t *o = json_object();
	int rc = o ? 0 : -1;
	if (rc == 0 && j->codec)
		rc = put(o, "codec", json_string(j->codec));
	if (rc == 0 && j->worker >= 0)
		rc = put(o, "worker", json_integer(j->worker));
	/* what this session trains, for the server's progress (which takes up to 2^40 steps) */
	if (rc == 0 && j->steps)
		rc = put(o, "steps", json_integer(j->steps < PROTO_JOIN_STEPS_MAX
							  ? (json_int_t)j->steps
							  : (json_int_t)PROTO_JOIN_STEPS_MAX));
	if (rc == 0 && j->epochs)
		rc = put(o, "epochs", json_integer((json_int_t)j->epochs));
	return done(o, rc);
}

int proto_join_from_json(const json_t *o, int max_workers, int max_epochs, struct proto_join *j,
			 char *err)
{
	json_t *v;
	long long n[2] = {0, 0};
	memset(j, 0, sizeof *j);
	j->worker = -1;
	if (!o)
		return 0;
	v = json_object_get(o, "worker");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) >= max_workers))
		return gem_errf(err, GEM_EUSAGE, "worker: an integer in [0, %d)", max_workers);
	if (v)
		j->worker = (int)json_integer_value(v);
	v = json_object_get(o, "codec");
	if (v && (!json_is_string(v) || !blob_codec_known(json_string_value(v))))
		return gem_errf(err, GEM_EFAIL, "unknown codec");
	if (v)
		j->codec = json_string_value(v);
	if (jget_int(o, "steps", 1, (long long)PROTO_JOIN_STEPS_MAX, &n[0]) < 0 ||
	    jget_int(o, "epochs", 1, max_epochs, &n[1]) < 0 || (n[0] && n[1]))
		return gem_errf(err, GEM_EUSAGE, "steps: an integer in [1, 2^40], or epochs: one in "
				"[1, %d], not both", max_epochs);
	j->steps = (uint64_t)n[0];
	j->epochs = (uint64_t)n[1];
	return 0;
}

json_t *proto_join_reply_to_json(const struct proto_join_reply *r)
{
	json_t *o = json_pack("{s:i, s:I, s:I, s:I, s:I}", "worker", r->worker, "version",
			      (json_int_t)r->version, "seq", (json_int_t)r->seq, "commits",
			      (json_int_t)r->commits, "samples", (json_int_t)r->samples);
	int rc = o ? 0 : -1;
	if (rc == 0 && r->part_n > 0)
		rc = put(o, "part", json_pack("[i,i]", r->part_i, r->part_n));
	if (rc == 0 && r->window > 0)
		rc = put(o, "window", json_integer(r->window));
	return done(o, rc);
}

/* An integer member >= 0 (and <= INT64_MAX) into *out when it is there; else *out unchanged. */
static void count_of(const json_t *o, const char *key, uint64_t *out)
{
	long long v;
	if (jget_int(o, key, 0, INT64_MAX, &v) == JGET_OK)
		*out = (uint64_t)v;
}

int proto_join_reply_from_json(const json_t *head, int max_workers, struct proto_join_reply *r,
			       char *err)
{
	json_t *sh = json_object_get(head, "part");
	long long id;
	if (!sh) /* a server of 0.1.0 names it so */
		sh = json_object_get(head, "shard"); /* older spelling */
	memset(r, 0, sizeof *r);
	if (jget_int(head, "worker", 0, max_workers - 1, &id) != JGET_OK)
		return gem_errf(err, GEM_EFAIL, "the reply to the join has no worker id in [0, %d)",
				max_workers);
	r->worker = (int)id;
	count_of(head, "version", &r->version);
	count_of(head, "seq", &r->seq);
	count_of(head, "commits", &r->commits);
	count_of(head, "samples", &r->samples);
	/* a data part I of N, 0 <= I < N */
	if (json_array_size(sh) == 2 && json_is_integer(json_array_get(sh, 0)) &&
	    json_is_integer(json_array_get(sh, 1)) && json_integer_value(json_array_get(sh, 1)) > 0 &&
	    json_integer_value(json_array_get(sh, 1)) <= 1 << 20 &&
	    json_integer_value(json_array_get(sh, 0)) >= 0 &&
	    json_integer_value(json_array_get(sh, 0)) < json_integer_value(json_array_get(sh, 1))) {
		r->part_i = (int)json_integer_value(json_array_get(sh, 0));
		r->part_n = (int)json_integer_value(json_array_get(sh, 1));
	}
	r->window = (int)jget_int_or(head, "window", 1, 1 << 30, 0);
	return 0;
}

json_t *proto_commit_to_json(const struct proto_commit *c)
{
	json_t *o = json_pack("{s:i, s:I, s:I, s:I}", "worker", c->worker, "base", (json_int_t)c->base,
			      "seq", (json_int_t)c->seq, "samples", (json_int_t)c->samples);
	int rc = o ? 0 : -1;
	if (rc == 0 && isfinite(c->loss))
		rc = put(o, "loss", json_real(c->loss));
	if (rc == 0 && c->idle >= 0)
		rc = put(o, "idle", json_real(c->idle));
	if (rc == 0 && c->fragment >= 0)
		rc = put(o, "fragment", json_integer(c->fragment));
	return done(o, rc);
}

int proto_commit_from_json(const json_t *h, int max_workers, int nfrag, struct proto_commit *c,
			   char *err)
{
	long long worker, base, seq = 0, samples = 0, fragment = 0;
	double loss;
	int rc;
	memset(c, 0, sizeof *c);
	c->loss = NAN;
	c->idle = -1;
	if (jget_int(h, "worker", 0, max_workers - 1, &worker) != JGET_OK)
		return gem_errf(err, PROTO_E_WORKER, "join first (POST /v1/join)");
	c->worker = (int)worker;
	if (jget_int(h, "base", 0, INT64_MAX, &base) != JGET_OK)
		return gem_errf(err, GEM_EUSAGE, "base: missing or not an integer >= 0");
	c->base = (uint64_t)base;
	if (jget_int(h, "seq", 0, INT64_MAX, &seq) < 0)
		return gem_errf(err, GEM_EUSAGE, "seq: not an integer >= 0");
	c->seq = (uint64_t)seq;
	/* more samples than any dataset holds would wrap the counters */
	if (jget_int(h, "samples", 0, PROTO_SAMPLES_MAX, &samples) < 0)
		return gem_errf(err, GEM_EUSAGE, "samples: not an integer in [0, 2^40]");
	c->samples = (uint64_t)samples;
	if (!json_is_null(json_object_get(h, "loss"))) {
		if ((rc = jget_num(h, "loss", -3.4e38, 3.4e38, &loss)) < 0)
			return gem_errf(err, GEM_EUSAGE, "loss: not a finite number");
		if (rc == JGET_OK)
			c->loss = (float)loss;
	}
	if (jget_num(h, "idle", 0, 1e9, &c->idle) < 0 || c->idle >= 1e9)
		return gem_errf(err, GEM_EUSAGE, "idle: not a number of seconds >= 0");
	if (jget_int(h, "fragment", 0, nfrag - 1, &fragment) < 0)
		return gem_errf(err, GEM_EUSAGE, "fragment: not an integer in [0, %d)", nfrag);
	c->fragment = (int)fragment;
	return 0;
}

json_t *proto_commit_reply_to_json(const struct proto_commit_reply *r)
{
	json_t *o = json_pack("{s:I, s:I, s:b}", "version", (json_int_t)r->version, "tau",
			      (json_int_t)r->tau, "applied", r->applied);
	int rc = o ? 0 : -1;
	if (rc == 0 && r->window > 0)
		rc = put(o, "window", json_integer(r->window));
	return done(o, rc);
}

int proto_vec_from_json(const json_t *head, struct proto_vec *v, char *err)
{
	long long version;
	memset(v, 0, sizeof *v);
	if (jget_int(head, "version", 0, INT64_MAX, &version) == JGET_OK) {
		v->version = (uint64_t)version;
		v->has_version = 1;
	}
	v->window = (int)jget_int_or(head, "window", 1, 1 << 30, 0);
	v->has_crc = proto_crc_from_json(head, &v->copy_crc32);
	return proto_slice_from_json(head, 1 << 20, &v->slice, err);
}

json_t *proto_leave_to_json(const struct proto_leave *l)
{
	char buf[32];
	json_t *o = json_pack("{s:i, s:b}", "worker", l->worker, "done", l->how == PROTO_LEFT_DONE);
	int rc = o ? 0 : -1;
	if (rc == 0 && l->how == PROTO_LEFT_DIVERGED)
		rc = put(o, "diverged", json_true());
	/* JSON has no number for a loss that is not finite: "nan", "inf" or "-inf" */
	if (rc == 0 && l->how == PROTO_LEFT_DIVERGED)
		rc = put(o, "loss", isfinite(l->loss)
					    ? json_real(l->loss)
					    : json_string(num_format(buf, sizeof buf, "%g", l->loss)));
	return done(o, rc);
}

int proto_leave_from_json(const json_t *o, int max_workers, struct proto_leave *l, char *err)
{
	json_t *v = json_object_get(o, "done"), *dv = json_object_get(o, "diverged");
	json_t *lv = json_object_get(o, "loss");
	long long id;
	memset(l, 0, sizeof *l);
	l->loss = NAN;
	l->how = json_is_true(dv) ? PROTO_LEFT_DIVERGED : json_is_true(v) ? PROTO_LEFT_DONE
									   : PROTO_LEFT_PAUSED;
	if (jget_int(o, "worker", 0, max_workers - 1, &id) != JGET_OK ||
	    (v && !json_is_boolean(v)) || (dv && !json_is_boolean(dv)) ||
	    (json_is_true(v) && json_is_true(dv)) ||
	    (lv && (!json_is_true(dv) || jget_num_nonfinite(o, "loss", &l->loss) != JGET_OK)))
		return gem_errf(err, GEM_EUSAGE,
				"want {\"worker\": an integer in [0, %d), \"done\": a boolean, "
				"\"diverged\": a boolean, not both true, \"loss\" (diverged): a "
				"number, \"nan\", \"inf\" or \"-inf\"}",
				max_workers);
	l->worker = (int)id;
	return 0;
}

json_t *proto_left_to_json(int worker, uint64_t version)
{
	return json_pack("{s:i, s:I}", "worker", worker, "version", (json_int_t)version);
}

json_t *proto_checkpointed_to_json(uint64_t version)
{
	return json_pack("{s:I}", "version", (json_int_t)version);
}

json_t *proto_stopping_to_json(uint64_t version)
{
	return json_pack("{s:b, s:I}", "stopping", 1, "version", (json_int_t)version);
}

json_t *proto_health_to_json(const struct proto_health *h)
{
	json_t *o = json_pack("{s:I, s:i, s:b}", "version", (json_int_t)h->version, "workers",
			      h->workers, "stopping", h->stopping);
	/* a slice says which: a worker checks it got the servers in order */
	return done(o, proto_slice_add(o, &h->slice));
}

int proto_health_peek(const json_t *o, uint64_t *version, int *stopping)
{
	json_t *v = json_object_get(o, "version");
	*stopping = json_is_true(json_object_get(o, "stopping"));
	if (!json_is_integer(v))
		return 0;
	*version = (uint64_t)json_integer_value(v);
	return 1;
}

int proto_health_from_json(const json_t *o, int max_k, struct proto_health *h, char *err)
{
	long long v;
	memset(h, 0, sizeof *h);
	if (jget_int(o, "version", 0, INT64_MAX, &v) != JGET_OK)
		return gem_errf(err, GEM_EFAIL, "not a gem server's health (no version)");
	h->version = (uint64_t)v;
	h->workers = (int)jget_int_or(o, "workers", 0, 1 << 30, 0);
	h->stopping = json_is_true(json_object_get(o, "stopping"));
	return proto_slice_from_json(o, max_k, &h->slice, err);
}

int proto_memory_add(json_t *health, const struct proto_memory *m)
{
	return health ? put(health, "memory",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "rule",
				      (json_int_t)m->rule, "copies", (json_int_t)m->copies, "buffers",
				      (json_int_t)m->buffers, "bodies", (json_int_t)m->bodies, "total",
				      (json_int_t)m->total, "peak", (json_int_t)m->peak, "max",
				      (json_int_t)m->max))
		      : -1;
}

json_t *proto_params_to_json(const struct proto_params *p)
{
	json_t *o = json_pack("{s:I, s:I, s:f, s:s}", "version", (json_int_t)p->version, "samples",
			      (json_int_t)p->samples, "elapsed", p->elapsed, "model", p->model);
	int rc = o ? 0 : -1;
	if (rc == 0 && p->node >= 0)
		rc = json_object_update_new(o, json_pack("{s:i, s:i, s:f}", "node", p->node, "nodes",
							 p->nodes, "w", p->w));
	if (rc == 0)
		rc = proto_slice_add(o, &p->slice);
	return done(o, rc);
}

void proto_params_from_json(const json_t *head, struct proto_params *p)
{
	long long v;
	if (jget_int(head, "version", 0, INT64_MAX, &v) == JGET_OK)
		p->version = (uint64_t)v;
	if (jget_int(head, "samples", 0, INT64_MAX, &v) == JGET_OK)
		p->samples = (uint64_t)v;
	jget_num(head, "elapsed", -HUGE_VAL, HUGE_VAL, &p->elapsed);
}

static json_t *worker_stats_to_json(const struct proto_worker_stats *w)
{
	json_t *o = json_pack("{s:i, s:b, s:b, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:f, s:f}", "worker",
			      w->worker, "active", w->active, "done", w->done, "commits",
			      (json_int_t)w->commits, "samples", (json_int_t)w->samples, "refused",
			      (json_int_t)w->refused, "tau_mean", w->tau_mean, "tau_min",
			      (json_int_t)w->tau_min, "tau_max", (json_int_t)w->tau_max,
			      "samples_per_s", w->samples_per_s, "loss_mean", w->loss_mean,
			      "since_contact", w->since_contact);
	return done(o, o ? put(o, "idle", json_real(w->idle)) : -1);
}

static json_t *progress_to_json(const struct proto_progress *p)
{
	json_t *o = json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:i, s:f, s:s}", "samples",
			      (json_int_t)p->samples, "total", (json_int_t)p->total, "fraction",
			      p->fraction, "updates_per_s", p->updates_per_s, "samples_per_s",
			      p->samples_per_s, "eta", p->eta, "slowest", p->slowest,
			      "slowest_samples_per_s", p->slowest_samples_per_s, "line", p->line);
	return done(o, o ? put(o, "loss", isfinite(p->loss) ? json_real(p->loss) : json_null()) : -1);
}

json_t *proto_stats_to_json(const struct proto_stats *s)
{
	json_t *ws = json_array();
	for (int i = 0; ws && i < s->nworkers; i++)
		if (json_array_append_new(ws, worker_stats_to_json(&s->workers[i])) < 0) {
			json_decref(ws);
			ws = NULL;
		}
	return json_pack("{s:I, s:I, s:f, s:f, s:f, s:s, s:i, s:o, s:o}", "version",
			 (json_int_t)s->version, "samples", (json_int_t)s->samples, "uptime", s->uptime,
			 "elapsed", s->elapsed, "updates_per_s", s->updates_per_s, "rule", s->rule,
			 "active", s->active, "workers", ws, "progress", progress_to_json(&s->progress));
}

int proto_commit_us_add(json_t *stats, const struct proto_commit_us *t)
{
	return stats ? put(stats, "commit_us",
			   json_pack("{s:I, s:f, s:f, s:f}", "commits", (json_int_t)t->commits,
				     "decode", t->decode, "rule", t->rule, "encode", t->encode))
		     : -1;
}

/* A number member, or def. */
static double num_or(const json_t *o, const char *key, double def)
{
	double v = def;
	jget_num(o, key, -1e300, 1e300, &v);
	return v;
}

int proto_stats_from_json(const json_t *o, struct proto_stats *s, char *err)
{
	const json_t *p = json_object_get(o, "progress");
	long long v;
	memset(s, 0, sizeof *s);
	if (jget_int(o, "version", 0, INT64_MAX, &v) != JGET_OK)
		return gem_errf(err, GEM_EFAIL, "not a gem server's stats (no version)");
	s->version = (uint64_t)v;
	count_of(o, "samples", &s->samples);
	s->uptime = num_or(o, "uptime", 0);
	s->elapsed = num_or(o, "elapsed", 0);
	s->updates_per_s = num_or(o, "updates_per_s", 0);
	s->rule = jget_str_or(o, "rule", NULL);
	s->active = (int)jget_int_or(o, "active", 0, 1 << 30, 0);
	count_of(p, "samples", &s->progress.samples);
	count_of(p, "total", &s->progress.total);
	s->progress.fraction = num_or(p, "fraction", -1);
	s->progress.updates_per_s = num_or(p, "updates_per_s", 0);
	s->progress.samples_per_s = num_or(p, "samples_per_s", 0);
	s->progress.eta = num_or(p, "eta", -1);
	s->progress.slowest = (int)jget_int_or(p, "slowest", -1, 1 << 30, -1);
	s->progress.slowest_samples_per_s = num_or(p, "slowest_samples_per_s", 0);
	s->progress.line = jget_str_or(p, "line", NULL);
	s->progress.loss = num_or(p, "loss", NAN);
	return 0;
}

json_t *proto_error_to_json(const char *error, const char *detail)
{
	return json_pack("{s:s, s:s}", "error", error, "detail", detail);
}

void proto_error_from_json(const json_t *o, const char **error, const char **detail)
{
	*error = jget_str_or(o, "error", NULL);
	*detail = jget_str_or(o, "detail", NULL);
}

const char *proto_error_code(const json_t *o)
{
	return jget_str_or(o, "error", NULL);
}

/* ---- SGP ---- */

json_t *proto_hello_to_json(const struct proto_hello *h)
{
	return json_pack("{s:i, s:i, s:s, s:i, s:I, s:b, s:s}", "node", h->node, "nodes",
			 (int)h->nodes, "topology", h->topology, "peers_per_iter",
			 (int)h->peers_per_iter, "iters", (json_int_t)h->iters, "overlap", h->overlap,
			 "hash", h->hash);
}

int proto_hello_from_json(const json_t *o, int nodes_max, int self, struct proto_hello *h,
			  char *err, size_t errlen)
{
	json_t *v = json_object_get(o, "node");
	const char *hash = jget_str_or(o, "hash", "");
	memset(h, 0, sizeof *h);
	*err = 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nodes_max ||
	    json_integer_value(v) == self)
		snprintf(err, errlen, "hello: want \"node\", another node's index (of %d; this is %d)",
			 nodes_max, self);
	else if (strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16)
		snprintf(err, errlen, "hello: want \"hash\", 16 hexadecimal digits");
	else if (!json_is_integer(json_object_get(o, "nodes")) ||
		 !json_is_string(json_object_get(o, "topology")) ||
		 !json_is_integer(json_object_get(o, "peers_per_iter")) ||
		 !json_is_integer(json_object_get(o, "iters")) ||
		 !json_is_boolean(json_object_get(o, "overlap")))
		snprintf(err, errlen, "hello: want \"nodes\", \"topology\", \"peers_per_iter\", "
			 "\"iters\" and \"overlap\" as a node sends them");
	if (*err)
		return GEM_EUSAGE;
	h->node = (int)json_integer_value(v);
	h->nodes = json_integer_value(json_object_get(o, "nodes"));
	h->topology = jget_str_or(o, "topology", "?");
	h->peers_per_iter = json_integer_value(json_object_get(o, "peers_per_iter"));
	h->iters = json_integer_value(json_object_get(o, "iters"));
	h->overlap = json_is_true(json_object_get(o, "overlap"));
	memcpy(h->hash, hash, 17);
	return 0;
}

json_t *proto_ok_to_json(int node)
{
	return node >= 0 ? json_pack("{s:b, s:i}", "ok", 1, "node", node) : json_pack("{s:b}", "ok", 1);
}

json_t *proto_push_to_json(const struct proto_push *p)
{
	return json_pack("{s:i, s:I, s:f}", "node", p->node, "iter", (json_int_t)p->iter, "w", p->w);
}

int proto_push_from_json(const json_t *h, int nodes, int self, struct proto_push *p)
{
	json_t *jn = json_object_get(h, "node"), *ji = json_object_get(h, "iter");
	json_t *jw = json_object_get(h, "w");
	if (!json_is_integer(jn) || json_integer_value(jn) < 0 || json_integer_value(jn) >= nodes ||
	    json_integer_value(jn) == self || !json_is_integer(ji) || json_integer_value(ji) < 0 ||
	    !json_is_number(jw) || !(json_number_value(jw) > 0) || !(json_number_value(jw) <= nodes))
		return GEM_EUSAGE;
	p->node = (int)json_integer_value(jn);
	p->iter = (uint64_t)json_integer_value(ji);
	p->w = json_number_value(jw);
	return 0;
}

json_t *proto_bye_to_json(int node)
{
	return json_pack("{s:i}", "node", node);
}

int proto_bye_from_json(const json_t *o, long long *node)
{
	json_t *v = json_object_get(o, "node");
	if (!json_is_object(o) || !json_is_integer(v))
		return GEM_EUSAGE;
	*node = json_integer_value(v);
	return 0;
}

json_t *proto_node_health_to_json(const struct proto_node_health *h)
{
	return json_pack("{s:s, s:i, s:i, s:I, s:f, s:b, s:b}", "rule", h->rule, "node", h->node,
			 "nodes", h->nodes, "version", (json_int_t)h->version, "w", h->w, "ready",
			 h->ready, "stopping", h->stopping);
}
