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

/* The passes over θ and the copy go DELTA_LANES elements a step, a fixed count that the
 * compiler turns into vector instructions at -O2, then the rest one by one. */
#define DELTA_LANES 8

/* |x| >= DELTA_BOUND, or x not finite, on the bits of x */
static uint32_t delta_big(const float *x)
{
	uint32_t u;
	memcpy(&u, x, sizeof u);
	return (u & 0x7fffffffu) >= 0x7e000000u; /* the bits of DELTA_BOUND, 2^125 */
}

/* 1 if every |θ| and |x̂| is below DELTA_BOUND (a NaN is not) */
static int delta_fits(const float *restrict theta, const float *restrict copy, size_t n)
{
	uint32_t big = 0;
	size_t i = 0;
	for (; i + DELTA_LANES <= n; i += DELTA_LANES)
		for (int j = 0; j < DELTA_LANES; j++)
			big |= delta_big(theta + i + j) | delta_big(copy + i + j);
	for (; i < n; i++)
		big |= delta_big(theta + i) | delta_big(copy + i);
	return !big;
}

/* a[i] += sign·b[i] for i < n: sign 1 or -1, exact either way */
static void delta_add(float *restrict a, const float *restrict b, float sign, size_t n)
{
	size_t i = 0;
	for (; i + DELTA_LANES <= n; i += DELTA_LANES)
		for (int j = 0; j < DELTA_LANES; j++)
			a[i + j] += sign * b[i + j];
	for (; i < n; i++)
		a[i] += sign * b[i];
}

int delta_encode(struct delta *d, struct blob_codec *c, float *theta, const void **out,
		 struct blob_meta *meta, const char **name, char *err)
{
	const float *sent;
	int rc;
	*name = MSG_PARAMS;
	if (!d->copy)
		return blob_encode(c, theta, d->n, blob_codec_for_theta(d->codec), -1, out, meta, err);
	if (d->whole || !delta_fits(theta, d->copy, d->n)) {
		if ((rc = blob_encode(c, theta, d->n, blob_codec_for_theta(d->codec), -1, out, meta,
				      err)) < 0)
			return rc;
		memcpy(d->copy, blob_encoded_values(c, theta), sizeof(float) * d->n);
		d->whole = 0;
		return 0;
	}
	delta_add(theta, d->copy, -1.0f, d->n);
	if ((rc = blob_encode(c, theta, d->n, d->codec, -1, out, meta, err)) < 0)
		return rc;
	sent = blob_encoded_values(c, theta);
	delta_add(d->copy, sent, 1.0f, d->n);
	*name = DELTA_BLOB;
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
	if (is_delta)
		delta_add(d->copy, got, 1.0f, d->n);
	else
		memcpy(d->copy, got, sizeof(float) * d->n);
	d->whole = 0;
	memcpy(v, d->copy, sizeof(float) * d->n);
	return 0;
}

uint32_t delta_crc(const struct delta *d)
{
	int finite;
	return d->copy ? crc32_f32(d->copy, d->n, &finite) : 0;
}
