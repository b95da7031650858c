#include "wire/msg.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "base/grow.h"
#include "base/jget.h"
#include "base/log.h"
#include "wire/crc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void msg_buf_free(struct msg_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof *b);
}

static int buf_reserve(struct msg_buf *b, size_t n)
{
	return grow_array(&b->data, &b->cap, n, 1, 4096);
}

static int check_blob(const struct msg_blob *bl, int i, char *err)
{
	if (!memchr(bl->name, 0, sizeof bl->name) || !bl->name[0])
		return gem_errf(err, GEM_EUSAGE, "message: blob %d has no name (1-%d bytes)", i,
				MSG_NAME_MAX - 1);
	if (!memchr(bl->meta.codec, 0, sizeof bl->meta.codec) ||
	    !blob_codec_known(bl->meta.codec))
		return gem_errf(err, GEM_EUSAGE, "message: blob '%s': unknown codec", bl->name);
	if (bl->meta.count > BLOB_MAX_COUNT)
		return gem_errf(err, GEM_EUSAGE, "message: blob '%s': %zu elements is too many",
				bl->name, bl->meta.count);
	if (!strcmp(bl->meta.codec, BLOB_RAW) && bl->meta.nbytes != bl->meta.count * 4)
		return gem_errf(err, GEM_EUSAGE, "message: blob '%s': raw size %zu, want %zu",
				bl->name, bl->meta.nbytes, bl->meta.count * 4);
	if (bl->meta.nbytes && !bl->data)
		return gem_errf(err, GEM_EUSAGE, "message: blob '%s' has no data", bl->name);
	return 0;
}

/* The header line's key of a file's header checksum, and its room: ',', the key, ':' and a
 * 32-bit decimal. */
#define HEAD_CRC_KEY "\"" MSG_HEAD_CRC "\":"
#define HEAD_CRC_ROOM (sizeof HEAD_CRC_KEY + 11)

/* Close the compact JSON object in b->data[0..*need) with the header checksum member: its
 * last '}' becomes ',"head_crc32":C}', C the CRC-32 of the bytes before the key (the comma
 * included). */
static void head_seal(struct msg_buf *b, size_t *need)
{
	size_t at = *need - 1; /* the closing brace; the object has "blobs" before it */
	int w;
	b->data[at++] = ',';
	memcpy(b->data + at, HEAD_CRC_KEY, sizeof HEAD_CRC_KEY - 1);
	w = snprintf(b->data + at + sizeof HEAD_CRC_KEY - 1, 12, "%lu}",
		     (unsigned long)crc32_update(0, b->data, at));
	*need = at + sizeof HEAD_CRC_KEY - 1 + (size_t)w;
}

