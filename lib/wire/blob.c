#include "wire/blob.h"
#include "base/err.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The blob format is little-endian float32; a big-endian host would need byte swaps. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gem blobs need a little-endian host");
_Static_assert(sizeof(float) == 4, "gem blobs need 32-bit floats");
_Static_assert(BLOB_MAX_COUNT * 4 <= UINT_MAX, "z_stream sizes are uInt");

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

void blob_codec_init(struct blob_codec *c)
{
	memset(c, 0, sizeof *c);
}

void blob_codec_free(struct blob_codec *c)
{
	if (c->def_ready)
		deflateEnd(&c->def);
	if (c->inf_ready)
		inflateEnd(&c->inf);
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
	int rc;
	if (c->def_ready && c->def_level != level) {
		deflateEnd(&c->def);
		c->def_ready = 0;
	}
	if (!c->def_ready) {
		memset(&c->def, 0, sizeof c->def);
		if (deflateInit(&c->def, level) != Z_OK)
			return gem_errf(err, GEM_ENOMEM, "blob: deflateInit failed");
		c->def_ready = 1;
		c->def_level = level;
	} else if (deflateReset(&c->def) != Z_OK) {
		return gem_errf(err, GEM_EFAIL, "blob: deflateReset failed");
	}
	bound = deflateBound(&c->def, (uLong)len);
	if (reserve(&c->out, &c->out_cap, bound) < 0)
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", bound);
	c->def.next_in = (unsigned char *)in;
	c->def.avail_in = (uInt)len;
	c->def.next_out = c->out;
	c->def.avail_out = (uInt)c->out_cap;
	rc = deflate(&c->def, Z_FINISH);
	if (rc != Z_STREAM_END)
		return gem_errf(err, GEM_EFAIL, "blob: deflate failed (%d)", rc);
	*outlen = c->def.total_out;
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
	if (id < 0)
		return gem_errf(err, GEM_EUSAGE,
				"blob: unknown codec '%s' (raw, zlib, zlib+shuffle)", codec);
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
	meta->crc32 = (uint32_t)crc32_z(0, raw, len);
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
	int rc;
	if (!c->inf_ready) {
		memset(&c->inf, 0, sizeof c->inf);
		if (inflateInit(&c->inf) != Z_OK)
			return gem_errf(err, GEM_ENOMEM, "blob: inflateInit failed");
		c->inf_ready = 1;
	} else if (inflateReset(&c->inf) != Z_OK) {
		return gem_errf(err, GEM_EFAIL, "blob: inflateReset failed");
	}
	c->inf.next_in = (unsigned char *)in;
	c->inf.avail_in = (uInt)inlen;
	c->inf.next_out = out;
	c->inf.avail_out = (uInt)outlen;
	rc = inflate(&c->inf, Z_FINISH);
	if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
		return gem_errf(err, GEM_EFAIL, "blob: corrupt zlib data (%s)",
				c->inf.msg ? c->inf.msg : "bad stream");
	if (rc == Z_MEM_ERROR)
		return gem_errf(err, GEM_ENOMEM, "blob: inflate out of memory");
	if (rc != Z_STREAM_END) {
		if (c->inf.avail_out == 0)
			return gem_errf(err, GEM_EFAIL,
					"blob: zlib data does not end after %zu bytes "
					"(too long or truncated)", outlen);
		return gem_errf(err, GEM_EFAIL,
				"blob: truncated zlib data (%zu of %zu bytes decoded)",
				outlen - c->inf.avail_out, outlen);
	}
	if (c->inf.avail_out != 0)
		return gem_errf(err, GEM_EFAIL, "blob: zlib data decodes to %zu bytes, want %zu",
				outlen - c->inf.avail_out, outlen);
	if (c->inf.avail_in != 0)
		return gem_errf(err, GEM_EFAIL, "blob: %u bytes after the end of the zlib data",
				c->inf.avail_in);
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
		if (meta->nbytes > UINT_MAX)
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
	crc = (uint32_t)crc32_z(0, raw, len);
	if (crc != meta->crc32)
		return gem_errf(err, GEM_EFAIL, "blob: CRC mismatch (data %08x, header %08x)", crc,
				meta->crc32);
	if (len)
		memcpy(v, raw, len);
	return 0;
}
