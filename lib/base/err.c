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

size_t gem_edit_distance(const char *a, const char *b)
{
	/* Levenshtein, one row, case-insensitive; names longer than 63 bytes are cut there */
	size_t row[64], la = strnlen(a, 63), lb = strnlen(b, 63);
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
			size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
			row[j] = sub < best ? sub : best;
			diag = up;
		}
	}
	return row[lb];
}

const char *gem_closest_name(const char *name, const char *const *valid, size_t n)
{
	const char *best = NULL;
	size_t bestd = (size_t)-1, len = strlen(name);
	for (size_t i = 0; i < n; i++) {
		size_t d = gem_edit_distance(name, valid[i]);
		if (d < bestd)
			bestd = d, best = valid[i];
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
