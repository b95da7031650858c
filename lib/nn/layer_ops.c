/* layer_ops: each layer type's spec checks, buffers and passes, over the kernels of layers.c,
 * and the table layer_all[] that model.c looks types up in. Shapes use model.c's legend:
 * B = batch, C = channels, H, W = image plane, IN/OUT = features, OC/OH/OW = conv output. */
#include "nn/layer_ops.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void *layer_falloc(size_t n, size_t elem)
{
	size_t bytes;
	void *p;
	if (elem && n > (SIZE_MAX - LAYER_GEMM_PAD - 64) / elem)
		return NULL;
	bytes = (n * elem + LAYER_GEMM_PAD + 63) / 64 * 64;
	p = aligned_alloc(64, bytes);
	/* the padding is read (by blis), never used: zero it so that it is defined */
	if (p)
		memset((char *)p + n * elem, 0, bytes - n * elem);
	return p;
}

static int add_tensor(struct layout *lo, int li, const char *kind, int ndim, const int *shape, char *err)
{
	if (lo->ntensors == LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "layers[%d]: more than %d parameter tensors", li,
				LAYOUT_MAX_TENSORS);
	struct layout_tensor *t = &lo->t[lo->ntensors];
	snprintf(t->name, sizeof t->name, "%d.%s", li, kind);
	t->ndim = ndim;
	t->size = 1;
	for (int d = 0; d < 4; d++) {
		t->shape[d] = d < ndim ? shape[d] : 0;
		if (d < ndim)
			t->size *= (size_t)shape[d];
	}
	t->offset = lo->total;
	lo->total += t->size;
	return lo->ntensors++;
}

/* "<li>.weight" of shape ws, then "<li>.bias" of ws[0] (the layout and init order). */
static int add_weight_bias(struct layer *l, struct layout *lo, int ndim, const int *ws, char *err)
{
	if ((l->wt = add_tensor(lo, l->index, "weight", ndim, ws, err)) < 0 ||
	    (l->bt = add_tensor(lo, l->index, "bias", 1, ws, err)) < 0)
		return GEM_EUSAGE;
	return 0;
}

/* The elements of the output for the pass's batch. */
static size_t out_size(const struct layer *l, const struct layer_pass *p)
{
	return (size_t)p->B * shape_size(l->out);
}

/* dense: x (B,IN) → y (B,OUT) = x·Wᵀ + b, W (OUT,IN), b (OUT);
 * dy (B,OUT) → dW = dyᵀ·x, db = Σ_B dy, dx (B,IN) = dy·W; aux: the products' scratch. */
static int dense_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[2] = {l->v[0].i, l->in.c};
	(void)classes;
	l->out = (struct shape){ws[0], 1, 1, 0};
	return add_weight_bias(l, lo, 2, ws, err);
}

/* aux: the scratch of layers.c's row-stored products */
static int dense_reserve(struct layer *l, int B, size_t *dcol)
{
	(void)dcol;
	return (l->aux = layer_falloc(dense_scratch_size(B, l->in.c, l->out.c), sizeof(float))) ? 0 : -1;
}

static const float *dense_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	dense_forward(l->y, x, p->W, p->b, p->B, l->in.c, l->out.c, l->aux);
	return l->y;
}

static float *dense_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	dense_backward(dx, p->dW, p->db, dy, l->x, p->W, p->B, l->in.c, l->out.c, l->aux);
	return dx;
}

static const struct layer_ops dense_ops = {
	.name = "dense", .input = LAYER_FLAT,
	.fields = {{"out", LAYER_INT, 1, 0, 1, 1 << 24}},
	.parse = dense_parse, .reserve = dense_reserve, .forward = dense_fwd, .backward = dense_bwd,
};

/* conv2d: x (C,B,H,W) → col (C·K·K, B·OH·OW) → y (OC,B,OH,OW) = W·col + b, W (OC,C,K,K);
 * dy (OC,B,OH,OW) → dW = dy·colᵀ, db = Σ dy per OC, dx (C,B,H,W) = col2im(Wᵀ·dy). */
