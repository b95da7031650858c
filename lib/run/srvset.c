#include "run/srvset.h"

#include <jansson.h>
#include <string.h>

#include "base/err.h"

int srvset_parse(struct srvset *set, const char *urls, char *err)
{
	memset(set, 0, sizeof *set);
	for (const char *u = urls;; set->n++) {
		size_t len = strcspn(u, ",");
		if (set->n == SLICE_MAX)
			return gem_errf(err, GEM_EUSAGE, "%s: more than %d servers", urls, SLICE_MAX);
		if (!len)
			return gem_errf(err, GEM_EUSAGE, "%s: an empty URL in the list", urls);
		if (len >= SRVSET_URL_MAX)
			return gem_errf(err, GEM_EUSAGE, "a URL of %zu bytes is too long", len);
		memcpy(set->url[set->n], u, len);
		set->url[set->n][len] = 0;
		if (!u[len]) {
			set->n++;
			return 0;
		}
		u += len + 1;
	}
}

void srvset_layout(struct srvset *set, size_t n)
{
	for (int k = 0; k < set->n; k++)
		set->slice[k] = slice_of(n, k, set->n > 1 ? set->n : 0);
	set->laid_out = 1;
}

int srvset_check(const struct srvset *set, int k, const struct proto_slice *got, int usage,
		 char *err)
{
	return srvset_check_at(set, k, set->url[k], got, usage, err);
}

int srvset_check_at(const struct srvset *set, int k, const char *url, const struct proto_slice *got,
		    int usage, char *err)
{
	const struct slice *want = &set->slice[k];
	int bad = usage ? GEM_EUSAGE : GEM_EFAIL;
	if (set->n == 1 && got->k == 0)
		return 0;
	if (set->n == 1)
		return gem_errf(err, GEM_EUSAGE, "%s serves slice %d/%d of a sliced run: give all %d "
				"URLs, comma-separated, slice 0's first (or the run directory)", url,
				got->i, got->k, got->k);
	if (got->k == 0)
		return gem_errf(err, bad, "%s serves the whole of θ, not slice %d/%d (gem-serve --slice "
				"%d/%d)", url, k, set->n, k, set->n);
	if (got->i == k && got->k == set->n &&
	    (!set->laid_out || (got->off == want->off && got->len == want->len)))
		return 0;
	if (!set->laid_out)
		return gem_errf(err, bad, "%s serves slice %d/%d of θ, not %d/%d (the URLs go in slice "
				"order)", url, got->i, got->k, k, set->n);
	return gem_errf(err, bad, "%s serves slice %d/%d of θ (offset %llu, length %llu), not %d/%d "
			"(offset %zu, length %zu) (the URLs go in slice order)", url, got->i, got->k,
			(unsigned long long)got->off, (unsigned long long)got->len, k, set->n,
			want->off, want->len);
}

int srvset_check_health(const struct srvset *set, int k, const char *body, size_t len,
			struct proto_health *health, char *err)
{
	json_t *j = json_loadb(body, len, 0, NULL);
	struct proto_health h;
	int rc = proto_health_from_json(j, SLICE_MAX, &h, err);
	json_decref(j);
	if (rc < 0) {
		gem_errprefix(err, "%s/v1/health: ", set->url[k]);
		return GEM_EFAIL;
	}
	if (health)
		*health = h;
	return srvset_check(set, k, &h.slice, 1, err);
}
