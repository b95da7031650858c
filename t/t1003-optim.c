/* t1003: SGD matches hand-computed PyTorch (torch.optim.SGD) updates for plain SGD, momentum,
 * Nesterov and weight decay, and refuses bad hyper-parameters. */
#include <string.h>

#include "base/err.h"
#include "nn/optim.h"
#include "tap.h"

/* 37 elements (blocks of 8 and a tail), two steps of each kind: the floats of the plain loop,
 * element by element */
static void test_blocks(void)
{
	enum { N = 37 };
	const char *name[3] = {"plain", "momentum", "nesterov"};
	for (int kind = 0; kind < 3; kind++) {
		char err[GEM_ERRMAX];
		struct sgd s;
		float th[N], want[N], v[N] = {0}, g[N];
		float lr = 0.1f, mu = kind ? 0.9f : 0, wd = 1e-3f;
		for (int i = 0; i < N; i++)
			th[i] = want[i] = 0.25f * (float)(i % 7) - 0.5f;
		if (!ok(sgd_init(&s, N, lr, mu, wd, kind == 2, err) == 0, "sgd (%s) of %d elements", name[kind], N))
			continue;
		for (int step = 0; step < 2; step++) {
			for (int i = 0; i < N; i++)
				g[i] = 0.125f * (float)((i * 5 + step) % 11) - 0.6f;
			sgd_step(&s, th, g);
			for (int i = 0; i < N; i++) {
				float gi = g[i] + wd * want[i];
				if (kind == 0) {
					want[i] -= lr * gi;
					continue;
				}
				v[i] = mu * v[i] + gi;
				want[i] -= lr * (kind == 2 ? gi + mu * v[i] : v[i]);
			}
		}
		ok(!memcmp(th, want, sizeof th), "sgd (%s), %d elements: the floats of the plain loop", name[kind], N);
		sgd_free(&s);
	}
}

int main(void)
{
	struct sgd s;
	char err[GEM_ERRMAX];
	float th[2], g1[2] = {0.5f, -1.0f}, g2[2] = {0.25f, 2.0f};

	test_blocks();

	ok(sgd_init(&s, 2, 0.1f, 0, 0, 0, err) == 0, "plain sgd");
	th[0] = 1, th[1] = 2;
	sgd_step(&s, th, g1);
	is_near(th[0], 0.95, 1e-6, "plain: θ = 1 − 0.1·0.5");
	is_near(th[1], 2.1, 1e-6, "plain: θ = 2 + 0.1·1");
	sgd_free(&s);

	/* momentum 0.9: v1 = g1, θ1 = θ0 − lr·v1; v2 = 0.9·v1 + g2, θ2 = θ1 − lr·v2 */
	ok(sgd_init(&s, 2, 0.1f, 0.9f, 0, 0, err) == 0, "momentum sgd");
	th[0] = 1, th[1] = 2;
	sgd_step(&s, th, g1);
	sgd_step(&s, th, g2);
	is_near(th[0], 1 - 0.1 * 0.5 - 0.1 * (0.9 * 0.5 + 0.25), 1e-6, "momentum: θ[0] after two steps");
	is_near(th[1], 2 + 0.1 * 1 - 0.1 * (0.9 * -1 + 2), 1e-6, "momentum: θ[1] after two steps");
	sgd_reset(&s);
	th[0] = 1;
	sgd_step(&s, th, g1);
	is_near(th[0], 0.95, 1e-6, "reset forgets the momentum");
	sgd_free(&s);

	/* nesterov: step = g + μ·v; first v = g, so θ1 = θ0 − lr·(1+μ)·g1 */
	ok(sgd_init(&s, 2, 0.1f, 0.9f, 0, 1, err) == 0, "nesterov sgd");
	th[0] = 1, th[1] = 2;
	sgd_step(&s, th, g1);
	is_near(th[0], 1 - 0.1 * 1.9 * 0.5, 1e-6, "nesterov: first step");
	sgd_step(&s, th, g2);
	double v2 = 0.9 * 0.5 + 0.25;
	is_near(th[0], 1 - 0.1 * 1.9 * 0.5 - 0.1 * (0.25 + 0.9 * v2), 1e-6, "nesterov: second step");
	sgd_free(&s);

	/* weight decay 0.01 with momentum 0.5: g = ∇ + wd·θ, taken at the θ of each step */
	ok(sgd_init(&s, 1, 0.1f, 0.5f, 0.01f, 0, err) == 0, "weight decay sgd");
	th[0] = 2;
	sgd_step(&s, th, g1);
	double t = 2, gg = 0.5 + 0.01 * 2, v = gg;
	t -= 0.1 * v;
	is_near(th[0], t, 1e-6, "weight decay: first step");
	sgd_step(&s, th, g2);
	gg = 0.25 + 0.01 * t;
	v = 0.5 * v + gg;
	t -= 0.1 * v;
	is_near(th[0], t, 1e-6, "weight decay: second step");
	sgd_free(&s);

	ok(sgd_init(&s, 2, -0.1f, 0, 0, 0, err) == GEM_EUSAGE && strstr(err, "learning rate"),
	   "negative lr refused (%s)", err);
	ok(sgd_init(&s, 2, 0.1f, 1.0f, 0, 0, err) == GEM_EUSAGE && strstr(err, "momentum"),
	   "momentum 1 refused (%s)", err);
	ok(sgd_init(&s, 2, 0.1f, 0, -1, 0, err) == GEM_EUSAGE && strstr(err, "weight decay"),
	   "negative weight decay refused (%s)", err);
	ok(sgd_init(&s, 2, 0.1f, 0, 0, 1, err) == GEM_EUSAGE && strstr(err, "nesterov"),
	   "nesterov without momentum refused (%s)", err);
	sgd_free(&s);
	return done_testing();
}
