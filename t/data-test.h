/* data-test.h: the data file tests' fixtures (t2009-t2012): t/gem-arrays.py FORMAT writes them
 * into a temporary directory, with the contents below; bad() checks that a load failed with a
 * message that says what. */
#ifndef GEM_DATA_TEST_H
#define GEM_DATA_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/samples.h"
#include "tap.h"

#define N_SAMPLES 12
#define N_CLASSES 5

static char fixture_dir[512];

/* The good files' features and labels (gem-arrays.py's xb, xf, and labels). */
static inline unsigned xb(size_t i, size_t j)
{
	return (unsigned)((i * 7 + j * 3) % 251);
}

static inline float xf(size_t i, size_t j)
{
	return (float)(((double)i - (double)j) / 8);
}

/* A directory of the files of format (csv, npy, npz, idx, cifar); skips the test without
 * python3. */
static const char *fixtures(const char *format)
{
	char cmd[1200];
	const char *src = getenv("GEM_SRC");
	snprintf(fixture_dir, sizeof fixture_dir, "%s/gem-%s.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		 format);
	if (!mkdtemp(fixture_dir))
		skip_all("cannot make a temporary directory");
	snprintf(cmd, sizeof cmd, "python3 '%s/t/gem-arrays.py' %s '%s'", src ? src : ".", format, fixture_dir);
	if (system(cmd) != 0)
		skip_all("t/gem-arrays.py failed (python3 missing?)");
	return fixture_dir;
}

static inline void fixtures_remove(void)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", fixture_dir);
	if (system(cmd) != 0)
		diag("could not remove %s", fixture_dir);
}

/* A path in the fixture directory. */
static const char *fx(const char *name)
{
	static char path[2][1024];
	static int k;
	k = !k;
	snprintf(path[k], sizeof path[k], "%s/%s", fixture_dir, name);
	return path[k];
}

/* rc is an error whose message holds each of the strings want (NULL-terminated). */
#define bad(rc, err, ...) bad_((rc), (err), (const char *[]){__VA_ARGS__, NULL})
static inline int bad_(int rc, const char *err, const char **want)
{
	if (rc >= 0)
		return 0;
	for (; *want; want++)
		if (!strstr(err, *want)) {
			diag("missing \"%s\" in: %s", *want, err);
			return 0;
		}
	return 1;
}

/* s holds the good files' labels y[i] = i % N_CLASSES. */
static inline int labels_ok(const struct samples *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->y[i] != i % N_CLASSES)
			return 0;
	return s->classes == N_CLASSES;
}

/* s holds float features xf(i, j) for j < dim. */
static inline int floats_ok(const struct samples *s)
{
	const float *x = s->x;
	if (s->type != SAMPLES_F32)
		return 0;
	for (size_t i = 0; i < s->n; i++)
		for (size_t j = 0; j < s->dim; j++)
			if (x[i * s->dim + j] != xf(i, j))
				return 0;
	return 1;
}

/* s holds byte features xb(i, j). */
static inline int bytes_ok(const struct samples *s)
{
	const unsigned char *x = s->x;
	if (s->type != SAMPLES_U8)
		return 0;
	for (size_t i = 0; i < s->n; i++)
		for (size_t j = 0; j < s->dim; j++)
			if (x[i * s->dim + j] != xb(i, j))
				return 0;
	return 1;
}
#endif
