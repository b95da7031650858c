/* t3601: SGP's pure part, nodes simulated in one process with zero gradients: the topologies
 * (exp and ring for n = 3, 5, 8), push-sum's invariants (Σw and Σx conserved), exact consensus
 * after log2(n) synchronous iterations of the exponential graph when n is a power of two, the
 * topology hash and the peer list parser. */
#include "base/err.h"
#include "base/rng.h"
#include "rules/pushsum.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define LEN 37 /* parameters per node */
#define MAXN 16

struct sim {
	int n, m;
	enum pushsum_topology t;
	float x[MAXN][LEN];
	double w[MAXN];
};

static void sim_init(struct sim *s, int n, enum pushsum_topology t, int m, uint64_t seed)
{
	struct rng r;
	rng_seed(&r, seed, 1);
	memset(s, 0, sizeof *s);
	s->n = n;
	s->t = t;
	s->m = m;
	for (int i = 0; i < n; i++) {
		s->w[i] = 1;
		for (int j = 0; j < LEN; j++)
			s->x[i][j] = (float)rng_normal(&r);
	}
}

/* One synchronous iteration with zero gradients: every node splits, pushes, receives. */
static void sim_step(struct sim *s, uint64_t iter)
{
	static float share[MAXN][LEN];
	double wshare[MAXN];
	int peers[PUSHSUM_MAX_PEERS];
	for (int i = 0; i < s->n; i++) {
		pushsum_split(s->x[i], LEN, &s->w[i], pushsum_peers_per_iter(s->t, s->n, s->m));
		memcpy(share[i], s->x[i], sizeof share[i]);
		wshare[i] = s->w[i];
	}
	for (int i = 0; i < s->n; i++) {
		int c = pushsum_out_peers(s->t, s->n, s->m, i, iter, peers);
		for (int k = 0; k < c; k++)
			pushsum_receive(s->x[peers[k]], LEN, &s->w[peers[k]], share[i], wshare[i]);
	}
}

static void sums(const struct sim *s, double *sw, double sx[LEN])
{
	*sw = 0;
	for (int j = 0; j < LEN; j++)
		sx[j] = 0;
	for (int i = 0; i < s->n; i++) {
		*sw += s->w[i];
		for (int j = 0; j < LEN; j++)
			sx[j] += s->x[i][j];
	}
}

/* max over nodes of ‖z_i − z̄‖∞ */
static double spread(const struct sim *s)
{
	double mean[LEN] = {0}, worst = 0;
	float z[LEN];
	for (int i = 0; i < s->n; i++) {
		pushsum_debias(s->x[i], s->w[i], z, LEN);
		for (int j = 0; j < LEN; j++)
			mean[j] += z[j] / s->n;
	}
	for (int i = 0; i < s->n; i++) {
		pushsum_debias(s->x[i], s->w[i], z, LEN);
		for (int j = 0; j < LEN; j++)
			if (fabs(z[j] - mean[j]) > worst)
				worst = fabs(z[j] - mean[j]);
	}
	return worst;
}

static int same_set(const int *a, const int *b, int n)
{
	for (int i = 0; i < n; i++) {
		int found = 0;
		for (int j = 0; j < n; j++)
			found |= a[i] == b[j];
		if (!found)
			return 0;
	}
	return 1;
}

