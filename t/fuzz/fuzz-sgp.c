/* fuzz-sgp: libFuzzer target for what an SGP node takes from its peers: sgp_push_take and
 * sgp_hello_take (lib/role/sgp_http.c, the bodies of POST /v1/push and /v1/hello) on a node
 * built here, as sgp.c leaves it once ready, in one of many shapes (nodes, topology, overlap,
 * the iteration it is at). After each request the node must hold only what push-sum can send:
 * an inbox of shares from in-peers of their iteration, inside the window, one per (sender,
 * iteration), of a finite positive weight within the run's mass and finite x; and every
 * refusal counted once. The target includes sgp_impl.h, the node's private layout, since these
 * checks are on the node's state and no public call shows it.
 *
 * Input: nodes − 2, this node's index, flags (1 overlap, 2 ring, 4 not ready yet), peers per
 * iteration, iterations, the node's own iteration; then requests, each an op (0 push, 1 hello,
 * 2 the node moves on by len mod 8 iterations, taking what is due, 3 the node finishes), a
 * length (2 bytes, little-endian) and that many bytes of body. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "role/sgp_impl.h"

#define FUZZ_N 4                      /* floats in x */
#define FUZZ_HASH 0x0123456789abcdefULL /* the topology hash of the seeds' hellos */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A node of shape cfg (6 bytes), ready unless cfg says not: what sgp.c's prepare leaves. */
static struct sgp_node *node_new(const uint8_t *cfg)
{
	struct sgp_node *s = calloc(1, sizeof *s);
	if (!s)
		abort();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->n = FUZZ_N;
	s->nn = 2 + cfg[0] % 7;
	s->id = cfg[1] % s->nn;
	s->o.overlap = cfg[2] & 1;
	s->o.topology = cfg[2] & 2 ? PUSHSUM_RING : PUSHSUM_EXP;
	s->ready = !(cfg[2] & 4);
	s->o.peers_per_iter = 1 + cfg[3] % 4;
	s->mper = pushsum_peers_per_iter(s->o.topology, s->nn, s->o.peers_per_iter);
	s->iters = 1 + cfg[4];
	s->pub_iter = cfg[5] % s->iters;
	s->hash = FUZZ_HASH;
	s->hello = calloc((size_t)s->nn, sizeof *s->hello);
	s->pushed = calloc((size_t)s->nn, sizeof *s->pushed);
	if (!s->hello || !s->pushed)
		abort();
	return s;
}

static unsigned refusals(const struct sgp_node *s)
{
	unsigned sum = 0;
	for (int r = 0; r < SGP_REFUSE_N; r++)
		sum += s->refused[r];
	return sum;
}

/* The inbox holds only shares push-sum can send (see the top of the file). */
static void check_inbox(const struct sgp_node *s)
{
	int in[PUSHSUM_MAX_PEERS], np, k;
	size_t count = 0;
	for (const struct inmsg *m = s->inbox; m; m = m->next, count++) {
		if (m->from < 0 || m->from >= s->nn || m->from == s->id || m->iter >= s->iters ||
		    (!s->o.overlap && m->iter < s->pub_iter) || !isfinite(m->w) || !(m->w > 0))
			abort();
		np = pushsum_in_peers(s->o.topology, s->nn, s->mper, s->id, m->iter, in);
		for (k = 0; k < np && in[k] != m->from; k++)
			;
		if (k == np)
			abort();
		if (s->o.overlap) {
			/* one per sender, the pushes it has sent added up */
			if (m->w > (double)s->nn * (double)s->iters)
				abort();
			for (const struct inmsg *o = m->next; o; o = o->next)
				if (o->from == m->from)
					abort();
			continue;
		}
		if (m->w > s->nn || m->iter > s->pub_iter + (uint64_t)s->nn + 1)
			abort();
		for (size_t i = 0; i < s->n; i++)
			if (!isfinite(m->x[i]))
				abort();
		for (const struct inmsg *o = m->next; o; o = o->next)
			if (o->from == m->from && o->iter == m->iter)
				abort();
	}
	if (count > (size_t)(s->nn - 1) * (s->o.overlap ? 1 : (size_t)s->nn + 2))
		abort();
}

/* The node moves on by k iterations: what is due before it has been taken (sgp_mix_in; with
 * overlap, everything that has come). */
static void advance(struct sgp_node *s, unsigned k)
{
	struct inmsg **p = &s->inbox;
	s->pub_iter = s->pub_iter + k < s->iters ? s->pub_iter + k : s->iters - 1;
	while (*p) {
		struct inmsg *m = *p;
		if (s->o.overlap || m->iter < s->pub_iter) {
			*p = m->next;
			sgp_msg_recycle(s, m);
		} else {
			p = &m->next;
		}
	}
}

/* One request of op with body (len bytes, a copy of exactly that size: ASan sees any read past
 * its end), and what it must leave. */
static void request(struct sgp_node *s, int op, const uint8_t *body, size_t len)
{
	struct sgp_answer a;
	unsigned before = refusals(s), st;
	int hellos = s->nhello;
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy)
		abort();
	memcpy(copy, body, len);
	st = op == 0 ? sgp_push_take(s, copy, len, &a)
		     : sgp_hello_take(s, copy, len, "127.0.0.1:1", &a);
	free(copy);
	if (st != a.status || (st != 200 && (!a.error || !*a.error)))
		abort();
	/* a refusal is counted once, and only a refusal (a hello that disagrees is no refusal:
	 * it stops the node) */
	if (refusals(s) != before + (st == 400 || (op == 0 && st == 409)))
		abort();
	if (op == 0 && st != 200 && st != 400 && st != 409 && st != 410 && st != 503)
		abort();
	if (op == 1 && (st == 200 ? s->nhello < hellos || s->nhello > s->nn - 1
				   : st != 400 && st != 409 && st != 503))
		abort();
	check_inbox(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sgp_node *s;
	if (size < 6)
		return 0;
	s = node_new(data);
	for (size_t off = 6; off + 3 <= size;) {
		int op = data[off] % 4;
		size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		off += 3;
		if (len > size - off)
			len = size - off;
		if (op <= 1)
			request(s, op, data + off, len);
		else if (op == 2)
			advance(s, (unsigned)(len % 8));
		else
			s->closed = 1;
		off += len;
	}
	sgp_node_close(s);
	return 0;
}
