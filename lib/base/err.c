#include "base/err.h"

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
