/* rule: configs, workers, versions and checkpoints common to every rule; the rules' arithmetic
 * lives in lib/rules/<name>.c behind struct rule_ops (rules/impl.h), each with its descriptor. */
#include "rules/rule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpulevel.h"
#include "base/err.h"
#include "rules/impl.h"

/* Worker ids are small integers the server hands out; this bounds the worker table. */
#define RULE_MAX_WORKER (1 << 20)

static const struct rule_ops *const rule_all[] = {
	&rule_gem_ops, &rule_downpour_ops, &rule_dynsgd_ops, &rule_easgd_ops, &rule_dcasgd_ops,
	&rule_sync_ops, &rule_dma_ops, &rule_diloco_ops, &rule_async_diloco_ops,
};
#define RULE_NRULES ((int)(sizeof rule_all / sizeof *rule_all))

static int rule_forced = -1; /* tests: a level forced; -1 asks the CPU */

static int rule_simd_available(void)
{
#ifdef RULE_X86
	return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
	return 0;
#endif
}

int rule_simd(int level)
{
	return cpulevel_force(&rule_forced, rule_simd_available(), level);
}

int rule_avx2(void)
{
	return cpulevel_get(&rule_forced, rule_simd_available()) == 1;
}

/* RULE_F_WORD: an int stored in JSON as the word of that index in the field's words */
enum { RULE_F_FLOAT, RULE_F_INT, RULE_F_BOOL, RULE_F_WORD };

/* The fields of run.json's "rule" object and the values allowed. lr, momentum and nworkers
 * belong to every rule; a rule's descriptor names the others it uses. */
static const struct rule_field {
	const char *name;
	int type;
	size_t off;
	double lo, hi;
	int lo_open, hi_open;
	const char *range; /* for messages; RULE_F_WORD: its words, space-separated */
} rule_fields[] = {
#define RULE_FIELD(f) .name = #f, .off = offsetof(struct rule_config, f)
	{RULE_FIELD(lr), .type = RULE_F_FLOAT, .lo = 0, .hi = 1e6, .lo_open = 1,
	 .range = "in (0, 1e6]"},
	{RULE_FIELD(momentum), .type = RULE_F_FLOAT, .lo = 0, .hi = 1, .hi_open = 1,
	 .range = "in [0, 1)"},
	{RULE_FIELD(nworkers), .type = RULE_F_INT, .lo = 0, .hi = 1 << 20,
	 .range = "an integer in [0, 1048576]"},
	{RULE_FIELD(kappa), .type = RULE_F_FLOAT, .lo = 0, .hi = 1e6, .range = "in [0, 1e6]"},
	{RULE_FIELD(pi_max), .type = RULE_F_FLOAT, .lo = 0, .hi = 1e6, .range = "in [0, 1e6]"},
	{RULE_FIELD(eps), .type = RULE_F_FLOAT, .lo = 0, .hi = 1, .range = "in [0, 1]"},
	{RULE_FIELD(tensor_stats), .type = RULE_F_BOOL, .lo = 0, .hi = 1, .range = "true or false"},
	{RULE_FIELD(gem_ref), .type = RULE_F_WORD, .lo = 0, .hi = 1, .range = RULE_GEM_REFS},
	{RULE_FIELD(state_precision), .type = RULE_F_WORD, .lo = 0, .hi = 1,
	 .range = RULE_STATE_PRECISIONS},
	{RULE_FIELD(window), .type = RULE_F_INT, .lo = 1, .hi = 1 << 20,
	 .range = "an integer in [1, 1048576]"},
	{RULE_FIELD(alpha), .type = RULE_F_FLOAT, .lo = 0, .hi = 1,
	 .range = "in [0, 1] (0: 0.9/n)"},
	{RULE_FIELD(lambda_dc), .type = RULE_F_FLOAT, .lo = 0, .hi = 1e6, .range = "in [0, 1e6]"},
	{RULE_FIELD(outer_lr), .type = RULE_F_FLOAT, .lo = 0, .hi = 1e6, .lo_open = 1,
	 .range = "in (0, 1e6]"},
	{RULE_FIELD(outer_momentum), .type = RULE_F_FLOAT, .lo = 0, .hi = 1, .hi_open = 1,
	 .range = "in [0, 1)"},
	{RULE_FIELD(delayed_nesterov), .type = RULE_F_INT, .lo = 0, .hi = 1 << 20,
	 .range = "an integer in [0, 1048576] (0: off)"},
	{RULE_FIELD(dynamic_local_updates), .type = RULE_F_BOOL, .lo = 0, .hi = 1,
	 .range = "true or false"},
	{RULE_FIELD(fragments), .type = RULE_F_INT, .lo = 1, .hi = 1 << 20,
	 .range = "an integer in [1, 1048576]"},
	{RULE_FIELD(mix), .type = RULE_F_FLOAT, .lo = 0, .hi = 1, .hi_open = 1, .range = "in [0, 1)"},
	{RULE_FIELD(overlap), .type = RULE_F_INT, .lo = 0, .hi = 1 << 20,
	 .range = "an integer in [0, 1048576]"},
#undef RULE_FIELD
};
#define RULE_NFIELDS ((int)(sizeof rule_fields / sizeof *rule_fields))