static int conv2d_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int out = l->v[0].i, k = l->v[1].i, stride = l->v[2].i, pad = l->v[3].i;
	(void)classes;
	if (conv2d_shape_init(&l->cs, l->in.c, l->in.h, l->in.w, out, k, stride, pad) < 0)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].kernel: %d is larger than the (padded) input %dx%d",
				l->index, k, l->in.h + 2 * pad, l->in.w + 2 * pad);
	int ws[4] = {out, l->in.c, k, k};
	l->out = (struct shape){out, l->cs.oh, l->cs.ow, 1};
	return add_weight_bias(l, lo, 4, ws, err);
}

/* aux: the im2col of the last forward, which backward reads for dW. */
static int conv2d_reserve(struct layer *l, int B, size_t *dcol)
{
	size_t cols = conv2d_col_size(&l->cs, B);
	if (l->need_dx && cols > *dcol)
		*dcol = cols;
	return (l->aux = layer_falloc(cols, sizeof(float))) ? 0 : -1;
}

static const float *conv2d_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	conv2d_forward(l->y, l->aux, x, p->W, p->b, p->B, &l->cs, p->r != NULL);
	return l->y;
}

static float *conv2d_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	conv2d_backward(dx, p->dW, p->db, dx ? p->dcol : NULL, dy, l->aux, l->x, p->W, p->B, &l->cs);
	return dx;
}

static const struct layer_ops conv2d_ops = {
	.name = "conv2d", .input = LAYER_IMAGE,
	.fields = {{"out", LAYER_INT, 1, 0, 1, 1 << 16},
				 {"kernel", LAYER_INT, 1, 0, 1, 1 << 12},
				 {"stride", LAYER_INT, 0, 1, 1, 1 << 12},
				 {"padding", LAYER_INT, 0, 0, 0, 1 << 12}},
	.parse = conv2d_parse, .reserve = conv2d_reserve, .forward = conv2d_fwd, .backward = conv2d_bwd,
};

/* maxpool2d (size k): x (C,B,H,W) → y (C,B,H/k,W/k), aux (C,B,H/k,W/k) the argmax of each
 * window; dy (C,B,H/k,W/k) → dx (C,B,H,W), dy at each argmax, 0 elsewhere. */
static int maxpool2d_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int k = l->v[0].i;
	(void)lo, (void)classes;
	if (k > l->in.h || k > l->in.w)
		return gem_errf(err, GEM_EUSAGE, "layers[%d].size: %d is larger than the input %dx%d", l->index,
				k, l->in.h, l->in.w);
	l->out.h = l->in.h / k;
	l->out.w = l->in.w / k;
	return 0;
}

static int maxpool2d_reserve(struct layer *l, int B, size_t *dcol)
{
	(void)dcol;
	return (l->aux = layer_falloc((size_t)B * shape_size(l->out), sizeof(uint8_t))) ? 0 : -1;
}

static const float *maxpool2d_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	maxpool2d_forward(l->y, l->aux, x, (size_t)l->in.c * p->B, l->in.h, l->in.w, l->v[0].i);
	return l->y;
}

static float *maxpool2d_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	maxpool2d_backward(dx, dy, l->aux, (size_t)l->in.c * p->B, l->in.h, l->in.w, l->v[0].i);
	return dx;
}

static const struct layer_ops maxpool2d_ops = {
	.name = "maxpool2d", .input = LAYER_IMAGE,
	.fields = {{"size", LAYER_INT, 0, 2, 1, 16}},
	.parse = maxpool2d_parse, .reserve = maxpool2d_reserve, .forward = maxpool2d_fwd,
	.backward = maxpool2d_bwd,
};

/* The parse of a type whose output has its input's shape and whose fields need no check. */
static int same_shape_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)l, (void)lo, (void)classes, (void)err;
	return 0;
}

/* relu: any shape, y = max(x, 0); dy → dx = dy where y > 0, in place. */
static const float *relu_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	relu_forward(l->y, x, out_size(l, p));
	return l->y;
}

static float *relu_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	relu_backward(dy, dy, l->y, out_size(l, p));
	return dy;
}

static const struct layer_ops relu_ops = {
	.name = "relu", .parse = same_shape_parse, .forward = relu_fwd, .backward = relu_bwd,
};

/* dropout (p): any shape, y = x ⊙ mask, aux the mask (same shape as x), 0 with probability p,
 * else 1/(1−p); eval mode passes x through. dy → dx = dy ⊙ mask, in place. */
