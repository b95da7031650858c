/* export: a run's θ as a file other tools read, for fine-tuning or inference elsewhere:
 * safetensors, with the model spec, the input normalisation and θ's progress in its metadata,
 * or a stored .npz of float32 arrays (one per tensor, no metadata). gem-export is built on it. */
#ifndef GEM_EXPORT_H
#define GEM_EXPORT_H
#include <stddef.h>
#include <sys/uio.h>

#include "run/run.h"

enum export_format { EXPORT_SAFETENSORS, EXPORT_NPZ };

/* The file, as buffers to write in order, and the memory behind them. */
struct export_file {
	struct iovec *iov;
	int niov;
	float *theta; /* the run's θ (a sliced run's slices merged) */
	void *mem;    /* headers */
	struct iovec one[2]; /* iov of a safetensors file: header, θ */
};

/* Export run r's θ in format f into *out; release with export_free. θ is the one of params, a
 * parameter file of the run (a saved copy, an SGP node's node-I.gem), or when params is NULL
 * the run's own (run_params_load_merged); an SGP run's own is only its starting point, so
 * params is then required (GEM_EUSAGE). */
int export_run(const struct run *r, const char *params, enum export_format f,
	       struct export_file *out, char *err);
void export_free(struct export_file *x);
#endif