static void check_topology(enum pushsum_topology t, int n, int m, const char *want_iter0,
			   const char *want_iter1)
{
	int out[PUSHSUM_MAX_PEERS], in[PUSHSUM_MAX_PEERS], c, ok_inout = 1, ok_distinct = 1;
	char got0[64] = "", got1[64] = "";
	/* node 0's out-peers at iterations 0 and 1 */
	c = pushsum_out_peers(t, n, m, 0, 0, out);
	for (int k = 0; k < c; k++)
		snprintf(got0 + strlen(got0), sizeof got0 - strlen(got0), "%s%d", k ? "," : "", out[k]);
	c = pushsum_out_peers(t, n, m, 0, 1, out);
	for (int k = 0; k < c; k++)
		snprintf(got1 + strlen(got1), sizeof got1 - strlen(got1), "%s%d", k ? "," : "", out[k]);
	ok(!strcmp(got0, want_iter0) && !strcmp(got1, want_iter1),
	   "%s n=%d m=%d: node 0 pushes to %s then %s (want %s then %s)", pushsum_topology_name(t), n, m,
	   got0, got1, want_iter0, want_iter1);
	/* for every node and iteration: j is an in-peer of i iff i is an out-peer of j; peers are
	 * distinct and never the node itself */
	for (uint64_t it = 0; it < 12; it++)
		for (int i = 0; i < n; i++) {
			int cin = pushsum_in_peers(t, n, m, i, it, in), from[PUSHSUM_MAX_PEERS], nf = 0;
			c = pushsum_out_peers(t, n, m, i, it, out);
			for (int k = 0; k < c; k++) {
				ok_distinct &= out[k] != i && out[k] >= 0 && out[k] < n;
				for (int l = 0; l < k; l++)
					ok_distinct &= out[k] != out[l];
			}
			for (int j = 0; j < n; j++) {
				int o2[PUSHSUM_MAX_PEERS], c2 = pushsum_out_peers(t, n, m, j, it, o2);
				for (int k = 0; k < c2; k++)
					if (o2[k] == i)
						from[nf++] = j;
			}
			ok_inout &= nf == cin && same_set(from, in, cin);
		}
	ok(ok_inout && ok_distinct, "%s n=%d m=%d: in-peers are the inverse of out-peers, peers distinct",
	   pushsum_topology_name(t), n, m);
}

