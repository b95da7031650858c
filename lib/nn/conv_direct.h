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
#include "nn/layers.h"

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
// Run each kernel call on t threads (default 1): forward and dx split the samples, dW the output
// channels; every output is computed as on one thread, so results do not change with t.
void conv_direct_threads(int t);
// The kernels to use: 2 AVX2 + FMA with AVX-512VL's 32 registers where the tiles gain from
// them, 1 AVX2 + FMA, 0 portable; a level the CPU lacks becomes the highest it has (tests
// force each). level = -1 only asks. Returns the level in use before.
int conv_direct_simd(int level);
#endif
