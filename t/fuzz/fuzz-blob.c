/* fuzz-blob: libFuzzer target for blob_decode, with a differential check against plain zlib and
 * plain readers of the lossy codecs. The first 4 bytes choose the codec, the element count and
 * where the CRC comes from; the rest is the encoded blob. zlib's own inflate (and a reference
 * unshuffle), or a reference fp16 widening, int8/int4 block reader or top-k reader written
 * from gem-protocol(7), says what the bytes decode to: blob_decode must succeed exactly when
 * they decode to count floats (zlib: with nothing after the stream; fp16: all finite; int8,
 * int4: the size, every scale and value in range, the unused nibble 0; topk: k <= count, the
 * values finite, every index below count, minimal gaps, the sizes adding up) and the CRC
 * matches, and then give the same floats; otherwise leave v untouched. blob_decode_view must
 * agree, from an aligned or a misaligned copy of the blob. Flag bits (byte 3): 1 the CRC of what
 * the reference decodes, 2 the view from a misaligned copy, 4 the portable kernels of the lossy
 * codecs (else AVX2 where the CPU has it). */
#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "wire/blob.h"
#include "wire/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct blob_codec codec; /* reused, as gem-serve reuses a worker's codec */

/* Plain zlib: 0 and out[0..len) if in decodes to exactly len bytes and ends with the input. */
static int ref_inflate(const uint8_t *in, size_t inlen, uint8_t *out, size_t len)
{
	z_stream z;
	uint8_t extra;
	int rc;
	memset(&z, 0, sizeof z);
	if (inflateInit(&z) != Z_OK)
		abort();
	z.next_in = (uint8_t *)in;
	z.avail_in = (uInt)inlen;
	z.next_out = out;
	z.avail_out = (uInt)len;
	rc = inflate(&z, Z_FINISH);
	if (rc == Z_BUF_ERROR && z.avail_out == 0) {
		/* out is full: one more byte tells a longer stream from one that ends here */
		z.next_out = &extra;
		z.avail_out = 1;
		rc = inflate(&z, Z_FINISH);
		if (z.avail_out == 0)
			rc = Z_DATA_ERROR; /* a byte too many */
	}
	rc = rc == Z_STREAM_END && z.total_out == len && z.avail_in == 0 ? 0 : -1;
	inflateEnd(&z);
	return rc;
}

/* IEEE half to float, written out: 0 and *out, or -1 for an infinity or a NaN. */
static int ref_half(uint16_t h, float *out)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
	if (e == 31)
		return -1;
	if (e == 0) {
		float x = (float)m * 0x1p-24f; /* zero or subnormal: exact in a float */
		memcpy(&f, &x, 4);
		f |= sign;
	} else {
		f = sign | (e + 112) << 23 | m << 13;
	}
	memcpy(out, &f, 4);
	return 0;
}

/* int8 (L 127) or int4 (L 7): blocks of 256, a float32 scale then a byte or a nibble each */
static int ref_int(const uint8_t *in, size_t nbytes, size_t count, int L, float *out)
{
	size_t o = 0;
	for (size_t b = 0; b < count; b += 256) {
		size_t m = count - b < 256 ? count - b : 256, vb = L == 127 ? m : (m + 1) / 2;
		uint32_t u;
		float s;
		if (nbytes - o < 4 + vb)
			return -1;
		memcpy(&u, in + o, 4);
		memcpy(&s, &u, 4);
		if (u >> 31 || (u >> 23 & 0xff) == 0xff || !((float)L * s <= FLT_MAX))
			return -1;
		for (size_t j = 0; j < m; j++) {
			int q = L == 127 ? (int8_t)in[o + 4 + j]
					 : ((in[o + 4 + j / 2] >> (j % 2 ? 4 : 0) & 15) ^ 8) - 8;
			if (q < -L)
				return -1;
			out[b + j] = (float)q * s;
		}
		if (L == 7 && m % 2 && in[o + 4 + vb - 1] >> 4)
			return -1;
		o += 4 + vb;
	}
	return o == nbytes ? 0 : -1;
}

