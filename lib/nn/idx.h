/* idx: IDX files of every element type and 1 to 4 dimensions (the MNIST family's format, its
 * colour images (N, C, H, W) and its float32 variant), and a directory holding a split's images
 * and labels under the names such sets are distributed with: the one reader of IDX files
 * (nn/data.h's datasets read theirs through idx_dir_load). */
#ifndef GEM_IDX_H
#define GEM_IDX_H
#include <stddef.h>
#include <stdint.h>

#include "nn/elem.h"
#include "nn/samples.h"

/* An IDX array inside a buffer. */
struct idx_array {
	struct elem e;    /* big-endian; uint8 (type byte 0x08), int8, int16, int32, float32 (0x0D), float64 */
	int ndim;         /* 1 to 4 */
	uint64_t dims[4];
	const uint8_t *data; /* dims' product elements, right after the header */
	size_t nbytes;
};

/* Parse the IDX file of len bytes at buf: magic bytes 0, 0, the type, the number of
 * dimensions; then each size, a big-endian uint32; then exactly the elements they give. what
 * names the file in an error. */
int idx_parse(const uint8_t *buf, size_t len, const char *what, struct idx_array *a, char *err);
/* The images and labels files of split "train" or "test" in dir: PREFIX-images-idx3-ubyte,
 * PREFIX-images.idx3-ubyte, the same with idx4, and PREFIX-labels-idx1-ubyte or
 * PREFIX-labels.idx1-ubyte, each with or without .gz; PREFIX is train, or t10k or test. The
 * paths go to images and labels (cap bytes each); the error lists the names looked for.
 * Returns 1 when split is "test" and neither file is there: the data set has no test split. */
int idx_find(const char *dir, const char *split, char *images, char *labels, size_t cap,
	     char *err);
/* idx_find, then the samples of the two files it found; 1 (s empty) as idx_find. */
int idx_dir_load(const char *dir, const char *split, struct samples *s, char *err);
#endif
