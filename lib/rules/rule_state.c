/* rule_state: a rule's checkpoint (rules/rule.h): its state (the rule-wide vectors, and each
 * worker's with its id and version) out to vectors and a JSON header, and back in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "rules/impl.h"

int rule_state_save(const struct rule *r, json_t **meta, struct rule_vec **vecs, int *nvec, char *err)
{
	const struct rule_ops *ops = r->ops;
	struct rule_vec *v;
	json_t *workers;
	int k = 0;

	*meta = NULL;
	*vecs = NULL;
	*nvec = 0;
	if (!(v = calloc((size_t)(ops->nglobal + r->nactive * ops->nvec) + 1, sizeof *v)))
		return gem_errf(err, GEM_ENOMEM, "rule: out of memory");
	if (!(workers = json_array()))
		goto nomem;
	for (int i = 0; i < ops->nglobal; i++, k++) {
		snprintf(v[k].name, sizeof v[k].name, "%s", ops->global[i]);
		v[k].data = r->global[i];
		v[k].n = r->n;
	}
	for (int id = 0; id < r->cap; id++) {
		const struct rule_worker *w = &r->w[id];
		if (!w->active)
			continue;
		if (json_array_append_new(workers, json_pack("{s:i, s:b}", "id", id, "committed",
							      w->committed)) < 0)
			goto nomem;
		for (int i = 0; i < ops->nvec; i++, k++) {
			snprintf(v[k].name, sizeof v[k].name, "%s.%d", ops->vec[i], id);
			if (ops->bf16_state)
				v[k].bf16 = rule_bf16_vec(w->vec[i]);
			else
				v[k].data = w->vec[i];
			v[k].n = r->n;
		}
	}
	*meta = json_pack("{s:s, s:I, s:o, s:{s:i, s:i, s:i}}", "rule", r->c.name, "n",
			  (json_int_t)r->n, "workers", workers, "round", "target", r->target,
			  "ncommitted", r->ncommitted, "ncontrib", r->ncontrib);
	if (!*meta)
		goto nomem_meta;
	*vecs = v;
	*nvec = k;
	return 0;
nomem:
	json_decref(workers);
nomem_meta:
	free(v);
	return gem_errf(err, GEM_ENOMEM, "rule: out of memory");
}

static const struct rule_vec *rule_vec_find(const struct rule_vec *vecs, int nvec, const char *name)
{
	for (int i = 0; i < nvec; i++)
		if (!strcmp(vecs[i].name, name))
			return &vecs[i];
	return NULL;
}

/* The saved vector name into dst, rounded to bfloat16 if bf16 (dst then holds n uint16_t). */
static int rule_vec_copy(struct rule *r, float *dst, const char *name, const struct rule_vec *vecs,
			 int nvec, int bf16, char *err)
{
	const struct rule_vec *v = rule_vec_find(vecs, nvec, name);
	if (!v)
		return gem_errf(err, GEM_EFAIL, "rule state: no vector %s", name);
	if (v->n != r->n || !v->data)
		return gem_errf(err, GEM_EFAIL, "rule state: vector %s has %zu floats, expected %zu", name,
				v->n, r->n);
	if (bf16) {
		/* a bfloat16 saved as a float reads back as itself */
		uint16_t *h = rule_bf16_vec(dst);
		for (size_t i = 0; i < r->n; i++)
			h[i] = rule_bf16(v->data[i]);
	} else {
		memcpy(dst, v->data, r->n * sizeof(float));
	}
	return 0;
}

int rule_state_load(struct rule *r, const json_t *meta, const struct rule_vec *vecs, int nvec,
		    char *err)
{
	const struct rule_ops *ops = r->ops;
	json_t *workers, *wj;
	const char *name = NULL;
	json_int_t n = 0;
	int target, ncommitted, ncontrib, rc;
	size_t i;

	if (r->nactive)
		return gem_errf(err, GEM_EUSAGE, "rule state: load into a rule with workers");
	if (json_unpack((json_t *)meta, "{s:s, s:I, s:o, s:{s:i, s:i, s:i}}", "rule", &name, "n", &n,
			"workers", &workers, "round", "target", &target, "ncommitted", &ncommitted,
			"ncontrib", &ncontrib) < 0 ||
	    !json_is_array(workers))
		return gem_errf(err, GEM_EFAIL, "rule state: bad JSON");
	if (strcmp(name, r->c.name) || (size_t)n != r->n)
		return gem_errf(err, GEM_EFAIL, "rule state: of rule %s over %lld floats, not %s over %zu",
				name, (long long)n, r->c.name, r->n);
	for (int g = 0; g < ops->nglobal; g++)
		if ((rc = rule_vec_copy(r, r->global[g], ops->global[g], vecs, nvec, 0, err)) < 0)
			goto fail;
	json_array_foreach(workers, i, wj) {
		int id, committed;
		char vname[RULE_VEC_NAME_MAX];
		if (json_unpack(wj, "{s:i, s:b}", "id", &id, "committed", &committed) < 0) {
			rc = gem_errf(err, GEM_EFAIL, "rule state: bad worker entry %zu", i);
			goto fail;
		}
		if ((rc = rule_worker_add(r, id, err)) < 0)
			goto fail;
		if (ops->sent_vec >= 0)
			rule_sent_set(r, &r->w[id], rule_snap_pop(r));
		r->w[id].committed = committed;
		for (int k = 0; k < ops->nvec; k++) {
			snprintf(vname, sizeof vname, "%s.%d", ops->vec[k], id);
			if ((rc = rule_vec_copy(r, r->w[id].vec[k], vname, vecs, nvec,
						 ops->bf16_state, err)) < 0)
				goto fail;
		}
	}
	r->target = target;
	r->ncommitted = ncommitted;
	r->ncontrib = ncontrib;
	return 0;
fail:
	for (int id = 0; id < r->cap; id++)
		rule_worker_free(r, &r->w[id]);
	r->nactive = 0;
	return rc;
}
