#include "nn/elem.h"

#include <math.h>
#include <string.h>

/* Feature bytes kept as they are must mean the same on this host as in the file. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gem's array files need a little-endian host");

const char *elem_name(struct elem e)
{
	static const char *const u[] = {[1] = "uint8", [2] = "uint16", [4] = "uint32", [8] = "uint64"};
	static const char *const i[] = {[1] = "int8", [2] = "int16", [4] = "int32", [8] = "int64"};
	static const char *const f[] = {[2] = "float16", [4] = "float32", [8] = "float64"};
	const char *s = NULL;
	if (e.size == 1 || e.size == 2 || e.size == 4 || e.size == 8)
		s = e.kind == 'u' ? u[e.size] : e.kind == 'i' ? i[e.size] : e.kind == 'f' ? f[e.size]
		    : e.kind == 'b' && e.size == 2 ? "bfloat16" : NULL;
	return s ? s : "an unknown type";
}

int elem_native(struct elem e)
{
	return (e.kind == 'u' && e.size == 1) || (e.kind == 'f' && e.size == 4 && !e.big);
}

/* The size bytes at p as an unsigned integer (a float's bits), read in the file's byte order. */
static uint64_t load(const unsigned char *p, int size, int big)
{
	uint64_t v = 0;
	for (int b = 0; b < size; b++)
		v |= (uint64_t)p[big ? size - 1 - b : b] << (8 * b);
	return v;
}

static float half_to_f32(uint32_t h)
{
	uint32_t sign = (h & 0x8000u) << 16, ex = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;
	if (ex == 0) /* zero or subnormal: man · 2^-24, exact in a float */
		return (sign ? -1.0f : 1.0f) * (float)man * 0x1p-24f;
	bits = ex == 31 ? sign | 0x7f800000u | man << 13 : sign | (ex + 112) << 23 | man << 13;
	memcpy(&f, &bits, 4);
	return f;
}

/* The element at p as a double (every float32, and integers up to 2^53, exactly). */
static double value(struct elem e, const unsigned char *p)
{
	uint64_t v = load(p, e.size, e.big);
	uint32_t b32;
	float f;
	double d;
	switch (e.kind) {
	case 'u': return (double)v;
	case 'i': /* sign-extend from size bytes */
		if (e.size < 8 && v >> (8 * e.size - 1))
			v |= ~(uint64_t)0 << (8 * e.size);
		return (double)(int64_t)v;
	case 'b':
		b32 = (uint32_t)v << 16;
		memcpy(&f, &b32, 4);
		return f;
	default:
		if (e.size == 2)
			return half_to_f32((uint32_t)v);
		if (e.size == 4) {
			b32 = (uint32_t)v;
			memcpy(&f, &b32, 4);
			return f;
		}
		memcpy(&d, &v, 8);
		return d;
	}
}

int elem_to_f32(struct elem e, const void *src, size_t n, float *dst, size_t *bad)
{
	const unsigned char *p = src;
	if (elem_native(e) && e.kind == 'f') {
		/* the common case: copy, then one check of the exponents (all ones: NaN or ±∞) in a
		 * loop the compiler vectorises; the loop below finds which one */
		uint32_t inf = 0;
		const uint32_t *bits;
		if ((const void *)dst != src)
			memcpy(dst, src, n * 4);
		bits = (const uint32_t *)(const void *)dst;
		for (size_t k = 0; k < n; k++)
			inf |= (bits[k] & 0x7f800000u) == 0x7f800000u;
		if (!inf)
			return 0;
	}
	for (size_t k = 0; k < n; k++) {
		double v = value(e, p + k * (size_t)e.size);
		dst[k] = (float)v;
		if (!isfinite(dst[k])) {
			*bad = k;
			return -1;
		}
	}
	return 0;
}

int elem_to_labels(struct elem e, const void *src, size_t n, uint16_t *dst, size_t *bad)
{
	const unsigned char *p = src;
	for (size_t k = 0; k < n; k++) {
		uint64_t v = load(p + k * (size_t)e.size, e.size, e.big);
		int neg = e.kind == 'i' && v >> (8 * e.size - 1);
		if (neg || v > ELEM_MAX_LABEL) {
			*bad = k;
			return -1;
		}
		dst[k] = (uint16_t)v;
	}
	return 0;
}
