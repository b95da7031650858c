/* t2014: texts as datasets (nn/data.h): "text:FILE" and a directory NAME holding NAME.txt are
 * found and split 90/10; windows of T bytes with the next byte at every position; the batcher's
 * windows lie in the worker's slice, follow from (seed, stream, epoch) alone, and come back the
 * same after a seek; bad texts are refused. With make deps, the kjv corpus is checked too. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "nn/batcher.h"
#include "nn/data.h"
#include "tap.h"

static char dir[1024];

static void write_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n)
		exit(3);
	fclose(f);
}

/* 1 if dir/name is a regular file. */
static int is_file_in(const char *d, const char *name)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", d, name);
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void test_load(const char *file, const uint8_t *text, size_t len)
{
	char err[GEM_ERRMAX] = "", spec[4200], found[4096];
	struct dataset tr, te;
	uint64_t count;
	snprintf(spec, sizeof spec, "text:%s", file);
	ok(dataset_resolve(spec, found, sizeof found, err) == 0 && !strcmp(found, file), "text:FILE is FILE");
	ok(dataset_load(found, "train", &tr, err) == 0 && dataset_load(found, "test", &te, err) == 0, "both splits load");
	ok(tr.len == len * 9 / 10 && te.len == len - tr.len && !memcmp(tr.text, text, tr.len) &&
		   !memcmp(te.text, text + tr.len, te.len),
	   "the first 90%% is train (%zu bytes), the rest test (%zu)", tr.len, te.len);
	ok(tr.classes == 251 && te.classes == 251, "classes: the largest byte of the whole file + 1");
	ok(dataset_count(&(struct data_source){.loc = found}, "train", &count, err) == 0 && count == tr.len, "dataset_count: the split's bytes");
	int wrc = dataset_window(&tr, 16, err);
	ok(wrc == 0 && tr.n == (int)((tr.len - 1) / 16) && tr.dim == 16 && tr.seq == 16,
	   "windows of 16: n = (len − 1)/16 = %d", tr.n);
	float x[3 * 16];
	uint16_t y[3 * 16];
	uint32_t idx[3] = {5, 0, (uint32_t)tr.n - 1};
	dataset_fill(&tr, idx, 0, 3, 0.5f, 0.25f, x, y);
	int right = 1;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 16; j++)
			right &= x[k * 16 + j] == text[idx[k] * 16 + j] && y[k * 16 + j] == text[idx[k] * 16 + j + 1];
	ok(right, "dataset_fill: window s is bytes s·16.., its labels the byte after each (the last window too)");
	te.len = 16;
	ok(dataset_window(&te, 16, err) == GEM_EUSAGE && strstr(err, "too few for a window of 16"),
	   "a split shorter than a window and one byte is refused (%s)", err);
	dataset_free(&te);

	/* the batcher: 3 workers' slices */
	struct batcher b[3], c;
	enum { BATCH = 7 };
	float bx[BATCH * 16];
	uint16_t by[BATCH * 16];
	int inside = 1, consistent = 1, all = 1;
	for (int w = 0; w < 3; w++) {
		all &= batcher_init(&b[w], &tr, BATCH, 42, 1 + w, w, 3, 0, 1, err) == 0;
		all &= b[w].lo == tr.len * w / 3 && b[w].hi == tr.len * (w + 1) / 3 &&
		       b[w].count == (b[w].hi - b[w].lo - 1) / 16;
		for (size_t k = 0; all && k < b[w].count; k++)
			inside &= b[w].order[k] >= b[w].lo && b[w].order[k] + 16 < b[w].hi;
	}
	ok(all, "3 workers: each a slice of the bytes, (slice − 1)/16 windows an epoch");
	ok(inside, "every window and its next byte lie in the worker's slice");
	int n = batcher_next(&b[1], bx, by);
	for (int k = 0; k < n; k++)
		for (int j = 0; j < 16; j++)
			consistent &= bx[k * 16 + j] == text[b[1].order[k] + j] && by[k * 16 + j] == text[b[1].order[k] + j + 1];
	ok(n == BATCH && consistent, "batcher_next: the windows at the epoch's offsets, with their next bytes");
	ok(batcher_init(&c, &tr, BATCH, 42, 2, 1, 3, 0, 1, err) == 0 && !memcmp(c.order, b[1].order, 4 * c.count),
	   "the same seed and stream, the same windows");
	batcher_free(&c);
	ok(batcher_init(&c, &tr, BATCH, 42, 9, 1, 3, 0, 1, err) == 0 && memcmp(c.order, b[1].order, 4 * c.count),
	   "another stream, other windows");
	batcher_free(&c);
	/* run into epoch 2, then seek back there from a new batcher */
	size_t total = 2 * b[1].count + 3;
	float cx[BATCH * 16];
	uint16_t cy[BATCH * 16];
	for (size_t done = BATCH; done < total; done += (size_t)batcher_next(&b[1], bx, by))
		;
	long epoch = b[1].epoch;
	size_t pos = b[1].pos;
	batcher_init(&c, &tr, BATCH, 42, 2, 1, 3, 0, 1, err);
	batcher_seek(&c, epoch, pos);
	int na = batcher_next(&b[1], bx, by), nb = batcher_next(&c, cx, cy);
	ok(epoch == 2 && na == nb && !memcmp(bx, cx, sizeof(float) * 16 * na) && !memcmp(by, cy, (size_t)16 * na),
	   "a seek to (epoch %ld, %zu) gives the batch the batcher gave there", epoch, pos);
	batcher_free(&c);
	for (int w = 0; w < 3; w++)
		batcher_free(&b[w]);
	ok(batcher_init(&c, &tr, BATCH, 42, 1, 0, 1000, 0, 1, err) == GEM_EUSAGE && strstr(err, "too few for a window"),
	   "a slice shorter than a window is refused (%s)", err);
	batcher_free(&c);
	dataset_free(&tr);
}

