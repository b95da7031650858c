#include "wire/blob.h"
#include "base/err.h"
#include "base/num.h"
#include "wire/crc.h"
#include "wire/quant.h"

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

enum { C_RAW, C_ZLIB, C_SHUF, C_FP16, C_INT8, C_INT4, C_TOPK, C_N };

static const struct codec_desc {
	const char *name; /* on the wire */
	int lossy;
} codecs[C_N] = {
	[C_RAW] = {.name = BLOB_RAW},	    [C_ZLIB] = {.name = BLOB_ZLIB},
	[C_SHUF] = {.name = BLOB_ZLIB_SHUFFLE}, [C_FP16] = {.name = BLOB_FP16, .lossy = 1},
	[C_INT8] = {.name = BLOB_INT8, .lossy = 1}, [C_INT4] = {.name = BLOB_INT4, .lossy = 1},
	[C_TOPK] = {.name = BLOB_TOPK, .lossy = 1},
};

/* The codec of name (-1: none): a wire name, or "topk:F" with *frac = F in (0, 1] (0 for every
 * other name, "topk" alone included). A name is shorter than BLOB_CODEC_MAX, so that every
 * buffer and log line that holds one holds it whole. */
static int codec_id(const char *name, double *frac)
{
	size_t tl = strlen(BLOB_TOPK);
	*frac = 0;
	if (strnlen(name, BLOB_CODEC_MAX) == BLOB_CODEC_MAX)
		return -1;
	for (int id = 0; id < C_N; id++)
		if (!strcmp(name, codecs[id].name))
			return id;
	/* a plain decimal number: no blank, sign or letter but an exponent's (a name goes into
	 * logs and messages as it is) */
	if (!strncmp(name, BLOB_TOPK ":", tl + 1) && num_double(name + tl + 1, 0, 1, frac) == 0 &&
	    *frac > 0 && strspn(name + tl + 1, "0123456789.e-") == strlen(name + tl + 1))
		return C_TOPK;
	*frac = 0;
	return -1;
}

int blob_codec_lossy(const char *name)
{
	double f;
	int id = name ? codec_id(name, &f) : -1;
	return id >= 0 && codecs[id].lossy;
}

int blob_codec_known(const char *name)
{
	double f;
	return name && codec_id(name, &f) >= 0;
}

int blob_codec_check(const char *name, char *err)
{
	static const char *const names[] = {BLOB_RAW,  BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16,
					    BLOB_INT8, BLOB_INT4, BLOB_TOPK ":F"};
	double f;
	int id = name ? codec_id(name, &f) : -1;
	if (name && strnlen(name, BLOB_CODEC_MAX) == BLOB_CODEC_MAX)
		return gem_errf(err, GEM_EUSAGE, "codec \"%.64s%s\": a name is at most %d characters%s",
				name, strlen(name) > 64 ? "..." : "", BLOB_CODEC_MAX - 1,
				strncmp(name, BLOB_TOPK ":", strlen(BLOB_TOPK) + 1)
					? ""
					: " (topk:1e-9 is a shorter topk:0.000000001)");
	if (id == C_TOPK && f == 0)
		return gem_errf(err, GEM_EUSAGE,
				"codec \"%.64s\": topk needs the fraction of the elements it sends, "
				"topk:F with 0 < F <= 1 (topk:0.01 sends 1%%)", name);
	if (id >= 0)
		return 0;
	if (name && !strncmp(name, BLOB_TOPK ":", strlen(BLOB_TOPK) + 1))
		return gem_errf(err, GEM_EUSAGE,
				"codec \"%.64s\": the fraction of topk:F is a number with 0 < F <= 1",
				name);
	return gem_err_unknown(err, GEM_EUSAGE, "codec", name ? name : "", names,
			       sizeof names / sizeof *names);
}

int blob_codec_sparse(const char *name)
{
	double f;
	return name && codec_id(name, &f) == C_TOPK;
}

