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

#define LAYER_MAX_FIELDS 4

/* A per-sample activation shape: an image (C,H,W), stored (C,B,H,W) in a batch, or flat
 * features (c, with h = w = 1), stored (B,c). */
struct shape {
	int c, h, w, image;
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
	int index;                        /* in the spec's "layers" */
	struct shape in, out;
	union layer_val v[LAYER_MAX_FIELDS]; /* ops->fields, in order */
	struct conv2d_shape cs;           /* conv2d: its geometry */
	int wt, bt;   /* weight and bias tensors in the layout, -1 if none */
	int need_dx;  /* some earlier layer has parameters */
	int view;     /* the output is the input itself (no buffer of its own) */
	float *y;     /* output buffer, B·out floats (NULL if view) */
	void *aux;    /* the layer's own batch buffer: im2col, argmax, dropout mask, dense scratch */
	const float *x; /* input of the last forward */
};

/* What one forward or backward pass hands each layer; model.c sets W..db per layer. */
struct layer_pass {
	int B;                   /* samples in the batch */
	struct rng *r;           /* forward: dropout's masks; NULL in eval mode */
	const uint8_t *label;    /* the batch's labels (NULL in forward: no loss) */
	double loss;             /* forward: the loss layer's summed loss */
	float scale;             /* backward: d(mean loss)/d(summed loss), 1/B */
	float *dcol;             /* backward: conv2d's col2im scratch (model_reserve sizes it) */
	const float *W, *b;      /* the layer's parameters (NULL if none) */
	float *dW, *db;          /* ... and their gradient */
};

/* One layer type: what it accepts and how it runs. */
struct layer_ops {
	const char *name;
	enum { LAYER_ANY, LAYER_IMAGE, LAYER_FLAT } input; /* the input it accepts */
	int loss;                /* the loss: the last layer, and only there */
	struct layer_field fields[LAYER_MAX_FIELDS]; /* the first with a NULL name ends them */
	/* Check l->v against l->in, add parameter tensors to lo, set l->out (preset to l->in)
	 * and l->view; 0 or GEM_EUSAGE naming the field (`layers[3].kernel: ...`). */
	int (*parse)(struct layer *l, struct layout *lo, int classes, char *err);
	/* Optional: allocate l->aux for a batch of B; raise *dcol to the col2im scratch needed.
	 * 0, or -1 when out of memory. */
	int (*reserve)(struct layer *l, int B, size_t *dcol);
	/* Run on x (B·in floats); returns the output, l->y or x itself. */
	const float *(*forward)(struct layer *l, const float *x, struct layer_pass *p);
	/* From the output gradient dy, write the input gradient into dx (NULL: not needed) or in
	 * place into dy, and the parameter gradient into p->dW, p->db; returns where it is. */
	float *(*backward)(struct layer *l, float *dy, float *dx, struct layer_pass *p);
};

/* Every layer type, NULL-terminated; a spec's "type" is looked up by name here. */
extern const struct layer_ops *const layer_all[];

/* libblis 0.9.0's sgemm reads past the end of its operands (an upstream defect, flame/blis
 * issue 635): its small-matrix path reads up to one row of an operand beyond its last row (the
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
#endif