static void test_named(const uint8_t *text, size_t len)
{
	char err[GEM_ERRMAX], path[4096], found[4096];
	struct dataset d;
	snprintf(path, sizeof path, "%s/corpus", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/corpus/corpus.txt", dir);
	write_file(path, text, len);
	setenv("GEM_DATA_PATH", dir, 1);
	ok(dataset_resolve("corpus", found, sizeof found, err) == 0 && dataset_load(found, "test", &d, err) == 0 &&
		   d.len == len - len * 9 / 10,
	   "a dataset directory NAME holding NAME.txt is a text");
	dataset_free(&d);
	ok(dataset_resolve("text:/nonexistent/x.txt", found, sizeof found, err) == GEM_EUSAGE &&
		   strstr(err, "text:/nonexistent/x.txt: no such file"),
	   "text: of a missing file (%s)", err);
	snprintf(path, sizeof path, "text:%s", dir);
	ok(dataset_resolve(path, found, sizeof found, err) == GEM_EUSAGE && strstr(err, "not a regular file"),
	   "text: of a directory (%s)", err);
	snprintf(path, sizeof path, "%s/empty.txt", dir);
	write_file(path, text, 0);
	ok(dataset_load(path, "train", &d, err) == GEM_EFAIL && strstr(err, "empty"), "an empty text (%s)", err);
	ok(dataset_load(found, "valid", &d, err) < 0, "an unknown split");
	unsetenv("GEM_DATA_PATH");
	if (dataset_resolve("kjv", found, sizeof found, err) < 0)
		ok(strstr(err, "make deps writes it") != NULL, "kjv missing: the error says how to make it (%s)", err);
	else
		ok(is_file_in(found, "kjv.txt"), "kjv found: %s holds kjv.txt", found);
}

/* The corpus make deps writes: COLUMNS=80 bible 'Gen1:1-Rev22:21'. */
static void test_kjv(void)
{
	char err[GEM_ERRMAX], found[4096];
	struct dataset tr, te;
	setenv("GEM_DATA_PATH", "", 1);
	if (dataset_resolve(DATA_KJV, found, sizeof found, err) < 0) {
		/* Only its absence is a skip; any other failure to find it is the product's. */
		if (!ok(strstr(err, "make deps writes it") != NULL, "kjv: resolved (%s)", err))
			return;
		skip("kjv is not installed (make deps)");
		return;
	}
	ok(dataset_load(found, "train", &tr, err) == 0 && dataset_load(found, "test", &te, err) == 0, "kjv loads");
	ok(tr.len + te.len == 4298239 && te.len == 429824 && tr.classes <= 128,
	   "kjv: 4,298,239 bytes of ASCII, 429,824 held out");
	ok(!memcmp(tr.text, "\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n", 69) &&
		   !memcmp(te.text + te.len - 20, "with you all. Amen.\n", 20),
	   "kjv: from Genesis 1:1 to Revelation 22:21");
	dataset_free(&tr);
	dataset_free(&te);
}

int main(void)
{
	enum { LEN = 5003 };
	static uint8_t text[LEN];
	char file[4096];
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/t2014-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		skip_all("no temporary directory");
	for (int i = 0; i < LEN; i++)
		text[i] = (uint8_t)(i * 7 % 251);
	snprintf(file, sizeof file, "%s/some.txt", dir);
	write_file(file, text, LEN);
	test_load(file, text, LEN);
	test_named(text, LEN);
	test_kjv();
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
