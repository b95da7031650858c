/* fuzz-exec: libFuzzer target for what an external model's child says (gem-exec(7)): any line
 * is a hello that is taken or refused (exec_parse_hello), a reply (exec_parse_reply), a record
 * in run.json (exec_info_from_json, then the model it builds: its layout, no child started);
 * and a "model:" data spec (its sizes). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/data.h"
#include "nn/exec.h"
#include "nn/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX], loc[512];
	struct exec_info info;
	struct model *m;
	json_t *o;
	if (size > EXEC_LINE_MAX)
		return 0;
	exec_parse_hello((const char *)data, size, &info, err);
	if (exec_parse_reply((const char *)data, size, &o, err) == 0) {
		/* a record: built as run.json's model when it is one (a few million floats at most: the
		 * fuzzer looks for faults, not for big models) */
		if (exec_info_from_json(o, &info, err) == 0 && info.layout.total < (1u << 22) &&
		    model_from_json(o, &m, err) == 0) {
			memset(model_params(m), 0, sizeof(float) * model_nparams(m));
			model_free(m);
		}
		json_decref(o);
	}
	if (size < sizeof loc && size >= strlen(DATA_MODEL_PREFIX) &&
	    !memcmp(data, DATA_MODEL_PREFIX, strlen(DATA_MODEL_PREFIX))) {
		struct dataset d;
		struct data_source src = {.loc = loc};
		memcpy(loc, data, size);
		loc[size] = 0;
		if (dataset_open(&src, "train", &d, err) == 0)
			dataset_free(&d);
	}
	return 0;
}
