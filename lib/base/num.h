/* num: numbers as text. Strict parsing of a whole string (what every option and field of text
 * goes through) and formatting that never prints "-nan". Parsers return 0 or -1. */
#ifndef GEM_NUM_H
#define GEM_NUM_H
#include <stddef.h>
#include <stdint.h>

/* Parse a whole string as a number within [min, max]; trailing junk, NaN, overflow → -1. */
int num_double(const char *s, double min, double max, double *out);
int num_float(const char *s, double min, double max, float *out);
int num_long(const char *s, long min, long max, long *out);
int num_u64(const char *s, uint64_t *out);

/* v as fmt (one double conversion) writes it into buf, or "n/a" when v is not finite (a loss
 * before the first step): no "-nan" in a message. Returns buf. */
const char *num_format(char *buf, size_t cap, const char *fmt, double v);
#endif
