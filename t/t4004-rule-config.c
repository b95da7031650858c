/* t4004: rule configs: defaults, run.json's "rule" object both ways, bad names and fields. */
#include "base/err.h"
#include "rules/rule.h"
#include "tap.h"

#include <string.h>

/* from_json of a JSON text: the return code, the message in err */
static int from_text(const char *text, struct rule_config *c, char *err)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	int rc;
	if (!j)
		return diag("bad test JSON %s: %s", text, je.text), -100;
	rc = rule_config_from_json(j, c, err);
	json_decref(j);
	return rc;
}

static int refused(const char *text, const char *word)
{
	struct rule_config c;
	char err[GEM_ERRMAX] = "";
	int rc = from_text(text, &c, err);
	return ok(rc == GEM_EUSAGE && strstr(err, word), "%s refused naming %s: %s", text, word, err);
}

/* rule_create checks the config and the layout */
static void create_checks(void)
{
	struct rule_config c;
	char err[GEM_ERRMAX];
	struct layout l;
	struct rule *r;
	const float theta[6] = {0};
	memset(&l, 0, sizeof l);
	rule_config_default("gem", &c, err);
	l.ntensors = 2;
	l.t[0].size = 3;
	l.t[1].offset = 4;
	l.t[1].size = 2;
	l.total = 6;
	ok(rule_create(&c, &l, theta, &r, err) == GEM_EUSAGE && !r, "a layout with a hole is refused: %s", err);
	l.t[1].offset = 3;
	l.total = 5;
	ok(rule_create(&c, &l, theta, &r, err) == 0 && r, "a tiling layout is taken");
	rule_destroy(r);
	c.pi_max = -1;
	ok(rule_create(&c, &l, theta, &r, err) == GEM_EUSAGE && strstr(err, "pi_max"), "a bad config is refused: %s", err);
}

