#include "nn/data.h"
#include "nn/cifar.h"
#include "nn/csv.h"
#include "nn/data_impl.h"
#include "nn/idx.h"
#include "nn/npy.h"
#include "nn/npz.h"
#include "nn/samples.h"
#include "base/fsutil.h"
#include "base/err.h"
#include "base/rng.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* DATA_MODEL_PREFIX's train=N,test=M[,positions=T]: 0, or -1 when loc is not that exactly. */
static int model_loc(const char *loc, uint64_t *train, uint64_t *test, int *positions)
{
	static const char *const keys[] = {"train=", "test=", "positions="};
	uint64_t v[3] = {0, 0, 0};
	const char *p = loc + strlen(DATA_MODEL_PREFIX);
	if (strncmp(loc, DATA_MODEL_PREFIX, strlen(DATA_MODEL_PREFIX)))
		return -1;
	for (int k = 0; k < 3; k++) {
		if (strncmp(p, keys[k], strlen(keys[k])))
			return -1;
		p += strlen(keys[k]);
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9') {
			if (v[k] > (uint64_t)INT32_MAX)
				return -1;
			v[k] = v[k] * 10 + (uint64_t)(*p++ - '0');
		}
		if (!*p && k > 0)
			break;
		if (*p != ',' || k == 2)
			return -1;
		p++;
	}
	if (v[0] < 1 || v[0] > (uint64_t)INT32_MAX || v[1] > (uint64_t)INT32_MAX || v[2] > 65536 ||
	    (v[2] && v[0] < v[2] + 2))
		return -1;
	*train = v[0];
	*test = v[1];
	*positions = (int)v[2];
	return 0;
}

/* The split of an external model's samples that loc describes, into out (no memory held). */
static int model_open(const char *loc, int test, struct dataset *out, char *err)
{
	uint64_t train, ntest;
	int positions;
	if (model_loc(loc, &train, &ntest, &positions) < 0)
		return gem_errf(err, GEM_EUSAGE, "%s: not %strain=N,test=M[,positions=T]", loc, DATA_MODEL_PREFIX);
	memset(out, 0, sizeof *out);
	out->external = 1;
	out->rows = out->cols = 1;
	if (positions) {
		out->len = test ? ntest : train;
		out->seq = out->cols = positions;
		out->n = out->len > (size_t)positions ? (int)((out->len - 1) / (size_t)positions) : 0;
	} else {
		out->n = (int)(test ? ntest : train);
	}
	return 0;
}

#define SPEC_MAX_PARTS 5 /* npz:FILE,FEATURES,LABELS,TEST_FEATURES,TEST_LABELS */

/* A spec cut at its commas: its format, its parts (the paths, then the names) inside it. */
struct spec {
	const struct spec_format *f;
	int n;
	int paths; /* of the n parts, the paths (the training split's, then the test split's) */
	const char *part[SPEC_MAX_PARTS];
	size_t len[SPEC_MAX_PARTS];
};

/* The loaders of the formats, below: split test (1) or train (0) of the spec sp (loc as given,
 * for errors; x its first path) into s; 0, or 1 (s empty) when the data has no such split. */
typedef int spec_loader(const struct spec *sp, const char *loc, const char *label, int test,
			const char *x, struct samples *s, char *err);
static spec_loader load_csv, load_npy, load_npz, load_cifar;

/* The formats of data given by their files' paths. After the prefix come the paths, then (an
 * .npz) the names of arrays inside, all separated by commas: a comma is never part of a path. */
