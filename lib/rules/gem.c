/* rule_gem: Gradient Energy Matching (Hermans & Louppe 2018), the server side. The proxy is
 * sequential momentum SGD; each commit is scaled element-wise so that the energy the central
 * variable receives matches the proxy's. */
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
 * |Δθ| + ε bit for bit — and the new s_w is a select. The clamp is written so that a NaN π
 * (0/0 when ε = 0, or Δθ = −ε with pull) becomes 0, in the one form gcc -O2 vectorises. */
struct rule_gem_k {
	float mu, kappa, pi_max, e_in, e_out;
	int pull;
};

static struct rule_gem_k rule_gem_consts(const struct rule_config *c)
{
	int pull = c->gem_ref == RULE_GEM_REF_PULL;
	struct rule_gem_k k = {c->momentum, c->kappa, c->pi_max, pull ? c->eps : 0,
			       pull ? 0 : c->eps, pull};
	return k;
}

static inline float rule_gem_pi(float theta, float m, float s, float d, const struct rule_gem_k *k,
				float *mi)
{
	float pi;
	*mi = k->mu * m + d;
	pi = (k->kappa * fabsf(*mi) - fabsf(theta - s)) / (fabsf(d + k->e_in) + k->e_out);
	pi = pi >= 0 ? pi : 0;
	return pi > k->pi_max ? k->pi_max : pi;
}

static inline float rule_gem_elem(float *restrict theta, float *restrict m, float *restrict s,
				  const float *restrict d, size_t i, const struct rule_gem_k *k)
{
	float mi, t, old = theta[i];
	float pi = rule_gem_pi(old, m[i], s[i], d[i], k, &mi);
	m[i] = mi;
	t = old + pi * d[i];
	theta[i] = t;
	s[i] = k->pull ? old : t;
	return pi;
}

/* The exact check (impl.h): m_w and θ finite after the commit, each computed as rule_gem_elem
 * does (s_w is one of θ's old or new values); π is clamped, so finite. */
RULE_NOINLINE static int rule_gem_finite(const float *restrict theta, const float *restrict m,
					 const float *restrict s, const float *restrict d, size_t n,
					 const struct rule_config *c)
{
	const struct rule_gem_k k = rule_gem_consts(c);
	float tail = 0;
	for (size_t i = 0; i < n; i++) {
		float mi, pi = rule_gem_pi(theta[i], m[i], s[i], d[i], &k, &mi);
		float t = theta[i] + pi * d[i];
		tail += (mi - mi) + (t - t);
	}
	return tail == 0;
}

/* A bound without the division: |m_w'| <= μ|m_w| + |Δθ| and, as 0 <= π <= π_max,
 * |θ'| <= |θ| + π_max·|Δθ|, each side in floats (rounding is monotone and symmetric, so the
 * rounded bound bounds the rounded value). Finite bounds: the commit is finite. The blocks of 8
 * are compiled twice, portable and AVX2 (impl.h, rule_v8). */
static inline __attribute__((always_inline)) int
rule_gem_bounded_in(const float *restrict theta, const float *restrict m, const float *restrict d,
		    size_t n, float mu, float pi_max)
{
	rule_i8 acc = {0};
	float tail = 0;
	size_t i = 0;
	for (; i + RULE_BLOCK <= n; i += RULE_BLOCK) {
		rule_v8 vd, vm, vt, ad, bm, bt;
		memcpy(&vd, d + i, sizeof vd);
		memcpy(&vm, m + i, sizeof vm);
		memcpy(&vt, theta + i, sizeof vt);
		ad = RULE_ABS8(vd);
		bm = mu * RULE_ABS8(vm) + ad;
		bt = RULE_ABS8(vt) + pi_max * ad;
		acc |= (rule_i8)((bm - bm) + (bt - bt));
	}
	for (; i < n; i++) {
		float bm = mu * fabsf(m[i]) + fabsf(d[i]), bt = fabsf(theta[i]) + pi_max * fabsf(d[i]);
		tail += (bm - bm) + (bt - bt);
	}
	return tail == 0 && !(acc[0] | acc[1] | acc[2] | acc[3] | acc[4] | acc[5] | acc[6] | acc[7]);
}