const char *blob_codec_for_theta(const char *name)
{
	double f;
	int id = name ? codec_id(name, &f) : -1;
	return id == C_INT8 || id == C_INT4 || id == C_TOPK ? BLOB_FP16 : name;
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

/* A lossy codec's blob_encode of v (+ resid, which keeps what was not sent): the bytes into
 * c->out, the floats they decode to into c->tmp2 (their CRC is the blob's). */
static int lossy_encode(struct blob_codec *c, int id, double frac, const float *v, float *resid,
			size_t count, const void **out, struct blob_meta *meta, char *err)
{
	size_t k = quant_topk_k(count, frac), cap;
	int rc;
	cap = id == C_FP16 ? count * 2
	      : id == C_TOPK ? quant_topk_bound(k)
			     : quant_int_size(count, id == C_INT8 ? 8 : 4);
	if (reserve(&c->out, &c->out_cap, cap) < 0 || reserve(&c->tmp2, &c->tmp2_cap, count * 4) < 0 ||
	    (id == C_TOPK && reserve(&c->tmp, &c->tmp_cap, count * 8) < 0))
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", cap + count * 12);
	switch (id) {
	case C_FP16:
		if (quant_fp16_encode(c->out, (float *)(void *)c->tmp2, v, resid, count) < 0)
			return gem_errf(err, GEM_EUSAGE, "blob: fp16 of a vector that is not finite");
		break;
	case C_TOPK:
		rc = quant_topk_encode(c->out, &cap, (float *)(void *)c->tmp2, v, resid, count, k,
				       (uint32_t *)(void *)c->tmp, err);
		if (rc < 0)
			return gem_errprefix(err, "blob: "), rc;
		break;
	default:
		rc = quant_int_encode(c->out, (float *)(void *)c->tmp2, v, resid, count,
				      id == C_INT8 ? 8 : 4, err);
		if (rc < 0)
			return gem_errprefix(err, "blob: "), rc;
	}
	meta->crc32 = crc32_update(0, c->tmp2, count * 4);
	meta->nbytes = cap;
	*out = c->out;
	c->lossy_ready = 1;
	return 0;
}

const float *blob_encoded_values(const struct blob_codec *c, const float *v)
{
	return c->lossy_ready ? (const float *)(const void *)c->tmp2 : v;
}

/* blob_encode, and with a lossy codec and resid, blob_encode_feedback */
static int encode_any(struct blob_codec *c, const float *v, float *resid, size_t count,
		      const char *codec, int level, const void **out, struct blob_meta *meta,
		      char *err)
{
	size_t len = count * 4, outlen = 0;
	const unsigned char *raw = (const unsigned char *)v;
	double frac;
	int id, rc;
	if (!codec)
		codec = BLOB_CODEC_DEFAULT;
	id = codec_id(codec, &frac);
	if (id < 0 || (id == C_TOPK && frac == 0)) {
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
	snprintf(meta->codec, sizeof meta->codec, "%s", codecs[id].name);
	meta->count = count;
	c->lossy_ready = 0;
	if (codecs[id].lossy)
		return lossy_encode(c, id, frac, v, resid, count, out, meta, err);
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

int blob_encode(struct blob_codec *c, const float *v, size_t count, const char *codec, int level,
		const void **out, struct blob_meta *meta, char *err)
{
	return encode_any(c, v, NULL, count, codec, level, out, meta, err);
}

int blob_encode_feedback(struct blob_codec *c, const float *v, float *resid, size_t count,
			 const char *codec, int level, const void **out, struct blob_meta *meta,
			 char *err)
{
	return encode_any(c, v, blob_codec_lossy(codec) ? resid : NULL, count, codec, level, out,
			  meta, err);
}

/* blob_encode_diff goes DIFF_CHUNK floats a step (a multiple of QUANT_BLOCK, so that int8 and
 * int4 encode each chunk into the bytes they give the whole): what a chunk decodes to and its
 * part of b are still in cache when the CRCs read them. The plain loops go DIFF_LANES elements a
 * step, a fixed count that the compiler turns into vector instructions at -O2, then the rest one
 * by one. */
#define DIFF_CHUNK 4096
#define DIFF_LANES 8

/* |x| >= bound (given as the bits of a power of two), or x not finite, on the bits of x */
static uint32_t diff_big(const float *x, uint32_t bound)
{
	uint32_t u;
	memcpy(&u, x, sizeof u);
	return (u & 0x7fffffffu) >= bound;
}

/* 1 if every |a| and |b| of n is below bound (a NaN is not) */
static int diff_fits(const float *restrict a, const float *restrict b, size_t n, uint32_t bound)
{
	uint32_t big = 0;
	size_t i = 0;
	for (; i + DIFF_LANES <= n; i += DIFF_LANES)
		for (int j = 0; j < DIFF_LANES; j++)
			big |= diff_big(a + i + j, bound) | diff_big(b + i + j, bound);
	for (; i < n; i++)
		big |= diff_big(a + i, bound) | diff_big(b + i, bound);
	return !big;
}

/* a[i] += b[i] for i < n */
static void diff_add(float *restrict a, const float *restrict b, size_t n)
{
	size_t i = 0;
	for (; i + DIFF_LANES <= n; i += DIFF_LANES)
		for (int j = 0; j < DIFF_LANES; j++)
			a[i + j] += b[i + j];
	for (; i < n; i++)
		a[i] += b[i];
}

/* The chunks of blob_encode_diff: int8 or int4 (bits) encodes each and adds it to b in its
 * pass, topk (bits 0) has encoded the whole into c->out and c->tmp2 before and b takes it here;
 * the CRCs go on. 1: an |a| or |b| is bound or more (int8, int4: checked here). */
static int diff_chunks(struct blob_codec *c, int bits, const float *a, float *b, size_t count,
		       float bound, uint32_t *crc, uint32_t *b_crc, char *err)
{
	float *back = (float *)(void *)c->tmp2;
	for (size_t o = 0; o < count; o += DIFF_CHUNK) {
		size_t m = count - o < DIFF_CHUNK ? count - o : DIFF_CHUNK;
		if (bits) {
			int rc = quant_int_encode_diff(c->out + quant_int_size(o, bits), back + o,
						       a + o, b + o, m, bits, bound, err);
			if (rc != 0)
				return rc;
		} else {
			diff_add(b + o, back + o, m);
		}
		*crc = crc32_update(*crc, back + o, m * sizeof *back);
		*b_crc = crc32_update(*b_crc, b + o, m * sizeof *b);
	}
	return 0;
}

int blob_encode_diff(struct blob_codec *c, const float *a, float *b, size_t count,
		     const char *codec, float bound, const void **out, struct blob_meta *meta,
		     uint32_t *b_crc, char *err)
{
	double frac;
	int id = codec_id(codec, &frac), bits = id == C_INT8 ? 8 : id == C_INT4 ? 4 : 0, rc;
	uint32_t bb;
	size_t k = quant_topk_k(count, frac), nbytes;
	memcpy(&bb, &bound, sizeof bb);
	if (!meta || !out || !b_crc)
		return gem_errf(err, GEM_EUSAGE, "blob: no place for the encoded difference");
	if (!(bits || (id == C_TOPK && frac > 0)))
		return gem_errf(err, GEM_EUSAGE, "blob: a difference goes in int8, int4 or topk:F, "
				"not %.64s", codec ? codec : "(none)");
	if (count > BLOB_MAX_COUNT)
		return gem_errf(err, GEM_EUSAGE, "blob: %zu elements is more than %zu", count,
				BLOB_MAX_COUNT);
	nbytes = bits ? quant_int_size(count, bits) : quant_topk_bound(k);
	if (reserve(&c->out, &c->out_cap, nbytes) < 0 ||
	    reserve(&c->tmp2, &c->tmp2_cap, count * 4) < 0 ||
	    (!bits && reserve(&c->tmp, &c->tmp_cap, count * 8) < 0))
		return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", nbytes + count * 12);
	memset(meta, 0, sizeof *meta);
	c->lossy_ready = 0;
	if (!bits) {
		if (!diff_fits(a, b, count, bb))
			return 1;
		rc = quant_topk_encode_diff(c->out, &nbytes, (float *)(void *)c->tmp2, a, b, count,
					    k, (uint32_t *)(void *)c->tmp, err);
		if (rc < 0)
			return gem_errprefix(err, "blob: "), rc;
	}
	*b_crc = 0;
	if ((rc = diff_chunks(c, bits, a, b, count, bound, &meta->crc32, b_crc, err)) != 0)
		return rc < 0 ? (gem_errprefix(err, "blob: "), rc) : rc;
	snprintf(meta->codec, sizeof meta->codec, "%s", codecs[id].name);
	meta->count = count;
	meta->nbytes = nbytes;
	*out = c->out;
	c->lossy_ready = 1;
	return 0;
}

uint32_t blob_take_diff(float *b, const float *got, float *v, size_t count, int add)
{
	uint32_t crc = 0;
	for (size_t o = 0; o < count; o += DIFF_CHUNK) {
		size_t m = count - o < DIFF_CHUNK ? count - o : DIFF_CHUNK;
		if (add)
			diff_add(b + o, got + o, m);
		else
			memcpy(b + o, got + o, m * sizeof *b);
		memcpy(v + o, b + o, m * sizeof *v);
		crc = crc32_update(crc, b + o, m * sizeof *b);
	}
	return crc;
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
	double frac;
	int id, rc;
	c->lossy_ready = 0; /* tmp2 is about to be overwritten */
	c->finite = 0;
	/* on the wire a codec is named alone: "topk", not the sender's "topk:F" */
	if (!memchr(meta->codec, 0, sizeof meta->codec) || (id = codec_id(meta->codec, &frac)) < 0 ||
	    frac != 0)
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
	} else if (codecs[id].lossy) {
		float *v;
		if (reserve(&c->tmp2, &c->tmp2_cap, len) < 0)
			return gem_errf(err, GEM_ENOMEM, "blob: out of memory (%zu bytes)", len);
		v = (float *)(void *)c->tmp2;
		if (id == C_FP16 && meta->nbytes != count * 2)
			rc = gem_errf(err, GEM_EFAIL, "fp16 size %zu bytes, want %zu", meta->nbytes,
				      count * 2);
		else if (id == C_FP16)
			rc = quant_fp16_decode(v, in, count, err);
		else if (id == C_TOPK)
			rc = quant_topk_decode(v, in, meta->nbytes, count, err);
		else
			rc = quant_int_decode(v, in, meta->nbytes, count, id == C_INT8 ? 8 : 4, err);
		if (rc < 0) {
			gem_errprefix(err, "blob: ");
			return rc;
		}
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