static const struct spec_format {
	const char *pre;
	int paths;        /* how many, of the training split */
	int test_paths;   /* how many more may follow, of the test split (0: none) */
	int dir;          /* the path is a directory's */
	int names_max;    /* array names after the path: none, or pairs of features and labels */
	const char *form; /* what follows the prefix, for errors */
	spec_loader *load;
} spec_formats[] = {
	{.pre = DATA_CSV_PREFIX, .paths = 1, .test_paths = 1,
	 .form = "FILE or TRAIN_FILE,TEST_FILE (CSV tables of the same columns)", .load = load_csv},
	{.pre = DATA_NPY_PREFIX, .paths = 2, .test_paths = 2,
	 .form = "FEATURES,LABELS or FEATURES,LABELS,TEST_FEATURES,TEST_LABELS (.npy files)",
	 .load = load_npy},
	{.pre = DATA_NPZ_PREFIX, .paths = 1, .names_max = 4,
	 .form = "FILE, FILE,FEATURES,LABELS or FILE,FEATURES,LABELS,TEST_FEATURES,TEST_LABELS (an "
		 ".npz file, then names of its arrays)",
	 .load = load_npz},
	{.pre = DATA_CIFAR_PREFIX, .paths = 1, .dir = 1, .form = "DIR", .load = load_cifar},
};

/* The format whose prefix loc starts with, or NULL. */
static const struct spec_format *spec_format(const char *loc)
{
	for (size_t i = 0; i < sizeof spec_formats / sizeof *spec_formats; i++)
		if (!strncmp(loc, spec_formats[i].pre, strlen(spec_formats[i].pre)))
			return &spec_formats[i];
	return NULL;
}

int dataset_is_spec(const char *loc)
{
	return spec_format(loc) != NULL || !strncmp(loc, DATA_MODEL_PREFIX, strlen(DATA_MODEL_PREFIX));
}

/* Cut the spec loc at its commas into sp: 0, or -1 when loc is not a spec, a part is empty, or
 * the parts are not as many as its format takes. */
static int spec_cut(const char *loc, struct spec *sp)
{
	const char *p, *comma;
	int names;
	memset(sp, 0, sizeof *sp);
	if (!(sp->f = spec_format(loc)))
		return -1;
	for (p = loc + strlen(sp->f->pre);; p = comma + 1) {
		comma = strchr(p, ',');
		if (sp->n == SPEC_MAX_PARTS || p == comma || !*p)
			return -1;
		sp->part[sp->n] = p;
		sp->len[sp->n++] = comma ? (size_t)(comma - p) : strlen(p);
		if (!comma)
			break;
	}
	names = sp->n - sp->f->paths;
	sp->paths = sp->f->paths;
	if (sp->f->test_paths && names == sp->f->test_paths) { /* the test split's files */
		sp->paths = sp->n;
		names = 0;
	}
	return names < 0 || names > sp->f->names_max || names % 2 ? -1 : 0;
}

/* Part i of sp into buf (cap bytes): buf, or NULL when sp has no part i or it does not fit. */
static const char *spec_part(const struct spec *sp, int i, char *buf, size_t cap)
{
	if (i >= sp->n || sp->len[i] >= cap)
		return NULL;
	memcpy(buf, sp->part[i], sp->len[i]);
	buf[sp->len[i]] = 0;
	return buf;
}

/* How a path holding a comma can be given after all. */
#define SPEC_COMMA_HINT                                                                          \
	"a comma separates the parts, so a path cannot hold one: give a symbolic link to the file " \
	"(ln -s 'a,b.npy' ab.npy) or to a directory above it"

/* Whether some of sp's parts joined by their commas name a file or directory: a path holding a
 * comma that the spec cut. */
static int spec_cut_a_path(const struct spec *sp)
{
	char path[PATH_MAX];
	for (int i = 0; i < sp->n; i++)
		for (int j = i + 1; j < sp->n; j++) {
			size_t len = (size_t)(sp->part[j] + sp->len[j] - sp->part[i]);
			if (len >= sizeof path)
				continue;
			memcpy(path, sp->part[i], len);
			path[len] = 0;
			if (access(path, F_OK) == 0)
				return 1;
		}
	return 0;
}

