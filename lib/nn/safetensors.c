#include "nn/safetensors.h"
#include "base/err.h"
#include "base/jget.h"
#include "nn/elem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHAPE_MAX 8 /* dimensions kept of a file's tensor (a layout's have at most 4) */

/* Every dtype of the format, with its size; elem kind 0: one gem does not read into θ. */
static const struct {
	const char *name;
	int size;
	struct elem e;
} dtypes[] = {
	{.name = "F32", .size = 4, .e = {.kind = 'f', .size = 4}},
	{.name = "F64", .size = 8, .e = {.kind = 'f', .size = 8}},
	{.name = "F16", .size = 2, .e = {.kind = 'f', .size = 2}},
	{.name = "BF16", .size = 2, .e = {.kind = 'b', .size = 2}},
	{.name = "BOOL", .size = 1}, {.name = "U8", .size = 1}, {.name = "I8", .size = 1},
	{.name = "F8_E5M2", .size = 1}, {.name = "F8_E4M3", .size = 1}, {.name = "I16", .size = 2},
	{.name = "U16", .size = 2}, {.name = "I32", .size = 4}, {.name = "U32", .size = 4},
	{.name = "I64", .size = 8}, {.name = "U64", .size = 8},
};

/* One tensor of a file's header. */
struct entry {
	const char *name;
	int dtype; /* index in dtypes */
	int ndim;
	uint64_t shape[SHAPE_MAX];
	uint64_t begin, end; /* in the data */
	int used;            /* matched by a tensor of the layout */
};

int safetensors_header(const struct layout *l, const struct safetensors_meta *meta, int nmeta,
		       uint8_t **hdr, size_t *len, char *err)
{
	json_t *root = json_object(), *m = json_object();
	size_t off = 0, jlen, pad;
	char *text = NULL;
	int bad = !root || !m;
	*hdr = NULL;
	for (int i = 0; i < nmeta && !bad; i++)
		bad = json_object_set_new(m, meta[i].key, json_string(meta[i].value)) < 0;
	bad = bad || (nmeta && json_object_set(root, "__metadata__", m) < 0);
	for (int i = 0; i < l->ntensors && !bad; i++) {
		const struct layout_tensor *t = &l->t[i];
		json_t *shape = json_array();
		if (t->offset != off)
			bad = 2; /* θ would not be the data as it is */
		for (int d = 0; d < t->ndim && shape; d++)
			json_array_append_new(shape, json_integer(t->shape[d]));
		bad = bad || json_object_set_new(root, t->name,
						 json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape",
							   shape, "data_offsets", (json_int_t)(4 * off),
							   (json_int_t)(4 * (off + t->size)))) < 0;
		off += t->size;
	}
	if (!bad && off != l->total)
		bad = 2;
	if (!bad && !(text = json_dumps(root, JSON_COMPACT)))
		bad = 1;
	json_decref(root);
	json_decref(m);
	if (bad) {
		free(text);
		return bad == 2 ? gem_errf(err, GEM_EFAIL, "safetensors: θ's tensors are not end to end")
				: gem_errf(err, GEM_ENOMEM, "safetensors: out of memory (or a name that is "
					   "not UTF-8)");
	}
	jlen = strlen(text);
	pad = (8 - jlen % 8) % 8;
	if (!(*hdr = malloc(8 + jlen + pad))) {
		free(text);
		return gem_errf(err, GEM_ENOMEM, "safetensors: out of memory");
	}
	for (int b = 0; b < 8; b++)
		(*hdr)[b] = (uint8_t)((uint64_t)(jlen + pad) >> (8 * b));
	memcpy(*hdr + 8, text, jlen);
	memset(*hdr + 8 + jlen, ' ', pad);
	*len = 8 + jlen + pad;
	free(text);
	return 0;
}