RULE_NOINLINE static int rule_gem_bounded_c(const float *restrict theta, const float *restrict m,
					    const float *restrict d, size_t n, float mu,
					    float pi_max)
{
	return rule_gem_bounded_in(theta, m, d, n, mu, pi_max);
}

#ifdef RULE_X86
RULE_NOINLINE RULE_AVX2 static int rule_gem_bounded_avx2(const float *restrict theta,
							 const float *restrict m,
							 const float *restrict d, size_t n,
							 float mu, float pi_max)
{
	return rule_gem_bounded_in(theta, m, d, n, mu, pi_max);
}
#endif

static int rule_gem_bounded(const float *theta, const float *m, const float *d, size_t n, float mu,
			    float pi_max)
{
#ifdef RULE_X86
	if (rule_avx2())
		return rule_gem_bounded_avx2(theta, m, d, n, mu, pi_max);
#endif
	return rule_gem_bounded_c(theta, m, d, n, mu, pi_max);
}

static int rule_gem_check(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			  const float *theta)
{
	float dmax, bm, bt;
	(void)tau;
	/* The bound of rule_gem_bounded with the largest |m_w|, |θ| and |Δθ| in place of each
	 * element's (rounding is monotone: it bounds every element's bound): |m_w| and |θ| as the
	 * last commit left them (rule_gem_commit), so that only Δθ is read. Unknown ones are +inf. */
	if (r->in_hinted ? (dmax = r->in_absmax, 1) : rule_vec_absmax(in, r->n, &dmax)) {
		bm = r->c.momentum * w->vmax + dmax;
		bt = r->tbound + r->c.pi_max * dmax;
		if (bm - bm == 0 && bt - bt == 0)
			return 1;
	}
	/* the bound is a cheap pass; only near FLT_MAX does it take the exact one */
	return rule_gem_bounded(theta, w->vec[0], in, r->n, r->c.momentum, r->c.pi_max) ||
	       rule_gem_finite(theta, w->vec[0], w->vec[1], in, r->n, &r->c);
}

/* Eight elements of a commit, as rule_gem_elem does each (the same operations in the same
 * order: the same floats), with π's lane sums: Σπ, #(π = 0), #(π = π_max), Σ|π⊙Δθ|, Σ|Δθ|. The
 * clamps are masks: a NaN π fails π >= 0 and becomes 0, as in rule_gem_pi. */
struct rule_gem_k8 {
	rule_v8 mu, kappa, pi_max, e_in, e_out, one;
	rule_i8 pull; /* all ones: gem_ref pull (s_w ← θ before the update) */
};

static inline __attribute__((always_inline)) void
rule_gem_elem8(float *restrict theta, float *restrict m, float *restrict s, float *restrict p,
	       float *restrict q, const float *restrict d, size_t i, const struct rule_gem_k8 *k,
	       rule_v8 sum[5], rule_i8 mx[2])
{
	rule_v8 vd, vt, vm, vs, mi, pi, t, nt;
	rule_i8 keep, over;
	memcpy(&vd, d + i, sizeof vd);
	memcpy(&vt, theta + i, sizeof vt);
	memcpy(&vm, m + i, sizeof vm);
	memcpy(&vs, s + i, sizeof vs);
	mi = k->mu * vm + vd;
	pi = (k->kappa * RULE_ABS8(mi) - RULE_ABS8(vt - vs)) /
	     (RULE_ABS8(vd + k->e_in) + k->e_out);
	keep = pi >= 0;
	pi = (rule_v8)((rule_i8)pi & keep);
	over = pi > k->pi_max;
	pi = (rule_v8)(((rule_i8)k->pi_max & over) | ((rule_i8)pi & ~over));
	t = vt + pi * vd;
	memcpy(m + i, &mi, sizeof mi);
	memcpy(theta + i, &t, sizeof t);
	if (q)
		memcpy(q + i, &t, sizeof t);
	nt = (rule_v8)(((rule_i8)vt & k->pull) | ((rule_i8)t & ~k->pull));
	memcpy(s + i, &nt, sizeof nt);
	memcpy(p + i, &pi, sizeof pi);
	sum[0] += pi;
	sum[1] += (rule_v8)((rule_i8)k->one & (pi == 0));
	sum[2] += (rule_v8)((rule_i8)k->one & (pi == k->pi_max));
	sum[3] += RULE_ABS8(pi * vd);
	sum[4] += RULE_ABS8(vd);
	/* the largest |m_w| and |θ| left: the bits of a finite |x| order like the numbers */
	{
		rule_i8 am = (rule_i8)RULE_ABS8(mi), at = (rule_i8)RULE_ABS8(t);
		rule_i8 gm = am > mx[0], gt = at > mx[1];
		mx[0] = (am & gm) | (mx[0] & ~gm);
		mx[1] = (at & gt) | (mx[1] & ~gt);
	}
}

