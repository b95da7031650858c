/* fuzz-blob: libFuzzer target for blob_decode, with a differential check against plain zlib.
 * The first 4 bytes choose the codec, the element count and where the CRC comes from; the rest
 * is the encoded blob. zlib's own inflate (and a reference unshuffle, or a reference fp16
 * widening) says what the bytes decode to: blob_decode must succeed exactly when they decode to
 * count floats with nothing after the stream (fp16: all finite) and the CRC matches, and then
 * give the same floats; otherwise leave v untouched. blob_decode_view must agree, from an
 * aligned or a misaligned copy of the blob. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "wire/blob.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *names[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE, BLOB_FP16};
	const float *view = NULL;
	uint8_t *odd;
	char err[GEM_ERRMAX];
	struct blob_meta meta;
	size_t count, len;
	uint8_t *in, *ref, *v;
	int id, want, got;

	if (size < 4)
		return 0;
	id = data[0] % 4;
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
