#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jget.h"
#include "nn/layer_ops.h"

/* The layers (struct layer, nn/layer_ops.h) know their type through l->ops: nothing here
 * depends on which types exist. */
struct model {
	char name[64];
	struct shape input;
	int classes, nlayers, cap;
	struct layer *l;
	struct layout layout;
	float *theta, *grad;
	float *xin;    /* input transposed from NCHW to (C,B,H,W) when C > 1 */
	float *g[2];   /* gradient ping-pong, the largest activation */
	float *dcol;   /* conv2d backward scratch */
};

/* The type named name in layer_all, or NULL. */
static const struct layer_ops *find_type(const char *name)
{
	for (const struct layer_ops *const *t = layer_all; *t; t++)
		if (!strcmp((*t)->name, name))
			return *t;
	return NULL;
}

/* The names of layer_all's types (only the losses if losses), joined by sep. */
static const char *type_list(char *buf, size_t size, int losses, const char *sep)
{
	size_t len = 0;
	buf[0] = 0;
	for (const struct layer_ops *const *t = layer_all; *t && len < size; t++)
		if (!losses || (*t)->loss)
			len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? sep : "", (*t)->name);
	return buf;
}

/* Read field f of layers[li] (o) into *v: an integer or a number in range, or its default. */
static int get_field(const json_t *o, int li, const struct layer_field *f, union layer_val *v, char *err)
{
	json_t *j = json_object_get(o, f->name);
	double x = f->def;
	long long k = (long long)f->def;
	int rc = f->kind == LAYER_NUM ? jget_num(o, f->name, f->min, f->max, &x)
				      : jget_int(o, f->name, (long long)f->min, (long long)f->max, &k);
	if (rc == JGET_MISSING && f->required)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: missing", li, f->name);
	if (rc == JGET_TYPE)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: must be %s", li, f->name,
				f->kind == LAYER_NUM ? "a number" : "an integer");
	/* a number's range is [min, max) */
	if (f->kind == LAYER_NUM && (rc == JGET_RANGE || x >= f->max))
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: %g is not in [%g, %g)", li, f->name,
				json_number_value(j), f->min, f->max);
	if (rc == JGET_RANGE)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: %lld is out of range [%d, %d]", li, f->name,
				(long long)json_integer_value(j), (int)f->min, (int)f->max);
	if (f->kind == LAYER_NUM)
		v->f = (float)x;
	else
		v->i = (int)k;
	return 0;
}

/* Find layers[li]'s type and check that every key of o is one of its fields. */
static int layer_type(const json_t *o, int li, const struct layer_ops **ops, char *err)
{
	const char *key, *tname, *names[LAYER_MAX_FIELDS + 32];
	size_t n = 0;
	json_t *v, *tv = json_object_get(o, "type");

	if (!json_is_object(o))
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: must be an object", li);
	if (!tv)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].type: missing", li);
	if (!json_is_string(tv))
		return gem_errf(err, GEM_EUSAGE, "layers[%d].type: must be a string", li);
	tname = json_string_value(tv);
	if (!(*ops = find_type(tname))) {
		for (const struct layer_ops *const *t = layer_all; *t && n < sizeof names / sizeof *names; t++)
			names[n++] = (*t)->name;
		gem_err_unknown(err, GEM_EUSAGE, "layer type", tname, names, n);
		gem_errprefix(err, "layers[%d]: ", li);
		return GEM_EUSAGE;
	}
	names[n++] = "type";
	for (int f = 0; f < LAYER_MAX_FIELDS && (*ops)->fields[f].name; f++)
		names[n++] = (*ops)->fields[f].name;
	json_object_foreach((json_t *)o, key, v) {
		size_t i = 0;
		while (i < n && strcmp(key, names[i]))
			i++;
		if (i == n) {
			char what[64];
			snprintf(what, sizeof what, "field of %.40s", tname);
			gem_err_unknown(err, GEM_EUSAGE, what, key, names, n);
			gem_errprefix(err, "layers[%d].%.64s: ", li, key);
			return GEM_EUSAGE;
		}
	}
	return 0;
}

