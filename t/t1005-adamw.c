/* t1005: AdamW against steps worked by hand (torch.optim.AdamW's formulas), its bias
 * correction, weight decay on matrices only; the learning-rate schedule's values at given
 * steps; clipping by the global norm; struct optim: SGD through it bit for bit as sgd_step, and
 * a state saved and restored that continues exactly as if never stopped. */
#include <string.h>

#include "base/err.h"
#include "base/rng.h"
#include "nn/optim.h"
#include "tap.h"

/* θ: a 1×2 matrix "w" (decays) and a bias "b" of 1 (does not). */
static void layout2(struct layout *lo)
{
	memset(lo, 0, sizeof *lo);
	lo->ntensors = 2;
	lo->total = 3;
	lo->t[0] = (struct layout_tensor){"0.weight", 2, {1, 2}, 0, 2};
	lo->t[1] = (struct layout_tensor){"0.bias", 1, {1}, 2, 1};
}

static void test_adamw(void)
{
	struct layout lo;
	struct adamw a;
	char err[GEM_ERRMAX];
	float th[3] = {1, 2, 3}, g1[3] = {0.5f, -1, 0.25f}, g2[3] = {0.25f, 2, -0.5f};
	double lr = 0.1, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
	layout2(&lo);
	ok(adamw_init(&a, &lo, 0.9f, 0.95f, 1e-8f, 0.1f, err) == 0 && a.decay[0] && !a.decay[1],
	   "AdamW: the matrix decays, the bias does not");
	/* step 1: m = 0.1·g, v = 0.05·g², so m/(1−β₁) = g and v/(1−β₂) = g²: the step is lr·g/|g| */
	adamw_step(&a, th, g1, 0.1f);
	is_near(th[0], 1 * (1 - lr * wd) - lr, 1e-6, "step 1: θ₀ = 1·(1 − lr·wd) − lr (bias correction: a step of lr)");
	is_near(th[1], 2 * (1 - lr * wd) + lr, 1e-6, "step 1: θ₁ = 2·(1 − lr·wd) + lr");
	is_near(th[2], 3 - lr, 1e-6, "step 1: the bias, no decay: 3 − lr");
	/* step 2, by the formulas */
	double want[3], t0[3] = {th[0], th[1], th[2]};
	for (int i = 0; i < 3; i++) {
		double m = b1 * (1 - b1) * g1[i] + (1 - b1) * g2[i];
		double v = b2 * (1 - b2) * g1[i] * g1[i] + (1 - b2) * g2[i] * g2[i];
		double th0 = i < 2 ? t0[i] * (1 - lr * wd) : t0[i];
		want[i] = th0 - lr / (1 - b1 * b1) * m / (sqrt(v) / sqrt(1 - b2 * b2) + eps);
	}
	adamw_step(&a, th, g2, 0.1f);
	ok(fabs(th[0] - want[0]) < 1e-6 && fabs(th[1] - want[1]) < 1e-6 && fabs(th[2] - want[2]) < 1e-6,
	   "step 2 by the formulas: θ = %.6f %.6f %.6f (want %.6f %.6f %.6f)", th[0], th[1], th[2], want[0], want[1],
	   want[2]);
	ok(a.t == 2, "two steps counted");
	/* no gradient: the moments stay 0, the matrix decays and the bias stays */
	float zero[3] = {0, 0, 0}, before[3];
	adamw_reset(&a);
	memcpy(before, th, sizeof th);
	adamw_step(&a, th, zero, 0.1f);
	ok(th[0] == (float)(before[0] * (float)(1 - lr * wd)) && th[1] == (float)(before[1] * (float)(1 - lr * wd)) &&
		   th[2] == before[2],
	   "weight decay on the matrix only, decoupled from the gradient");
	adamw_free(&a);
	ok(adamw_init(&a, &lo, 1.0f, 0.95f, 1e-8f, 0, err) == GEM_EUSAGE && strstr(err, "betas"), "β₁ = 1 refused (%s)",
	   err);
	ok(adamw_init(&a, &lo, 0.9f, 0.95f, 0, 0, err) == GEM_EUSAGE && strstr(err, "epsilon"), "ε = 0 refused (%s)", err);
}

static void test_schedule(void)
{
	struct lr_schedule c = {1e-3f, 100, LR_COSINE, 1100, LR_MIN_RATIO}, k = {1e-3f, 100, LR_CONSTANT, 0, 0};
	struct lr_schedule none = {0.05f, 0, LR_CONSTANT, 0, 0};
	ok(fabs(lr_at(&c, 0) - 1e-5) < 1e-11 && fabs(lr_at(&c, 49) - 5e-4) < 1e-9 && lr_at(&c, 99) == 1e-3f,
	   "warm-up: lr/100 at step 0, lr/2 at step 49, lr at step 99");
	ok(lr_at(&c, 100) == 1e-3f && fabs(lr_at(&c, 600) - 5.5e-4) < 1e-9 && fabs(lr_at(&c, 1100) - 1e-4) < 1e-10 &&
		   fabs(lr_at(&c, 5000) - 1e-4) < 1e-10,
	   "cosine: lr at its start, (lr + lr/10)/2 half-way, lr/10 at the end and after (%g %g %g)",
	   (double)lr_at(&c, 600), (double)lr_at(&c, 1100), (double)lr_at(&c, 5000));
	ok(fabs(lr_at(&c, 350) - (1e-4 + 0.5 * (1 + cos(M_PI / 4)) * 9e-4)) < 1e-9, "cosine a quarter of the way: %g",
	   (double)lr_at(&c, 350));
	ok(lr_at(&k, 150) == 1e-3f && lr_at(&k, 1000000) == 1e-3f && lr_at(&none, 0) == 0.05f,
	   "constant after the warm-up; no warm-up: lr from step 0");
}

