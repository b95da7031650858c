#include "rules/pushsum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int pushsum_topology_parse(const char *name, enum pushsum_topology *t)
{
	if (!strcmp(name, "exp"))
		*t = PUSHSUM_EXP;
	else if (!strcmp(name, "ring"))
		*t = PUSHSUM_RING;
	else
		return -1;
	return 0;
}

const char *pushsum_topology_name(enum pushsum_topology t)
{
	return t == PUSHSUM_RING ? "ring" : "exp";
}

int pushsum_exp_cycle(int n)
{
	int k = 0;
	if (n < 2)
		return 0;
	while ((2L << k) <= n - 1) /* largest k with 2^k <= n − 1 */
		k++;
	return k + 1;
}

int pushsum_peers_per_iter(enum pushsum_topology t, int n, int m)
{
	int most = t == PUSHSUM_EXP ? pushsum_exp_cycle(n) : n - 1;
	if (m > most)
		m = most;
	if (m > PUSHSUM_MAX_PEERS)
		m = PUSHSUM_MAX_PEERS;
	return m < 0 ? 0 : m;
}

int pushsum_offsets(enum pushsum_topology t, int n, int m, uint64_t iter, int *off)
{
	int k = pushsum_exp_cycle(n);
	m = pushsum_peers_per_iter(t, n, m);
	for (int j = 0; j < m; j++) {
		/* 2^k < n for every k of the cycle: the offsets are distinct and nonzero mod n */
		if (t == PUSHSUM_EXP)
			off[j] = 1 << (int)((iter * (uint64_t)m + (uint64_t)j) % (uint64_t)k);
		else
			off[j] = j + 1;
	}
	return m;
}

int pushsum_out_peers(enum pushsum_topology t, int n, int m, int i, uint64_t iter, int *out)
{
	int c = pushsum_offsets(t, n, m, iter, out);
	for (int j = 0; j < c; j++)
		out[j] = (i + out[j]) % n;
	return c;
}

int pushsum_in_peers(enum pushsum_topology t, int n, int m, int i, uint64_t iter, int *in)
{
	int c = pushsum_offsets(t, n, m, iter, in);
	for (int j = 0; j < c; j++)
		in[j] = ((i - in[j]) % n + n) % n;
	return c;
}

void pushsum_split(float *x, size_t len, double *w, int m)
{
	float s = 1.0f / (float)(m + 1);
	if (m == 0)
		return;
	for (size_t i = 0; i < len; i++)
		x[i] *= s;
	*w /= m + 1;
}

void pushsum_receive(float *x, size_t len, double *w, const float *xj, double wj)
{
	for (size_t i = 0; i < len; i++)
		x[i] += xj[i];
	*w += wj;
}

void pushsum_debias(const float *x, double w, float *z, size_t len)
{
	float inv = (float)(1.0 / w);
	for (size_t i = 0; i < len; i++)
		z[i] = x[i] * inv;
}

double pushsum_share_distance(const float *z, const float *xj, double wj, size_t len)
{
	double d2 = 0, inv = 1.0 / wj;
	for (size_t i = 0; i < len; i++) {
		double d = (double)z[i] - xj[i] * inv;
		d2 += d * d;
	}
	return sqrt(d2);
}

/* FNV-1a 64 of len bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

uint64_t pushsum_topology_hash(enum pushsum_topology t, int m, const char *const *peers, int n)
{
	char head[64];
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	int len = snprintf(head, sizeof head, "sgp n=%d %s m=%d\n", n, pushsum_topology_name(t),
			   pushsum_peers_per_iter(t, n, m));
	h = fnv1a(h, head, (size_t)len);
	for (int i = 0; i < n; i++) {
		h = fnv1a(h, peers[i], strlen(peers[i]));
		h = fnv1a(h, "\n", 1);
	}
	return h;
}

void pushsum_peers_free(char **peers, int n)
{
	for (int i = 0; peers && i < n; i++)
		free(peers[i]);
	free(peers);
}

int pushsum_peers_parse(const char *text, char ***peers, int *n, char *err)
{
	char **list = NULL;
	int count = 0, cap = 0;
	const char *p = text;
	*peers = NULL;
	*n = 0;
	while (*p) {
		size_t len;
		if (*p == '#') {
			while (*p && *p != '\n')
				p++;
			continue;
		}
		if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
			p++;
			continue;
		}
		len = strcspn(p, ", \t\r\n#");
		while (len > 0 && p[len - 1] == '/')
			len--;
		if (strncmp(p, "http://", 7) && strncmp(p, "https://", 8)) {
			pushsum_peers_free(list, count);
			return gem_errf(err, GEM_EUSAGE, "peer %d: not an http:// URL: %.*s", count,
					(int)strcspn(p, ", \t\r\n#"), p);
		}
		if (count == PUSHSUM_MAX_NODES) {
			pushsum_peers_free(list, count);
			return gem_errf(err, GEM_EUSAGE, "more than %d peers", PUSHSUM_MAX_NODES);
		}
		if (count == cap) {
			char **grown = realloc(list, sizeof *list * (size_t)(cap = cap ? 2 * cap : 8));
			if (!grown) {
				pushsum_peers_free(list, count);
				return gem_errf(err, GEM_ENOMEM, "out of memory");
			}
			list = grown;
		}
		if (!(list[count] = strndup(p, len))) {
			pushsum_peers_free(list, count);
			return gem_errf(err, GEM_ENOMEM, "out of memory");
		}
		count++;
		p += strcspn(p, ", \t\r\n#");
	}
	if (count == 0)
		return gem_errf(err, GEM_EUSAGE, "the peer list is empty");
	for (int i = 0; i < count; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(list[i], list[j])) {
				gem_errf(err, GEM_EUSAGE, "peers %d and %d are both %s", j, i, list[i]);
				pushsum_peers_free(list, count);
				return GEM_EUSAGE;
			}
	*peers = list;
	*n = count;
	return 0;
}
