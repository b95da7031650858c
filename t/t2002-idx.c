/* t2002: IDX files, plain and gzip'd (also larger than the reader's chunk, and in two
 * members), load right; truncated, corrupt, wrong-magic, garbage, empty and mismatched files
 * are errors that name the file; datasets are found by name. */
#include "nn/data.h"
#include "base/err.h"
#include "tap.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];

static void be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* An IDX file in memory: magic, dims, then payload; caller frees. */
static unsigned char *make_idx(uint32_t magic, int ndims, const uint32_t *dims,
			       const unsigned char *payload, size_t plen, size_t *len)
{
	unsigned char *b = malloc(4 + 4 * (size_t)ndims + plen);
	be32(b, magic);
	for (int i = 0; i < ndims; i++)
		be32(b + 4 + 4 * i, dims[i]);
	memcpy(b + 4 + 4 * ndims, payload, plen);
	*len = 4 + 4 * (size_t)ndims + plen;
	return b;
}

static const char *put(const char *name, const void *buf, size_t len, int gz)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (gz) {
		gzFile f = gzopen(path, "wb");
		gzwrite(f, buf, (unsigned)len);
		gzclose(f);
	} else {
		FILE *f = fopen(path, "wb");
		fwrite(buf, 1, len, f);
		fclose(f);
	}
	return path;
}

static char bad_dir[512];

/* Whether the directory bad_dir, its train images the len bytes at buf (gzip'd when gz), fails
 * to load with an error that names the images file and holds want; err gets the error ("" when
 * it loaded). */
static int bad_images(const void *buf, size_t len, int gz, char *err, const char *want)
{
	struct dataset d;
	int rc;
	put("bad/train-images-idx3-ubyte", buf, len, gz);
	err[0] = 0;
	rc = dataset_load(bad_dir, "train", &d, err);
	dataset_free(&d);
	return rc < 0 && strstr(err, "/bad/train-images-idx3-ubyte:") && strstr(err, want);
}

/* The n bytes at src as one gzip member, deflated at level (0: stored, its size known to the
 * byte); *len its size. Caller frees. */
static unsigned char *gz_member(const unsigned char *src, size_t n, int level, size_t *len)
{
	z_stream z = {0};
	unsigned char *out = malloc(n + n / 8 + 1024);
	deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
	z.next_in = (unsigned char *)src;
	z.avail_in = (unsigned)n;
	z.next_out = out;
	z.avail_out = (unsigned)(n + n / 8 + 1024);
	deflate(&z, Z_FINISH);
	*len = z.total_out;
	deflateEnd(&z);
	return out;
}

/* Whether the directory big (its labels there), its train images the n bytes at a then the m
 * at b, loads with pixels pix (n_pix bytes); err gets the error. */
static int loads_as(const char *big, const void *a, size_t n, const void *b, size_t m,
		    const unsigned char *pix, size_t n_pix, char *err)
{
	char path[600];
	struct dataset d;
	FILE *f;
	int same;
	snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", big);
	f = fopen(path, "wb");
	fwrite(a, 1, n, f);
	if (m)
		fwrite(b, 1, m, f);
	fclose(f);
	err[0] = 0;
	same = dataset_load(big, "train", &d, err) == 0 && (size_t)d.n * (size_t)d.dim == n_pix &&
	       !memcmp(d.images, pix, n_pix);
	dataset_free(&d);
	return same;
}

/* A gzip'd file is inflated as it is read, a chunk at a time (lib/nn/samples.c: 256 KiB): one
 * larger than a chunk, and two members whose boundary falls on each side of a chunk's end, load
 * as the plain file; a trailer that lies about the size is refused. */
