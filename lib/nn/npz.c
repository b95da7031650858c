#include "nn/npz.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "nn/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SIG_LOCAL   0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END     0x06054b50u
#define SIG_END64   0x06064b50u
#define SIG_LOC64   0x07064b50u
#define LOCAL_SIZE   30 /* fixed part of each record */
#define CENTRAL_SIZE 46
#define END_SIZE     22
#define END64_SIZE   56
#define LOC64_SIZE   20
#define DEFLATE_MAX_RATIO 1032 /* deflate cannot expand one byte into more than this */

const char *const npz_train_names[][2] = {
	{"x", "y"}, {"X", "y"}, {"X", "Y"}, {"features", "labels"}, {"data", "labels"},
	{"images", "labels"}, {"inputs", "targets"}, {"x_train", "y_train"}, {"X_train", "y_train"},
	{"train_images", "train_labels"}, {"arr_0", "arr_1"}, {NULL, NULL},
};
const char *const npz_test_names[][2] = {
	{"x_test", "y_test"}, {"X_test", "y_test"}, {"test_images", "test_labels"}, {NULL, NULL},
};

static uint32_t le16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
	return le16(p) | le16(p + 2) << 16;
}

static uint64_t le64(const uint8_t *p)
{
	return le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* The end of central directory record: the last SIG_END whose comment reaches the end of the
 * file exactly; -1 if none. */
static long long find_end(const uint8_t *buf, size_t len)
{
	if (len < END_SIZE)
		return -1;
	for (size_t pos = len - END_SIZE, stop = pos > 65535 ? pos - 65535 : 0;; pos--) {
		if (le32(buf + pos) == SIG_END && pos + END_SIZE + le16(buf + pos + 20) == len)
			return (long long)pos;
		if (pos == stop)
			return -1;
	}
}

/* From a zip64 extended information field (id 1) in extra[0..n): the 8-byte values of the
 * fields whose 32-bit value in the record is 0xFFFFFFFF, in the order usize, csize, offset. */
static int zip64_extra(const uint8_t *extra, size_t n, uint64_t *usize, uint64_t *csize,
		       uint64_t *offset)
{
	while (n >= 4) {
		uint32_t id = le16(extra), sz = le16(extra + 2);
		if (sz > n - 4)
			return -1;
		if (id == 1) {
			uint64_t *f[3] = {usize, csize, offset};
			size_t at = 4;
			for (int k = 0; k < 3; k++) {
				if (*f[k] != 0xFFFFFFFFu)
					continue;
				if (at + 8 > 4 + (size_t)sz)
					return -1;
				*f[k] = le64(extra + at);
				at += 8;
			}
			return 0;
		}
		extra += 4 + sz;
		n -= 4 + sz;
	}
	return 0;
}

/* The central directory's place and entry count, from the end record (and its zip64 form). */
static int read_end(struct npz *z, uint64_t *count, uint64_t *cd_size, char *err)
{
	long long end = find_end(z->buf, z->len);
	const uint8_t *e;
	uint64_t end_at;
	if (end < 0)
		return gem_errf(err, GEM_EFAIL, "%s: not a zip (.npz) file: no end of central directory "
				"record%s", z->what,
				z->len >= 6 && !memcmp(z->buf, "\x93NUMPY", 6) ? " (it is a .npy file)" : "");
	end_at = (uint64_t)end;
	e = z->buf + end;
	if (le16(e + 4) || le16(e + 6))
		return gem_errf(err, GEM_EFAIL, "%s: a zip split across disks", z->what);
	*count = le16(e + 10);
	*cd_size = le32(e + 12);
	z->cd_offset = le32(e + 16);
	if (*count == 0xFFFF || *cd_size == 0xFFFFFFFFu || z->cd_offset == 0xFFFFFFFFu) {
		const uint8_t *l, *r;
		uint64_t at;
		/* a pointer is formed only to what lies inside the file */
		if (end_at < LOC64_SIZE || le32(l = e - LOC64_SIZE) != SIG_LOC64)
			return gem_errf(err, GEM_EFAIL, "%s: zip64 sizes but no zip64 locator", z->what);
		at = le64(l + 8);
		if (at > end_at - LOC64_SIZE || end_at - LOC64_SIZE - at < END64_SIZE ||
		    le32(r = z->buf + at) != SIG_END64)
			return gem_errf(err, GEM_EFAIL, "%s: bad zip64 end of central directory", z->what);
		*count = le64(r + 32);
		*cd_size = le64(r + 40);
		z->cd_offset = le64(r + 48);
		end_at = at;
	}
	if (z->cd_offset > end_at || *cd_size > end_at - z->cd_offset)
		return gem_errf(err, GEM_EFAIL, "%s: the central directory (%llu bytes at %llu) lies "
				"outside the file", z->what, (unsigned long long)*cd_size,
				(unsigned long long)z->cd_offset);
	if (*count > NPZ_MAX_MEMBERS || *count > *cd_size / CENTRAL_SIZE)
		return gem_errf(err, GEM_EFAIL, "%s: %llu members in a central directory of %llu bytes",
				z->what, (unsigned long long)*count, (unsigned long long)*cd_size);
	return 0;
}

/* Central directory entry i at *p (within [*p, end)); moves *p past it. */
static int read_entry(struct npz *z, int i, const uint8_t **p, const uint8_t *end, char *err)
{
	const uint8_t *c = *p;
	struct npz_member *m = &z->m[i];
	size_t nlen, xlen, clen;
	if ((size_t)(end - c) < CENTRAL_SIZE || le32(c) != SIG_CENTRAL)
		return gem_errf(err, GEM_EFAIL, "%s: central directory entry %d is damaged", z->what, i);
	nlen = le16(c + 28), xlen = le16(c + 30), clen = le16(c + 32);
	if ((size_t)(end - c) - CENTRAL_SIZE < nlen + xlen + clen)
		return gem_errf(err, GEM_EFAIL, "%s: central directory entry %d runs past its end",
				z->what, i);
	m->name = (const char *)c + CENTRAL_SIZE;
	m->name_len = nlen;
	m->method = (int)le16(c + 10);
	m->crc = le32(c + 16);
	m->csize = le32(c + 20);
	m->usize = le32(c + 24);
	m->offset = le32(c + 42);
	if (zip64_extra(c + CENTRAL_SIZE + nlen, xlen, &m->usize, &m->csize, &m->offset) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: damaged zip64 field", z->what, (int)nlen,
				m->name);
	/* a member lies before the central directory, which lies in the file (read_end): an
	 * offset or a size of 32 bits, or of 64 from a zip64 field, is checked here once, before
	 * anything is computed from it */
	if (m->offset > z->cd_offset || m->csize > z->cd_offset - m->offset)
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: %llu bytes at offset %llu lie outside the "
				"file's %llu bytes of members", z->what, (int)nlen, m->name,
				(unsigned long long)m->csize, (unsigned long long)m->offset,
				(unsigned long long)z->cd_offset);
	if (le16(c + 8) & 1)
		return gem_errf(err, GEM_EFAIL, "%s: %.*s is encrypted", z->what, (int)nlen, m->name);
	*p = c + CENTRAL_SIZE + nlen + xlen + clen;
	return 0;
}

