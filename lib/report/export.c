#include "report/export.h"
#include "base/err.h"
#include "nn/model.h"
#include "nn/npz.h"
#include "nn/safetensors.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The normalisation of r's inputs as JSON (malloc'ed; NULL: out of memory): a stored value
 * times "scale", less "mean", over "std", one of each per group (an image's channels, a
 * table's features; one for all values in a run made before). */
static char *norm_json(const struct run *r)
{
	const struct run_spec *sp = &r->spec;
	json_t *mean = json_array(), *std = json_array();
	json_t *o = json_pack("{s:f, s:o, s:o}", "scale",
			      sp->norm_groups ? sp->norm_scale : 1.0 / 255, "mean", mean, "std", std);
	char *s = NULL;
	int ok = o != NULL;
	/* a run made before normalises all values with one mean and std, as floats (the
	 * batcher's) */
	for (int g = 0; ok && g < (sp->norm_groups ? sp->norm_groups : 1); g++)
		ok = !json_array_append_new(mean, json_real(sp->norm_groups ? sp->norm_mean[g]
									 : (float)sp->mean)) &&
		     !json_array_append_new(std, json_real(sp->norm_groups ? sp->norm_std[g]
									   : (float)sp->std));
	if (ok)
		s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

/* The metadata of a safetensors export: what a user needs to run the model elsewhere. */
static int build_safetensors(const struct run *r, const struct run_progress *p, const struct layout *l,
		      struct export_file *x, char *err)
{
	char version[32], samples[32];
	char *spec = json_dumps(r->spec.model, JSON_COMPACT), *norm = norm_json(r);
	struct safetensors_meta meta[] = {
		{.key = "format", .value = "pt"}, /* what loaders of PyTorch weights look for */
		{.key = "gem.model", .value = spec},
		{.key = "gem.model_name", .value = r->spec.model_name},
		{.key = "gem.data", .value = r->spec.data_name},
		{.key = "gem.normalisation", .value = norm},
		{.key = "gem.theta_version", .value = version},
		{.key = "gem.samples", .value = samples},
	};
	size_t len;
	int rc;
	if (!spec || !norm) {
		free(spec);
		free(norm);
		return gem_errf(err, GEM_ENOMEM, "export: out of memory");
	}
	snprintf(version, sizeof version, "%llu", (unsigned long long)p->version);
	snprintf(samples, sizeof samples, "%llu", (unsigned long long)p->samples);
	rc = safetensors_header(l, meta, (int)(sizeof meta / sizeof *meta), (uint8_t **)&x->mem, &len,
				err);
	free(spec);
	free(norm);
	if (rc < 0)
		return rc;
	x->one[0] = (struct iovec){x->mem, len};
	x->one[1] = (struct iovec){x->theta, l->total * sizeof *x->theta};
	x->iov = x->one;
	x->niov = 2;
	return 0;
}

/* A stored .npz: one NAME.npy per tensor of l. */
static int build_npz(const struct layout *l, struct export_file *x, char *err)
{
	struct npz_array a[LAYOUT_MAX_TENSORS];
	for (int i = 0; i < l->ntensors; i++)
		a[i] = (struct npz_array){.name = l->t[i].name, .ndim = l->t[i].ndim,
					  .dims = l->t[i].shape, .data = x->theta + l->t[i].offset};
	return npz_write_stored(a, l->ntensors, &x->iov, &x->niov, &x->mem, err);
}

int export_run(const struct run *r, const char *params, enum export_format f,
	       struct export_file *out, char *err)
{
	char node0[64], path[PATH_MAX + 64];
	struct model *m = NULL;
	struct run_progress p;
	const struct layout *l;
	int rc;
	memset(out, 0, sizeof *out);
	snprintf(node0, sizeof node0, RUN_NODE_PARAMS, 0);
	if (!params && run_file(r, node0, path, sizeof path) == 0 && access(path, F_OK) == 0)
		return gem_errf(err, GEM_EUSAGE, "%s: an SGP run: its params.gem is only the starting "
				"point; name a node's parameters (--params %s)", r->dir, path);
	if ((rc = model_from_json(r->spec.model, &m, err)) < 0) {
		gem_errprefix(err, "%s: model: ", r->dir);
		return rc;
	}
	l = model_layout(m);
	if (!(out->theta = malloc(l->total * sizeof *out->theta + 1))) {
		rc = gem_errf(err, GEM_ENOMEM, "export: out of memory");
		goto out;
	}
	if ((rc = params ? run_params_load(r, params, out->theta, l->total, &p, err)
			 : run_params_load_merged(r, out->theta, l->total, &p, err)) < 0)
		goto out;
	rc = f == EXPORT_NPZ ? build_npz(l, out, err) : build_safetensors(r, &p, l, out, err);
out:
	model_free(m);
	if (rc < 0)
		export_free(out);
	return rc;
}

void export_free(struct export_file *x)
{
	if (x->iov != x->one)
		free(x->iov);
	free(x->mem);
	free(x->theta);
	memset(x, 0, sizeof *x);
}
