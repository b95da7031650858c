/* fuzz-log: libFuzzer target for run_log_parse, the one reader of a log.jsonl line (gem-plot-data,
 * gem-sim --replay): any bytes are read or refused with a reason; a line read has its counts in
 * range. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "run/runlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[128];
	struct run_log_line l;
	why[0] = 0;
	if (run_log_parse((const char *)data, size, &l, why, sizeof why) == 0) {
		if (!l.event && (l.u.worker < 0 || l.u.tau > l.u.version ||
				 (l.u.vtime < 0 && isnan(l.u.elapsed)) || l.u.n > (uint64_t)1 << 40))
			abort();
		if (l.event && (l.u.worker < -1 || !l.json))
			abort();
	} else if (!why[0] || strlen(why) >= sizeof why) {
		abort();
	}
	run_log_line_free(&l);
	return 0;
}
