/* layer_ops: each layer type's spec checks, buffers and passes, over the kernels of layers.c
 * and seq.c, the table layer_all[] that model.c looks types up in, and the loops that run a
 * chain of layers (a model's, a residual block's). Shapes use model.c's legend: B = batch,
 * C = channels, H, W = image plane, IN/OUT = features, OC/OH/OW = conv output, T = positions
 * of a sequence, N = rows (B for a flat shape, B·T for a sequence), D = a sequence's features. */
#include "nn/layer_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/matmul.h"

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

/* Add tensor "<l's name>.<kind>" of shape[0..ndim) as l's next tensor; its index, or
 * GEM_EUSAGE when the layout is full. */
static int add_tensor(struct layer *l, struct layout *lo, const char *kind, int ndim, const int *shape, char *err)
{
	int k = 0;
	if (lo->ntensors == LAYOUT_MAX_TENSORS)
		return gem_errf(err, GEM_EUSAGE, "%s: more than %d parameter tensors in the model", l->path,
				LAYOUT_MAX_TENSORS);
	while (l->t[k] >= 0)
		k++;
	struct layout_tensor *t = &lo->t[lo->ntensors];
	if ((size_t)snprintf(t->name, sizeof t->name, "%s.%s", l->name, kind) >= sizeof t->name)
		return gem_errf(err, GEM_EUSAGE, "%s: nested too deep to name its tensors", l->path);
	t->ndim = ndim;
	t->size = 1;
	for (int d = 0; d < 4; d++) {
		t->shape[d] = d < ndim ? shape[d] : 0;
		if (d < ndim)
			t->size *= (size_t)shape[d];
	}
	t->offset = lo->total;
	lo->total += t->size;
	l->params = 1;
	return l->t[k] = lo->ntensors++;
}

/* "<li>.weight" of shape ws, then "<li>.bias" of ws[0] (the layout and init order). */
static int add_weight_bias(struct layer *l, struct layout *lo, int ndim, const int *ws, char *err)
{
	if (add_tensor(l, lo, "weight", ndim, ws, err) < 0 || add_tensor(l, lo, "bias", 1, ws, err) < 0)
		return GEM_EUSAGE;
	return 0;
}

/* The elements of the output for the pass's batch. */
static size_t out_size(const struct layer *l, const struct layer_pass *p)
{
	return (size_t)p->B * shape_size(l->out);
}

void layer_init_default(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	/* kaiming_uniform_(a=√5): gain √(2/(1+5)), bound gain·√(3/fan_in) = 1/√fan_in; PyTorch
	 * draws the bias from the same interval */
	const struct layout_tensor *ts[2] = {&lo->t[l->t[0]], &lo->t[l->t[1]]};
	int fan_in = (int)(ts[0]->size / (size_t)ts[0]->shape[0]); /* W is (OUT, fan-in...) */
	float bound = 1.0f / sqrtf((float)fan_in);
	for (int j = 0; j < 2; j++) {
		float *p = theta + ts[j]->offset;
		for (size_t k = 0; k < ts[j]->size; k++)
			p[k] = (2.0f * rng_float(r) - 1.0f) * bound;
	}
}

/* Weights N(0, std²) in layout order (tensor k of l), drawn from r. */
static void init_normal(const struct layer *l, int k, const struct layout *lo, float *theta, float std,
			struct rng *r)
{
	const struct layout_tensor *t = &lo->t[l->t[k]];
	for (size_t i = 0; i < t->size; i++)
		theta[t->offset + i] = (float)(std * rng_normal(r));
}

/* Tensor k of l set to v. */
static void init_const(const struct layer *l, int k, const struct layout *lo, float *theta, float v)
{
	const struct layout_tensor *t = &lo->t[l->t[k]];
	for (size_t i = 0; i < t->size; i++)
		theta[t->offset + i] = v;
}

/* A normalisation's gain 1 and bias 0 (tensors 0 and 1). */
static void norm_init(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	(void)r;
	init_const(l, 0, lo, theta, 1.0f);
	init_const(l, 1, lo, theta, 0.0f);
}

