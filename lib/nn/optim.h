/* optim: the optimisers of local steps over a flat parameter vector, with PyTorch's semantics:
 * SGD with momentum, Nesterov momentum and weight decay (torch.optim.SGD, dampening 0), AdamW
 * (torch.optim.AdamW), a learning rate with linear warm-up and cosine decay, and clipping by
 * the global norm of the gradient (torch.nn.utils.clip_grad_norm_). struct optim puts them
 * together for a trainer: one call per step, and a state that saves and restores exactly.
 *
 * SGD:   g = ∇ + wd·θ;  v = μ·v + g (v starts at 0, so the first v is g);  g = g + μ·v if nesterov
 *        else v;  θ = θ − lr·g
 * AdamW: θ = θ·(1 − lr·wd) for the tensors that decay (decoupled weight decay);  t = t + 1;
 *        m = β₁·m + (1 − β₁)·∇;  v = β₂·v + (1 − β₂)·∇²;
 *        θ = θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
 * The tensors that decay under AdamW are those with 2 dimensions or more (weight matrices,
 * convolution kernels, the embedding and position tables), not biases or LayerNorm gains. */
#ifndef GEM_OPTIM_H
#define GEM_OPTIM_H
#include <stddef.h>
#include <stdint.h>

#include "nn/layout.h"

struct sgd {
	size_t n;
	float lr, momentum, wd;
	int nesterov;
	float *v;    /* momentum buffer (NULL when momentum is 0) */
};

/* Set up an optimiser for n parameters; GEM_EUSAGE on a bad hyper-parameter (negative lr,
 * momentum outside [0, 1), negative wd, nesterov without momentum). */
int sgd_init(struct sgd *s, size_t n, float lr, float momentum, float wd, int nesterov, char *err);
/* One step: θ ← θ − lr·g as above, with grad ∇ (n floats each). */
void sgd_step(struct sgd *s, float *theta, const float *grad);
/* Forget the momentum (v = 0), as a new optimiser would. */
void sgd_reset(struct sgd *s);
void sgd_free(struct sgd *s);

#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f

/* AdamW's state: t and the moments m, v (n floats each) are all of it. */
struct adamw {
	size_t n;
	float beta1, beta2, eps, wd;
	uint64_t t;       /* steps taken */
	float *m, *v;
	int nt;           /* the tensors of θ (a layout's), and whether each decays */
	size_t off[LAYOUT_MAX_TENSORS], len[LAYOUT_MAX_TENSORS];
	int decay[LAYOUT_MAX_TENSORS];
};

/* Set up AdamW for the parameters laid out as lo; GEM_EUSAGE on β outside [0, 1), ε <= 0 or
 * wd < 0. */
int adamw_init(struct adamw *a, const struct layout *lo, float beta1, float beta2, float eps, float wd,
	       char *err);
/* One step at learning rate lr with gradient ∇ (a->n floats each). */
void adamw_step(struct adamw *a, float *theta, const float *grad, float lr);
/* Forget the moments and the step count, as a new optimiser would. */
void adamw_reset(struct adamw *a);
void adamw_free(struct adamw *a);

/* The learning rate over the steps: a linear warm-up from lr/warmup at step 0 to lr at step
 * warmup − 1, then constant, or a cosine from lr down to lr·min_ratio at step total (and that
 * after it). Steps count from 0. */
enum lr_shape { LR_CONSTANT, LR_COSINE };
struct lr_schedule {
	float lr;
	uint64_t warmup;
	enum lr_shape shape;
	uint64_t total;   /* the cosine's end: the run's steps */
	float min_ratio;  /* the cosine's floor, a fraction of lr */
};
#define LR_MIN_RATIO 0.1f

/* The learning rate of step (from 0). */
float lr_at(const struct lr_schedule *s, uint64_t step);

/* The global L2 norm of g (n floats; summed in double, in order); when it exceeds max > 0, g is
 * scaled by max / (norm + 1e-6). Returns the norm before. */
double clip_grad_norm(float *g, size_t n, float max);

/* One trainer's optimiser: which one, its hyper-parameters, the schedule and clipping. */
enum optim_kind { OPTIM_SGD, OPTIM_ADAMW };
struct optim_config {
	enum optim_kind kind;
	float lr, weight_decay;       /* both: SGD's is L2 in the gradient, AdamW's decoupled */
	float momentum;               /* SGD */
	int nesterov;                 /* SGD */
	float beta1, beta2, eps;      /* AdamW (0: ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS) */
	uint64_t warmup;              /* steps of linear warm-up (0: none) */
	enum lr_shape schedule;
	uint64_t total_steps;         /* LR_COSINE: its end */
	float clip;                   /* the gradient's global norm at most this (0: no clipping) */
};

struct optim {
	struct optim_config c;
	struct lr_schedule lr;
	struct sgd sgd;
	struct adamw adamw;
	uint64_t step;    /* steps taken: the schedule's position */
};

/* Set up c's optimiser for the parameters laid out as lo; GEM_EUSAGE naming a bad setting. */
int optim_init(struct optim *o, const struct optim_config *c, const struct layout *lo, char *err);
/* One step with gradient grad (clipped in place first, when c.clip > 0) at the schedule's rate;
 * returns the gradient's norm before clipping (0 when c.clip is 0: not computed). With SGD, no
 * warm-up, a constant rate and no clipping, the step is sgd_step's, bit for bit. */
double optim_step(struct optim *o, float *theta, float *grad);
/* The state to checkpoint: step, and optim_state_floats(o) floats (SGD: v, or nothing without
 * momentum; AdamW: m then v), which optim_state_set restores exactly. */
size_t optim_state_floats(const struct optim *o);
void optim_state_get(const struct optim *o, float *vec, uint64_t *step);
void optim_state_set(struct optim *o, const float *vec, uint64_t step);
/* No momentum or moments, and the schedule at step of a cosine that ends at
 * total: a worker that joins again mid-run, its steps so far counted but its moments gone. */
void optim_restart(struct optim *o, uint64_t step, uint64_t total);
/* The names of run.json and gem-init: "sgd", "adamw"; "constant", "cosine". A parse returns
 * the value, or -1 for a name that is none. */
const char *optim_kind_name(enum optim_kind k);
int optim_kind_parse(const char *name);
const char *lr_shape_name(enum lr_shape s);
int lr_shape_parse(const char *name);
void optim_free(struct optim *o);
#endif
