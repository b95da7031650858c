/* t0004: the JSON field getters: each type taken, a member of another type or out of range
 * refused without touching *out, a missing one left to its default, strings with an embedded
 * NUL or too long refused. */
#include "base/jget.h"
#include "tap.h"

#include <string.h>

int main(void)
{
	json_t *o = json_loads("{\"i\": 5, \"neg\": -3, \"r\": 64.0, \"half\": 2.5, \"big\": 1e300,"
			       " \"s\": \"abc\", \"nul\": \"a\\u0000b\", \"t\": true, \"n\": null}",
			       JSON_ALLOW_NUL, NULL);
	long long v = 99;
	double d = -1;
	const char *s = "def";
	char buf[4];
	int b = -1;

	ok(o != NULL, "the test object parses");
	ok(jget_int(o, "i", 0, 10, &v) == JGET_OK && v == 5, "an integer in range: %lld", v);
	v = 99;
	ok(jget_int(o, "i", 6, 10, &v) == JGET_RANGE && v == 99, "out of range: refused, *out kept");
	ok(jget_int(o, "neg", 0, 10, &v) == JGET_RANGE && v == 99, "a negative one for a count");
	ok(jget_int(o, "r", 0, 100, &v) == JGET_TYPE && v == 99, "a real is not a JSON integer");
	ok(jget_int(o, "none", 0, 10, &v) == JGET_MISSING && v == 99, "missing: the default stays");
	ok(jget_int(NULL, "i", 0, 10, &v) == JGET_MISSING, "no object: no members");
	ok(jget_integral(o, "r", 0, 100, &v) == JGET_OK && v == 64, "an integral real: 64");
	v = 99;
	ok(jget_integral(o, "half", 0, 100, &v) == JGET_TYPE && v == 99, "2.5 is not integral");
	ok(jget_integral(o, "big", 0, 100, &v) == JGET_TYPE, "1e300: not an integer any writer meant");
	ok(jget_integral(o, "r", 0, 10, &v) == JGET_RANGE, "an integral real out of range");
	ok(jget_num(o, "half", 0, 10, &d) == JGET_OK && d == 2.5, "a real number");
	ok(jget_num(o, "i", 0, 10, &d) == JGET_OK && d == 5, "an integer is a number");
	ok(jget_num(o, "s", 0, 10, &d) == JGET_TYPE && d == 5, "a string is not a number");
	ok(jget_num(o, "big", 0, 1e6, &d) == JGET_RANGE, "a number out of range");
	ok(jget_str(o, "s", 0, &s) == JGET_OK && !strcmp(s, "abc"), "a string");
	ok(jget_str(o, "s", 3, &s) == JGET_RANGE, "3 bytes do not hold abc and its NUL");
	ok(jget_str(o, "nul", 0, &s) == JGET_RANGE, "an embedded NUL is refused");
	ok(jget_strcpy(o, "s", buf, sizeof buf) == JGET_OK && !strcmp(buf, "abc"), "copied: %s", buf);
	ok(jget_bool(o, "t", &b) == JGET_OK && b == 1, "true");
	ok(jget_bool(o, "n", &b) == JGET_TYPE && b == 1, "null is not a boolean");
	ok(jget_int_or(o, "i", 0, 10, 7) == 5 && jget_int_or(o, "s", 0, 10, 7) == 7 &&
		   jget_int_or(o, "none", 0, 10, 7) == 7,
	   "jget_int_or: the value, or the default for a bad or missing one");
	ok(!strcmp(jget_str_or(o, "s", "?"), "abc") && !strcmp(jget_str_or(o, "i", "?"), "?"),
	   "jget_str_or");
	ok(!strcmp(jget_why(JGET_MISSING), "missing") && !strcmp(jget_why(JGET_RANGE), "out of range"),
	   "the results in words");
	json_decref(o);
	return done_testing();
}
