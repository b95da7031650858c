/* fuzz-run: libFuzzer target for run_from_json, the run.json a worker is given by GET /v1/run:
 * any JSON is taken or refused; every number taken is in range. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "run/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct run r;
	json_t *j = json_loadb((const char *)data, size, 0, NULL);
	if (!j)
		return 0;
	if (run_from_json(j, &r, err) == 0) {
		if (r.train.batch < 1 || r.train.batch > RUN_MAX_BATCH || r.train.epochs < 1 ||
		    !isfinite(r.train.lr) || !(r.train.lr > 0) || !isfinite(r.std) || !(r.std > 0) ||
		    rule_config_check(&r.rule, err) < 0)
			abort();
		run_close(&r);
	} /* run_from_json took j over either way */
	return 0;
}
