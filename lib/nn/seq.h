/* seq: the forward/backward pairs of the sequence layers (a GPT's), on float32, and the
 * element-wise activations built on the same vector e^x (gelu, sigmoid, tanh). A sequence is
 * (T, C) per sample and a batch of B of them is stored (B, T, C): N = B·T rows of C. The
 * products run on nn/matmul.h's kernels; the other passes are plain C in one order of
 * operations (no fused multiply-add), so every machine computes the same floats. No function
 * allocates; callers pass every buffer (scratch: matmul_scratch_size() floats). */
#ifndef GEM_SEQ_H
#define GEM_SEQ_H
#include <stddef.h>

// ids (N) token ids as floats → y (N,D) = W[id], W (V,D); an id outside [0, V) (which
// model_fits keeps out) reads row 0
void embedding_forward(float *y, const float *ids, const float *W, int N, int V, int D);
// dy (N,D) → dW (V,D) = Σ over the rows of each id of dy (the rows in order; an id outside
// [0, V) counts as 0)
void embedding_backward(float *dW, const float *dy, const float *ids, int N, int V, int D);

// x (B,T,D) → y = x + P[t], P (T,D)
void position_forward(float *y, const float *x, const float *P, int B, int T, int D);
// dy (B,T,D) → dP (T,D) = Σ_b dy[b] (b in order); the input gradient is dy itself
void position_backward(float *dP, const float *dy, int B, int T, int D);

#define LAYERNORM_EPS 1e-5f
// x (N,D) → y = (x − μ)/√(σ² + ε)·g + b per row (σ² the biased variance, ε LAYERNORM_EPS);
// stats (N,2) keeps each row's μ and 1/√(σ² + ε)
void layernorm_forward(float *y, float *stats, const float *x, const float *g, const float *b, int N, int D);
// dy (N,D) → dg, db (D) summed over the rows in order, dx (N,D) (skipped if NULL; may be dy)
void layernorm_backward(float *dx, float *dg, float *db, float *dy, const float *x, const float *stats,
			const float *g, int N, int D);

// y = x·σ(2z), z = √(2/π)(x + 0.044715x³): the tanh approximation of GELU, 0.5x(1 + tanh z)
void gelu_forward(float *y, const float *x, size_t n);
// dx = dy·gelu'(x) (dx may be dy)
void gelu_backward(float *dx, const float *dy, const float *x, size_t n);

// y = 1/(1 + e^(−x)), element-wise
void sigmoid_forward(float *y, const float *x, size_t n);
// dx = dy·y(1 − y) from the forward's output y (dx may be dy)
void sigmoid_backward(float *dx, const float *dy, const float *y, size_t n);
// y = tanh x = 2σ(2x) − 1 (within 2e-7 of it: an absolute error, as 1 − 2σ rounds near 0)
void tanh_forward(float *y, const float *x, size_t n);
// dx = dy·(1 − y²) from the forward's output y (dx may be dy)
void tanh_backward(float *dx, const float *dy, const float *y, size_t n);

// x (N,IN) · W (OUT,IN)ᵀ + b → y (N,OUT)
void dense_rows_forward(float *y, const float *x, const float *W, const float *b, int N, int in, int out,
			float *scratch);
// dy (N,OUT) → dW (OUT,IN) = dyᵀ·x, db (OUT) = Σ rows of dy (in order), dx (N,IN) = dy·W
// (skipped if dx is NULL)
void dense_rows_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
			 int N, int in, int out, float *scratch);

/* One causal multi-head self-attention layer's shape and buffers: x (B,T,C) → qkv (B,T,3C) =
 * x·Wqkvᵀ + bqkv (q, k, v side by side, each split into H heads of C/H), per (b, head) the
 * probabilities P (T,T) = softmax(q·kᵀ/√(C/H)) with P[i][j] = 0 for j > i, att (B,T,C) = P·v
 * in the head's columns, y (B,T,C) = att·Woᵀ + bo. Wqkv (3C,C), bqkv (3C), Wo (C,C), bo (C). */
struct attention {
	int B, T, C, H;
	float *qkv;  /* (B,T,3C), kept for backward */
	float *P;    /* (B,H,T,T), kept for backward */
	float *att;  /* (B,T,C), kept for backward */
	float *datt; /* backward: (B,T,C) */
	float *dqkv; /* backward: (B,T,3C) */
	float *dP;   /* backward: (T,T) for each of up to 16 threads */
};

// Floats of a's buffers for B samples, laid out end to end by attention_bind
size_t attention_size(int B, int T, int C, int H);
// Point a's buffers into mem (attention_size floats)
void attention_bind(struct attention *a, float *mem, int B, int T, int C, int H);
// y (B,T,C) from x, the batch's first B samples (B <= a's)
void attention_forward(struct attention *a, float *y, const float *x, const float *Wqkv, const float *bqkv,
		       const float *Wo, const float *bo, int B, float *scratch);
// dy (B,T,C) → dWqkv, dbqkv, dWo, dbo, and dx (B,T,C) unless NULL; x is the forward's input
void attention_backward(struct attention *a, float *dx, float *dWqkv, float *dbqkv, float *dWo, float *dbo,
			const float *dy, const float *x, const float *Wqkv, const float *Wo, int B, float *scratch);
#endif
