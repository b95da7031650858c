#include "nn/data.h"
#include "nn/samples.h"
#include "base/err.h"
#include "base/rng.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_LABELS 0x00000801u /* unsigned bytes, 1 dimension */

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dataset_resolve(const char *name_or_dir, char *dir, size_t cap, char *err)
{
	char looked[GEM_ERRMAX] = "", cand[4096];
	const char *path = getenv("GEM_DATA_PATH"), *p, *end = NULL;
	size_t lk = 0;
	if (!name_or_dir || !*name_or_dir)
		return gem_errf(err, GEM_EUSAGE, "dataset: empty name");
	if (!strncmp(name_or_dir, DATA_TEXT_PREFIX, strlen(DATA_TEXT_PREFIX))) {
		const char *file = name_or_dir + strlen(DATA_TEXT_PREFIX);
		if (!is_file(file))
			return gem_errf(err, GEM_EUSAGE, "%s: %s", name_or_dir,
					access(file, F_OK) ? "no such file" : "not a regular file");
		if (strlen(file) >= cap)
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", file);
		snprintf(dir, cap, "%s", file);
		return 0;
	}
	/* "." and ".." name no dataset; in a search path they would step out of it */
	if (!strcmp(name_or_dir, ".") || !strcmp(name_or_dir, ".."))
		return gem_errf(err, GEM_EUSAGE, "dataset: \"%s\" is not a dataset name (give a path such "
				"as ./DIR)", name_or_dir);
	if (is_dir(name_or_dir)) {
		if (strlen(name_or_dir) >= cap)
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", name_or_dir);
		snprintf(dir, cap, "%s", name_or_dir);
		return 0;
	}
	if (strchr(name_or_dir, '/'))
		return gem_errf(err, GEM_EUSAGE, "%s: not a directory", name_or_dir);
	/* $GEM_DATA_PATH entries (empty ones skipped), then the system directory. */
	for (p = path; p && *p; p = end ? end + 1 : NULL) {
		size_t len;
		end = strchr(p, ':');
		len = end ? (size_t)(end - p) : strlen(p);
		if (!len)
			continue;
		snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, name_or_dir);
		if (is_dir(cand))
			goto found;
		if (lk < sizeof looked)
			lk += (size_t)snprintf(looked + lk, sizeof looked - lk, "%s, ", cand);
	}
	snprintf(cand, sizeof cand, "%s/%s", DATA_DIR_DEFAULT, name_or_dir);
	if (is_dir(cand))
		goto found;
	return gem_errf(err, GEM_EUSAGE,
			"dataset '%s' not found (looked in %s%s; set GEM_DATA_PATH or give a "
			"directory%s)", name_or_dir, looked, cand,
			strcmp(name_or_dir, DATA_KJV) ? ""
			: "; make deps writes it: COLUMNS=80 bible 'Gen1:1-Rev22:21' > DIR/kjv/kjv.txt, "
			  "with Debian's bible-kjv");
found:
	if (strlen(cand) >= cap)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", cand);
	snprintf(dir, cap, "%s", cand);
	return 0;
}

/* gzread for any length (it takes an unsigned int); returns bytes read, or -1 on an error. */
static long long gz_read_full(gzFile f, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		size_t want = len - got > (1u << 30) ? (1u << 30) : len - got;
		int r = gzread(f, (char *)buf + got, (unsigned)want);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (long long)got;
}

/* After a read that returned r: the error gzread met, if any (corrupt data, a stream cut
 * short, an I/O error), else 0. zlib's message starts with the path already. */
static int gz_check(gzFile f, long long r, const char *path, char *err)
{
	int zerr;
	const char *msg = gzerror(f, &zerr);
	size_t plen = strlen(path);
	if (zerr == Z_OK)
		return r < 0 ? gem_errf(err, GEM_EFAIL, "%s: read error", path) : 0;
	if (!strncmp(msg, path, plen) && !strncmp(msg + plen, ": ", 2))
		msg += plen + 2;
	if (zerr == Z_ERRNO)
		msg = strerror(errno);
	return gem_errf(err, zerr == Z_MEM_ERROR ? GEM_ENOMEM : GEM_EFAIL, "%s: %s: %s", path,
			zerr == Z_BUF_ERROR    ? "truncated"
			: zerr == Z_DATA_ERROR ? "corrupt data"
					       : "read error",
			msg);
}

