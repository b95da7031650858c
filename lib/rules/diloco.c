/* rule_diloco: DiLoCo (Douillard et al., 2023), the server's half, and its outer optimiser.
 * Each worker takes λ steps of its own optimiser from the round's θ and commits where they led,
 * u_w = θ_w − θ_round, the negative of DiLoCo's pseudo-gradient: the same sign as every other
 * rule's commit. The server averages a round's u_w and takes one step of Nesterov momentum SGD
 * with them as the negative gradient (torch.optim.SGD with nesterov, dampening 0):
 *
 *     ū = (1/W)·Σ_w u_w ;  v ← μ_o·v + ū ;  θ ← θ + η_o·(ū + μ_o·v)
 *
 * and answers every commit of the round with θ. The rounds are round.c's, as for sync: a leave
 * lowers the round's target and the round completes with the commits of those remaining. */
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

static int rule_diloco_round(struct rule *r, const float *in, float *reply, float k, int close)
{
	return rule_diloco_pass(rule_theta(r), r->global[0], r->global[1], in, rule_theta_next(r),
				r->gspare[0], r->gspare[1], reply, r->n, r->c.outer_lr,
				r->c.outer_momentum, k, close);
}

const struct rule_ops rule_diloco_ops = {
	.desc = {.name = "diloco", .fields = "window outer_lr outer_momentum", .window = 50,
		 .sends = RULE_SENDS_OUTER, .rounds = 1},
	.sent_vec = -1,
	.nglobal = 2,
	.global = {"v", "sum"},
	.round_sum = 1,
	.round_pass = rule_diloco_round,
};