/* dense: rows x (N,IN) → y (N,OUT) = x·Wᵀ + b, W (OUT,IN), b (OUT), N = B (flat) or B·T (a
 * sequence); dy (N,OUT) → dW = dyᵀ·x, db = Σ_N dy, dx (N,IN) = dy·W, on nn/matmul.h (seq.c).
 * Field init: 0, PyTorch's default initialisation; > 0, W ~ N(0, init²) and b = 0. */
static int dense_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[2] = {l->v[0].i, l->in.c};
	(void)classes;
	l->out = (struct shape){ws[0], l->in.seq ? l->in.h : 1, 1, 0, l->in.seq};
	return add_weight_bias(l, lo, 2, ws, err);
}

static void dense_init(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	if (l->v[1].f > 0) {
		init_normal(l, 0, lo, theta, l->v[1].f, r);
		init_const(l, 1, lo, theta, 0.0f);
	} else {
		layer_init_default(l, lo, theta, r);
	}
}

static int dense_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)l, (void)B;
	need->scratch = need->scratch > matmul_scratch_size() ? need->scratch : matmul_scratch_size();
	return 0;
}

static const float *dense_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	dense_rows_forward(l->y, x, p->W, p->b, p->B * l->in.h, l->in.c, l->out.c, p->scratch);
	return l->y;
}

static float *dense_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	dense_rows_backward(dx, p->dW, p->db, dy, l->x, p->W, p->B * l->in.h, l->in.c, l->out.c, p->scratch);
	return dx;
}

static const struct layer_ops dense_ops = {
	.name = "dense", .input = LAYER_ROWS,
	.fields = {{"out", LAYER_INT, 1, 0, 1, 1 << 24}, {"init_std", LAYER_NUM, 0, 0, 0, 1e3}},
	.parse = dense_parse, .init = dense_init, .reserve = dense_reserve, .forward = dense_fwd,
	.backward = dense_bwd,
};

/* conv2d: x (C,B,H,W) → col (C·K·K, B·OH·OW) → y (OC,B,OH,OW) = W·col + b, W (OC,C,K,K);
 * dy (OC,B,OH,OW) → dW = dy·colᵀ, db = Σ dy per OC, dx (C,B,H,W) = col2im(Wᵀ·dy). */
static int conv2d_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int out = l->v[0].i, k = l->v[1].i, stride = l->v[2].i, pad = l->v[3].i;
	(void)classes;
	if (conv2d_shape_init(&l->cs, l->in.c, l->in.h, l->in.w, out, k, stride, pad) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s.kernel: %d is larger than the (padded) input %dx%d",
				l->path, k, l->in.h + 2 * pad, l->in.w + 2 * pad);
	int ws[4] = {out, l->in.c, k, k};
	l->out = (struct shape){out, l->cs.oh, l->cs.ow, 1, 0};
	return add_weight_bias(l, lo, 4, ws, err);
}

/* aux: the im2col of the last forward, which backward reads for dW. */
static int conv2d_reserve(struct layer *l, int B, struct layer_need *need)
{
	size_t cols = conv2d_col_size(&l->cs, B);
	if (l->need_dx && cols > need->dcol)
		need->dcol = cols;
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
	.parse = conv2d_parse, .init = NULL, .reserve = conv2d_reserve, .forward = conv2d_fwd,
	.backward = conv2d_bwd,
};

/* maxpool2d (size k): x (C,B,H,W) → y (C,B,H/k,W/k), aux (C,B,H/k,W/k) the argmax of each
 * window; dy (C,B,H/k,W/k) → dx (C,B,H,W), dy at each argmax, 0 elsewhere. Its parse is
 * avgpool2d's too: size k fits the input, out (C,H/k,W/k). */
static int pool2d_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int k = l->v[0].i;
	(void)lo, (void)classes;
	if (k > l->in.h || k > l->in.w)
		return gem_errf(err, GEM_EUSAGE, "%s.size: %d is larger than the input %dx%d", l->path, k,
				l->in.h, l->in.w);
	l->out.h = l->in.h / k;
	l->out.w = l->in.w / k;
	return 0;
}

