#include "nn/samples.h"
#include "base/err.h"
#include "base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void samples_free(struct samples *s)
{
	free(s->x);
	free(s->y);
	memset(s, 0, sizeof *s);
}

int samples_shape(struct samples *s, const uint64_t *dims, int k, const char *what, char *err)
{
	static const char *const forms[] = {"", "(N)", "(N, D)", "(N, H, W)", "(N, C, H, W)"};
	uint64_t dim = 1;
	if (k < 1 || k > 4)
		return gem_errf(err, GEM_EFAIL,
				"%s: %d dimensions; samples are (N), (N, D), (N, H, W) or (N, C, H, W)", what, k);
	if (dims[0] < 1 || dims[0] > SAMPLES_MAX_N)
		return gem_errf(err, GEM_EFAIL, "%s: %llu samples (want 1 to %d)", what,
				(unsigned long long)dims[0], SAMPLES_MAX_N);
	for (int i = 1; i < k; i++) {
		if (dims[i] < 1 || dims[i] > (k == 2 ? (uint64_t)SAMPLES_MAX_DIM : SAMPLES_MAX_SIDE))
			return gem_errf(err, GEM_EFAIL, "%s: dimension %d of %s is %llu", what, i,
					forms[k], (unsigned long long)dims[i]);
		dim *= dims[i]; /* at most 2^45: no overflow */
	}
	if (dim > SAMPLES_MAX_DIM)
		return gem_errf(err, GEM_EFAIL, "%s: %llu features per sample (at most %d)", what,
				(unsigned long long)dim, SAMPLES_MAX_DIM);
	s->n = (size_t)dims[0];
	s->dim = (size_t)dim;
	s->ndim = k == 4 || k == 3 ? 3 : 1;
	if (k == 4)
		for (int i = 0; i < 3; i++)
			s->shape[i] = (int)dims[i + 1];
	else if (k == 3)
		s->shape[0] = 1, s->shape[1] = (int)dims[1], s->shape[2] = (int)dims[2];
	else
		s->shape[0] = (int)dim, s->shape[1] = s->shape[2] = 0;
	return 0;
}

int samples_set_x(struct samples *s, struct elem e, const uint8_t *data, uint8_t **own,
		  const char *what, char *err)
{
	int u8 = e.kind == 'u' && e.size == 1;
	size_t count = s->n * s->dim, bad, size = count * (u8 ? 1 : 4);
	const uint8_t *src = data;
	uint8_t *x;
	if (e.kind != 'u' && e.kind != 'i' && e.kind != 'f' && e.kind != 'b')
		return gem_errf(err, GEM_EFAIL, "%s: features of %s", what, elem_name(e));
	if (elem_native(e) && own && *own) {
		/* the file's block becomes the array: no second copy of a large data set */
		memmove(*own, data, size);
		x = realloc(*own, size);
		src = x = x ? x : *own;
		*own = NULL;
	} else if (!(x = malloc(size))) {
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu bytes of features)", what,
				size);
	} else if (u8) {
		memcpy(x, data, size);
	}
	free(s->x);
	s->x = x;
	s->type = u8 ? SAMPLES_U8 : SAMPLES_F32;
	if (!u8 && elem_to_f32(e, src, count, (float *)x, &bad) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: feature %zu of sample %zu is not a finite number",
				what, bad % s->dim, bad / s->dim);
	return 0;
}

