#include "nn/idx.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
	unsigned char code;
	struct elem e;
} idx_types[] = {
	{.code = 0x08, .e = {.kind = 'u', .size = 1, .big = 1}},
	{.code = 0x09, .e = {.kind = 'i', .size = 1, .big = 1}},
	{.code = 0x0B, .e = {.kind = 'i', .size = 2, .big = 1}},
	{.code = 0x0C, .e = {.kind = 'i', .size = 4, .big = 1}},
	{.code = 0x0D, .e = {.kind = 'f', .size = 4, .big = 1}},
	{.code = 0x0E, .e = {.kind = 'f', .size = 8, .big = 1}},
};

/* The element of IDX type code, into *e; 0 for a code IDX does not have. */
static int idx_elem(unsigned code, struct elem *e)
{
	for (size_t i = 0; i < sizeof idx_types / sizeof *idx_types; i++)
		if (idx_types[i].code == code) {
			*e = idx_types[i].e;
			return 1;
		}
	return 0;
}

int idx_parse(const uint8_t *buf, size_t len, const char *what, struct idx_array *a, char *err)
{
	size_t i, hdr, count = 1;
	memset(a, 0, sizeof *a);
	if (len < 4)
		return gem_errf(err, GEM_EFAIL, "%s: %s", what, len ? "truncated IDX header" : "empty file");
	if (buf[0] || buf[1])
		return gem_errf(err, GEM_EFAIL, "%s: not an IDX file (magic %02x %02x %02x %02x, want "
				"00 00 TYPE DIMS)", what, buf[0], buf[1], buf[2], buf[3]);
	for (i = 0; i < sizeof idx_types / sizeof *idx_types && idx_types[i].code != buf[2]; i++)
		;
	if (i == sizeof idx_types / sizeof *idx_types)
		return gem_errf(err, GEM_EFAIL, "%s: unknown IDX element type 0x%02x (know 0x08 uint8, "
				"0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64)", what, buf[2]);
	a->e = idx_types[i].e;
	a->ndim = buf[3];
	if (a->ndim < 1 || a->ndim > 4)
		return gem_errf(err, GEM_EFAIL, "%s: an IDX file of %d dimensions (gem reads 1 to 4)", what,
				a->ndim);
	hdr = 4 + 4 * (size_t)a->ndim;
	if (len < hdr)
		return gem_errf(err, GEM_EFAIL, "%s: truncated IDX header (%zu of %zu bytes)", what, len, hdr);
	for (int d = 0; d < a->ndim; d++) {
		const uint8_t *q = buf + 4 + 4 * d;
		a->dims[d] = (uint64_t)q[0] << 24 | (uint64_t)q[1] << 16 | (uint64_t)q[2] << 8 | q[3];
		if (!a->dims[d])
			return gem_errf(err, GEM_EFAIL, "%s: IDX dimension %d is 0", what, d);
		/* each factor < 2^32 and the product bounded by the file: no overflow */
		if (a->dims[d] > (len - hdr) / count)
			return gem_errf(err, GEM_EFAIL, "%s: the IDX header gives more elements than the "
					"file's %zu data bytes hold", what, len - hdr);
		count *= (size_t)a->dims[d];
	}
	if (count > (len - hdr) / (size_t)a->e.size || count * (size_t)a->e.size != len - hdr)
		return gem_errf(err, GEM_EFAIL, "%s: %zu data bytes, but the IDX header gives %zu "
				"elements of %s (%s)", what, len - hdr, count, elem_name(a->e),
				count * (size_t)a->e.size > len - hdr ? "truncated?" : "data after them");
	a->data = buf + hdr;
	a->nbytes = len - hdr;
	return 0;
}

/* The bytes an IDX file of header head (n bytes so far) needs (samples_need_fn): 0 until its
 * header is in, or when it is no IDX header (idx_parse says why). */
static size_t idx_need(const uint8_t *head, size_t n)
{
	size_t hdr, need;
	struct idx_array a;
	char err[GEM_ERRMAX];
	if (n < 4 || n < (hdr = 4 + 4 * (size_t)head[3]))
		return 0;
	if (idx_parse(head, hdr, "", &a, err) == 0)
		return hdr; /* no dimension but the header */
	/* idx_parse refuses a header whose data is not there: its product, computed here */
	if (head[0] || head[1] || head[3] < 1 || head[3] > 4 || !idx_elem(head[2], &a.e))
		return 0;
	need = (size_t)a.e.size;
	for (int d = 0; d < head[3]; d++) {
		const uint8_t *q = head + 4 + 4 * d;
		size_t dim = (size_t)q[0] << 24 | (size_t)q[1] << 16 | (size_t)q[2] << 8 | q[3];
		if (!dim || dim > SAMPLES_MAX_BYTES / need)
			return 0;
		need *= dim;
	}
	return need > SAMPLES_MAX_BYTES - hdr ? 0 : hdr + need;
}

