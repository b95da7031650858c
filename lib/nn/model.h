/* model: a network built from a JSON spec, its parameters θ in one flat float vector
 * (described by a struct layout), and a training step (forward, NLL loss, backward) and an
 * evaluation pass over a batch. Buffers are allocated once by model_reserve.
 *
 * Spec (share/gem/models/NAME.json; gem-model(5) says it all):
 *   {"name": "cnn", "input": [1, 28, 28], "classes": 10, "layers": [LAYER, ...]}
 * "input" is [features] (flat; a sequence model's: [T] token ids) or [channels, height, width]
 * (an image); "name" and "description" are optional; other keys are refused. Each LAYER is an
 * object with "type", one of the table layer_all (nn/layer_ops.c, where a type is defined):
 *   {"type": "dense", "out": N, "init_std": 0}     rows of IN (flat, or each position of a
 *                                                   sequence) → N; W (N,IN), b (N)
 *   {"type": "conv2d", "out": C', "kernel": K, "stride": 1, "padding": 0}
 *                                                   image input; W (C',C,K,K), b (C')
 *   {"type": "maxpool2d", "size": 2}               k×k windows (k <= 16), stride k, floor
 *   {"type": "avgpool2d", "size": 2}               the mean of k×k windows, stride k, floor
 *   {"type": "globalavgpool"}                      image (C,H,W) → flat C, each plane's mean
 *   {"type": "groupnorm", "groups": G}             image; G groups of channels normalised per
 *                                                   sample; gain and bias per channel
 *   {"type": "relu"}   {"type": "gelu"}            element-wise
 *   {"type": "tanh"}   {"type": "sigmoid"}         element-wise
 *   {"type": "dropout", "p": 0.5}                  p in [0, 1); identity in eval
 *   {"type": "dropout2d", "p": 0.5}                zeroes whole channels; image input
 *   {"type": "flatten"}                            image (C,H,W) → flat C·H·W (PyTorch order)
 *   {"type": "embedding", "vocab": V, "dim": D, "init_std": 0.02}
 *                                                   first layer only: T token ids → (T,D)
 *   {"type": "position", "init_std": 0.02}         (T,D) + a learned (T,D) table
 *   {"type": "layernorm"}                          rows, normalised; gain and bias
 *   {"type": "attention", "heads": H, "init_std": 0.02}
 *                                                   (T,C) → (T,C), causal self-attention
 *   {"type": "residual", "layers": [LAYER, ...]}   x + layers(x), same shape out as in
 *   {"type": "residual", "layers": [...], "shortcut": [LAYER, ...]}
 *                                                   shortcut(x) + layers(x), of one shape
 *   {"type": "logsoftmax"}                         must be the last layer, with `classes`
 *                                                   inputs (per position: a loss at each)
 * Optional fields take the defaults shown. The loss is the NLL of the log-softmax, averaged over
 * the batch (and the positions). Parameters are named "<layer index>.weight", ".bias" (and
 * attention's ".out_weight", ".out_bias"), a layer in a block "<block>.<index>.weight", in its
 * shortcut "<block>.shortcut.<index>.weight", in layer order; dense and conv2d are initialised as PyTorch does by default, the sequence layers (and
 * dense with init_std > 0) N(0, init_std²) for weights, biases 0, LayerNorm and GroupNorm gains 1
 * (their biases 0). Inputs are
 * batches of samples in NCHW order (B × input floats); labels are integers below `classes`, one
 * per sample (B), or one per position (B × T) for a sequence model. */
#ifndef GEM_MODEL_H
#define GEM_MODEL_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/data.h"
#include "nn/exec.h"
#include "nn/layout.h"
#include "base/rng.h"

struct model;

/* The most parameters a model may have (θ and its gradient: 8 bytes each). */
#define MODEL_MAX_PARAMS ((size_t)1 << 31)
#define MODEL_MAX_CLASSES 65536 /* a spec's "classes": labels are uint16 */

/* A spec {"exec": CMD, ...} is an external model (nn/exec.h, gem-exec(7)): a program that
 * computes losses and gradients on its own data, which it is named by index. Its record in the
 * spec (layout, classes, data's sizes) is all that model_from_json reads: the child is started
 * at the first request (model_init, model_train_ext, model_eval_ext, model_predict_ext), so that
 * a server or a tool that only needs the layout never runs it. */

/* Build a model from a spec; GEM_EUSAGE with the offending field named (e.g.
 * `layers[3]: unknown type "conv3d"`, `layers[0].kernel: missing`) on a bad spec, and with its
 * size named when θ and its gradient exceed MODEL_MAX_PARAMS or the machine's memory: checked
 * before anything of that size is allocated, since a spec may come from a hostile server. */
int model_from_json(const json_t *spec, struct model **out, char *err);
/* Read a spec file and build it; *spec_out (if non-NULL) gets the parsed spec (caller decrefs). */
int model_from_file(const char *path, json_t **spec_out, struct model **out, char *err);
void model_free(struct model *m);
/* Start CMD (an external model: gem-exec(7)) and build the model it says it is; *spec gets
 * the spec that records it (run.json's model: model_from_json builds the same model). */
int model_from_exec(const char *cmd, double timeout, json_t **spec, struct model **out, char *err);
/* Whether m is an external model; its record (NULL: a built-in model). */
const struct exec_info *model_exec_info(const struct model *m);

