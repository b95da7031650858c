/* rule_diloco, rule_async_diloco: DiLoCo (Douillard et al., 2023), the server's half, in rounds
 * and on each arrival, with their outer optimiser.
 * Each worker takes H (window) steps of its own optimiser from the round's θ and commits where
 * they led, u_w = θ_w − θ_round, the negative of DiLoCo's pseudo-gradient: the same sign as every
 * other rule's commit. The server averages a round's u_w and takes one step of Nesterov momentum SGD
 * with them as the negative gradient (torch.optim.SGD with nesterov, dampening 0):
 *
 *     ū = (1/W)·Σ_w u_w ;  v ← μ_o·v + ū ;  θ ← θ + η_o·(ū + μ_o·v)
 *
 * and answers every commit of the round with θ. The rounds are round.c's, as for sync: a leave
 * lowers the round's target and the round completes with the commits of those remaining. */
#include <math.h>
#include <stddef.h>

#include "rules/impl.h"

/* s = sum + in (in NULL: sum) ; ū = s/k ; v′ = μ·v + ū ; θ′ = θ + η·(ū + μ·v′). With close:
 * v′ → v2, θ′ → t2 and q (unless NULL), 0 → s2; else s → s2. 1 if s, v′ and θ′ are finite. */
RULE_NOINLINE static int rule_diloco_pass(const float *restrict theta, const float *restrict v,
					  const float *restrict sum, const float *restrict in,
					  float *restrict t2, float *restrict v2, float *restrict s2,
					  float *restrict q, size_t n, float eta, float mu, float k,
					  int close)
{
	const rule_v4 zero = {0};
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 s = in ? rule_load4(sum + i) + rule_load4(in + i) : rule_load4(sum + i);
		rule_v4 u = s / k, vv = mu * rule_load4(v + i) + u;
		rule_v4 t = rule_load4(theta + i) + eta * (u + mu * vv);
		RULE_FINITE(acc, s);
		RULE_FINITE(acc, vv);
		RULE_FINITE(acc, t);
		if (!close) {
			rule_store4(s2 + i, s);
			continue;
		}
		rule_store4(v2 + i, vv);
		rule_store4(t2 + i, t);
		rule_store4(s2 + i, zero);
		if (q)
			rule_store4(q + i, t);
	}
	for (; i < n; i++) {
		float s = in ? sum[i] + in[i] : sum[i], u = s / k, vi = mu * v[i] + u;
		float t = theta[i] + eta * (u + mu * vi);
		tail += (s - s) + (vi - vi) + (t - t);
		if (!close) {
			s2[i] = s;
			continue;
		}
		v2[i] = vi;
		t2[i] = t;
		s2[i] = 0;
		if (q)
			q[i] = t;
	}
	return rule_finite(&acc, 4, tail);
}

static int rule_diloco_round(struct rule *r, const struct rule_span *sp, const float *in,
			     float *reply, float k, int close)
{
	size_t o = sp->off;
	return rule_diloco_pass(rule_theta(r) + o, r->global[0] + o, r->global[1] + o, in,
				rule_theta_next(r) + o, r->gspare[0] + o, r->gspare[1] + o, reply,
				sp->len, r->c.outer_lr, r->c.outer_momentum, k, close);
}

const struct rule_ops rule_diloco_ops = {
	.desc = {.name = "diloco", .fields = "window outer_lr outer_momentum fragments mix overlap",
		 .window = 50,
		 .sends = RULE_SENDS_OUTER, .rounds = 1},
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.round_sum = 1,
	.round_pass = rule_diloco_round,
};

/* rule_async_diloco: DiLoCo's outer step on each commit as it arrives (asynchronous Local-SGD,
 * Liu et al., 2024), with their delayed Nesterov: with N = delayed_nesterov >= 2 the commits
 * are summed into a, every N-th arrival takes the momentum step with their mean and the others
 * a plain step of their own,
 *
 *     a ← a + u ;  on the N-th:  v ← μ_o·v + a/N ;  θ ← θ + η_o·(u + μ_o·v) ;  a ← 0
 *                  otherwise:    θ ← θ + η_o·u
 *
 * N = 0 or 1 is the momentum step on every arrival. r->ncontrib counts the arrivals of the
 * group that is open, so that a checkpoint keeps the count with a. */

