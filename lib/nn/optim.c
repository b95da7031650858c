#include "nn/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/pool.h"

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

/* The updates are element by element: split among the pool's threads in parts of 16K
 * values or more, each element computed as on one thread. */
#define STEP_UNIT 16
#define STEP_MIN (16384 / STEP_UNIT)

struct step_job {
	const struct sgd *s;
	const struct adamw *a;
	float *theta, *m, *v;
	const float *grad;
	float step, bc2s, keep;
	int decay;
};

/* An SGD step over n elements, in blocks of 8 with the pointers restrict: GCC vectorises the
 * blocks (the plain loop, whose arrays might overlap, it left scalar: a third of an mlp's step
 * on two threads). Each element's floats are the plain loop's. */
static void sgd_plain(float *restrict th, const float *restrict grad, size_t n, float lr, float wd)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			th[i + k] -= lr * (grad[i + k] + wd * th[i + k]);
	for (; i < n; i++)
		th[i] -= lr * (grad[i] + wd * th[i]);
}

/* With momentum; nesterov is a constant where it is inlined, so each call site has one loop */
static inline __attribute__((always_inline)) void sgd_momentum(float *restrict th, float *restrict vv,
							      const float *restrict grad, size_t n, float lr,
							      float mu, float wd, int nesterov)
{
	size_t i = 0;
	float g[8];
	for (; i + 8 <= n; i += 8) {
		for (int k = 0; k < 8; k++)
			g[k] = grad[i + k] + wd * th[i + k];
		for (int k = 0; k < 8; k++)
			vv[i + k] = mu * vv[i + k] + g[k];
		for (int k = 0; k < 8; k++)
			th[i + k] -= lr * (nesterov ? g[k] + mu * vv[i + k] : vv[i + k]);
	}
	for (; i < n; i++) {
		float gi = grad[i] + wd * th[i];
		vv[i] = mu * vv[i] + gi;
		th[i] -= lr * (nesterov ? gi + mu * vv[i] : vv[i]);
	}
}

static void sgd_part(void *arg, size_t lo, size_t hi)
{
	const struct step_job *j = arg;
	const struct sgd *s = j->s;
	if (!s->v)
		sgd_plain(j->theta + lo, j->grad + lo, hi - lo, s->lr, s->wd);
	else if (s->nesterov)
		sgd_momentum(j->theta + lo, s->v + lo, j->grad + lo, hi - lo, s->lr, s->momentum, s->wd, 1);
	else
		sgd_momentum(j->theta + lo, s->v + lo, j->grad + lo, hi - lo, s->lr, s->momentum, s->wd, 0);
}

void sgd_step(struct sgd *s, float *theta, const float *grad)
{
	struct step_job j = {.s = s, .theta = theta, .grad = grad};
	pool_for(s->n, STEP_UNIT, STEP_MIN, sgd_part, &j);
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

int adamw_init(struct adamw *a, const struct layout *lo, float beta1, float beta2, float eps, float wd,
	       char *err)
{
	memset(a, 0, sizeof *a);
	if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
		return gem_errf(err, GEM_EUSAGE, "AdamW betas %g, %g: must be in [0, 1)", (double)beta1, (double)beta2);
	if (!(eps > 0))
		return gem_errf(err, GEM_EUSAGE, "AdamW epsilon %g: must be > 0", (double)eps);
	if (!(wd >= 0))
		return gem_errf(err, GEM_EUSAGE, "weight decay %g: must be >= 0", (double)wd);
	*a = (struct adamw){.n = lo->total, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd, .nt = lo->ntensors};
	for (int i = 0; i < lo->ntensors; i++) {
		a->off[i] = lo->t[i].offset;
		a->len[i] = lo->t[i].size;
		a->decay[i] = lo->t[i].ndim >= 2;
	}
	a->m = calloc(a->n ? a->n : 1, sizeof *a->m);
	a->v = calloc(a->n ? a->n : 1, sizeof *a->v);
	if (!a->m || !a->v) {
		adamw_free(a);
		return gem_errf(err, GEM_ENOMEM, "out of memory for %zu moments", 2 * lo->total);
	}
	return 0;
}

static void adamw_part(void *arg, size_t lo, size_t hi)
{
	const struct step_job *j = arg;
	float b1 = j->a->beta1, b2 = j->a->beta2, step = j->step, bc2s = j->bc2s, eps = j->a->eps;
	float *th = j->theta, *m = j->m, *v = j->v;
	const float *g = j->grad;
	if (j->decay)
		for (size_t i = lo; i < hi; i++)
			th[i] *= j->keep;
	for (size_t i = lo; i < hi; i++) {
		m[i] = b1 * m[i] + (1 - b1) * g[i];
		v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
		th[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);
	}
}

void adamw_step(struct adamw *a, float *theta, const float *grad, float lr)
{
	a->t++;
	double bc1 = 1 - pow(a->beta1, (double)a->t), bc2 = 1 - pow(a->beta2, (double)a->t);
	float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
	float keep = (float)(1.0 - (double)lr * a->wd);
	for (int k = 0; k < a->nt; k++) {
		struct step_job j = {.a = a, .theta = theta + a->off[k], .m = a->m + a->off[k], .v = a->v + a->off[k],
				     .grad = grad + a->off[k], .step = step, .bc2s = bc2s, .keep = keep,
				     .decay = a->decay[k] && a->wd > 0};
		pool_for(a->len[k], STEP_UNIT, STEP_MIN, adamw_part, &j);
	}
}

void adamw_reset(struct adamw *a)
{
	a->t = 0;
	if (a->m)
		memset(a->m, 0, sizeof *a->m * a->n);
	if (a->v)
		memset(a->v, 0, sizeof *a->v * a->n);
}

void adamw_free(struct adamw *a)
{
	free(a->m);
	free(a->v);
	a->m = a->v = NULL;
}

float lr_at(const struct lr_schedule *s, uint64_t step)
{
	if (step < s->warmup)
		return (float)((double)s->lr * (double)(step + 1) / (double)s->warmup);
	if (s->shape == LR_CONSTANT)
		return s->lr;
	double span = s->total > s->warmup ? (double)(s->total - s->warmup) : 1;
	double p = (double)(step - s->warmup) / span, lo = (double)s->lr * s->min_ratio;
	if (p > 1)
		p = 1;
	return (float)(lo + 0.5 * (1 + cos(M_PI * p)) * ((double)s->lr - lo));
}

double clip_grad_norm(float *g, size_t n, float max)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)g[i] * g[i];
	double norm = sqrt(s);
	if (max > 0 && norm > max) {
		float f = (float)(max / (norm + 1e-6));
		for (size_t i = 0; i < n; i++)
			g[i] *= f;
	}
	return norm;
}