static int rule_index(const char *name)
{
	for (int i = 0; i < RULE_NRULES; i++)
		if (!strcmp(name, rule_all[i]->desc.name))
			return i;
	return -1;
}

int rule_err_unknown(char *err, const char *name)
{
	const char *names[RULE_NRULES];
	for (int i = 0; i < RULE_NRULES; i++)
		names[i] = rule_all[i]->desc.name;
	return gem_err_unknown(err, GEM_EUSAGE, "rule", name, names, RULE_NRULES);
}

const struct rule_desc *rule_describe(const char *name)
{
	int i = name ? rule_index(name) : -1;
	return i < 0 ? NULL : &rule_all[i]->desc;
}

/* Whether the field called name belongs to rule d: every rule's, or one of the words of
 * d->fields. */
static int rule_uses(const struct rule_desc *d, const char *name)
{
	size_t len = strlen(name);
	const char *p = d->fields;
	if (!strcmp(name, "lr") || !strcmp(name, "momentum") || !strcmp(name, "nworkers"))
		return 1;
	while ((p = strstr(p, name))) {
		if ((p == d->fields || p[-1] == ' ') && (p[len] == ' ' || p[len] == 0))
			return 1;
		p += len;
	}
	return 0;
}

static double rule_field_get(const struct rule_config *c, const struct rule_field *f)
{
	const char *p = (const char *)c + f->off;
	if (f->type == RULE_F_FLOAT)
		return *(const float *)p;
	return *(const int *)p;
}

static void rule_field_set(struct rule_config *c, const struct rule_field *f, double v)
{
	char *p = (char *)c + f->off;
	if (f->type == RULE_F_FLOAT)
		*(float *)p = (float)v;
	else
		*(int *)p = (int)v;
}

/* The index of word w in the space-separated list words; -1 if it is not one of them. */
static int rule_word_index(const char *words, const char *w)
{
	size_t len = strlen(w);
	int i = 0;
	for (const char *p = words; *p; i++) {
		size_t n = strcspn(p, " ");
		if (n == len && !strncmp(p, w, len))
			return i;
		p += n;
		p += *p == ' ';
	}
	return -1;
}

/* Word i of the space-separated list words into buf ("" if there is none). */
static const char *rule_word_at(const char *words, int i, char *buf, size_t cap)
{
	const char *p = words;
	size_t n;
	for (; i > 0 && *p; i--) {
		p += strcspn(p, " ");
		p += *p == ' ';
	}
	n = strcspn(p, " ");
	snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
	return buf;
}

int rule_gem_ref_parse(const char *name)
{
	return rule_word_index(RULE_GEM_REFS, name);
}

int rule_state_precision_parse(const char *name)
{
	return rule_word_index(RULE_STATE_PRECISIONS, name);
}

static int rule_field_ok(const struct rule_field *f, double v)
{
	if (!(f->lo_open ? v > f->lo : v >= f->lo) || !(f->hi_open ? v < f->hi : v <= f->hi))
		return 0;
	return f->type == RULE_F_FLOAT || v == floor(v);
}