/* The file path of spec name made absolute into abs (PATH_MAX bytes): its real path; or, when
 * that holds a comma, the path as given made absolute, so that a symbolic link made to avoid
 * the comma is kept. */
static int spec_abs(const char *name, const char *path, char *abs, char *err)
{
	char cwd[PATH_MAX];
	if (!realpath(path, abs))
		return gem_errf(err, GEM_EUSAGE, "%s: %s", path, strerror(errno));
	if (!strchr(abs, ','))
		return 0;
	if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
		return gem_errf(err, GEM_EUSAGE, "%s: the working directory: %s", path, strerror(errno));
	if ((size_t)snprintf(abs, PATH_MAX, "%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/",
			     path) >= PATH_MAX)
		return gem_errf(err, GEM_EUSAGE, "--data %s: path too long", name);
	if (strchr(abs, ','))
		return gem_errf(err, GEM_EUSAGE, "--data %s: the absolute path %s holds a comma; %s", name,
				abs, SPEC_COMMA_HINT);
	return 0;
}

/* FORMAT:PATH[,PATH][,NAME...] with each path checked and made absolute into out (cap bytes). */
static int resolve_spec(const char *name, char *out, size_t cap, char *err)
{
	struct spec sp;
	char path[PATH_MAX], abs[PATH_MAX];
	const char *hint;
	size_t len;
	int rc;
	if (spec_cut(name, &sp) < 0)
		return gem_errf(err, GEM_EUSAGE, "--data %s: %s takes %s; %s", name, sp.f->pre, sp.f->form,
				SPEC_COMMA_HINT);
	hint = spec_cut_a_path(&sp) ? "; " SPEC_COMMA_HINT : "";
	len = (size_t)snprintf(out, cap, "%s", sp.f->pre);
	for (int i = 0; i < sp.n; i++) {
		const char *part = abs;
		if (!spec_part(&sp, i, path, sizeof path))
			return gem_errf(err, GEM_EUSAGE, "--data %s: part %d is too long", name, i + 1);
		if (i >= sp.paths)
			part = path; /* an array's name, as it is */
		else if (sp.f->dir ? !fs_is_dir(path) : !is_file(path))
			return gem_errf(err, GEM_EUSAGE, "--data %s: %s: %s%s", name, path,
					access(path, F_OK) ? "no such file or directory"
					: sp.f->dir	   ? "not a directory"
							   : "not a regular file", hint);
		else if ((rc = spec_abs(name, path, abs, err)) < 0)
			return rc;
		len += (size_t)snprintf(out + (len < cap ? len : cap), len < cap ? cap - len : 0, "%s%s",
					i ? "," : "", part);
	}
	if (len >= cap)
		return gem_errf(err, GEM_EUSAGE, "--data %s: path too long", name);
	return 0;
}

int dataset_present(const char *loc)
{
	struct spec sp;
	char path[PATH_MAX];
	uint64_t a, b;
	int t;
	if (model_loc(loc, &a, &b, &t) == 0)
		return 1;
	if (!spec_format(loc))
		return access(loc, R_OK) == 0;
	if (spec_cut(loc, &sp) < 0)
		return 0;
	for (int i = 0; i < sp.paths; i++)
		if (!spec_part(&sp, i, path, sizeof path) || access(path, R_OK) < 0)
			return 0;
	return 1;
}

