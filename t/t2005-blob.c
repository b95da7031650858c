/* t2005: blobs round-trip bit for bit in every codec (NaN payloads, denormals too), shuffling
 * compresses kaiming-like weights better, and bad blobs fail cleanly without touching v. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/rng.h"
#include "tap.h"

#include <string.h>
#include <zlib.h>

static const char *codecs[] = {BLOB_RAW, BLOB_ZLIB, BLOB_ZLIB_SHUFFLE};

/* The cnn of share/gem/models/cnn.json (the GEM paper's network), weights N(0, 2/fan_in),
 * biases small uniform. */
static size_t kaiming(float *v, struct rng *r)
{
	static const int shape[][2] = {{25, 10}, {250, 20}, {320, 300}, {300, 200}, {200, 10}};
	size_t n = 0;
	for (int l = 0; l < 5; l++) {
		int fan_in = shape[l][0], out = shape[l][1];
		double s = sqrt(2.0 / fan_in);
		for (int i = 0; i < fan_in * out; i++)
			v[n++] = (float)(rng_normal(r) * s);
		for (int i = 0; i < out; i++)
			v[n++] = (rng_float(r) * 2 - 1) / (float)sqrt(fan_in);
	}
	return n;
}

static float bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

int main(void)
{
	enum { MAXN = 170000 };
	static float v[MAXN], w[MAXN], sentinel[MAXN];
	static unsigned char enc[MAXN * 4 + 1024];
	char err[GEM_ERRMAX] = "";
	struct blob_codec c;
	struct blob_meta m, bad;
	const void *out;
	struct rng r;
	size_t n, sizes[3];
	int exact, rc;

	rng_seed(&r, 1, 2);
	n = kaiming(v, &r);
	ok(n == 163790, "cnn-sized vector: %zu floats", n);
	/* Special values in the middle of it. */
	{
		uint32_t special[] = {0x7fc00001, 0xffc12345, 0x7f800001, 0x7fbfffff, 0x7f800000,
				      0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x807fffff,
				      0x00400000, 0x7f7fffff, 0x00800000};
		for (size_t i = 0; i < sizeof special / 4; i++)
			v[1000 + i] = bits(special[i]);
	}
	for (size_t i = 0; i < MAXN; i++)
		sentinel[i] = (float)i * 0.5f;
	blob_codec_init(&c);

	for (int k = 0; k < 3; k++) {
		rc = blob_encode(&c, v, n, codecs[k], -1, &out, &m, err);
		ok(rc == 0 && !strcmp(m.codec, codecs[k]) && m.count == n, "%s: encode: %s", codecs[k],
		   err);
		sizes[k] = m.nbytes;
		memcpy(enc, out, m.nbytes);
		memset(w, 0, sizeof w);
		rc = blob_decode(&c, enc, &m, w, n, err);
		exact = rc == 0 && !memcmp(v, w, n * 4);
		ok(exact, "%s: round trip bit-exact, NaN payloads and denormals included: %s",
		   codecs[k], err);
		ok(m.crc32 == (uint32_t)crc32(0, (const unsigned char *)v, (uInt)(n * 4)),
		   "%s: crc32 of the raw bytes", codecs[k]);
	}
	ok(sizes[0] == n * 4, "raw is 4 bytes a float");
	/* the zlib format, whoever writes it: plain zlib reads what gem writes and the reverse */
	{
		uLongf zlen = sizeof enc;
		uLongf dlen = (uLongf)(n * 4);
		blob_encode(&c, v, n, BLOB_ZLIB, -1, &out, &m, err);
		memset(w, 0, sizeof w);
		ok(uncompress((Bytef *)w, &dlen, out, (uLong)m.nbytes) == Z_OK && dlen == n * 4 &&
			   !memcmp(v, w, n * 4),
		   "zlib's uncompress reads gem's zlib blob");
		ok(compress2((Bytef *)enc, &zlen, (const Bytef *)v, (uLong)(n * 4), 6) == Z_OK,
		   "zlib's compress2 at level 6");
		m.nbytes = zlen;
		memset(w, 0, sizeof w);
		ok(blob_decode(&c, enc, &m, w, n, err) == 0 && !memcmp(v, w, n * 4),
		   "gem reads zlib's own level-6 stream: %s", err);
	}
	diag("ratio raw/encoded: zlib %.3f, zlib+shuffle %.3f", (double)sizes[0] / (double)sizes[1],
	     (double)sizes[0] / (double)sizes[2]);
	ok(sizes[1] < sizes[0] && sizes[2] < sizes[1], "shuffle compresses better than plain zlib");
	ok((double)sizes[0] / (double)sizes[2] > 1.10, "zlib+shuffle saves over 10%%");

	ok(blob_encode(&c, v, n, NULL, -1, &out, &m, err) == 0 &&
		   !strcmp(m.codec, BLOB_CODEC_DEFAULT) && m.nbytes == sizes[2],
	   "NULL codec is the default, level -1 the default level");
	ok(blob_encode(&c, v, n, BLOB_ZLIB_SHUFFLE, 9, &out, &m, err) == 0 && m.nbytes <= sizes[2],
	   "level 9 is no larger");
	memcpy(enc, out, m.nbytes);
	ok(blob_decode(&c, enc, &m, w, n, err) == 0 && !memcmp(v, w, n * 4), "level 9 decodes");
	ok(blob_encode(&c, v, n, "lz4", 1, &out, &m, err) == GEM_EUSAGE, "unknown codec: %s", err);
	ok(blob_encode(&c, v, n, BLOB_ZLIB, 10, &out, &m, err) == GEM_EUSAGE, "level 10: %s", err);
	for (int k = 0; k < 3; k++) {
		err[0] = 0;
		rc = blob_encode(&c, v, 0, codecs[k], -1, &out, &m, err);
		memcpy(enc, out, m.nbytes);
		ok(rc == 0 && blob_decode(&c, enc, &m, w, 0, err) == 0, "%s: empty vector: %s",
		   codecs[k], err);
	}

	/* Failures leave w as it was. */
	blob_encode(&c, v, n, BLOB_ZLIB_SHUFFLE, -1, &out, &m, err);
	memcpy(enc, out, m.nbytes);
#define FAILS(meta, count, what)                                                             \
	do {                                                                                 \
		memcpy(w, sentinel, sizeof w);                                               \
		rc = blob_decode(&c, enc, meta, w, count, err);                              \
		ok(rc < 0 && !memcmp(w, sentinel, sizeof w), "%s: %s", what, err);          \
	} while (0)
	FAILS(&m, n - 1, "wrong count");
	bad = m;
	bad.count = n + 1;
	FAILS(&bad, n + 1, "blob shorter than its count");
	bad = m;
	bad.crc32 ^= 1;
	FAILS(&bad, n, "CRC mismatch");
	bad = m;
	bad.nbytes = m.nbytes - 1;
	FAILS(&bad, n, "truncated by one byte");
	bad.nbytes = m.nbytes / 2;
	FAILS(&bad, n, "truncated by half");
	bad.nbytes = 0;
	FAILS(&bad, n, "no bytes");
	bad = m;
	enc[m.nbytes] = 0x42;
	bad.nbytes = m.nbytes + 1;
	FAILS(&bad, n, "a byte after the stream");
	bad = m;
	memcpy(bad.codec, "zlib+shuffleXXXX", 16);
	FAILS(&bad, n, "codec without a NUL");
	snprintf(bad.codec, sizeof bad.codec, "zlib");
	FAILS(&bad, n, "shuffled data declared plain");
	enc[m.nbytes / 2] ^= 0x10;
	FAILS(&m, n, "a flipped bit in the middle");
	enc[m.nbytes / 2] ^= 0x10;
	enc[0] ^= 0xff;
	FAILS(&m, n, "a bad zlib header");
	enc[0] ^= 0xff;
	blob_encode(&c, v, n, BLOB_RAW, -1, &out, &m, err);
	memcpy(enc, out, m.nbytes);
	enc[12345] ^= 4;
	FAILS(&m, n, "raw: a flipped bit");
	enc[12345] ^= 4;
	bad = m;
	bad.nbytes = m.nbytes - 4;
	FAILS(&bad, n, "raw: short");

	/* Every single-byte corruption of a small blob either fails with v untouched or, when it
	 * hits bits zlib ignores, still decodes to the exact data. */
	{
		int clean = 1, failed = 0;
		blob_encode(&c, v, 2000, BLOB_ZLIB_SHUFFLE, -1, &out, &m, err);
		memcpy(enc, out, m.nbytes);
		for (size_t i = 0; i < m.nbytes; i++) {
			unsigned char old = enc[i];
			enc[i] ^= (unsigned char)(1u << (i % 8));
			memcpy(w, sentinel, 2000 * 4);
			rc = blob_decode(&c, enc, &m, w, 2000, err);
			if (rc < 0) {
				failed++;
				if (memcmp(w, sentinel, 2000 * 4))
					clean = 0;
			} else if (memcmp(w, v, 2000 * 4)) {
				clean = 0;
			}
			enc[i] = old;
		}
		ok(clean, "%d of %zu bit flips refused, none decoded to wrong data", failed, m.nbytes);
	}

	/* Warm codec: no buffer moves or grows across calls of one size. */
	{
		void *o = c.out, *t = c.tmp, *t2 = c.tmp2;
		int same = 1;
		blob_encode(&c, v, n, BLOB_ZLIB_SHUFFLE, 1, &out, &m, err);
		memcpy(enc, out, m.nbytes);
		o = c.out, t = c.tmp, t2 = c.tmp2;
		for (int i = 0; i < 5; i++) {
			blob_encode(&c, v, n, BLOB_ZLIB_SHUFFLE, 1, &out, &m, err);
			blob_decode(&c, enc, &m, w, n, err);
			if (c.out != o || c.tmp != t || c.tmp2 != t2)
				same = 0;
		}
		ok(same, "buffers are reused");
	}
	blob_codec_free(&c);
	return done_testing();
}