int idx_load(const char *path, uint32_t want_magic, uint32_t dims[3], uint8_t **data,
	     char *err)
{
	unsigned char hdr[4 + 12], extra;
	int ndims = (int)(want_magic & 0xff), rc = GEM_EFAIL;
	size_t total = 1, cap, got = 0;
	uint8_t *buf = NULL, *nb;
	uint32_t magic;
	long long r;
	gzFile f;
	*data = NULL;
	if (ndims < 1 || ndims > 3)
		return gem_errf(err, GEM_EUSAGE, "%s: unsupported IDX magic 0x%08x", path,
				want_magic);
	errno = 0;
	f = gzopen(path, "rb");
	if (!f)
		return gem_errf(err, GEM_EFAIL, "%s: %s", path,
				errno ? strerror(errno) : "out of memory");
	gzbuffer(f, 1 << 17);
	r = gz_read_full(f, hdr, 4 + 4 * (size_t)ndims);
	if ((rc = gz_check(f, r, path, err)) < 0)
		goto out;
	if (r < 4) {
		rc = gem_errf(err, GEM_EFAIL, "%s: %s", path,
			      r ? "truncated IDX header" : "empty file");
		goto out;
	}
	magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (magic != want_magic) {
		rc = gem_errf(err, GEM_EFAIL,
			      "%s: not an IDX %s file (magic 0x%08x, want 0x%08x)", path,
			      want_magic == IDX_IMAGES ? "images" : "labels", magic, want_magic);
		goto out;
	}
	if (r < 4 + 4 * ndims) {
		rc = gem_errf(err, GEM_EFAIL, "%s: truncated IDX header", path);
		goto out;
	}
	for (int i = 0; i < ndims; i++) {
		const unsigned char *q = hdr + 4 + 4 * i;
		dims[i] = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
		/* Sample counts up to INT_MAX, image sides up to 2^15: far beyond any IDX set,
		 * and small enough that no product below overflows. */
		if (dims[i] == 0 || dims[i] > (i ? 32768u : (uint32_t)INT_MAX)) {
			rc = gem_errf(err, GEM_EFAIL, "%s: IDX dimension %d is %u", path, i,
				      dims[i]);
			goto out;
		}
		total *= dims[i];
	}
	if (ndims == 3 && (size_t)dims[1] * dims[2] > (1u << 24)) {
		rc = gem_errf(err, GEM_EFAIL, "%s: images of %u×%u are too large", path, dims[1],
			      dims[2]);
		goto out;
	}
	/* Grow the buffer as data arrives, so a header that lies about its sizes costs a
	 * truncation error, not a huge allocation. */
	cap = total < (1u << 20) ? total : (1u << 20);
	for (;;) {
		nb = realloc(buf, cap);
		if (!nb) {
			rc = gem_errf(err, GEM_ENOMEM, "%s: out of memory (%zu bytes)", path, cap);
			goto out;
		}
		buf = nb;
		r = gz_read_full(f, buf + got, cap - got);
		if ((rc = gz_check(f, r, path, err)) < 0)
			goto out;
		got += (size_t)r;
		if (got < cap) {
			rc = gem_errf(err, GEM_EFAIL, "%s: truncated: %zu of %zu data bytes", path,
				      got, total);
			goto out;
		}
		if (cap == total)
			break;
		cap = total / 2 < cap ? total : cap * 2;
	}
	/* One more read: trailing bytes are an error, and for gzip it checks the CRC trailer. */
	r = gz_read_full(f, &extra, 1);
	if ((rc = gz_check(f, r, path, err)) < 0)
		goto out;
	if (r > 0) {
		rc = gem_errf(err, GEM_EFAIL, "%s: data after the %zu bytes the header gives", path,
			      total);
		goto out;
	}
	*data = buf;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	gzclose(f);
	return rc;
}

/* dir/name.gz if it exists, else dir/name; an error names both when neither does. */
static int find_file(const char *dir, const char *name, char *path, size_t cap, char *err)
{
	if ((size_t)snprintf(path, cap, "%s/%s.gz", dir, name) >= cap)
		return gem_errf(err, GEM_EUSAGE, "%s: path too long", dir);
	if (access(path, F_OK) == 0)
		return 0;
	snprintf(path, cap, "%s/%s", dir, name);
	if (access(path, F_OK) == 0)
		return 0;
	return gem_errf(err, GEM_EFAIL, "%s: no %s or %s.gz", dir, name, name);
}