int rule_config_default(const char *name, struct rule_config *c, char *err)
{
	if (!name || rule_index(name) < 0)
		return rule_err_unknown(err, name ? name : "");
	memset(c, 0, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", name);
	c->lr = 0.01f;
	c->momentum = 0.9f;
	c->kappa = 1;
	c->pi_max = 5;
	c->eps = 1e-12f;
	c->tensor_stats = 1;
	c->window = rule_describe(name)->window;
	c->alpha = 0;
	c->lambda_dc = 0.04f; /* Zheng et al. 2017, DC-ASGD-c */
	c->outer_lr = RULE_OUTER_LR;
	/* DiLoCo's; gem's proxy over cycles has none of its own (doc/rules.md, "GEM on
	 * pseudo-gradients") */
	c->outer_momentum = rule_describe(name)->outer_window ? 0 : 0.9f;
	c->fragments = 1;
	c->nworkers = 0;
	return 0;
}

void rule_config_workers(struct rule_config *c, int outer_lr_given, int delayed_given)
{
	int ri = rule_index(c->name);
	if (ri < 0 || c->nworkers < 2 || !rule_uses(&rule_all[ri]->desc, "delayed_nesterov"))
		return;
	if (!outer_lr_given)
		c->outer_lr = RULE_OUTER_LR / (float)c->nworkers;
	if (!delayed_given && c->fragments == 1)
		c->delayed_nesterov = c->nworkers;
}

const char *rule_step_options(const struct rule_config *c)
{
	int ri = rule_index(c->name);
	if (ri >= 0 && rule_uses(&rule_all[ri]->desc, "delayed_nesterov"))
		return "a lower --lr or --outer-lr (at most 0.7/N for N workers), and "
		       "--delayed-nesterov N (both gem-init's defaults with --workers N)";
	if (ri >= 0 && rule_uses(&rule_all[ri]->desc, "outer_lr"))
		return "a lower --lr or --outer-lr";
	return "a lower --lr";
}

enum rule_sends rule_sends_of(const struct rule_config *c)
{
	const struct rule_desc *d = rule_describe(c->name);
	return d->outer_window && c->window > 1 ? RULE_SENDS_OUTER : d->sends;
}

int rule_config_check(const struct rule_config *c, char *err)
{
	int ri;
	if (memchr(c->name, 0, sizeof c->name) == NULL || (ri = rule_index(c->name)) < 0)
		return gem_errf(err, GEM_EUSAGE, "name: unknown rule (known: %s)", RULE_NAMES);
	for (int i = 0; i < RULE_NFIELDS; i++) {
		const struct rule_field *f = &rule_fields[i];
		double v = rule_field_get(c, f);
		if (!rule_field_ok(f, v))
			return gem_errf(err, GEM_EUSAGE, "%s: %g is not %s%s", f->name, v,
					f->type == RULE_F_WORD ? "the index of one of " : "", f->range);
	}
	if (rule_all[ri]->desc.outer_window && c->window == 1 && c->outer_momentum != 0)
		return gem_errf(err, GEM_EUSAGE,
				"outer_momentum: rule %s uses it only with a window of inner steps "
				"(--window H, H > 1)", rule_all[ri]->desc.name);
	/* the passes of the other rules go over all of θ */
	if ((c->fragments != 1 || c->mix != 0 || c->overlap) &&
	    !rule_uses(&rule_all[ri]->desc, "fragments"))
		return gem_errf(err, GEM_EUSAGE, "%s: rule %s does not use it",
				c->fragments != 1 ? "fragments" : c->mix != 0 ? "mix" : "overlap",
				rule_all[ri]->desc.name);
	/* the reply is mixed in before the next commit is computed */
	if (c->overlap && c->overlap >= c->window / c->fragments)
		return gem_errf(err, GEM_EUSAGE,
				"overlap: %d inner steps is not less than the H/P = %d between two "
				"commits", c->overlap, c->window / c->fragments);
	if (c->fragments > 1 && c->window % c->fragments)
		return gem_errf(err, GEM_EUSAGE,
				"fragments: %d does not divide the window of %d inner steps (one "
				"fragment every H/P steps)", c->fragments, c->window);
	/* the reply that tells the worker its H comes T steps into the window it is for */
	if (c->overlap && c->dynamic_local_updates)
		return gem_errf(err, GEM_EUSAGE, "overlap: %d inner steps with a commit in flight "
				"do not go with dynamic_local_updates", c->overlap);
	if (c->fragments > 1 && (c->delayed_nesterov > 1 || c->dynamic_local_updates))
		return gem_errf(err, GEM_EUSAGE, "fragments: %d fragments do not go with %s",
				c->fragments, c->dynamic_local_updates ? "dynamic_local_updates"
								       : "delayed_nesterov");
	if (rule_all[ri]->desc.rounds && c->nworkers < 1)
		return gem_errf(err, GEM_EUSAGE,
				"rule %s needs the number of workers per round: give --workers N "
				"(run.json: rule.nworkers >= 1)",
				rule_all[ri]->desc.name);
	return 0;
}

int rule_config_from_json(const json_t *obj, struct rule_config *c, char *err)
{
	const char *key, *name = "gem";
	json_t *v, *jname;
	int ri, rc;

	if (!json_is_object(obj))
		return gem_errf(err, GEM_EUSAGE, "not a JSON object");
	if ((jname = json_object_get(obj, "name"))) {
		if (!json_is_string(jname))
			return gem_errf(err, GEM_EUSAGE, "name: not a string (known: %s)", RULE_NAMES);
		name = json_string_value(jname);
	}
	if ((rc = rule_config_default(name, c, err)) < 0) {
		gem_errprefix(err, "name: ");
		return rc;
	}
	ri = rule_index(name);
	json_object_foreach((json_t *)obj, key, v) {
		const struct rule_field *f = NULL;
		double x;
		if (!strcmp(key, "name"))
			continue;
		for (int i = 0; i < RULE_NFIELDS; i++)
			if (!strcmp(key, rule_fields[i].name))
				f = &rule_fields[i];
		if (!f)
			return gem_errf(err, GEM_EUSAGE,
					"unknown field '%s' (fields: name lr momentum nworkers kappa "
					"pi_max eps tensor_stats gem_ref state_precision window alpha lambda_dc "
					"outer_lr outer_momentum delayed_nesterov dynamic_local_updates "
					"fragments mix overlap)",
					key);
		if (!rule_uses(&rule_all[ri]->desc, f->name))
			return gem_errf(err, GEM_EUSAGE, "%s: not a field of rule %s", key, name);
		if (f->type == RULE_F_BOOL) {
			if (!json_is_boolean(v))
				return gem_errf(err, GEM_EUSAGE, "%s: not true or false", key);
			x = json_is_true(v);
		} else if (f->type == RULE_F_WORD) {
			if (!json_is_string(v) || rule_word_index(f->range, json_string_value(v)) < 0)
				return gem_errf(err, GEM_EUSAGE, "%s: not one of: %s", key, f->range);
			x = rule_word_index(f->range, json_string_value(v));
		} else if (f->type == RULE_F_INT ? !json_is_integer(v) : !json_is_number(v)) {
			return gem_errf(err, GEM_EUSAGE, "%s: not %s", key, f->range);
		} else {
			x = json_number_value(v);
		}
		if (!rule_field_ok(f, x))
			return gem_errf(err, GEM_EUSAGE, "%s: %g is not %s", key, x, f->range);
		rule_field_set(c, f, x);
	}
	return rule_config_check(c, err);
}

/* The shortest decimal that reads back as the same float, so run.json says 0.01, not 0.0099999998. */
static double rule_float_decimal(float v)
{
	char buf[32];
	for (int p = 6; p < 9; p++) {
		snprintf(buf, sizeof buf, "%.*g", p, (double)v);
		if (strtof(buf, NULL) == v)
			return strtod(buf, NULL);
	}
	return v;
}

json_t *rule_config_to_json(const struct rule_config *c)
{
	int ri = rule_index(c->name);
	json_t *o = json_object();
	if (!o || json_object_set_new(o, "name", json_string(c->name)) < 0)
		goto fail;
	for (int i = 0; i < RULE_NFIELDS; i++) {
		const struct rule_field *f = &rule_fields[i];
		double v = rule_field_get(c, f);
		char word[RULE_NAME_MAX];
		json_t *j;
		if (ri >= 0 && !rule_uses(&rule_all[ri]->desc, f->name))
			continue;
		j = f->type == RULE_F_FLOAT ? json_real(rule_float_decimal((float)v))
		  : f->type == RULE_F_BOOL  ? json_boolean(v != 0)
		  : f->type == RULE_F_WORD  ? json_string(rule_word_at(f->range, (int)v, word, sizeof word))
					    : json_integer((json_int_t)v);
		if (json_object_set_new(o, f->name, j) < 0)
			goto fail;
	}
	return o;
fail:
	json_decref(o);
	return NULL;
}

/* Bytes of an element of the per-worker vectors. */
static size_t rule_vec_size(const struct rule *r)
{
	return r->ops->bf16_state ? sizeof(uint16_t) : sizeof(float);
}

/* A new buffer of θ, referenced by no one (NULL: no memory). */
static struct rule_snap *rule_snap_new(size_t n)
{
	struct rule_snap *s = calloc(1, sizeof *s);
	if (s && !(s->v = malloc(n * sizeof(float)))) {
		free(s);
		return NULL;
	}
	return s;
}

static void rule_snap_free(struct rule_snap *s)
{
	if (s)
		free(s->v);
	free(s);
}

/* One more buffer of θ, free (a worker's sent vector will reference one): 0 or GEM_ENOMEM. */
static int rule_snap_add(struct rule *r)
{
	struct rule_snap *s, **f = r->free;
	if (r->nsnap + 1 > r->free_cap) {
		int cap = r->free_cap ? 2 * r->free_cap : 4;
		if (!(f = realloc(r->free, (size_t)cap * sizeof *f)))
			return GEM_ENOMEM;
		r->free = f;
		r->free_cap = cap;
	}
	if (!(s = rule_snap_new(r->n)))
		return GEM_ENOMEM;
	r->free[r->nfree++] = s;
	r->nsnap++;
	return 0;
}

/* The free buffer a commit writes θ′ into, taken (referenced by no one yet). */
static struct rule_snap *rule_snap_pop(struct rule *r)
{
	return r->free[--r->nfree];
}

static void rule_snap_unref(struct rule *r, struct rule_snap *s)
{
	if (s && --s->refs == 0)
		r->free[r->nfree++] = s;
}

/* Worker w's sent vector is now s. */
static void rule_sent_set(struct rule *r, struct rule_worker *w, struct rule_snap *s)
{
	s->refs++;
	rule_snap_unref(r, w->sent);
	w->sent = s;
	w->vec[r->ops->sent_vec] = s->v;
}

void rule_take_theta(struct rule *r, const struct rule_span *sp, struct rule_worker *w)
{
	struct rule_snap *old = r->theta, *next;
	/* a fragment moves its slice of θ in place: the rules with fragments keep no θ sent */
	if (sp->len < r->n) {
		memcpy(old->v + sp->off, rule_theta_next(r) + sp->off, sp->len * sizeof(float));
		return;
	}
	next = rule_snap_pop(r);
	next->refs = 1;
	r->theta = next;
	if (w && r->ops->sent_vec >= 0)
		rule_sent_set(r, w, r->ops->sent_before && r->ops->sent_before(r) ? old : next);
	rule_snap_unref(r, old);
}

const float *rule_theta(const struct rule *r)
{
	return r->theta->v;
}

int rule_create(const struct rule_config *c, const struct layout *l, const float *theta,
		struct rule **out, char *err)
{
	struct rule *r;
	size_t at = 0;
	int rc;

	*out = NULL;
	if ((rc = rule_config_check(c, err)) < 0)
		return rc;
	if (l->ntensors < 1 || l->ntensors > LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "layout: %d tensors", l->ntensors);
	/* the rules walk θ tensor by tensor: the tensors must tile it */
	for (int i = 0; i < l->ntensors; i++) {
		if (l->t[i].offset != at || l->t[i].size == 0)
			return gem_errf(err, GEM_EUSAGE, "layout: tensor %s at %zu (size %zu), expected at %zu",
					l->t[i].name, l->t[i].offset, l->t[i].size, at);
		at += l->t[i].size;
	}
	if (at != l->total)
		return gem_errf(err, GEM_EUSAGE, "layout: tensors hold %zu floats, total says %zu", at,
				l->total);
	if ((size_t)c->fragments > l->total)
		return gem_errf(err, GEM_EUSAGE, "fragments: %d is more than the %zu floats of θ",
				c->fragments, l->total);
	if (!(r = calloc(1, sizeof *r)))
		return gem_errf(err, GEM_ENOMEM, "rule: out of memory");
	r->c = *c;
	r->ops = rule_all[rule_index(c->name)];
	if (c->state_precision == RULE_STATE_BF16 && r->ops->bf16)
		r->ops = r->ops->bf16;
	r->l = *l;
	r->n = l->total;
	r->target = c->nworkers;
	if (rule_snap_add(r) < 0 || rule_snap_add(r) < 0)
		goto nomem;
	r->theta = rule_snap_pop(r);
	r->theta->refs = 1;
	memcpy(r->theta->v, theta, r->n * sizeof(float));
	for (int i = 0; i < r->ops->nglobal; i++)
		if (!(r->global[i] = calloc(r->n, sizeof(float))) ||
		    !(r->gspare[i] = malloc(r->n * sizeof(float))))
			goto nomem;
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec && !(r->spare[i] = malloc(r->n * rule_vec_size(r))))
			goto nomem;
	if (r->ops->desc.scratch &&
	    !(r->scratch = malloc((size_t)r->ops->desc.scratch * r->n * sizeof(float))))
		goto nomem;
	*out = r;
	return 0;
nomem:
	rule_destroy(r);
	return gem_errf(err, GEM_ENOMEM, "rule: out of memory for %zu floats", l->total);
}

