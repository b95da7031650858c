/* fuzz-idx: libFuzzer target for the IDX reader of every dataset: idx_parse (any element type,
 * 1 to 4 dimensions) on the input as it is and, when it is gzip'd, on what samples_gunzip
 * inflates; an array taken lies inside its buffer. And idx_dir_load of a directory whose
 * training images are the input (gzip'd or plain), its labels the input too, then a file of
 * as many good labels as the input's first dimension says: samples taken have in-range labels. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "nn/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], images[128], labels[128];

static void write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		abort();
}

/* idx_dir_load of dir; samples taken are whole. */
static void load_dir(void)
{
	char err[GEM_ERRMAX];
	struct samples s;
	if (idx_dir_load(dir, "train", &s, err) != 0)
		return;
	for (size_t i = 0; i < s.n; i++)
		if (s.y[i] >= s.classes)
			abort();
	if (s.dim < 1 || (s.type == SAMPLES_U8 ? ((uint8_t *)s.x)[s.n * s.dim - 1] == 0x5a
					       : ((float *)s.x)[s.n * s.dim - 1] == 1e30f))
		s.n = 0; /* touch the last feature */
	samples_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[GEM_ERRMAX];
	uint8_t *gz;
	struct idx_array a;
	size_t gzlen;
	int parsed;

	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/gem-fuzz-idx.%ld", (long)getpid());
		if (mkdir(dir, 0700) < 0)
			abort();
		snprintf(images, sizeof images, "%s/train-images-idx3-ubyte", dir);
		snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte", dir);
	}
	parsed = idx_parse(data, size, "fuzz", &a, err) == 0;
	if (parsed && (a.data < data || a.data + a.nbytes != data + size))
		abort();
	if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b &&
	    samples_gunzip(data, size, 1 << 24, &gz, &gzlen, "fuzz", err) == 0) {
		if (gz[gzlen] != 0)
			abort();
		idx_parse(gz, gzlen, "fuzz", &a, err);
		free(gz);
	}
	write_file(images, data, size);
	write_file(labels, data, size);
	load_dir();
	if (parsed && a.dims[0] <= 1 << 16) {
		/* good labels, as many as the images say: the images' own checks are reached */
		uint8_t hdr[8] = {0, 0, 0x08, 1, 0, 0, (uint8_t)(a.dims[0] >> 8), (uint8_t)a.dims[0]};
		uint8_t *lab = calloc(1, sizeof hdr + a.dims[0]);
		if (!lab)
			abort();
		memcpy(lab, hdr, sizeof hdr);
		write_file(labels, lab, sizeof hdr + a.dims[0]);
		free(lab);
		load_dir();
	}
	return 0;
}