/* msg_build_head, with the header checksum of a file when seal. */
static int head_build(struct msg_buf *b, json_t *header, const struct msg_blob *blobs, int n,
		      int seal, char *err)
{
	json_t *h, *arr;
	size_t need, pad;
	int rc;
	b->len = 0;
	if (header && !json_is_object(header))
		return gem_errf(err, GEM_EUSAGE, "message: header is not a JSON object");
	if (n < 0 || n > MSG_MAX_BLOBS)
		return gem_errf(err, GEM_EUSAGE, "message: %d blobs (at most %d)", n,
				MSG_MAX_BLOBS);
	for (int i = 0; i < n; i++) {
		if ((rc = check_blob(&blobs[i], i, err)) < 0)
			return rc;
		for (int j = 0; j < i; j++)
			if (!strcmp(blobs[i].name, blobs[j].name))
				return gem_errf(err, GEM_EUSAGE, "message: two blobs named '%s'",
						blobs[i].name);
	}
	/* A shallow copy: the caller's object keeps its fields and gets no "blobs". */
	h = header ? json_copy(header) : json_object();
	arr = json_array();
	if (!h || !arr || json_object_set_new(h, "blobs", arr) < 0) {
		json_decref(h);
		return gem_errf(err, GEM_ENOMEM, "message: out of memory");
	}
	for (int i = 0; i < n; i++) {
		const struct msg_blob *bl = &blobs[i];
		json_t *e = json_pack("{s:s,s:s,s:I,s:I,s:I}", "name", bl->name, "codec",
				      bl->meta.codec, "count", (json_int_t)bl->meta.count, "size",
				      (json_int_t)bl->meta.nbytes, "crc32",
				      (json_int_t)bl->meta.crc32);
		if (!e || json_array_append_new(arr, e) < 0) {
			json_decref(h);
			return gem_errf(err, GEM_ENOMEM, "message: out of memory");
		}
	}
	/* Dump straight into the reusable buffer; a second pass only when it has to grow. */
	need = json_dumpb(h, b->data, b->data ? b->cap : 0, JSON_COMPACT);
	if (need && need + HEAD_CRC_ROOM > b->cap) {
		int big = need + HEAD_CRC_ROOM > MSG_HEAD_MAX;
		if (big || buf_reserve(b, need + HEAD_CRC_ROOM) < 0) {
			json_decref(h);
			return gem_errf(err, big ? GEM_EUSAGE : GEM_ENOMEM,
					"message: header of %zu bytes is too large", need);
		}
		need = json_dumpb(h, b->data, b->cap, JSON_COMPACT);
	}
	json_decref(h);
	if (!need)
		return gem_errf(err, GEM_EUSAGE, "message: header cannot be written as JSON");
	if (seal)
		head_seal(b, &need);
	if (need + 1 > MSG_HEAD_MAX)
		return gem_errf(err, GEM_EUSAGE, "message: header of %zu bytes is too large",
				need);
	pad = (MSG_ALIGN - (need + 1) % MSG_ALIGN) % MSG_ALIGN;
	if (need + pad + 1 > b->cap && buf_reserve(b, need + pad + 1) < 0)
		return gem_errf(err, GEM_ENOMEM, "message: out of memory");
	memset(b->data + need, ' ', pad);
	b->data[need + pad] = '\n';
	b->len = need + pad + 1;
	return 0;
}

int msg_build_head(struct msg_buf *b, json_t *header, const struct msg_blob *blobs, int n,
		   char *err)
{
	return head_build(b, header, blobs, n, 0, err);
}

int msg_build(struct msg_buf *b, json_t *header, const struct msg_blob *blobs, int n,
	      char *err)
{
	size_t total;
	int rc = msg_build_head(b, header, blobs, n, err);
	if (rc < 0)
		return rc;
	total = b->len;
	for (int i = 0; i < n; i++) {
		if (blobs[i].meta.nbytes > SIZE_MAX - total)
			return gem_errf(err, GEM_EUSAGE, "message: blobs too large");
		total += blobs[i].meta.nbytes;
	}
	if (buf_reserve(b, total) < 0) {
		b->len = 0;
		return gem_errf(err, GEM_ENOMEM, "message: out of memory (%zu bytes)", total);
	}
	for (int i = 0; i < n; i++) {
		if (blobs[i].meta.nbytes)
			memcpy(b->data + b->len, blobs[i].data, blobs[i].meta.nbytes);
		b->len += blobs[i].meta.nbytes;
	}
	return 0;
}

/* A non-negative JSON integer field of a blob entry, at most max. */
static int get_uint(json_t *e, int i, const char *field, json_int_t max, json_int_t *out,
		    char *err)
{
	long long v;
	int rc = jget_int(e, field, 0, max, &v);
	if (rc == JGET_MISSING)
		return gem_errf(err, GEM_EFAIL, "message: blobs[%d].%s is missing", i, field);
	if (rc == JGET_TYPE)
		return gem_errf(err, GEM_EFAIL, "message: blobs[%d].%s is not an integer", i,
				field);
	if (rc == JGET_RANGE)
		return gem_errf(err, GEM_EFAIL, "message: blobs[%d].%s = %lld is out of range", i,
				field, (long long)json_integer_value(json_object_get(e, field)));
	*out = v;
	return 0;
}