/* Free what worker w holds: its vectors, and the buffer of θ the pool kept for its sent one. */
static void rule_worker_free(struct rule *r, struct rule_worker *w)
{
	for (int i = 0; i < 2; i++) {
		if (i != r->ops->sent_vec)
			free(w->vec[i]);
		w->vec[i] = NULL;
	}
	if (w->active && r->ops->sent_vec >= 0) {
		rule_snap_unref(r, w->sent);
		w->sent = NULL;
		rule_snap_free(rule_snap_pop(r));
		r->nsnap--;
	}
	w->active = w->committed = 0;
}

void rule_destroy(struct rule *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->cap; i++)
		rule_worker_free(r, &r->w[i]);
	free(r->w);
	rule_snap_free(r->theta);
	for (int i = 0; i < r->nfree; i++)
		rule_snap_free(r->free[i]);
	free(r->free);
	for (int i = 0; i < 2; i++) {
		free(r->global[i]);
		free(r->gspare[i]);
		free(r->spare[i]);
	}
	free(r->scratch);
	free(r);
}

/* OR the bits of x − x of blocks of 32 floats into four accumulators: no chain of float
 * additions bounds the loop. */
static inline __attribute__((always_inline)) int rule_finite_in(const float *v, size_t n)
{
	rule_i8 acc[4] = {{0}};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 * RULE_BLOCK <= n; i += 4 * RULE_BLOCK)
		for (int q = 0; q < 4; q++) {
			rule_v8 x;
			memcpy(&x, v + i + q * RULE_BLOCK, sizeof x);
			RULE_FINITE(acc[q], x);
		}
	for (; i < n; i++)
		tail += v[i] - v[i];
	acc[0] |= acc[1] | acc[2] | acc[3];
	return rule_finite(&acc[0], 8, tail);
}

