/* err: the error convention of libgem. A function that can fail takes `char *err` (room for
 * GEM_ERRMAX bytes, may be NULL) and returns 0 on success or a negative code after writing a
 * one-line message the caller can print. Library code never prints and never exits. */
#ifndef GEM_ERR_H
#define GEM_ERR_H

#include <stddef.h>

#define GEM_ERRMAX 512

enum {
	GEM_EFAIL = -1,  /* generic failure (I/O, corrupt data) */
	GEM_EUSAGE = -2, /* bad input from the user: a spec, an option value */
	GEM_ENOMEM = -3,
};

/* Write a printf-style message into err (if non-NULL) and return code. */
int gem_errf(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix an existing message in err with printf-style context ("file.json: " + old). */
void gem_errprefix(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Names: the edit distance of two (insertions, deletions, substitutions; letter case ignored);
 * the valid name a mistyped one was most likely meant to be (NULL when none is within two
 * edits); and the error for an unknown name: 'unknown WHAT "NAME" (did you mean X?); valid:
 * A, B, C', returning code. Every "unknown model/rule/codec/layer" message is made here. */
size_t gem_edit_distance(const char *a, const char *b);
/* The plural ending of a count in a message: "%d worker%s", n, GEM_S(n) gives "1 worker". */
#define GEM_S(n) ((n) == 1 ? "" : "s")
const char *gem_closest_name(const char *name, const char *const *valid, size_t n);
int gem_err_unknown(char *err, int code, const char *what, const char *name,
		    const char *const *valid, size_t n);
#endif