/* A file given without its format's prefix: which prefix, by its name's ending. */
static int file_without_format(const char *file, char *err)
{
	static const char *const ends[][2] = {
		{".csv", DATA_CSV_PREFIX "%s --label COLUMN"}, {".csv.gz", DATA_CSV_PREFIX "%s --label COLUMN"},
		{".npz", DATA_NPZ_PREFIX "%s"},		    {".npy", DATA_NPY_PREFIX "%s,LABELS.npy"},
		{".npy.gz", DATA_NPY_PREFIX "%s,LABELS.npy"}, {".txt", DATA_TEXT_PREFIX "%s"},
	};
	size_t len = strlen(file);
	char hint[PATH_MAX + 64];
	for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
		size_t e = strlen(ends[i][0]);
		if (len > e && !strcasecmp(file + len - e, ends[i][0])) {
			snprintf(hint, sizeof hint, ends[i][1], file);
			return gem_errf(err, GEM_EUSAGE, "%s: a file, not a dataset directory; did you mean "
					"--data %s? (gem-data(5))", file, hint);
		}
	}
	return gem_errf(err, GEM_EUSAGE, "%s: a file, not a dataset directory: name its format, "
			"--data csv:FILE, npy:FEATURES,LABELS, npz:FILE, cifar:DIR or text:FILE "
			"(gem-data(5))", file);
}

int dataset_resolve(const char *name_or_dir, char *dir, size_t cap, char *err)
{
	char looked[GEM_ERRMAX] = "", cand[4096];
	const char *path = getenv("GEM_DATA_PATH"), *p, *end = NULL;
	size_t lk = 0;
	if (!name_or_dir || !*name_or_dir)
		return gem_errf(err, GEM_EUSAGE, "dataset: empty name");
	if (spec_format(name_or_dir))
		return resolve_spec(name_or_dir, dir, cap, err);
	if (!strncmp(name_or_dir, DATA_MODEL_PREFIX, strlen(DATA_MODEL_PREFIX))) {
		struct dataset d;
		if (model_open(name_or_dir, 0, &d, err) < 0)
			return GEM_EUSAGE;
		if (strlen(name_or_dir) >= cap)
			return gem_errf(err, GEM_EUSAGE, "%s: too long", name_or_dir);
		snprintf(dir, cap, "%s", name_or_dir);
		return 0;
	}
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
	if (fs_is_dir(name_or_dir)) {
		if (strlen(name_or_dir) >= cap)
			return gem_errf(err, GEM_EUSAGE, "%s: path too long", name_or_dir);
		snprintf(dir, cap, "%s", name_or_dir);
		return 0;
	}
	if (is_file(name_or_dir))
		return file_without_format(name_or_dir, err);
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
		if (fs_is_dir(cand))
			goto found;
		if (lk < sizeof looked)
			lk += (size_t)snprintf(looked + lk, sizeof looked - lk, "%s, ", cand);
	}
	snprintf(cand, sizeof cand, "%s/%s", DATA_DIR_DEFAULT, name_or_dir);
	if (fs_is_dir(cand))
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

/* Split "train" or "test" of the dataset at loc (an IDX directory or a spec) into s: 0, or 1
 * (s empty) when the dataset has no test split. */
static int load_npz(const struct spec *sp, const char *loc, const char *label, int test,
		    const char *x, struct samples *s, char *err)
{
	char name[2][PATH_MAX];
	(void)loc, (void)label;
	/* the split's names, when given: parts 1, 2 or 3, 4 */
	return npz_load(x, test ? "test" : "train",
			spec_part(sp, 1 + 2 * test, name[0], sizeof name[0]),
			spec_part(sp, 2 + 2 * test, name[1], sizeof name[1]), s, err);
}

static int load_cifar(const struct spec *sp, const char *loc, const char *label, int test,
		      const char *x, struct samples *s, char *err)
{
	(void)sp, (void)loc, (void)label;
	return cifar_load(x, test ? "test" : "train", s, err);
}

/* a table or a pair of arrays is one split */
static int load_csv(const struct spec *sp, const char *loc, const char *label, int test,
		    const char *x, struct samples *s, char *err)
{
	char t[PATH_MAX];
	/* the test split's table, when given, follows the training split's */
	if (test && sp->paths == sp->f->paths)
		return 1;
	if (test && !(x = spec_part(sp, sp->f->paths, t, sizeof t)))
		return gem_errf(err, GEM_EUSAGE, "%s: not %s%s", loc, sp->f->pre, sp->f->form);
	if (!label || !*label)
		return gem_errf(err, GEM_EUSAGE, "%s: a CSV table needs its label column named "
				"(--label COLUMN)", loc);
	return csv_load(x, label, s, err);
}

