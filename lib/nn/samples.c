#include "nn/samples.h"
#include "base/err.h"
#include "base/fsutil.h"

#include <stdlib.h>
#include <string.h>
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

int samples_gunzip(const uint8_t *src, size_t n, size_t max, uint8_t **buf, size_t *len,
		   const char *what, char *err)
{
	z_stream z = {0};
	size_t cap = 0, got = 0, used = 0;
	uint8_t *out = NULL, *nb;
	int zr, rc = 0;
	*buf = NULL;
	*len = 0;
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (zlib)", what);
	for (;;) {
		if (got + 1 >= cap) { /* full (one byte kept for the NUL): double, up to max */
			size_t c = !cap ? (max < 1 << 16 ? max + 1 : 1 << 16) : cap - 1 >= max ? 0 : cap - 1 > max / 2 ? max + 1 : cap * 2;
			if (!c) {
				rc = gem_errf(err, GEM_EFAIL, "%s: more than %zu bytes once inflated", what, max);
				break;
			}
			if (!(nb = realloc(out, c))) {
				rc = gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu bytes)", what, c);
				break;
			}
			out = nb;
			cap = c;
		}
		z.next_in = (unsigned char *)src + used;
		z.avail_in = (unsigned)(n - used > (1u << 30) ? 1u << 30 : n - used);
		z.next_out = out + got;
		z.avail_out = (unsigned)(cap - 1 - got > (1u << 30) ? 1u << 30 : cap - 1 - got);
		zr = inflate(&z, Z_NO_FLUSH);
		used = (size_t)(z.next_in - src);
		got = (size_t)(z.next_out - out);
		if (zr == Z_STREAM_END) {
			if (used == n)
				break;
			/* another gzip member follows (as `cat a.gz b.gz` makes one), or junk */
			if (n - used < 2 || src[used] != 0x1f || src[used + 1] != 0x8b) {
				rc = gem_errf(err, GEM_EFAIL, "%s: data after the end of the gzip stream", what);
				break;
			}
			inflateReset(&z);
		} else if ((zr == Z_OK || zr == Z_BUF_ERROR) && used == n && got + 1 < cap) {
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
	out[got] = 0;
	*buf = out;
	*len = got;
	return 0;
}

int samples_read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err)
{
	void *raw;
	size_t n;
	int rc;
	*buf = NULL;
	*len = 0;
	if ((rc = fs_read_all(path, &raw, &n, max, err)) < 0)
		return rc;
	if (n >= 2 && ((uint8_t *)raw)[0] == 0x1f && ((uint8_t *)raw)[1] == 0x8b) {
		rc = samples_gunzip(raw, n, max, buf, len, path, err);
		free(raw);
		return rc;
	}
	*buf = raw;
	*len = n;
	return 0;
}
