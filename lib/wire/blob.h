/* blob: the parameter blob, gem's one format for θ and its increments on the wire and on disk.
 * A blob is a float32 little-endian vector, as it is, byte-shuffled (all byte 0s, then all byte
 * 1s, ...) and deflated in the zlib format, or in one of the lossy codecs below, described by its
 * codec, element count, encoded size and the CRC-32 (zlib's) of the float32 bytes it stands for
 * (the raw ones; with a lossy codec, the values it decodes to). libdeflate does the deflating:
 * its whole-buffer zlib codec is ~3 times zlib's speed, with the same format; the CRC-32 is
 * wire/crc.h's (57 GB/s here from cache, against libdeflate's 12.6 and zlib's ~3). A blob_codec
 * holds the (de)compressor and scratch buffers, so encoding and decoding allocate nothing once
 * warm. */
#ifndef GEM_BLOB_H
#define GEM_BLOB_H
#include <stddef.h>
#include <stdint.h>

/* Codec names. Lossless: "raw" (the bytes as they are), "zlib", "zlib+shuffle" (the default for
 * parameters: dense float32 compresses ~7% plain, ~17% shuffled). Lossy, made for increments
 * sent with error feedback (blob_encode_feedback), each blob's CRC that of the float32 values it
 * decodes to (gem-protocol(7) gives the byte layouts; wire/quant.h has the kernels):
 * - "fp16": each float rounded to the nearest IEEE 754 binary16 (ties to even; magnitudes above
 *   65504 saturate to ±65504), 2 little-endian bytes each; a half that is infinite or NaN is
 *   refused;
 * - "int8", "int4": blocks of 256 elements (the last one shorter), each a float32 scale s = the
 *   block's largest |x| / 127 (int8) or / 7 (int4) and one signed value q per element, x/s
 *   rounded to nearest even: a byte each, or two's-complement nibbles two to a byte; a value
 *   decodes to q·s. About 3.9 and 7.8 times smaller than raw;
 * - "topk": the k = ⌈F·n⌉ largest |x| as fp16 values and the gaps between their indices in
 *   LEB128: about 3 bytes an element down to F = 1/100, 4 below. The sender names the fraction,
 *   "topk:F" with 0 < F <= 1; the blob says "topk" and holds k. */
#define BLOB_RAW "raw"
#define BLOB_ZLIB "zlib"
#define BLOB_ZLIB_SHUFFLE "zlib+shuffle"
#define BLOB_FP16 "fp16"
#define BLOB_INT8 "int8"
#define BLOB_INT4 "int4"
#define BLOB_TOPK "topk"
#define BLOB_CODEC_DEFAULT BLOB_ZLIB_SHUFFLE
#define BLOB_LEVEL_DEFAULT 1 /* level 1: fast, and within 2% of level 6's size on θ */
#define BLOB_CODEC_MAX 16
#define BLOB_MAX_COUNT ((size_t)1 << 29) /* 2 GiB of float32: larger blobs are refused */

struct blob_meta {
	char codec[BLOB_CODEC_MAX]; /* one of the names above */
	size_t count;               /* float32 elements */
	size_t nbytes;              /* encoded size in bytes */
	uint32_t crc32;             /* CRC-32 (zlib's) of the count*4 little-endian bytes of the
				     * floats, raw or (a lossy codec) decoded */
};

struct libdeflate_compressor;
struct libdeflate_decompressor;

/* Reusable encoder/decoder state; a zero-initialised struct is ready to use. */
struct blob_codec {
	struct libdeflate_compressor *def;
	struct libdeflate_decompressor *inf;
	int def_level;
	unsigned char *out;  /* encoded output */
	unsigned char *tmp;  /* shuffled bytes (encode), unshuffled bytes (decode); topk's
			      * candidates and their keys (encode) */
	unsigned char *tmp2; /* inflated bytes, checked before they reach the caller's vector;
			      * a lossy codec: the floats the encoded bytes decode to */
	size_t out_cap, tmp_cap, tmp2_cap;
	int lossy_ready; /* tmp2 holds the values of the last lossy blob_encode */
	int finite;      /* after a decode: 1 if its floats are known to be all finite (checked in
			  * the CRC's pass, crc32_f32), 0 if not or not known */
};

