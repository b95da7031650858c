#include "base/jget.h"
#include "base/err.h"
#include "base/num.h"

#include <math.h>
#include <string.h>

int jget_int(const json_t *o, const char *key, long long lo, long long hi, long long *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return JGET_MISSING;
	if (!json_is_integer(v))
		return JGET_TYPE;
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return JGET_RANGE;
	*out = json_integer_value(v);
	return JGET_OK;
}

int jget_integral(const json_t *o, const char *key, long long lo, long long hi, long long *out)
{
	json_t *v = json_object_get(o, key);
	double d;
	if (!json_is_real(v))
		return jget_int(o, key, lo, hi, out);
	d = json_real_value(v);
	/* beyond 2^53 a double holds no odd integer: not a count any writer meant */
	if (d != floor(d) || fabs(d) >= 9007199254740992.0)
		return JGET_TYPE;
	if (d < (double)lo || d > (double)hi)
		return JGET_RANGE;
	*out = (long long)d;
	return JGET_OK;
}

int jget_num_nonfinite(const json_t *o, const char *key, double *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return JGET_MISSING;
	if (json_is_number(v)) {
		*out = json_number_value(v);
		return JGET_OK;
	}
	return num_nonfinite(json_string_value(v), out) == 0 ? JGET_OK : JGET_TYPE;
}

int jget_num(const json_t *o, const char *key, double lo, double hi, double *out)
{
	json_t *v = json_object_get(o, key);
	double d;
	if (!v)
		return JGET_MISSING;
	if (!json_is_number(v))
		return JGET_TYPE;
	d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return JGET_RANGE;
	*out = d;
	return JGET_OK;
}

int jget_str(const json_t *o, const char *key, size_t cap, const char **out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return JGET_MISSING;
	if (!json_is_string(v))
		return JGET_TYPE;
	/* an embedded NUL (\u0000) would cut the string short where C reads it */
	if ((cap && json_string_length(v) >= cap) || strlen(json_string_value(v)) != json_string_length(v))
		return JGET_RANGE;
	*out = json_string_value(v);
	return JGET_OK;
}

int jget_strcpy(const json_t *o, const char *key, char *buf, size_t cap)
{
	const char *s;
	int rc = jget_str(o, key, cap, &s);
	if (rc == JGET_OK)
		memcpy(buf, s, strlen(s) + 1);
	return rc;
}

int jget_bool(const json_t *o, const char *key, int *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return JGET_MISSING;
	if (!json_is_boolean(v))
		return JGET_TYPE;
	*out = json_is_true(v);
	return JGET_OK;
}

long long jget_int_or(const json_t *o, const char *key, long long lo, long long hi, long long def)
{
	long long v = def;
	jget_int(o, key, lo, hi, &v);
	return v;
}

const char *jget_str_or(const json_t *o, const char *key, const char *def)
{
	const char *s = def;
	jget_str(o, key, 0, &s);
	return s;
}

const char *jget_why(int rc)
{
	return rc == JGET_MISSING ? "missing" : rc == JGET_TYPE ? "of the wrong type"
	       : rc == JGET_RANGE ? "out of range" : "ok";
}

int jget_only(const json_t *o, const char *const *keys, size_t n, const char *what, char *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)o, key, v) {
		size_t i = 0;
		while (i < n && strcmp(key, keys[i]))
			i++;
		if (i == n) {
			gem_err_unknown(err, GEM_EUSAGE, what, key, keys, n);
			gem_errprefix(err, "%.64s: ", key);
			return GEM_EUSAGE;
		}
	}
	return 0;
}
