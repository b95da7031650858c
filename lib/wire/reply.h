/* reply: the HTTP replies of the protocol that carry parameters (GET /v1/params of gem-serve
 * and of SGP nodes): a message of the caller's header and one "params" blob. */
#ifndef GEM_REPLY_H
#define GEM_REPLY_H
#include <jansson.h>
#include <stddef.h>

#include "wire/httpd.h"

/* 400 unless codec (from ?codec=, may be NULL) is one blob knows; 0 if fine. */
int reply_check_codec(struct httpd_req *req, const char *codec);
/* Encode θ (n floats, the caller's copy) with codec under header head and reply 200 with the
 * message, or 500 when encoding fails. */
int reply_params(struct httpd_req *req, json_t *head, const float *theta, size_t n,
		 const char *codec);
#endif
