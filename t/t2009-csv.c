/* t2009: CSV tables load (a BOM, CRLF, quotes, spaces, blank lines, booleans, gzip), and every
 * damaged one (empty cells, NaN, text, labels that are no integer in [0, 65535], rows of the
 * wrong length, a missing or doubled label column, other separators, a pandas index, quotes
 * left open, CR line ends, NUL bytes) is refused with its line and column named. */
#include "nn/csv.h"
#include "data-test.h"

static void good(const char *name, const char *label)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	int rc = csv_load(fx(name), label, &s, err);
	ok(rc == 0 && s.n == N_SAMPLES && s.ndim == 1 && s.dim == 3 && s.shape[0] == 3 && floats_ok(&s) &&
		   labels_ok(&s),
	   "%s: 12 rows of 3 features and a label, as written (%s)", name, err);
	samples_free(&s);
}

/* name fails to load with each string of the message (the file's path is always one). */
#define refused(name, ...)                                                                    \
	do {                                                                                  \
		char err[GEM_ERRMAX] = "";                                                    \
		struct samples s;                                                             \
		int rc = csv_load(fx(name), "label", &s, err);                                \
		ok(bad(rc, err, fx(name), __VA_ARGS__) && !s.x && !s.y, "%s refused: %s", name, err); \
	} while (0)

int main(void)
{
	char err[GEM_ERRMAX] = "";
	struct samples s;
	fixtures("csv");
	good("good.csv", "label");
	good("bom-crlf.csv", "label");
	good("good.csv.gz", "label");
	ok(csv_load(fx("quoted.csv"), "label", &s, err) == 0 && s.dim == 3 && floats_ok(&s) && labels_ok(&s),
	   "quoted names and cells, spaces around a cell, a blank line (%s)", s.x ? "" : err);
	samples_free(&s);
	ok(csv_load(fx("bools.csv"), "label", &s, err) == 0 && s.dim == 1 && ((float *)s.x)[0] == 0 &&
		   ((float *)s.x)[1] == 1 && labels_ok(&s),
	   "True/False are 1/0; a label 3.0 is 3 (%s)", s.x ? "" : err);
	samples_free(&s);
	ok(bad(csv_load(fx("good.csv"), "b", &s, err), err, "CSV line 2, column 'b': label -0.125"),
	   "a column of fractions is no label column (%s)", err);
	ok(bad(csv_load(fx("good.csv"), "lable", &s, err), err, "did you mean label?"),
	   "a label column misspelt: did you mean (%s)", err);

	refused("empty-cell.csv", "CSV line 3, column 'a': an empty cell", "dropna");
	refused("nan.csv", "CSV line 3, column 'a': 'nan' is not a number");
	refused("text.csv", "CSV line 3, column 'a': 'abc' is not a number");
	refused("label-float.csv", "CSV line 3, column 'label': label 1.5", "integers in [0, 65535]");
	refused("label-neg.csv", "CSV line 3, column 'label': label -1", "integers in [0, 65535]");
	refused("label-big.csv", "label 65536", "integers in [0, 65535]");
	refused("label-name.csv", "CSV line 2, column 'label': label 'setosa' is not a number", "cat.codes");
	refused("short-row.csv", "CSV line 3: 2 fields, but the header has 3");
	refused("long-row.csv", "CSV line 2: 4 fields, but the header has 3");
	refused("no-label.csv", "CSV line 1", "unknown label column \"label\"", "a, b, c");
	refused("semicolon.csv", "separated by ';' or tabs");
	refused("index.csv", "the first column has no name", "index=False");
	refused("quote-open.csv", "CSV line 2: a quoted field does not end on its line");
	refused("quote-junk.csv", "CSV line 2: text after a quoted field");
	refused("two-labels.csv", "two columns named 'label'");
	refused("only-label.csv", "the label column and no feature");
	refused("no-rows.csv", "a CSV header and no data row");
	refused("cr-only.csv", "CR alone");
	refused("nul.csv", "NUL byte");
	refused("empty.csv", "empty");
	refused("no-such.csv", "No such file");
	fixtures_remove();
	return done_testing();
}
