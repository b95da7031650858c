#include "wire/blob.h"
#include "base/err.h"

#include <libdeflate.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The blob format is little-endian float32; a big-endian host would need byte swaps. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gem blobs need a little-endian host");
_Static_assert(sizeof(float) == 4, "gem blobs need 32-bit floats");

enum { C_RAW, C_ZLIB, C_SHUF };

static int codec_id(const char *name)
{
	if (!strcmp(name, BLOB_RAW))
		return C_RAW;
	if (!strcmp(name, BLOB_ZLIB))
		return C_ZLIB;
	if (!strcmp(name, BLOB_ZLIB_SHUFFLE))
		return C_SHUF;
	return -1;
}

int blob_codec_known(const char *name)
{
	return name && codec_id(name) >= 0;
}

int blob_codec_err_unknown(char *err, const char *name)
{
	/* the names codec_id knows */
	static const char *const names[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE};
	return gem_err_unknown(err, GEM_EUSAGE, "codec", name, names, sizeof names / sizeof *names);
}

void blob_codec_init(struct blob_codec *c)
{
	memset(c, 0, sizeof *c);
}

void blob_codec_free(struct blob_codec *c)
{
	if (c->def)
		libdeflate_free_compressor(c->def);
	if (c->inf)
		libdeflate_free_decompressor(c->inf);
	free(c->out);
	free(c->tmp);
	free(c->tmp2);
	memset(c, 0, sizeof *c);
}

/* Grow *buf to at least n bytes; buffers only grow, so a warm codec never allocates. */
static int reserve(unsigned char **buf, size_t *cap, size_t n)
{
	unsigned char *p;
	if (*cap >= n && *buf)
		return 0;
	p = realloc(*buf, n ? n : 1);
	if (!p)
		return -1;
	*buf = p;
	*cap = n;
	return 0;
}

/* out[k*n + i] = in[4*i + k]: bytes of equal significance side by side, so the exponent
 * bytes (nearly constant across a layer) form long runs that deflate well. */
static void shuffle4(unsigned char *restrict out, const unsigned char *restrict in, size_t n)
{
	unsigned char *o0 = out, *o1 = out + n, *o2 = out + 2 * n, *o3 = out + 3 * n;
	for (size_t i = 0; i < n; i++) {
		o0[i] = in[4 * i];
		o1[i] = in[4 * i + 1];
		o2[i] = in[4 * i + 2];
		o3[i] = in[4 * i + 3];
	}
}

static void unshuffle4(unsigned char *restrict out, const unsigned char *restrict in, size_t n)
{
	const unsigned char *i0 = in, *i1 = in + n, *i2 = in + 2 * n, *i3 = in + 3 * n;
	for (size_t i = 0; i < n; i++) {
		out[4 * i] = i0[i];
		out[4 * i + 1] = i1[i];
		out[4 * i + 2] = i2[i];
		out[4 * i + 3] = i3[i];
	}
}

static int deflate_into(struct blob_codec *c, const unsigned char *in, size_t len, int level,
			size_t *outlen, char *err)
{
	size_t bound;
	if (c->def && c->def_level != level) {
		libdeflate_free_compressor(c->def);
		c->def = NULL;
	}
	if (!c->def) {
		if (!(c->def = libdeflate_alloc_compressor(level)))
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory for a compressor");
		c->def_level = level;
	}
	bound = libdeflate_zlib_compress_bound(c->def, len);
	if (reserve(&c->out, &c->out_cap, bound) < 0)
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", bound);
	if (!(*outlen = libdeflate_zlib_compress(c->def, in, len, c->out, c->out_cap)))
		return gem_errf(err, GEM_EFAIL, "blob: deflate failed");
	return 0;
}