/* The text file of dataset dir: dir itself when it is a file, else dir/NAME.txt for a
 * directory named NAME, if it is there. 1 found (path written), 0 not a text. */
static int text_path(const char *dir, char *path, size_t cap)
{
	const char *end = dir + strlen(dir), *base;
	if (is_file(dir))
		return (size_t)snprintf(path, cap, "%s", dir) < cap;
	while (end > dir && end[-1] == '/')
		end--;
	for (base = end; base > dir && base[-1] != '/'; base--)
		;
	if (base == end ||
	    (size_t)snprintf(path, cap, "%.*s/%.*s.txt", (int)(end - dir), dir, (int)(end - base), base) >= cap)
		return 0;
	return is_file(path);
}

/* Split "train" (the first ⌊len·(H−1)/H⌋ bytes, H = DATA_TEXT_HOLD_OUT) or "test" (the rest)
 * of the text in path; classes from the largest byte of the whole file. */
static int text_load(const char *path, const char *split, struct dataset *out, char *err)
{
	int test = !strcmp(split, "test") || !strcmp(split, "t10k"), maxb = 0, rc;
	uint8_t *all;
	size_t len, cut;
	if (!test && strcmp(split, "train"))
		return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)", split);
	/* offsets are uint32 (struct batcher's order) */
	if ((rc = samples_read_file(path, UINT32_MAX - 1, &all, &len, err)) < 0)
		return rc;
	if (len == 0) {
		free(all);
		return gem_errf(err, GEM_EFAIL, "%s: empty", path);
	}
	for (size_t i = 0; i < len; i++)
		maxb = all[i] > maxb ? all[i] : maxb;
	cut = (size_t)((uint64_t)len * (DATA_TEXT_HOLD_OUT - 1) / DATA_TEXT_HOLD_OUT);
	out->len = test ? len - cut : cut;
	out->classes = maxb + 1;
	out->text = malloc(out->len ? out->len : 1);
	if (out->text)
		memcpy(out->text, all + (test ? cut : 0), out->len);
	free(all);
	return out->text ? 0 : gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
}

int dataset_window(struct dataset *d, int seq, char *err)
{
	if (!d->text)
		return gem_errf(err, GEM_EUSAGE, "dataset: not a text, no windows");
	if (seq < 1 || d->len < (size_t)seq + 1)
		return gem_errf(err, GEM_EUSAGE, "the text has %zu bytes: too few for a window of %d and the byte after",
				d->len, seq);
	if ((d->len - 1) / (size_t)seq > INT_MAX)
		return gem_errf(err, GEM_EUSAGE, "the text has too many windows of %d bytes", seq);
	d->seq = seq;
	d->rows = 1;
	d->cols = d->dim = seq;
	d->n = (int)((d->len - 1) / (size_t)seq);
	return 0;
}

int dataset_load(const char *dir, const char *split, struct dataset *out, char *err)
{
	char ipath[4096], lpath[4096], name[64];
	uint32_t idims[3], ldims[3];
	const char *prefix;
	int rc, maxl = -1;
	memset(out, 0, sizeof *out);
	if (text_path(dir, ipath, sizeof ipath))
		return text_load(ipath, split, out, err);
	if (!strcmp(split, "train"))
		prefix = "train";
	else if (!strcmp(split, "test") || !strcmp(split, "t10k"))
		prefix = "t10k";
	else
		return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)",
				split);
	snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
	if ((rc = find_file(dir, name, ipath, sizeof ipath, err)) < 0)
		return rc;
	snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
	if ((rc = find_file(dir, name, lpath, sizeof lpath, err)) < 0)
		return rc;
	if ((rc = idx_load(ipath, IDX_IMAGES, idims, &out->images, err)) < 0)
		return rc;
	if ((rc = idx_load(lpath, IDX_LABELS, ldims, &out->labels, err)) < 0) {
		dataset_free(out);
		return rc;
	}
	if (idims[0] != ldims[0]) {
		dataset_free(out);
		return gem_errf(err, GEM_EFAIL, "%s: %u images but %s: %u labels", ipath, idims[0],
				lpath, ldims[0]);
	}
	out->n = (int)idims[0];
	out->rows = (int)idims[1];
	out->cols = (int)idims[2];
	out->dim = out->rows * out->cols;
	for (int i = 0; i < out->n; i++)
		if (out->labels[i] > maxl)
			maxl = out->labels[i];
	out->classes = maxl + 1;
	return 0;
}