/* Check layers[li] (o) and compute its output shape from l->in. */
static int layer_parse(struct model *m, struct layer *l, const json_t *o, int li, int last, char *err)
{
	const struct layer_ops *ops = NULL;
	char names[64];
	int rc;

	if ((rc = layer_type(o, li, &ops, err)))
		return rc;
	l->ops = ops;
	l->index = li;
	l->wt = l->bt = -1;
	l->out = l->in;
	if (ops->input == LAYER_IMAGE && !l->in.image)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: %s needs an image input (C,H,W), got %d features",
				li, ops->name, l->in.c);
	if (ops->input == LAYER_FLAT && l->in.image)
		return gem_errf(err, GEM_EUSAGE,
				"layers[%d]: %s needs a flat input, got an image (%d,%d,%d); add a flatten layer",
				li, ops->name, l->in.c, l->in.h, l->in.w);
	if (ops->loss && !last)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: %s must be the last layer", li, ops->name);
	if (!ops->loss && last)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: the last layer must be %s, not %s", li,
				type_list(names, sizeof names, 1, " or "), ops->name);
	for (int f = 0; f < LAYER_MAX_FIELDS && ops->fields[f].name; f++)
		if ((rc = get_field(o, li, &ops->fields[f], &l->v[f], err)))
			return rc;
	if ((rc = ops->parse(l, &m->layout, m->classes, err)))
		return rc;
	if (shape_size(l->out) > (size_t)1 << 28)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: output of %zu floats per sample is too large", li,
				shape_size(l->out));
	return 0;
}

static int parse_input(struct model *m, const json_t *in, char *err)
{
	size_t n = json_is_array(in) ? json_array_size(in) : 0;
	int d[3] = {1, 1, 1};
	if (!in)
		return gem_errf(err, GEM_EUSAGE, "input: missing");
	if (n != 1 && n != 3)
		return gem_errf(err, GEM_EUSAGE, "input: must be [features] or [channels, height, width]");
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(in, i);
		if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 24)
			return gem_errf(err, GEM_EUSAGE, "input[%zu]: must be a positive integer", i);
		d[i] = (int)json_integer_value(v);
	}
	if ((size_t)d[0] * d[1] * d[2] > (size_t)1 << 24)
		return gem_errf(err, GEM_EUSAGE, "input: too large");
	m->input = (struct shape){d[0], d[1], d[2], n == 3};
	return 0;
}

int model_from_json(const json_t *spec, struct model **out, char *err)
{
	static const char *const keys[] = {"name", "description", "input", "classes", "layers"};
	struct model *m;
	const char *key;
	json_t *v, *layers, *cl;
	int rc;

	*out = NULL;
	if (!json_is_object(spec))
		return gem_errf(err, GEM_EUSAGE, "model spec: must be a JSON object");
	json_object_foreach((json_t *)spec, key, v) {
		size_t i = 0;
		while (i < sizeof keys / sizeof *keys && strcmp(key, keys[i]))
			i++;
		if (i == sizeof keys / sizeof *keys) {
			gem_err_unknown(err, GEM_EUSAGE, "field of a model spec", key, keys, i);
			gem_errprefix(err, "%.64s: ", key);
			return GEM_EUSAGE;
		}
	}
	if (!(m = calloc(1, sizeof *m)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	if ((v = json_object_get(spec, "name"))) {
		if (!json_is_string(v)) {
			rc = gem_errf(err, GEM_EUSAGE, "name: must be a string");
			goto fail;
		}
		snprintf(m->name, sizeof m->name, "%s", json_string_value(v));
	}
	if ((rc = parse_input(m, json_object_get(spec, "input"), err)))
		goto fail;
	cl = json_object_get(spec, "classes");
	if (!cl || !json_is_integer(cl) || json_integer_value(cl) < 2 || json_integer_value(cl) > 256) {
		rc = gem_errf(err, GEM_EUSAGE, "classes: %s", cl ? "must be an integer in [2, 256]" : "missing");
		goto fail;
	}
	m->classes = (int)json_integer_value(cl);
	layers = json_object_get(spec, "layers");
	if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > 1000) {
		rc = gem_errf(err, GEM_EUSAGE, "layers: %s", layers ? "must be a non-empty array" : "missing");
		goto fail;
	}
	m->nlayers = (int)json_array_size(layers);
	if (!(m->l = calloc((size_t)m->nlayers, sizeof *m->l))) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto fail;
	}
	struct shape s = m->input;
	int params_before = 0;
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		l->in = s;
		l->need_dx = params_before;
		if ((rc = layer_parse(m, l, json_array_get(layers, (size_t)i), i, i == m->nlayers - 1, err)))
			goto fail;
		params_before |= l->wt >= 0;
		s = l->out;
	}
	m->theta = layer_falloc(m->layout.total, sizeof *m->theta);
	m->grad = layer_falloc(m->layout.total, sizeof *m->grad);
	if (!m->theta || !m->grad) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory for %zu parameters", m->layout.total);
		goto fail;
	}
	memset(m->theta, 0, sizeof *m->theta * m->layout.total);
	memset(m->grad, 0, sizeof *m->grad * m->layout.total);
	*out = m;
	return 0;
