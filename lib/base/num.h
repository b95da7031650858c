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
/* A size in bytes: a whole number with an optional suffix K, M, G or T (powers of 1024, either
 * case, "B" or "iB" may follow: 512M, 2GiB); at least 1, overflow → -1. */
int num_size(const char *s, uint64_t *out);

/* v as fmt (one double conversion) writes it into buf; a v that is not finite is spelled nan,
 * inf or -inf, the one spelling of every gem output (never the C library's "-nan"). Returns
 * buf. */
const char *num_format(char *buf, size_t cap, const char *fmt, double v);
/* A size in bytes in words, "512 B", "2.1 MiB", "64 GiB" (the unit of powers of 1024 that leaves
 * under 1024 of it, one decimal unless whole). Returns buf. */
const char *num_size_text(char *buf, size_t cap, uint64_t bytes);
/* That spelling of a value that is not finite read back (nan, inf, -inf, and nothing else). */
int num_nonfinite(const char *s, double *out);
/* v as a JSON value into buf: the number (9 significant digits, a float's), or, not finite,
 * its spelling as a JSON string ("nan"), as JSON has no such number. Returns buf. */
const char *num_json(char *buf, size_t cap, double v);
#endif