static int dropout_reserve(struct layer *l, int B, size_t *dcol)
{
	(void)dcol;
	return (l->aux = layer_falloc((size_t)B * shape_size(l->out), sizeof(float))) ? 0 : -1;
}

static const float *dropout_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	if (!p->r)
		return x;
	dropout_forward(l->y, l->aux, x, out_size(l, p), l->v[0].f, p->r);
	return l->y;
}

static float *dropout_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	dropout_backward(dy, dy, l->aux, out_size(l, p));
	return dy;
}

static const struct layer_ops dropout_ops = {
	.name = "dropout",
	.fields = {{"p", LAYER_NUM, 0, 0.5, 0, 1}},
	.parse = same_shape_parse, .reserve = dropout_reserve, .forward = dropout_fwd,
	.backward = dropout_bwd,
};

/* dropout2d (p): x (C,B,H,W) → y (C,B,H,W), aux the mask (C,B), one value per H·W plane;
 * dy → dx = dy ⊙ mask, in place. */
static int dropout2d_reserve(struct layer *l, int B, size_t *dcol)
{
	(void)dcol;
	return (l->aux = layer_falloc((size_t)B * l->in.c, sizeof(float))) ? 0 : -1;
}

static const float *dropout2d_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	if (!p->r)
		return x;
	dropout2d_forward(l->y, l->aux, x, (size_t)l->in.c * p->B, (size_t)l->in.h * l->in.w, l->v[0].f,
			  p->r);
	return l->y;
}

static float *dropout2d_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	dropout2d_backward(dy, dy, l->aux, (size_t)l->in.c * p->B, (size_t)l->in.h * l->in.w);
	return dy;
}

static const struct layer_ops dropout2d_ops = {
	.name = "dropout2d", .input = LAYER_IMAGE,
	.fields = {{"p", LAYER_NUM, 0, 0.5, 0, 1}},
	.parse = same_shape_parse, .reserve = dropout2d_reserve, .forward = dropout2d_fwd,
	.backward = dropout2d_bwd,
};

/* flatten: x (C,B,H,W) → y (B,C·H·W), PyTorch's order, and back; for C = 1 or a flat input the
 * two orders agree and y is x itself. */
static int flatten_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)lo, (void)classes, (void)err;
	l->out = (struct shape){(int)shape_size(l->in), 1, 1, 0};
	l->view = !(l->in.image && l->in.c > 1);
	return 0;
}

static const float *flatten_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	if (l->view)
		return x;
	flatten_forward(l->y, x, p->B, l->in.c, l->in.h * l->in.w);
	return l->y;
}

static float *flatten_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	if (l->view)
		return dy;
	flatten_backward(dx, dy, p->B, l->in.c, l->in.h * l->in.w);
	return dx;
}

static const struct layer_ops flatten_ops = {
	.name = "flatten", .parse = flatten_parse, .forward = flatten_fwd, .backward = flatten_bwd,
};

/* logsoftmax, the loss: x (B,IN) → y (B,IN) = log-probabilities, p->loss = Σ_B NLL of the
 * labels; backward ignores dy (the loss ends the net): dx (B,IN) = (exp y − onehot)·scale. */
static int logsoftmax_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)lo;
	if (l->in.c != classes)
		return gem_errf(err, GEM_EUSAGE, "classes: %d, but layers[%d] gets %d inputs", classes, l->index,
				l->in.c);
	return 0;
}

static const float *logsoftmax_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	p->loss = logsoftmax_nll_forward(l->y, x, p->label, p->B, l->in.c);
	return l->y;
}

static float *logsoftmax_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dy;
	logsoftmax_nll_backward(dx, l->y, p->label, p->B, l->in.c, p->scale);
	return dx;
}

static const struct layer_ops logsoftmax_ops = {
	.name = "logsoftmax", .input = LAYER_FLAT, .loss = 1,
	.parse = logsoftmax_parse, .forward = logsoftmax_fwd, .backward = logsoftmax_bwd,
};

const struct layer_ops *const layer_all[] = {
	&dense_ops, &conv2d_ops, &maxpool2d_ops, &relu_ops, &dropout_ops, &dropout2d_ops, &flatten_ops,
	&logsoftmax_ops, NULL,
};
