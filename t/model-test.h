/* model-test.h: what the model tests share: model_of_text builds a model from a JSON spec
 * given as text. */
#ifndef GEM_MODEL_TEST_H
#define GEM_MODEL_TEST_H
#include <jansson.h>
#include <stdio.h>

#include "base/err.h"
#include "nn/model.h"

/* The model of spec text, or NULL with the reason in err (the test's JSON, or the spec). */
static inline struct model *model_of_text(const char *text, char *err)
{
	json_error_t jerr;
	json_t *spec = json_loads(text, 0, &jerr);
	struct model *m = NULL;
	if (!spec) {
		snprintf(err, GEM_ERRMAX, "bad test JSON: %s", jerr.text);
		return NULL;
	}
	if (model_from_json(spec, &m, err) < 0)
		m = NULL;
	json_decref(spec);
	return m;
}
#endif
