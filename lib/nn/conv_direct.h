/* conv_direct: conv2d forward and weight gradient straight from the image planes (no im2col),
 * for stride 1, no padding and output rows a multiple of 8 wide (both of the cnn's layers),
 * vectorised over 8 output pixels of a row. x86-64 with AVX2+FMA (asked at run time) runs
 * intrinsics (with AVX-512VL, the weight gradient takes 4 output channels at a time instead of
 * 2: the same sums); elsewhere portable C does the same sums in the same order, with a
 * rounding after every multiply (no FMA). Layouts as in layers.h: x (C,B,H,W), y (OC,B,OH,OW).
 *
 * Summation order, against im2col + BLIS: each output is Σ over (c, ki, kj) in that order,
 * one running sum from 0, then + bias; each dW entry is 8 partial sums (output column mod 8)
 * over (b, oh, column) in order, added pairwise (0+4, 1+5, ... then halves). */
#ifndef GEM_CONV_DIRECT_H
#define GEM_CONV_DIRECT_H
#include <stddef.h>

/* The geometry of one conv2d layer; conv2d_shape_init (nn/layers.h) fills oh, ow. Defined here,
 * below the layers that use these kernels, so that neither header includes the other. */
struct conv2d_shape {
	int c, h, w;             /* input channels and plane */
	int oc, k, stride, pad;  /* output channels, square kernel, stride, zero padding */
	int oh, ow;              /* output plane: (h + 2·pad − k) / stride + 1 */
};

// 1 if the direct kernels take shape s
int conv_direct_fits(const struct conv2d_shape *s);
// y = W ⊛ x + b, for B samples (conv_direct_fits(s))
void conv_direct_forward(float *y, const float *x, const float *W, const float *b, int B,
			 const struct conv2d_shape *s);
// dW (OC,C,K,K) = Σ over the batch of dy ⊗ x (conv_direct_fits(s))
void conv_direct_dW(float *dW, const float *dy, const float *x, int B, const struct conv2d_shape *s);
// 1 if conv_direct_dx takes shape s: conv_direct_fits(s), K <= 8, OW <= 64
int conv_direct_dx_fits(const struct conv2d_shape *s);
// dx (C,B,H,W) = Σ_o Σ_ki,kj W[o][c][ki][kj]·dy[o][b][ih−ki][iw−kj] over the output pixels
// that exist: for each dx row, 8-wide partial rows T[kj] = Σ over o, then ki, and dx[iw] =
// Σ_kj T[kj][iw − kj] in kj order
void conv_direct_dx(float *dx, const float *dy, const float *W, int B, const struct conv2d_shape *s);
/* Padded and strided shapes (kernels up to 3×3, stride 1 or 2, padding < kernel: the resnet's
 * 3×3 pad-1 convolutions and 1×1 stride-2 shortcuts), and stride-1 ones whose output rows are
 * not a multiple of 8: the same tiles on P, a packed copy of the batch in which every tap of
 * 8 neighbouring outputs is 8 consecutive floats (nn/conv_direct.c says how). Sums: each
 * output Σ over (c, ki, kj), then + bias; each dW entry 8 lane sums (output column mod 8)
 * over (b, oh, column), added pairwise; each dx entry Σ over its taps of (Σ over o). */
// 1 if the padded kernels take shape s (and conv_direct_fits(s) does not)
int conv_direct_pad_fits(const struct conv2d_shape *s);
// Floats of P (or of dx's D) for B samples
size_t conv_direct_pad_size(const struct conv2d_shape *s, int B);
// y = W ⊛ x + b, packing x into P (conv_direct_pad_size floats) as it goes; keep: P holds the
// whole batch afterwards (for dW), 0: one sample per thread, reused (stays in the cache)
void conv_direct_pad_forward(float *y, float *P, const float *x, const float *W, const float *b, int B,
			     const struct conv2d_shape *s, int keep);
// dW = Σ over the batch of dy ⊗ x, x read from P as conv_direct_pad_forward packed it
void conv_direct_pad_dW(float *dW, const float *dy, const float *P, int B, const struct conv2d_shape *s);
// dx (C,B,H,W) from dy, through the scratch D (conv_direct_pad_size floats)
void conv_direct_pad_dx(float *dx, float *D, const float *dy, const float *W, int B, const struct conv2d_shape *s);
// Run each kernel call on t threads (default 1): forward and dx split the samples, dW the output
// channels; every output is computed as on one thread, so results do not change with t.
void conv_direct_threads(int t);
// The kernels to use: 2 AVX2 + FMA with AVX-512VL's 32 registers where the tiles gain from
// them, 1 AVX2 + FMA, 0 portable; a level the CPU lacks becomes the highest it has (tests
// force each). level = -1 only asks. Returns the level in use before.
int conv_direct_simd(int level);
#endif