/* "__metadata__": an object of strings. */
static int check_meta(json_t *m, const char *what, char *err)
{
	const char *k, *s;
	json_t *v;
	if (!json_is_object(m))
		return gem_errf(err, GEM_EFAIL, "%s: __metadata__ is not an object", what);
	json_object_foreach(m, k, v)
		if (jget_str(m, k, 0, &s) != JGET_OK)
			return gem_errf(err, GEM_EFAIL, "%s: __metadata__.%.64s is not a string", what, k);
	return 0;
}

/* Tensor name's header entry o into *e, its byte range checked against its dtype and shape. */
static int parse_entry(const char *name, json_t *o, struct entry *e, const char *what, char *err)
{
	json_t *sh = json_object_get(o, "shape"), *off = json_object_get(o, "data_offsets");
	const char *dt = NULL;
	uint64_t bytes;
	size_t i;
	memset(e, 0, sizeof *e);
	e->name = name;
	if (!json_is_object(o) || json_object_size(o) != 3 || jget_str(o, "dtype", 0, &dt) != JGET_OK ||
	    !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2)
		return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': want exactly dtype, shape and "
				"data_offsets [begin, end]", what, name);
	for (e->dtype = 0; e->dtype < (int)(sizeof dtypes / sizeof *dtypes); e->dtype++)
		if (!strcmp(dt, dtypes[e->dtype].name))
			break;
	if (e->dtype == (int)(sizeof dtypes / sizeof *dtypes))
		return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': unknown dtype '%.16s'", what, name, dt);
	bytes = (uint64_t)dtypes[e->dtype].size;
	e->ndim = (int)json_array_size(sh);
	for (i = 0; i < json_array_size(sh); i++) {
		json_t *d = json_array_get(sh, i);
		json_int_t v = json_is_integer(d) ? json_integer_value(d) : -1;
		if (v < 0)
			return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': shape[%zu] is not a "
					"non-negative integer", what, name, i);
		if (v && bytes > UINT64_MAX / (uint64_t)v)
			return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': its shape overflows", what, name);
		bytes *= (uint64_t)v;
		if (i < SHAPE_MAX)
			e->shape[i] = (uint64_t)v;
	}
	for (i = 0; i < 2; i++) {
		json_t *v = json_array_get(off, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': data_offsets[%zu] is not a "
					"non-negative integer", what, name, i);
	}
	e->begin = (uint64_t)json_integer_value(json_array_get(off, 0));
	e->end = (uint64_t)json_integer_value(json_array_get(off, 1));
	if (e->end < e->begin || e->end - e->begin != bytes)
		return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s': data_offsets [%llu, %llu] for %llu "
				"bytes of %s", what, name, (unsigned long long)e->begin,
				(unsigned long long)e->end, (unsigned long long)bytes,
				dtypes[e->dtype].name);
	return 0;
}

