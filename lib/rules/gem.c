/* rule_gem: Gradient Energy Matching (Hermans & Louppe 2018), the server side. The proxy is
 * sequential momentum SGD; each commit is scaled element-wise so that the energy the central
 * variable receives matches the proxy's. With a window of H > 1 inner steps (gem on
 * pseudo-gradients) the worker takes them with the run's optimiser and commits u_w = x_w − θ;
 * Δθ below is u_w and μ is the outer momentum μ_o, 0 unless given: the proxy's H steps are the
 * worker's own, its momentum already inside u_w (doc/rules.md, "GEM on pseudo-gradients"). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rules/impl.h"

#define RULE_GEM_WAYS 2    /* interleaved histograms of the median's first radix digit */
#define RULE_GEM_BINS 4096 /* counters for the median: the largest digit, bits 30..19 */
#define RULE_GEM_SAMPLE 2048 /* medians of larger tensors are taken over a stride sample */
#define RULE_GEM_CHUNK 32    /* bins summed at a time when looking for the median's */
_Static_assert(RULE_GEM_SAMPLE / RULE_GEM_WAYS + RULE_GEM_WAYS <= 65535,
	       "a way of the first digit's histogram counts in 16 bits");

/* One element of a commit (doc/rules.md, "GEM"; the paper's Eq. 27 with the authors' clamp):
 *   m_w ← μ·m_w + Δθ
 *   π   ← clamp((κ·|m_w| − |θ − s_w|) / (|Δθ| + ε), 0, π_max)
 *   θ   ← θ + π ⊙ Δθ ;  s_w ← θ
 * gem_ref pull (the authors' code): π's denominator is |Δθ + ε| and s_w ← θ before the update,
 * so that the worker's own scaled update counts in its next |θ − s_w|. One loop serves both:
 * the denominator is |Δθ + e_in| + e_out, (e_in, e_out) = (0, ε) or (ε, 0) — |Δθ + 0| + ε is
 * |Δθ| + ε bit for bit — and the new s_w is the buffer of θ before or after the commit
 * (rule_gem_sent_before). The clamp is written so that a NaN π (0/0 when ε = 0, or Δθ = −ε
 * with pull) becomes 0. */
struct rule_gem_k {
	float mu, kappa, pi_max, e_in, e_out;
	int pull; /* gem_ref pull: a bfloat16 s_w′ is θ before the commit, not θ′ */
};

static struct rule_gem_k rule_gem_consts(const struct rule_config *c)
{
	int pull = c->gem_ref == RULE_GEM_REF_PULL;
	struct rule_gem_k k = {.mu = c->window > 1 ? c->outer_momentum : c->momentum,
			       .kappa = c->kappa, .pi_max = c->pi_max,
			       .e_in = pull ? c->eps : 0, .e_out = pull ? 0 : c->eps, .pull = pull};
	return k;
}

/* What a commit's pass reads (θ, m_w, s_w, Δθ) and writes: θ′ and m_w′ into the spares, θ′ into
 * the reply q unless it is NULL, π into the scratch where the medians read it unless pi is NULL
 * (no medians). With bfloat16 state (state_precision bf16) m_w and s_w are read from mh and sh
 * instead, and m_w′ and s_w′ rounded into m2h and s2h: the arithmetic is float32's, the
 * rounding happens once, on store. */
struct rule_gem_io {
	const float *theta, *m, *s, *d;
	float *theta2, *m2, *pi, *q;
	const uint16_t *mh, *sh;
	uint16_t *m2h, *s2h;
};

/* Elements between two of a median's sample in a tensor of n (rule_gem_tensor_median). */
static size_t rule_gem_stride(size_t n)
{
	return n <= RULE_GEM_SAMPLE ? 1 : (n + RULE_GEM_SAMPLE - 1) / RULE_GEM_SAMPLE;
}

/* Where the medians read π in a tensor: the next element of the tensor's sample and of θ's
 * (from the start of θ), and their strides. */
struct rule_gem_pick {
	size_t next[2], stride[2];
};

/* Element i of a commit: returns π, and adds the bits of x − x of what it wrote to *tail
 * (impl.h; π is clamped, so finite). */
