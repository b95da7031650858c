/* elem: the element types of the array files gem reads and writes (a NumPy dtype, an IDX type
 * byte, a safetensors dtype), and their decoding into float32 features or uint16 labels. The
 * bytes come from a file: any alignment, either byte order. */
#ifndef GEM_ELEM_H
#define GEM_ELEM_H
#include <stddef.h>
#include <stdint.h>

#define ELEM_MAX_LABEL 65535 /* labels are uint16: up to 65,536 classes */

struct elem {
	char kind; /* 'u' unsigned integer, 'i' signed integer, 'f' IEEE float, 'b' bfloat16 */
	int size;  /* bytes: 1, 2, 4 or 8 */
	int big;   /* big-endian (IDX); little-endian otherwise */
};

/* "uint8", "int64", "float32", "bfloat16", ... (for messages). */
const char *elem_name(struct elem e);
/* 1 when e is one of the types gem keeps features in as they are: uint8, little-endian
 * float32. */
int elem_native(struct elem e);
/* Decode n elements at src into floats. Returns 0, or -1 with *bad the index of the first
 * value that is not finite (NaN, ±∞: refused, as a feature or a weight). dst may be src when e
 * is little-endian float32 (the check alone). */
int elem_to_f32(struct elem e, const void *src, size_t n, float *dst, size_t *bad);
/* Decode n integer elements at src into labels. Returns 0, or -1 with *bad the index of the
 * first one outside [0, ELEM_MAX_LABEL]; e must be an integer type. */
int elem_to_labels(struct elem e, const void *src, size_t n, uint16_t *dst, size_t *bad);
#endif