int main(void)
{
	struct sim s;
	double sw0, sw, sx0[LEN], sx[LEN];
	char err[GEM_ERRMAX], **peers;
	int n, ok_all;
	enum pushsum_topology t;

	/* topologies */
	ok(pushsum_exp_cycle(1) == 0 && pushsum_exp_cycle(2) == 1 && pushsum_exp_cycle(3) == 2 && pushsum_exp_cycle(4) == 2 &&
	   pushsum_exp_cycle(5) == 3 && pushsum_exp_cycle(8) == 3 && pushsum_exp_cycle(9) == 4,
	   "the exponential graph cycles over floor(log2(n-1))+1 exponents");
	ok(pushsum_topology_parse("exp", &t) == 0 && t == PUSHSUM_EXP && pushsum_topology_parse("ring", &t) == 0 &&
	   t == PUSHSUM_RING && pushsum_topology_parse("star", &t) < 0, "topology names");
	check_topology(PUSHSUM_EXP, 3, 1, "1", "2");
	check_topology(PUSHSUM_EXP, 5, 1, "1", "2");
	check_topology(PUSHSUM_EXP, 8, 1, "1", "2");
	check_topology(PUSHSUM_EXP, 8, 2, "1,2", "4,1");
	check_topology(PUSHSUM_EXP, 5, 3, "1,2,4", "1,2,4");
	check_topology(PUSHSUM_RING, 3, 1, "1", "1");
	check_topology(PUSHSUM_RING, 5, 1, "1", "1");
	check_topology(PUSHSUM_RING, 8, 2, "1,2", "1,2");
	ok(pushsum_peers_per_iter(PUSHSUM_EXP, 5, 9) == 3 && pushsum_peers_per_iter(PUSHSUM_RING, 3, 9) == 2 &&
	   pushsum_peers_per_iter(PUSHSUM_EXP, 1, 1) == 0, "m is capped at the peers the topology has");
	{
		int off[PUSHSUM_MAX_PEERS], seen = 0;
		for (uint64_t it = 0; it < 3; it++) {
			pushsum_offsets(PUSHSUM_EXP, 5, 1, it, off);
			seen |= off[0];
		}
		ok(seen == (1 | 2 | 4), "exp n=5: k cycles over 0, 1, 2 (offsets 1, 2, 4)");
	}

	/* push-sum conserves Σw and Σx, for n not a power of two too */
	static const struct {
		int n, m;
		enum pushsum_topology t;
	} cases[] = {{3, 1, PUSHSUM_EXP}, {5, 1, PUSHSUM_EXP}, {5, 2, PUSHSUM_EXP}, {7, 3, PUSHSUM_EXP}, {5, 1, PUSHSUM_RING},
		     {8, 2, PUSHSUM_RING}, {1, 1, PUSHSUM_EXP}};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		double worst = 0;
		sim_init(&s, cases[c].n, cases[c].t, cases[c].m, 10 + c);
		sums(&s, &sw0, sx0);
		for (uint64_t it = 0; it < 50; it++)
			sim_step(&s, it);
		sums(&s, &sw, sx);
		for (int j = 0; j < LEN; j++)
			if (fabs(sx[j] - sx0[j]) > worst)
				worst = fabs(sx[j] - sx0[j]);
		ok(fabs(sw - sw0) < 1e-12 && worst < 1e-4,
		   "%s n=%d m=%d: Σw %.15g → %.15g, Σx moved by %.2g in 50 iterations",
		   pushsum_topology_name(cases[c].t), cases[c].n, cases[c].m, sw0, sw, worst);
		if (cases[c].n > 1)
			ok(spread(&s) < 1e-4, "%s n=%d m=%d: the nodes' z agree after 50 iterations (%.2g)",
			   pushsum_topology_name(cases[c].t), cases[c].n, cases[c].m, spread(&s));
	}

	/* exact consensus: exp, n a power of two, 1 peer: log2(n) iterations average everything */
	for (n = 2; n <= 16; n *= 2) {
		int k = 0;
		double before;
		while ((1 << k) < n)
			k++;
		sim_init(&s, n, PUSHSUM_EXP, 1, 99);
		before = spread(&s);
		for (int it = 0; it < k - 1; it++)
			sim_step(&s, (uint64_t)it);
		double early = spread(&s);
		sim_step(&s, (uint64_t)k - 1);
		ok(spread(&s) < 1e-6 && (n == 2 || early > 1e-3),
		   "exp n=%d: z agree exactly after %d iterations (spread %.2g → %.2g after %d → %.2g)", n, k,
		   before, early, k - 1, spread(&s));
		ok_all = 1;
		for (int i = 0; i < n; i++)
			ok_all &= s.w[i] == 1.0;
		ok(ok_all, "exp n=%d: w stays exactly 1 (each node receives as much as it sends)", n);
	}
	/* n = 6: no exact consensus, but geometric convergence */
	sim_init(&s, 6, PUSHSUM_EXP, 1, 5);
	for (int it = 0; it < 60; it++)
		sim_step(&s, (uint64_t)it);
	ok(spread(&s) < 1e-5, "exp n=6: z converge (%.2g after 60 iterations)", spread(&s));

	/* the hash: order, n, topology and m all count */
	{
		const char *a[] = {"http://h:1", "http://h:2", "http://h:3"};
		const char *b[] = {"http://h:2", "http://h:1", "http://h:3"};
		uint64_t h = pushsum_topology_hash(PUSHSUM_EXP, 1, a, 3);
		ok(h == pushsum_topology_hash(PUSHSUM_EXP, 1, a, 3) && h != pushsum_topology_hash(PUSHSUM_EXP, 1, b, 3) &&
		   h != pushsum_topology_hash(PUSHSUM_EXP, 1, a, 2) && h != pushsum_topology_hash(PUSHSUM_RING, 1, a, 3) &&
		   h != pushsum_topology_hash(PUSHSUM_EXP, 2, a, 3) &&
		   pushsum_topology_hash(PUSHSUM_EXP, 2, a, 3) == pushsum_topology_hash(PUSHSUM_EXP, 5, a, 3),
		   "the topology hash changes with the order, n, the topology and the m used");
	}

	/* peer lists */
	ok(pushsum_peers_parse("http://a:1,http://b:2/\n# comment, http://c:3\n  https://d:4 ", &peers, &n, err) == 0 &&
	   n == 3 && !strcmp(peers[0], "http://a:1") && !strcmp(peers[1], "http://b:2") &&
	   !strcmp(peers[2], "https://d:4"), "peer lists: commas, lines, comments, trailing slashes");
	if (n == 3)
		pushsum_peers_free(peers, n);
	ok(pushsum_peers_parse("http://a:1,ftp://b", &peers, &n, err) == GEM_EUSAGE && strstr(err, "peer 1"),
	   "a peer that is not an http URL is refused: %s", err);
	ok(pushsum_peers_parse("http://a:1,http://a:1", &peers, &n, err) == GEM_EUSAGE,
	   "a peer listed twice is refused: %s", err);
	ok(pushsum_peers_parse(" # nothing\n", &peers, &n, err) == GEM_EUSAGE, "an empty list is refused");
	return done_testing();
}