static int maxpool2d_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)need;
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
	.parse = pool2d_parse, .reserve = maxpool2d_reserve, .forward = maxpool2d_fwd,
	.backward = maxpool2d_bwd,
};

/* The parse of a type whose output has its input's shape and whose fields need no check. */
static int same_shape_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)l, (void)lo, (void)classes, (void)err;
	return 0;
}

/* avgpool2d (size k): x (C,B,H,W) → y (C,B,H/k,W/k), the mean of each window; dy → dx (C,B,H,W),
 * dy/k² over each window, 0 past the last whole one. */
static const float *avgpool2d_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	avgpool2d_forward(l->y, x, (size_t)l->in.c * p->B, l->in.h, l->in.w, l->v[0].i);
	return l->y;
}

static float *avgpool2d_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	avgpool2d_backward(dx, dy, (size_t)l->in.c * p->B, l->in.h, l->in.w, l->v[0].i);
	return dx;
}

static const struct layer_ops avgpool2d_ops = {
	.name = "avgpool2d", .input = LAYER_IMAGE,
	.fields = {{"size", LAYER_INT, 0, 2, 1, 1 << 12}},
	.parse = pool2d_parse, .forward = avgpool2d_fwd, .backward = avgpool2d_bwd,
};

/* globalavgpool: x (C,B,H,W) → flat y (B,C), the mean of each plane; dy (B,C) → dx (C,B,H,W),
 * dy/(H·W) over its plane. */
static int globalavgpool_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)lo, (void)classes, (void)err;
	l->out = (struct shape){l->in.c, 1, 1, 0, 0};
	return 0;
}

static const float *globalavgpool_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	globalavgpool_forward(l->y, x, p->B, l->in.c, l->in.h * l->in.w);
	return l->y;
}

static float *globalavgpool_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	globalavgpool_backward(dx, dy, p->B, l->in.c, l->in.h * l->in.w);
	return dx;
}

static const struct layer_ops globalavgpool_ops = {
	.name = "globalavgpool", .input = LAYER_IMAGE,
	.parse = globalavgpool_parse, .forward = globalavgpool_fwd, .backward = globalavgpool_bwd,
};

/* groupnorm (groups G): x (C,B,H,W) → y, each sample's G groups of C/G channels normalised
 * over their values, then a gain and a bias per channel, g (C) = 1 and b (C) = 0 at first; aux
 * (B,G,2) each (sample, group)'s μ and 1/√(σ² + ε); dy → dg, db, and dx in place. Nothing is
 * kept from batch to batch. */
static int groupnorm_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[1] = {l->in.c};
	(void)classes;
	if (l->in.c % l->v[0].i)
		return gem_errf(err, GEM_EUSAGE, "%s.groups: %d does not divide the %d channels", l->path, l->v[0].i,
				l->in.c);
	if (add_tensor(l, lo, "weight", 1, ws, err) < 0 || add_tensor(l, lo, "bias", 1, ws, err) < 0)
		return GEM_EUSAGE;
	return 0;
}

/* aux: the stats (B,G,2), then backward's plane sums (B,C,2) */
static int groupnorm_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)need;
	return (l->aux = malloc(sizeof(float) * 2 * (size_t)B * (l->v[0].i + l->in.c))) ? 0 : -1;
}

static float *groupnorm_sums(const struct layer *l, const struct layer_pass *p)
{
	return (float *)l->aux + 2 * (size_t)p->B * l->v[0].i;
}

/* A groupnorm's forward fused with what follows it: y = relu?(norm(x) + add?) into y */
static void groupnorm_fused_fwd(struct layer *l, float *y, const float *x, const float *add, int relu,
				struct layer_pass *p)
{
	groupnorm_forward_fused(y, l->aux, x, p->W, p->b, add, relu, p->B, l->in.c, l->in.h * l->in.w, l->v[0].i);
}

/* ... and its backward: dy the gradient of the fused output, masked in place by the ReLU's
 * output ry (NULL: none); dx into dx (may be dy; NULL: none) */
static void groupnorm_fused_bwd(struct layer *l, float *dy, float *dx, const float *ry, struct layer_pass *p)
{
	groupnorm_backward(dx, p->dW, p->db, dy, ry, l->x, l->aux, p->W, groupnorm_sums(l, p), p->B, l->in.c,
			   l->in.h * l->in.w, l->v[0].i);
}

