#include "role/vworker.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "wire/proto.h"

int vwire_open(struct vwire *x, size_t n, char *err)
{
	blob_codec_init(&x->c);
	if (!(x->v = malloc(sizeof(float) * (n ? n : 1))))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return 0;
}

void vwire_close(struct vwire *x)
{
	blob_codec_free(&x->c);
	msg_buf_free(&x->head);
	free(x->v);
	x->v = NULL;
}

int vworker_open(struct vworker *w, int id, const struct run *run, const struct layout *lo, char *err)
{
	struct optim_config oc;
	int rc;
	memset(w, 0, sizeof *w);
	w->id = id;
	w->n = lo->total;
	if (!(w->x = malloc(sizeof(float) * w->n)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for worker %d", id);
	/* the cosine's end is the feed's budget, known at each join (vworker_joined) */
	run_optim_config(run, UINT64_MAX, &oc);
	if ((rc = rule_half_init(&w->l, &run->spec.rule, lo, &oc, err)) < 0 ||
	    (rc = vworker_codec(w, run, NULL, NULL, NULL, 0, err)) < 0) {
		vworker_close(w);
		return rc;
	}
	return 0;
}

void vworker_close(struct vworker *w)
{
	free(w->x);
	free(w->sent);
	free(w->reply_codec);
	for (int k = 0; k < SLICE_MAX; k++)
		delta_close(&w->dl[k]);
	feedback_close(&w->fb);
	rule_half_free(&w->l);
	if (w->has_feed)
		feed_close(&w->f);
	memset(w, 0, sizeof *w);
}

int vworker_codec(struct vworker *w, const struct run *run, const char *codec,
		  const char *reply_codec, const struct slice *cut, int ncut, char *err)
{
	int rc;
	feedback_close(&w->fb);
	if ((rc = feedback_open(&w->fb, codec, rule_describe(run->spec.rule.name), w->n, err)) < 0)
		return rc;
	free(w->reply_codec);
	w->reply_codec = strdup(reply_codec ? reply_codec : blob_codec_for_theta(w->fb.codec));
	if (!w->reply_codec ||
	    (blob_codec_lossy(w->fb.codec) && !w->sent && !(w->sent = malloc(sizeof(float) * w->n))))
		return gem_errf(err, GEM_ENOMEM, "out of memory for worker %d", w->id);
	w->ncut = ncut > 0 ? ncut : 1;
	for (int k = 0; k < SLICE_MAX; k++)
		delta_close(&w->dl[k]);
	for (int k = 0; k < w->ncut; k++) {
		w->cut[k] = ncut > 0 ? cut[k] : slice_of(w->n, 0, 0);
		/* gem-serve --codec sends θ whole in its codec */
		if ((rc = delta_open(&w->dl[k], reply_codec ? NULL : w->fb.codec, w->cut[k].len,
				     err)) < 0)
			return rc;
	}
	return 0;
}

/* The bytes of a message of header head (NULL: 0, not measured) and one blob called name, enc
 * described by m. */
static uint64_t msg_bytes(struct vwire *x, json_t *head, const char *name, const void *enc,
			  const struct blob_meta *m)
{
	char err[GEM_ERRMAX];
	struct msg_blob b = {.meta = *m, .data = enc};
	snprintf(b.name, sizeof b.name, "%s", name);
	if (!head || msg_build_head(&x->head, head, &b, 1, err) < 0)
		return 0;
	return x->head.len + m->nbytes;
}

/* v as the receiver decodes it, each slice cut[k] its own message in codec, a blob called name
 * under heads[k] (NULL: not measured) whose bytes go to bytes[k]: v itself when the codec is
 * lossless, else decoded into out; NULL if v cannot be encoded (err says why). */
static const float *wire_pass(const struct slice *cut, int ncut, struct vwire *x,
			      const char *codec, struct feedback *fb, const float *v, float *out,
			      const char *name, json_t *const *heads, uint64_t *bytes, char *err)
{
	int lossy = blob_codec_lossy(codec);
	for (int k = 0; k < ncut; k++) {
		size_t off = cut[k].off, len = cut[k].len;
		struct blob_meta m;
		const void *enc;
		int rc;
		bytes[k] = 0;
		/* a lossless codec changes nothing: encoded only to be measured */
		if (!lossy && !heads)
			continue;
		rc = fb ? feedback_encode(fb, &x->c, v, off, len, &enc, &m, err)
			: blob_encode(&x->c, v + off, len, codec, -1, &enc, &m, err);
		if (rc < 0 || (lossy && blob_decode(&x->c, enc, &m, out + off, len, err) < 0))
			return NULL;
		bytes[k] = msg_bytes(x, heads ? heads[k] : NULL, name, enc, &m);
	}
	return lossy ? out : v;
}

/* θ v as the worker receives it: through the copies of its slices when it keeps them, as
 * gem-serve sends it and gem-work takes it (restarted first when whole), else as wire_pass in
 * its reply codec. NULL if v cannot be encoded (err says why). */
static const float *theta_pass(struct vworker *w, struct vwire *x, const float *v, int whole,
			       json_t *const *heads, char *err)
{
	if (!w->dl[0].copy)
		return wire_pass(w->cut, w->ncut, x, w->reply_codec, NULL, v, x->v, MSG_PARAMS,
				 heads, w->reply_bytes, err);
	/* the slices cover θ: each copy goes to x->v after its delta is encoded from v */
	for (int k = 0; k < w->ncut; k++) {
		struct delta *d = &w->dl[k];
		struct blob_meta m;
		const void *enc;
		const char *name;
		if (whole)
			delta_restart(d);
		if (delta_encode(d, &x->c, v + w->cut[k].off, &enc, &m, &name, err) < 0)
			return NULL;
		/* the server's header says the CRC of its copy, as gem-serve's reply_encode does */
		if (heads && heads[k] &&
		    proto_crc_add(heads[k], delta_crc(d)) < 0)
			return NULL;
		w->reply_bytes[k] = msg_bytes(x, heads ? heads[k] : NULL, name, enc, &m);
		memcpy(x->v + w->cut[k].off, d->copy, sizeof(float) * d->n);
	}
	return x->v;
}

int vworker_joined(struct vworker *w, const struct run *run, const struct dataset *ds,
		   const struct ps_joined *j, const float *theta, struct vwire *wire,
		   json_t *const *heads, char *err)
{
	const float *got;
	int rc;
	if (w->has_feed)
		feed_close(&w->f);
	w->has_feed = 0;
	/* as gem-work: its own shuffled copy of the data, or the part the server gives it */
	if ((rc = feed_open(&w->f, run, ds, w->id, j->part_n > 0 ? j->part_i : 0,
			    j->part_n > 0 ? j->part_n : 1, err)) < 0)
		return rc;
	w->has_feed = 1;
	feed_seek(&w->f, j->samples);
	if (!(got = theta_pass(w, wire, theta, 1, heads, err)))
		return GEM_EFAIL;
	w->seq = j->seq;
	memcpy(w->x, got, sizeof(float) * w->n);
	feedback_restart(&w->fb, 0, w->n);
	rule_half_start(&w->l, w->x, feed_steps(&w->f, j->samples),
			feed_steps(&w->f, run_budget(run, feed_epoch(&w->f))));
	rule_half_schedule(&w->l, j->version);
	w->base = j->version;
	if (j->window > 0) /* dynamic local updates: as gem-work takes it from the reply */
		w->l.window = j->window;
	/* thousands of workers wait between their commits: only the few computing hold an order */
	batcher_free(&w->f.b);
	return 0;
}

int vworker_compute(struct vworker *w, struct trainer *t, struct vwire *wire, int steps,
		    uint64_t samples, char *err)
{
	float *p = model_params(t->m), loss;
	const float *u;
	json_t *heads[SLICE_MAX] = {0};
	struct slice frag, *cut = w->cut;
	double lsum = 0;
	int k, nb, rc, ncut = w->ncut;

	if ((rc = batcher_resume(&w->f.b, err)) < 0)
		return rc;
	memcpy(p, w->x, sizeof(float) * w->n);
	rule_half_begin(&w->l, p);
	w->got = 0;
	w->diverged = 0;
	for (k = 0; steps ? k < steps : w->got < samples; k++) {
		if ((rc = trainer_step(t, &w->f, &loss, &nb, err)) < 0)
			return rc;
		if (rc) {
			w->diverged = 1;
			lsum += loss;
			k++;
			break;
		}
		lsum += loss;
		w->got += (uint64_t)nb;
		rule_half_step(&w->l, p, model_grads(t->m));
	}
	w->steps = k;
	w->loss = (float)(lsum / (k ? k : 1));
	u = rule_half_commit(&w->l, p);
	memcpy(w->x, p, sizeof(float) * w->n);
	u = u == p ? w->x : u - w->l.off;
	/* a fragment is one message of its slice (on one server); else a message per server's slice */
	if (w->l.nfrag > 1) {
		frag = (struct slice){.off = w->l.off, .len = w->l.len};
		cut = &frag;
		ncut = 1;
	}
	/* gem-work encodes only what it sends: not a diverged step's */
	if (w->diverged) {
		w->update = u;
		batcher_free(&w->f.b);
		return 0;
	}
	/* every slice's header is the same: gem-work's servers are at one version */
	w->seq++;
	heads[0] = proto_commit_to_json(&(struct proto_commit){
		.worker = w->id, .base = w->base, .seq = w->seq, .samples = w->got, .loss = w->loss,
		.idle = w->l.d->background ? 0 : -1, .fragment = w->l.nfrag > 1 ? w->l.sent : -1});
	for (k = 1; k < w->ncut; k++)
		heads[k] = heads[0];
	w->update = wire_pass(cut, ncut, wire, w->fb.codec, &w->fb, u, w->sent, "update",
			      heads[0] ? heads : NULL, w->commit_bytes, err);
	json_decref(heads[0]);
	batcher_free(&w->f.b);
	return 0;
}

int vworker_reply(struct vworker *w, struct vwire *wire, const float *v, int elastic, int whole,
		  uint64_t version, json_t *const *heads, char *err)
{
	struct slice frag = {.off = w->l.off, .len = w->l.len};
	const float *got = elastic ? wire_pass(w->cut, w->ncut, wire, w->reply_codec, NULL, v,
					       wire->v, "elastic", heads, w->reply_bytes, err)
			 : w->l.nfrag > 1 ? wire_pass(&frag, 1, wire, w->reply_codec, NULL, v, wire->v,
						      MSG_PARAMS, heads, w->reply_bytes, err)
					  : theta_pass(w, wire, v, whole, heads, err);
	if (!got)
		return GEM_EFAIL;
	/* a fragment's θ, at its place in v (off 0 but for fragments) */
	rule_half_reply(&w->l, w->x, got + w->l.off, elastic);
	w->base = version;
	return 0;
}