RULE_NOINLINE static int rule_finite_c(const float *v, size_t n)
{
	return rule_finite_in(v, n);
}

#ifdef RULE_X86
RULE_NOINLINE RULE_AVX2 static int rule_finite_avx2(const float *v, size_t n)
{
	return rule_finite_in(v, n);
}
#endif

int rule_vec_finite(const float *v, size_t n)
{
#ifdef RULE_X86
	if (rule_avx2())
		return rule_finite_avx2(v, n);
#endif
	return rule_finite_c(v, n);
}

RULE_NOINLINE int rule_add_div(const float *restrict theta, const float *restrict d, float k,
				float *restrict out, float *restrict q, size_t n)
{
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 t = rule_load4(theta + i), x = rule_load4(d + i);
		/* x/1 is x: the division only where it can change something */
		t = k == 1 ? t + x : t + x / k;
		rule_store4(out + i, t);
		if (q)
			rule_store4(q + i, t);
		RULE_FINITE(acc, t);
	}
	for (; i < n; i++) {
		float t = theta[i] + d[i] / k;
		out[i] = t;
		if (q)
			q[i] = t;
		tail += t - t;
	}
	return rule_finite(&acc, 4, tail);
}

size_t rule_nparams(const struct rule *r)
{
	return r->n;
}

