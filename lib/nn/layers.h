/* layers: the forward/backward pairs a model is built from, on float32 batches. No function
 * allocates; callers pass every buffer. Image batches are stored channel-major, (C,B,H,W), so
 * one im2col + sgemm over the whole batch writes a conv's output in place (for C = 1 or B = 1
 * this is NCHW); flatten turns (C,B,H,W) into PyTorch's (B, C·H·W) order. */
#ifndef GEM_LAYERS_H
#define GEM_LAYERS_H
#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"
#include "nn/conv_direct.h" /* struct conv2d_shape */

/* Fill s and its output plane; returns 0, or -1 if the kernel does not fit the padded input. */
int conv2d_shape_init(struct conv2d_shape *s, int c, int h, int w, int oc, int k, int stride, int pad);
/* Floats of a conv's col (and dcol) for B samples: the im2col matrix, C·K·K rows × B·OH·OW
 * columns, or the padded direct kernels' packed batch if that is larger. */
size_t conv2d_col_size(const struct conv2d_shape *s, int B);

// Run the kernels on t threads (BLIS's, nn/conv_direct.h's and nn/matmul.h's); the default is 1
void layers_set_threads(int t);
// The programs' --threads T: an integer in [1, 64] (the pool's most, nn/pool.h) into *t;
// -1 if s is not, and a program says LAYERS_THREADS_BAD and s
#define LAYERS_THREADS_BAD "--threads: not an integer in [1, 64]: "
int layers_threads_arg(const char *s, int *t);

// x (C,B,H,W) → col (C·K·K, B·OH·OW); W (OC,C·K·K) · col + b → y (OC,B,OH,OW), or through
// nn/conv_direct.h's kernels for the shapes they take (col: their packed batch). keep: col
// holds the whole im2col (or packed batch) afterwards (backward reads it); 0: col is scratch
// (eval)
void conv2d_forward(float *y, float *col, const float *x, const float *W, const float *b, int B,
		    const struct conv2d_shape *s, int keep);
// dy (OC,B,OH,OW) → dW (OC,C,K,K) = dy·colᵀ, db (OC), dx (C,B,H,W) = col2im(Wᵀ·dy) through the
// scratch dcol (conv2d_col_size floats); dx and dcol may be NULL (no input gradient). x is the
// forward's input: stride-1 unpadded shapes nn/conv_direct.h takes compute dW from x, not col,
// and forward leaves col unwritten for them; its padded kernels read col as forward packed it.
void conv2d_backward(float *dx, float *dW, float *db, float *dcol, const float *dy, const float *col,
		     const float *x, const float *W, int B, const struct conv2d_shape *s);

// x (P,H,W) planes → y (P,H/k,W/k), max over k×k windows with stride k (floor), k <= 16; arg
// (P,H/k,W/k) keeps the position di·k + dj of each window's first maximum
void maxpool2d_forward(float *y, uint8_t *arg, const float *x, size_t planes, int h, int w, int k);
// dy (P,H/k,W/k) → dx (P,H,W): dy goes to each window's argmax, 0 elsewhere
void maxpool2d_backward(float *dx, const float *dy, const uint8_t *arg, size_t planes, int h, int w, int k);
// The two with the ReLU that follows the pool in the same pass: y = max(maxpool(x), 0); dy
// (the ReLU's) masked in place where ry (its output) <= 0, then the pool's backward. The floats
// are those of the two layers one after the other.
void maxpool2d_relu_forward(float *y, uint8_t *arg, const float *x, size_t planes, int h, int w, int k);
void maxpool2d_relu_backward(float *dx, float *dy, const float *ry, const uint8_t *arg, size_t planes, int h, int w,
			     int k);

// x (P,H,W) planes → y (P,H/k,W/k), the mean of each k×k window with stride k (floor)
void avgpool2d_forward(float *y, const float *x, size_t planes, int h, int w, int k);
// dy (P,H/k,W/k) → dx (P,H,W): dy/k² at each element of its window, 0 past the last whole one
void avgpool2d_backward(float *dx, const float *dy, size_t planes, int h, int w, int k);

// x (C,B,HW) → y (B,C), the mean of each plane
void globalavgpool_forward(float *y, const float *x, int B, int c, int hw);
// dy (B,C) → dx (C,B,HW) = dy/HW at every element of its plane
void globalavgpool_backward(float *dx, const float *dy, int B, int c, int hw);

#define GROUPNORM_EPS 1e-5f
// x (C,B,HW) → y = (x − μ)/√(σ² + ε)·g[c] + b[c], where μ and σ² (biased) are taken over
// the HW values of the C/G channels of one group of one sample (ε GROUPNORM_EPS); stats
// (B,G,2) keeps each (sample, group)'s μ and 1/√(σ² + ε)
void groupnorm_forward(float *y, float *stats, const float *x, const float *g, const float *b, int B, int c,
		       int hw, int G);
// the same, then y = add + y (add not NULL: a residual block's sum) and y = max(y, 0) (relu),
// in the same pass: the bits of groupnorm_forward, the add and relu_forward one after another
void groupnorm_forward_fused(float *y, float *stats, const float *x, const float *g, const float *b,
			     const float *add, int relu, int B, int c, int hw, int G);
// dy (C,B,HW) → dg, db (C) summed over the samples in order, dx (C,B,HW) (skipped if NULL; may
// be dy). ry not NULL: the output went through a ReLU whose output is ry, and dy is its
// output's gradient: dy is masked (0 where ry <= 0) in place first. sums: B·C·2 floats of
// scratch
void groupnorm_backward(float *dx, float *dg, float *db, float *dy, const float *ry, const float *x,
			const float *stats, const float *g, float *sums, int B, int c, int hw, int G);

// y = a + b, n elements (y may be a or b)
void add_forward(float *y, const float *a, const float *b, size_t n);

// y = max(x, 0), n elements
void relu_forward(float *y, const float *x, size_t n);
// dx = dy where y > 0, else 0 (dx may be dy)
void relu_backward(float *dx, const float *dy, const float *y, size_t n);

// train mode: mask = 0 with probability p, else 1/(1−p); y = x ⊙ mask (n elements)
void dropout_forward(float *y, float *mask, const float *x, size_t n, float p, struct rng *r);
// dx = dy ⊙ mask (dx may be dy)
void dropout_backward(float *dx, const float *dy, const float *mask, size_t n);
// as dropout with one mask value per plane of `plane` elements (whole channels of one sample)
void dropout2d_forward(float *y, float *mask, const float *x, size_t planes, size_t plane, float p,
		       struct rng *r);
void dropout2d_backward(float *dx, const float *dy, const float *mask, size_t planes, size_t plane);

// x (C,B,HW) → y (B,C·HW)
void flatten_forward(float *y, const float *x, int B, int c, int hw);
// dy (B,C·HW) → dx (C,B,HW)
void flatten_backward(float *dx, const float *dy, int B, int c, int hw);

// x (B,K) → logp (B,K) = x − log Σ exp x; returns Σ_b −logp[b, label_b] (labels < K; NULL: 0)
double logsoftmax_nll_forward(float *logp, const float *x, const uint16_t *label, int B, int K);
// start + Σ_b −logp[b, label_b] over B rows of K, in row order: logsoftmax_nll_forward's sum,
// which a batch cut into parts continues part after part to the same double
double nll_sum(const float *logp, const uint16_t *label, int B, int K, double start);
// fused log-softmax + NLL backward: dx (B,K) = (exp(logp) − onehot(label)) · scale (scale 1/B
// for a mean loss)
void logsoftmax_nll_backward(float *dx, const float *logp, const uint16_t *label, int B, int K, float scale);
#endif
