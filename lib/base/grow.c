#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"

int grow_array(void *p, size_t *cap, size_t need, size_t size, size_t first)
{
	void **pp = p, *q;
	size_t c = *cap ? *cap : first ? first : 1;
	if (need <= *cap && *pp)
		return 0;
	if (size == 0 || need > SIZE_MAX / size)
		return GEM_ENOMEM;
	while (c < need)
		c = c > SIZE_MAX / 2 / size ? need : c * 2;
	if (!(q = realloc(*pp, c * size)))
		return GEM_ENOMEM;
	*pp = q;
	*cap = c;
	return 0;
}