static int by_begin(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* The tensors of the header root into *es (*n of them), their ranges end to end over the
 * data's nbytes exactly. */
static int parse_entries(json_t *root, uint64_t nbytes, const char *what, struct entry **es,
			 int *n, char *err)
{
	const char *k;
	json_t *v;
	uint64_t at = 0;
	int rc;
	*n = 0;
	if (!(*es = calloc(json_object_size(root) + 1, sizeof **es)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", what);
	json_object_foreach(root, k, v) {
		if (!strcmp(k, "__metadata__")) {
			if ((rc = check_meta(v, what, err)) < 0)
				return rc;
		} else if ((rc = parse_entry(k, v, &(*es)[(*n)++], what, err)) < 0) {
			return rc;
		}
	}
	qsort(*es, (size_t)*n, sizeof **es, by_begin);
	for (int i = 0; i < *n; i++) {
		if ((*es)[i].begin != at)
			return gem_errf(err, GEM_EFAIL, "%s: tensor '%.64s' starts at byte %llu of the data, "
					"not %llu: %s", what, (*es)[i].name,
					(unsigned long long)(*es)[i].begin, (unsigned long long)at,
					(*es)[i].begin > at ? "a gap" : "an overlap");
		at = (*es)[i].end;
	}
	if (at != nbytes)
		return gem_errf(err, GEM_EFAIL, "%s: the tensors cover %llu bytes of data, the file has "
				"%llu", what, (unsigned long long)at, (unsigned long long)nbytes);
	return 0;
}

/* Append a mismatch to the list in buf (cap bytes); *more counts those that did not fit. */
static void misfit(char *buf, size_t cap, int *more, const char *fmt, const char *a, const char *b)
{
	size_t n = strlen(buf);
	char one[256];
	snprintf(one, sizeof one, fmt, a, b);
	if (n + strlen(one) + 3 < cap)
		snprintf(buf + n, cap - n, "%s%s", n ? "; " : "", one);
	else
		(*more)++;
}

static const char *shape_str(const uint64_t *s, int ndim, char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < ndim && d < SHAPE_MAX && n < cap; d++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? ", " : "", (unsigned long long)s[d]);
	if (n < cap)
		snprintf(buf + n, cap - n, "%s]", ndim > SHAPE_MAX ? ", ..." : "");
	return buf;
}

/* Match the file's tensors es[0..n) to l's; every mismatch goes into err. */
static int match_layout(struct entry *es, int n, const struct layout *l, const char *what,
			char *err)
{
	char list[GEM_ERRMAX - 100] = "", fs[96], ms[96];
	int more = 0;
	for (int i = 0; i < l->ntensors; i++) {
		const struct layout_tensor *t = &l->t[i];
		struct entry *e = NULL;
		uint64_t want[4];
		int same;
		for (int j = 0; j < n && !e; j++)
			e = strcmp(es[j].name, t->name) ? NULL : &es[j];
		if (!e) {
			misfit(list, sizeof list, &more, "no tensor '%s'%s", t->name, "");
			continue;
		}
		e->used = 1;
		for (int d = 0; d < t->ndim; d++)
			want[d] = (uint64_t)t->shape[d];
		same = e->ndim == t->ndim;
		for (int d = 0; d < t->ndim && same; d++)
			same = e->shape[d] == want[d];
		if (!same) {
			snprintf(fs, sizeof fs, "%s: shape %s in the file, ", t->name,
				 shape_str(e->shape, e->ndim, ms, sizeof ms));
			misfit(list, sizeof list, &more, "%s%s in the model", fs,
			       shape_str(want, t->ndim, ms, sizeof ms));
		} else if (!dtypes[e->dtype].e.kind) {
			misfit(list, sizeof list, &more, "%s: dtype %s (gem reads F32, F64, F16, BF16)",
			       t->name, dtypes[e->dtype].name);
		}
	}
	for (int j = 0; j < n; j++)
		if (!es[j].used)
			misfit(list, sizeof list, &more, "unexpected tensor '%s'%s", es[j].name, "");
	if (!list[0])
		return 0;
	if (more)
		snprintf(list + strlen(list), sizeof list - strlen(list), " (and %d more)", more);
	return gem_errf(err, GEM_EUSAGE, "%s: does not fit the model: %s", what, list);
}

int safetensors_parse(const uint8_t *buf, size_t len, const char *what, const struct layout *l,
		      float *theta, json_t **meta, char *err)
{
	json_error_t je;
	json_t *root = NULL;
	struct entry *es = NULL;
	uint64_t hlen = 0;
	int n = 0, rc;
	size_t bad;
	if (meta)
		*meta = NULL;
	if (len < 8)
		return gem_errf(err, GEM_EFAIL, "%s: not a safetensors file (%zu bytes)", what, len);
	for (int b = 0; b < 8; b++)
		hlen |= (uint64_t)buf[b] << (8 * b);
	if (hlen > SAFETENSORS_HEADER_MAX || hlen > len - 8 || hlen < 2 || buf[8] != '{')
		return gem_errf(err, GEM_EFAIL, "%s: not a safetensors file (header of %llu bytes%s)",
				what, (unsigned long long)hlen,
				hlen <= len - 8 && hlen >= 2 && buf[8] != '{' ? ", not a JSON object" : "");
	if (!(root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je)) ||
	    !json_is_object(root)) {
		json_decref(root);
		return gem_errf(err, GEM_EFAIL, "%s: safetensors header: %s", what,
				root ? "not a JSON object" : je.text);
	}
	if ((rc = parse_entries(root, len - 8 - hlen, what, &es, &n, err)) < 0 ||
	    (rc = match_layout(es, n, l, what, err)) < 0)
		goto out;
	for (int i = 0; i < l->ntensors; i++) {
		const struct layout_tensor *t = &l->t[i];
		const struct entry *e = es;
		while (strcmp(e->name, t->name))
			e++;
		if (elem_to_f32(dtypes[e->dtype].e, buf + 8 + hlen + e->begin, t->size, theta + t->offset,
				&bad) < 0) {
			rc = gem_errf(err, GEM_EFAIL, "%s: %s: element %zu is not a finite number", what,
				      t->name, bad);
			goto out;
		}
	}
	if (meta && (*meta = json_object_get(root, "__metadata__")))
		json_incref(*meta);
out:
	free(es);
	json_decref(root);
	return rc;
}

/* The widest element a file's tensor may have (F64): what l's θ can take in a file. */
#define ELEM_MAX 8

/* Read all of fd (path) into *buf, n bytes already in it, refusing a file of more than max: the
 * buffer grows as bytes come (a pipe, a device says no size), never past max + 1. */
static int read_rest(int fd, const char *path, uint8_t **buf, size_t n, size_t max, size_t *len,
		     char *err)
{
	size_t cap = n + 65536 < max + 1 ? n + 65536 : max + 1;
	uint8_t *q;
	for (;;) {
		ssize_t r;
		if (n == cap) {
			if (cap > max)
				return gem_errf(err, GEM_EUSAGE, "%s: more than %zu bytes, the most a "
						"safetensors file of this model's parameters can be",
						path, max);
			cap = cap > (max + 1) / 2 ? max + 1 : 2 * cap;
			if (!(q = realloc(*buf, cap)))
				return gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
			*buf = q;
		}
		if ((r = read(fd, *buf + n, cap - n)) < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*len = n;
	return 0;
}

int safetensors_load(const char *path, const struct layout *l, float *theta, json_t **meta,
		     char *err)
{
	uint8_t *buf;
	uint64_t hlen = 0;
	size_t n = 0, len = 0, max;
	struct stat st;
	int fd = open(path, O_RDONLY), rc;
	if (fd < 0)
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) {
		rc = gem_errf(err, GEM_EFAIL, "%s: %s", path,
			      S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
		close(fd);
		return rc;
	}
	if (!(buf = malloc(65536))) {
		close(fd);
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
	}
	/* the model's size is known before the file is read: its 8-byte header length first,
	 * then no more than a header that long and l's θ in the widest dtype (a device such as
	 * /dev/zero, or a file of another size, is refused before it is read to its end) */
	while (n < 8) {
		ssize_t r = read(fd, buf + n, 8 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	for (size_t b = 0; b < n; b++)
		hlen |= (uint64_t)buf[b] << (8 * b);
	max = 8 + (size_t)hlen + ELEM_MAX * l->total;
	if (n < 8 || hlen > SAFETENSORS_HEADER_MAX || hlen < 2)
		rc = gem_errf(err, GEM_EFAIL, "%s: not a safetensors file (%s %llu bytes)", path,
			      n < 8 ? "it has" : "a header of",
			      (unsigned long long)(n < 8 ? n : hlen));
	else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max)
		rc = gem_errf(err, GEM_EUSAGE, "%s: %llu bytes, more than a safetensors file of this "
			      "model's %zu parameters can be (%zu)", path,
			      (unsigned long long)st.st_size, l->total, max);
	else
		rc = read_rest(fd, path, &buf, n, max, &len, err);
	close(fd);
	if (rc == 0)
		rc = safetensors_parse(buf, len, path, l, theta, meta, err);
	free(buf);
	return rc;
}