/* The spec's "name", or "" when it has none. */
const char *model_name(const struct model *m);
/* Where each parameter tensor lies in θ. */
const struct layout *model_layout(const struct model *m);
/* Number of floats in θ (and in the gradient). */
size_t model_nparams(const struct model *m);
/* θ, flat, in layout order; callers may read and write it. */
float *model_params(struct model *m);
/* ∇L after model_train_step, same layout as θ. */
float *model_grads(struct model *m);
/* Floats per input sample, e.g. 784. */
size_t model_input_size(const struct model *m);
/* Room for rows input samples (rows × model_input_size floats), as the first layer's gemm
 * operand must be: padded and aligned (layer_falloc); free()d. NULL when out of memory. */
float *model_input_alloc(const struct model *m, size_t rows);
/* Number of classes (outputs of the last layer). */
int model_classes(const struct model *m);
/* Labels per sample: the positions the loss is taken at (T for a sequence model, else 1). */
int model_labels(const struct model *m);
/* The one check that data d fits model m (every program where a run meets its data makes it,
 * gem-init first): as many values per sample as the model's inputs, no label beyond its
 * classes; a text (windowed: d->seq) only a sequence model of as many positions, its bytes
 * inside the embedding's vocabulary. A sample too big overflows the batch buffer, a label too
 * large reads past the output: GEM_EUSAGE saying which. */
int model_fits(const struct model *m, const struct dataset *d, char *err);

/* θ₀ drawn in layout order from a lib/rng generator seeded with seed (stream RNG_MODEL_INIT):
 * dense and conv2d as PyTorch does by default, weights and biases U(−1/√fan_in, 1/√fan_in)
 * (kaiming-uniform with a = √5 for weights); the sequence layers as gem-model(5) says. */
void model_init_params(struct model *m, uint64_t seed);
/* The same for every model: an external one is asked for its θ₀ (its failure in err). */
int model_init(struct model *m, uint64_t seed, char *err);
/* Cut each training step's batch of n samples into `micro` micro-batches of consecutive
 * samples, [n·k/micro, n·(k+1)/micro) for k in [0, micro), whose gradients are summed in that
 * order: the step's gradient up to float rounding, and the same floats on any number of
 * threads. Up to `micro` of the pool's threads (layers_set_threads) each run a micro-batch
 * whole, its kernels on that thread, in buffers of its own made at the first step: a thread
 * then reads mostly what it wrote itself, where the kernels' own split hands every layer's
 * output to the other cores (doc/results/resnet-speed.md, "Micro-batches"). Micro-batch k draws its dropout from stream
 * RNG_MICROBATCH + k of a seed drawn from model_train_step's r. A batch smaller than micro is
 * not cut. 1, the default: none. GEM_EUSAGE outside [1, MODEL_MAX_MICRO] or for an external
 * model. Frees the batch buffers (model_reserve again). */
#define MODEL_MAX_MICRO 64
int model_set_micro(struct model *m, int micro, char *err);
/* Allocate activations for up to `batch` samples; a later call with a smaller batch is free. */
int model_reserve(struct model *m, int batch, char *err);
/* The batch size reserved so far (0 before model_reserve). */
int model_reserved(const struct model *m);

/* Forward and backward on 0 < n <= reserved samples (x: n × input floats, y: n × model_labels
 * labels); writes the gradient of the mean loss (over the n·labels of them) into model_grads
 * and returns the mean loss (NaN if n is out of range or r is NULL); r drives dropout. */
float model_train_step(struct model *m, const float *x, const uint16_t *y, int n, struct rng *r);
/* Forward in eval mode on 0 < n <= reserved samples, cut into a part a thread (as many as the
 * micro-batches if fewer), each run whole, to the same floats; returns the sum of the losses
 * over the n × model_labels labels (0 if y is NULL; nats: a text's bits per byte are its mean
 * / ln 2), adds the number of correct predictions to *correct (if both are non-NULL), and
 * writes the n × model_labels predicted classes to pred (if non-NULL). */
double model_evaluate(struct model *m, const float *x, const uint16_t *y, int n, long *correct,
		      uint16_t *pred);
/* Forward in eval mode on 0 < n <= reserved samples; returns the log-probabilities, n ×
 * model_labels rows of model_classes (a sequence model's row t: the next token's after
 * positions 0..t of its window, whatever follows t), valid until the next pass; NULL if n is
 * out of range. */
const float *model_predict(struct model *m, const float *x, int n);

/* An external model's training step: the gradient of the mean loss over the batch b of the
 * samples idx (b->n of them, within model_reserved) into model_grads, the loss into *loss. */
int model_train_ext(struct model *m, const uint64_t *idx, const struct exec_batch *b, float *loss, char *err);
/* An external model's evaluation of θ on its own test split: the sum of the losses over count
 * predictions, and the right ones (-1: not a classifier). */
int model_eval_ext(struct model *m, double *loss, uint64_t *count, long long *correct, char *err);
/* An external language model's log-probabilities of the token after the n tokens (n <= its
 * positions): model_classes floats, valid until the next request. */
const float *model_predict_ext(struct model *m, const uint16_t *tokens, int n, char *err);
#endif
