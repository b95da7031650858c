/* rule_config: the rules gem knows (their table) and a run's rule configuration: its fields,
 * their defaults and ranges, run.json's "rule" object both ways (rules/rule.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "rules/impl.h"

const struct rule_ops *const rule_all[] = {
	&rule_gem_ops, &rule_downpour_ops, &rule_dynsgd_ops, &rule_easgd_ops, &rule_dcasgd_ops,
	&rule_sync_ops, &rule_dma_ops, &rule_diloco_ops, &rule_async_diloco_ops,
};
#define RULE_NRULES ((int)(sizeof rule_all / sizeof *rule_all))

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

int rule_index(const char *name)
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
