/* npy: NumPy's .npy array files (format versions 1.0, 2.0 and 3.0): an array of numbers in C
 * order, read as samples' features or labels, and the header of a float32 array, written for
 * gem-export --format npz. The header is a Python dict literal with exactly the keys 'descr'
 * (a dtype such as '<f4' or '|u1'), 'fortran_order' and 'shape'. */
#ifndef GEM_NPY_H
#define GEM_NPY_H
#include <stddef.h>
#include <stdint.h>

#include "nn/elem.h"
#include "nn/samples.h"

#define NPY_MAX_DIMS 32   /* NumPy's own limit (64 since NumPy 2) is far beyond any data set */
#define NPY_HEADER_CAP 1024 /* room for the header npy_header_f32 writes */

/* An array inside a buffer. */
struct npy_array {
	struct elem e;       /* integers, booleans (as uint8) and floats, either byte order */
	int ndim;            /* 0 (a scalar) to NPY_MAX_DIMS */
	uint64_t dims[NPY_MAX_DIMS];
	const uint8_t *data; /* the dims' product elements, right after the header */
	size_t nbytes;
};

/* Parse the .npy file of len bytes at buf; an array NumPy can write that gem cannot read
 * (objects, strings, complex numbers, structured dtypes, Fortran order) is an error naming it
 * and saying how to convert it. what names the file in an error. */
int npy_parse(const uint8_t *buf, size_t len, const char *what, struct npy_array *a, char *err);
/* Samples from a features array x (N, ...) and a labels array y (N) or (N, 1), named xwhat and
 * ywhat in errors. *xown (may be NULL) is the malloc'ed block holding x's data, which the
 * features take over when they can (samples_set_x). */
int npy_samples(const struct npy_array *x, uint8_t **xown, const char *xwhat,
		const struct npy_array *y, const char *ywhat, struct samples *s, char *err);
/* Samples from two .npy files (each gzip'd or plain): features and labels. */
int npy_load(const char *features, const char *labels, struct samples *s, char *err);
/* The header (magic, version 1.0, dict, padding) of a little-endian float32 array of shape
 * dims[0..k), k <= 4, into buf (NPY_HEADER_CAP bytes); returns its length, a multiple of 64. */
size_t npy_header_f32(const int *dims, int k, char *buf);
#endif
