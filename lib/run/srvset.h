/* srvset: the servers of one run as its clients see them: one gem-serve holding the whole of θ,
 * or the K slices of a sliced run (gem-serve --slice I/K) given as K URLs, comma-separated, in
 * slice order. It owns the URL list, which slice of θ each server must hold, and the one check
 * that a server is the slice of its place in the list, made on its GET /v1/health and on every
 * reply that carries a vector (its theta_slice, gem-protocol(7)). gem-work's and gem-eval's
 * clients both go through it, so that a list given out of order, or proxies that swap servers,
 * are refused in the same words everywhere. */
#ifndef GEM_SRVSET_H
#define GEM_SRVSET_H
#include <stddef.h>

#include "run/slice.h"
#include "wire/proto.h"

#define SRVSET_URL_MAX 1024

struct srvset {
	int n;                          /* servers: 1 (the whole of θ) or K > 1 */
	char url[SLICE_MAX][SRVSET_URL_MAX];
	struct slice slice[SLICE_MAX];  /* each server's slice of θ (srvset_layout) */
	int laid_out;                   /* the slices are known (θ's size was given) */
};

/* Split urls (one URL, or K comma-separated) into set: GEM_EUSAGE for an empty item, more than
 * SLICE_MAX, one too long. */
int srvset_parse(struct srvset *set, const char *urls, char *err);
/* The slices of θ's n elements, server k's the k-th of K (or the whole). */
void srvset_layout(struct srvset *set, size_t n);
/* Whether server k, which says it holds got (from its health or a reply's header), is the slice
 * of its place: 0, or an error naming both: GEM_EUSAGE for one URL of a sliced run and, with
 * usage (a check at the start: the list was given wrong), for every mismatch; GEM_EFAIL for a
 * mismatch in a reply (a server swapped while the run goes on). */
int srvset_check(const struct srvset *set, int k, const struct proto_slice *got, int usage,
		 char *err);
/* The same, server k found at url (a run directory's server.url, not the list's). */
int srvset_check_at(const struct srvset *set, int k, const char *url, const struct proto_slice *got,
		    int usage, char *err);
/* srvset_check of server k's GET /v1/health body (len bytes), usage as at the start; *health
 * (may be NULL) gets what it says. GEM_EFAIL when it is not a gem server's health. */
int srvset_check_health(const struct srvset *set, int k, const char *body, size_t len,
			struct proto_health *health, char *err);
#endif
