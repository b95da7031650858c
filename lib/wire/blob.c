#include "wire/blob.h"
#include "base/err.h"
#include "wire/crc.h"

#include <libdeflate.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The blob format is little-endian float32; a big-endian host would need byte swaps. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gem blobs need a little-endian host");
_Static_assert(sizeof(float) == 4, "gem blobs need 32-bit floats");

enum { C_RAW, C_ZLIB, C_SHUF, C_FP16 };

static int codec_id(const char *name)
{
	if (!strcmp(name, BLOB_RAW))
		return C_RAW;
	if (!strcmp(name, BLOB_ZLIB))
		return C_ZLIB;
	if (!strcmp(name, BLOB_ZLIB_SHUFFLE))
		return C_SHUF;
	if (!strcmp(name, BLOB_FP16))
		return C_FP16;
	return -1;
}

int blob_codec_lossy(const char *name)
{
	return name && codec_id(name) == C_FP16;
}

int blob_codec_known(const char *name)
{
	return name && codec_id(name) >= 0;
}

int blob_codec_check(const char *name, char *err)
{
	/* the names codec_id knows */
	static const char *const names[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16};
	if (blob_codec_known(name))
		return 0;
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

/* ---- fp16: IEEE 754 binary16, 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits ---- */
#define HALF_MAX_BITS 0x477fe000u /* 65504, the largest finite half, as float bits */
#define HALF_MIN_NORMAL_BITS 0x38800000u /* 2^-14 */

/* f (finite) to the nearest half, ties to even; beyond ±65504 saturated. Both roundings are
 * computed and one selected, without a branch, so that the loops over a vector vectorise. */
static inline uint32_t half_of(float f)
{
	uint32_t x, a, sign, sub, nor, b, rb, m;
	float r;
	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000u;
	a = x & 0x7fffffffu;
	/* below 2^-14, a subnormal half m·2^-24: m = |f|·2^24 < 1024 rounded to an integer by
	 * adding 2^23, which the FPU's default mode rounds to nearest even; the sum's mantissa
	 * bits are m (m = 1024 is the bit pattern of 2^-14, the smallest normal) */
	r = fabsf(f) * 16777216.0f + 8388608.0f;
	memcpy(&rb, &r, sizeof rb);
	sub = rb - 0x4b000000u;
	/* normal: rebias the exponent (127 → 15), drop 13 mantissa bits rounding to nearest
	 * even; a carry out of the mantissa steps the exponent up, as it should */
	b = a - ((127u - 15u) << 23);
	nor = (b + 0xfffu + ((b >> 13) & 1u)) >> 13;
	/* selects as masks: gcc -O2 turns ?: here into branches */
	m = 0u - (uint32_t)(a < HALF_MIN_NORMAL_BITS);
	nor = (sub & m) | (nor & ~m);
	m = 0u - (uint32_t)(a > HALF_MAX_BITS);
	return sign | (0x7bffu & m) | (nor & ~m);
}

/* A half to float, exactly; *bad gets a non-zero bit if it is infinite or NaN. */
static inline float float_of_half(uint32_t h, uint32_t *bad)
{
	uint32_t sign = (h & 0x8000u) << 16, e = h & 0x7c00u, x, s, m = 0u - (uint32_t)(e != 0);
	float sub = (float)(h & 0x3ffu) * 5.9604644775390625e-8f; /* m·2^-24, exact */
	float out;
	memcpy(&s, &sub, sizeof s);
	x = ((((h & 0x7fffu) << 13) + ((127u - 15u) << 23)) & m) | (s & ~m) | sign;
	*bad |= e == 0x7c00u;
	memcpy(&out, &x, sizeof out);
	return out;
}

/* The fp16 loops run in blocks of FP16_BLOCK with a fixed-count inner loop (gcc -O2's
 * vectoriser takes only loops whose count it knows), then a scalar tail; out of line, where gcc
 * keeps the pointers restrict. */
#define FP16_BLOCK 8

/* One float into its half at out and the value that decodes to at back; *nonfinite gets a bit
 * if f is infinite or NaN. */
static inline void fp16_put(unsigned char *restrict out, float *restrict back, float f,
			    uint32_t *nonfinite)
{
	uint32_t h = half_of(f), x, unused = 0;
	uint16_t h16 = (uint16_t)h;
	memcpy(&x, &f, sizeof x);
	*nonfinite |= (x & 0x7fffffffu) >= 0x7f800000u;
	memcpy(out, &h16, 2);
	*back = float_of_half(h, &unused);
}

/* v[0..n) into halves at out (little-endian) and the floats they decode to at back; -1 if a
 * v[i] is infinite or NaN (out and back written all the same). */
__attribute__((noinline)) static int fp16_encode(unsigned char *restrict out,
						 float *restrict back, const float *restrict v,
						 size_t n)
{
	uint32_t nonfinite = 0;
	size_t i = 0;
	for (; i + FP16_BLOCK <= n; i += FP16_BLOCK)
		for (int j = 0; j < FP16_BLOCK; j++)
			fp16_put(out + 2 * (i + j), back + i + j, v[i + j], &nonfinite);
	for (; i < n; i++)
		fp16_put(out + 2 * i, back + i, v[i], &nonfinite);
	return nonfinite ? -1 : 0;
}

static inline float fp16_get(const unsigned char *in, uint32_t *bad)
{
	uint16_t h;
	memcpy(&h, in, 2);
	return float_of_half(h, bad);
}

/* Halves at in to floats at v; -1 (v written) if one is infinite or NaN, the first one's index
 * in *bad. */
__attribute__((noinline)) static int fp16_decode(float *restrict v,
						 const unsigned char *restrict in, size_t n,
						 size_t *bad)
{
	uint32_t any = 0;
	size_t i = 0;
	for (; i + FP16_BLOCK <= n; i += FP16_BLOCK)
		for (int j = 0; j < FP16_BLOCK; j++)
			v[i + j] = fp16_get(in + 2 * (i + j), &any);
	for (; i < n; i++)
		v[i] = fp16_get(in + 2 * i, &any);
	if (!any)
		return 0;
	for (*bad = 0; *bad < n && ((in[2 * *bad + 1] & 0x7c) != 0x7c); ++*bad)
		;
	return -1;
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

/* fp16's blob_encode: the halves into c->out, the floats they decode to into c->tmp2 (their
 * CRC is the blob's). */
static int fp16_encode_blob(struct blob_codec *c, const float *v, size_t count, const void **out,
			    struct blob_meta *meta, char *err)
{
	if (reserve(&c->out, &c->out_cap, count * 2) < 0 ||
	    reserve(&c->tmp2, &c->tmp2_cap, count * 4) < 0)
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", count * 6);
	if (fp16_encode(c->out, (float *)(void *)c->tmp2, v, count) < 0)
		return gem_errf(err, GEM_EUSAGE, "blob: fp16 of a vector that is not finite");
	meta->crc32 = crc32_update(0, c->tmp2, count * 4);
	meta->nbytes = count * 2;
	*out = c->out;
	c->lossy_ready = 1;
	return 0;
}

const float *blob_encoded_values(const struct blob_codec *c, const float *v)
{
	return c->lossy_ready ? (const float *)(const void *)c->tmp2 : v;
}

int blob_encode_feedback(struct blob_codec *c, const float *v, float *resid, size_t count,
			 const char *codec, int level, const void **out, struct blob_meta *meta,
			 char *err)
{
	const float *sent;
	int rc;
	if (!resid || !blob_codec_lossy(codec))
		return blob_encode(c, v, count, codec, level, out, meta, err);
	for (size_t i = 0; i < count; i++)
		resid[i] += v[i];
	if ((rc = blob_encode(c, resid, count, codec, level, out, meta, err)) < 0)
		return rc;
	sent = blob_encoded_values(c, resid);
	for (size_t i = 0; i < count; i++)
		resid[i] -= sent[i];
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
		blob_codec_check(codec, err);
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
	c->lossy_ready = 0;
	if (id == C_FP16)
		return fp16_encode_blob(c, v, count, out, meta, err);
	meta->crc32 = crc32_update(0, raw, len);
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

/* Decode and check in: *raw is the decoded bytes (in itself for a raw blob, else c's buffer). */
static int decode_checked(struct blob_codec *c, const void *in, const struct blob_meta *meta,
			  size_t count, const unsigned char **rawp, char *err)
{
	size_t len = count * 4;
	const unsigned char *raw;
	uint32_t crc;
	int id, rc;
	c->lossy_ready = 0; /* tmp2 is about to be overwritten */
	c->finite = 0;
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
	} else if (id == C_FP16) {
		size_t bad;
		if (meta->nbytes != count * 2)
			return gem_errf(err, GEM_EFAIL, "blob: fp16 size %zu bytes, want %zu",
					meta->nbytes, count * 2);
		if (reserve(&c->tmp2, &c->tmp2_cap, len) < 0)
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", len);
		if (fp16_decode((float *)(void *)c->tmp2, in, count, &bad) < 0)
			return gem_errf(err, GEM_EFAIL, "blob: fp16 element %zu is infinite or NaN", bad);
		raw = c->tmp2;
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
	crc = crc32_f32(raw, count, &c->finite);
	if (crc != meta->crc32)
		return gem_errf(err, GEM_EFAIL, "blob: CRC mismatch (data %08x, header %08x)", crc,
				meta->crc32);
	*rawp = raw;
	return 0;
}

int blob_decode(struct blob_codec *c, const void *in, const struct blob_meta *meta, float *v,
		size_t count, char *err)
{
	const unsigned char *raw;
	int rc = decode_checked(c, in, meta, count, &raw, err);
	if (rc < 0)
		return rc;
	if (count)
		memcpy(v, raw, count * 4);
	return 0;
}

int blob_decode_view(struct blob_codec *c, const void *in, const struct blob_meta *meta,
		     size_t count, const float **out, char *err)
{
	const unsigned char *raw;
	int rc = decode_checked(c, in, meta, count, &raw, err);
	if (rc < 0)
		return rc;
	if ((uintptr_t)raw % _Alignof(float)) {
		if (reserve(&c->tmp, &c->tmp_cap, count * 4) < 0)
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)",
					count * 4);
		memcpy(c->tmp, raw, count * 4);
		raw = c->tmp;
	}
	*out = (const float *)(const void *)raw;
	return 0;
}
