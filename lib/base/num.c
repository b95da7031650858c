#include "base/num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int num_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int num_float(const char *s, double min, double max, float *out)
{
	double v;
	if (num_double(s, min, max, &v))
		return -1;
	*out = (float)v;
	return 0;
}

int num_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int num_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

const char *num_format(char *buf, size_t cap, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
	return buf;
}

const char *num_json(char *buf, size_t cap, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, "%.9g", v);
	else
		snprintf(buf, cap, "\"%s\"", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
	return buf;
}

int num_nonfinite(const char *s, double *out)
{
	if (!s || (strcmp(s, "nan") && strcmp(s, "inf") && strcmp(s, "-inf")))
		return -1;
	*out = !strcmp(s, "nan") ? NAN : *s == '-' ? -INFINITY : INFINITY;
	return 0;
}