static inline float rule_gem_elem(const struct rule_gem_io *o, size_t i, const struct rule_gem_k *k,
				  float *tail)
{
	float mi, t, old = o->theta[i], d = o->d[i];
	float pi, m = o->mh ? rule_bf16_float(o->mh[i]) : o->m[i];
	float sw = o->sh ? rule_bf16_float(o->sh[i]) : o->s[i];
	mi = k->mu * m + d;
	pi = (k->kappa * fabsf(mi) - fabsf(old - sw)) / (fabsf(d + k->e_in) + k->e_out);
	pi = pi >= 0 ? pi : 0;
	pi = pi > k->pi_max ? k->pi_max : pi;
	t = old + pi * d;
	if (o->m2h) {
		/* what is stored is checked: a float near FLT_MAX rounds to an infinity */
		uint16_t hm = rule_bf16(mi), hs = rule_bf16(k->pull ? old : t);
		o->m2h[i] = hm;
		o->s2h[i] = hs;
		mi = rule_bf16_float(hm);
		*tail += rule_bf16_float(hs) - rule_bf16_float(hs);
	} else {
		o->m2[i] = mi;
	}
	o->theta2[i] = t;
	if (o->pi)
		o->pi[i] = pi;
	if (o->q)
		o->q[i] = t;
	*tail += (mi - mi) + (t - t);
	return pi;
}

/* Eight elements of a commit, as rule_gem_elem does each (the same operations in the same
 * order: the same floats), π into *pi, with π's lane sums: Σπ, #(π = 0), #(π = π_max), Σ|π⊙Δθ|,
 * Σ|Δθ|, and the finiteness of what it wrote ORed into *acc. The clamps are masks: a NaN π
 * fails π >= 0 and becomes 0, as in rule_gem_elem. */
struct rule_gem_k8 {
	rule_v8 mu, kappa, pi_max, e_in, e_out, one;
	int pull;
};

/* half (a constant where it is inlined): m_w and s_w in bfloat16, as rule_gem_elem */
static inline __attribute__((always_inline)) void
rule_gem_elem8(const struct rule_gem_io *o, size_t i, const struct rule_gem_k8 *k, rule_v8 sum[5],
	       rule_i8 *acc, rule_v8 *pio, int half)
{
	rule_v8 vd, vt, vm, vs, mi, pi, t;
	rule_i8 keep, over;
	memcpy(&vd, o->d + i, sizeof vd);
	memcpy(&vt, o->theta + i, sizeof vt);
	if (half) {
		rule_h8 hm, hs;
		memcpy(&hm, o->mh + i, sizeof hm);
		memcpy(&hs, o->sh + i, sizeof hs);
		vm = RULE_BF16_FLOAT8(hm);
		vs = RULE_BF16_FLOAT8(hs);
	} else {
		memcpy(&vm, o->m + i, sizeof vm);
		memcpy(&vs, o->s + i, sizeof vs);
	}
	mi = k->mu * vm + vd;
	pi = (k->kappa * RULE_ABS8(mi) - RULE_ABS8(vt - vs)) /
	     (RULE_ABS8(vd + k->e_in) + k->e_out);
	keep = pi >= 0;
	pi = (rule_v8)((rule_i8)pi & keep);
	over = pi > k->pi_max;
	pi = (rule_v8)(((rule_i8)k->pi_max & over) | ((rule_i8)pi & ~over));
	t = vt + pi * vd;
	if (half) {
		rule_h8 hm = RULE_BF16_8(mi), hs = RULE_BF16_8(k->pull ? vt : t);
		memcpy(o->m2h + i, &hm, sizeof hm);
		memcpy(o->s2h + i, &hs, sizeof hs);
		mi = RULE_BF16_FLOAT8(hm);
		RULE_FINITE(*acc, RULE_BF16_FLOAT8(hs));
	} else {
		memcpy(o->m2 + i, &mi, sizeof mi);
	}
	memcpy(o->theta2 + i, &t, sizeof t);
	if (o->q)
		memcpy(o->q + i, &t, sizeof t);
	*pio = pi;
	sum[0] += pi;
	sum[1] += (rule_v8)((rule_i8)k->one & (pi == 0));
	sum[2] += (rule_v8)((rule_i8)k->one & (pi == k->pi_max));
	sum[3] += RULE_ABS8(pi * vd);
	sum[4] += RULE_ABS8(vd);
	RULE_FINITE(*acc, mi);
	RULE_FINITE(*acc, t);
}

