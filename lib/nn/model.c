#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/jget.h"
#include "nn/layer_ops.h"
#include "nn/pool.h"

/* The layers (struct layer, nn/layer_ops.h) know their type through l->ops: nothing here
 * depends on which types exist. */

/* What one pass over a batch, or over a part of one (a micro-batch, a part of an evaluation's
 * batch), writes besides θ's gradient: the layer tree (its batch buffers), the input
 * transposed, the gradient ping-pong and the scratch. The model has its own; one whose passes
 * run in parts on R threads has R − 1 more, with copies of its layer tree. */
struct replica {
	struct layer *l;
	float *xin;    /* input transposed from NCHW to (C,B,H,W) when C > 1 */
	float *g[2 * (LAYER_MAX_DEPTH + 1)]; /* gradient ping-pong per depth, the largest activation */
	float *dcol;   /* conv2d backward scratch */
	float *scratch; /* the sequence layers' matmul scratch */
	float *grad;   /* a replica's micro-batch gradient, added to the model's in order (the
			* model's own: NULL, its gradient is the model's) */
};

struct model {
	char name[64];
	struct shape input;
	int classes, nlayers, cap;
	int labels;    /* per sample: the loss layer's rows (T for a sequence, else 1) */
	int vocab;     /* the token ids an embedding first layer takes (0: none) */
	int depth;     /* the deepest nesting of residual blocks */
	struct replica own; /* its layers and their batch buffers */
	struct layout layout;
	float *theta, *grad;
	int micro;      /* micro-batches a training step's batch is cut into (1: none) */
	int nrep;       /* replicas in rep (threads that run parts of a pass at once, less one) */
	int rep_for;    /* the threads reserve_replicas last sized them for (0: not since reserve) */
	struct replica *rep;
	float *gown;    /* the model's own micro-batch gradient after the first round (micro > nrep + 1) */
	/* an external model: its record, its θ and gradient's memory, its child (NULL until the
	 * first request) */
	struct exec_info *ext;
	struct exec_shm shm;
	struct exec_child *child;
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

/* Read field f of the layer at path (o) into *v: an integer or a number in range, or its
 * default. */
static int get_field(const json_t *o, const char *path, const struct layer_field *f, union layer_val *v,
		     char *err)
{
	json_t *j = json_object_get(o, f->name);
	double x = f->def;
	long long k = (long long)f->def;
	int rc = f->kind == LAYER_NUM ? jget_num(o, f->name, f->min, f->max, &x)
				      : jget_int(o, f->name, (long long)f->min, (long long)f->max, &k);
	if (rc == JGET_MISSING && f->required)
		return gem_errf(err, GEM_EUSAGE, "%s.%s: missing", path, f->name);
	if (rc == JGET_TYPE)
		return gem_errf(err, GEM_EUSAGE, "%s.%s: must be %s", path, f->name,
				f->kind == LAYER_NUM ? "a number" : "an integer");
	/* a number's range is [min, max) */
	if (f->kind == LAYER_NUM && (rc == JGET_RANGE || x >= f->max))
		return gem_errf(err, GEM_EUSAGE, "%s.%s: %g is not in [%g, %g)", path, f->name, json_number_value(j),
				f->min, f->max);
	if (rc == JGET_RANGE)
		return gem_errf(err, GEM_EUSAGE, "%s.%s: %lld is out of range [%d, %d]", path, f->name,
				(long long)json_integer_value(j), (int)f->min, (int)f->max);
	if (f->kind == LAYER_NUM)
		v->f = (float)x;
	else
		v->i = (int)k;
	return 0;
}

/* Find the type of the layer at path (o) and check that every key of o is one of its fields. */
static int layer_type(const json_t *o, const char *path, const struct layer_ops **ops, char *err)
{
	const char *key, *tname, *names[LAYER_MAX_FIELDS + 32];
	size_t n = 0;
	json_t *v, *tv = json_object_get(o, "type");

	if (!json_is_object(o))
		return gem_errf(err, GEM_EUSAGE, "%s: must be an object", path);
	if (!tv)
		return gem_errf(err, GEM_EUSAGE, "%s.type: missing", path);
	if (!json_is_string(tv))
		return gem_errf(err, GEM_EUSAGE, "%s.type: must be a string", path);
	tname = json_string_value(tv);
	if (!(*ops = find_type(tname))) {
		for (const struct layer_ops *const *t = layer_all; *t && n < sizeof names / sizeof *names; t++)
			names[n++] = (*t)->name;
		gem_err_unknown(err, GEM_EUSAGE, "layer type", tname, names, n);
		gem_errprefix(err, "%s: ", path);
		return GEM_EUSAGE;
	}
	names[n++] = "type";
	if ((*ops)->block) {
		names[n++] = "layers";
		names[n++] = "shortcut";
	}
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
			gem_errprefix(err, "%s.%.64s: ", path, key);
			return GEM_EUSAGE;
		}
	}
	return 0;
}