static const float *groupnorm_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	groupnorm_fused_fwd(l, l->y, x, NULL, 0, p);
	return l->y;
}

static float *groupnorm_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	groupnorm_fused_bwd(l, dy, l->need_dx ? dy : NULL, NULL, p);
	return dy;
}

static const struct layer_ops groupnorm_ops = {
	.name = "groupnorm", .input = LAYER_IMAGE,
	.fields = {{"groups", LAYER_INT, 1, 0, 1, 1 << 16}},
	.parse = groupnorm_parse, .init = norm_init, .reserve = groupnorm_reserve, .forward = groupnorm_fwd,
	.backward = groupnorm_bwd,
};

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

/* tanh, sigmoid: any shape, element-wise (nn/seq.h); dy → dx from the output y, in place. */
static const float *tanh_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	tanh_forward(l->y, x, out_size(l, p));
	return l->y;
}

static float *tanh_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	tanh_backward(dy, dy, l->y, out_size(l, p));
	return dy;
}

static const struct layer_ops tanh_ops = {
	.name = "tanh", .parse = same_shape_parse, .forward = tanh_fwd, .backward = tanh_bwd,
};

static const float *sigmoid_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	sigmoid_forward(l->y, x, out_size(l, p));
	return l->y;
}

static float *sigmoid_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	sigmoid_backward(dy, dy, l->y, out_size(l, p));
	return dy;
}

static const struct layer_ops sigmoid_ops = {
	.name = "sigmoid", .parse = same_shape_parse, .forward = sigmoid_fwd, .backward = sigmoid_bwd,
};

/* dropout (p): any shape, y = x ⊙ mask, aux the mask (same shape as x), 0 with probability p,
 * else 1/(1−p); eval mode passes x through. dy → dx = dy ⊙ mask, in place. */
static int dropout_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)need;
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
static int dropout2d_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)need;
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
	l->out = (struct shape){(int)shape_size(l->in), 1, 1, 0, 0};
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

/* logsoftmax, the loss: rows x (N,IN) → y (N,IN) = log-probabilities, p->loss = Σ_N NLL of
 * the labels (N of them: one per position of a sequence); backward ignores dy (the loss ends
 * the net): dx (N,IN) = (exp y − onehot)·scale. */
static int logsoftmax_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	(void)lo;
	if (l->in.c != classes)
		return gem_errf(err, GEM_EUSAGE, "classes: %d, but %s gets %d inputs%s", classes, l->path, l->in.c,
				l->in.seq ? " per position" : "");
	return 0;
}

static const float *logsoftmax_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	p->loss = logsoftmax_nll_forward(l->y, x, p->label, p->B * shape_rows(l->in), l->in.c);
	return l->y;
}

static float *logsoftmax_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dy;
	logsoftmax_nll_backward(dx, l->y, p->label, p->B * shape_rows(l->in), l->in.c, p->scale);
	return dx;
}

static const struct layer_ops logsoftmax_ops = {
	.name = "logsoftmax", .input = LAYER_ROWS, .loss = 1,
	.parse = logsoftmax_parse, .forward = logsoftmax_fwd, .backward = logsoftmax_bwd,
};

/* The matmul scratch a sequence layer's products need. */
static int need_scratch(struct layer *l, int B, struct layer_need *need)
{
	(void)l, (void)B;
	if (need->scratch < matmul_scratch_size())
		need->scratch = matmul_scratch_size();
	return 0;
}

/* embedding (vocab V, dim D), the first layer: token ids x (B,T) as floats → y (B,T,D) = W[x],
 * W (V,D) ~ N(0, init_std²); dy (B,T,D) → dW, the rows of each id summed (no input gradient). */
static int embedding_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[2] = {l->v[0].i, l->v[1].i};
	(void)classes;
	l->out = (struct shape){ws[1], l->in.c, 1, 0, 1};
	return add_tensor(l, lo, "weight", 2, ws, err) < 0 ? GEM_EUSAGE : 0;
}