fail:
	model_free(m);
	return rc;
}

int model_from_file(const char *path, json_t **spec_out, struct model **out, char *err)
{
	json_error_t jerr;
	json_t *spec = json_load_file(path, 0, &jerr);
	int rc;
	*out = NULL;
	if (spec_out)
		*spec_out = NULL;
	if (!spec) {
		if (json_error_code(&jerr) == json_error_cannot_open_file)
			return gem_errf(err, GEM_EFAIL, "%s: %s", path, jerr.text);
		return gem_errf(err, GEM_EUSAGE, "%s:%d: %s", path, jerr.line, jerr.text);
	}
	if ((rc = model_from_json(spec, out, err)) < 0) {
		gem_errprefix(err, "%s: ", path);
		json_decref(spec);
		return rc;
	}
	if (spec_out)
		*spec_out = spec;
	else
		json_decref(spec);
	return 0;
}

static void free_buffers(struct model *m)
{
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		free(l->y);
		free(l->aux);
		l->y = NULL;
		l->aux = NULL;
	}
	free(m->xin);
	free(m->g[0]);
	free(m->g[1]);
	free(m->dcol);
	m->xin = m->g[0] = m->g[1] = m->dcol = NULL;
	m->cap = 0;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	if (m->l)
		free_buffers(m);
	free(m->l);
	free(m->theta);
	free(m->grad);
	free(m);
}

const char *model_name(const struct model *m)
{
	return m->name;
}

const struct layout *model_layout(const struct model *m)
{
	return &m->layout;
}

size_t model_nparams(const struct model *m)
{
	return m->layout.total;
}

float *model_params(struct model *m)
{
	return m->theta;
}

float *model_grads(struct model *m)
{
	return m->grad;
}

size_t model_input_size(const struct model *m)
{
	return shape_size(m->input);
}

int model_fits(const struct model *m, const struct dataset *d, char *err)
{
	if (d->dim < 1 || (size_t)d->dim != model_input_size(m) || d->classes > model_classes(m))
		return gem_errf(err, GEM_EUSAGE,
				"the data (%d values, %d classes per sample) does not fit the model (%zu "
				"inputs, %d classes)",
				d->dim, d->classes, model_input_size(m), model_classes(m));
	return 0;
}

int model_classes(const struct model *m)
{
	return m->classes;
}

int model_reserved(const struct model *m)
{
	return m->cap;
}

void model_init_params(struct model *m, uint64_t seed)
{
	struct rng r;
	rng_seed(&r, seed, RNG_MODEL_INIT);
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		if (l->wt < 0)
			continue;
		/* kaiming_uniform_(a=√5): gain √(2/(1+5)), bound gain·√(3/fan_in) = 1/√fan_in;
		 * PyTorch draws the bias from the same interval. */
		const struct layout_tensor *ts[2] = {&m->layout.t[l->wt], &m->layout.t[l->bt]};
		int fan_in = (int)(ts[0]->size / (size_t)ts[0]->shape[0]); /* W is (OUT, fan-in...) */
		float bound = 1.0f / sqrtf((float)fan_in);
		for (int j = 0; j < 2; j++) {
			float *p = m->theta + ts[j]->offset;
			for (size_t k = 0; k < ts[j]->size; k++)
				p[k] = (2.0f * rng_float(&r) - 1.0f) * bound;
		}
	}
}