int npz_open(const uint8_t *buf, size_t len, const char *what, struct npz *z, char *err)
{
	uint64_t count = 0, cd_size = 0;
	const uint8_t *p, *end;
	int rc;
	memset(z, 0, sizeof *z);
	z->buf = buf;
	z->len = len;
	z->what = what;
	if ((rc = read_end(z, &count, &cd_size, err)) < 0)
		return rc;
	if (count && !(z->m = calloc((size_t)count, sizeof *z->m)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", what);
	p = buf + z->cd_offset;
	end = p + cd_size;
	for (z->n = 0; z->n < (int)count; z->n++)
		if ((rc = read_entry(z, z->n, &p, end, err)) < 0) {
			npz_close(z);
			return rc;
		}
	return 0;
}

void npz_close(struct npz *z)
{
	free(z->m);
	z->m = NULL;
	z->n = 0;
}

int npz_find(const struct npz *z, const char *name)
{
	size_t n = strlen(name);
	for (int i = 0; i < z->n; i++) {
		const struct npz_member *m = &z->m[i];
		if ((m->name_len == n + 4 && !memcmp(m->name, name, n) && !memcmp(m->name + n, ".npy", 4)) ||
		    (m->name_len == n && !memcmp(m->name, name, n)))
			return i;
	}
	return -1;
}

/* Where member m's data starts, after its local header; checks that header. */
static int data_start(const struct npz *z, const struct npz_member *m, uint64_t *at, char *err)
{
	const uint8_t *l;
	uint64_t skip;
	/* the offset is checked before a pointer is formed from it */
	if (m->offset > z->cd_offset || z->cd_offset - m->offset < LOCAL_SIZE ||
	    le32(l = z->buf + m->offset) != SIG_LOCAL)
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: no local header at offset %llu", z->what,
				(int)m->name_len, m->name, (unsigned long long)m->offset);
	skip = LOCAL_SIZE + (uint64_t)le16(l + 26) + le16(l + 28);
	if (z->cd_offset - m->offset < skip || z->cd_offset - m->offset - skip < m->csize ||
	    le16(l + 26) != m->name_len || memcmp(l + LOCAL_SIZE, m->name, m->name_len))
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: its local header or data disagree with the "
				"central directory", z->what, (int)m->name_len, m->name);
	*at = m->offset + skip;
	return 0;
}

