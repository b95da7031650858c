#include "nn/csv.h"
#include "base/err.h"
#include "base/num.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text being parsed, and where in it (for errors). */
struct csv {
	const char *what;
	char *err;
	long line;     /* 1-based, of the line being read */
	char **names;  /* the header's columns */
	int ncols, label;
};

static int blank(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	return p == end;
}

/* The next field of the line at *p (it ends at end), unquoted and NUL-terminated in place;
 * *p moves past its comma, *last says it was the line's last. NULL on a malformed field. */
static char *next_field(struct csv *c, char **p, char *end, int *last)
{
	char *q = *p, *r, *w;
	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	if (q < end && *q == '"') {
		for (w = q, r = q + 1;; *w++ = *r++) {
			if (r >= end) {
				gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld: a quoted field does not end on its "
					 "line (gem reads no line breaks inside a field)", c->what, c->line);
				return NULL;
			}
			if (*r == '"' && (r + 1 >= end || r[1] != '"'))
				break;
			if (*r == '"')
				r++; /* "" is one quote */
		}
		for (r++; r < end && (*r == ' ' || *r == '\t');)
			r++;
		if (r < end && *r != ',') {
			gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld: text after a quoted field", c->what,
				 c->line);
			return NULL;
		}
	} else {
		for (r = q; r < end && *r != ',';)
			r++;
		for (w = r; w > q && (w[-1] == ' ' || w[-1] == '\t');)
			w--;
	}
	*w = 0;
	*last = r >= end;
	*p = r + 1;
	return q;
}

static const char *col_name(const struct csv *c, int j, char *buf, size_t cap)
{
	if (c->names && c->names[j][0])
		snprintf(buf, cap, "'%.60s'", c->names[j]);
	else
		snprintf(buf, cap, "%d", j + 1);
	return buf;
}

/* The header line [p, end): the column names, the label's column. */
static int parse_header(struct csv *c, char *p, char *end, const char *label)
{
	int last = 0, n = 1;
	for (char *q = p; q < end; q++)
		n += *q == ',';
	if (n > SAMPLES_MAX_DIM + 1)
		return gem_errf(c->err, GEM_EFAIL, "%s: a CSV header of %d columns (at most %d)", c->what, n,
				SAMPLES_MAX_DIM + 1);
	if (!(c->names = calloc((size_t)n, sizeof *c->names)))
		return gem_errf(c->err, GEM_ENOMEM, "%s: out of memory", c->what);
	c->label = -1;
	for (c->ncols = 0; !last; c->ncols++) {
		char *f = next_field(c, &p, end, &last);
		if (!f)
			return GEM_EFAIL;
		c->names[c->ncols] = f;
		if (!strcmp(f, label)) {
			if (c->label >= 0)
				return gem_errf(c->err, GEM_EFAIL, "%s: CSV line 1: two columns named '%s'",
						c->what, label);
			c->label = c->ncols;
		}
	}
	if (!c->names[0][0])
		return gem_errf(c->err, GEM_EFAIL, "%s: CSV line 1: the first column has no name (a "
				"pandas index? write the file with df.to_csv(path, index=False))", c->what);
	if (c->label < 0) {
		int rc = gem_err_unknown(c->err, GEM_EUSAGE, "label column", label,
					 (const char *const *)c->names, (size_t)c->ncols);
		gem_errprefix(c->err, "%s: CSV line 1: ", c->what);
		if (c->ncols == 1 && (strchr(c->names[0], ';') || strchr(c->names[0], '\t')))
			gem_errf(c->err, rc, "%s: CSV line 1: one column: is the file separated by ';' or "
				 "tabs? (gem reads commas)", c->what);
		return rc;
	}
	if (c->ncols < 2)
		return gem_errf(c->err, GEM_EFAIL, "%s: CSV line 1: the label column and no feature",
				c->what);
	return 0;
}

/* The label in cell f of column j. */
static int parse_label(struct csv *c, const char *f, int j, uint16_t *y)
{
	char col[80];
	double v;
	if (num_double(f, -1e300, 1e300, &v) < 0)
		return gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld, column %s: label '%.40s' is not a "
				"number (map class names to 0, 1, ... first, e.g. df[c] = "
				"df[c].astype('category').cat.codes)", c->what, c->line,
				col_name(c, j, col, sizeof col), f);
	if (v != floor(v) || v < 0 || v > ELEM_MAX_LABEL)
		return gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld, column %s: label %.40s (labels are "
				"integers in [0, %d])", c->what, c->line, col_name(c, j, col, sizeof col),
				f, ELEM_MAX_LABEL);
	*y = (uint16_t)v;
	return 0;
}

/* A cell of at most 7 digits, signed or not (pixels, counts, one-hot columns: most cells of
 * most tables), as a float, exactly and without strtod's cost; -1 for any other cell. */
static int small_int(const char *f, float *x)
{
	const char *p = f + (*f == '-');
	long v = 0;
	int n = 0;
	for (; *p >= '0' && *p <= '9' && n < 8; p++, n++)
		v = v * 10 + (*p - '0');
	if (*p || !n || n > 7)
		return -1;
	*x = (float)(*f == '-' ? -v : v);
	return 0;
}

