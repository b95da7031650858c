/* fuzz-run: libFuzzer target for run_from_json, the run.json a worker is given by GET /v1/run:
 * any JSON is taken or refused; every number taken is in range (the normalisation by group and
 * the holdout too), and data.dir's paths are split. And run.json's schema both ways
 * (run/spec.h): a spec read is written and read back to the same run.json. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "nn/data.h"
#include "run/run.h"
#include "run/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	struct run r;
	json_t *j = json_loadb((const char *)data, size, 0, NULL), *once, *twice = NULL;
	struct run_spec s;
	if (!j)
		return 0;
	if (run_spec_from_json(j, &s, err) == 0) {
		once = run_spec_to_json(&s);
		run_spec_free(&s);
		if (!once || run_spec_from_json(once, &s, err) < 0 || !(twice = run_spec_to_json(&s)) ||
		    !json_equal(once, twice))
			abort();
		json_decref(once);
		json_decref(twice);
	}
	run_spec_free(&s);
	if (run_from_json(j, &r, err) == 0) {
		const struct run_spec *rs = &r.spec;
		if (rs->train.batch < 1 || rs->train.batch > RUN_MAX_BATCH || rs->train.epochs < 1 ||
		    !isfinite((float)rs->train.lr) || !((float)rs->train.lr > 0) ||
		    !isfinite((float)rs->std) || !((float)rs->std > 0) ||
		    rule_config_check(&rs->rule, err) < 0 ||
		    !(rs->holdout == 0 || (rs->holdout >= DATA_HOLDOUT_MIN &&
					   rs->holdout <= DATA_HOLDOUT_MAX)) ||
		    (rs->norm_groups > 0) != (rs->norm_mean != NULL))
			abort();
		for (int g = 0; g < rs->norm_groups; g++)
			if (!isfinite(rs->norm_mean[g]) || !(rs->norm_std[g] > 0) ||
			    !isfinite(rs->norm_std[g]))
				abort();
		dataset_present(r.data_dir); /* the paths of a FORMAT:PATH,PATH, split */
		run_close(&r);
	} /* run_from_json took j over either way */
	return 0;
}