static void big_gzip(void)
{
	enum { BN = 600, BR = 28, BC = 28, CHUNK = 1 << 18 };
	uint32_t dims[3] = {BN, BR, BC}, ldims[1] = {BN};
	unsigned char *pix = malloc(BN * BR * BC), lab[BN], *img, *lbl, *m1, *m2;
	size_t ilen, llen, l1, l2, cut;
	char err[GEM_ERRMAX], big[600];
	uint32_t r = 1;
	int all = 1;
	for (int i = 0; i < BN * BR * BC; i++) /* noise: it deflates to more than a chunk */
		pix[i] = (unsigned char)((r = r * 1103515245u + 12345u) >> 24);
	for (int i = 0; i < BN; i++)
		lab[i] = (unsigned char)(i % 10);
	img = make_idx(0x803, 3, dims, pix, BN * BR * BC, &ilen);
	lbl = make_idx(0x801, 1, ldims, lab, BN, &llen);
	snprintf(big, sizeof big, "%s/big", dir);
	mkdir(big, 0755);
	put("big/train-labels-idx1-ubyte", lbl, llen, 0);
	m1 = gz_member(img, ilen, 6, &l1);
	ok(l1 > CHUNK && loads_as(big, m1, l1, NULL, 0, pix, BN * BR * BC, err),
	   "a gzip'd file of %zu bytes (more than a chunk) loads: %s", l1, err);
	m1[l1 - 1] ^= 1; /* ISIZE's high byte: 16 MiB more than the stream holds */
	ok(!loads_as(big, m1, l1, NULL, 0, pix, BN * BR * BC, err) && strstr(err, "gzip"),
	   "a trailer claiming more bytes than inflate: %s", err);
	m1[l1 - 4] ^= 1; /* ... and less */
	m1[l1 - 1] ^= 1;
	ok(!loads_as(big, m1, l1, NULL, 0, pix, BN * BR * BC, err) && strstr(err, "gzip"),
	   "a trailer claiming fewer: %s", err);
	free(m1);
	/* a stored first member ends where the header, 5 bytes a stored block and the trailer say:
	 * cut the file so that it ends 2, 1 bytes before a chunk's end, at it, 1 byte after */
	for (long end = CHUNK - 2; end <= CHUNK + 1; end++) {
		cut = (size_t)end;
		for (int k = 0; k < 8; k++) { /* the size converges in a step or two */
			m1 = gz_member(img, cut, 0, &l1);
			if (l1 == (size_t)end)
				break;
			cut += (size_t)end - l1;
			free(m1);
			m1 = NULL;
		}
		if (!m1) {
			all = 0;
			diag("no stored member of %ld bytes", end);
			continue;
		}
		m2 = gz_member(img + cut, ilen - cut, 6, &l2);
		all &= loads_as(big, m1, l1, m2, l2, pix, BN * BR * BC, err);
		if (err[0])
			diag("members of %zu and %zu bytes: %s", l1, l2, err);
		free(m1);
		free(m2);
	}
	ok(all, "two gzip members, the first ending 2 and 1 bytes before a chunk's end, at it, after");
	free(pix);
	free(img);
	free(lbl);
}

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = malloc(1 << 20);
	*len = fread(b, 1, 1 << 20, f);
	fclose(f);
	return b;
}

