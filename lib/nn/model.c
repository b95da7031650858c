#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/layers.h"

enum ltype { L_DENSE, L_CONV2D, L_MAXPOOL2D, L_RELU, L_DROPOUT, L_DROPOUT2D, L_FLATTEN, L_LOGSOFTMAX };

static const char *const type_names[] = {"dense",   "conv2d",    "maxpool2d", "relu",
					 "dropout", "dropout2d", "flatten",   "logsoftmax"};

/* Fields each type accepts besides "type". */
static const char *const type_fields[L_LOGSOFTMAX + 1][5] = {
	[L_DENSE] = {"out"},
	[L_CONV2D] = {"out", "kernel", "stride", "padding"},
	[L_MAXPOOL2D] = {"size"},
	[L_DROPOUT] = {"p"},
	[L_DROPOUT2D] = {"p"},
};

/* A per-sample activation shape: an image (C,H,W), stored (C,B,H,W) in a batch, or flat
 * features (c, with h = w = 1), stored (B,c). */
struct shape {
	int c, h, w, image;
};

struct layer {
	enum ltype type;
	struct shape in, out;
	struct conv2d_shape cs;
	int k;        /* maxpool window */
	float p;      /* dropout probability */
	int wt, bt;   /* weight and bias tensors in the layout, -1 if none */
	int need_dx;  /* some earlier layer has parameters */
	int copy;     /* flatten: a real transpose, not a view */
	float *y;     /* output buffer (NULL when the output is a view of the input) */
	float *col;   /* conv2d: im2col of the last forward */
	uint8_t *arg; /* maxpool2d: argmax of each window */
	float *mask;  /* dropout: per element; dropout2d: per (channel, sample) */
	const float *x, *out_view; /* input and output of the last forward */
};

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
	size_t gsize, dcolsize;
};

static size_t shape_size(struct shape s)
{
	return (size_t)s.c * s.h * s.w;
}

static void *falloc(size_t n, size_t elem)
{
	size_t bytes = (n * elem + 63) / 64 * 64;
	return aligned_alloc(64, bytes ? bytes : 64);
}

/* Read an integer field of layers[li]; `def` < 0 means required. */
static int get_int(const json_t *o, int li, const char *key, int def, int min, int max, int *out,
		   char *err)
{
	json_t *v = json_object_get(o, key);
	if (!v) {
		if (def < 0)
			return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: missing", li, key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: must be an integer", li, key);
	json_int_t x = json_integer_value(v);
	if (x < min || x > max)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: %lld is out of range [%d, %d]", li, key,
				(long long)x, min, max);
	*out = (int)x;
	return 0;
}

static int add_tensor(struct model *m, int li, const char *kind, int ndim, const int *shape, char *err)
{
	struct layout *lo = &m->layout;
	if (lo->ntensors == LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: more than %d parameter tensors", li,
				LAYOUT_MAX_TENSORS);
	struct layout_tensor *t = &lo->t[lo->ntensors];
	snprintf(t->name, sizeof t->name, "%d.%s", li, kind);
	t->ndim = ndim;
	t->size = 1;
	for (int d = 0; d < 4; d++) {
		t->shape[d] = d < ndim ? shape[d] : 0;
		if (d < ndim)
			t->size *= (size_t)shape[d];
	}
	t->offset = lo->total;
	lo->total += t->size;
	return lo->ntensors++;
}