/* Prepare c (same as zeroing it). */
void blob_codec_init(struct blob_codec *c);
/* Release everything c holds; c can be initialised again. */
void blob_codec_free(struct blob_codec *c);
/* 1 if name is a codec this build knows: a blob's ("topk") or a sender's ("topk:0.01"). No
 * name is known of BLOB_CODEC_MAX characters or more. */
int blob_codec_known(const char *name);
/* 0 if a sender can encode with name (a name of the list above; topk with its fraction, the
 * whole under BLOB_CODEC_MAX characters); else GEM_EUSAGE, err naming the valid ones and
 * guessing a typo ("did you mean"). */
int blob_codec_check(const char *name, char *err);
/* 1 if the named codec loses precision: what the receiver decodes is not what was sent. */
int blob_codec_lossy(const char *name);
/* 1 if the named codec sends only some of the elements (topk): for increments with error
 * feedback, never for a whole vector. */
int blob_codec_sparse(const char *name);
/* The codec for a whole θ sent to a peer whose messages go in codec name (a known one): name
 * itself, but fp16 for int8, int4 and topk, which are made for increments with error feedback: θ
 * rounded to its block's 15 or 255 levels, or cut to its largest elements, is not the θ to train
 * at. */
const char *blob_codec_for_theta(const char *name);
/* Encode v[0..count) with codec (NULL: BLOB_CODEC_DEFAULT) at level (0-9; <0: default).
 * *out points at the encoded bytes (inside c, or at v itself for "raw"), valid until the next
 * call on c; meta describes them. */
int blob_encode(struct blob_codec *c, const float *v, size_t count, const char *codec, int level,
		const void **out, struct blob_meta *meta, char *err);
/* After a blob_encode on c that succeeded: the count floats the receiver will decode, inside c
 * (a lossy codec) or v itself, valid until the next call on c. For error feedback: v minus
 * these is what the rounding took away. NULL if nothing was encoded yet. */
const float *blob_encoded_values(const struct blob_codec *c, const float *v);
/* blob_encode of an increment v with error feedback: with a lossy codec, resid (count floats,
 * the sender's, zero at first) is added to v, the sum encoded, and what the codec took away
 * kept in resid for the next call: r ← v + r; send C(r); r ← r − sent, in the encoder's own
 * pass. Over any number of
 * calls Σ sent + resid = Σ v (up to float rounding of the sums): no increment is lost. With a
 * lossless codec (or resid NULL) it is blob_encode, resid untouched. */
int blob_encode_feedback(struct blob_codec *c, const float *v, float *resid, size_t count,
			 const char *codec, int level, const void **out, struct blob_meta *meta,
			 char *err);
/* blob_encode of the difference x = a − b (count floats each) in int8, int4 or topk:F, and the
 * sender's side of a copy b that the receiver keeps too: b += the values x decodes to (as
 * blob_decode gives them), *b_crc = the CRC-32 of b after, all in the encoder's passes; a is not
 * written, x not stored whole. 1 (nothing encoded; b changed in part) if an |a| or |b| is bound
 * (a power of two) or more, or is not finite; GEM_EUSAGE for another codec. */
int blob_encode_diff(struct blob_codec *c, const float *a, float *b, size_t count,
		     const char *codec, float bound, const void **out, struct blob_meta *meta,
		     uint32_t *b_crc, char *err);
/* The receiver's side of blob_encode_diff: b += got (add) or b = got (θ whole), then v = b (v may
 * be got), chunk by chunk in one pass; returns the CRC-32 of b after. */
uint32_t blob_take_diff(float *b, const float *got, float *v, size_t count, int add);
/* Decode the meta->nbytes bytes at in into v[0..count). Checks the codec, that meta->count is
 * count, the encoded and decoded sizes and the CRC; on any failure v is left untouched. */
int blob_decode(struct blob_codec *c, const void *in, const struct blob_meta *meta, float *v,
		size_t count, char *err);
/* blob_decode without a copy where none is needed: *out is the raw blob's own bytes when they
 * are float-aligned (in a message of msg_build's, they are), else c's buffer holding the
 * decoded values, valid until c's next use. The same checks; on failure *out is untouched. */
int blob_decode_view(struct blob_codec *c, const void *in, const struct blob_meta *meta,
		     size_t count, const float **out, char *err);
#endif
