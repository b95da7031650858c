/* gradcheck-test.h: what the layer tests share to hold a backward against central finite
 * differences of its forward: for y = f(x) the scalar L = Σ y ⊙ R (R random, summed in
 * double), ε = EPS, and the relative error with a floor (1e-2 unless the probe sets another)
 * that must stay under BOUND. */
#ifndef GEM_GRADCHECK_TEST_H
#define GEM_GRADCHECK_TEST_H
#include <math.h>
#include <stddef.h>

#define EPS 1e-2f
#define BOUND 5e-3

static inline double relerr_floor(double num, double ana, double floor)
{
	double d = fabs(num) + fabs(ana);
	return fabs(num - ana) / (d > floor ? d : floor);
}

static inline double relerr(double num, double ana)
{
	return relerr_floor(num, ana, 1e-2);
}

/* A layer under test: run(ctx) computes y (ny floats) from the current inputs. */
struct probe {
	void (*run)(void *ctx);
	void *ctx;
	const float *y, *R;
	size_t ny;
	double floor; /* of the relative error's denominator; 0: 1e-2 */
};

/* L at the current inputs: Σ y ⊙ R, in double. */
static inline double probe_loss(struct probe *p)
{
	double s = 0;
	p->run(p->ctx);
	for (size_t i = 0; i < p->ny; i++)
		s += (double)p->y[i] * p->R[i];
	return s;
}

/* The worst relative error of grad against finite differences over n values of v, every
 * step-th of them; v is left as it was, y as at its last perturbed value. */
static inline double probe_check(struct probe *p, float *v, const float *grad, size_t n,
				 size_t step)
{
	double worst = 0;
	for (size_t i = 0; i < n; i += step) {
		float keep = v[i];
		v[i] = keep + EPS;
		double lp = probe_loss(p);
		v[i] = keep - EPS;
		double lm = probe_loss(p);
		v[i] = keep;
		worst = fmax(worst, relerr_floor((lp - lm) / (2.0 * EPS), grad[i], p->floor > 0 ? p->floor : 1e-2));
	}
	return worst;
}
#endif
