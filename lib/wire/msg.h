/* msg: gem's message framing, the same on the wire and on disk (gem-protocol(7); doc/design.md).
 * A message is one compact JSON object on the first line, '\n', then the binary blobs back to
 * back. The JSON holds the caller's metadata plus "blobs":[{"name","codec","count","size",
 * "crc32"}, ...] in the order the blobs follow, so `head -1 file | jq .` shows everything but
 * the numbers. */
#ifndef GEM_MSG_H
#define GEM_MSG_H
#include <jansson.h>
#include <stddef.h>

#include "wire/blob.h"

#define MSG_NAME_MAX 32
#define MSG_MAX_BLOBS 16
#define MSG_HEAD_MAX (1 << 22) /* a first line longer than this is refused */
#define MSG_PARAMS "params"    /* the name of the parameter blob */
/* A file's header ends with this member: the CRC-32 of the header line before its key */
#define MSG_HEAD_CRC "head_crc32"
#define MSG_CONTENT_TYPE "application/x-gem-message" /* a message's HTTP media type */
/* The first line is padded with spaces to a multiple of this many bytes, so that the first
 * blob starts aligned wherever the message starts aligned: a reader can use a raw blob where
 * it lies (blob_decode_view) */
#define MSG_ALIGN 64
_Static_assert(MSG_HEAD_MAX % MSG_ALIGN == 0, "padding keeps a first line within MSG_HEAD_MAX");

/* One blob of a message: its name, its description, and its encoded bytes. */
struct msg_blob {
	char name[MSG_NAME_MAX];
	struct blob_meta meta;
	const void *data; /* meta.nbytes bytes (in a parsed message: a pointer into its buffer) */
};

/* A growing byte buffer, reused from message to message. */
struct msg_buf {
	char *data;
	size_t len, cap;
};

/* A parsed message: header is a new reference (the whole first-line object, "blobs" too). */
struct msg {
	json_t *header;
	int nblobs;
	struct msg_blob blob[MSG_MAX_BLOBS];
};

/* Release the buffer's memory. */
void msg_buf_free(struct msg_buf *b);
/* Replace b's content with the header line (header's fields + "blobs") and '\n' only, for
 * callers that send the blobs from where they are (fs_write_atomicv, scatter writes). */
int msg_build_head(struct msg_buf *b, json_t *header, const struct msg_blob *blobs, int n,
		   char *err);
/* Replace b's content with the whole message: header line then the blobs. header (an object,
 * NULL for none) is not modified; a "blobs" field in it is replaced. */
int msg_build(struct msg_buf *b, json_t *header, const struct msg_blob *blobs, int n,
	      char *err);
/* Parse buf[0..len): the first line must be a JSON object, each "blobs" entry well formed, and
 * the blob sizes must add up to exactly the bytes after the newline. Blob data points into
 * buf. On success the caller calls msg_free. */
int msg_parse(const void *buf, size_t len, struct msg *m, char *err);
/* Drop the header reference. */
void msg_free(struct msg *m);
/* The blob called name, or NULL. */
const struct msg_blob *msg_find(const struct msg *m, const char *name);

/* A message in a file (every .gem file) is sealed: its header line ends with the member
 * MSG_HEAD_CRC, whose value is the CRC-32 of the line's bytes before that key (from the '{' to
 * the comma), so that a damaged header is refused as a damaged blob is. */
/* msg_parse of a file's bytes, its header checksum checked first (and removed from the header
 * m gets). A header without one (an older gem's file: its line ends with the "blobs" array) is
 * parsed unchecked and *unsealed set (unsealed may be NULL); a checksum that does not match is
 * GEM_EFAIL, "the header is damaged". */
int msg_parse_file(const void *buf, size_t len, struct msg *m, int *unsealed, char *err);
/* Write a sealed message to path atomically (fsutil), without copying the blobs. */
int msg_write_file(const char *path, json_t *header, const struct msg_blob *blobs, int n,
		   char *err);
/* Read and msg_parse_file the message in path (at most max bytes) into b (its old content is
 * replaced) and m; m's blob data points into b, so keep b until done with m. An unsealed file
 * is read with a warning (log); errors name the file. */
int msg_read_file(const char *path, size_t max, struct msg_buf *b, struct msg *m, char *err);

/* The common case, one "params" blob: encode θ[0..count) with codec/level (NULL, -1: the
 * defaults) and build header + blob into b. */
int msg_encode_params(struct msg_buf *b, struct blob_codec *c, json_t *header,
		      const float *theta, size_t count, const char *codec, int level, char *err);
/* Parse buf and decode its "params" blob into θ[0..count) (count checked; θ untouched on
 * failure). *header (if header is not NULL) gets a new reference to the header object. */
int msg_decode_params(const void *buf, size_t len, struct blob_codec *c, json_t **header,
		      float *theta, size_t count, char *err);
/* θ encoded as by msg_encode_params, written to path as msg_write_file does; b is the
 * caller's reusable buffer (for the header line). */
int msg_write_params_file(const char *path, struct msg_buf *b, struct blob_codec *c,
			  json_t *header, const float *theta, size_t count, const char *codec,
			  int level, char *err);
/* Read path (at most max bytes) as msg_read_file does and decode its "params" blob as
 * msg_decode_params does; errors name the file. */
int msg_read_params_file(const char *path, size_t max, struct blob_codec *c, json_t **header,
			 float *theta, size_t count, char *err);
#endif