/* A string field of a blob entry of 1 to cap - 1 bytes, or NULL. */
static const char *get_str(json_t *e, const char *field, size_t cap, size_t *len)
{
	const char *s;
	if (jget_str(e, field, cap, &s) != JGET_OK || !*s)
		return NULL;
	*len = strlen(s);
	return s;
}

static int parse_blobs(struct msg *m, size_t body, char *err)
{
	json_t *arr = json_object_get(m->header, "blobs"), *e;
	size_t i, sum = 0;
	if (!arr) {
		if (body)
			return gem_errf(err, GEM_EFAIL,
					"message: %zu bytes follow a header that lists no blobs",
					body);
		return 0;
	}
	if (!json_is_array(arr))
		return gem_errf(err, GEM_EFAIL, "message: \"blobs\" is not an array");
	if (json_array_size(arr) > MSG_MAX_BLOBS)
		return gem_errf(err, GEM_EFAIL, "message: %zu blobs (at most %d)",
				json_array_size(arr), MSG_MAX_BLOBS);
	json_array_foreach(arr, i, e)
	{
		struct msg_blob *bl = &m->blob[i];
		json_int_t count, size, crc;
		const char *s;
		size_t slen;
		int rc, id = (int)i;
		if (!json_is_object(e))
			return gem_errf(err, GEM_EFAIL, "message: blobs[%d] is not an object", id);
		if (!(s = get_str(e, "name", MSG_NAME_MAX, &slen)))
			return gem_errf(err, GEM_EFAIL,
					"message: blobs[%d].name is missing or not a string of "
					"1-%d bytes", id, MSG_NAME_MAX - 1);
		memcpy(bl->name, s, slen + 1);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m->blob[j].name, bl->name))
				return gem_errf(err, GEM_EFAIL, "message: two blobs named '%s'",
						bl->name);
		if (!(s = get_str(e, "codec", BLOB_CODEC_MAX, &slen)) || !blob_codec_known(s))
			return gem_errf(err, GEM_EFAIL,
					"message: blobs[%d].codec is missing or unknown", id);
		memcpy(bl->meta.codec, s, slen + 1);
		if ((rc = get_uint(e, id, "count", (json_int_t)BLOB_MAX_COUNT, &count, err)) < 0 ||
		    (rc = get_uint(e, id, "size", (json_int_t)(body - sum), &size, err)) < 0 ||
		    (rc = get_uint(e, id, "crc32", 0xffffffffLL, &crc, err)) < 0)
			return rc;
		bl->meta.count = (size_t)count;
		bl->meta.nbytes = (size_t)size;
		bl->meta.crc32 = (uint32_t)crc;
		if (!strcmp(bl->meta.codec, BLOB_RAW) && bl->meta.nbytes != bl->meta.count * 4)
			return gem_errf(err, GEM_EFAIL,
					"message: blobs[%d].size = %zu, but %zu raw floats are %zu "
					"bytes", id, bl->meta.nbytes, bl->meta.count,
					bl->meta.count * 4);
		sum += bl->meta.nbytes;
		m->nblobs = id + 1;
	}
	if (sum != body)
		return gem_errf(err, GEM_EFAIL,
				"message: blobs add up to %zu bytes but %zu follow the header", sum,
				body);
	return 0;
}

int msg_parse(const void *buf, size_t len, struct msg *m, char *err)
{
	const char *p = buf, *nl;
	size_t off;
	json_error_t jerr;
	int rc;
	memset(m, 0, sizeof *m);
	if (!len)
		return gem_errf(err, GEM_EFAIL, "message: empty");
	nl = memchr(p, '\n', len < MSG_HEAD_MAX ? len : MSG_HEAD_MAX);
	if (!nl) {
		if (len >= MSG_HEAD_MAX)
			return gem_errf(err, GEM_EFAIL, "message: first line longer than %d bytes",
					MSG_HEAD_MAX);
		return gem_errf(err, GEM_EFAIL, "message: no newline after the JSON header");
	}
	m->header = json_loadb(p, (size_t)(nl - p), JSON_REJECT_DUPLICATES, &jerr);
	if (!m->header)
		return gem_errf(err, GEM_EFAIL, "message: header: %s (column %d)", jerr.text,
				jerr.column);
	if (!json_is_object(m->header)) {
		msg_free(m);
		return gem_errf(err, GEM_EFAIL, "message: header is not a JSON object");
	}
	off = (size_t)(nl - p) + 1;
	if ((rc = parse_blobs(m, len - off, err)) < 0) {
		msg_free(m);
		return rc;
	}
	for (int i = 0; i < m->nblobs; i++) {
		m->blob[i].data = p + off;
		off += m->blob[i].meta.nbytes;
	}
	return 0;
}