int rule_dynamic_window(const struct rule_config *c, double rate, double fastest)
{
	int h = c->window > 1 ? c->window : 1;
	double x;
	if (!c->dynamic_local_updates || !(rate > 0) || !(fastest > 0) || !isfinite(rate) ||
	    !isfinite(fastest))
		return h;
	/* the fastest worker takes H steps, the others as many as it in the same time */
	x = round(h * (rate / fastest));
	return x < 1 ? 1 : x > h ? h : (int)x;
}

/* N: the arrivals a momentum step takes (1: every one) */
static int rule_async_diloco_n(const struct rule *r)
{
	return r->c.delayed_nesterov > 1 ? r->c.delayed_nesterov : 1;
}

/* a′ = a + u. With close: v′ = μ·v + a′/k → v2, 0 → a2, θ′ = θ + η·(u + μ·v′); else a′ → a2,
 * θ′ = θ + η·u. θ′ → t2 and q (unless NULL). 1 if what it wrote (a′, v′, θ′) is finite. */
RULE_NOINLINE static int rule_async_diloco_pass(const float *restrict theta,
						const float *restrict v, const float *restrict a,
						const float *restrict u, float *restrict t2,
						float *restrict v2, float *restrict a2,
						float *restrict q, size_t n, float eta, float mu,
						float k, int close)
{
	const rule_v4 zero = {0};
	rule_i4 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		rule_v4 x = rule_load4(u + i), s = rule_load4(a + i) + x, t;
		RULE_FINITE(acc, s);
		if (close) {
			rule_v4 vv = mu * rule_load4(v + i) + s / k;
			t = rule_load4(theta + i) + eta * (x + mu * vv);
			RULE_FINITE(acc, vv);
			rule_store4(v2 + i, vv);
			rule_store4(a2 + i, zero);
		} else {
			t = rule_load4(theta + i) + eta * x;
			rule_store4(a2 + i, s);
		}
		RULE_FINITE(acc, t);
		rule_store4(t2 + i, t);
		if (q)
			rule_store4(q + i, t);
	}
	for (; i < n; i++) {
		float s = a[i] + u[i], t;
		tail += s - s;
		if (close) {
			float vi = mu * v[i] + s / k;
			t = theta[i] + eta * (u[i] + mu * vi);
			tail += vi - vi;
			v2[i] = vi;
			a2[i] = 0;
		} else {
			t = theta[i] + eta * u[i];
			a2[i] = s;
		}
		tail += t - t;
		t2[i] = t;
		if (q)
			q[i] = t;
	}
	return rule_finite(&acc, 4, tail);
}

static int rule_async_diloco_apply(struct rule *r, const struct rule_span *sp,
				   struct rule_worker *w, const float *in, uint64_t tau, float *reply,
				   struct rule_stats *st)
{
	int n = rule_async_diloco_n(r);
	size_t o = sp->off;
	(void)w, (void)tau, (void)st;
	return rule_async_diloco_pass(rule_theta(r) + o, r->global[0] + o, r->global[1] + o, in,
				      rule_theta_next(r) + o, r->gspare[0] + o, r->gspare[1] + o,
				      reply, sp->len, r->c.outer_lr, r->c.outer_momentum, (float)n,
				      r->ncontrib + 1 >= n);
}

/* The pass was taken: a′ always, v′ when it closed the group. */
static void rule_async_diloco_take(struct rule *r, const struct rule_span *sp)
{
	int close = r->ncontrib + 1 >= rule_async_diloco_n(r);
	if (close)
		rule_take_vec(r, sp, &r->global[0], &r->gspare[0]);
	rule_take_vec(r, sp, &r->global[1], &r->gspare[1]);
	r->ncontrib = close ? 0 : r->ncontrib + 1;
}

const struct rule_ops rule_async_diloco_ops = {
	.desc = {.name = "async-diloco",
		 .fields = "window outer_lr outer_momentum delayed_nesterov dynamic_local_updates "
			   "fragments mix overlap",
		 .window = 50, .sends = RULE_SENDS_OUTER},
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "a"},
	.pass = rule_async_diloco_apply,
	.take = rule_async_diloco_take,
};