/* The blocks of elements [a, b) (b − a a multiple of RULE_BLOCK), their lane sums added to sum
 * and finiteness to acc, π stored in the blocks that hold an element of a median's sample
 * (pick): compiled twice, portable and AVX2 (impl.h, rule_v8). The sums and the pointers are
 * kept in locals, in registers. */
static inline __attribute__((always_inline)) void
rule_gem_blocks_in(const struct rule_gem_io *o, size_t a, size_t b, const struct rule_gem_k *k,
		   struct rule_gem_pick *pick, rule_v8 sum[5], rule_i8 *acc, int half)
{
	const float mu = k->mu, kappa = k->kappa, pi_max = k->pi_max, ei = k->e_in, eo = k->e_out;
	const struct rule_gem_k8 k8 = {
		.mu = {mu, mu, mu, mu, mu, mu, mu, mu},
		.kappa = {kappa, kappa, kappa, kappa, kappa, kappa, kappa, kappa},
		.pi_max = {pi_max, pi_max, pi_max, pi_max, pi_max, pi_max, pi_max, pi_max},
		.e_in = {ei, ei, ei, ei, ei, ei, ei, ei},
		.e_out = {eo, eo, eo, eo, eo, eo, eo, eo},
		.one = {1, 1, 1, 1, 1, 1, 1, 1},
		.pull = k->pull};
	const struct rule_gem_io io = *o;
	struct rule_gem_pick at = *pick;
	rule_v8 lanes[5], pi;
	rule_i8 bad = *acc;
	memcpy(lanes, sum, sizeof lanes);
	for (size_t i = a; i < b; i += RULE_BLOCK) {
		rule_gem_elem8(&io, i, &k8, lanes, &bad, &pi, half);
		if (!io.pi || (at.next[0] >= i + RULE_BLOCK && at.next[1] >= i + RULE_BLOCK))
			continue;
		memcpy(io.pi + i, &pi, sizeof pi);
		for (int q = 0; q < 2; q++)
			while (at.next[q] < i + RULE_BLOCK)
				at.next[q] += at.stride[q];
	}
	memcpy(sum, lanes, sizeof lanes);
	*acc = bad;
}

RULE_NOINLINE static void rule_gem_blocks_c(const struct rule_gem_io *o, size_t a, size_t b,
					    const struct rule_gem_k *k, struct rule_gem_pick *pick,
					    rule_v8 sum[5], rule_i8 *acc)
{
	if (o->mh)
		rule_gem_blocks_in(o, a, b, k, pick, sum, acc, 1);
	else
		rule_gem_blocks_in(o, a, b, k, pick, sum, acc, 0);
}

#ifdef RULE_X86
RULE_NOINLINE RULE_AVX2 static void rule_gem_blocks_avx2(const struct rule_gem_io *o, size_t a,
							 size_t b, const struct rule_gem_k *k,
							 struct rule_gem_pick *pick,
							 rule_v8 sum[5], rule_i8 *acc)
{
	if (o->mh)
		rule_gem_blocks_in(o, a, b, k, pick, sum, acc, 1);
	else
		rule_gem_blocks_in(o, a, b, k, pick, sum, acc, 0);
}
#endif

/* Apply elements [a, b) of one tensor of θ's n, its sums into sums; 1 if all it wrote is
 * finite. The lane sums are those of RULE_BLOCK lanes, folded into doubles at the end in lane
 * order. */
static int rule_gem_tensor(const struct rule_gem_io *o, size_t a, size_t b, size_t n,
			   const struct rule_config *c, double sums[5])
{
	const struct rule_gem_k k = rule_gem_consts(c);
	size_t all = rule_gem_stride(n);
	struct rule_gem_pick pick = {.next = {a, (a + all - 1) / all * all},
				     .stride = {rule_gem_stride(b - a), all}};
	rule_v8 lane[5] = {{0}};
	rule_i8 acc = {0};
	float tail = 0;
	size_t i = a + (b - a) / RULE_BLOCK * RULE_BLOCK;

#ifdef RULE_X86
	if (rule_avx2())
		rule_gem_blocks_avx2(o, a, i, &k, &pick, lane, &acc);
	else
#endif
		rule_gem_blocks_c(o, a, i, &k, &pick, lane, &acc);
	for (; i < b; i++) {
		float pi = rule_gem_elem(o, i, &k, &tail);
		lane[0][0] += pi;
		lane[1][0] += pi == 0 ? 1.0f : 0.0f;
		lane[2][0] += pi == k.pi_max ? 1.0f : 0.0f;
		lane[3][0] += fabsf(pi * o->d[i]);
		lane[4][0] += fabsf(o->d[i]);
	}
	for (int q = 0; q < 5; q++) {
		sums[q] = 0;
		for (int j = 0; j < RULE_BLOCK; j++)
			sums[q] += lane[q][j];
	}
	return rule_finite(&acc, 8, tail);
}