/* Float vectors a worker holds of its own, besides the buffer of θ its sent vector shares. */
static size_t rule_own_vecs(const struct rule *r)
{
	return (size_t)(r->ops->nvec - (r->ops->sent_vec >= 0));
}

size_t rule_state_bytes(const struct rule *r)
{
	/* each worker's own vectors and the spares of one; two of each global; the buffers of θ */
	size_t own = rule_own_vecs(r) * ((size_t)r->nactive + 1) * rule_vec_size(r);
	size_t f32 = 2 * (size_t)r->ops->nglobal + (size_t)r->nsnap + (size_t)r->ops->desc.scratch;
	return (own + f32 * sizeof(float)) * r->n;
}

size_t rule_join_bytes(const struct rule *r)
{
	return (size_t)r->ops->nvec * r->n * rule_vec_size(r);
}

const struct rule_desc *rule_desc_of(const struct rule *r)
{
	return &r->ops->desc;
}

const struct rule_config *rule_config_of(const struct rule *r)
{
	return &r->c;
}

static struct rule_worker *rule_worker(struct rule *r, int worker)
{
	if (worker < 0 || worker >= r->cap || !r->w[worker].active)
		return NULL;
	return &r->w[worker];
}

/* Make room for worker id and allocate its vectors (zero). */
static int rule_worker_add(struct rule *r, int worker, char *err)
{
	struct rule_worker *w;
	if (worker < 0 || worker >= RULE_MAX_WORKER)
		return gem_errf(err, GEM_EUSAGE, "worker id %d out of range [0, %d)", worker,
				RULE_MAX_WORKER);
	if (worker >= r->cap) {
		int cap = r->cap ? r->cap : 8;
		while (cap <= worker)
			cap *= 2;
		if (!(w = realloc(r->w, (size_t)cap * sizeof *w)))
			return gem_errf(err, GEM_ENOMEM, "rule: out of memory for %d workers", cap);
		memset(w + r->cap, 0, (size_t)(cap - r->cap) * sizeof *w);
		r->w = w;
		r->cap = cap;
	}
	w = &r->w[worker];
	if (w->active)
		return gem_errf(err, GEM_EUSAGE, "worker %d has already joined", worker);
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec && !(w->vec[i] = calloc(r->n, rule_vec_size(r)))) {
			rule_worker_free(r, w);
			return gem_errf(err, GEM_ENOMEM, "rule: out of memory for worker %d", worker);
		}
	if (r->ops->sent_vec >= 0 && rule_snap_add(r) < 0) {
		rule_worker_free(r, w);
		return gem_errf(err, GEM_ENOMEM, "rule: out of memory for worker %d", worker);
	}
	w->active = 1;
	w->committed = 0;
	r->nactive++;
	return 0;
}

