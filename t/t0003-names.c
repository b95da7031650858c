/* t0003: the helpers of messages: edit distance, the guess of a mistyped name, the error that
 * lists the valid names, plural endings, numbers that are not finite shown as n/a, and sizes
 * in bytes read (512M) and written (2.1 MiB). */
#include "base/num.h"
#include "base/err.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int main(void)
{
	static const char *const rules[] = {"gem", "downpour", "dynsgd", "easgd", "dcasgd", "sync", "dma"};
	const size_t n = sizeof rules / sizeof *rules;
	char err[GEM_ERRMAX], buf[32];
	const char *g;

	ok(gem_edit_distance("kitten", "sitting") == 3, "kitten/sitting: 3 edits");
	ok(gem_edit_distance("", "abc") == 3 && gem_edit_distance("abc", "") == 3, "to and from empty");
	ok(gem_edit_distance("SYNC", "sync") == 0, "letter case is ignored");
	ok(gem_edit_distance("downpour", "downpour") == 0, "a name is 0 edits from itself");
	{
		static const char *const models[] = {"cnn", "gpt", "mlp", "resnet"};
		g = gem_closest_name("mpl", models, 4);
		ok(g && !strcmp(g, "mlp"), "mpl: mlp, not gpt (%s)", g ? g : "none");
	}

	g = gem_closest_name("downpoor", rules, n);
	ok(g && !strcmp(g, "downpour"), "downpoor: downpour (%s)", g ? g : "none");
	g = gem_closest_name("dma2", rules, n);
	ok(g && !strcmp(g, "dma"), "dma2: dma (%s)", g ? g : "none");
	ok(!gem_closest_name("adam", rules, n), "adam: no guess (another word, not a typo)");
	ok(!gem_closest_name("x", rules, n), "a one-letter name is not taken for a typo");

	ok(gem_err_unknown(err, GEM_EUSAGE, "rule", "eagsd", rules, n) == GEM_EUSAGE &&
		   !strcmp(err, "unknown rule \"eagsd\" (did you mean easgd?); valid: gem, downpour, "
				"dynsgd, easgd, dcasgd, sync, dma"),
	   "the error: %s", err);
	ok(gem_err_unknown(err, GEM_EUSAGE, "rule", "adam", rules, n) == GEM_EUSAGE &&
		   !strstr(err, "did you mean") && strstr(err, "valid: gem,"),
	   "no guess, the list: %s", err);
	ok(gem_err_unknown(NULL, GEM_EUSAGE, "rule", "x", rules, n) == GEM_EUSAGE, "err may be NULL");

	ok(!strcmp(GEM_S(1), "") && !strcmp(GEM_S(0), "s") && !strcmp(GEM_S(2), "s"),
	   "1 worker, 0 workers, 2 workers");
	ok(!strcmp(num_format(buf, sizeof buf, "%.4f", 0.5), "0.5000"), "a finite number as asked");
	ok(!strcmp(num_format(buf, sizeof buf, "%.4f", NAN), "nan") &&
		   !strcmp(num_format(buf, sizeof buf, "%.4f", -NAN), "nan") &&
		   !strcmp(num_format(buf, sizeof buf, "%.0f", INFINITY), "inf") &&
		   !strcmp(num_format(buf, sizeof buf, "%g", -INFINITY), "-inf"),
	   "NaN, -NaN and the infinities: nan, nan, inf, -inf");
	{
		double v = 0;
		ok(num_nonfinite("nan", &v) == 0 && isnan(v) && num_nonfinite("-inf", &v) == 0 &&
			   v < 0 && isinf(v) && num_nonfinite("inf", &v) == 0 && v > 0 && isinf(v) &&
			   num_nonfinite("-nan", &v) < 0 && num_nonfinite("NaN", &v) < 0 &&
			   num_nonfinite("1", &v) < 0 && num_nonfinite(NULL, &v) < 0,
		   "nan, inf and -inf read back; -nan, NaN and numbers are not that spelling");
	}
	{
		uint64_t b = 0;
		ok(num_size("65536", &b) == 0 && b == 65536, "a size without suffix is bytes");
		ok(num_size("512M", &b) == 0 && b == 512ULL << 20 && num_size("2g", &b) == 0 &&
			   b == 2ULL << 30 && num_size("2GiB", &b) == 0 && b == 2ULL << 30 &&
			   num_size("3KB", &b) == 0 && b == 3072 && num_size("1T", &b) == 0 &&
			   b == 1ULL << 40 && num_size("7B", &b) == 0 && b == 7,
		   "K, M, G, T are powers of 1024, either case, B or iB may follow");
		ok(num_size("0", &b) < 0 && num_size("-1", &b) < 0 && num_size("1.5G", &b) < 0 &&
			   num_size("12X", &b) < 0 && num_size("", &b) < 0 && num_size(NULL, &b) < 0 &&
			   num_size("2Gi", &b) < 0 && num_size("2GBB", &b) < 0 &&
			   num_size("16777216T", &b) < 0 && num_size("99999999999999999999", &b) < 0,
		   "0, negatives, fractions, junk and overflows are refused");
		ok(num_size("16777215T", &b) == 0 && b == 16777215ULL << 40, "the largest in T");
		ok(!strcmp(num_size_text(buf, sizeof buf, 1000), "1000 B") &&
			   !strcmp(num_size_text(buf, sizeof buf, 17392), "17.0 KiB") &&
			   !strcmp(num_size_text(buf, sizeof buf, 64ULL << 20), "64 MiB") &&
			   !strcmp(num_size_text(buf, sizeof buf, 2202010), "2.1 MiB") &&
			   !strcmp(num_size_text(buf, sizeof buf, 3ULL << 40), "3 TiB"),
		   "sizes in words: %s", num_size_text(buf, sizeof buf, 2202010));
	}
	return done_testing();
}