/* The input kinds of layer_ops, in words. */
static int check_input(const struct layer *l, char *err)
{
	struct shape s = l->in;
	char have[64];
	static const char *const want[] = {
		[LAYER_IMAGE] = "an image input (C,H,W)", [LAYER_FLAT] = "a flat input",
		[LAYER_SEQ] = "a sequence input (T,C)", [LAYER_ROWS] = "a flat or a sequence input",
	};
	int kind = l->ops->input, fits = kind == LAYER_ANY || (kind == LAYER_IMAGE && s.image) ||
					 (kind == LAYER_FLAT && !s.image && !s.seq) || (kind == LAYER_SEQ && s.seq) ||
					 (kind == LAYER_ROWS && !s.image);
	if (fits)
		return 0;
	shape_name(have, sizeof have, s);
	if ((kind == LAYER_FLAT || kind == LAYER_ROWS) && s.image)
		return gem_errf(err, GEM_EUSAGE, "%s: %s needs a flat input, got an image %s; add a flatten layer",
				l->path, l->ops->name, have);
	if (!s.image && !s.seq)
		return gem_errf(err, GEM_EUSAGE, "%s: %s needs %s, got %d features", l->path, l->ops->name, want[kind],
				s.c);
	return gem_errf(err, GEM_EUSAGE, "%s: %s needs %s, got %s %s", l->path, l->ops->name, want[kind],
			s.image ? "an image" : "a sequence", have);
}

static int parse_chain(struct model *m, struct layer *l, const json_t *layers, struct layer *parent,
		       const char *key, char *err);

/* The array key of o (a block's) in *a: 1 to 1000 layers; 0 when it is missing and optional. */
static int block_list(const json_t *o, const char *path, const char *key, int required, json_t **a, char *err)
{
	*a = json_object_get(o, key);
	size_t n = json_is_array(*a) ? json_array_size(*a) : 0;
	if (!*a && !required)
		return 0;
	if (!*a)
		return gem_errf(err, GEM_EUSAGE, "%s.%s: missing", path, key);
	if (n == 0 || n > 1000)
		return gem_errf(err, GEM_EUSAGE, "%s.%s: must be an array of 1 to 1000 layers", path, key);
	return 0;
}

/* The block of l (a residual): its "layers", then its "shortcut" if it has one, each parsed
 * from l's input into l->kids. */