int dataset_count(const char *dir, const char *split, uint64_t *n, char *err)
{
	char path[4096];
	uint32_t dims[3];
	uint8_t *labels;
	int rc;
	if (strcmp(split, "train") && strcmp(split, "test"))
		return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)", split);
	if (text_path(dir, path, sizeof path)) {
		struct dataset text = {0};
		if ((rc = text_load(path, split, &text, err)) == 0)
			*n = text.len;
		dataset_free(&text);
		return rc;
	}
	if ((rc = find_file(dir, strcmp(split, "train") ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte",
			    path, sizeof path, err)) < 0 ||
	    (rc = idx_load(path, IDX_LABELS, dims, &labels, err)) < 0)
		return rc;
	free(labels);
	*n = dims[0];
	return 0;
}

void dataset_free(struct dataset *d)
{
	free(d->images);
	free(d->labels);
	free(d->text);
	memset(d, 0, sizeof *d);
}

void dataset_stats(const struct dataset *d, double *mean, double *std)
{
	/* A histogram makes it exact and fast: 256 distinct values, whatever n is. */
	uint64_t hist[256] = {0};
	const uint8_t *x = d->text ? d->text : d->images;
	size_t total = d->text ? d->len : (size_t)d->n * (size_t)d->dim;
	double m = 0, v = 0;
	for (size_t i = 0; i < total; i++)
		hist[x[i]]++;
	if (!total) {
		*mean = 0;
		*std = 0;
		return;
	}
	for (int k = 0; k < 256; k++)
		m += (double)hist[k] * (k / 255.0);
	m /= (double)total;
	for (int k = 0; k < 256; k++)
		v += (double)hist[k] * (k / 255.0 - m) * (k / 255.0 - m);
	*mean = m;
	*std = sqrt(v / (double)total);
}

static void make_lut(float lut[256], float mean, float std)
{
	for (int k = 0; k < 256; k++)
		lut[k] = (float)((k / 255.0 - mean) / std);
}

void dataset_fill_window(const struct dataset *d, size_t off, float *restrict x, uint8_t *restrict y)
{
	const uint8_t *src = d->text + off;
	for (int j = 0; j < d->seq; j++)
		x[j] = (float)src[j];
	if (y)
		memcpy(y, src + 1, (size_t)d->seq);
}

static void fill(const struct dataset *d, const float lut[256], const uint32_t *idx,
		 size_t start, size_t n, float *restrict x, uint8_t *restrict y)
{
	size_t dim = (size_t)d->dim;
	if (d->text) { /* sample s: the window at s·seq */
		for (size_t k = 0; k < n; k++)
			dataset_fill_window(d, (idx ? idx[start + k] : start + k) * dim, x + k * dim, y ? y + k * dim : NULL);
		return;
	}
	for (size_t k = 0; k < n; k++) {
		size_t s = idx ? idx[start + k] : start + k;
		const uint8_t *restrict src = d->images + s * dim;
		float *restrict dst = x + k * dim;
		for (size_t j = 0; j < dim; j++)
			dst[j] = lut[src[j]];
		if (y)
			y[k] = d->labels[s];
	}
}

void dataset_fill(const struct dataset *d, const uint32_t *idx, size_t start, size_t n,
		  float mean, float std, float *x, uint8_t *y)
{
	float lut[256];
	make_lut(lut, mean, std);
	fill(d, lut, idx, start, n, x, y);
}

static uint64_t splitmix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* order = shard shuffled by an rng seeded from (seed, stream, epoch) alone, so any epoch's
 * order can be recomputed without replaying the ones before it. */
static void shuffle_epoch(struct batcher *b)
{
	struct rng r;
	rng_seed(&r, splitmix64(b->seed ^ splitmix64((uint64_t)b->epoch)), b->stream);
	if (b->d->text) { /* a text: the epoch's windows at offsets drawn with replacement */
		uint32_t span = (uint32_t)(b->hi - b->lo - (size_t)b->d->seq);
		for (size_t k = 0; k < b->count; k++)
			b->order[k] = (uint32_t)b->lo + rng_below(&r, span);
		return;
	}
	memcpy(b->order, b->shard, b->count * sizeof *b->order);
	rng_shuffle(&r, b->order, b->count);
}

