/* tap.h: a minimal Test Anything Protocol producer for gem's C unit tests.
 * ok(cond, fmt, ...) prints "ok N - ..." or "not ok N - ..."; done_testing() prints the plan
 * and returns the exit status (0 when every test passed); skip(why) one test, skip_all(why) the
 * whole program. Header-only, static state. */
#ifndef GEM_TAP_H
#define GEM_TAP_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_failed;

static int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		tap_failed++;
		printf("#   failed at %s:%d\n", file, line);
	}
	fflush(stdout);
	return cond;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* is_near: |got - want| <= tol, reporting both values on failure. */
#define is_near(got, want, tol, ...)                                                        \
	(ok(fabs((double)(got) - (double)(want)) <= (tol), __VA_ARGS__) ||                  \
	 (printf("#   got %.9g, want %.9g (tol %g)\n", (double)(got), (double)(want),        \
		 (double)(tol)), 0))
#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))
#define skip_all(why) (printf("1..0 # SKIP %s\n", why), exit(0))
/* skip: one test not run, as TAP's "ok N # SKIP why" (prove counts it as skipped, not passed).
 * For what the machine lacks only: a product failure is a failure. */
#define skip(why) (printf("ok %d # SKIP %s\n", ++tap_n, why), fflush(stdout))

static int done_testing(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
#endif
