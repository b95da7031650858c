#include "nn/cifar.h"
#include "base/err.h"
#include "base/fsutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cifar_parse(const uint8_t *buf, size_t len, int label_bytes, const char *what,
		struct samples *s, size_t cap, char *err)
{
	size_t rec = (size_t)label_bytes + CIFAR_PIXELS, k = len / rec;
	uint8_t *x = s->x;
	if (!len)
		return gem_errf(err, GEM_EFAIL, "%s: empty file", what);
	if (len % rec)
		return gem_errf(err, GEM_EFAIL, "%s: %zu bytes: not a whole number of %zu-byte CIFAR "
				"records (%d label byte%s, then 3,072 pixel bytes); the record at offset %zu "
				"is cut short", what, len, rec, label_bytes, GEM_S(label_bytes), k * rec);
	if (k > cap - s->n)
		return gem_errf(err, GEM_EFAIL, "%s: more records than the file had when counted", what);
	for (size_t i = 0; i < k; i++, s->n++) {
		const uint8_t *r = buf + i * rec;
		s->y[s->n] = r[label_bytes - 1]; /* CIFAR-100: the fine label, after the coarse */
		memcpy(x + s->n * CIFAR_PIXELS, r + label_bytes, CIFAR_PIXELS);
	}
	s->ndim = 3;
	s->shape[0] = 3, s->shape[1] = 32, s->shape[2] = 32;
	s->dim = CIFAR_PIXELS;
	s->type = SAMPLES_U8;
	return 0;
}

/* dir/name into path (PATH_MAX bytes); -1 when it does not fit. */
static int join(char *path, const char *dir, const char *name)
{
	return (size_t)snprintf(path, PATH_MAX, "%s/%s", dir, name) < PATH_MAX ? 0 : -1;
}

static int exists(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;
	return join(path, dir, name) == 0 && stat(path, &st) == 0;
}

/* The directory holding the files (dir or the subdirectory an archive unpacks to: out,
 * PATH_MAX bytes) and their
 * label bytes: 1 for CIFAR-10, 2 for CIFAR-100; 0 when none is found. */
static int find_dir(const char *dir, char *out)
{
	static const struct {
		const char *sub, *probe[2];
		int label_bytes;
	} kinds[] = {
		{.sub = NULL, .probe = {"data_batch_1.bin", "test_batch.bin"}, .label_bytes = 1},
		{.sub = "cifar-10-batches-bin", .probe = {"data_batch_1.bin", "test_batch.bin"}, .label_bytes = 1},
		{.sub = NULL, .probe = {"train.bin", "test.bin"}, .label_bytes = 2},
		{.sub = "cifar-100-binary", .probe = {"train.bin", "test.bin"}, .label_bytes = 2},
	};
	for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
		if (kinds[i].sub ? join(out, dir, kinds[i].sub) < 0
				 : (size_t)snprintf(out, PATH_MAX, "%s", dir) >= PATH_MAX)
			return 0;
		if (exists(out, kinds[i].probe[0]) || exists(out, kinds[i].probe[1]))
			return kinds[i].label_bytes;
	}
	return 0;
}

/* The files of split (names[0..*n)) in d, and their total records; 1 when a test split has none. */
static int split_files(const char *d, int label_bytes, const char *split, char names[][32], int *n,
		       size_t *records, char *err)
{
	size_t rec = (size_t)label_bytes + CIFAR_PIXELS;
	int test = !strcmp(split, "test");
	*n = 0;
	*records = 0;
	if (test)
		snprintf(names[(*n)++], 32, "%s", label_bytes == 1 ? "test_batch.bin" : "test.bin");
	else if (label_bytes == 2)
		snprintf(names[(*n)++], 32, "train.bin");
	else
		for (int b = 1, gap = 0; b <= CIFAR_BATCHES; b++) {
			snprintf(names[*n], 32, "data_batch_%d.bin", b);
			if (!exists(d, names[*n]))
				gap = b;
			else if (gap)
				return gem_errf(err, GEM_EFAIL, "%s: data_batch_%d.bin but no data_batch_%d.bin",
						d, b, gap);
			else
				(*n)++;
		}
	if (test && !exists(d, names[0]))
		return 1;
	for (int i = 0; i < *n; i++) {
		char path[PATH_MAX];
		struct stat st;
		if (join(path, d, names[i]) < 0 || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			return gem_errf(err, GEM_EFAIL, "%s: not a file", path);
		*records += (size_t)st.st_size / rec + ((size_t)st.st_size % rec != 0);
	}
	if (!*n)
		return gem_errf(err, GEM_EFAIL, "%s: no data_batch_1.bin", d);
	if (*records > SAMPLES_MAX_N)
		return gem_errf(err, GEM_EFAIL, "%s: more than %d records", d, SAMPLES_MAX_N);
	return 0;
}

int cifar_load(const char *dir, const char *split, struct samples *s, char *err)
{
	char d[PATH_MAX], names[CIFAR_BATCHES][32];
	int label_bytes, n, rc;
	size_t records;
	memset(s, 0, sizeof *s);
	if (strcmp(split, "train") && strcmp(split, "test"))
		return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)", split);
	if (!(label_bytes = find_dir(dir, d)))
		return gem_errf(err, GEM_EFAIL, "%s: no CIFAR binary files (data_batch_1.bin and "
				"test_batch.bin for CIFAR-10, train.bin and test.bin for CIFAR-100, here "
				"or in cifar-10-batches-bin/ or cifar-100-binary/)", dir);
	if ((rc = split_files(d, label_bytes, split, names, &n, &records, err)) != 0)
		return rc;
	s->x = malloc(records ? records * CIFAR_PIXELS : 1);
	s->y = malloc(records ? records * sizeof *s->y : 1);
	if (!s->x || !s->y) {
		samples_free(s);
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu records)", d, records);
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		void *buf;
		size_t len;
		rc = join(path, d, names[i]) < 0 ? gem_errf(err, GEM_EUSAGE, "%s: path too long", d)
						  : fs_read_all(path, &buf, &len, (records - s->n) * (label_bytes + CIFAR_PIXELS), err);
		if (rc == 0) {
			rc = cifar_parse(buf, len, label_bytes, path, s, records, err);
			free(buf);
		}
		if (rc < 0) {
			samples_free(s);
			return rc;
		}
	}
	samples_count_classes(s);
	return 0;
}