int rule_join(struct rule *r, int worker, char *err)
{
	int rc;
	if (worker >= 0 && worker < r->cap && r->w[worker].active)
		return gem_errf(err, GEM_EUSAGE, "worker %d has already joined", worker);
	if (r->ops->desc.rounds && (rc = rule_round_join(r, err)) < 0)
		return rc;
	if ((rc = rule_worker_add(r, worker, err)) < 0)
		return rc;
	rule_sent(r, worker);
	return 0;
}

void rule_sent(struct rule *r, int worker)
{
	struct rule_worker *w = rule_worker(r, worker);
	if (w && r->ops->sent)
		r->ops->sent(r, w);
	else if (w && r->ops->sent_vec >= 0)
		rule_sent_set(r, w, r->theta);
}

/* The statistics of a call that applied nothing yet. */
static void rule_stats_start(struct rule_stats *st, uint64_t tau, uint64_t version)
{
	if (!st)
		return;
	st->staleness = tau;
	st->version = version;
	st->ntensors = 0;
	memset(&st->all, 0, sizeof st->all);
}

/* A commit of a rule without rounds: its pass, then θ′ and w's new vectors taken. */
static int rule_apply(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		      const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	if (!r->ops->pass(r, sp, w, in, tau, reply, st))
		return RULE_E_NON_FINITE;
	for (int i = 0; i < r->ops->nvec; i++)
		if (i != r->ops->sent_vec)
			rule_swap(&w->vec[i], &r->spare[i]);
	if (r->ops->take)
		r->ops->take(r, sp);
	rule_take_theta(r, sp, w);
	return RULE_APPLIED;
}

