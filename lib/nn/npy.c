#include "nn/npy.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The header dict, scanned in place: p moves through [p, end). */
struct scan {
	const char *start, *p, *end;
	const char *what;
	char *err;
};

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int bad(struct scan *s, const char *expected)
{
	return gem_errf(s->err, GEM_EFAIL, "%s: .npy header: %s at byte %zu of the dict", s->what,
			expected, (size_t)(s->p - s->start));
}

/* A quoted string ('...' or "...", no escapes: no key or dtype has any) → *str, *len. */
static int scan_str(struct scan *s, const char **str, size_t *len)
{
	char q;
	const char *start;
	skip_ws(s);
	if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
		return bad(s, "a quoted string expected");
	q = *s->p++;
	start = s->p;
	while (s->p < s->end && *s->p != q && *s->p != '\\')
		s->p++;
	if (s->p >= s->end || *s->p != q)
		return bad(s, "an unterminated string");
	*str = start;
	*len = (size_t)(s->p++ - start);
	return 0;
}

static int scan_char(struct scan *s, char c)
{
	skip_ws(s);
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return 1;
	}
	return 0;
}

static int scan_word(struct scan *s, const char *w)
{
	size_t n = strlen(w);
	skip_ws(s);
	if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, w, n)) {
		s->p += n;
		return 1;
	}
	return 0;
}

/* (d0, d1, ...) with an optional trailing comma; Python 2's long suffix L accepted. */
static int scan_shape(struct scan *s, struct npy_array *a)
{
	if (!scan_char(s, '('))
		return bad(s, "a shape tuple expected");
	a->ndim = 0;
	while (!scan_char(s, ')')) {
		uint64_t v = 0;
		int digits = 0;
		skip_ws(s);
		if (a->ndim == NPY_MAX_DIMS)
			return gem_errf(s->err, GEM_EFAIL, "%s: more than %d dimensions", s->what,
					NPY_MAX_DIMS);
		for (; s->p < s->end && *s->p >= '0' && *s->p <= '9'; s->p++, digits++) {
			if (v > (UINT64_MAX - 9) / 10)
				return bad(s, "a dimension too large");
			v = v * 10 + (uint64_t)(*s->p - '0');
		}
		if (!digits)
			return bad(s, "a non-negative integer expected in the shape");
		if (s->p < s->end && *s->p == 'L')
			s->p++;
		a->dims[a->ndim++] = v;
		if (!scan_char(s, ',')) {
			if (!scan_char(s, ')'))
				return bad(s, "',' or ')' expected in the shape");
			break;
		}
	}
	return 0;
}

/* c is one of the characters of set (never its terminating NUL). */
static int one_of(const char *set, char c)
{
	return c && strchr(set, c);
}

/* A dtype string: byte order, kind, size ("<f4", "|u1", ">i8", "|b1"). */
static int parse_descr(struct scan *s, const char *d, size_t n, struct npy_array *a)
{
	char kind = n >= 2 ? d[1] : 0, order = n ? d[0] : 0;
	int size = n == 3 && d[2] >= '1' && d[2] <= '8' ? d[2] - '0' : 0;
	const char *hint = NULL;
	if (n == 3 && order == '|' && kind == 'b' && size == 1)
		kind = 'u'; /* booleans as 0 and 1 */
	if (one_of("OSUaVMmc", kind))
		hint = kind == 'O'   ? "Python objects (pickled); save an array of numbers"
		       : kind == 'c' ? "complex numbers"
		       : kind == 'M' || kind == 'm' ? "dates or times"
		       : kind == 'V' ? "records (a structured dtype); save one array per field"
				     : "strings; map them to integers first (np.unique(y, return_inverse=True))";
	if (hint)
		return gem_errf(s->err, GEM_EFAIL, "%s: the array holds %s (dtype '%.*s')", s->what, hint,
				(int)n, d);
	if (!size || !one_of("<>|=", order) || !one_of("uif", kind) ||
	    (size != 1 && size != 2 && size != 4 && size != 8) || (kind == 'f' && size == 1))
		return gem_errf(s->err, GEM_EFAIL, "%s: dtype '%.*s' (gem reads integers and floats: "
				"'|u1', '<f4', '<f8', '<i8', ...)", s->what, (int)n, d);
	a->e = (struct elem){.kind = kind, .size = size, .big = order == '>'};
	return 0;
}

