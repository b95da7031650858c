#include "wire/delta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "wire/crc.h"
#include "wire/msg.h"

int delta_wanted(const char *codec)
{
	return codec && blob_codec_lossy(codec) && strcmp(blob_codec_for_theta(codec), codec);
}

int delta_open(struct delta *d, const char *codec, size_t n, char *err)
{
	memset(d, 0, sizeof *d);
	d->n = n;
	d->whole = 1;
	if (!codec)
		codec = BLOB_RAW;
	if (blob_codec_check(codec, err) < 0)
		return GEM_EUSAGE;
	snprintf(d->codec, sizeof d->codec, "%s", codec);
	if (delta_wanted(codec) && !(d->copy = malloc(sizeof(float) * (n ? n : 1))))
		return gem_errf(err, GEM_ENOMEM, "out of memory for a copy of %zu floats", n);
	return 0;
}

void delta_close(struct delta *d)
{
	free(d->copy);
	memset(d, 0, sizeof *d);
}

void delta_restart(struct delta *d)
{
	d->whole = 1;
}

int delta_encode(struct delta *d, struct blob_codec *c, const float *theta, const void **out,
		 struct blob_meta *meta, const char **name, char *err)
{
	int rc = 1;
	*name = MSG_PARAMS;
	d->crc_known = 0;
	if (!d->copy)
		return blob_encode(c, theta, d->n, blob_codec_for_theta(d->codec), -1, out, meta, err);
	/* a copy that no longer fits takes θ whole, however much of it the attempt changed */
	if (!d->whole && (rc = blob_encode_diff(c, theta, d->copy, d->n, d->codec, DELTA_BOUND, out,
						meta, &d->crc, err)) <= 0) {
		d->crc_known = rc == 0;
		*name = DELTA_BLOB;
		return rc;
	}
	if ((rc = blob_encode(c, theta, d->n, blob_codec_for_theta(d->codec), -1, out, meta, err)) < 0)
		return rc;
	memcpy(d->copy, blob_encoded_values(c, theta), sizeof(float) * d->n);
	d->whole = 0;
	return 0;
}

int delta_take(struct delta *d, int is_delta, const float *got, float *v, char *err)
{
	if (is_delta && (!d->copy || d->whole))
		return gem_errf(err, GEM_EFAIL, "a \"%s\" blob came before θ did", DELTA_BLOB);
	if (!d->copy) {
		if (v != got)
			memcpy(v, got, sizeof(float) * d->n);
		return 0;
	}
	d->crc = blob_take_diff(d->copy, got, v, d->n, is_delta);
	d->crc_known = 1;
	d->whole = 0;
	return 0;
}

uint32_t delta_crc(const struct delta *d)
{
	int finite;
	return !d->copy ? 0 : d->crc_known ? d->crc : crc32_f32(d->copy, d->n, &finite);
}