/* Check layers[li] and compute its output shape from l->in. */
static int layer_parse(struct model *m, struct layer *l, const json_t *o, int li, int last, char *err)
{
	const char *key, *tname;
	json_t *v, *tv = json_object_get(o, "type");
	int t, rc, out, stride, pad, ntypes = (int)(sizeof type_names / sizeof *type_names);

	if (!json_is_object(o))
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: must be an object", li);
	if (!tv)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].type: missing", li);
	if (!json_is_string(tv))
		return gem_errf(err, GEM_EUSAGE, "layers[%d].type: must be a string", li);
	tname = json_string_value(tv);
	for (t = 0; t < ntypes; t++)
		if (!strcmp(tname, type_names[t]))
			break;
	if (t == ntypes)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: unknown type \"%s\"", li, tname);
	json_object_foreach((json_t *)o, key, v) {
		int known = !strcmp(key, "type");
		for (int f = 0; f < 5 && type_fields[t][f] && !known; f++)
			known = !strcmp(key, type_fields[t][f]);
		if (!known)
			return gem_errf(err, GEM_EUSAGE, "layers[%d].%s: unknown field for %s", li, key, tname);
	}
	l->type = (enum ltype)t;
	l->wt = l->bt = -1;
	l->out = l->in;
	if ((t == L_CONV2D || t == L_MAXPOOL2D || t == L_DROPOUT2D) && !l->in.image)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: %s needs an image input (C,H,W), got %d features",
				li, tname, l->in.c);
	if (t == L_DENSE && l->in.image)
		return gem_errf(err, GEM_EUSAGE,
				"layers[%d]: dense needs a flat input, got an image (%d,%d,%d); add a flatten layer",
				li, l->in.c, l->in.h, l->in.w);
	if (t == L_LOGSOFTMAX && !last)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: logsoftmax must be the last layer", li);
	if (t != L_LOGSOFTMAX && last)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: the last layer must be logsoftmax, not %s", li,
				tname);

	switch (l->type) {
	case L_DENSE: {
		if ((rc = get_int(o, li, "out", -1, 1, 1 << 24, &out, err)))
			return rc;
		int ws[2] = {out, l->in.c};
		if ((l->wt = add_tensor(m, li, "weight", 2, ws, err)) < 0 ||
		    (l->bt = add_tensor(m, li, "bias", 1, &out, err)) < 0)
			return GEM_EUSAGE;
		l->out = (struct shape){out, 1, 1, 0};
		break;
	}
	case L_CONV2D: {
		int k;
		if ((rc = get_int(o, li, "out", -1, 1, 1 << 16, &out, err)) ||
		    (rc = get_int(o, li, "kernel", -1, 1, 1 << 12, &k, err)) ||
		    (rc = get_int(o, li, "stride", 1, 1, 1 << 12, &stride, err)) ||
		    (rc = get_int(o, li, "padding", 0, 0, 1 << 12, &pad, err)))
			return rc;
		if (conv2d_shape_init(&l->cs, l->in.c, l->in.h, l->in.w, out, k, stride, pad) < 0)
			return gem_errf(err, GEM_EUSAGE,
					"layers[%d].kernel: %d is larger than the (padded) input %dx%d", li, k,
					l->in.h + 2 * pad, l->in.w + 2 * pad);
		int ws[4] = {out, l->in.c, k, k};
		if ((l->wt = add_tensor(m, li, "weight", 4, ws, err)) < 0 ||
		    (l->bt = add_tensor(m, li, "bias", 1, &out, err)) < 0)
			return GEM_EUSAGE;
		l->out = (struct shape){out, l->cs.oh, l->cs.ow, 1};
		break;
	}
	case L_MAXPOOL2D:
		if ((rc = get_int(o, li, "size", 2, 1, 16, &l->k, err)))
			return rc;
		if (l->k > l->in.h || l->k > l->in.w)
			return gem_errf(err, GEM_EUSAGE, "layers[%d].size: %d is larger than the input %dx%d", li,
					l->k, l->in.h, l->in.w);
		l->out.h = l->in.h / l->k;
		l->out.w = l->in.w / l->k;
		break;
	case L_DROPOUT:
	case L_DROPOUT2D:
		l->p = 0.5f;
		if ((v = json_object_get(o, "p"))) {
			if (!json_is_number(v))
				return gem_errf(err, GEM_EUSAGE, "layers[%d].p: must be a number", li);
			double p = json_number_value(v);
			if (!(p >= 0 && p < 1))
				return gem_errf(err, GEM_EUSAGE, "layers[%d].p: %g is not in [0, 1)", li, p);
			l->p = (float)p;
		}
		break;
	case L_FLATTEN:
		l->out = (struct shape){(int)shape_size(l->in), 1, 1, 0};
		l->copy = l->in.image && l->in.c > 1;
		break;
	case L_LOGSOFTMAX:
		if (l->in.image)
			return gem_errf(err, GEM_EUSAGE, "layers[%d]: logsoftmax needs a flat input; add a flatten layer",
					li);
		if (l->in.c != m->classes)
			return gem_errf(err, GEM_EUSAGE, "classes: %d, but layers[%d] gets %d inputs", m->classes,
					li, l->in.c);
		break;
	case L_RELU:
		break;
	}
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
		if (i == sizeof keys / sizeof *keys)
			return gem_errf(err, GEM_EUSAGE, "%s: unknown field in a model spec", key);
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
	m->theta = falloc(m->layout.total, sizeof *m->theta);
	m->grad = falloc(m->layout.total, sizeof *m->grad);
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
		free(l->col);
		free(l->arg);
		free(l->mask);
		l->y = l->col = l->mask = NULL;
		l->arg = NULL;
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
		int fan_in = l->type == L_DENSE ? l->in.c : l->cs.c * l->cs.k * l->cs.k;
		float bound = 1.0f / sqrtf((float)fan_in);
		const struct layout_tensor *ts[2] = {&m->layout.t[l->wt], &m->layout.t[l->bt]};
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
		fail |= !(m->xin = falloc(B * shape_size(m->input), sizeof(float)));
	for (int i = 0; i < m->nlayers; i++) {
		struct layer *l = &m->l[i];
		size_t n = B * shape_size(l->out);
		if (shape_size(l->out) > gmax)
			gmax = shape_size(l->out);
		if (l->type != L_FLATTEN || l->copy)
			fail |= !(l->y = falloc(n, sizeof(float)));
		if (l->type == L_CONV2D) {
			size_t cols = conv2d_col_size(&l->cs, batch);
			fail |= !(l->col = falloc(cols, sizeof(float)));
			if (l->need_dx && cols > dcol)
				dcol = cols;
		}
		if (l->type == L_MAXPOOL2D)
			fail |= !(l->arg = falloc(n, sizeof(uint8_t)));
		if (l->type == L_DROPOUT)
			fail |= !(l->mask = falloc(n, sizeof(float)));
		if (l->type == L_DROPOUT2D)
			fail |= !(l->mask = falloc(B * l->in.c, sizeof(float)));
	}
	fail |= !(m->g[0] = falloc(B * gmax, sizeof(float)));
	fail |= !(m->g[1] = falloc(B * gmax, sizeof(float)));
	if (dcol)
		fail |= !(m->dcol = falloc(dcol, sizeof(float)));
	if (fail) {
		free_buffers(m);
		return gem_errf(err, GEM_ENOMEM, "out of memory for a batch of %d", batch);
	}
	m->cap = batch;
	return 0;
}