/* The blocks of elements [a, b) (b − a a multiple of RULE_BLOCK), their lane sums added to sum,
 * the new θ also into q unless it is NULL (the reply: one pass instead of a copy after it):
 * compiled twice, portable and AVX2 (impl.h, rule_v8). */
static inline __attribute__((always_inline)) void
rule_gem_blocks_in(float *restrict theta, float *restrict m, float *restrict s, float *restrict p,
		   float *restrict q, const float *restrict d, size_t a, size_t b,
		   const struct rule_gem_k *k, rule_v8 sum[5], rule_i8 mxo[2])
{
	const float mu = k->mu, kappa = k->kappa, pi_max = k->pi_max, ei = k->e_in, eo = k->e_out;
	const int pl = k->pull ? -1 : 0;
	const struct rule_gem_k8 k8 = {
		{mu, mu, mu, mu, mu, mu, mu, mu},
		{kappa, kappa, kappa, kappa, kappa, kappa, kappa, kappa},
		{pi_max, pi_max, pi_max, pi_max, pi_max, pi_max, pi_max, pi_max},
		{ei, ei, ei, ei, ei, ei, ei, ei},
		{eo, eo, eo, eo, eo, eo, eo, eo},
		{1, 1, 1, 1, 1, 1, 1, 1},
		{pl, pl, pl, pl, pl, pl, pl, pl}};
	rule_v8 acc[5];
	rule_i8 mx[2];
	memcpy(acc, sum, sizeof acc);
	memcpy(mx, mxo, sizeof mx);
	for (size_t i = a; i < b; i += RULE_BLOCK)
		rule_gem_elem8(theta, m, s, p, q, d, i, &k8, acc, mx);
	memcpy(sum, acc, sizeof acc);
	memcpy(mxo, mx, sizeof mx);
}

RULE_NOINLINE static void rule_gem_blocks_c(float *restrict theta, float *restrict m,
					    float *restrict s, float *restrict p, float *restrict q,
					    const float *restrict d, size_t a, size_t b,
					    const struct rule_gem_k *k, rule_v8 sum[5], rule_i8 mx[2])
{
	rule_gem_blocks_in(theta, m, s, p, q, d, a, b, k, sum, mx);
}

#ifdef RULE_X86
RULE_NOINLINE RULE_AVX2 static void rule_gem_blocks_avx2(float *restrict theta, float *restrict m,
							 float *restrict s, float *restrict p,
							 float *restrict q, const float *restrict d,
							 size_t a, size_t b,
							 const struct rule_gem_k *k, rule_v8 sum[5],
							 rule_i8 mx[2])
{
	rule_gem_blocks_in(theta, m, s, p, q, d, a, b, k, sum, mx);
}
#endif

/* Apply elements [a, b) of one tensor, π into p, the new θ into q (unless NULL), its sums into
 * sums, the largest new |m_w| and |θ| into max[0], max[1] (if larger). The lane sums are those
 * of RULE_BLOCK lanes, kept in registers, folded into doubles at the end in lane order. */