static uint32_t rule_gem_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u & 0x7fffffffu; /* π >= 0: clear the sign of a −0 */
}

/* Find the bin of rank *k in hist[0..nb): *k becomes the rank inside the bin. Chunks of
 * RULE_GEM_CHUNK bins first, as for the first digit (rule_gem_select). */
static uint32_t rule_gem_bin(const uint32_t *hist, uint32_t nb, size_t *k)
{
	uint32_t b = 0;
	for (; b + RULE_GEM_CHUNK < nb; b += RULE_GEM_CHUNK) {
		size_t c = 0;
		for (int q = 0; q < RULE_GEM_CHUNK; q++)
			c += hist[b + (uint32_t)q];
		if (*k < c)
			break;
		*k -= c;
	}
	while (b < nb - 1 && *k >= hist[b])
		*k -= hist[b++];
	return b;
}

/* What rule_gem_select learns about the values next to the k-th smallest: how many equal values
 * come before it (rank_in_bin), and the largest smaller value (lo; 0 when there is none). */
struct rule_gem_rank {
	size_t rank_in_bin;
	float lo;
};

#define RULE_GEM_SORT 32 /* a set this small after the first digit is sorted, not counted */

static uint32_t rule_gem_max(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

/* Keep in tmp[0..m) the u of tmp[0..m) whose digit (u >> shift) & mask is d, the largest u of a
 * smaller digit into *lo; returns their count. */
static size_t rule_gem_keep(uint32_t *tmp, size_t m, int shift, uint32_t mask, uint32_t d,
			    uint32_t *lo)
{
	size_t m2 = 0;
	uint32_t mx = *lo;
	for (size_t i = 0; i < m; i++) {
		uint32_t u = tmp[i], dg = (u >> shift) & mask;
		tmp[m2] = u;
		m2 += dg == d;
		mx = rule_gem_max(mx, dg < d ? u : 0);
	}
	*lo = mx;
	return m2;
}

/* 1 if the m values in tmp are all equal (a loop that vectorises) */
static int rule_gem_same(const uint32_t *tmp, size_t m)
{
	uint32_t diff = 0;
	for (size_t i = 0; i < m; i++)
		diff |= tmp[i] ^ tmp[0];
	return diff == 0;
}

/* The k-th smallest of the m values in tmp by insertion sort, with rk as rule_gem_select. */
static uint32_t rule_gem_sorted(uint32_t *tmp, size_t m, size_t k, uint32_t lo,
				struct rule_gem_rank *rk)
{
	size_t e = k;
	for (size_t i = 1; i < m; i++) {
		uint32_t u = tmp[i];
		size_t j = i;
		for (; j > 0 && tmp[j - 1] > u; j--)
			tmp[j] = tmp[j - 1];
		tmp[j] = u;
	}
	while (e > 0 && tmp[e - 1] == tmp[k])
		e--;
	rk->rank_in_bin = k - e;
	lo = e > 0 ? tmp[e - 1] : lo;
	memcpy(&rk->lo, &lo, sizeof rk->lo);
	return tmp[k];
}

/* The k-th smallest of a[0..n), all a[i] >= 0, n <= RULE_GEM_SAMPLE. For non-negative floats
 * the bit patterns order like the numbers, so a radix select finds it in three digits: bits
 * 30..19 (the exponent and 4 bits of mantissa), counted over all of a in RULE_GEM_WAYS
 * interleaved 16-bit histograms (runs of equal π, such as the clamps 0 and π_max, would
 * otherwise wait on each other's increments; 16 bits hold n/RULE_GEM_WAYS); then bits 18..8 and
 * 7..0 over the elements of the chosen bins only, compacted into tmp (or, when few are left,
 * sorted): counting, unlike a comparison quickselect, takes no branch on the data. Each pass
 * also keeps the largest value below the chosen bin, so that an even count's second middle
 * value needs no pass of its own. hist: RULE_GEM_BINS counters. */
static float rule_gem_select(const float *a, size_t n, size_t k, uint32_t *tmp, uint32_t *hist,
			     struct rule_gem_rank *rk)
{
	uint16_t h1[RULE_GEM_WAYS * RULE_GEM_BINS];
	uint32_t b = 0, b2, b3, r, lo = 0;
	size_t m = 0, m2, i = 0;
	float x;

	memset(h1, 0, sizeof h1);
	for (; i + RULE_GEM_WAYS <= n; i += RULE_GEM_WAYS)
		for (int j = 0; j < RULE_GEM_WAYS; j++)
			h1[j * RULE_GEM_BINS + (rule_gem_bits(a[i + j]) >> 19)]++;
	for (; i < n; i++)
		h1[rule_gem_bits(a[i]) >> 19]++;
	/* the first bin whose count passes k, the ways summed as we go: first by chunks of
	 * RULE_GEM_CHUNK bins (most bins are empty: a chunk's sum is one compare instead of a
	 * chain of them), then bin by bin */
	for (; b + RULE_GEM_CHUNK < RULE_GEM_BINS; b += RULE_GEM_CHUNK) {
		uint32_t c = 0;
		for (int j = 0; j < RULE_GEM_WAYS; j++)
			for (int q = 0; q < RULE_GEM_CHUNK; q++)
				c += h1[j * RULE_GEM_BINS + b + (uint32_t)q];
		if (k < c)
			break;
		k -= c;
	}
	for (;; b++) {
		size_t c = h1[b];
		for (int j = 1; j < RULE_GEM_WAYS; j++)
			c += h1[j * RULE_GEM_BINS + b];
		if (k < c || b == RULE_GEM_BINS - 1)
			break;
		k -= c;
	}
	for (i = 0; i < n; i++) {
		uint32_t u = rule_gem_bits(a[i]);
		tmp[m] = u;
		m += (u >> 19) == b;
		lo = rule_gem_max(lo, (u >> 19) < b ? u : 0);
	}
	if (m <= RULE_GEM_SORT)
		r = rule_gem_sorted(tmp, m, k, lo, rk);
	else if (rule_gem_same(tmp, m)) {
		/* one value, such as a clamp: the next digits would only count it again */
		r = tmp[0];
		rk->rank_in_bin = k;
		memcpy(&rk->lo, &lo, sizeof rk->lo);
	} else {
		memset(hist, 0, 2048 * sizeof *hist);
		for (i = 0; i < m; i++)
			hist[(tmp[i] >> 8) & 2047]++;
		b2 = rule_gem_bin(hist, 2048, &k);
		m2 = rule_gem_keep(tmp, m, 8, 2047, b2, &lo);
		memset(hist, 0, 256 * sizeof *hist);
		for (i = 0; i < m2; i++)
			hist[tmp[i] & 255]++;
		b3 = rule_gem_bin(hist, 256, &k);
		r = b << 19 | b2 << 8 | b3;
		rk->rank_in_bin = k;
		for (uint32_t j = b3; j-- > 0;)
			if (hist[j]) {
				lo = b << 19 | b2 << 8 | j;
				break;
			}
		memcpy(&rk->lo, &lo, sizeof rk->lo);
	}
	memcpy(&x, &r, sizeof x);
	return x;
}

/* Median of a[0..n), n >= 1, all a[i] >= 0: for even n the mean of the two middle values. */
static float rule_gem_median(const float *a, size_t n, uint32_t *tmp, uint32_t *hist)
{
	struct rule_gem_rank rk;
	float hi = rule_gem_select(a, n, n / 2, tmp, hist, &rk);
	/* the value of rank n/2 − 1 is hi itself when a value equal to hi comes before it, else
	 * the largest value below hi */
	if (n % 2 || rk.rank_in_bin > 0)
		return hi;
	return (rk.lo + hi) / 2;
}

/* Median of π over a tensor: exact up to RULE_GEM_SAMPLE elements; above that, the exact median
 * of a fixed stride sample of them (every ⌈n/RULE_GEM_SAMPLE⌉-th element), whose error in rank
 * doc/rules.md gives. */
static float rule_gem_tensor_median(const float *a, size_t n, uint32_t *tmp, uint32_t *hist)
{
	float sample[RULE_GEM_SAMPLE];
	size_t stride = rule_gem_stride(n), m = 0;
	if (stride == 1)
		return rule_gem_median(a, n, tmp, hist);
	for (size_t i = 0; i < n; i += stride)
		sample[m++] = a[i];
	return rule_gem_median(sample, m, tmp, hist);
}

static void rule_gem_fill(struct rule_tensor_stats *t, const double sums[5], size_t n)
{
	t->pi_mean = (float)(sums[0] / (double)n);
	t->clamped0 = (float)(sums[1] / (double)n);
	t->clampedmax = (float)(sums[2] / (double)n);
	t->scale = sums[4] > 0 ? (float)(sums[3] / sums[4]) : 0;
	t->pi_median = 0;
}

static int rule_gem_commit(struct rule *r, const struct rule_span *sp, struct rule_worker *w,
		const float *in, uint64_t tau, float *reply, struct rule_stats *st)
{
	(void)sp; /* θ whole: a rule without fragments */
	const int half = r->ops->bf16_state;
	const struct rule_gem_io o = {
		.theta = rule_theta(r), .m = half ? NULL : w->vec[0], .s = half ? NULL : w->vec[1],
		.d = in, .theta2 = rule_theta_next(r), .m2 = half ? NULL : r->spare[0],
		.pi = st && r->c.tensor_stats ? r->scratch : NULL, .q = reply,
		.mh = half ? rule_bf16_vec(w->vec[0]) : NULL, .sh = half ? rule_bf16_vec(w->vec[1]) : NULL,
		.m2h = half ? rule_bf16_vec(r->spare[0]) : NULL,
		.s2h = half ? rule_bf16_vec(r->spare[1]) : NULL};
	double sums[5], all[5] = {0};
	int finite = 1;
	(void)tau;

	for (int t = 0; t < r->l.ntensors; t++) {
		const struct layout_tensor *lt = &r->l.t[t];
		finite &= rule_gem_tensor(&o, lt->offset, lt->offset + lt->size, r->n, &r->c, sums);
		for (int k = 0; k < 5; k++)
			all[k] += sums[k];
		if (st)
			rule_gem_fill(&st->t[t], sums, lt->size);
	}
	if (!finite || !st)
		return finite;
	st->ntensors = r->l.ntensors;
	rule_gem_fill(&st->all, all, r->n);
	if (r->c.tensor_stats) {
		/* the paper's Figs. 3, 9, 10: median π per tensor */
		uint32_t *tmp = (uint32_t *)(r->scratch + r->n), hist[RULE_GEM_BINS];
		for (int t = 0; t < r->l.ntensors; t++)
			st->t[t].pi_median = rule_gem_tensor_median(r->scratch + r->l.t[t].offset,
								    r->l.t[t].size, tmp, hist);
		st->all.pi_median = rule_gem_tensor_median(r->scratch, r->n, tmp, hist);
	}
	return 1;
}

/* gem_ref pull: s_w is θ before the worker's commit */
static int rule_gem_sent_before(const struct rule *r)
{
	return r->c.gem_ref == RULE_GEM_REF_PULL;
}

/* bfloat16 state: s_w ← θ rounded, as it is sent */
static void rule_gem_sent_bf16(struct rule *r, struct rule_worker *w)
{
	const float *theta = rule_theta(r);
	uint16_t *s = rule_bf16_vec(w->vec[1]);
	for (size_t i = 0; i < r->n; i++)
		s[i] = rule_bf16(theta[i]);
}

#define RULE_GEM_DESC                                                                             \
	{.name = "gem",                                                                           \
	 .fields = "kappa pi_max eps tensor_stats gem_ref state_precision window outer_momentum",  \
	 .window = 1, .sends = RULE_SENDS_STEP, .scratch = 2, .outer_window = 1}

/* state_precision bf16: m_w and s_w are the worker's own, rounded; θ's buffers are not shared */
static const struct rule_ops rule_gem_bf16_ops = {
	.desc = RULE_GEM_DESC,
	.nvec = 2,
	.vec = {"m", "s"},
	.sent_vec = -1,
	.bf16_state = 1,
	.sent = rule_gem_sent_bf16,
	.pass = rule_gem_commit,
};

const struct rule_ops rule_gem_ops = {
	.desc = RULE_GEM_DESC,
	.nvec = 2,
	.vec = {"m", "s"},
	.sent_vec = 1,
	.bf16 = &rule_gem_bf16_ops,
	.sent_before = rule_gem_sent_before,
	.pass = rule_gem_commit,
};