static int parse_block(struct model *m, struct layer *l, const json_t *o, char *err)
{
	json_t *layers, *shortcut;
	int rc;
	if (l->depth == LAYER_MAX_DEPTH)
		return gem_errf(err, GEM_EUSAGE, "%s: blocks nested more than %d deep", l->path, LAYER_MAX_DEPTH);
	if ((rc = block_list(o, l->path, "layers", 1, &layers, err)) ||
	    (rc = block_list(o, l->path, "shortcut", 0, &shortcut, err)))
		return rc;
	size_t n = json_array_size(layers), ns = shortcut ? json_array_size(shortcut) : 0;
	if (!(l->kids = calloc(n + ns, sizeof *l->kids)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	l->nkids = (int)(n + ns);
	l->nshort = (int)ns;
	if ((rc = parse_chain(m, l->kids, layers, l, "layers", err)))
		return rc;
	return ns ? parse_chain(m, l->kids + n, shortcut, l, "shortcut", err) : 0;
}

/* Check the layer at l->path (o) and compute its output shape from l->in; last: the model's
 * last layer. */
static int layer_parse(struct model *m, struct layer *l, const json_t *o, int first, int last, char *err)
{
	const struct layer_ops *ops = NULL;
	char names[64];
	int rc;

	if ((rc = layer_type(o, l->path, &ops, err)))
		return rc;
	l->ops = ops;
	l->out = l->in;
	if (ops->first && !first)
		return gem_errf(err, GEM_EUSAGE, "%s: %s must be the first layer (it reads the input's token ids)",
				l->path, ops->name);
	if ((rc = check_input(l, err)))
		return rc;
	if (ops->loss && !last)
		return gem_errf(err, GEM_EUSAGE, "%s: %s must be the last layer", l->path, ops->name);
	if (!ops->loss && last)
		return gem_errf(err, GEM_EUSAGE, "%s: the last layer must be %s, not %s", l->path,
				type_list(names, sizeof names, 1, " or "), ops->name);
	for (int f = 0; f < LAYER_MAX_FIELDS && ops->fields[f].name; f++)
		if ((rc = get_field(o, l->path, &ops->fields[f], &l->v[f], err)))
			return rc;
	if (ops->block && (rc = parse_block(m, l, o, err)))
		return rc;
	if ((rc = ops->parse(l, &m->layout, m->classes, err)))
		return rc;
	if (shape_size(l->out) > (size_t)1 << 28)
		return gem_errf(err, GEM_EUSAGE, "%s: output of %zu floats per sample is too large", l->path,
				shape_size(l->out));
	return 0;
}

/* The layers of a "layers" array into l[], from the model's input (parent NULL) or from a
 * block's (its list key: "layers" or "shortcut"). A layer needs an input gradient when one
 * before it has parameters, or, in a block, when the block does. */
static int parse_chain(struct model *m, struct layer *l, const json_t *layers, struct layer *parent,
		       const char *key, char *err)
{
	int main_list = !parent || !strcmp(key, "layers");
	struct shape s = parent ? parent->in : m->input;
	int n = (int)json_array_size(layers), params_before = parent ? parent->need_dx : 0, rc;
	for (int i = 0; i < n; i++) {
		struct layer *li = &l[i];
		int np = parent ? snprintf(li->path, sizeof li->path, "%s.%s[%d]", parent->path, key, i)
				: snprintf(li->path, sizeof li->path, "layers[%d]", i);
		int nn = !parent    ? snprintf(li->name, sizeof li->name, "%d", i)
			 : main_list ? snprintf(li->name, sizeof li->name, "%s.%d", parent->name, i)
				     : snprintf(li->name, sizeof li->name, "%s.%s.%d", parent->name, key, i);
		if (np >= (int)sizeof li->path || nn >= (int)sizeof li->name)
			return gem_errf(err, GEM_EUSAGE, "%s: nested too deep to be named", parent->path);
		li->depth = parent ? parent->depth + 1 : 0;
		if (li->depth > m->depth)
			m->depth = li->depth;
		for (int k = 0; k < LAYER_MAX_TENSORS; k++)
			li->t[k] = -1;
		li->in = s;
		li->need_dx = params_before;
		if ((rc = layer_parse(m, li, json_array_get(layers, (size_t)i), !parent && i == 0,
				      !parent && i == n - 1, err)))
			return rc;
		for (int k = 0; k < li->nkids; k++)
			li->params |= li->kids[k].params;
		params_before |= li->params;
		s = li->out;
	}
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
	m->input = (struct shape){d[0], d[1], d[2], n == 3, 0};
	return 0;
}

/* Whether θ and its gradient, n floats each, may be allocated: within MODEL_MAX_PARAMS and the
 * machine's memory (memory that is only promised would be touched at once by the zeroing, and
 * the kernel would kill a process, maybe another one, rather than refuse). */
static int params_fit(size_t n, char *err)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	double gb = (double)n * 2 * sizeof(float) / 1e9;
	double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
	if (n > MODEL_MAX_PARAMS)
		return gem_errf(err, GEM_EUSAGE, "%zu parameters (%.1f GB with their gradient): more "
				"than gem's limit of %zu", n, gb, MODEL_MAX_PARAMS);
	if (mem > 0 && gb * 1e9 > mem)
		return gem_errf(err, GEM_EUSAGE, "%zu parameters (%.1f GB with their gradient): more "
				"than this machine's memory (%.1f GB)", n, gb, mem / 1e9);
	return 0;
}

/* m's shape as an external model's record says, θ and the gradient in its shared memory. */
static int ext_shape(struct model *m, char *err)
{
	const struct exec_info *e = m->ext;
	int rc;
	snprintf(m->name, sizeof m->name, "%s", e->name);
	m->layout = e->layout;
	m->classes = e->classes;
	m->labels = e->positions ? e->positions : 1;
	m->input = (struct shape){1, 1, 1, 0, 0};
	if ((rc = params_fit(m->layout.total, err)) < 0)
		return rc;
	if (!m->shm.theta && (rc = exec_shm_size(&m->shm, m->layout.total, err)) < 0)
		return rc;
	m->theta = m->shm.theta;
	m->grad = m->shm.grad;
	return 0;
}

static struct model *ext_new(char *err)
{
	struct model *m = calloc(1, sizeof *m);
	if (m && !(m->ext = calloc(1, sizeof *m->ext))) {
		free(m);
		m = NULL;
	}
	if (!m)
		gem_errf(err, GEM_ENOMEM, "out of memory");
	else {
		m->shm.fd = -1;
		m->micro = 1;
	}
	return m;
}

static int ext_from_json(const json_t *spec, struct model **out, char *err)
{
	struct model *m = ext_new(err);
	int rc;
	if (!m)
		return GEM_ENOMEM;
	if ((rc = exec_info_from_json(spec, m->ext, err)) < 0 || (rc = exec_shm_create(&m->shm, err)) < 0 ||
	    (rc = ext_shape(m, err)) < 0) {
		model_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int model_from_exec(const char *cmd, double timeout, json_t **spec, struct model **out, char *err)
{
	struct model *m = ext_new(err);
	int rc;
	*out = NULL;
	*spec = NULL;
	if (!m)
		return GEM_ENOMEM;
	if (!*cmd || strlen(cmd) >= sizeof m->ext->cmd) {
		model_free(m);
		return gem_errf(err, GEM_EUSAGE, "--model %s: a command of 1 to %d bytes", EXEC_PREFIX,
				(int)sizeof m->ext->cmd - 1);
	}
	snprintf(m->ext->cmd, sizeof m->ext->cmd, "%s", cmd);
	m->ext->timeout = timeout;
	if ((rc = exec_shm_create(&m->shm, err)) < 0 || (rc = exec_start(m->ext, &m->shm, &m->child, err)) < 0 ||
	    (rc = ext_shape(m, err)) < 0) {
		model_free(m);
		return rc;
	}
	if (!(*spec = exec_info_to_json(m->ext))) {
		model_free(m);
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	*out = m;
	return 0;
}

const struct exec_info *model_exec_info(const struct model *m)
{
	return m->ext;
}

/* The child of an external model, started at its first request. */
static int ext_child(struct model *m, char *err)
{
	int rc;
	if (m->child)
		return 0;
	if ((rc = exec_shm_reserve(&m->shm, m->cap > 0 ? m->cap : 1, err)) < 0)
		return rc;
	return exec_start(m->ext, &m->shm, &m->child, err);
}

int model_init(struct model *m, uint64_t seed, char *err)
{
	int rc;
	if (!m->ext) {
		model_init_params(m, seed);
		return 0;
	}
	if ((rc = ext_child(m, err)) < 0 || (rc = exec_init(m->child, seed, err)) < 0)
		return rc;
	for (size_t i = 0; i < m->layout.total; i++)
		if (!isfinite(m->theta[i]))
			return gem_errf(err, GEM_EUSAGE, "%s: request init: θ₀[%zu] is not finite",
					exec_label(m->child), i);
	return 0;
}

int model_train_ext(struct model *m, const uint64_t *idx, const struct exec_batch *b, float *loss, char *err)
{
	int rc;
	if (!m->ext || b->n < 1 || b->n > m->cap)
		return gem_errf(err, GEM_EUSAGE, "model_train_ext: a batch of %d", b->n);
	if ((rc = ext_child(m, err)) < 0)
		return rc;
	memcpy(m->shm.index, idx, sizeof *idx * (size_t)b->n);
	if ((rc = exec_grad(m->child, b, loss, err)) < 0)
		return rc;
	/* one pass, vectorised: the sum of 0·g is NaN exactly when some g is not finite */
	float z = 0;
	for (size_t i = 0; i < m->layout.total; i++)
		z += 0.0f * m->grad[i];
	if (z != 0.0f || !isfinite(z)) {
		size_t i = 0;
		while (i < m->layout.total && isfinite(m->grad[i]))
			i++;
		return gem_errf(err, GEM_EUSAGE, "%s: request grad (worker %d, position %llu): the "
				"gradient's element %zu is not finite", exec_label(m->child), b->worker,
				(unsigned long long)b->position, i);
	}
	return 0;
}

int model_eval_ext(struct model *m, double *loss, uint64_t *count, long long *correct, char *err)
{
	int rc;
	if (!m->ext)
		return gem_errf(err, GEM_EUSAGE, "model_eval_ext: not an external model");
	if ((rc = ext_child(m, err)) < 0)
		return rc;
	return exec_eval(m->child, loss, count, correct, err);
}

const float *model_predict_ext(struct model *m, const uint16_t *tokens, int n, char *err)
{
	if (!m->ext || n < 1 || n > m->labels) {
		gem_errf(err, GEM_EUSAGE, "predict: %d tokens for a window of %d", n, m->labels);
		return NULL;
	}
	if (ext_child(m, err) < 0 || exec_shm_reserve(&m->shm, n, err) < 0 ||
	    (m->shm.cap > m->cap && exec_remap(m->child, &m->shm, err) < 0))
		return NULL;
	if (m->shm.cap > m->cap)
		m->cap = m->shm.cap;
	for (int i = 0; i < n; i++)
		m->shm.index[i] = tokens[i];
	if (exec_predict(m->child, n, err) < 0)
		return NULL;
	for (int k = 0; k < m->classes; k++)
		if (isnan(m->grad[k])) {
			gem_errf(err, GEM_EUSAGE, "%s: request predict: log-probability %d is NaN",
				 exec_label(m->child), k);
			return NULL;
		}
	return m->grad;
}

int model_from_json(const json_t *spec, struct model **out, char *err)
{
	static const char *const keys[] = {"name", "description", "input", "classes", "layers"};
	struct model *m;
	json_t *v, *layers, *cl;
	int rc;

	*out = NULL;
	if (!json_is_object(spec))
		return gem_errf(err, GEM_EUSAGE, "model spec: must be a JSON object");
	if (json_object_get(spec, "exec"))
		return ext_from_json(spec, out, err);
	if ((rc = jget_only(spec, keys, sizeof keys / sizeof *keys, "field of a model spec", err)) < 0)
		return rc;
	if (!(m = calloc(1, sizeof *m)))
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	m->micro = 1;
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
	if (!cl || !json_is_integer(cl) || json_integer_value(cl) < 2 || json_integer_value(cl) > MODEL_MAX_CLASSES) {
		rc = gem_errf(err, GEM_EUSAGE, "classes: %s", cl ? "must be an integer in [2, 65536]" : "missing");
		goto fail;
	}
	m->classes = (int)json_integer_value(cl);
	layers = json_object_get(spec, "layers");
	if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > 1000) {
		rc = gem_errf(err, GEM_EUSAGE, "layers: %s", layers ? "must be a non-empty array" : "missing");
		goto fail;
	}
	m->nlayers = (int)json_array_size(layers);
	if (!(m->own.l = calloc((size_t)m->nlayers, sizeof *m->own.l))) {
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = parse_chain(m, m->own.l, layers, NULL, "layers", err)))
		goto fail;
	m->labels = shape_rows(m->own.l[m->nlayers - 1].in);
	m->vocab = m->own.l[0].ops->first ? m->own.l[0].v[0].i : 0;
	if ((rc = params_fit(m->layout.total, err)))
		goto fail;
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

/* Free the batch buffers of l[0..n) and of their blocks. */
static void free_chain(struct layer *l, int n)
{
	for (int i = 0; i < n; i++) {
		free(l[i].y);
		free(l[i].aux);
		l[i].y = NULL;
		l[i].aux = NULL;
		free_chain(l[i].kids, l[i].nkids);
	}
}

/* Free the blocks of l[0..n) (their layers). */
static void free_kids(struct layer *l, int n)
{
	for (int i = 0; l && i < n; i++) {
		free_kids(l[i].kids, l[i].nkids);
		free(l[i].kids);
	}
}

/* Free r's batch buffers (its layers stay). */
static void free_replica(const struct model *m, struct replica *r)
{
	if (r->l)
		free_chain(r->l, m->nlayers);
	free(r->xin);
	for (int i = 0; i < 2 * (LAYER_MAX_DEPTH + 1); i++)
		free(r->g[i]);
	free(r->dcol);
	free(r->scratch);
	free(r->grad);
	*r = (struct replica){.l = r->l};
}

/* Free the replicas: their buffers and their copies of the layers. */
static void free_replicas(struct model *m)
{
	for (int j = 0; j < m->nrep; j++) {
		struct replica *r = &m->rep[j];
		free_replica(m, r);
		free_kids(r->l, m->nlayers);
		free(r->l);
	}
	free(m->rep);
	m->rep = NULL;
	m->nrep = 0;
	m->rep_for = 0;
}

static void free_buffers(struct model *m)
{
	free_replicas(m);
	free(m->gown);
	m->gown = NULL;
	free_replica(m, &m->own);
	m->cap = 0;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	free_buffers(m);
	free_kids(m->own.l, m->nlayers);
	free(m->own.l);
	if (m->ext) {
		exec_stop(m->child);
		exec_shm_close(&m->shm);
		free(m->ext);
	} else {
		free(m->theta);
		free(m->grad);
	}
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

float *model_input_alloc(const struct model *m, size_t rows)
{
	return layer_falloc(rows * model_input_size(m), sizeof(float));
}

int model_labels(const struct model *m)
{
	return m->labels;
}

int model_fits(const struct model *m, const struct dataset *d, char *err)
{
	if (m->ext || d->external) {
		if (!m->ext)
			return gem_errf(err, GEM_EUSAGE, "the data is an external model's own (%s), the model "
					"gem's", DATA_MODEL_PREFIX);
		if (!d->external)
			return gem_errf(err, GEM_EUSAGE, "an external model trains on its own data, not on gem's "
					"(gem-exec(7))");
		if (d->seq != m->ext->positions)
			return gem_errf(err, GEM_EUSAGE, "the data's windows (%d) are not the external model's (%d)",
					d->seq, m->ext->positions);
		return 0;
	}
	if (d->text && (!m->vocab || m->labels == 1))
		return gem_errf(err, GEM_EUSAGE,
				"the data is a text, the model (%zu inputs, %d classes) not a sequence model (an "
				"embedding first, a loss at every position)",
				model_input_size(m), model_classes(m));
	if (d->text && !d->seq)
		return gem_errf(err, GEM_EUSAGE, "the text is not cut into windows of the model's %zu positions",
				model_input_size(m));
	if (d->seq) {
		if ((size_t)d->seq != model_input_size(m) || m->labels != d->seq || !m->vocab)
			return gem_errf(err, GEM_EUSAGE,
					"the text (windows of %d bytes) does not fit the model (%zu inputs, a loss at "
					"%d positions%s)",
					d->seq, model_input_size(m), m->labels, m->vocab ? "" : ", no embedding");
		if (d->classes > m->vocab || d->classes > m->classes)
			return gem_errf(err, GEM_EUSAGE,
					"the text has bytes up to %d, beyond the model's vocabulary (%d tokens in, %d "
					"classes out)",
					d->classes - 1, m->vocab, m->classes);
		return 0;
	}
	if (d->dim < 1 || (size_t)d->dim != model_input_size(m) || d->classes > model_classes(m) || m->labels != 1)
		return gem_errf(err, GEM_EUSAGE,
				"the data (%d values, %d classes per sample) does not fit the model (%zu "
				"inputs, %d classes%s)",
				d->dim, d->classes, model_input_size(m), model_classes(m),
				m->labels != 1 ? " at every position of a sequence" : "");
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

/* The tensors of l[0..n) and of their blocks, in layout order. */
static void init_chain(const struct layer *l, int n, const struct layout *lo, float *theta, struct rng *r)
{
	for (int i = 0; i < n; i++) {
		if (l[i].nkids)
			init_chain(l[i].kids, l[i].nkids, lo, theta, r);
		else if (l[i].ops->init)
			l[i].ops->init(&l[i], lo, theta, r);
		else if (l[i].t[0] >= 0)
			layer_init_default(&l[i], lo, theta, r);
	}
}

void model_init_params(struct model *m, uint64_t seed)
{
	struct rng r;
	if (m->ext)
		return;
	rng_seed(&r, seed, RNG_MODEL_INIT);
	init_chain(m->own.l, m->nlayers, &m->layout, m->theta, &r);
}

/* Buffers of l[0..n) and of their blocks for a batch of B; *gmax rises to the largest output.
 * 0, or -1 when out of memory. */
static int reserve_chain(struct layer *l, int n, int B, size_t *gmax, struct layer_need *need)
{
	int fail = 0;
	for (int i = 0; i < n; i++) {
		if (shape_size(l[i].out) > *gmax)
			*gmax = shape_size(l[i].out);
		if (!l[i].view)
			fail |= !(l[i].y = layer_falloc((size_t)B * shape_size(l[i].out), sizeof(float)));
		if (l[i].ops->reserve)
			fail |= l[i].ops->reserve(&l[i], B, need) < 0;
		fail |= reserve_chain(l[i].kids, l[i].nkids, B, gmax, need) < 0;
	}
	return fail ? -1 : 0;
}

/* A copy of the layer tree l[0..n) without its batch buffers, for a replica; NULL when out of
 * memory. */
static struct layer *copy_chain(const struct layer *l, int n)
{
	struct layer *c = calloc((size_t)n, sizeof *c);
	if (!c)
		return NULL;
	memcpy(c, l, (size_t)n * sizeof *c);
	for (int i = 0; i < n; i++) {
		c[i].y = NULL;
		c[i].aux = NULL;
		c[i].x = NULL;
		c[i].kids = NULL;
	}
	for (int i = 0; i < n; i++)
		if (l[i].nkids && !(c[i].kids = copy_chain(l[i].kids, l[i].nkids))) {
			free_kids(c, n);
			free(c);
			return NULL;
		}
	return c;
}

/* r's buffers for a batch of B through the layers r->l: the input transposed, the layers' own,
 * the gradient ping-pong and the scratch they ask for. 0, or -1 when out of memory (what was
 * allocated stays in r for the caller to free). */
static int reserve_replica(struct model *m, struct replica *r, int batch)
{
	size_t B = (size_t)batch, gmax = shape_size(m->input);
	struct layer_need need = {0, 0};
	int fail = 0;
	if (m->input.image && m->input.c > 1)
		fail |= !(r->xin = layer_falloc(B * shape_size(m->input), sizeof(float)));
	fail |= reserve_chain(r->l, m->nlayers, batch, &gmax, &need) < 0;
	for (int i = 0; i < 2 * (m->depth + 1); i++)
		fail |= !(r->g[i] = layer_falloc(B * gmax, sizeof(float)));
	if (need.dcol)
		fail |= !(r->dcol = layer_falloc(need.dcol, sizeof(float)));
	if (need.scratch)
		fail |= !(r->scratch = layer_falloc(need.scratch, sizeof(float)));
	return fail ? -1 : 0;
}

/* Part j's replica: the model's own for 0. */
static const struct replica *part_replica(const struct model *m, int j)
{
	return j ? &m->rep[j - 1] : &m->own;
}

/* The threads that run a pass's parts at once: the micro-batches of a training step, or the
 * parts of an evaluation's batch. */
static int parts_wanted(const struct model *m)
{
	int threads = pool_threads();
	return m->micro > 1 && m->micro < threads ? m->micro : threads;
}

/* Replicas for R − 1 more parts at once, each for 1/R of the reserved batch (a micro-batch is
 * no larger), made when the first pass needs them, when the threads are known. Out of memory:
 * none (not tried again before model_reserve), and the parts run one after another, to the
 * same floats. */
static void reserve_replicas(struct model *m)
{
	int R = parts_wanted(m), mb = (m->cap + R - 1) / R;
	if (R == m->rep_for || pool_in_part()) /* a pass inside a pool's part (gem-sim's) runs alone */
		return;
	free_replicas(m);
	m->rep_for = R;
	if (R < 2 || !(m->rep = calloc((size_t)R - 1, sizeof *m->rep)))
		return;
	for (int j = 0; j < R - 1; j++) {
		struct replica *r = &m->rep[j];
		m->nrep = j + 1;
		if (!(r->l = copy_chain(m->own.l, m->nlayers)) || reserve_replica(m, r, mb) < 0 ||
		    !(r->grad = layer_falloc(m->layout.total, sizeof(float)))) {
			free_replicas(m);
			m->rep_for = R;
			return;
		}
	}
}

int model_reserve(struct model *m, int batch, char *err)
{
	int fail;
	if (batch < 1)
		return gem_errf(err, GEM_EUSAGE, "batch size %d: must be positive", batch);
	if (batch <= m->cap)
		return 0;
	if (m->ext) {
		int rc = exec_shm_reserve(&m->shm, batch, err);
		if (rc == 0 && m->child)
			rc = exec_remap(m->child, &m->shm, err);
		if (rc == 0)
			m->cap = batch;
		return rc;
	}
	free_buffers(m);
	fail = reserve_replica(m, &m->own, batch) < 0;
	/* the model's own micro-batches after the first; the replicas wait for the first step,
	 * when the threads are known */
	if (m->micro > 1)
		fail |= !(m->gown = layer_falloc(m->layout.total, sizeof(float)));
	if (fail) {
		free_buffers(m);
		return gem_errf(err, GEM_ENOMEM, "out of memory for a batch of %d", batch);
	}
	m->cap = batch;
	return 0;
}

int model_set_micro(struct model *m, int micro, char *err)
{
	if (micro < 1 || micro > MODEL_MAX_MICRO)
		return gem_errf(err, GEM_EUSAGE, "micro-batches: %d is not in [1, %d]", micro, MODEL_MAX_MICRO);
	if (m->ext && micro > 1)
		return gem_errf(err, GEM_EUSAGE, "micro-batches: an external model cuts its batches itself");
	if (micro == m->micro)
		return 0;
	free_buffers(m); /* the next model_reserve sizes the replicas */
	m->micro = micro;
	return 0;
}

/* The passes below run every layer through its ops (layer_ops.c), which say each layer's shapes:
 *   B = batch (n samples), C = channels, H, W = image plane, IN/OUT = features,
 *   OC/OH/OW = a conv2d's output channels and plane, T = positions of a sequence.
 * Images travel as (C,B,H,W), flat activations as (B,IN), sequences as (B,T,C); the input
 * arrives as NCHW (a sequence model's: B × T token ids). */

/* A pass over n samples with the model's parameters and r's buffers, its gradient into grad. */
static struct layer_pass pass_of(struct model *m, const struct replica *r, float *grad, int n)
{
	struct layer_pass p = {.B = n, .theta = m->theta, .grad = grad, .lo = &m->layout,
			       .dcol = r->dcol, .scratch = r->scratch};
	memcpy(p.gbuf, r->g, sizeof p.gbuf);
	return p;
}

/* Run r's layers on n samples; returns the log-probabilities (n·labels, classes) and puts the
 * summed loss in *loss (0 if y is NULL). Train mode draws dropout masks from rng; eval mode
 * skips them. */
static const float *forward(struct model *m, const struct replica *r, const float *x, const uint16_t *y, int n,
			    struct rng *rng, double *loss)
{
	struct layer_pass p = pass_of(m, r, NULL, n);
	const float *h = x;
	p.r = rng;
	p.label = y;
	if (r->xin) {
		/* NCHW → (C,B,H,W) */
		size_t hw = (size_t)m->input.h * m->input.w;
		for (int b = 0; b < n; b++)
			for (int c = 0; c < m->input.c; c++)
				memcpy(r->xin + ((size_t)c * n + b) * hw, x + ((size_t)b * m->input.c + c) * hw,
				       sizeof(float) * hw);
		h = r->xin;
	}
	h = layer_chain_forward(r->l, m->nlayers, h, &p);
	*loss = p.loss;
	return h;
}

/* Forward and backward on n samples through r, the gradient of the loss summed over them and
 * scaled by `scale` into grad; returns the summed loss. */
static double train_on(struct model *m, const struct replica *r, float *grad, const float *x, const uint16_t *y,
		       int n, float scale, struct rng *rng)
{
	double loss = 0;
	forward(m, r, x, y, n, rng, &loss);
	/* from the loss down to the lowest layer with parameters */
	struct layer_pass p = pass_of(m, r, grad, n);
	p.label = y;
	p.scale = scale;
	layer_chain_backward(r->l, m->nlayers, r->g[0], r->g[1], &p);
	return loss;
}

/* One round of a step's micro-batches: micro-batch k0 + j on replica j (0: the model's own),
 * one a thread. */
struct micro_round {
	struct model *m;
	const float *x;
	const uint16_t *y;
	int n, k0;
	float scale;
	uint64_t seed;
	double loss[MODEL_MAX_MICRO];
};

/* Part k of n samples cut into `parts`: [n·k/parts, n·(k+1)/parts) as *lo and *cnt. */
static void cut(int n, int parts, int k, int *lo, int *cnt)
{
	*lo = (int)((long)n * k / parts);
	*cnt = (int)((long)n * (k + 1) / parts) - *lo;
}

static void micro_part(void *arg, int j, int parts)
{
	struct micro_round *w = arg;
	struct model *m = w->m;
	int k = w->k0 + j, lo, cnt;
	const struct replica *r = part_replica(m, j);
	/* the first round's first micro-batch writes the model's gradient; the others write their
	 * own, which micro_add adds to it */
	float *grad = j ? r->grad : w->k0 ? m->gown : m->grad;
	struct rng rng;
	(void)parts;
	cut(w->n, m->micro, k, &lo, &cnt);
	rng_seed(&rng, w->seed, RNG_MICROBATCH + (uint64_t)k);
	w->loss[k] = train_on(m, r, grad, w->x + (size_t)lo * shape_size(m->input), w->y + (size_t)lo * m->labels,
			      cnt, w->scale, &rng);
}

/* The model's gradient plus those of the round's micro-batches, in their order (the first
 * round's first is the model's gradient itself). */
struct micro_sum {
	struct model *m;
	int first, parts;
};

static void micro_add(void *arg, size_t lo, size_t hi)
{
	struct micro_sum *s = arg;
	struct model *m = s->m;
	for (int j = s->first; j < s->parts; j++) {
		const float *g = j ? part_replica(m, j)->grad : m->gown;
		for (size_t i = lo; i < hi; i++)
			m->grad[i] += g[i];
	}
}

float model_train_step(struct model *m, const float *x, const uint16_t *y, int n, struct rng *r)
{
	double loss = 0;
	if (n < 1 || n > m->cap || !r || m->ext)
		return NAN;
	float scale = 1.0f / ((float)n * (float)m->labels);
	if (m->micro > 1 && n >= m->micro) {
		reserve_replicas(m);
		/* micro-batch k draws its dropout from its own stream, so that which thread runs it
		 * and when does not change what it draws */
		struct micro_round w = {.m = m, .x = x, .y = y, .n = n, .scale = scale};
		w.seed = (uint64_t)rng_u32(r) << 32;
		w.seed |= rng_u32(r);
		for (w.k0 = 0; w.k0 < m->micro; w.k0 += m->nrep + 1) {
			int parts = m->micro - w.k0 < m->nrep + 1 ? m->micro - w.k0 : m->nrep + 1;
			struct micro_sum s = {m, w.k0 ? 0 : 1, parts};
			pool_run(micro_part, &w, parts);
			if (s.first < parts)
				pool_for(m->layout.total, 16, 4096, micro_add, &s);
		}
		for (int k = 0; k < m->micro; k++)
			loss += w.loss[k];
	} else {
		loss = train_on(m, &m->own, m->grad, x, y, n, scale, r);
	}
	return (float)(loss / ((double)n * m->labels));
}

/* Count the right ones of rows (n·labels) of log-probabilities against y into *right, and write
 * the predicted classes to pred (each if not NULL). */
static void score(const struct model *m, const float *logp, const uint16_t *y, long rows, long *right,
		  uint16_t *pred)
{
	for (long b = 0; b < rows; b++) {
		const float *p = logp + (size_t)b * m->classes;
		int best = 0;
		for (int k = 1; k < m->classes; k++)
			if (p[k] > p[best])
				best = k;
		if (pred)
			pred[b] = (uint16_t)best;
		if (y && best == y[b])
			(*right)++;
	}
}

/* An evaluation's batch in parts, part j on replica j (0: the model's own), one a thread: each
 * sample's log-probabilities are the whole batch's, and the loss is summed after, in order. */
struct eval_split {
	struct model *m;
	const float *x;
	int n;
	const float *logp[POOL_MAX_THREADS];
};

static void eval_part(void *arg, int j, int parts)
{
	struct eval_split *w = arg;
	struct model *m = w->m;
	double none;
	int lo, cnt;
	cut(w->n, parts, j, &lo, &cnt);
	w->logp[j] = forward(m, part_replica(m, j), w->x + (size_t)lo * shape_size(m->input), NULL, cnt, NULL,
			     &none);
}

double model_evaluate(struct model *m, const float *x, const uint16_t *y, int n, long *correct,
		      uint16_t *pred)
{
	double loss = 0;
	long right = 0;
	if (n < 1 || n > m->cap || m->ext)
		return NAN;
	reserve_replicas(m);
	if (m->nrep && n > m->nrep) {
		struct eval_split w = {.m = m, .x = x, .n = n};
		int parts = m->nrep + 1;
		pool_run(eval_part, &w, parts);
		for (int j = 0, lo, cnt; j < parts; j++) {
			cut(n, parts, j, &lo, &cnt);
			size_t at = (size_t)lo * m->labels;
			if (y)
				loss = nll_sum(w.logp[j], y + at, cnt * m->labels, m->classes, loss);
			score(m, w.logp[j], y ? y + at : NULL, (long)cnt * m->labels, &right, pred ? pred + at : NULL);
		}
	} else {
		const float *logp = forward(m, &m->own, x, y, n, NULL, &loss);
		score(m, logp, y, (long)n * m->labels, &right, pred);
	}
	if (correct && y)
		*correct += right;
	return loss;
}

const float *model_predict(struct model *m, const float *x, int n)
{
	double loss;
	if (n < 1 || n > m->cap || m->ext)
		return NULL;
	return forward(m, &m->own, x, NULL, n, NULL, &loss);
}