static void embedding_init(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	init_normal(l, 0, lo, theta, l->v[2].f, r);
}

static const float *embedding_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	embedding_forward(l->y, x, p->W, p->B * l->out.h, l->v[0].i, l->out.c);
	return l->y;
}

static float *embedding_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	embedding_backward(p->dW, dy, l->x, p->B * l->out.h, l->v[0].i, l->out.c);
	return NULL;
}

static const struct layer_ops embedding_ops = {
	.name = "embedding", .input = LAYER_FLAT, .first = 1,
	.fields = {{"vocab", LAYER_INT, 1, 0, 1, 1 << 24}, {"dim", LAYER_INT, 1, 0, 1, 1 << 16},
		   {"init_std", LAYER_NUM, 0, 0.02, 0, 1e3}},
	.parse = embedding_parse, .init = embedding_init, .forward = embedding_fwd, .backward = embedding_bwd,
};

/* position: x (B,T,D) → y = x + P[t], P (T,D) ~ N(0, init_std²) learned; dy → dP = Σ_B dy, and
 * the input gradient is dy itself. */
static int position_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[2] = {l->in.h, l->in.c};
	(void)classes;
	return add_tensor(l, lo, "weight", 2, ws, err) < 0 ? GEM_EUSAGE : 0;
}

static void position_init(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	init_normal(l, 0, lo, theta, l->v[0].f, r);
}

static const float *position_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	position_forward(l->y, x, p->W, p->B, l->in.h, l->in.c);
	return l->y;
}

static float *position_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	position_backward(p->dW, dy, p->B, l->in.h, l->in.c);
	return dy;
}

static const struct layer_ops position_ops = {
	.name = "position", .input = LAYER_SEQ,
	.fields = {{"init_std", LAYER_NUM, 0, 0.02, 0, 1e3}},
	.parse = position_parse, .init = position_init, .forward = position_fwd, .backward = position_bwd,
};

/* layernorm: rows x (N,D) → y = (x − μ)/√(σ² + 1e-5)·g + b per row, g = 1 and b = 0 at first;
 * aux (N,2) each row's μ and 1/√(σ² + ε); dy (N,D) → dg, db, and dx in place. */
static int layernorm_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int ws[1] = {l->in.c};
	(void)classes;
	if (add_tensor(l, lo, "weight", 1, ws, err) < 0 || add_tensor(l, lo, "bias", 1, ws, err) < 0)
		return GEM_EUSAGE;
	return 0;
}

static int layernorm_reserve(struct layer *l, int B, struct layer_need *need)
{
	(void)need;
	return (l->aux = malloc(sizeof(float) * 2 * (size_t)B * shape_rows(l->in))) ? 0 : -1;
}

static const float *layernorm_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	layernorm_forward(l->y, l->aux, x, p->W, p->b, p->B * shape_rows(l->in), l->in.c);
	return l->y;
}

static float *layernorm_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	layernorm_backward(l->need_dx ? dy : NULL, p->dW, p->db, dy, l->x, l->aux, p->W,
			   p->B * shape_rows(l->in), l->in.c);
	return dy;
}

static const struct layer_ops layernorm_ops = {
	.name = "layernorm", .input = LAYER_ROWS,
	.parse = layernorm_parse, .init = norm_init, .reserve = layernorm_reserve,
	.forward = layernorm_fwd, .backward = layernorm_bwd,
};

/* gelu: any shape, y = 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))); dy → dx = dy·gelu'(x) in place. */
static const float *gelu_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	gelu_forward(l->y, x, out_size(l, p));
	return l->y;
}

static float *gelu_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	(void)dx;
	gelu_backward(dy, dy, l->x, out_size(l, p));
	return dy;
}

static const struct layer_ops gelu_ops = {
	.name = "gelu", .parse = same_shape_parse, .forward = gelu_fwd, .backward = gelu_bwd,
};

/* attention (heads H): x (B,T,C) → y (B,T,C), causal multi-head self-attention (nn/seq.h):
 * qkv = x·Wᵀ + b with W (3C,C) "weight", b (3C) "bias"; y = att·W2ᵀ + b2 with W2 (C,C)
 * "out_weight", b2 (C) "out_bias"; weights ~ N(0, init_std²), biases 0. aux: qkv, P, att and
 * the backward's buffers (struct attention). */
