#include "nn/optim.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int sgd_init(struct sgd *s, size_t n, float lr, float momentum, float wd, int nesterov, char *err)
{
	*s = (struct sgd){n, lr, momentum, wd, !!nesterov, NULL};
	if (!(lr >= 0))
		return gem_errf(err, GEM_EUSAGE, "learning rate %g: must be >= 0", (double)lr);
	if (!(momentum >= 0 && momentum < 1))
		return gem_errf(err, GEM_EUSAGE, "momentum %g: must be in [0, 1)", (double)momentum);
	if (!(wd >= 0))
		return gem_errf(err, GEM_EUSAGE, "weight decay %g: must be >= 0", (double)wd);
	if (nesterov && momentum == 0)
		return gem_errf(err, GEM_EUSAGE, "nesterov needs a momentum > 0");
	if (momentum > 0 && n > 0 && !(s->v = calloc(n, sizeof *s->v)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for %zu momentum values", n);
	return 0;
}

void sgd_step(struct sgd *s, float *theta, const float *grad)
{
	float lr = s->lr, mu = s->momentum, wd = s->wd;
	if (!s->v) {
		for (size_t i = 0; i < s->n; i++)
			theta[i] -= lr * (grad[i] + wd * theta[i]);
		return;
	}
	if (s->nesterov)
		for (size_t i = 0; i < s->n; i++) {
			float g = grad[i] + wd * theta[i];
			float v = s->v[i] = mu * s->v[i] + g;
			theta[i] -= lr * (g + mu * v);
		}
	else
		for (size_t i = 0; i < s->n; i++) {
			float g = grad[i] + wd * theta[i];
			float v = s->v[i] = mu * s->v[i] + g;
			theta[i] -= lr * v;
		}
}

void sgd_reset(struct sgd *s)
{
	if (s->v)
		memset(s->v, 0, sizeof *s->v * s->n);
}

void sgd_free(struct sgd *s)
{
	free(s->v);
	s->v = NULL;
}
