#include "run/slice.h"

#include <stdlib.h>
#include <string.h>

struct slice slice_of(size_t n, int i, int k)
{
	struct slice s = {.i = i, .k = k, .off = 0, .len = n};
	if (k > 0)
		layout_slice(n, i, k, &s.off, &s.len);
	return s;
}

int slice_parse(const char *text, int *i, int *k)
{
	char *end;
	long a, b;
	if (!text || *text < '0' || *text > '9')
		return -1;
	a = strtol(text, &end, 10);
	if (*end != '/' || end[1] < '0' || end[1] > '9')
		return -1;
	b = strtol(end + 1, &end, 10);
	if (*end || b < 1 || b > SLICE_MAX || a < 0 || a >= b)
		return -1;
	*i = (int)a;
	*k = (int)b;
	return 0;
}

void slice_layout(const struct layout *full, const struct slice *s, struct layout *out)
{
	size_t lo = s->off, hi = s->off + s->len;
	memset(out, 0, sizeof *out);
	for (int t = 0; t < full->ntensors; t++) {
		const struct layout_tensor *ft = &full->t[t];
		size_t a = ft->offset > lo ? ft->offset : lo;
		size_t b = ft->offset + ft->size < hi ? ft->offset + ft->size : hi;
		struct layout_tensor *o;
		if (a >= b)
			continue;
		o = &out->t[out->ntensors++];
		*o = *ft;
		o->offset = a - lo;
		o->size = b - a;
		if (o->size != ft->size) {
			o->ndim = 1;
			memset(o->shape, 0, sizeof o->shape);
			o->shape[0] = (int)o->size;
		}
	}
	out->total = s->len;
}