/* batcher_init of a windowed text: the worker's slice of its bytes. */
static int batcher_init_text(struct batcher *b, const struct dataset *d, int shard_i, int shard_n, char *err)
{
	b->lo = d->len * (size_t)shard_i / (size_t)shard_n;
	b->hi = d->len * (size_t)(shard_i + 1) / (size_t)shard_n;
	if (d->seq < 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: the text is not cut into windows");
	if (b->hi - b->lo < (size_t)d->seq + 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: shard %d of %d of the text has %zu bytes, too few for a "
				"window of %d and the byte after", shard_i, shard_n, b->hi - b->lo, d->seq);
	b->count = (b->hi - b->lo - 1) / (size_t)d->seq;
	if (!(b->order = malloc(b->count * sizeof *b->order)))
		return gem_errf(err, GEM_ENOMEM, "batcher: out of memory");
	return 0;
}

int batcher_init(struct batcher *b, const struct dataset *d, int batch, uint64_t seed,
		 uint64_t stream, int shard_i, int shard_n, float mean, float std, char *err)
{
	uint32_t *perm;
	size_t lo, hi;
	struct rng r;
	int rc;
	memset(b, 0, sizeof *b);
	if (batch < 1)
		return gem_errf(err, GEM_EUSAGE, "batcher: batch size %d", batch);
	if (shard_n < 1 || shard_i < 0 || shard_i >= shard_n)
		return gem_errf(err, GEM_EUSAGE, "batcher: shard %d of %d", shard_i, shard_n);
	*b = (struct batcher){.d = d, .batch = batch, .seed = seed, .stream = stream, .shard_i = shard_i,
			      .shard_n = shard_n};
	if (d->text) {
		if ((rc = batcher_init_text(b, d, shard_i, shard_n, err)) < 0) {
			batcher_free(b);
			return rc;
		}
		shuffle_epoch(b);
		return 0;
	}
	if (shard_n > d->n)
		return gem_errf(err, GEM_EUSAGE, "batcher: %d shards of %d samples", shard_n,
				d->n);
	if (!(std > 0) || !isfinite(mean) || !isfinite(std))
		return gem_errf(err, GEM_EUSAGE, "batcher: bad normalisation mean %g std %g",
				(double)mean, (double)std);
	perm = malloc((size_t)d->n * sizeof *perm);
	if (!perm)
		return gem_errf(err, GEM_ENOMEM, "batcher: out of memory");
	for (int i = 0; i < d->n; i++)
		perm[i] = (uint32_t)i;
	/* One permutation for all workers (seed only), cut into shard_n contiguous parts. */
	rng_seed(&r, seed, RNG_SHARD);
	rng_shuffle(&r, perm, (size_t)d->n);
	lo = (size_t)d->n * (size_t)shard_i / (size_t)shard_n;
	hi = (size_t)d->n * (size_t)(shard_i + 1) / (size_t)shard_n;
	b->count = hi - lo;
	b->shard = malloc(b->count * sizeof *b->shard);
	b->order = malloc(b->count * sizeof *b->order);
	if (!b->shard || !b->order) {
		free(perm);
		batcher_free(b);
		return gem_errf(err, GEM_ENOMEM, "batcher: out of memory");
	}
	memcpy(b->shard, perm + lo, b->count * sizeof *perm);
	free(perm);
	make_lut(b->lut, mean, std);
	shuffle_epoch(b);
	return 0;
}

int batcher_next(struct batcher *b, float *x, uint8_t *y)
{
	size_t k;
	if (b->pos >= b->count) {
		b->epoch++;
		b->pos = 0;
		shuffle_epoch(b);
	}
	k = b->count - b->pos < (size_t)b->batch ? b->count - b->pos : (size_t)b->batch;
	if (b->d->text) {
		size_t seq = (size_t)b->d->seq;
		for (size_t i = 0; i < k; i++)
			dataset_fill_window(b->d, b->order[b->pos + i], x + i * seq, y + i * seq);
		b->pos += k;
		return (int)k;
	}
	fill(b->d, b->lut, b->order, b->pos, k, x, y);
	b->pos += k;
	return (int)k;
}

void batcher_seek(struct batcher *b, long epoch, size_t pos)
{
	b->epoch = epoch;
	b->pos = pos < b->count ? pos : b->count;
	shuffle_epoch(b);
}

void batcher_free(struct batcher *b)
{
	free(b->shard);
	free(b->order);
	b->shard = b->order = NULL;
}