int optim_init(struct optim *o, const struct optim_config *c, const struct layout *lo, char *err)
{
	int rc;
	memset(o, 0, sizeof *o);
	o->c = *c;
	if (!(c->clip >= 0))
		return gem_errf(err, GEM_EUSAGE, "clip %g: must be >= 0", (double)c->clip);
	if (c->schedule == LR_COSINE && c->total_steps <= c->warmup)
		return gem_errf(err, GEM_EUSAGE, "cosine schedule over %llu steps: must be longer than the warm-up (%llu)",
				(unsigned long long)c->total_steps, (unsigned long long)c->warmup);
	o->lr = (struct lr_schedule){c->lr, c->warmup, c->schedule, c->total_steps, LR_MIN_RATIO};
	if (c->kind == OPTIM_SGD)
		return sgd_init(&o->sgd, lo->total, c->lr, c->momentum, c->weight_decay, c->nesterov, err);
	if (!(c->lr >= 0))
		return gem_errf(err, GEM_EUSAGE, "learning rate %g: must be >= 0", (double)c->lr);
	if (c->momentum != 0 || c->nesterov)
		return gem_errf(err, GEM_EUSAGE, "AdamW takes no momentum or nesterov (its betas are its momentum)");
	if ((rc = adamw_init(&o->adamw, lo, c->beta1 ? c->beta1 : ADAMW_BETA1, c->beta2 ? c->beta2 : ADAMW_BETA2,
			     c->eps ? c->eps : ADAMW_EPS, c->weight_decay, err)) < 0)
		return rc;
	return 0;
}

double optim_step(struct optim *o, float *theta, float *grad)
{
	size_t n = o->c.kind == OPTIM_SGD ? o->sgd.n : o->adamw.n;
	double norm = o->c.clip > 0 ? clip_grad_norm(grad, n, o->c.clip) : 0;
	float lr = lr_at(&o->lr, o->step++);
	if (o->c.kind == OPTIM_SGD) {
		o->sgd.lr = lr;
		sgd_step(&o->sgd, theta, grad);
	} else {
		adamw_step(&o->adamw, theta, grad, lr);
	}
	return norm;
}

size_t optim_state_floats(const struct optim *o)
{
	if (o->c.kind == OPTIM_SGD)
		return o->sgd.v ? o->sgd.n : 0;
	return 2 * o->adamw.n;
}

void optim_state_get(const struct optim *o, float *vec, uint64_t *step)
{
	*step = o->step;
	if (o->c.kind == OPTIM_SGD) {
		if (o->sgd.v)
			memcpy(vec, o->sgd.v, sizeof *vec * o->sgd.n);
		return;
	}
	memcpy(vec, o->adamw.m, sizeof *vec * o->adamw.n);
	memcpy(vec + o->adamw.n, o->adamw.v, sizeof *vec * o->adamw.n);
}

void optim_state_set(struct optim *o, const float *vec, uint64_t step)
{
	o->step = step;
	if (o->c.kind == OPTIM_SGD) {
		if (o->sgd.v)
			memcpy(o->sgd.v, vec, sizeof *vec * o->sgd.n);
		return;
	}
	o->adamw.t = step;
	memcpy(o->adamw.m, vec, sizeof *vec * o->adamw.n);
	memcpy(o->adamw.v, vec + o->adamw.n, sizeof *vec * o->adamw.n);
}

/* Back to step 0 with no momentum or moments. */
static void optim_reset(struct optim *o)
{
	o->step = 0;
	sgd_reset(&o->sgd);
	adamw_reset(&o->adamw);
}

void optim_restart(struct optim *o, uint64_t step, uint64_t total)
{
	optim_reset(o);
	o->step = step;
	o->lr.total = total;
}

static const char *const kind_names[] = {[OPTIM_SGD] = "sgd", [OPTIM_ADAMW] = "adamw"};
static const char *const shape_names[] = {[LR_CONSTANT] = "constant", [LR_COSINE] = "cosine"};

/* The index of name in names (n of them), or -1. */
static int name_index(const char *const *names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

const char *optim_kind_name(enum optim_kind k)
{
	return kind_names[k];
}

int optim_kind_parse(const char *name)
{
	return name_index(kind_names, 2, name);
}

const char *lr_shape_name(enum lr_shape s)
{
	return shape_names[s];
}

int lr_shape_parse(const char *name)
{
	return name_index(shape_names, 2, name);
}

void optim_free(struct optim *o)
{
	sgd_free(&o->sgd);
	adamw_free(&o->adamw);
}