/* Inflate the raw deflate stream src[0..n) into exactly usize bytes at out; -1 if it is
 * corrupt, ends early, or holds more. */
static int inflate_exact(const uint8_t *src, uint64_t n, uint8_t *out, uint64_t usize)
{
	z_stream z = {0};
	uint64_t in_done = 0, out_done = 0;
	int zr;
	if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
		return -1;
	do { /* Z_OK: progress; anything else ends it (Z_BUF_ERROR: none was possible) */
		z.next_in = (unsigned char *)src + in_done;
		z.avail_in = (unsigned)(n - in_done > (1u << 30) ? 1u << 30 : n - in_done);
		z.next_out = out + out_done;
		z.avail_out = (unsigned)(usize - out_done > (1u << 30) ? 1u << 30 : usize - out_done);
		zr = inflate(&z, Z_NO_FLUSH);
		in_done = (uint64_t)(z.next_in - src);
		out_done = (uint64_t)(z.next_out - out);
	} while (zr == Z_OK);
	inflateEnd(&z);
	return zr == Z_STREAM_END && out_done == usize && in_done == n ? 0 : -1;
}

int npz_extract(const struct npz *z, int i, uint8_t **out, size_t *len, char *err)
{
	const struct npz_member *m = &z->m[i];
	uint64_t at = 0;
	uint8_t *b;
	int rc;
	*out = NULL;
	*len = 0;
	if ((rc = data_start(z, m, &at, err)) < 0)
		return rc;
	if (m->method != 0 && m->method != 8)
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: zip compression method %d (gem reads stored "
				"and deflated members: np.savez, np.savez_compressed)", z->what,
				(int)m->name_len, m->name, m->method);
	/* every size is bounded by the file before anything is allocated for it */
	if (m->usize > SAMPLES_MAX_BYTES || (m->method == 0 && m->usize != m->csize) ||
	    (m->method == 8 && m->usize > m->csize * DEFLATE_MAX_RATIO + 1024))
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: %llu bytes compressed into %llu: not a size "
				"gem believes", z->what, (int)m->name_len, m->name,
				(unsigned long long)m->usize, (unsigned long long)m->csize);
	if (!(b = malloc((size_t)m->usize + 1)))
		return gem_errf(err, GEM_ENOMEM, "%s: %.*s: out of memory (%llu bytes)", z->what,
				(int)m->name_len, m->name, (unsigned long long)m->usize);
	if (m->method == 0)
		memcpy(b, z->buf + at, (size_t)m->usize);
	else if (inflate_exact(z->buf + at, m->csize, b, m->usize) < 0) {
		free(b);
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: corrupt deflate data", z->what,
				(int)m->name_len, m->name);
	}
	if (crc32_z(0, b, (size_t)m->usize) != m->crc) {
		free(b);
		return gem_errf(err, GEM_EFAIL, "%s: %.*s: CRC mismatch (a damaged file)", z->what,
				(int)m->name_len, m->name);
	}
	b[m->usize] = 0;
	*out = b;
	*len = (size_t)m->usize;
	return 0;
}