int main(void)
{
	enum { N = 50, R = 4, C = 3 };
	char err[GEM_ERRMAX] = "", path[512], sub[512], found[512];
	unsigned char pix[N * R * C], lab[N], *img, *lbl, *gz;
	uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
	size_t ilen, llen, glen;
	struct dataset d;
	double mean, std;
	float x[2 * R * C];
	uint16_t y[2];
	uint32_t pick[2] = {7, 3};

	snprintf(dir, sizeof dir, "%s/gem-t2002.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		skip_all("cannot make a temporary directory");
	for (int i = 0; i < N * R * C; i++)
		pix[i] = (unsigned char)(i * 37 % 256);
	for (int i = 0; i < N; i++)
		lab[i] = (unsigned char)(i % 7);
	img = make_idx(0x803, 3, idims, pix, sizeof pix, &ilen);
	lbl = make_idx(0x801, 1, ldims, lab, sizeof lab, &llen);

	/* train gzip'd, test plain */
	put("train-images-idx3-ubyte.gz", img, ilen, 1);
	put("train-labels-idx1-ubyte.gz", lbl, llen, 1);
	put("t10k-images-idx3-ubyte", img, ilen, 0);
	put("t10k-labels-idx1-ubyte", lbl, llen, 0);
	ok(dataset_load(dir, "train", &d, err) == 0, "gzip'd train split loads: %s", err);
	ok(d.n == N && d.rows == R && d.cols == C && d.dim == R * C && d.classes == 7,
	   "shape %d×%d×%d, %d classes", d.n, d.rows, d.cols, d.classes);
	{
		int same = d.images && d.labels && !memcmp(d.images, pix, sizeof pix);
		for (int i = 0; same && i < N; i++)
			same = d.labels[i] == lab[i];
		ok(same, "pixels and labels as written");
	}
	dataset_stats(&d, &mean, &std);
	{
		double s = 0, s2 = 0;
		for (int i = 0; i < N * R * C; i++)
			s += pix[i] / 255.0;
		s /= N * R * C;
		for (int i = 0; i < N * R * C; i++)
			s2 += (pix[i] / 255.0 - s) * (pix[i] / 255.0 - s);
		is_near(mean, s, 1e-12, "mean");
		is_near(std, sqrt(s2 / (N * R * C)), 1e-12, "std");
	}
	dataset_fill(&d, pick, 0, 2, 0.5f, 0.25f, x, y);
	ok(y[0] == lab[7] && y[1] == lab[3], "dataset_fill takes labels through idx");
	is_near(x[R * C + 5], (pix[3 * R * C + 5] / 255.0 - 0.5) / 0.25, 1e-6,
		"dataset_fill normalises");
	dataset_fill(&d, NULL, 10, 1, 0.f, 1.f, x, NULL);
	is_near(x[0], pix[10 * R * C] / 255.0, 1e-7, "dataset_fill over a range, y NULL");
	dataset_free(&d);
	ok(dataset_load(dir, "test", &d, err) == 0 && d.n == N && !memcmp(d.images, pix, sizeof pix),
	   "plain test split loads: %s", err);
	dataset_free(&d);
	ok(dataset_load(dir, "valid", &d, err) == GEM_EUSAGE, "unknown split: %s", err);

	/* Bad images files, each one an error naming the file, through the one reader of a
	 * directory's IDX files (labels good). */
	snprintf(bad_dir, sizeof bad_dir, "%s/bad", dir);
	mkdir(bad_dir, 0755);
	put("bad/train-labels-idx1-ubyte", lbl, llen, 0);
	ok(bad_images(img, ilen - 7, 0, err, "more elements than"), "truncated plain: %s", err);
	ok(bad_images(img, 10, 0, err, "truncated IDX header"), "truncated header: %s", err);
	ok(bad_images(img, 0, 0, err, "empty"), "empty file: %s", err);
	{
		unsigned char junk[4000];
		for (size_t i = 0; i < sizeof junk; i++)
			junk[i] = (unsigned char)(i * 2654435761u >> 13);
		junk[0] = 0x12;
		ok(bad_images(junk, sizeof junk, 0, err, "magic"), "garbage: %s", err);
		junk[0] = 0x1f, junk[1] = 0x8b; /* gzip magic, then garbage */
		ok(bad_images(junk, sizeof junk, 0, err, "gzip"), "garbage behind a gzip magic: %s", err);
	}
	{
		unsigned char *more = malloc(ilen + 3);
		memcpy(more, img, ilen);
		memset(more + ilen, 0, 3);
		ok(bad_images(more, ilen + 3, 0, err, "after"), "trailing data: %s", err);
		free(more);
	}
	{
		/* A header claiming 2^31-1 images of 28² is refused before anything is allocated. */
		uint32_t huge[3] = {0x7fffffff, 28, 28};
		size_t hl;
		unsigned char *h = make_idx(0x803, 3, huge, pix, sizeof pix, &hl);
		ok(bad_images(h, hl, 1, err, "more elements"), "lying header: %s", err);
		huge[0] = 0;
		free(h);
		h = make_idx(0x803, 3, huge, pix, 0, &hl);
		ok(bad_images(h, hl, 0, err, "is 0"), "zero samples: %s", err);
		free(h);
	}
	/* gzip'd: cut short, and a flipped byte in the middle */
	put("a", img, ilen, 1);
	snprintf(path, sizeof path, "%s/a", dir);
	gz = slurp(path, &glen);
	ok(bad_images(gz, glen - 12, 0, err, "gzip"), "truncated gzip: %s", err);
	ok(bad_images(gz, glen - 4, 0, err, "gzip"), "gzip without its length trailer: %s", err);
	gz[glen / 2] ^= 0x55;
	ok(bad_images(gz, glen, 0, err, "gzip"), "corrupt gzip: %s", err);
	gz[glen / 2] ^= 0x55;
	gz[glen - 6] ^= 1; /* the CRC32 trailer */
	ok(bad_images(gz, glen, 0, err, "gzip"), "bad gzip CRC: %s", err);
	ok(!bad_images(img, ilen, 0, err, "") && !err[0], "the same directory with good images "
	   "loads: %s", err);
	free(gz);

	big_gzip();

	/* Mismatched counts: 49 labels for 50 images. */
	free(lbl);
	ldims[0] = N - 1;
	lbl = make_idx(0x801, 1, ldims, lab, N - 1, &llen);
	put("t10k-labels-idx1-ubyte", lbl, llen, 0);
	ok(dataset_load(dir, "test", &d, err) < 0 && strstr(err, "t10k-labels-idx1-ubyte") &&
		   strstr(err, "t10k-images-idx3-ubyte") && !d.images,
	   "count mismatch: %s", err);
	snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
	unlink(path);
	ok(dataset_load(dir, "test", &d, err) < 0 && strstr(err, "t10k-images-idx3-ubyte"),
	   "missing file: %s", err);
	put("t10k-images-idx3-ubyte", img, ilen - 1, 0);
	ok(dataset_load(dir, "test", &d, err) < 0 && strstr(err, "t10k-images-idx3-ubyte"),
	   "truncated images in a split: %s", err);

	/* Finding datasets */
	ok(dataset_resolve(dir, found, sizeof found, err) == 0 && !strcmp(found, dir),
	   "a directory is used as is");
	snprintf(sub, sizeof sub, "%s/sets/toy", dir);
	snprintf(path, sizeof path, "%s/sets", dir);
	mkdir(path, 0755);
	mkdir(sub, 0755);
	{
		char env[1200];
		snprintf(env, sizeof env, "::%s/nowhere:%s", dir, path);
		setenv("GEM_DATA_PATH", env, 1);
	}
	ok(dataset_resolve("toy", found, sizeof found, err) == 0 && !strcmp(found, sub),
	   "a name is found in $GEM_DATA_PATH: %s", found);
	ok(dataset_resolve("toy", found, 8, err) < 0, "too small a buffer is an error");
	ok(dataset_resolve("nosuchset", found, sizeof found, err) < 0 &&
		   strstr(err, "nowhere/nosuchset") && strstr(err, "sets/nosuchset") &&
		   strstr(err, "/usr/share/datasets/nosuchset"),
	   "not found lists where it looked: %s", err);
	ok(dataset_resolve("./no/such", found, sizeof found, err) < 0, "a missing path: %s", err);
	unsetenv("GEM_DATA_PATH");
	if (access("/usr/share/datasets/fashion-mnist", F_OK) == 0)
		ok(dataset_resolve("fashion-mnist", found, sizeof found, err) == 0 &&
			   !strcmp(found, "/usr/share/datasets/fashion-mnist"),
		   "the system directory is the fallback");

	free(img);
	free(lbl);
	{
		char cmd[600];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			diag("could not remove %s", dir);
	}
	return done_testing();
}
