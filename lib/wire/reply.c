#include "wire/reply.h"

#include <stdlib.h>

#include "wire/blob.h"
#include "base/err.h"
#include "wire/msg.h"

int reply_check_codec(struct httpd_req *req, const char *codec)
{
	if (codec && !blob_codec_known(codec)) {
		httpd_reply_error(req, 400, "bad_codec", "unknown codec \"%s\"", codec);
		return -1;
	}
	return 0;
}

int reply_params(struct httpd_req *req, json_t *head, const float *theta, size_t n,
		 const char *codec)
{
	char err[GEM_ERRMAX];
	struct blob_codec c;
	struct msg_buf b = {0};
	int rc;

	blob_codec_init(&c);
	rc = msg_encode_params(&b, &c, head, theta, n, codec, -1, err);
	if (rc == 0) {
		/* the buffer goes to libmicrohttpd, which frees it once sent */
		rc = httpd_reply_owned(req, 200, MSG_CONTENT_TYPE, b.data, b.len, free, b.data);
		b.data = NULL;
	} else {
		rc = httpd_reply_error(req, 500, "encode", "%s", err);
	}
	blob_codec_free(&c);
	msg_buf_free(&b);
	return rc;
}