/* Check the header checksum of the file image p[0..len): 1 it matches, 0 the header has none
 * (a file of a gem from before it: its first line ends with the "blobs" array), else
 * GEM_EFAIL. Only the first line is looked at; msg_parse judges the rest. */
static int head_check(const char *p, size_t len, char *err)
{
	const char *nl = memchr(p, '\n', len < MSG_HEAD_MAX ? len : MSG_HEAD_MAX);
	size_t e, d, klen = sizeof HEAD_CRC_KEY - 1;
	unsigned long long want = 0;
	if (!nl)
		return 0;
	/* the line without its padding, then "...,\"head_crc32\":DIGITS}" */
	for (e = (size_t)(nl - p); e && strchr(" \t\r", p[e - 1]); e--)
		;
	if (e < 2 || p[e - 1] != '}')
		return gem_errf(err, GEM_EFAIL, "the header is damaged (no closing brace)");
	for (d = e - 1; d > 0 && e - 1 - d <= 10 && p[d - 1] >= '0' && p[d - 1] <= '9'; d--)
		;
	if (d == e - 1 || e - 1 - d > 10 || d < klen + 1 || memcmp(p + d - klen, HEAD_CRC_KEY, klen) ||
	    p[d - klen - 1] != ',') {
		if (p[e - 2] == ']')
			return 0;
		return gem_errf(err, GEM_EFAIL, "the header is damaged (no checksum where it ends)");
	}
	for (size_t i = d; i < e - 1; i++)
		want = want * 10 + (unsigned)(p[i] - '0');
	if (want > 0xffffffffULL || want != crc32_update(0, p, d - klen))
		return gem_errf(err, GEM_EFAIL, "the header is damaged (its checksum does not match)");
	return 1;
}

int msg_parse_file(const void *buf, size_t len, struct msg *m, int *unsealed, char *err)
{
	int sealed = head_check(buf, len, err), rc;
	memset(m, 0, sizeof *m);
	if (unsealed)
		*unsealed = 0;
	if (sealed < 0)
		return sealed;
	if ((rc = msg_parse(buf, len, m, err)) < 0)
		return rc;
	if (sealed) {
		json_object_del(m->header, MSG_HEAD_CRC);
	} else if (json_object_get(m->header, MSG_HEAD_CRC)) {
		/* a checksum anywhere but where the line ends is not one gem wrote */
		msg_free(m);
		return gem_errf(err, GEM_EFAIL, "the header is damaged (its checksum is misplaced)");
	} else if (unsealed) {
		*unsealed = 1;
	}
	return 0;
}

void msg_free(struct msg *m)
{
	json_decref(m->header);
	memset(m, 0, sizeof *m);
}

const struct msg_blob *msg_find(const struct msg *m, const char *name)
{
	for (int i = 0; i < m->nblobs; i++)
		if (!strcmp(m->blob[i].name, name))
			return &m->blob[i];
	return NULL;
}

/* The sealed header line into b, then it and the blobs (from where they are) to path. */
static int write_file(const char *path, struct msg_buf *b, json_t *header,
		      const struct msg_blob *blobs, int n, char *err)
{
	struct iovec iov[1 + MSG_MAX_BLOBS];
	int rc = head_build(b, header, blobs, n, 1, err);
	if (rc < 0) {
		gem_errprefix(err, "%s: ", path);
		return rc;
	}
	iov[0].iov_base = b->data;
	iov[0].iov_len = b->len;
	for (int i = 0; i < n; i++) {
		iov[1 + i].iov_base = (void *)blobs[i].data;
		iov[1 + i].iov_len = blobs[i].meta.nbytes;
	}
	return fs_write_atomicv(path, iov, 1 + n, err);
}