int blob_encode(struct blob_codec *c, const float *v, size_t count, const char *codec, int level,
		const void **out, struct blob_meta *meta, char *err)
{
	size_t len = count * 4, outlen = 0;
	const unsigned char *raw = (const unsigned char *)v;
	int id, rc;
	if (!codec)
		codec = BLOB_CODEC_DEFAULT;
	id = codec_id(codec);
	if (id < 0) {
		blob_codec_err_unknown(err, codec);
		gem_errprefix(err, "blob: ");
		return GEM_EUSAGE;
	}
	if (count > BLOB_MAX_COUNT)
		return gem_errf(err, GEM_EUSAGE, "blob: %zu elements is more than %zu", count,
				BLOB_MAX_COUNT);
	if (level < 0)
		level = BLOB_LEVEL_DEFAULT;
	if (level > 9)
		return gem_errf(err, GEM_EUSAGE, "blob: zlib level %d is not in 0-9", level);
	memset(meta, 0, sizeof *meta);
	snprintf(meta->codec, sizeof meta->codec, "%s", codec);
	meta->count = count;
	meta->crc32 = (uint32_t)libdeflate_crc32(0, raw, len);
	switch (id) {
	case C_RAW:
		*out = v;
		meta->nbytes = len;
		return 0;
	case C_SHUF:
		if (reserve(&c->tmp, &c->tmp_cap, len) < 0)
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", len);
		shuffle4(c->tmp, raw, count);
		raw = c->tmp;
		/* fall through */
	default:
		rc = deflate_into(c, raw, len, level, &outlen, err);
		if (rc < 0)
			return rc;
		*out = c->out;
		meta->nbytes = outlen;
		return 0;
	}
}

/* Inflate exactly in[0..inlen) into exactly out[0..outlen): a stream that ends early, runs
 * long, or leaves input over is as wrong as one with a bad checksum. */
static int inflate_exact(struct blob_codec *c, const unsigned char *in, size_t inlen,
			 unsigned char *out, size_t outlen, char *err)
{
	size_t used = 0, got = 0;
	enum libdeflate_result rc;
	if (!c->inf && !(c->inf = libdeflate_alloc_decompressor()))
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory for a decompressor");
	rc = libdeflate_zlib_decompress_ex(c->inf, in, inlen, out, outlen, &used, &got);
	if (rc == LIBDEFLATE_BAD_DATA)
		return gem_errf(err, GEM_EFAIL, "blob: corrupt zlib data");
	if (rc == LIBDEFLATE_INSUFFICIENT_SPACE)
		return gem_errf(err, GEM_EFAIL,
				"blob: zlib data does not end after %zu bytes (too long or truncated)",
				outlen);
	if (rc != LIBDEFLATE_SUCCESS && rc != LIBDEFLATE_SHORT_OUTPUT)
		return gem_errf(err, GEM_EFAIL, "blob: zlib data not decoded (%d)", (int)rc);
	if (got != outlen)
		return gem_errf(err, GEM_EFAIL, "blob: zlib data decodes to %zu bytes, want %zu", got,
				outlen);
	if (used != inlen)
		return gem_errf(err, GEM_EFAIL, "blob: %zu bytes after the end of the zlib data",
				inlen - used);
	return 0;
}

int blob_decode(struct blob_codec *c, const void *in, const struct blob_meta *meta, float *v,
		size_t count, char *err)
{
	size_t len = count * 4;
	const unsigned char *raw;
	uint32_t crc;
	int id, rc;
	if (!memchr(meta->codec, 0, sizeof meta->codec) || (id = codec_id(meta->codec)) < 0)
		return gem_errf(err, GEM_EFAIL, "blob: unknown codec '%.*s'",
				(int)sizeof meta->codec, meta->codec);
	if (meta->count != count)
		return gem_errf(err, GEM_EFAIL, "blob: has %zu elements, want %zu", meta->count,
				count);
	if (count > BLOB_MAX_COUNT)
		return gem_errf(err, GEM_EFAIL, "blob: %zu elements is more than %zu", count,
				BLOB_MAX_COUNT);
	if (id == C_RAW) {
		if (meta->nbytes != len)
			return gem_errf(err, GEM_EFAIL, "blob: raw size %zu bytes, want %zu",
					meta->nbytes, len);
		raw = in;
	} else {
		/* deflate expands nothing by more than a small fraction */
		if (meta->nbytes > len + len / 8 + 64)
			return gem_errf(err, GEM_EFAIL, "blob: encoded size %zu is too large",
					meta->nbytes);
		if (reserve(&c->tmp2, &c->tmp2_cap, len) < 0)
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", len);
		rc = inflate_exact(c, in, meta->nbytes, c->tmp2, len, err);
		if (rc < 0)
			return rc;
		raw = c->tmp2;
		if (id == C_SHUF) {
			if (reserve(&c->tmp, &c->tmp_cap, len) < 0)
				return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)",
						len);
			unshuffle4(c->tmp, raw, count);
			raw = c->tmp;
		}
	}
	crc = (uint32_t)libdeflate_crc32(0, raw, len);
	if (crc != meta->crc32)
		return gem_errf(err, GEM_EFAIL, "blob: CRC mismatch (data %08x, header %08x)", crc,
				meta->crc32);
	if (len)
		memcpy(v, raw, len);
	return 0;
}
