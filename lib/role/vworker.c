#include "role/vworker.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

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
	if ((rc = rule_local_init(&w->l, &run->rule, lo, &oc, err)) < 0) {
		free(w->x);
		w->x = NULL;
		return rc;
	}
	return 0;
}

void vworker_close(struct vworker *w)
{
	free(w->x);
	rule_local_free(&w->l);
	if (w->has_feed)
		feed_close(&w->f);
	memset(w, 0, sizeof *w);
}

int vworker_joined(struct vworker *w, const struct run *run, const struct dataset *ds,
		   const struct ps_joined *j, const float *theta, char *err)
{
	int rc;
	if (w->has_feed)
		feed_close(&w->f);
	w->has_feed = 0;
	/* as gem-work: its own shuffled copy of the data, or the shard the server gives it */
	if ((rc = feed_open(&w->f, run, ds, w->id, j->shard_n > 0 ? j->shard_i : 0,
			    j->shard_n > 0 ? j->shard_n : 1, err)) < 0)
		return rc;
	w->has_feed = 1;
	feed_seek(&w->f, j->samples);
	memcpy(w->x, theta, sizeof(float) * w->n);
	rule_local_start(&w->l, w->x, feed_steps(&w->f, j->samples),
			 feed_steps(&w->f, (uint64_t)run->train.epochs * feed_epoch(&w->f)));
	w->base = j->version;
	return 0;
}

void vworker_compute(struct vworker *w, struct trainer *t, int steps, uint64_t samples)
{
	char err[GEM_ERRMAX];
	float *p = model_params(t->m), loss;
	const float *u;
	double lsum = 0;
	int k, nb;

	memcpy(p, w->x, sizeof(float) * w->n);
	rule_local_begin(&w->l, p);
	w->got = 0;
	w->diverged = 0;
	for (k = 0; steps ? k < steps : w->got < samples; k++) {
		if (trainer_step(t, &w->f, &loss, &nb, err) < 0) {
			w->diverged = 1;
			lsum += loss;
			k++;
			break;
		}
		lsum += loss;
		w->got += (uint64_t)nb;
		rule_local_step(&w->l, p, model_grads(t->m));
	}
	w->steps = k;
	w->loss = (float)(lsum / (k ? k : 1));
	u = rule_local_commit(&w->l, p);
	memcpy(w->x, p, sizeof(float) * w->n);
	w->update = u == p ? w->x : u;
}

void vworker_reply(struct vworker *w, const float *v, int elastic, uint64_t version)
{
	rule_local_reply(&w->l, w->x, v, elastic);
	w->base = version;
}