/* The feature in cell f of column j. */
static int parse_feature(struct csv *c, const char *f, int j, float *x)
{
	char col[80];
	if (!strcmp(f, "True") || !strcmp(f, "true") || !strcmp(f, "False") || !strcmp(f, "false")) {
		*x = f[0] == 'T' || f[0] == 't';
		return 0;
	}
	if (small_int(f, x) == 0 || num_float(f, -FLT_MAX, FLT_MAX, x) == 0)
		return 0;
	return gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld, column %s: %s%.40s%s (features are finite "
			"numbers; fill or drop missing values first, e.g. df.dropna())", c->what, c->line,
			col_name(c, j, col, sizeof col), *f ? "'" : "an empty cell", f, *f ? "' is not a number" : "");
}

/* One data row [p, end) into x (D features) and y. */
static int parse_row(struct csv *c, char *p, char *end, float *x, uint16_t *y)
{
	int last = 0, j, rc;
	for (j = 0; !last; j++) {
		char *f = next_field(c, &p, end, &last);
		if (!f)
			return GEM_EFAIL;
		if (j >= c->ncols)
			continue; /* counted below */
		if (j == c->label)
			rc = parse_label(c, f, j, y);
		else
			rc = parse_feature(c, f, j, x++);
		if (rc < 0)
			return rc;
	}
	if (j != c->ncols)
		return gem_errf(c->err, GEM_EFAIL, "%s: CSV line %ld: %d field%s, but the header has %d",
				c->what, c->line, j, GEM_S(j), c->ncols);
	return 0;
}

/* The rows after the header, from p to end, into s (grown as rows arrive: a file that is short
 * of the fields its header promises never allocates for them). */
static int parse_rows(struct csv *c, char *p, char *end, struct samples *s)
{
	size_t d = (size_t)c->ncols - 1, cap = 0, n = 0;
	float *x = NULL;
	uint16_t *y = NULL;
	for (char *le, *e; p < end; p = le + 1) {
		c->line++;
		le = memchr(p, '\n', (size_t)(end - p));
		le = e = le ? le : end;
		if (blank(p, le))
			continue;
		if (e[-1] == '\r')
			e--; /* CRLF */
		if (n == cap) {
			/* no more rows than the text left can hold: each has d commas at least */
			size_t nc = cap ? cap * 2 : 16, most = n + (size_t)(end - p) / d + 1;
			float *nx;
			uint16_t *ny;
			nc = nc < most ? nc : most;
			if (n >= SAMPLES_MAX_N) {
				free(x);
				free(y);
				return gem_errf(c->err, GEM_EFAIL, "%s: more than %d CSV rows", c->what, SAMPLES_MAX_N);
			}
			nx = realloc(x, nc * d * sizeof *x);
			x = nx ? nx : x;
			ny = nx ? realloc(y, nc * sizeof *y) : NULL;
			y = ny ? ny : y;
			if (!nx || !ny) {
				free(x);
				free(y);
				return gem_errf(c->err, GEM_ENOMEM, "%s: out of memory", c->what);
			}
			cap = nc;
		}
		if (parse_row(c, p, e, x + n * d, y + n) < 0) {
			free(x);
			free(y);
			return GEM_EFAIL;
		}
		n++;
	}
	if (!n) {
		free(x);
		free(y);
		return gem_errf(c->err, GEM_EFAIL, "%s: a CSV header and no data row", c->what);
	}
	s->x = x;
	s->y = y;
	s->n = n;
	s->type = SAMPLES_F32;
	s->ndim = 1;
	s->shape[0] = (int)d;
	s->dim = d;
	samples_count_classes(s);
	return 0;
}

int csv_parse(char *buf, size_t len, const char *what, const char *label, struct samples *s,
	      char *err)
{
	struct csv c = {.what = what, .err = err};
	char *p = buf, *end = buf + len, *le;
	size_t hlen;
	int rc;
	memset(s, 0, sizeof *s);
	if (len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
		p += 3;
	if (memchr(p, 0, (size_t)(end - p)))
		return gem_errf(err, GEM_EFAIL, "%s: a NUL byte: not a text (CSV) file", what);
	while (p < end) { /* blank lines before the header */
		le = memchr(p, '\n', (size_t)(end - p));
		le = le ? le : end;
		c.line++;
		if (!blank(p, le))
			break;
		p = le + 1;
	}
	if (p >= end)
		return gem_errf(err, GEM_EFAIL, "%s: empty (a CSV file starts with a header line)", what);
	le = memchr(p, '\n', (size_t)(end - p));
	hlen = (size_t)((le ? le : end) - p);
	if (p[hlen - 1] == '\r')
		hlen--; /* CRLF */
	if (memchr(p, '\r', hlen)) {
		rc = gem_errf(err, GEM_EFAIL, "%s: CSV lines end in CR alone (old Mac text): convert it, "
			      "e.g. tr '\\r' '\\n'", what);
	} else if ((rc = parse_header(&c, p, p + hlen, label)) == 0) {
		rc = le ? parse_rows(&c, le + 1, end, s) : gem_errf(err, GEM_EFAIL, "%s: a CSV header and "
								   "no data row", what);
	}
	free(c.names);
	return rc;
}

int csv_load(const char *path, const char *label, struct samples *s, char *err)
{
	uint8_t *buf;
	size_t len;
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = samples_read_file(path, SAMPLES_MAX_BYTES, &buf, &len, err)) < 0)
		return rc;
	rc = csv_parse((char *)buf, len, path, label, s, err);
	free(buf);
	return rc;
}
