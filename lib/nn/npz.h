/* npz: NumPy's .npz archives, a zip of .npy files stored or deflated, as np.savez and
 * np.savez_compressed write them (their zip64 records included). The zip's central directory
 * is read here, each member found through it and inflated with zlib, its CRC checked. Also the
 * stored .npz of float32 arrays that gem-export --format npz writes. */
#ifndef GEM_NPZ_H
#define GEM_NPZ_H
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "nn/samples.h"

#define NPZ_MAX_MEMBERS 65535

/* One member, as the central directory gives it. */
struct npz_member {
	const char *name; /* inside the archive's buffer, not NUL-terminated */
	size_t name_len;
	uint64_t offset;  /* of its local header */
	uint64_t csize, usize;
	uint32_t crc;
	int method;       /* 0 stored, 8 deflated */
};

/* An archive in a buffer (borrowed) and its members. */
struct npz {
	const uint8_t *buf;
	size_t len;
	const char *what; /* the file, in errors */
	uint64_t cd_offset; /* where the central directory starts: every member's data ends before */
	int n;
	struct npz_member *m;
};

/* The conventional names of a data set's arrays, features then labels, tried in this order
 * when the caller names none: split "train" and split "test". */
extern const char *const npz_train_names[][2];
extern const char *const npz_test_names[][2];

/* Read the central directory of the zip of len bytes at buf. */
int npz_open(const uint8_t *buf, size_t len, const char *what, struct npz *z, char *err);
void npz_close(struct npz *z);
/* The member holding array name (NAME.npy, or NAME as it is), or -1. */
int npz_find(const struct npz *z, const char *name);
/* Member i's bytes, inflated and checked against its CRC, into *out (malloc'ed, a NUL after). */
int npz_extract(const struct npz *z, int i, uint8_t **out, size_t *len, char *err);
/* Samples from the arrays xname and yname of z; NULL names: the first pair of the split's
 * conventional names that z holds. Returns 1 (s empty) when split is "test", no names are
 * given and z holds no conventional test pair: the data set then has no test split. */
int npz_samples(const struct npz *z, const char *split, const char *xname, const char *yname,
		struct samples *s, char *err);
/* npz_samples from the .npz file at path. */
int npz_load(const char *path, const char *split, const char *xname, const char *yname,
	     struct samples *s, char *err);

/* A float32 array for npz_write_stored: a member NAME.npy of shape dims[0..ndim). */
struct npz_array {
	const char *name;
	int ndim;
	const int *dims;
	const float *data; /* the shape's product floats */
};
/* A stored (uncompressed) .npz of the n arrays as *niov buffers to write in order: pointers
 * into the arrays' data and into *mem, a block the caller frees (with *iov) after writing.
 * An archive of 4 GiB or more is refused (no zip64 here). */
int npz_write_stored(const struct npz_array *a, int n, struct iovec **iov, int *niov, void **mem,
		     char *err);
#endif
