/* jget: the one family of typed getters for the members of a JSON object (jansson), used by
 * every reader of JSON in libgem: run.json, log lines, message headers, model specs. A getter
 * checks the member's type and range before it writes *out, so a hostile file or peer cannot
 * put a value out of range into a narrower C type. */
#ifndef GEM_JGET_H
#define GEM_JGET_H
#include <jansson.h>
#include <stddef.h>

/* What a getter found. *out is written only for JGET_OK, so a default set before the call
 * stays when the member is missing. o that is not an object has no members. */
enum {
	JGET_OK = 0,
	JGET_MISSING = 1, /* no such member */
	JGET_TYPE = -1,   /* a member of another JSON type */
	JGET_RANGE = -2,  /* of the type, out of the range asked */
};

/* A JSON integer in [lo, hi]. */
int jget_int(const json_t *o, const char *key, long long lo, long long hi, long long *out);
/* The same, and a real with an integral value (64.0) is taken too: text written by other tools. */
int jget_integral(const json_t *o, const char *key, long long lo, long long hi, long long *out);
/* A JSON number (integer or real) in [lo, hi]. */
int jget_num(const json_t *o, const char *key, double lo, double hi, double *out);
/* A JSON number, or a value JSON has no number for, as num_format spells it, in a string:
 * "nan", "inf" or "-inf" (a diverged loss); another string is JGET_TYPE. */
int jget_num_nonfinite(const json_t *o, const char *key, double *out);
/* A JSON string without an embedded NUL, shorter than cap bytes (cap 0: any length); *out
 * points into o. */
int jget_str(const json_t *o, const char *key, size_t cap, const char **out);
/* The same, copied into buf (cap bytes, the NUL included). */
int jget_strcpy(const json_t *o, const char *key, char *buf, size_t cap);
/* true or false, as 1 or 0. */
int jget_bool(const json_t *o, const char *key, int *out);

/* The member, or def when it is missing or not what is asked: for fields where a bad value
 * means the same as none. */
long long jget_int_or(const json_t *o, const char *key, long long lo, long long hi, long long def);
const char *jget_str_or(const json_t *o, const char *key, const char *def);

/* 0 when every member of o is one of keys[0..n); else GEM_EUSAGE, err saying "KEY: unknown
 * field of WHAT" with a guess (gem_err_unknown): a spec's fields are refused, not ignored. */
int jget_only(const json_t *o, const char *const *keys, size_t n, const char *what, char *err);

/* A getter's result in words for a message: "missing", "of the wrong type", "out of range". */
const char *jget_why(int rc);
#endif
