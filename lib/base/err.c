#include "base/err.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gem_errf(char *err, int code, const char *fmt, ...)
{
	va_list ap;
	if (err) {
		va_start(ap, fmt);
		vsnprintf(err, GEM_ERRMAX, fmt, ap);
		va_end(ap);
	}
	return code;
}

void gem_errprefix(char *err, const char *fmt, ...)
{
	char old[GEM_ERRMAX];
	va_list ap;
	size_t n;
	if (!err)
		return;
	memcpy(old, err, GEM_ERRMAX);
	old[GEM_ERRMAX - 1] = 0;
	va_start(ap, fmt);
	vsnprintf(err, GEM_ERRMAX, fmt, ap);
	va_end(ap);
	n = strlen(err);
	snprintf(err + n, GEM_ERRMAX - n, "%s", old);
}

/* Levenshtein; with swaps, a swap of two adjacent letters is one edit too (the optimal string
 * alignment distance). Case-insensitive; names longer than 63 bytes are cut there. Row k of the
 * table is r[k % 3]. */
static size_t distance(const char *a, const char *b, int swaps)
{
	size_t r[3][64], la = strnlen(a, 63), lb = strnlen(b, 63);
	for (size_t j = 0; j <= lb; j++)
		r[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t *pp = r[(i + 1) % 3], *p = r[(i + 2) % 3], *c = r[i % 3];
		int ai = tolower((unsigned char)a[i - 1]);
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			int bj = tolower((unsigned char)b[j - 1]);
			size_t sub = p[j - 1] + (ai != bj);
			size_t best = p[j] + 1 < c[j - 1] + 1 ? p[j] + 1 : c[j - 1] + 1;
			best = sub < best ? sub : best;
			if (swaps && i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == bj && pp[j - 2] + 1 < best)
				best = pp[j - 2] + 1;
			c[j] = best;
		}
	}
	return r[la % 3][lb];
}

size_t gem_edit_distance(const char *a, const char *b)
{
	return distance(a, b, 0);
}

const char *gem_closest_name(const char *name, const char *const *valid, size_t n)
{
	const char *best = NULL;
	size_t bestd = (size_t)-1, len = strlen(name);
	size_t bests = (size_t)-1;
	for (size_t i = 0; i < n; i++) {
		size_t d = gem_edit_distance(name, valid[i]), s;
		/* of names as far, the one a swap of adjacent letters explains best ("mpl": mlp, not
		 * gpt, both 2 edits away) */
		if (d < bestd || (d == bestd && (s = distance(name, valid[i], 1)) < bests))
			bestd = d, best = valid[i], bests = distance(name, valid[i], 1);
	}
	/* a typo, not another word: at most 2 edits, and fewer than the name has letters */
	return best && bestd <= 2 && bestd < len ? best : NULL;
}

int gem_err_unknown(char *err, int code, const char *what, const char *name,
		    const char *const *valid, size_t n)
{
	const char *near = gem_closest_name(name, valid, n);
	size_t len;
	if (!err)
		return code;
	if (near)
		snprintf(err, GEM_ERRMAX, "unknown %s \"%.64s\" (did you mean %s?); valid: ", what, name,
			 near);
	else
		snprintf(err, GEM_ERRMAX, "unknown %s \"%.64s\"; valid: ", what, name);
	for (size_t i = 0; i < n; i++) {
		len = strlen(err);
		snprintf(err + len, GEM_ERRMAX - len, "%s%s", i ? ", " : "", valid[i]);
	}
	return code;
}
