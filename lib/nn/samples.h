/* samples: a data set as one file format or another holds it, in the one neutral form every
 * reader of lib/nn returns (csv, npy, npz, idx, cifar): n samples of one shape, their features
 * uint8 or float32, their labels integers below 65,536. Also what those readers share: a
 * bounded read of a whole file, gzip'd or plain, and the making of the arrays from a file's
 * bytes with every size checked before anything is allocated. gem-data(5) is the user's view. */
#ifndef GEM_SAMPLES_H
#define GEM_SAMPLES_H
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/elem.h"

#define SAMPLES_MAX_N     INT_MAX             /* samples in a file (a struct dataset's n) */
#define SAMPLES_MAX_DIM   (1 << 24)           /* features per sample: a model's largest input */
#define SAMPLES_MAX_SIDE  32768               /* channels, height or width of an image */
#define SAMPLES_MAX_BYTES ((size_t)1 << 34)   /* one file's data, uncompressed: 16 GiB */

enum samples_type { SAMPLES_U8, SAMPLES_F32 };

struct samples {
	size_t n;               /* samples, in [1, SAMPLES_MAX_N] */
	int ndim;               /* 1: a flat vector (D); 3: an image (C, H, W) */
	int shape[3];           /* D, or C, H, W */
	size_t dim;             /* features per sample: the product of shape */
	enum samples_type type;
	void *x;                /* n × dim features, C order: uint8_t (SAMPLES_U8) or float */
	uint16_t *y;            /* n labels */
	int classes;            /* the largest label + 1 */
};

/* Release the arrays; s is empty (all zero) after. */
void samples_free(struct samples *s);
/* Set n and the sample shape of s from an array's dimensions dims[0..k): (N), (N, D), (N, H, W)
 * (one channel) or (N, C, H, W). what names the array in an error (its file, its format). */
int samples_shape(struct samples *s, const uint64_t *dims, int k, const char *what, char *err);
/* The features from s->n · s->dim elements of type e at data. uint8 and little-endian float32
 * are kept as they are: when own is non-NULL and *own is the malloc'ed block holding data, that
 * block becomes s->x (moved to its start and shrunk; *own is then NULL), else they are copied.
 * Other numeric types become float32. A feature that is not finite is an error naming it. */
int samples_set_x(struct samples *s, struct elem e, const uint8_t *data, uint8_t **own,
		  const char *what, char *err);
/* The labels from s->n integer elements of type e at data; a label outside [0, 65535] is an
 * error naming it. Sets s->classes. */
int samples_set_y(struct samples *s, struct elem e, const uint8_t *data, const char *what,
		  char *err);
/* s->classes from s->y. */
void samples_count_classes(struct samples *s);

/* Read a whole file into *buf (malloc'ed, a NUL byte after the data): plain, or gzip'd (known
 * by its magic bytes, whatever its name) and inflated, as it is read when it is a regular file;
 * more than max bytes of data is an error, so that neither a large file nor a small gzip bomb
 * allocates beyond max. */
int samples_read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err);
/* The bytes in all a file needs whose first n bytes are head, as its header says; 0: the
 * header is not all there yet, or says nothing. */
typedef size_t (*samples_need_fn)(const uint8_t *head, size_t n);
/* samples_read_file, a gzip trailer's size (the first size of the output) trusted only up to
 * what need says of the header inflated first (NULL: as samples_read_file). */
int samples_read_file_need(const char *path, size_t max, samples_need_fn need, uint8_t **buf,
			   size_t *len, char *err);
/* Inflate the gzip stream (one member or several) of n bytes at src, as samples_read_file does;
 * what names it in an error. */
int samples_gunzip(const uint8_t *src, size_t n, size_t max, uint8_t **buf, size_t *len,
		   const char *what, char *err);
#endif
