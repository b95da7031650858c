/* safetensors: θ in the safetensors format (Hugging Face's, read by PyTorch, JAX, NumPy and
 * others without running code): an 8-byte little-endian header length N, N bytes of a JSON
 * object mapping each tensor's name to its dtype, shape and byte range [begin, end) in the
 * data, plus "__metadata__" (strings to strings), then the data: the tensors' raw little-endian
 * bytes, end to end, in C order. Written from a model's layout (its tensors' names and shapes,
 * "0.weight" and so on: the state_dict keys of the same layers as a torch.nn.Sequential), and
 * read back into θ for a layout, every tensor checked against it. */
#ifndef GEM_SAFETENSORS_H
#define GEM_SAFETENSORS_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/layout.h"

#define SAFETENSORS_HEADER_MAX 100000000 /* bytes of JSON: the reference implementation's bound */

struct safetensors_meta {
	const char *key, *value;
};

/* The header of θ laid out as l: the 8-byte length, then the JSON (tensors as float32 "F32",
 * in l's order, whose data is θ itself; then the nmeta metadata pairs) padded with spaces to a
 * multiple of 8 bytes, so that every tensor starts aligned. *hdr is malloc'ed. */
int safetensors_header(const struct layout *l, const struct safetensors_meta *meta, int nmeta,
		       uint8_t **hdr, size_t *len, char *err);
/* Read the safetensors file of len bytes at buf into θ (l->total floats) for layout l. The
 * format's rules are checked (header length, JSON without duplicate names, dtypes, shapes,
 * ranges that cover the data exactly, without gap or overlap), then the tensors against l:
 * each of l's names present with its shape, no other name; every mismatch is named (as many as
 * fit in the message). F32 is read as it is; F64, F16 and BF16 are converted; a weight that is
 * not finite is refused (θ is then partly written). *meta (if meta is non-NULL)
 * gets the "__metadata__" object (a new reference; NULL when there is none). */
int safetensors_parse(const uint8_t *buf, size_t len, const char *what, const struct layout *l,
		      float *theta, json_t **meta, char *err);
/* safetensors_parse of the file at path. */
int safetensors_load(const char *path, const struct layout *l, float *theta, json_t **meta,
		     char *err);
#endif
