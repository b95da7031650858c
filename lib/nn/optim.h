/* optim: SGD with momentum, Nesterov momentum and weight decay over a flat parameter vector,
 * with PyTorch's semantics (torch.optim.SGD, dampening 0):
 *   g = ∇ + wd·θ;  v = μ·v + g (v starts at 0, so the first v is g);  g = g + μ·v if nesterov else v;
 *   θ = θ − lr·g */
#ifndef GEM_OPTIM_H
#define GEM_OPTIM_H
#include <stddef.h>

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
#endif
