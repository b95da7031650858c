/* tiny-run-test.h: what the tests of a run in process share: tiny_run_make makes a tiny run (a
 * 64-4 dense model, gem's rule, no data on disk) in a directory, as gem-init would. */
#ifndef GEM_TINY_RUN_TEST_H
#define GEM_TINY_RUN_TEST_H
#include <jansson.h>

#include "base/err.h"
#include "run/spec.h"

/* The tiny run in dir: 0, or < 0 with the reason in err. */
static inline int tiny_run_make(const char *dir, char *err)
{
	json_t *j = json_loads(
		"{\"gem_run\":1,\"created\":\"2026-01-01T00:00:00Z\",\"model_name\":\"tiny\","
		"\"model\":{\"input\":[64],\"classes\":4,\"layers\":[{\"type\":\"dense\",\"out\":4},"
		"{\"type\":\"logsoftmax\"}]},"
		"\"data\":{\"name\":\"tiny\",\"dir\":\"/nonexistent\",\"mean\":0.5,\"std\":0.25},"
		"\"train\":{\"lr\":0.1,\"momentum\":0.9,\"nesterov\":false,\"weight_decay\":0,\"batch\":8,"
		"\"epochs\":1,\"seed\":1},\"rule\":{\"name\":\"gem\"},\"nparams\":260}",
		0, NULL);
	struct run_spec spec;
	int rc;
	if (!j)
		return gem_errf(err, GEM_EFAIL, "run.json");
	if ((rc = run_spec_from_json(j, &spec, err)) == 0)
		rc = run_make(dir, &spec, 0, err);
	run_spec_free(&spec);
	json_decref(j);
	return rc;
}
#endif