int rule_commit(struct rule *r, int worker, const float *in, uint64_t base_version,
		uint64_t *version, float *reply, struct rule_stats *st, char *err)
{
	return rule_commit_fragment(r, worker, 0, in, base_version, version, reply, st, err);
}

/* The slice of θ of fragment p of the commit or the round at version, into sp. */
static int rule_fragment_set(const struct rule *r, int p, uint64_t version, struct rule_span *sp,
			     char *err)
{
	int np = r->c.fragments;
	if (p < 0 || p >= np)
		return gem_errf(err, GEM_EUSAGE, "%s: fragment %d is not one of the %d of θ",
				r->ops->desc.name, p, np);
	/* the rounds go through the fragments in turn, one a version */
	if (r->ops->desc.rounds && (uint64_t)p != version % (uint64_t)np)
		return gem_errf(err, GEM_EUSAGE, "%s: the round at version %llu synchronises "
				"fragment %d, not %d", r->ops->desc.name, (unsigned long long)version,
				(int)(version % (uint64_t)np), p);
	layout_slice(r->n, p, np, &sp->off, &sp->len);
	return 0;
}

int rule_commit_fragment(struct rule *r, int worker, int p, const float *in, uint64_t base_version,
			 uint64_t *version, float *reply, struct rule_stats *st, char *err)
{
	struct rule_worker *w = rule_worker(r, worker);
	struct rule_span sp;
	uint64_t tau;
	int rc;

	if ((rc = rule_fragment_set(r, p, *version, &sp, err)) < 0)
		return rc;
	if (!w)
		return gem_errf(err, GEM_EUSAGE, "worker %d has not joined", worker);
	if (base_version > *version)
		return gem_errf(err, GEM_EUSAGE, "base version %llu is ahead of version %llu",
				(unsigned long long)base_version, (unsigned long long)*version);
	if (!reply && r->ops->desc.reply_elastic)
		return gem_errf(err, GEM_EUSAGE, "%s: no reply buffer for the elastic difference",
				r->ops->desc.name);
	tau = *version - base_version;
	rule_stats_start(st, tau, *version);
	rc = r->ops->desc.rounds ? rule_round_commit(r, &sp, w, in, tau, reply, err)
				 : rule_apply(r, &sp, w, in, tau, reply, st);
	if (rc == RULE_E_NON_FINITE) {
		rule_stats_start(st, tau, *version);
		return gem_errf(err, RULE_E_NON_FINITE,
				"%s: worker %d's update would make the parameters or the rule's state "
				"non-finite (an overflow): refused, nothing changed",
				r->ops->desc.name, worker);
	}
	if (rc == RULE_APPLIED)
		++*version;
	if (st)
		st->version = *version;
	return rc;
}

int rule_leave(struct rule *r, int worker, uint64_t *version, struct rule_stats *st, char *err)
{
	struct rule_worker *w = rule_worker(r, worker);
	struct rule_span sp = {0, r->n};
	int rc = 0;

	if (!w)
		return gem_errf(err, GEM_EUSAGE, "worker %d has not joined", worker);
	r->nactive--;
	rule_stats_start(st, 0, *version);
	/* a leave closes the open round: the fragment of its version */
	if (r->ops->desc.rounds)
		layout_slice(r->n, (int)(*version % (uint64_t)r->c.fragments), r->c.fragments,
			     &sp.off, &sp.len);
	if (r->ops->desc.rounds && (rc = rule_round_leave(r, &sp, w)) == 1) {
		++*version;
		if (st)
			st->version = *version;
	}
	rule_worker_free(r, w);
	return rc;
}

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