int msg_write_file(const char *path, json_t *header, const struct msg_blob *blobs, int n,
		   char *err)
{
	struct msg_buf head = {0};
	int rc = write_file(path, &head, header, blobs, n, err);
	msg_buf_free(&head);
	return rc;
}

/* The message of a file read whole: parsed with its header checksum checked (a file without
 * one is read with a warning), errors naming path. */
static int parse_read(const char *path, const void *buf, size_t len, struct msg *m, char *err)
{
	int unsealed, rc = msg_parse_file(buf, len, m, &unsealed, err);
	if (rc < 0)
		gem_errprefix(err, "%s: ", path);
	else if (unsealed)
		log_warn("%s: its header has no checksum (an older gem wrote it): read unchecked", path);
	return rc;
}

int msg_read_file(const char *path, size_t max, struct msg_buf *b, struct msg *m, char *err)
{
	void *data;
	size_t len;
	int rc;
	memset(m, 0, sizeof *m);
	if ((rc = fs_read_all(path, &data, &len, max, err)) < 0)
		return rc;
	free(b->data);
	b->data = data;
	b->len = len;
	b->cap = len + 1;
	return parse_read(path, b->data, b->len, m, err);
}

int msg_encode_params(struct msg_buf *b, struct blob_codec *c, json_t *header,
		      const float *theta, size_t count, const char *codec, int level, char *err)
{
	struct msg_blob bl = {.name = MSG_PARAMS};
	int rc = blob_encode(c, theta, count, codec, level, &bl.data, &bl.meta, err);
	if (rc < 0)
		return rc;
	return msg_build(b, header, &bl, 1, err);
}

/* Decode m's "params" blob into θ[0..count); *header gets m's header. */
static int decode_params(struct msg *m, struct blob_codec *c, json_t **header, float *theta,
			 size_t count, char *err)
{
	const struct msg_blob *bl = msg_find(m, MSG_PARAMS);
	int rc;
	if (!bl)
		return gem_errf(err, GEM_EFAIL, "message: no \"%s\" blob", MSG_PARAMS);
	if ((rc = blob_decode(c, bl->data, &bl->meta, theta, count, err)) < 0) {
		gem_errprefix(err, "message: %s ", MSG_PARAMS);
		return rc;
	}
	if (header)
		*header = json_incref(m->header);
	return 0;
}

int msg_decode_params(const void *buf, size_t len, struct blob_codec *c, json_t **header,
		      float *theta, size_t count, char *err)
{
	struct msg m;
	int rc;
	if (header)
		*header = NULL;
	if ((rc = msg_parse(buf, len, &m, err)) < 0)
		return rc;
	rc = decode_params(&m, c, header, theta, count, err);
	msg_free(&m);
	return rc;
}

int msg_write_params_file(const char *path, struct msg_buf *b, struct blob_codec *c,
			  json_t *header, const float *theta, size_t count, const char *codec,
			  int level, char *err)
{
	struct msg_blob bl = {.name = MSG_PARAMS};
	int rc = blob_encode(c, theta, count, codec, level, &bl.data, &bl.meta, err);
	if (rc < 0) {
		gem_errprefix(err, "%s: ", path);
		return rc;
	}
	return write_file(path, b, header, &bl, 1, err);
}

int msg_read_params_file(const char *path, size_t max, struct blob_codec *c, json_t **header,
			 float *theta, size_t count, char *err)
{
	struct msg_buf b = {0};
	struct msg m;
	int rc;
	if (header)
		*header = NULL;
	if ((rc = msg_read_file(path, max, &b, &m, err)) == 0) {
		if ((rc = decode_params(&m, c, header, theta, count, err)) < 0)
			gem_errprefix(err, "%s: ", path);
		msg_free(&m);
	}
	msg_buf_free(&b);
	return rc;
}