/* Run the layers on n samples; returns the log-probabilities (n, classes) and puts the summed
 * loss in *loss (0 if y is NULL). Train mode draws dropout masks from r; eval mode skips them. */
static const float *forward(struct model *m, const float *x, const uint8_t *y, int n, struct rng *r,
			    double *loss)
{
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
		size_t size = (size_t)n * shape_size(l->out);
		const float *W = l->wt >= 0 ? m->theta + m->layout.t[l->wt].offset : NULL;
		const float *bias = l->bt >= 0 ? m->theta + m->layout.t[l->bt].offset : NULL;
		l->x = h;
		switch (l->type) {
		case L_DENSE:
			dense_forward(l->y, h, W, bias, n, l->in.c, l->out.c);
			break;
		case L_CONV2D:
			conv2d_forward(l->y, l->col, h, W, bias, n, &l->cs);
			break;
		case L_MAXPOOL2D:
			maxpool2d_forward(l->y, l->arg, h, (size_t)l->in.c * n, l->in.h, l->in.w, l->k);
			break;
		case L_RELU:
			relu_forward(l->y, h, size);
			break;
		case L_DROPOUT:
			if (r)
				dropout_forward(l->y, l->mask, h, size, l->p, r);
			break;
		case L_DROPOUT2D:
			if (r)
				dropout2d_forward(l->y, l->mask, h, (size_t)l->in.c * n,
						  (size_t)l->in.h * l->in.w, l->p, r);
			break;
		case L_FLATTEN:
			if (l->copy)
				flatten_forward(l->y, h, n, l->in.c, l->in.h * l->in.w);
			break;
		case L_LOGSOFTMAX:
			*loss = logsoftmax_nll_forward(l->y, h, y, n, m->classes);
			break;
		}
		int view = (l->type == L_FLATTEN && !l->copy) ||
			   ((l->type == L_DROPOUT || l->type == L_DROPOUT2D) && !r);
		h = l->out_view = view ? h : l->y;
	}
	return h;
}

static void backward(struct model *m, const uint8_t *y, int n)
{
	float *g = m->g[0], *other = m->g[1], *t;
	struct layer *last = &m->l[m->nlayers - 1];
	logsoftmax_nll_backward(g, last->y, y, n, m->classes, 1.0f / (float)n);
	for (int i = m->nlayers - 2; i >= 0; i--) {
		struct layer *l = &m->l[i];
		size_t size = (size_t)n * shape_size(l->out);
		float *dW = l->wt >= 0 ? m->grad + m->layout.t[l->wt].offset : NULL;
		float *db = l->bt >= 0 ? m->grad + m->layout.t[l->bt].offset : NULL;
		const float *W = l->wt >= 0 ? m->theta + m->layout.t[l->wt].offset : NULL;
		float *dx = l->need_dx ? other : NULL;
		if (!l->need_dx && l->wt < 0)
			break; /* nothing below needs a gradient */
		switch (l->type) {
		case L_DENSE:
			dense_backward(dx, dW, db, g, l->x, W, n, l->in.c, l->out.c);
			break;
		case L_CONV2D:
			conv2d_backward(dx, dW, db, dx ? m->dcol : NULL, g, l->col, W, n, &l->cs);
			break;
		case L_MAXPOOL2D:
			maxpool2d_backward(dx, g, l->arg, (size_t)l->in.c * n, l->in.h, l->in.w, l->k);
			break;
		case L_RELU:
			relu_backward(g, g, l->y, size);
			dx = NULL;
			break;
		case L_DROPOUT:
			dropout_backward(g, g, l->mask, size);
			dx = NULL;
			break;
		case L_DROPOUT2D:
			dropout2d_backward(g, g, l->mask, (size_t)l->in.c * n, (size_t)l->in.h * l->in.w);
			dx = NULL;
			break;
		case L_FLATTEN:
			if (l->copy)
				flatten_backward(dx, g, n, l->in.c, l->in.h * l->in.w);
			else
				dx = NULL;
			break;
		case L_LOGSOFTMAX:
			break;
		}
		if (dx) {
			t = g;
			g = other;
			other = t;
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