/* Read and parse one IDX file; *buf holds it (the caller frees). */
static int read_idx(const char *path, uint8_t **buf, struct idx_array *a, char *err)
{
	size_t len;
	int rc = samples_read_file_need(path, SAMPLES_MAX_BYTES, idx_need, buf, &len, err);
	if (rc < 0)
		return rc;
	if ((rc = idx_parse(*buf, len, path, a, err)) < 0) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* Samples from an IDX file of images or features (N, ...) and one of labels (N), each gzip'd
 * or plain. */
static int idx_samples(const char *images, const char *labels, struct samples *s, char *err)
{
	struct idx_array xa, ya;
	uint8_t *xb = NULL, *yb = NULL;
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = read_idx(labels, &yb, &ya, err)) < 0)
		return rc;
	if (ya.ndim > 2 || (ya.ndim == 2 && ya.dims[1] != 1)) {
		rc = gem_errf(err, GEM_EFAIL, "%s: labels of %d dimensions (want one label per sample: "
			      "(N))", labels, ya.ndim);
		goto out;
	}
	if ((rc = read_idx(images, &xb, &xa, err)) < 0 ||
	    (rc = samples_shape(s, xa.dims, xa.ndim, images, err)) < 0)
		goto out;
	if (ya.dims[0] != xa.dims[0]) {
		rc = gem_errf(err, GEM_EFAIL, "%s: %llu samples, but %s: %llu labels", images,
			      (unsigned long long)xa.dims[0], labels, (unsigned long long)ya.dims[0]);
		goto out;
	}
	if ((rc = samples_set_y(s, ya.e, ya.data, labels, err)) < 0 ||
	    (rc = samples_set_x(s, xa.e, xa.data, &xb, images, err)) < 0)
		goto out;
out:
	free(xb);
	free(yb);
	if (rc < 0)
		samples_free(s);
	return rc;
}

/* The first of dir/PREFIX-KIND{-,.}idxD-ubyte[.gz] that exists, for the prefixes of split and
 * the dims ds (0-terminated), into path; 0 found, -1 none. */
static int find_one(const char *dir, const char *const *prefixes, const char *kind, const int *ds,
		    char *path, size_t cap)
{
	for (const char *const *p = prefixes; *p; p++)
		for (const int *d = ds; *d; d++)
			for (int sep = 0; sep < 2; sep++)
				for (int gz = 1; gz >= 0; gz--) {
					if ((size_t)snprintf(path, cap, "%s/%s-%s%cidx%d-ubyte%s", dir, *p, kind,
							     sep ? '.' : '-', *d, gz ? ".gz" : "") < cap &&
					    access(path, F_OK) == 0)
						return 0;
				}
	return -1;
}

int idx_find(const char *dir, const char *split, char *images, char *labels, size_t cap, char *err)
{
	static const char *const train[] = {"train", NULL}, *const test[] = {"t10k", "test", NULL};
	static const int image_dims[] = {3, 4, 0}, label_dims[] = {1, 0};
	const char *const *prefixes;
	if (!strcmp(split, "train"))
		prefixes = train;
	else if (!strcmp(split, "test"))
		prefixes = test;
	else
		return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)", split);
	const char *also = prefixes[1] ? " and with test- for t10k-" : "";
	int no_images = find_one(dir, prefixes, "images", image_dims, images, cap) < 0;
	if (no_images && prefixes == test && find_one(dir, prefixes, "labels", label_dims, labels, cap) < 0)
		return 1;
	if (no_images)
		return gem_errf(err, GEM_EFAIL, "%s: no %s images (looked for %s-images-idx3-ubyte, "
				"%s-images.idx3-ubyte, the same with idx4%s, each also .gz)", dir, split,
				prefixes[0], prefixes[0], also);
	if (find_one(dir, prefixes, "labels", label_dims, labels, cap) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: no %s labels (looked for %s-labels-idx1-ubyte, "
				"%s-labels.idx1-ubyte%s, each also .gz)", dir, split, prefixes[0], prefixes[0],
				also);
	return 0;
}

int idx_dir_load(const char *dir, const char *split, struct samples *s, char *err)
{
	char images[4096], labels[4096];
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = idx_find(dir, split, images, labels, sizeof images, err)) != 0)
		return rc;
	return idx_samples(images, labels, s, err);
}
