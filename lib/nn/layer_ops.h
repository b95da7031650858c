/* layer_ops: the table of layer types model.c builds networks from (not part of libgem's
 * interface). A layer type is one struct layer_ops in layer_ops.c and one entry in layer_all[]:
 * its name, its JSON fields, and how it checks a spec, reserves buffers, runs forward and back. */
#ifndef GEM_LAYER_OPS_H
#define GEM_LAYER_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"
#include "nn/layers.h"
#include "nn/layout.h"
#include "nn/seq.h"

#define LAYER_MAX_FIELDS 4
#define LAYER_MAX_TENSORS 4 /* parameter tensors of one layer (attention's) */
#define LAYER_MAX_DEPTH 8   /* residual blocks inside residual blocks */

/* A per-sample activation shape: an image (C,H,W), stored (C,B,H,W) in a batch; a sequence of
 * T = h positions of c features (w = 1), stored (B,T,c); or flat features (c, h = w = 1),
 * stored (B,c). A flat shape and a sequence are both rows of c: B of them, or B·T. */
struct shape {
	int c, h, w, image, seq;
};

/* One JSON field of a layer type. A missing optional field takes def; a present one must be
 * an integer in [min, max] (LAYER_INT) or a number in [min, max) (LAYER_NUM). */
struct layer_field {
	const char *name;
	enum { LAYER_INT, LAYER_NUM } kind;
	int required;
	double def, min, max;
};

/* A field's value once read: .i for LAYER_INT, .f for LAYER_NUM. */
union layer_val {
	int i;
	float f;
};

/* One layer of a model: its type, shapes, config and batch buffers. */
struct layer {
	const struct layer_ops *ops;
	char path[128];                   /* in messages: "layers[3]", "layers[3].layers[1]" */
	char name[LAYOUT_NAME_MAX - 8];   /* in tensor names: "3", "3.1" */
	int depth;                        /* residual blocks around it */
	struct shape in, out;
	union layer_val v[LAYER_MAX_FIELDS]; /* ops->fields, in order */
	struct conv2d_shape cs;           /* conv2d: its geometry */
	struct attention att;             /* attention: its buffers (in aux) */
	int t[LAYER_MAX_TENSORS];         /* its parameter tensors in the layout, -1 after the last */
	int params;   /* it, or a layer of its block, has parameters */
	int need_dx;  /* some earlier layer has parameters */
	int view;     /* the output is the input itself (no buffer of its own) */
	float *y;     /* output buffer, B·out floats (NULL if view) */
	void *aux;    /* the layer's own batch buffer: im2col, argmax, dropout mask, dense scratch */
	const float *x; /* input of the last forward */
	struct layer *kids; /* residual: the layers of its block, then those of its shortcut */
	int nkids;
	int nshort;   /* residual: the last nshort kids are its shortcut (0: the identity) */
};

/* What one forward or backward pass hands each layer; layer_chain_* set W..db2 per layer. */
struct layer_pass {
	int B;                   /* samples in the batch */
	struct rng *r;           /* forward: dropout's masks; NULL in eval mode */
	const uint16_t *label;   /* the batch's labels, B per position of the loss layer (NULL in
				    forward: no loss) */
	double loss;             /* forward: the loss layer's summed loss */
	float scale;             /* backward: d(mean loss)/d(summed loss) */
	float *dcol;             /* backward: conv2d's col2im scratch (model_reserve sizes it) */
	float *scratch;          /* the sequence layers' matmul_scratch_size() floats */
	float *theta, *grad;     /* θ and ∇ of the whole model ... */
	const struct layout *lo; /* ... and where each tensor lies in them */
	float *gbuf[2 * (LAYER_MAX_DEPTH + 1)]; /* backward: two gradient buffers per depth */
	const float *W, *b, *W2, *b2; /* the layer's parameter tensors t[0..3] (NULL if none) */
	float *dW, *db, *dW2, *db2;   /* ... and their gradient */
};