static int attention_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	int C = l->in.c, H = l->v[0].i, wq[2] = {3 * C, C}, wo[2] = {C, C};
	(void)classes;
	if (C % H)
		return gem_errf(err, GEM_EUSAGE, "%s.heads: %d does not divide the %d features", l->path, H, C);
	if ((size_t)H * l->in.h * l->in.h > (size_t)1 << 28)
		return gem_errf(err, GEM_EUSAGE, "%s: %d heads of %d×%d scores per sample are too many", l->path, H,
				l->in.h, l->in.h);
	if (add_weight_bias(l, lo, 2, wq, err) < 0 || add_tensor(l, lo, "out_weight", 2, wo, err) < 0 ||
	    add_tensor(l, lo, "out_bias", 1, wo, err) < 0)
		return GEM_EUSAGE;
	return 0;
}

static void attention_init(const struct layer *l, const struct layout *lo, float *theta, struct rng *r)
{
	init_normal(l, 0, lo, theta, l->v[1].f, r);
	init_const(l, 1, lo, theta, 0.0f);
	init_normal(l, 2, lo, theta, l->v[1].f, r);
	init_const(l, 3, lo, theta, 0.0f);
}

static int attention_reserve(struct layer *l, int B, struct layer_need *need)
{
	int T = l->in.h, C = l->in.c, H = l->v[0].i;
	need_scratch(l, B, need);
	if (!(l->aux = layer_falloc(attention_size(B, T, C, H), sizeof(float))))
		return -1;
	attention_bind(&l->att, l->aux, B, T, C, H);
	return 0;
}

static const float *attention_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	attention_forward(&l->att, l->y, x, p->W, p->b, p->W2, p->b2, p->B, p->scratch);
	return l->y;
}

static float *attention_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	attention_backward(&l->att, dx, p->dW, p->db, p->dW2, p->db2, dy, l->x, p->W, p->W2, p->B, p->scratch);
	return dx;
}

static const struct layer_ops attention_ops = {
	.name = "attention", .input = LAYER_SEQ,
	.fields = {{"heads", LAYER_INT, 1, 0, 1, 1 << 12}, {"init_std", LAYER_NUM, 0, 0.02, 0, 1e3}},
	.parse = attention_parse, .init = attention_init, .reserve = attention_reserve,
	.forward = attention_fwd, .backward = attention_bwd,
};

/* residual: a block of layers (kids, model.c builds them from its "layers") whose output is
 * added to its input, y = x + f(x), f's output of x's shape; or, with a "shortcut" list s (the
 * last nshort kids), to s(x): y = s(x) + f(x), any shapes f and s agree on (a strided 1×1
 * conv2d takes x to the next stage of a ResNet). dy → f's gradient from a copy of dy, in the
 * buffers of the next depth; without a shortcut dx = dy + that, in place; with one, s's
 * gradient from dy itself (dx the other buffer), plus f's. */
static int residual_parse(struct layer *l, struct layout *lo, int classes, char *err)
{
	struct shape o = l->kids[l->nkids - l->nshort - 1].out, in = l->nshort ? l->kids[l->nkids - 1].out : l->in;
	(void)lo, (void)classes;
	if (o.c != in.c || o.h != in.h || o.w != in.w || o.image != in.image || o.seq != in.seq) {
		char a[64], b[64];
		shape_name(a, sizeof a, o);
		shape_name(b, sizeof b, in);
		if (l->nshort)
			return gem_errf(err, GEM_EUSAGE, "%s: the block's output %s differs from its shortcut's %s",
					l->path, a, b);
		return gem_errf(err, GEM_EUSAGE,
				"%s: the block's output %s differs from its input %s (a shortcut can change the input's shape)",
				l->path, a, b);
	}
	l->out = o;
	return 0;
}