static void rule_gem_tensor(float *theta, float *m, float *s, float *p, float *q, const float *d,
			    size_t a, size_t b, const struct rule_config *c, double sums[5],
			    float max[2])
{
	const struct rule_gem_k k = rule_gem_consts(c);
	rule_v8 lane[5] = {{0}};
	rule_i8 mx[2] = {{0}};
	size_t i = a + (b - a) / RULE_BLOCK * RULE_BLOCK;

#ifdef RULE_X86
	if (rule_avx2())
		rule_gem_blocks_avx2(theta, m, s, p, q, d, a, i, &k, lane, mx);
	else
#endif
		rule_gem_blocks_c(theta, m, s, p, q, d, a, i, &k, lane, mx);
	for (int v = 0; v < 2; v++) {
		float f[RULE_BLOCK];
		memcpy(f, &mx[v], sizeof f);
		for (int j = 0; j < RULE_BLOCK; j++)
			max[v] = f[j] > max[v] ? f[j] : max[v];
	}
	for (; i < b; i++) {
		float pi = rule_gem_elem(theta, m, s, d, i, &k);
		p[i] = pi;
		max[0] = fabsf(m[i]) > max[0] ? fabsf(m[i]) : max[0];
		max[1] = fabsf(theta[i]) > max[1] ? fabsf(theta[i]) : max[1];
		if (q)
			q[i] = theta[i];
		lane[0][0] += pi;
		lane[1][0] += pi == 0 ? 1.0f : 0.0f;
		lane[2][0] += pi == k.pi_max ? 1.0f : 0.0f;
		lane[3][0] += fabsf(pi * d[i]);
		lane[4][0] += fabsf(d[i]);
	}
	for (int q = 0; q < 5; q++) {
		sums[q] = 0;
		for (int j = 0; j < RULE_BLOCK; j++)
			sums[q] += lane[q][j];
	}
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
 * sorted). A first digit of the exponent alone kept most of a for the next digits. Each pass
 * also keeps the largest value below the chosen bin, so that an even count's second middle
 * value needs no pass of its own. A comparison quickselect took several times longer, bound by
 * mispredicted branches. hist: RULE_GEM_BINS counters. */
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
	 * RULE_GEM_CHUNK bins (most bins are empty, and one compare per bin made a chain of
	 * branches that took a third of the select), then bin by bin */
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
 * of a fixed stride sample of them (every ⌈n/RULE_GEM_SAMPLE⌉-th element), which costs ~40 µs
 * per cnn commit for its 10 tensors and θ, and estimates the median within ~1% in rank
 * (doc/rules.md). */
static float rule_gem_tensor_median(const float *a, size_t n, uint32_t *tmp, uint32_t *hist)
{
	float sample[RULE_GEM_SAMPLE];
	size_t stride, m = 0;
	if (n <= RULE_GEM_SAMPLE)
		return rule_gem_median(a, n, tmp, hist);
	stride = (n + RULE_GEM_SAMPLE - 1) / RULE_GEM_SAMPLE;
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

static int rule_gem_commit(struct rule *r, struct rule_worker *w, const float *in, uint64_t tau,
			   float *theta, float *reply, struct rule_stats *st, char *err)
{
	double sums[5], all[5] = {0};
	float max[2] = {0, 0};
	(void)tau, (void)err;

	for (int t = 0; t < r->l.ntensors; t++) {
		const struct layout_tensor *lt = &r->l.t[t];
		rule_gem_tensor(theta, w->vec[0], w->vec[1], r->scratch, reply, in, lt->offset,
				lt->offset + lt->size, &r->c, sums, max);
		for (int k = 0; k < 5; k++)
			all[k] += sums[k];
		if (st)
			rule_gem_fill(&st->t[t], sums, lt->size);
	}
	/* the bounds the next check of this worker, and of θ, may use */
	w->vmax = max[0];
	r->tmax = max[1];
	r->tmax_fresh = 1;
	if (!st)
		return RULE_APPLIED;
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
	return RULE_APPLIED;
}

const struct rule_ops rule_gem_ops = {
	/* name, fields, window, sends, reply_elastic, rounds, background, scratch */
	.desc = {"gem", "kappa pi_max eps tensor_stats gem_ref", 1, RULE_SENDS_STEP, 0, 0, 0, 2},
	.nvec = 2,
	.vec = {"m", "s"},
	.sent_vec = 1,
	.reply_theta = 1,
	.check = rule_gem_check,
	.commit = rule_gem_commit,
};