/* What a layer's buffers need beside its own: the largest scratch of each kind. */
struct layer_need {
	size_t dcol;    /* conv2d's col2im */
	size_t scratch; /* matmul's packed panels */
};

/* One layer type: what it accepts and how it runs. */
struct layer_ops {
	const char *name;
	/* the input it accepts: anything, an image, flat, a sequence, or rows (flat or sequence) */
	enum { LAYER_ANY, LAYER_IMAGE, LAYER_FLAT, LAYER_SEQ, LAYER_ROWS } input;
	int loss;                /* the loss: the last layer, and only there */
	int first;               /* reads the model's input as token ids: the first layer only */
	int block;               /* holds a "layers" list of its own and an optional "shortcut"
				    list (struct layer kids) */
	struct layer_field fields[LAYER_MAX_FIELDS]; /* the first with a NULL name ends them */
	/* Check l->v against l->in, add parameter tensors to lo, set l->out (preset to l->in)
	 * and l->view; 0 or GEM_EUSAGE naming the field (`layers[3].kernel: ...`). */
	int (*parse)(struct layer *l, struct layout *lo, int classes, char *err);
	/* Optional: initialise the layer's tensors in θ from r; without it, weight and bias are
	 * drawn as PyTorch's default does (model_init_params). */
	void (*init)(const struct layer *l, const struct layout *lo, float *theta, struct rng *r);
	/* Optional: allocate l->aux for a batch of B; raise need to what it needs. 0, or -1
	 * when out of memory. */
	int (*reserve)(struct layer *l, int B, struct layer_need *need);
	/* Run on x (B·in floats); returns the output, l->y or x itself. */
	const float *(*forward)(struct layer *l, const float *x, struct layer_pass *p);
	/* From the output gradient dy, write the input gradient into dx (NULL: not needed) or in
	 * place into dy, and the parameter gradient into p->dW, p->db; returns where it is. */
	float *(*backward)(struct layer *l, float *dy, float *dx, struct layer_pass *p);
};

/* Every layer type, NULL-terminated; a spec's "type" is looked up by name here. */
extern const struct layer_ops *const layer_all[];

/* PyTorch's default initialisation of l's weight and bias (tensors t[0], t[1]): both uniform
 * in ±1/√fan_in, drawn from r in layout order. */
void layer_init_default(const struct layer *l, const struct layout *lo, float *theta, struct rng *r);
/* s in words for messages: "(784)", "(1,28,28)", "(T,C) = (128,64)". */
void shape_name(char *buf, size_t size, struct shape s);

/* Run layers l[0..n) forward on x; returns their output. */
const float *layer_chain_forward(struct layer *l, int n, const float *x, struct layer_pass *p);
/* Back from l[n−1] down to the lowest layer that has parameters or needs an input gradient; g
 * holds the gradient of the output, other is a buffer as large. Returns where the gradient of
 * the input is (when l[0] needs one). */
float *layer_chain_backward(struct layer *l, int n, float *g, float *other, struct layer_pass *p);

/* libblis 0.9.0's sgemm reads past the end of its operands (a defect upstream knows of):
 * its small-matrix path reads up to one row of an operand beyond its last row (the
 * cnn's 300→200 dense layer at batch 64 read 1200 bytes past its input); with larger rows it
 * packs, and reads nothing beyond. So every buffer that can be a gemm operand (θ, the gradient,
 * activations, the batch input) is allocated with layer_falloc, which adds LAYER_GEMM_PAD bytes
 * after the n elements: the over-read stays inside memory gem owns. t1006 checks it with a
 * PROT_NONE guard page right after the padding. */
#define LAYER_GEMM_PAD 16384

/* 64-byte aligned room for n elements of elem bytes and LAYER_GEMM_PAD more (free()d); NULL
 * when out of memory. */
void *layer_falloc(size_t n, size_t elem);

static inline size_t shape_size(struct shape s)
{
	return (size_t)s.c * s.h * s.w;
}

/* Rows of c features per sample: T for a sequence, else 1. */
static inline int shape_rows(struct shape s)
{
	return s.seq ? s.h : 1;
}
#endif
