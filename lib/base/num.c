#include "base/num.h"

#include <ctype.h>
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

static const char num_units[] = "KMGT";

int num_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	int shift = 0;
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || v == 0)
		return -1;
	if (*end) {
		const char *u = strchr(num_units, toupper((unsigned char)*end));
		if (u)
			shift = 10 * (int)(u - num_units + 1), end++;
		if (u && (*end == 'i' || *end == 'I') && (end[1] == 'B' || end[1] == 'b'))
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end || (shift && v > UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *num_size_text(char *buf, size_t cap, uint64_t bytes)
{
	double v = (double)bytes;
	int u = -1;
	while (v >= 1024 && u + 1 < (int)sizeof num_units - 1) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, cap, v == (double)(uint64_t)v ? "%.0f %ciB" : "%.1f %ciB", v,
			 num_units[u]);
	return buf;
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