static const float *residual_fwd(struct layer *l, const float *x, struct layer_pass *p)
{
	int nf = l->nkids - l->nshort;
	const float *h = layer_chain_forward(l->kids, nf, x, p);
	const float *s = l->nshort ? layer_chain_forward(l->kids + nf, l->nshort, x, p) : x;
	add_forward(l->y, s, h, out_size(l, p));
	return l->y;
}

/* A residual block's input gradient from dy (the gradient of its sum) and gi (the block's
 * input gradient): the shortcut's passes, then the two added; NULL when the block needs none. */
static float *residual_join(struct layer *l, float *dy, float *gi, float *dx, float *other,
			    struct layer_pass *p)
{
	if (!l->nshort) {
		if (!l->need_dx)
			return NULL;
		add_forward(dy, dy, gi, out_size(l, p));
		return dy;
	}
	/* without an input gradient, the block's buffers are free for the shortcut's passes */
	float *gs = layer_chain_backward(l->kids + l->nkids - l->nshort, l->nshort, dy,
					 l->need_dx ? dx : other, p);
	if (!l->need_dx)
		return NULL;
	add_forward(gs, gs, gi, (size_t)p->B * shape_size(l->in));
	return gs;
}

static float *residual_bwd(struct layer *l, float *dy, float *dx, struct layer_pass *p)
{
	float *g = p->gbuf[2 * l->depth + 2], *other = p->gbuf[2 * l->depth + 3];
	int nf = l->nkids - l->nshort;
	memcpy(g, dy, sizeof *g * out_size(l, p));
	float *gi = layer_chain_backward(l->kids, nf, g, other, p);
	return residual_join(l, dy, gi, dx, other, p);
}

static void pass_params(const struct layer *l, struct layer_pass *p);

/* A residual block whose block ends in a groupnorm, followed by a ReLU r: the norm, the add
 * and the ReLU in one pass into r's output (the block's own output is not written). The
 * shortcut runs before the norm, not after: the norm draws nothing from p->r, so the draws
 * are those of residual_fwd. */
static const float *residual_relu_fwd(struct layer *l, struct layer *r, const float *x, struct layer_pass *p)
{
	int nf = l->nkids - l->nshort;
	struct layer *n = &l->kids[nf - 1];
	const float *h = layer_chain_forward(l->kids, nf - 1, x, p);
	const float *s = l->nshort ? layer_chain_forward(l->kids + nf, l->nshort, x, p) : x;
	pass_params(n, p);
	n->x = h;
	groupnorm_fused_fwd(n, r->y, h, s, 1, p);
	return r->y;
}

/* Its backward: the norm masks dy by r's output in place (the gradient of the sum, which
 * the shortcut or the identity takes) and writes its input gradient into the next depth's
 * buffer, where residual_bwd's copy of dy would be. */
static float *residual_relu_bwd(struct layer *l, struct layer *r, float *dy, float *dx, struct layer_pass *p)
{
	float *g = p->gbuf[2 * l->depth + 2], *other = p->gbuf[2 * l->depth + 3];
	int nf = l->nkids - l->nshort;
	struct layer *n = &l->kids[nf - 1];
	pass_params(n, p);
	groupnorm_fused_bwd(n, dy, n->need_dx ? g : NULL, r->y, p);
	float *gi = n->need_dx ? layer_chain_backward(l->kids, nf - 1, g, other, p) : g;
	return residual_join(l, dy, gi, dx, other, p);
}

static const struct layer_ops residual_ops = {
	.name = "residual", .block = 1,
	.parse = residual_parse, .forward = residual_fwd, .backward = residual_bwd,
};

const struct layer_ops *const layer_all[] = {
	&dense_ops, &conv2d_ops, &maxpool2d_ops, &relu_ops, &dropout_ops, &dropout2d_ops, &flatten_ops,
	&logsoftmax_ops, &embedding_ops, &position_ops, &layernorm_ops, &gelu_ops, &attention_ops,
	&residual_ops, &groupnorm_ops, &avgpool2d_ops, &globalavgpool_ops, &tanh_ops, &sigmoid_ops, NULL,
};

/* Point p at layer l's parameters and their gradient (NULL where it has none, and in a
 * forward pass, which has no gradient). */