int model_reserve(struct model *m, int batch, char *err)
{
	size_t B = (size_t)batch, gmax = shape_size(m->input), dcol = 0;
	int fail = 0;
	if (batch < 1)
		return gem_errf(err, GEM_EUSAGE, "batch size %d: must be positive", batch);
	if (batch <= m->cap)
		return 0;
	free_buffers(m);
	if (m->input.image && m->input.c > 1)
		fail |= !(m->xin = layer_falloc(B * shape_size(m->input), sizeof(float)));
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		size_t n = B * shape_size(l->out);
		if (shape_size(l->out) > gmax)
			gmax = shape_size(l->out);
		if (!l->view)
			fail |= !(l->y = layer_falloc(n, sizeof(float)));
		if (l->ops->reserve)
			fail |= l->ops->reserve(l, batch, &dcol) < 0;
	}
	fail |= !(m->g[0] = layer_falloc(B * gmax, sizeof(float)));
	fail |= !(m->g[1] = layer_falloc(B * gmax, sizeof(float)));
	if (dcol)
		fail |= !(m->dcol = layer_falloc(dcol, sizeof(float)));
	if (fail) {
		free_buffers(m);
		return gem_errf(err, GEM_ENOMEM, "out of memory for a batch of %d", batch);
	}
	m->cap = batch;
	return 0;
}

/* The passes below run every layer through its ops (layer_ops.c), which say each layer's shapes:
 *   B = batch (n samples), C = channels, H, W = image plane, IN/OUT = features,
 *   OC/OH/OW = a conv2d's output channels and plane.
 * Images travel as (C,B,H,W), flat activations as (B,IN); the input arrives as NCHW. */

/* Point p at layer l's parameters and gradient in θ and ∇ (NULL if it has none). */
static void pass_params(struct model *m, const struct layer *l, struct layer_pass *p)
{
	p->W = l->wt >= 0 ? m->theta + m->layout.t[l->wt].offset : NULL;
	p->b = l->bt >= 0 ? m->theta + m->layout.t[l->bt].offset : NULL;
	p->dW = l->wt >= 0 ? m->grad + m->layout.t[l->wt].offset : NULL;
	p->db = l->bt >= 0 ? m->grad + m->layout.t[l->bt].offset : NULL;
}

/* Run the layers on n samples; returns the log-probabilities (n, classes) and puts the summed
 * loss in *loss (0 if y is NULL). Train mode draws dropout masks from r; eval mode skips them. */
static const float *forward(struct model *m, const float *x, const uint8_t *y, int n, struct rng *r,
			    double *loss)
{
	struct layer_pass p = {.B = n, .r = r, .label = y};
	const float *h = x;
	if (m->xin) {
		/* NCHW → (C,B,H,W) */
		size_t hw = (size_t)m->input.h * m->input.w;
		for (int b = 0; b < n; b++)
			for (int c = 0; c < m->input.c; c++)
				memcpy(m->xin + ((size_t)c * n + b) * hw, x + ((size_t)b * m->input.c + c) * hw,
				       sizeof(float) * hw);
		h = m->xin;
	}
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		pass_params(m, l, &p);
		l->x = h;
		h = l->ops->forward(l, h, &p);
	}
	*loss = p.loss;
	return h;
}

/* From the loss down to the lowest layer with parameters; g holds the gradient of the current
 * layer's output, a layer that writes its input gradient into the other buffer swaps them. */
static void backward(struct model *m, const uint8_t *y, int n)
{
	struct layer_pass p = {.B = n, .label = y, .scale = 1.0f / (float)n, .dcol = m->dcol};
	float *g = m->g[0], *other = m->g[1];
	for (int i = m->nlayers - 1; i >= 0; i--) {
		struct layer *l = &m->l[i];
		if (!l->need_dx && l->wt < 0)
			break; /* nothing below needs a gradient */
		pass_params(m, l, &p);
		float *gx = l->ops->backward(l, g, l->need_dx ? other : NULL, &p);
		if (gx == other) {
			other = g;
			g = gx;
		}
	}
}

float model_train_step(struct model *m, const float *x, const uint8_t *y, int n, struct rng *r)
{
	double loss = 0;
	if (n < 1 || n > m->cap || !r)
		return NAN;
	forward(m, x, y, n, r, &loss);
	backward(m, y, n);
	return (float)(loss / n);
}

double model_evaluate(struct model *m, const float *x, const uint8_t *y, int n, long *correct,
		      uint8_t *pred)
{
	double loss = 0;
	long right = 0;
	if (n < 1 || n > m->cap)
		return NAN;
	const float *logp = forward(m, x, y, n, NULL, &loss);
	for (int b = 0; b < n; b++) {
		const float *p = logp + (size_t)b * m->classes;
		int best = 0;
		for (int k = 1; k < m->classes; k++)
			if (p[k] > p[best])
				best = k;
		if (pred)
			pred[b] = (uint8_t)best;
		if (y && best == y[b])
			right++;
	}
	if (correct && y)
		*correct += right;
	return loss;
}