/* The arrays' names, comma-separated, into buf (for an error): as a user names them, without
 * the ".npy" numpy.savez gives each member. */
static const char *member_list(const struct npz *z, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = 0;
	for (int i = 0; i < z->n && n < cap; i++) {
		const struct npz_member *m = &z->m[i];
		int len = (int)m->name_len;
		if (len > 4 && !memcmp(m->name + len - 4, ".npy", 4))
			len -= 4;
		n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", i ? ", " : "", len, m->name);
	}
	return z->n ? buf : "none";
}

/* Array name of z, extracted and parsed into *a; *mem holds it. */
static int load_array(const struct npz *z, const char *name, uint8_t **mem, struct npy_array *a,
		      char *what, size_t wcap, char *err)
{
	int i = npz_find(z, name), rc;
	size_t len;
	snprintf(what, wcap, "%s: %s", z->what, name);
	if (i < 0) {
		char list[256];
		return gem_errf(err, GEM_EFAIL, "%s: no array '%s' (it holds %s)", z->what, name,
				member_list(z, list, sizeof list));
	}
	if ((rc = npz_extract(z, i, mem, &len, err)) < 0)
		return rc;
	return npy_parse(*mem, len, what, a, err);
}

int npz_samples(const struct npz *z, const char *split, const char *xname, const char *yname,
		struct samples *s, char *err)
{
	const char *const(*names)[2] = strcmp(split, "test") ? npz_train_names : npz_test_names;
	char xwhat[512], ywhat[512], list[256];
	struct npy_array xa, ya;
	uint8_t *xb = NULL, *yb = NULL;
	int rc;
	memset(s, 0, sizeof *s);
	if (!xname || !yname) {
		for (; (*names)[0]; names++)
			if (npz_find(z, (*names)[0]) >= 0 && npz_find(z, (*names)[1]) >= 0)
				break;
		if (!(*names)[0] && !strcmp(split, "test"))
			return 1;
		if (!(*names)[0])
			return gem_errf(err, GEM_EFAIL, "%s: no features and labels under the names gem "
					"knows (x and y, X and y, features and labels, x_train and "
					"y_train, ...: gem-data(5)); it holds %s", z->what,
					member_list(z, list, sizeof list));
		xname = (*names)[0];
		yname = (*names)[1];
	}
	if ((rc = load_array(z, yname, &yb, &ya, ywhat, sizeof ywhat, err)) < 0 ||
	    (rc = load_array(z, xname, &xb, &xa, xwhat, sizeof xwhat, err)) < 0)
		goto out;
	rc = npy_samples(&xa, &xb, xwhat, &ya, ywhat, s, err);
out:
	free(xb);
	free(yb);
	return rc;
}

int npz_load(const char *path, const char *split, const char *xname, const char *yname,
	     struct samples *s, char *err)
{
	struct npz z;
	void *buf;
	size_t len;
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = fs_read_all(path, &buf, &len, SAMPLES_MAX_BYTES, err)) < 0)
		return rc;
	if ((rc = npz_open(buf, len, path, &z, err)) == 0) {
		rc = npz_samples(&z, split, xname, yname, s, err);
		npz_close(&z);
	}
	free(buf);
	return rc;
}

static uint8_t *put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
	return p + 2;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	return put16(put16(p, v & 0xffff), v >> 16);
}

/* The fields a local header and a central directory entry share, from "version needed" to
 * the name's length; a fixed date (1980-01-01) keeps the archive the same for the same θ. */
static uint8_t *put_common(uint8_t *p, uint32_t crc, uint32_t size, size_t name_len)
{
	p = put16(p, 20); /* version needed: 2.0 */
	p = put16(p, 0);  /* flags */
	p = put16(p, 0);  /* stored */
	p = put16(p, 0);  /* time */
	p = put16(p, 0x21); /* date */
	p = put32(p, crc);
	p = put32(p, size);
	p = put32(p, size);
	return put16(p, (uint32_t)name_len);
}