static void pass_params(const struct layer *l, struct layer_pass *p)
{
	const float **w[LAYER_MAX_TENSORS] = {&p->W, &p->b, &p->W2, &p->b2};
	float **g[LAYER_MAX_TENSORS] = {&p->dW, &p->db, &p->dW2, &p->db2};
	for (int k = 0; k < LAYER_MAX_TENSORS; k++) {
		size_t off = l->t[k] >= 0 ? p->lo->t[l->t[k]].offset : 0;
		*w[k] = l->t[k] >= 0 ? p->theta + off : NULL;
		*g[k] = l->t[k] >= 0 && p->grad ? p->grad + off : NULL;
	}
}

/* The ReLU l[i + 1] when layer l[i] runs it in its own pass (a groupnorm, a max pool, or a
 * residual block whose block ends in a groupnorm), else NULL. The ReLU's forward and backward
 * are then skipped: its output is written and its mask applied by l[i]. */
static struct layer *fused_relu(struct layer *l, int i, int n)
{
	if (i + 1 >= n || l[i + 1].ops != &relu_ops)
		return NULL;
	if (l[i].ops == &groupnorm_ops || l[i].ops == &maxpool2d_ops)
		return &l[i + 1];
	if (l[i].ops == &residual_ops && l[i].nkids > l[i].nshort &&
	    l[i].kids[l[i].nkids - l[i].nshort - 1].ops == &groupnorm_ops)
		return &l[i + 1];
	return NULL;
}

const float *layer_chain_forward(struct layer *l, int n, const float *x, struct layer_pass *p)
{
	for (int i = 0; i < n; i++) {
		struct layer *r = fused_relu(l, i, n);
		pass_params(&l[i], p);
		l[i].x = x;
		if (!r) {
			x = l[i].ops->forward(&l[i], x, p);
			continue;
		}
		r->x = l[i].y; /* not written: the ReLU reads nothing from it */
		if (l[i].ops == &groupnorm_ops)
			groupnorm_fused_fwd(&l[i], r->y, x, NULL, 1, p);
		else if (l[i].ops == &maxpool2d_ops)
			maxpool2d_relu_forward(r->y, l[i].aux, x, (size_t)l[i].in.c * p->B, l[i].in.h, l[i].in.w,
					       l[i].v[0].i);
		else
			residual_relu_fwd(&l[i], r, x, p);
		x = r->y;
		i++;
	}
	return x;
}

float *layer_chain_backward(struct layer *l, int n, float *g, float *other, struct layer_pass *p)
{
	for (int i = n - 1; i >= 0; i--) {
		struct layer *r = i > 0 ? fused_relu(l, i - 1, n) : NULL;
		if (!l[i].need_dx && !l[i].params)
			break; /* nothing below needs a gradient */
		if (r) { /* the ReLU at i: its mask goes with l[i − 1]'s backward */
			i--;
			pass_params(&l[i], p);
			float *gx;
			if (l[i].ops == &groupnorm_ops) {
				groupnorm_fused_bwd(&l[i], g, l[i].need_dx ? g : NULL, r->y, p);
				gx = g;
			} else if (l[i].ops == &maxpool2d_ops) {
				if (!l[i].need_dx)
					break;
				gx = other;
				maxpool2d_relu_backward(gx, g, r->y, l[i].aux, (size_t)l[i].in.c * p->B, l[i].in.h,
							l[i].in.w, l[i].v[0].i);
			} else {
				gx = residual_relu_bwd(&l[i], r, g, l[i].need_dx ? other : NULL, p);
			}
			if (gx == other) {
				other = g;
				g = gx;
			}
			continue;
		}
		pass_params(&l[i], p);
		float *gx = l[i].ops->backward(&l[i], g, l[i].need_dx ? other : NULL, p);
		if (gx == other) {
			other = g;
			g = gx;
		}
	}
	return g;
}

void shape_name(char *buf, size_t size, struct shape s)
{
	if (s.image)
		snprintf(buf, size, "(%d,%d,%d)", s.c, s.h, s.w);
	else if (s.seq)
		snprintf(buf, size, "(T,C) = (%d,%d)", s.h, s.c);
	else
		snprintf(buf, size, "(%d)", s.c);
}
