/* t2006: messages round-trip, files too; malformed messages (bad JSON, no newline, sizes that
 * do not add up, bad blob entries, random mutations) are refused, never crash. */
#include "wire/blob.h"
#include "base/err.h"
#include "base/fsutil.h"
#include "wire/msg.h"
#include "base/rng.h"
#include "tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[GEM_ERRMAX];

/* Parse a message given as a header line (with its '\n') and a body. */
static int parse_text(const char *head, const void *body, size_t blen)
{
	size_t hl = strlen(head);
	char *b = malloc(hl + blen + 1);
	struct msg m;
	int rc;
	memcpy(b, head, hl);
	if (blen)
		memcpy(b + hl, body, blen);
	rc = msg_parse(b, hl + blen, &m, err);
	if (rc == 0)
		msg_free(&m);
	free(b);
	return rc;
}

int main(void)
{
	enum { N = 5000 };
	static float theta[N], back[N], grad[N];
	struct blob_codec c, c2;
	struct msg_buf b = {0}, fb = {0};
	struct msg_blob bl[2];
	struct msg m;
	const struct msg_blob *p;
	const void *out;
	json_t *h, *hb;
	struct rng r;
	char *line, path[256];
	int rc;

	rng_seed(&r, 3, 0);
	for (int i = 0; i < N; i++)
		theta[i] = (float)rng_normal(&r) * 0.05f, grad[i] = (float)rng_normal(&r) * 1e-3f;
	blob_codec_init(&c);
	blob_codec_init(&c2);

	/* Two blobs, built and parsed. */
	h = json_pack("{s:i,s:s,s:f}", "version", 7, "worker", "w1", "loss", 0.5);
	blob_encode(&c, theta, N, BLOB_ZLIB_SHUFFLE, -1, &out, &bl[0].meta, err);
	snprintf(bl[0].name, sizeof bl[0].name, "params");
	bl[0].data = out;
	blob_encode(&c2, grad, N, BLOB_RAW, -1, &out, &bl[1].meta, err);
	snprintf(bl[1].name, sizeof bl[1].name, "grad");
	bl[1].data = out;
	ok(msg_build(&b, h, bl, 2, err) == 0, "build a two-blob message: %s", err);
	ok(!json_object_get(h, "blobs"), "the caller's header is not modified");
	line = strndup(b.data, (size_t)((char *)memchr(b.data, '\n', b.len) - b.data));
	diag("%s", line);
	ok(strstr(line, "\"blobs\":[{\"name\":\"params\",\"codec\":\"zlib+shuffle\",\"count\":5000") &&
		   strstr(line, "\"version\":7") && strchr(line, ' ') &&
		   strspn(strchr(line, ' '), " ") == strlen(strchr(line, ' ')) &&
		   line[strlen(line) - strlen(strchr(line, ' ')) - 1] == '}',
	   "first line is compact JSON with the caller's fields and the blob list, then spaces");
	ok((strlen(line) + 1) % MSG_ALIGN == 0 && strlen(strchr(line, ' ')) < MSG_ALIGN,
	   "padded to the next multiple of %d bytes: %zu", MSG_ALIGN, strlen(line) + 1);
	free(line);
	ok(msg_parse(b.data, b.len, &m, err) == 0 && m.nblobs == 2, "parse it back: %s", err);
	ok(json_integer_value(json_object_get(m.header, "version")) == 7 &&
		   !strcmp(json_string_value(json_object_get(m.header, "worker")), "w1"),
	   "header fields survive");
	p = msg_find(&m, "grad");
	ok(p && p->meta.nbytes == N * 4 && !memcmp(p->data, grad, N * 4), "raw blob bytes in place");
	{
		/* the padding aligns the first blob only: "grad" follows 17,933 bytes of zlib */
		const float *view = NULL;
		char *odd = malloc(N * 4 + 1);
		ok(p && blob_decode_view(&c2, p->data, &p->meta, N, &view, err) == 0 && view &&
			   !memcmp(view, grad, N * 4),
		   "blob_decode_view of a raw blob: %s", err);
		if (p && (uintptr_t)p->data % 4 == 0)
			ok(view == p->data, "an aligned raw blob is used where it lies");
		else
			ok(view != p->data, "an unaligned raw blob is copied");
		memcpy(odd + 1, grad, N * 4);
		view = NULL;
		ok(p && blob_decode_view(&c2, odd + 1, &p->meta, N, &view, err) == 0 &&
			   view != (const float *)(const void *)(odd + 1) && (uintptr_t)view % 4 == 0 &&
			   !memcmp(view, grad, N * 4),
		   "an unaligned raw blob is copied to an aligned buffer: %s", err);
		{
			/* a message whose first blob is raw, in a malloc'd (16-aligned) buffer: the
			 * padding keeps the blob 16-aligned */
			struct msg_buf one = {0};
			struct msg m1;
			const struct msg_blob *g;
			ok(msg_build(&one, NULL, &bl[1], 1, err) == 0 &&
				   msg_parse(one.data, one.len, &m1, err) == 0 &&
				   (g = msg_find(&m1, "grad")) && (uintptr_t)g->data % 16 == 0 &&
				   blob_decode_view(&c2, g->data, &g->meta, N, &view, err) == 0 &&
				   view == g->data,
			   "a raw first blob is aligned and used where it lies, no copy: %s", err);
			msg_free(&m1);
			msg_buf_free(&one);
		}
		odd[1] ^= 1;
		view = NULL;
		ok(blob_decode_view(&c2, odd + 1, &p->meta, N, &view, err) < 0 && !view &&
			   strstr(err, "CRC"),
		   "a corrupted raw blob is refused, the view untouched: %s", err);
		free(odd);
	}
	p = msg_find(&m, "params");
	ok(p && blob_decode(&c, p->data, &p->meta, back, N, err) == 0 &&
		   !memcmp(back, theta, sizeof theta),
	   "params decode to θ: %s", err);
	ok(!msg_find(&m, "nope"), "msg_find of a missing name is NULL");
	msg_free(&m);
	ok(msg_build(&b, NULL, NULL, 0, err) == 0 && b.len == MSG_ALIGN &&
		   !memcmp(b.data, "{\"blobs\":[]} ", 13) && b.data[MSG_ALIGN - 2] == ' ' &&
		   b.data[MSG_ALIGN - 1] == '\n',
	   "an empty message: its header padded to %d bytes", MSG_ALIGN);
	ok(msg_parse(b.data, b.len, &m, err) == 0 && m.nblobs == 0, "parses");
	msg_free(&m);
	bl[1] = bl[0];
	ok(msg_build(&b, h, bl, 2, err) == GEM_EUSAGE, "two blobs of one name: %s", err);
	hb = json_array();
	ok(msg_build(&b, hb, bl, 1, err) == GEM_EUSAGE, "a header that is not an object: %s", err);
	json_decref(hb);

	/* The params convenience, in memory and through a file. */
	ok(msg_encode_params(&b, &c, h, theta, N, NULL, -1, err) == 0, "encode params");
	memset(back, 0, sizeof back);
	ok(msg_decode_params(b.data, b.len, &c2, &hb, back, N, err) == 0 &&
		   !memcmp(back, theta, sizeof theta) &&
		   json_integer_value(json_object_get(hb, "version")) == 7,
	   "decode params and header: %s", err);
	json_decref(hb);
	ok(msg_decode_params(b.data, b.len, &c2, NULL, back, N + 1, err) < 0 && strstr(err, "5000"),
	   "wrong expected size: %s", err);
	snprintf(path, sizeof path, "%s/gem-t2006.%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		 (int)getpid());
	ok(msg_write_params_file(path, &b, &c, h, theta, N, BLOB_ZLIB, 6, err) == 0, "write params file");
	memset(back, 0, sizeof back);
	ok(msg_read_params_file(path, 1 << 20, &c2, NULL, back, N, err) == 0 &&
		   !memcmp(back, theta, sizeof theta),
	   "read params file: %s", err);
	ok(msg_read_params_file(path, 100, &c2, NULL, back, N, err) < 0 && strstr(err, path),
	   "a file over max: %s", err);
	ok(msg_read_params_file(path, 1 << 20, &c2, NULL, back, 10, err) < 0 && strstr(err, path),
	   "wrong size names the file: %s", err);
	blob_encode(&c, theta, N, BLOB_ZLIB_SHUFFLE, -1, &bl[0].data, &bl[0].meta, err);
	ok(msg_write_file(path, h, bl, 1, err) == 0 && msg_read_file(path, 1 << 20, &fb, &m, err) == 0 &&
		   m.nblobs == 1 && blob_decode(&c2, m.blob[0].data, &m.blob[0].meta, back, N, err) == 0 &&
		   !memcmp(back, theta, sizeof theta),
	   "msg_write_file / msg_read_file: %s", err);
	msg_free(&m);
	{
		FILE *f = fopen(path, "rb");
		char first[4096];
		ok(f && fgets(first, sizeof first, f) && first[strlen(first) - 1] == '\n' &&
			   (hb = json_loads(first, 0, NULL)) != NULL && json_is_object(hb),
		   "the file's first line is a JSON document (head -1 | jq works)");
		if (f)
			fclose(f);
		json_decref(hb);
	}
	unlink(path);
	json_decref(h);

	/* Malformed messages. */
	{
		char *longline = malloc(MSG_HEAD_MAX + 10);
		memset(longline, ' ', MSG_HEAD_MAX + 10);
		longline[0] = '{';
		ok(msg_parse(longline, MSG_HEAD_MAX + 10, &m, err) < 0 && strstr(err, "longer"),
		   "first line too long: %s", err);
		free(longline);
	}
	ok(msg_parse("", 0, &m, err) < 0, "empty: %s", err);
	ok(parse_text("{\"blobs\":[]}", "", 0) < 0 && strstr(err, "newline"), "no newline: %s", err);
	ok(parse_text("{\"blobs\":[]\n", "", 0) < 0, "bad JSON: %s", err);
	ok(parse_text("[1,2]\n", "", 0) < 0 && strstr(err, "object"), "not an object: %s", err);
	ok(parse_text("{}\n", "", 0) == 0, "no blobs, no body is fine");
	ok(parse_text("{}\n", "x", 1) < 0, "no blobs but a body: %s", err);
	ok(parse_text("{\"blobs\":{}}\n", "", 0) < 0 && strstr(err, "array"), "blobs not an array: %s",
	   err);
	ok(parse_text("{\"a\":1,\"a\":2}\n", "", 0) < 0, "duplicate keys: %s", err);
	{
		/* One raw blob of 2 floats, 8 bytes. */
		const char body[9] = "abcdefgh";
		char head[300];
#define BLOB(fields) "{\"blobs\":[" fields "]}\n"
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 8) == 0,
		   "a well-formed raw blob parses (CRC is decode's business)");
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 7) < 0,
		   "one byte short: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), "abcdefghi", 9) < 0 &&
			   strstr(err, "add up"),
		   "one byte over: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":3,\"size\":8,\"crc32\":1}"), body, 8) < 0,
		   "raw size not 4×count: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":2,\"size\":-8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "size"),
		   "negative size: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":2,\"size\":9223372036854775807,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "size"),
		   "huge size: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":2,\"size\":1e3,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "size"),
		   "real size: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":-1,\"size\":8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "count"),
		   "negative count: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":4611686018427387904,\"size\":8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "count"),
		   "huge count: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":2,\"size\":8,\"crc32\":4294967296}"), body, 8) < 0 &&
			   strstr(err, "crc32"),
		   "crc32 over 32 bits: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"zlib\",\"count\":2,\"size\":8}"), body, 8) < 0 &&
			   strstr(err, "crc32"),
		   "missing crc32: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"lz4\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "codec"),
		   "unknown codec: %s", err);
		ok(parse_text(BLOB("{\"name\":7,\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "name"),
		   "name not a string: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\\u0000q\",\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 8) < 0,
		   "name with a NUL: %s", err);
		ok(parse_text(BLOB("{\"name\":\"0123456789012345678901234567890123\",\"codec\":\"raw\",\"count\":2,\"size\":8,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "name"),
		   "name too long: %s", err);
		ok(parse_text(BLOB("7"), body, 8) < 0 && strstr(err, "blobs[0]"), "entry not an object: %s", err);
		ok(parse_text(BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":1,\"size\":4,\"crc32\":1},"
				   "{\"name\":\"p\",\"codec\":\"raw\",\"count\":1,\"size\":4,\"crc32\":1}"), body, 8) < 0 &&
			   strstr(err, "two blobs"),
		   "duplicate names: %s", err);
		snprintf(head, sizeof head, "%s", BLOB("{\"name\":\"p\",\"codec\":\"raw\",\"count\":1,\"size\":4,\"crc32\":1},"
						       "{\"name\":\"q\",\"codec\":\"raw\",\"count\":1,\"size\":4,\"crc32\":1}"));
		ok(parse_text(head, body, 8) == 0, "two raw blobs back to back");
	}

	/* A few hundred random mutations of a valid message: no crash, every refusal says why,
	 * and anything accepted either fails to decode (saying why) or decodes to θ itself: the
	 * CRC-32 guards the body, and a header that still parses names the same blob. */
	{
		size_t len;
		char *mut;
		int accepted = 0, decoded = 0, silent = 0, changed = 0;
		msg_encode_params(&b, &c, h = json_pack("{s:i}", "version", 1), theta, 300, NULL, -1, err);
		json_decref(h);
		len = b.len;
		mut = malloc(len + 16);
		for (int t = 0; t < 600; t++) {
			size_t l = len;
			memcpy(mut, b.data, len);
			switch (t % 4) {
			case 0: /* flip bytes, mostly in the header line */
				for (int k = 0; k < 1 + t % 3; k++)
					mut[rng_below(&r, (uint32_t)(t % 8 ? 120 : len))] ^= (char)(1 + rng_below(&r, 255));
				break;
			case 1: /* truncate */
				l = rng_below(&r, (uint32_t)len);
				break;
			case 2: /* replace a digit in the header */
				for (size_t k = 0; k < 120; k++) {
					size_t at = rng_below(&r, 120);
					if (mut[at] >= '0' && mut[at] <= '9') {
						mut[at] = (char)('0' + rng_below(&r, 10));
						break;
					}
				}
				break;
			default: /* extra bytes at the end */
				l = len + 1 + rng_below(&r, 15);
				memset(mut + len, 'z', l - len);
			}
			err[0] = 0;
			rc = msg_parse(mut, l, &m, err);
			if (rc == 0) {
				accepted++;
				msg_free(&m);
				memset(back, 0, sizeof back);
				err[0] = 0;
				if (msg_decode_params(mut, l, &c2, NULL, back, 300, err) == 0) {
					decoded++;
					changed += memcmp(back, theta, 300 * sizeof *back) != 0;
				} else
					silent += !err[0];
			} else
				silent += !err[0];
		}
		free(mut);
		ok(silent == 0 && changed == 0 && accepted < 600,
		   "600 mutations: %d parsed, %d decoded, every one decoded θ (%d not), every refusal "
		   "with a message (%d without)", accepted, decoded, changed, silent);
	}

	/* A file's header is sealed: every flip of one bit of its first line (padding and newline
	 * too) is refused, and so is the damage of one byte; an older gem's unsealed header is
	 * read unchecked and said to be. */
	snprintf(path, sizeof path, "%s/gem-t2006s.%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		 (int)getpid());
	h = json_pack("{s:i, s:I, s:f}", "version", 30, "samples", (json_int_t)4800, "elapsed", 1.5);
	err[0] = 0;
	ok(msg_write_params_file(path, &b, &c, h, theta, N, NULL, -1, err) == 0 &&
		   msg_read_file(path, 1 << 24, &fb, &m, err) == 0,
	   "write a sealed file and read it: %s", err);
	ok(json_integer_value(json_object_get(m.header, "version")) == 30 &&
		   !json_object_get(m.header, MSG_HEAD_CRC),
	   "the header read has its fields, not the checksum");
	msg_free(&m);
	{
		size_t hl = (size_t)((char *)memchr(fb.data, '\n', fb.len) - fb.data) + 1;
		size_t pad = hl - 1;
		int caught = 0, bytes = 0, unsealed, tried = 0;
		while (fb.data[pad - 1] == ' ')
			pad--;
		ok(strstr(fb.data, "\"" MSG_HEAD_CRC "\":") != NULL && fb.data[pad - 1] == '}',
		   "the first line ends with %s", MSG_HEAD_CRC);
		for (size_t i = 0; i < hl; i++)
			for (int bit = 0; bit < 8; bit++) {
				fb.data[i] ^= (char)(1 << bit);
				rc = msg_parse_file(fb.data, fb.len, &m, &unsealed, err);
				if (rc == 0)
					msg_free(&m);
				caught += rc < 0;
				tried++;
				fb.data[i] ^= (char)(1 << bit);
			}
		ok(caught == tried, "%d of %d one-bit flips of the header line refused", caught, tried);
		for (size_t i = 0; i < hl; i++) {
			char was = fb.data[i];
			fb.data[i] = (char)rng_below(&r, 256);
			rc = msg_parse_file(fb.data, fb.len, &m, &unsealed, err);
			if (rc == 0)
				msg_free(&m);
			/* padding may be any JSON whitespace */
			bytes += rc < 0 || fb.data[i] == was ||
				 (i >= pad && strchr(" \t\r", fb.data[i]) && fb.data[i]);
			if (rc == 0 && fb.data[i] != was && !(i >= pad && strchr(" \t\r", fb.data[i])))
				diag("byte %zu: %02x for %02x accepted", i, (unsigned char)fb.data[i],
				     (unsigned char)was);
			fb.data[i] = was;
		}
		ok(bytes == (int)hl, "%d of %zu random bytes in the header line refused", bytes, hl);
		fb.data[strstr(fb.data, "\"version\":30") - fb.data + 11] ^= 1;
		ok(msg_parse_file(fb.data, fb.len, &m, &unsealed, err) < 0 && strstr(err, "damaged"),
		   "version 30 made 31: %s", err);
	}
	{
		/* what gems before the checksum wrote: the same message, built unsealed */
		int unsealed = 0;
		err[0] = 0;
		ok(msg_encode_params(&b, &c, h, theta, N, NULL, -1, err) == 0, "an unsealed message");
		rc = msg_parse_file(b.data, b.len, &m, &unsealed, err);
		ok(rc == 0 && unsealed == 1 &&
			   json_integer_value(json_object_get(m.header, "version")) == 30,
		   "an unsealed file is read, and said to be: %s", err);
		if (rc == 0)
			msg_free(&m);
		/* an unsealed-looking line that names the checksum (found by make fuzz) */
		static const char moved[] = "{\"" MSG_HEAD_CRC "\":[]}\n";
		rc = msg_parse_file(moved, sizeof moved - 1, &m, &unsealed, err);
		ok(rc < 0 && strstr(err, "misplaced"), "a checksum not at the line's end: %s", err);
		if (rc == 0)
			msg_free(&m);
	}
	json_decref(h);
	unlink(path);

	msg_buf_free(&b);
	msg_buf_free(&fb);
	blob_codec_free(&c);
	blob_codec_free(&c2);
	return done_testing();
}