int npz_write_stored(const struct npz_array *a, int n, struct iovec **iovp, int *niov, void **memp,
		     char *err)
{
	size_t cap = END_SIZE, off = 0, cd_len = 0;
	uint8_t *mem, *p, *cd;
	struct iovec *iov;
	uint32_t *crc, *size;
	if (n < 1 || n > NPZ_MAX_MEMBERS)
		return gem_errf(err, GEM_EUSAGE, "npz: %d arrays", n);
	for (int i = 0; i < n; i++)
		cap += LOCAL_SIZE + CENTRAL_SIZE + 2 * (strlen(a[i].name) + 4) + NPY_HEADER_CAP;
	cap = (cap + 7) / 8 * 8; /* the CRCs and sizes after the headers, aligned */
	mem = malloc(cap + 2 * (size_t)n * sizeof(uint32_t));
	iov = calloc(2 * (size_t)n + 1, sizeof *iov);
	if (!mem || !iov) {
		free(mem);
		free(iov);
		return gem_errf(err, GEM_ENOMEM, "npz: out of memory");
	}
	crc = (uint32_t *)(mem + cap);
	size = crc + n;
	p = mem;
	for (int i = 0; i < n; i++) {
		size_t count = 1, nlen = strlen(a[i].name) + 4, hlen, bytes;
		uint8_t *local = p, *npyh;
		for (int d = 0; d < a[i].ndim; d++)
			count *= (size_t)a[i].dims[d];
		npyh = local + LOCAL_SIZE + nlen;
		hlen = npy_header_f32(a[i].dims, a[i].ndim, (char *)npyh);
		bytes = hlen + 4 * count;
		if (off + LOCAL_SIZE + nlen + bytes >= 0xFFFFFFFFu) {
			free(mem);
			free(iov);
			return gem_errf(err, GEM_EUSAGE, "npz: 4 GiB or more (write safetensors instead)");
		}
		crc[i] = (uint32_t)crc32_z(crc32_z(0, npyh, hlen), (const uint8_t *)a[i].data, 4 * count);
		size[i] = (uint32_t)bytes;
		p = put32(local, SIG_LOCAL);
		p = put_common(p, crc[i], size[i], nlen);
		p = put16(p, 0); /* extra */
		memcpy(p, a[i].name, nlen - 4);
		memcpy(p + nlen - 4, ".npy", 4);
		iov[2 * i] = (struct iovec){local, LOCAL_SIZE + nlen + hlen};
		iov[2 * i + 1] = (struct iovec){(void *)a[i].data, 4 * count};
		p = npyh + hlen;
		off += LOCAL_SIZE + nlen + bytes;
	}
	cd = p;
	size_t at = 0;
	for (int i = 0; i < n; i++) {
		size_t nlen = strlen(a[i].name) + 4;
		p = put32(p, SIG_CENTRAL);
		p = put16(p, 20); /* version made by */
		p = put_common(p, crc[i], size[i], nlen);
		p = put16(put16(put16(put16(p, 0), 0), 0), 0); /* extra, comment, disk, internal */
		p = put32(p, 0);                                /* external attributes */
		p = put32(p, (uint32_t)at);
		memcpy(p, a[i].name, nlen - 4);
		memcpy(p + nlen - 4, ".npy", 4);
		p += nlen;
		at += LOCAL_SIZE + nlen + size[i];
	}
	cd_len = (size_t)(p - cd);
	p = put32(p, SIG_END);
	p = put16(put16(p, 0), 0); /* disks */
	p = put16(put16(p, (uint32_t)n), (uint32_t)n);
	p = put32(put32(p, (uint32_t)cd_len), (uint32_t)off);
	p = put16(p, 0); /* comment */
	iov[2 * n] = (struct iovec){cd, (size_t)(p - cd)};
	*niov = 2 * n + 1;
	*iovp = iov;
	*memp = mem;
	return 0;
}