static void test_clip(void)
{
	float g[2] = {3, 4}, h[2] = {3, 4};
	double n = clip_grad_norm(g, 2, 1.0f);
	ok(n == 5 && fabs(g[0] - 0.6) < 1e-6 && fabs(g[1] - 0.8) < 1e-6 && fabs(hypot(g[0], g[1]) - 1) < 1e-6,
	   "clip 1: a norm of 5 becomes 1 (%g %g)", (double)g[0], (double)g[1]);
	ok(clip_grad_norm(h, 2, 10.0f) == 5 && h[0] == 3 && h[1] == 4, "clip 10: a norm of 5 is left alone");
	ok(clip_grad_norm(h, 2, 0) == 5 && h[0] == 3, "clip 0: the norm, nothing clipped");
}

static void test_optim(void)
{
	enum { N = 3, STEPS = 12 };
	struct layout lo;
	struct optim o, o2;
	struct sgd s;
	struct rng r;
	char err[GEM_ERRMAX];
	float a[N] = {1, 2, 3}, b[N] = {1, 2, 3}, g[N], gs[N][STEPS];
	layout2(&lo);
	rng_seed(&r, 1, 1);
	for (int k = 0; k < STEPS; k++)
		for (int i = 0; i < N; i++)
			gs[i][k] = 2 * rng_float(&r) - 1;
	struct optim_config sc = {.kind = OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
	ok(optim_init(&o, &sc, &lo, err) == 0 && sgd_init(&s, N, 0.05f, 0.9f, 1e-4f, 0, err) == 0, "SGD both ways");
	for (int k = 0; k < STEPS; k++) {
		for (int i = 0; i < N; i++)
			g[i] = gs[i][k];
		optim_step(&o, a, g);
		sgd_step(&s, b, g);
	}
	ok(!memcmp(a, b, sizeof a), "SGD through struct optim is sgd_step's, bit for bit");
	optim_free(&o);
	sgd_free(&s);

	/* AdamW with warm-up, cosine and clipping: 6 steps, the state saved, 6 more; a new optimiser
	 * restored from the state continues to the same θ */
	struct optim_config ac = {.kind = OPTIM_ADAMW, .lr = 0.01f, .weight_decay = 0.1f, .warmup = 3,
				  .schedule = LR_COSINE, .total_steps = STEPS, .clip = 0.5f};
	float saved_th[N], state[2 * N], c[N];
	uint64_t step;
	ok(optim_init(&o, &ac, &lo, err) == 0 && optim_init(&o2, &ac, &lo, err) == 0 && optim_state_floats(&o) == 2 * N,
	   "AdamW: its state is m and v");
	memcpy(a, (float[]){1, 2, 3}, sizeof a);
	for (int k = 0; k < STEPS; k++) {
		if (k == STEPS / 2) {
			memcpy(saved_th, a, sizeof a);
			optim_state_get(&o, state, &step);
		}
		for (int i = 0; i < N; i++)
			g[i] = gs[i][k];
		double norm = optim_step(&o, a, g);
		if (k == 0)
			ok(norm > 0.5 && fabs(hypot(hypot(g[0], g[1]), g[2]) - 0.5) < 1e-6, "the gradient is clipped to 0.5 "
			   "(from %.3f)", norm);
	}
	memcpy(c, saved_th, sizeof c);
	optim_state_set(&o2, state, step);
	for (int k = STEPS / 2; k < STEPS; k++) {
		for (int i = 0; i < N; i++)
			g[i] = gs[i][k];
		optim_step(&o2, c, g);
	}
	ok(step == STEPS / 2 && !memcmp(a, c, sizeof a), "a restored state continues exactly (θ bit for bit)");
	optim_free(&o);
	optim_free(&o2);
	struct optim_config bad = ac;
	bad.total_steps = 3;
	ok(optim_init(&o, &bad, &lo, err) == GEM_EUSAGE && strstr(err, "longer than the warm-up"),
	   "a cosine no longer than the warm-up is refused (%s)", err);
	bad = ac;
	bad.momentum = 0.9f;
	ok(optim_init(&o, &bad, &lo, err) == GEM_EUSAGE && strstr(err, "no momentum"), "AdamW with momentum refused");
	bad = ac;
	bad.clip = -1;
	ok(optim_init(&o, &bad, &lo, err) == GEM_EUSAGE && strstr(err, "clip"), "a negative clip refused");
}

int main(void)
{
	test_adamw();
	test_schedule();
	test_clip();
	test_optim();
	return done_testing();
}