/* topk: k, k halves, k LEB128 gaps (minimal, at most 5 bytes) */
static int ref_topk(const uint8_t *in, size_t nbytes, size_t count, float *out)
{
	size_t k, o, next = 0;
	if (nbytes < 4)
		return -1;
	k = (size_t)in[0] | (size_t)in[1] << 8 | (size_t)in[2] << 16 | (size_t)in[3] << 24;
	if (k > count || nbytes < 4 + 2 * k)
		return -1;
	memset(out, 0, count * 4);
	o = 4 + 2 * k;
	for (size_t j = 0; j < k; j++) {
		uint64_t gap = 0;
		int len = 0;
		for (;;) {
			if (o == nbytes || len == 5 || (len > 0 && in[o] == 0))
				return -1;
			gap |= (uint64_t)(in[o] & 0x7f) << 7 * len++;
			if (!(in[o++] & 0x80))
				break;
		}
		if (next + gap >= count || ref_half((uint16_t)(in[4 + 2 * j] | in[5 + 2 * j] << 8),
						    out + next + gap) < 0)
			return -1;
		next += gap + 1;
	}
	return o == nbytes ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *names[] = {BLOB_RAW,  BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16,
				      BLOB_INT8, BLOB_INT4, BLOB_TOPK};
	const float *view = NULL;
	uint8_t *odd;
	char err[GEM_ERRMAX];
	struct blob_meta meta;
	size_t count, len;
	uint8_t *in, *ref, *v;
	int id, want, got;

	if (size < 4)
		return 0;
	id = data[0] % 7;
	count = (size_t)data[1] | (size_t)(data[2] & 0x0f) << 8; /* up to 4095 floats */
	memset(&meta, 0, sizeof meta);
	strcpy(meta.codec, names[id]);
	meta.count = count;
	meta.nbytes = size - 4;
	len = count * 4;
	in = malloc(meta.nbytes ? meta.nbytes : 1);
	ref = malloc(len + 1);
	v = malloc(len + 1);
	if (!in || !ref || !v)
		abort();
	memcpy(in, data + 4, meta.nbytes);
	if (id == 0) {
		want = meta.nbytes == len ? (memcpy(ref, in, len), 0) : -1;
	} else if (id == 3) {
		want = meta.nbytes == count * 2 ? 0 : -1;
		for (size_t i = 0; want == 0 && i < count; i++)
			want = ref_half((uint16_t)(in[2 * i] | in[2 * i + 1] << 8), (float *)(void *)ref + i);
	} else if (id == 4 || id == 5) {
		want = ref_int(in, meta.nbytes, count, id == 4 ? 127 : 7, (float *)(void *)ref);
	} else if (id == 6) {
		want = ref_topk(in, meta.nbytes, count, (float *)(void *)ref);
	} else {
		want = ref_inflate(in, meta.nbytes, ref, len);
	}
	if (want == 0 && id == 2) {
		/* reference unshuffle: byte k of float i was at k·count + i */
		uint8_t *u = malloc(len + 1);
		for (size_t i = 0; i < count; i++)
			for (int k = 0; k < 4; k++)
				u[i * 4 + k] = ref[(size_t)k * count + i];
		memcpy(ref, u, len);
		free(u);
	}
	/* the CRC of what plain zlib got (so that good blobs are reached), or the input's */
	if (data[3] & 1)
		meta.crc32 = want == 0 ? (uint32_t)crc32(0, ref, (uInt)len) : 0;
	else
		memcpy(&meta.crc32, data, 4);
	if (want == 0 && meta.crc32 != (uint32_t)crc32(0, ref, (uInt)len))
		want = -1;
	memset(v, 0xa5, len + 1);
	quant_simd(data[3] & 4 ? 0 : 1);
	got = blob_decode(&codec, in, &meta, (float *)v, count, err);
	if ((got == 0) != (want == 0))
		abort(); /* blob and plain zlib disagree on these bytes */
	if (got == 0 ? memcmp(v, ref, len) != 0 : (len && v[0] != 0xa5))
		abort(); /* different floats, or a refused blob that wrote into v */
	if (v[len] != 0xa5)
		abort();
	/* the view: from the blob where it lies, or from one byte further (misaligned) */
	odd = malloc(meta.nbytes + 1);
	if (!odd)
		abort();
	if (meta.nbytes)
		memcpy(odd + 1, in, meta.nbytes);
	got = blob_decode_view(&codec, data[3] & 2 ? odd + 1 : in, &meta, count, &view, err);
	if ((got == 0) != (want == 0) || (got == 0 && len && memcmp(view, ref, len) != 0) ||
	    (got != 0 && view) || (got == 0 && (uintptr_t)view % sizeof(float)))
		abort(); /* the view disagrees, or is not float-aligned */
	free(odd);
	free(in);
	free(ref);
	free(v);
	return 0;
}
