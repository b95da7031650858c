/* quant: the kernels of the blob codecs that lose precision (fp16, int8, int4, top-k; wire/blob.h
 * names them, gem-protocol(7) gives their byte layouts). An encoder writes the encoded bytes and
 * the floats they decode to (back), and, given a residual r, encodes x = v + r and leaves
 * r = x − back in the same pass: the sender's error feedback. A decoder checks every field and
 * says which one is wrong. int8 and int4 have AVX2 kernels and plain C twins, fp16 F16C ones and
 * branch-free C twins, top-k an AVX2 gather; each pair gives the same bytes, and quant_simd says
 * which runs. Pure functions: any thread, no allocation. */
#ifndef GEM_QUANT_H
#define GEM_QUANT_H
#include <stddef.h>
#include <stdint.h>

#define QUANT_BLOCK 256   /* elements per block of int8 and int4 */
#define QUANT_TINY 0x1p-96f /* a block whose largest |x| is below this is sent as zeros */

/* The kernels to use: 1 AVX2 where the CPU has it, 0 portable; a level the CPU lacks becomes the
 * highest it has (tests force each). level = -1 only asks. Returns the level in use before. */
int quant_simd(int level);

/* fp16: n floats (v + resid when resid is not NULL) into 2n bytes at out and their halves'
 * values at back. -1 if one is not finite (out, back and resid written all the same). */
int quant_fp16_encode(unsigned char *out, float *back, const float *v, float *resid, size_t n);
/* 2n bytes of halves into n floats; GEM_EFAIL (err names the element) if one is infinite or NaN. */
int quant_fp16_decode(float *v, const unsigned char *in, size_t n, char *err);

/* int8 (bits 8) or int4 (bits 4): the encoded size of n floats. */
size_t quant_int_size(size_t n, int bits);
/* n floats (v + resid when resid is not NULL) into quant_int_size bytes at out and the values
 * they decode to at back. GEM_EUSAGE (err says why) if one is not finite or a block's largest
 * |x| is beyond the codec's range (127·scale or 7·scale must be finite). */
int quant_int_encode(unsigned char *out, float *back, const float *v, float *resid, size_t n,
		     int bits, char *err);
/* quant_int_encode of x = a − b, never stored whole, and b += the values x decodes to (back),
 * block by block in one pass: the sender's side of a copy b the receiver keeps. 1 (b changed in
 * part) if an |a| or |b| is bound (a power of two) or more, or not finite. */
int quant_int_encode_diff(unsigned char *out, float *back, const float *a, float *b, size_t n,
			  int bits, float bound, char *err);
/* nbytes at in into n floats: GEM_EFAIL (err names the block or element) if nbytes is not
 * quant_int_size, a scale is negative, not finite or too large, a value is -128 (int8) or -8
 * (int4), or an odd last block's unused nibble is not 0. */
int quant_int_decode(float *v, const unsigned char *in, size_t nbytes, size_t n, int bits,
		     char *err);

/* top-k: the k sent of n floats for the fraction f (0 < f <= 1): ⌈f·n⌉, at least 1 (0 for n 0). */
size_t quant_topk_k(size_t n, double f);
/* The largest encoded size of k elements. */
size_t quant_topk_bound(size_t k);
/* The k largest |x| of x = v (+ resid) into out (*nbytes), ties to the lower index; back gets
 * the values sent at their places and 0 elsewhere. idx: scratch of 2n uint32s. GEM_EUSAGE if an
 * x is not finite, or k is above n or 0 for n above 0 (quant_topk_k's k never is). */
int quant_topk_encode(unsigned char *out, size_t *nbytes, float *back, const float *v,
		      float *resid, size_t n, size_t k, uint32_t *idx, char *err);
/* quant_topk_encode of x = a − b, computed in the select's passes, never stored. */
int quant_topk_encode_diff(unsigned char *out, size_t *nbytes, float *back, const float *a,
			   const float *b, size_t n, size_t k, uint32_t *idx, char *err);
/* nbytes at in into n floats: GEM_EFAIL (err says which field) if k > n, the sizes do not add
 * up, a value is infinite or NaN, an index is not below n, or a gap is not minimally coded. */
int quant_topk_decode(float *v, const unsigned char *in, size_t nbytes, size_t n, char *err);
#endif