/* The dict {'descr': ..., 'fortran_order': ..., 'shape': (...), } at [p, end). */
static int parse_dict(struct scan *s, struct npy_array *a)
{
	int seen = 0, fortran = 0, rc, big_dims = 0;
	if (!scan_char(s, '{'))
		return bad(s, "'{' expected");
	while (!scan_char(s, '}')) {
		const char *k, *v;
		size_t kn, vn;
		if ((rc = scan_str(s, &k, &kn)) < 0)
			return rc;
		if (!scan_char(s, ':'))
			return bad(s, "':' expected");
		if (kn == 5 && !memcmp(k, "descr", 5) && !(seen & 1)) {
			skip_ws(s);
			if (s->p < s->end && *s->p == '[')
				return gem_errf(s->err, GEM_EFAIL, "%s: the array holds records (a "
						"structured dtype); save one array per field", s->what);
			if ((rc = scan_str(s, &v, &vn)) < 0 || (rc = parse_descr(s, v, vn, a)) < 0)
				return rc;
			seen |= 1;
		} else if (kn == 13 && !memcmp(k, "fortran_order", 13) && !(seen & 2)) {
			if (scan_word(s, "True"))
				fortran = 1;
			else if (!scan_word(s, "False"))
				return bad(s, "True or False expected");
			seen |= 2;
		} else if (kn == 5 && !memcmp(k, "shape", 5) && !(seen & 4)) {
			if ((rc = scan_shape(s, a)) < 0)
				return rc;
			seen |= 4;
		} else {
			return gem_errf(s->err, GEM_EFAIL, "%s: .npy header: key '%.*s' unknown or repeated "
					"(want descr, fortran_order, shape)", s->what, (int)kn, k);
		}
		if (!scan_char(s, ',')) {
			if (!scan_char(s, '}'))
				return bad(s, "',' or '}' expected");
			break;
		}
	}
	if (seen != 7)
		return gem_errf(s->err, GEM_EFAIL, "%s: .npy header: no '%s'", s->what,
				!(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
	skip_ws(s);
	if (s->p != s->end)
		return bad(s, "junk after the dict");
	for (int d = 0; d < a->ndim; d++)
		big_dims += a->dims[d] > 1;
	if (fortran && big_dims > 1)
		return gem_errf(s->err, GEM_EFAIL, "%s: the array is in Fortran order; gem reads C order "
				"(save np.ascontiguousarray(x))", s->what);
	return 0;
}

int npy_parse(const uint8_t *buf, size_t len, const char *what, struct npy_array *a, char *err)
{
	size_t off, hlen, count = 1, avail;
	struct scan s = {.what = what, .err = err};
	int rc;
	memset(a, 0, sizeof *a);
	if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
		return gem_errf(err, GEM_EFAIL, "%s: not a .npy file (%s)", what,
				len < 10 && !memcmp(buf, "\x93NUMPY", len < 6 ? len : 6) ? "truncated header"
											  : "no \\x93NUMPY magic");
	if (buf[6] < 1 || buf[6] > 3 || buf[7] != 0)
		return gem_errf(err, GEM_EFAIL, "%s: .npy format version %d.%d (gem reads 1.0, 2.0, 3.0)",
				what, buf[6], buf[7]);
	if (buf[6] == 1) {
		off = 10;
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
	} else {
		if (len < 12)
			return gem_errf(err, GEM_EFAIL, "%s: truncated .npy header", what);
		off = 12;
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
	}
	if (hlen > len - off)
		return gem_errf(err, GEM_EFAIL, "%s: the .npy header claims %zu bytes, the file has %zu",
				what, hlen, len - off);
	s.start = s.p = (const char *)buf + off;
	s.end = s.p + hlen;
	if ((rc = parse_dict(&s, a)) < 0)
		return rc;
	avail = len - off - hlen;
	for (int d = 0; d < a->ndim; d++) {
		if (count && a->dims[d] > avail / count)
			return gem_errf(err, GEM_EFAIL, "%s: shape larger than the file's %zu data bytes",
					what, avail);
		count *= (size_t)a->dims[d];
	}
	if (count > avail / (size_t)a->e.size || count * (size_t)a->e.size != avail)
		return gem_errf(err, GEM_EFAIL, "%s: %zu data bytes, but the header gives %zu elements "
				"of %s (%s)", what, avail, count, elem_name(a->e),
				count > avail / (size_t)a->e.size ? "truncated?" : "data after them");
	a->data = buf + off + hlen;
	a->nbytes = avail;
	return 0;
}

int npy_samples(const struct npy_array *x, uint8_t **xown, const char *xwhat,
		const struct npy_array *y, const char *ywhat, struct samples *s, char *err)
{
	int rc;
	memset(s, 0, sizeof *s);
	if (y->ndim < 1 || y->ndim > 2 || (y->ndim == 2 && y->dims[1] != 1))
		return gem_errf(err, GEM_EFAIL, "%s: labels of %d dimensions (want (N) or (N, 1))", ywhat,
				y->ndim);
	if ((rc = samples_shape(s, x->dims, x->ndim, xwhat, err)) < 0)
		return rc;
	if (y->dims[0] != x->dims[0])
		return gem_errf(err, GEM_EFAIL, "%s: %llu samples, but %s: %llu labels", xwhat,
				(unsigned long long)x->dims[0], ywhat, (unsigned long long)y->dims[0]);
	if ((rc = samples_set_y(s, y->e, y->data, ywhat, err)) < 0 ||
	    (rc = samples_set_x(s, x->e, x->data, xown, xwhat, err)) < 0)
		samples_free(s);
	return rc;
}

int npy_load(const char *features, const char *labels, struct samples *s, char *err)
{
	struct npy_array xa, ya;
	uint8_t *xb = NULL, *yb = NULL;
	size_t xn, yn;
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = samples_read_file(labels, SAMPLES_MAX_BYTES, &yb, &yn, err)) < 0 ||
	    (rc = npy_parse(yb, yn, labels, &ya, err)) < 0 ||
	    (rc = samples_read_file(features, SAMPLES_MAX_BYTES, &xb, &xn, err)) < 0 ||
	    (rc = npy_parse(xb, xn, features, &xa, err)) < 0)
		goto out;
	rc = npy_samples(&xa, &xb, features, &ya, labels, s, err);
out:
	free(xb);
	free(yb);
	return rc;
}

size_t npy_header_f32(const int *dims, int k, char *buf)
{
	char shape[128] = "";
	size_t n = 0, len;
	for (int d = 0; d < k; d++)
		n += (size_t)snprintf(shape + n, sizeof shape - n, "%d%s", dims[d],
				      k == 1 || d < k - 1 ? ", " : "");
	if (k == 1)
		shape[n - 1] = 0; /* (3,) */
	len = 10 + (size_t)snprintf(buf + 10, NPY_HEADER_CAP - 10,
				    "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
	/* spaces, then a newline, up to a multiple of 64 bytes, as NumPy pads it */
	while ((len + 1) % 64)
		buf[len++] = ' ';
	buf[len++] = '\n';
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (char)((len - 10) & 0xff);
	buf[9] = (char)((len - 10) >> 8);
	return len;
}