int main(void)
{
	const char *names[] = {"gem", "downpour", "dynsgd", "easgd", "dcasgd", "sync"};
	struct rule_config c, d;
	char err[GEM_ERRMAX], *s;
	json_t *j;

	ok(rule_config_default("adam", &c, err) == GEM_EUSAGE && strstr(err, "adam") &&
		   strstr(err, "valid: gem, downpour, dynsgd, easgd, dcasgd, sync, dma") &&
		   !strstr(err, "did you mean"),
	   "unknown rule name: %s", err);
	ok(rule_config_default("downpoor", &c, err) == GEM_EUSAGE &&
		   strstr(err, "(did you mean downpour?)"),
	   "a mistyped rule name: %s", err);
	ok(rule_config_default("SYNC", &c, err) == GEM_EUSAGE && strstr(err, "(did you mean sync?)"),
	   "a rule name in capitals: %s", err);
	ok(rule_config_default("gem", &c, err) == 0 && c.kappa == 1 && c.pi_max == 5 &&
		   c.eps == 1e-12f && c.momentum == 0.9f && c.tensor_stats,
	   "gem defaults: κ = 1, π_max = 5, ε = 1e-12, μ = 0.9");
	ok(rule_config_default("dcasgd", &c, err) == 0 && c.lambda_dc == 0.04f, "dcasgd default λ_dc = 0.04");
	ok(rule_config_default("easgd", &c, err) == 0 && c.alpha == 0 && c.window == 10,
	   "easgd defaults: α = 0 (0.9/n), λ = 10");

	for (int i = 0; i < 6; i++) {
		rule_config_default(names[i], &c, err);
		c.lr = 0.05f;
		c.nworkers = 3;
		j = rule_config_to_json(&c);
		ok(j && rule_config_from_json(j, &d, err) == 0 && !memcmp(&c, &d, sizeof c),
		   "%s: to_json then from_json gives the config back", names[i]);
		json_decref(j);
	}
	rule_config_default("gem", &c, err);
	j = rule_config_to_json(&c);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
	diag("%s", s);
	ok(strstr(s, "\"lr\":0.01,") && strstr(s, "\"eps\":1e-12,") && strstr(s, "\"momentum\":0.9,"),
	   "floats are written as typed with JSON_REAL_PRECISION(9) (0.01, 1e-12, 0.9)");
	ok(!strstr(s, "outer_lr") && !strstr(s, "lambda_dc"), "only the fields gem uses");
	free(s);
	json_decref(j);

	ok(from_text("{\"kappa\": 2}", &c, err) == 0 && !strcmp(c.name, "gem") && c.kappa == 2,
	   "no name: gem");
	ok(from_text("{\"name\": \"easgd\", \"alpha\": 0.25, \"window\": 4, \"nworkers\": 8}", &c, err) == 0 &&
		   c.alpha == 0.25f && c.window == 4 && c.nworkers == 8,
	   "easgd fields read");
	ok(from_text("{\"name\": \"gem\", \"tensor_stats\": false}", &c, err) == 0 && !c.tensor_stats,
	   "tensor_stats false");
	ok(from_text("{\"name\": \"gem\", \"kappa\": 1}", &c, err) == 0 && c.gem_ref == RULE_GEM_REF_COMMIT,
	   "a run.json without gem_ref (older runs) is gem_ref commit");
	ok(from_text("{\"name\": \"gem\", \"gem_ref\": \"pull\"}", &c, err) == 0 &&
		   c.gem_ref == RULE_GEM_REF_PULL,
	   "gem_ref pull");
	j = rule_config_to_json(&c);
	ok(j && !strcmp(json_string_value(json_object_get(j, "gem_ref")), "pull") &&
		   rule_config_from_json(j, &d, err) == 0 && !memcmp(&c, &d, sizeof c),
	   "gem_ref is written as its word and read back");
	json_decref(j);
	refused("{\"name\": \"gem\", \"gem_ref\": \"push\"}", "commit pull");
	refused("{\"name\": \"gem\", \"gem_ref\": 1}", "gem_ref");
	refused("{\"name\": \"downpour\", \"gem_ref\": \"pull\"}", "gem_ref");
	c.gem_ref = 2;
	ok(rule_config_check(&c, err) == GEM_EUSAGE && strstr(err, "gem_ref"),
	   "gem_ref out of range: %s", err);
	refused("{\"name\": \"sgd\"}", "sgd");
	refused("{\"name\": 3}", "name");
	refused("[1, 2]", "object");
	refused("{\"name\": \"gem\", \"kapa\": 1}", "kapa");
	refused("{\"name\": \"gem\", \"kappa\": \"1\"}", "kappa");
	refused("{\"name\": \"gem\", \"kappa\": -1}", "kappa");
	refused("{\"name\": \"gem\", \"momentum\": 1}", "momentum");
	refused("{\"name\": \"gem\", \"lr\": 0}", "lr");
	refused("{\"name\": \"gem\", \"tensor_stats\": 1}", "tensor_stats");
	refused("{\"name\": \"downpour\", \"kappa\": 1}", "kappa");
	refused("{\"name\": \"downpour\", \"window\": 0}", "window");
	refused("{\"name\": \"downpour\", \"window\": 2.5}", "window");
	refused("{\"name\": \"easgd\", \"alpha\": 1.5}", "alpha");
	refused("{\"name\": \"dcasgd\", \"lambda_dc\": -0.1}", "lambda_dc");
	refused("{\"name\": \"sync\"}", "nworkers");
	refused("{\"name\": \"sync\", \"nworkers\": -2}", "nworkers");
	ok(from_text("{\"name\": \"sync\", \"nworkers\": 4, \"momentum\": 0.5}", &c, err) == 0, "sync with nworkers");
	ok(rule_config_from_json(NULL, &c, err) == GEM_EUSAGE, "a missing object is refused: %s", err);

	create_checks();
	return done_testing();
}