int samples_set_y(struct samples *s, struct elem e, const uint8_t *data, const char *what,
		  char *err)
{
	size_t bad;
	if (e.kind != 'u' && e.kind != 'i')
		return gem_errf(err, GEM_EFAIL, "%s: labels of %s; labels are integers (convert them: "
				"y.astype(\"int64\"))", what, elem_name(e));
	free(s->y);
	if (!(s->y = malloc(s->n * sizeof *s->y)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu labels)", what, s->n);
	if (elem_to_labels(e, data, s->n, s->y, &bad) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: label %zu is out of range (labels are integers in "
				"[0, %d])", what, bad, ELEM_MAX_LABEL);
	samples_count_classes(s);
	return 0;
}

void samples_count_classes(struct samples *s)
{
	int max = -1;
	for (size_t i = 0; i < s->n; i++)
		if (s->y[i] > max)
			max = s->y[i];
	s->classes = max + 1;
}

/* The compressed bytes read from a gzip'd file at a time: a file is inflated as it is read,
 * never held whole beside what it inflates to. */
#define GZ_CHUNK ((size_t)1 << 18)
/* Deflate codes at most 258 bytes in one symbol of a bit or more: a stream of n bytes inflates
 * to fewer than n·GZ_RATIO bytes, whatever its gzip trailer claims. */
#define GZ_RATIO 1032

/* Where inflate's input comes from: n bytes in memory, or the file fd through a chunk. */
struct gz_src {
	const uint8_t *mem;
	size_t n;
	int fd;         /* -1: memory */
	uint8_t *chunk; /* GZ_CHUNK bytes (a file) */
	int eof;        /* nothing left to read */
	const char *what;
};

/* More input for z, the bytes it has not consumed kept in front: memory's next piece (of at
 * most 1 GiB, avail_in's bound), or the file's next chunk. */
static int gz_refill(struct gz_src *s, z_stream *z, char *err)
{
	size_t keep = z->avail_in;
	ssize_t r;
	if (s->fd < 0) {
		const uint8_t *at = z->next_in ? z->next_in : s->mem;
		size_t left = (size_t)(s->mem + s->n - at);
		z->next_in = (unsigned char *)at;
		z->avail_in = (unsigned)(left > (1u << 30) ? 1u << 30 : left);
		s->eof = z->avail_in == left;
		return 0;
	}
	if (keep)
		memmove(s->chunk, z->next_in, keep);
	while ((r = read(s->fd, s->chunk + keep, GZ_CHUNK - keep)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return gem_errf(err, GEM_EFAIL, "%s: %s", s->what, strerror(errno));
	s->eof = r == 0;
	z->next_in = s->chunk;
	z->avail_in = (unsigned)(keep + (size_t)r);
	return 0;
}

/* Advise the kernel to back the large buffer p (n bytes) with huge pages: inflating a data set
 * into fresh memory otherwise costs more in page faults than in inflating. */
static void advise_huge(uint8_t *p, size_t n)
{
#ifdef MADV_HUGEPAGE
	size_t page = (size_t)sysconf(_SC_PAGESIZE), from = ((uintptr_t)p + page - 1) / page * page;
	if (n >= (size_t)4 << 20)
		(void)madvise((void *)from, ((uintptr_t)p + n - from) / page * page, MADV_HUGEPAGE);
#else
	(void)p, (void)n;
#endif
}

/* Grow *out (capacity *cap, its last byte kept for the NUL) for more output: to hint + 1 bytes
 * first when hint is given, else 64 KiB; then double, up to max + 1. */
static int gz_grow(uint8_t **out, size_t *cap, size_t hint, size_t max, const char *what, char *err)
{
	size_t c = !*cap ? (hint ? hint + 1 : max < 1 << 16 ? max + 1 : 1 << 16)
		   : *cap - 1 >= max ? 0 : *cap - 1 > max / 2 ? max + 1 : *cap * 2;
	uint8_t *nb;
	if (!c)
		return gem_errf(err, GEM_EFAIL, "%s: more than %zu bytes once inflated", what, max);
	if (!(nb = realloc(*out, c)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu bytes)", what, c);
	advise_huge(nb, c);
	*out = nb;
	*cap = c;
	return 0;
}

/* The size a gzip stream of n bytes ending in tail (its last 4 bytes) claims, its ISIZE, when
 * it could be so (at most max, deflate's bound of n): the output's first size. 0: not known. */
static size_t gz_hint(const uint8_t tail[4], size_t n, size_t max)
{
	size_t isize = (size_t)tail[0] | (size_t)tail[1] << 8 | (size_t)tail[2] << 16 |
		       (size_t)tail[3] << 24;
	return n >= 18 && isize <= max && isize / GZ_RATIO <= n ? isize : 0;
}

/* The output a format's header is read from before a trailer's size is trusted (need). */
#define GZ_HEAD ((size_t)1 << 16)

/* Inflate the gzip stream (one member or several) of s into *buf and *len, as
 * samples_gunzip. With need, the trailer's size (hint) is trusted only up to what the header
 * inflated first says the data needs: a trailer that lies big reserves no more than that. */
static int gz_inflate(struct gz_src *s, size_t hint, samples_need_fn need, size_t max,
		      uint8_t **buf, size_t *len, char *err)
{
	const char *what = s->what;
	z_stream z = {0};
	size_t cap = 0, got = 0, first = need && hint > GZ_HEAD ? GZ_HEAD : hint;
	uint8_t *out = NULL, *nb;
	int zr, rc = 0;
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (zlib)", what);
	for (;;) {
		if (first < hint && (got >= GZ_HEAD || need(out, got))) {
			/* the header is in: the trailer's size, or less if the header needs less */
			size_t want = need(out, got);
			first = hint;
			if (want && want < hint)
				hint = want;
			if (want && hint + 1 > cap) {
				if (!(nb = realloc(out, hint + 1))) {
					rc = gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu bytes)",
						      what, hint + 1);
					break;
				}
				advise_huge(nb, hint + 1);
				out = nb;
				cap = hint + 1;
			}
		}
		if (got + 1 >= cap && (rc = gz_grow(&out, &cap, first, max, what, err)) < 0)
			break;
		if (!z.avail_in && !s->eof && (rc = gz_refill(s, &z, err)) < 0)
			break;
		z.next_out = out + got;
		z.avail_out = (unsigned)(cap - 1 - got > (1u << 30) ? 1u << 30 : cap - 1 - got);
		zr = inflate(&z, Z_NO_FLUSH);
		got = (size_t)(z.next_out - out);
		if (zr == Z_STREAM_END) {
			/* the end, or another gzip member (as `cat a.gz b.gz` makes one), or junk */
			if (z.avail_in < 2 && !s->eof && (rc = gz_refill(s, &z, err)) < 0)
				break;
			if (!z.avail_in && s->eof)
				break;
			if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
				rc = gem_errf(err, GEM_EFAIL, "%s: data after the end of the gzip stream", what);
				break;
			}
			inflateReset(&z);
		} else if ((zr == Z_OK || zr == Z_BUF_ERROR) && !z.avail_in && s->eof && got + 1 < cap) {
			rc = gem_errf(err, GEM_EFAIL, "%s: truncated gzip stream", what);
			break;
		} else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			rc = gem_errf(err, zr == Z_MEM_ERROR ? GEM_ENOMEM : GEM_EFAIL,
				      "%s: corrupt gzip data (%s)", what, z.msg ? z.msg : "zlib error");
			break;
		}
	}
	inflateEnd(&z);
	if (rc < 0) {
		free(out);
		return rc;
	}
	/* a trailer that claimed more than the stream held: give back what was never filled */
	if (cap - got > GZ_CHUNK && (nb = realloc(out, got + 1)))
		out = nb;
	out[got] = 0;
	*buf = out;
	*len = got;
	return 0;
}

/* samples_read_file of the gzip'd regular file fd of size bytes. */
static int gunzip_file(int fd, size_t size, samples_need_fn need, size_t max, uint8_t **buf,
		       size_t *len, const char *path, char *err)
{
	struct gz_src s = {.fd = fd, .what = path};
	uint8_t tail[4];
	size_t hint = 0;
	int rc;
	if (size >= 18 && pread(fd, tail, 4, (off_t)(size - 4)) == 4)
		hint = gz_hint(tail, size, max);
	if (!(s.chunk = malloc(GZ_CHUNK)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
	rc = gz_inflate(&s, hint, need, max, buf, len, err);
	free(s.chunk);
	return rc;
}

int samples_read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err)
{
	return samples_read_file_need(path, max, NULL, buf, len, err);
}

int samples_read_file_need(const char *path, size_t max, samples_need_fn need, uint8_t **buf,
			   size_t *len, char *err)
{
	struct stat st;
	uint8_t magic[2];
	void *raw;
	size_t n;
	int fd, rc;
	*buf = NULL;
	*len = 0;
	/* a gzip'd file is inflated as it is read; any other, or a pipe, is read whole first */
	if ((fd = open(path, O_RDONLY)) >= 0) {
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, magic, 2, 0) == 2 &&
		    magic[0] == 0x1f && magic[1] == 0x8b) {
			rc = gunzip_file(fd, (size_t)st.st_size, need, max, buf, len, path, err);
			close(fd);
			return rc;
		}
		close(fd);
	}
	if ((rc = fs_read_all(path, &raw, &n, max, err)) < 0)
		return rc;
	if (n >= 2 && ((uint8_t *)raw)[0] == 0x1f && ((uint8_t *)raw)[1] == 0x8b) {
		struct gz_src s = {.mem = raw, .n = n, .fd = -1, .what = path};
		rc = gz_inflate(&s, gz_hint((uint8_t *)raw + n - 4, n, max), need, max, buf, len, err);
		free(raw);
		return rc;
	}
	*buf = raw;
	*len = n;
	return 0;
}

int samples_gunzip(const uint8_t *src, size_t n, size_t max, uint8_t **buf, size_t *len,
		   const char *what, char *err)
{
	struct gz_src s = {.mem = src, .n = n, .fd = -1, .what = what};
	*buf = NULL;
	*len = 0;
	return gz_inflate(&s, n >= 4 ? gz_hint(src + n - 4, n, max) : 0, NULL, max, buf, len, err);
}