static int load_npy(const struct spec *sp, const char *loc, const char *label, int test,
		    const char *x, struct samples *s, char *err)
{
	char y[PATH_MAX], t[PATH_MAX];
	(void)label;
	/* the test split's pair, when given, follows the training split's */
	if (test && sp->paths == sp->f->paths)
		return 1;
	if ((test && !(x = spec_part(sp, sp->f->paths, t, sizeof t))) ||
	    !spec_part(sp, test ? sp->f->paths + 1 : 1, y, sizeof y))
		return gem_errf(err, GEM_EUSAGE, "%s: not %s%s", loc, sp->f->pre, sp->f->form);
	return npy_load(x, y, s, err);
}

static int load_samples(const char *loc, const char *label, int test, struct samples *s, char *err)
{
	char x[PATH_MAX];
	struct spec sp;
	memset(s, 0, sizeof *s);
	if (!spec_format(loc))
		return idx_dir_load(loc, test ? "test" : "train", s, err);
	if (spec_cut(loc, &sp) < 0 || !spec_part(&sp, 0, x, sizeof x))
		return gem_errf(err, GEM_EUSAGE, "%s: not %s%s", loc, sp.f->pre, sp.f->form);
	return sp.f->load(&sp, loc, label, test, x, s, err);
}

/* Keep of s the samples of split test (1) or train (0) of a holdout of fraction f drawn from
 * seed: the test split is the first ⌈n·f⌉ of a permutation, train the others, each in the
 * file's order. */
/* take[i] = 1 for the n samples' held-out ones (a holdout of fraction f drawn from seed: the
 * first ⌈n·f⌉ of a permutation), 0 for the others. */
static int holdout_take(size_t n, double f, uint64_t seed, uint8_t *take, const char *loc, char *err)
{
	size_t k = (size_t)ceil((double)n * f);
	uint32_t *perm;
	struct rng r;
	if (k >= n)
		return gem_errf(err, GEM_EUSAGE, "%s: %zu samples: too few to hold out %g of them and "
				"train on the rest", loc, n, f);
	if (!(perm = malloc(n * sizeof *perm)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", loc);
	for (size_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	rng_seed(&r, seed, RNG_HOLDOUT);
	rng_shuffle(&r, perm, n);
	memset(take, 0, n);
	for (size_t i = 0; i < k; i++)
		take[perm[i]] = 1;
	free(perm);
	return 0;
}

/* Keep of s the samples of split test (1) or train (0) of a holdout of fraction f drawn from
 * seed (holdout_take), each in the file's order. */
static int holdout_split(struct samples *s, int test, double f, uint64_t seed, const char *loc,
			 char *err)
{
	size_t n = s->n, m = 0;
	size_t row = s->dim * (s->type == SAMPLES_U8 ? 1 : sizeof(float));
	uint8_t *take;
	int rc;
	if (!(take = calloc(n ? n : 1, 1)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", loc);
	if ((rc = holdout_take(n, f, seed, take, loc, err)) < 0) {
		free(take);
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		if (take[i] == test) {
			memmove((uint8_t *)s->x + m * row, (uint8_t *)s->x + i * row, row);
			s->y[m++] = s->y[i];
		}
	free(take);
	s->n = m;
	samples_count_classes(s);
	return 0;
}

/* out takes over s's arrays: an image (C, H, W) has C groups, a table (D) D. */
static void from_samples(struct samples *s, struct dataset *out)
{
	out->n = (int)s->n;
	out->dim = (int)s->dim;
	if (s->ndim == 3) {
		out->groups = s->shape[0];
		out->rows = s->shape[1];
		out->cols = s->shape[2];
	} else {
		out->rows = 1;
		out->groups = out->cols = (int)s->dim;
	}
	if (s->type == SAMPLES_U8)
		out->images = s->x;
	else
		out->xf = s->x;
	out->labels = s->y;
	out->classes = s->classes;
	memset(s, 0, sizeof *s);
}

/* The error of a dataset without the test split asked for. */
static int no_test_split(const char *loc, char *err)
{
	return gem_errf(err, GEM_EUSAGE, "%s: no test split to evaluate on%s (give --holdout FRACTION "
			"to hold out that fraction of the training samples)", loc,
			spec_format(loc) ? "" : ": no t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, "
			"nor their other names (gem-data(5))");
}

/* 1 for split "test" (or "t10k"), 0 for "train", else GEM_EUSAGE. */
static int split_is_test(const char *split, char *err)
{
	if (!strcmp(split, "test") || !strcmp(split, "t10k"))
		return 1;
	if (!strcmp(split, "train"))
		return 0;
	return gem_errf(err, GEM_EUSAGE, "dataset: unknown split '%s' (train or test)", split);
}

int dataset_open(const struct data_source *src, const char *split, struct dataset *out, char *err)
{
	char path[4096];
	struct samples s;
	int test, rc;
	memset(out, 0, sizeof *out);
	if ((test = split_is_test(split, err)) < 0)
		return test;
	if (!strncmp(src->loc, DATA_MODEL_PREFIX, strlen(DATA_MODEL_PREFIX)))
		return model_open(src->loc, test, out, err);
	if (!spec_format(src->loc) && text_path(src->loc, path, sizeof path))
		return text_load(path, split, out, err);
	rc = load_samples(src->loc, src->label, test && !(src->holdout > 0), &s, err);
	if (rc == 1 && src->whole) {
		rc = load_samples(src->loc, src->label, 0, &s, err);
		out->whole = 1;
	}
	if (rc == 1)
		return no_test_split(src->loc, err);
	if (rc < 0)
		return rc;
	if (src->holdout > 0 && (rc = holdout_split(&s, test, src->holdout, src->seed, src->loc, err)) < 0) {
		samples_free(&s);
		return rc;
	}
	from_samples(&s, out);
	return 0;
}

int dataset_holdout_rows(const struct data_source *src, uint32_t **rows, size_t *k, char *err)
{
	struct samples s;
	size_t n;
	uint8_t *take;
	int rc;
	*rows = NULL;
	*k = 0;
	if (!(src->holdout > 0))
		return gem_errf(err, GEM_EUSAGE, "%s: no samples held out (the run was made without "
				"--holdout)", src->loc);
	if ((rc = load_samples(src->loc, src->label, 0, &s, err)) < 0)
		return rc;
	n = s.n;
	samples_free(&s);
	if (!(take = calloc(n ? n : 1, 1)))
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", src->loc);
	if ((rc = holdout_take(n, src->holdout, src->seed, take, src->loc, err)) == 0) {
		if (!(*rows = malloc(n * sizeof **rows + 1)))
			rc = gem_errf(err, GEM_ENOMEM, "%s: out of memory", src->loc);
		for (size_t i = 0; *rows && i < n; i++)
			if (take[i])
				(*rows)[(*k)++] = (uint32_t)i;
	}
	free(take);
	return rc;
}

int dataset_load(const char *dir, const char *split, struct dataset *out, char *err)
{
	return dataset_open(&(struct data_source){.loc = dir}, split, out, err);
}

int dataset_count(const struct data_source *src, const char *split, uint64_t *n, char *err)
{
	char images[4096], labels[4096];
	struct dataset d;
	struct idx_array a;
	uint8_t *buf;
	size_t len;
	int rc, test;
	if ((test = split_is_test(split, err)) < 0)
		return test;
	if (dataset_is_spec(src->loc) || src->holdout > 0 || text_path(src->loc, images, sizeof images)) {
		if ((rc = dataset_open(src, split, &d, err)) == 0)
			*n = d.text ? d.len : (uint64_t)d.n;
		dataset_free(&d);
		return rc;
	}
	/* an IDX directory: its labels file's first dimension */
	if ((rc = idx_find(src->loc, test ? "test" : "train", images, labels, sizeof images, err)) == 1)
		return no_test_split(src->loc, err);
	if (rc < 0 || (rc = samples_read_file(labels, SAMPLES_MAX_BYTES, &buf, &len, err)) < 0)
		return rc;
	if ((rc = idx_parse(buf, len, labels, &a, err)) == 0)
		*n = a.dims[0];
	free(buf);
	return rc;
}

void dataset_free(struct dataset *d)
{
	free(d->images);
	free(d->xf);
	free(d->labels);
	free(d->text);
	free(d->gscale);
	free(d->gshift);
	memset(d, 0, sizeof *d);
}

/* Value j of sample s of d, a byte scaled to [0, 1]. */
static double value(const struct dataset *d, size_t s, size_t j)
{
	size_t at = s * (size_t)d->dim + j;
	return d->images ? d->images[at] / 255.0 : (double)d->xf[at];
}

void dataset_stats(const struct dataset *d, double *mean, double *std)
{
	/* A histogram makes it exact and fast: 256 distinct values, whatever n is. */
	uint64_t hist[256] = {0};
	const uint8_t *x = d->text ? d->text : d->images;
	size_t total = d->text ? d->len : (size_t)d->n * (size_t)d->dim;
	double m = 0, v = 0;
	if (!total) {
		*mean = 0;
		*std = 0;
		return;
	}
	if (!x) { /* float features: two passes */
		for (size_t i = 0; i < total; i++)
			m += d->xf[i];
		m /= (double)total;
		for (size_t i = 0; i < total; i++)
			v += (d->xf[i] - m) * (d->xf[i] - m);
		*mean = m;
		*std = sqrt(v / (double)total);
		return;
	}
	for (size_t i = 0; i < total; i++)
		hist[x[i]]++;
	for (int k = 0; k < 256; k++)
		m += (double)hist[k] * (k / 255.0);
	m /= (double)total;
	for (int k = 0; k < 256; k++)
		v += (double)hist[k] * (k / 255.0 - m) * (k / 255.0 - m);
	*mean = m;
	*std = sqrt(v / (double)total);
}

void dataset_group_stats(const struct dataset *d, double *mean, double *std)
{
	size_t groups = (size_t)d->groups, gs = (size_t)d->dim / groups, n = (size_t)d->n;
	for (size_t g = 0; g < groups; g++) {
		double m = 0, v = 0, first = value(d, 0, g * gs);
		int equal = 1;
		for (size_t s = 0; s < n; s++)
			for (size_t i = g * gs; i < (g + 1) * gs; i++)
				m += value(d, s, i);
		m /= (double)(n * gs);
		for (size_t s = 0; s < n; s++)
			for (size_t i = g * gs; i < (g + 1) * gs; i++) {
				double x = value(d, s, i);
				v += (x - m) * (x - m);
				equal &= x == first;
			}
		mean[g] = m;
		std[g] = equal ? 1 : sqrt(v / (double)(n * gs));
	}
}

int dataset_set_norm(struct dataset *d, int groups, const double *mean, const double *std,
		     char *err)
{
	double in = d->images ? 255.0 : 1.0; /* a byte is scaled to [0, 1] first */
	if (groups != d->groups)
		return gem_errf(err, GEM_EUSAGE, "the normalisation has %d groups, the data %d (%s)",
				groups, d->groups, d->groups == d->dim ? "features" : "channels");
	for (int g = 0; g < groups; g++)
		if (!isfinite(mean[g]) || !(std[g] > 0) || !isfinite(std[g]) || !isfinite(1 / std[g]))
			return gem_errf(err, GEM_EUSAGE, "the normalisation of group %d: mean %g, std %g", g,
					mean[g], std[g]);
	free(d->gscale);
	free(d->gshift);
	d->gscale = malloc((size_t)groups * sizeof *d->gscale);
	d->gshift = malloc((size_t)groups * sizeof *d->gshift);
	if (!d->gscale || !d->gshift) {
		free(d->gscale);
		free(d->gshift);
		d->gscale = d->gshift = NULL;
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	}
	for (int g = 0; g < groups; g++) {
		d->gscale[g] = (float)(1 / (in * std[g]));
		d->gshift[g] = (float)(-mean[g] / std[g]);
	}
	return 0;
}

void data_make_lut(float lut[256], float mean, float std)
{
	for (int k = 0; k < 256; k++)
		lut[k] = (float)((k / 255.0 - mean) / std);
}

/* d's norm: its groups', else lut (bytes) or scale and shift of all values. */
struct norm data_norm_of(const struct dataset *d, const float *lut, const float *scale,
			   const float *shift)
{
	if (d->gscale)
		return (struct norm){.scale = d->gscale, .shift = d->gshift,
				     .gsize = (size_t)(d->dim / d->groups)};
	if (d->images)
		return (struct norm){.lut = lut};
	return (struct norm){.scale = scale, .shift = shift, .gsize = (size_t)d->dim};
}

void dataset_fill_window(const struct dataset *d, size_t off, float *restrict x, uint16_t *restrict y)
{
	const uint8_t *src = d->text + off;
	for (int j = 0; j < d->seq; j++)
		x[j] = (float)src[j];
	if (y)
		for (int j = 0; j < d->seq; j++)
			y[j] = src[j + 1];
}

/* Sample s of d's features, normalised by nm, into dst. */
static void fill_one(const struct dataset *d, const struct norm *nm, size_t s, float *restrict dst)
{
	size_t dim = (size_t)d->dim, gs = nm->gsize;
	const uint8_t *restrict b = d->images ? d->images + s * dim : NULL;
	const float *restrict f = d->xf ? d->xf + s * dim : NULL;
	if (nm->lut) {
		for (size_t j = 0; j < dim; j++)
			dst[j] = nm->lut[b[j]];
		return;
	}
	for (size_t g = 0; g * gs < dim; g++) {
		const float a = nm->scale[g], c = nm->shift[g];
		float *restrict o = dst + g * gs;
		if (b)
			for (size_t i = 0; i < gs; i++)
				o[i] = (float)b[g * gs + i] * a + c;
		else
			for (size_t i = 0; i < gs; i++)
				o[i] = f[g * gs + i] * a + c;
	}
}

void data_fill(const struct dataset *d, const struct norm *nm, const uint32_t *idx,
		 size_t start, size_t n, float *restrict x, uint16_t *restrict y)
{
	size_t dim = (size_t)d->dim;
	if (d->text) { /* sample s: the window at s·seq */
		for (size_t k = 0; k < n; k++)
			dataset_fill_window(d, (idx ? idx[start + k] : start + k) * dim, x + k * dim, y ? y + k * dim : NULL);
		return;
	}
	for (size_t k = 0; k < n; k++) {
		size_t s = idx ? idx[start + k] : start + k;
		fill_one(d, nm, s, x + k * dim);
		if (y)
			y[k] = d->labels[s];
	}
}

void dataset_fill(const struct dataset *d, const uint32_t *idx, size_t start, size_t n,
		  float mean, float std, float *x, uint16_t *y)
{
	float lut[256], scale = 1 / std, shift = -mean / std;
	struct norm nm;
	if (d->images && !d->gscale)
		data_make_lut(lut, mean, std);
	nm = data_norm_of(d, lut, &scale, &shift);
	data_fill(d, &nm, idx, start, n, x, y);
}
