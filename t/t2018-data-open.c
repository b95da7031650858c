/* t2018: datasets by their format prefix (csv:, npy:, npz:, cifar:) resolve to absolute paths
 * and open through their readers; a path holding a comma is refused with the way around it (a
 * symbolic link), which works; a dataset without a test split is refused with the hint to
 * use --holdout, and --holdout's split is disjoint, complete and fixed by the seed; the
 * normalisation by group (an image's channels, a table's features) makes every group of the
 * training set mean 0, std 1 in batches; labels past 255 reach the batches intact. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/batcher.h"
#include "nn/data.h"
#include "data-test.h"

/* Sample i of the fixtures' float tables starts with xf(i, 0) = i/8: which sample it is. */
static int sample_of(const struct dataset *d, int k)
{
	return (int)lround(d->xf[(size_t)k * (size_t)d->dim] * 8);
}

/* A path holding a comma is refused with the way around it, which works: a symbolic link. */
static void test_comma(void)
{
	char loc[4096], err[GEM_ERRMAX] = "", cwd[1024];
	struct dataset d;
	ok(getcwd(cwd, sizeof cwd) && chdir(fixture_dir) == 0 && link("x_v2.npy", "x,2.npy") == 0 &&
		   mkdir("d,1", 0755) == 0 && link("x_v2.npy", "d,1/x.npy") == 0 &&
		   link("y_i8.npy", "d,1/y.npy") == 0 && symlink("d,1", "d1") == 0,
	   "x,2.npy and d,1/, and a link to d,1");
	ok(bad(dataset_resolve("npy:x,2.npy,y_i8.npy", loc, sizeof loc, err), err, "FEATURES,LABELS",
	       "cannot hold", "ln -s"), "npy: a path with a comma, three parts: %s", err);
	ok(bad(dataset_resolve("npy:y_i8.npy,x,2.npy", loc, sizeof loc, err), err, "cannot hold"),
	   "npy: a path with a comma last: %s", err);
	ok(bad(dataset_resolve("npz:x,2.npy", loc, sizeof loc, err), err, "npz: takes FILE", "ln -s"),
	   "npz: a path with a comma: %s", err);
	/* two parts are a training and a test table: the first is not there, and the two
	 * joined are a file, so the hint says why */
	ok(bad(dataset_resolve("csv:x,2.npy", loc, sizeof loc, err), err, "x: no such file",
	       "cannot hold", "ln -s"), "csv: a path with a comma: %s", err);
	ok(bad(dataset_resolve("csv:x,2.npy,y_i8.npy", loc, sizeof loc, err), err,
	       "csv: takes FILE or TRAIN_FILE,TEST_FILE", "ln -s"),
	   "csv: a path with a comma, three parts: %s", err);
	ok(bad(dataset_resolve("npy:x,y_i8.npy", loc, sizeof loc, err), err, "x: no such file") &&
		   !strstr(err, "ln -s"), "a missing file, no comma in a path: no hint: %s", err);
	ok(chdir("d,1") == 0, "into d,1/");
	ok(bad(dataset_resolve("npy:x.npy,y.npy", loc, sizeof loc, err), err, "d,1/x.npy", "holds a comma",
	       "ln -s"), "a working directory with a comma: %s", err);
	ok(chdir("..") == 0 && dataset_resolve("npy:d1/x.npy,d1/y.npy", loc, sizeof loc, err) == 0 &&
		   strstr(loc, "/d1/x.npy,/") && !strstr(loc, "d,1"),
	   "through a link to it: the link's path is kept (%s)", loc);
	ok(dataset_load(loc, "train", &d, err) == 0 && d.n == N_SAMPLES && dataset_present(loc),
	   "and loads: %s", err);
	dataset_free(&d);
	ok(symlink("x,2.npy", "x2.npy") == 0 &&
		   dataset_resolve("npy:x2.npy,y_i8.npy", loc, sizeof loc, err) == 0 &&
		   strstr(loc, "/x2.npy,/") && dataset_load(loc, "train", &d, err) == 0 && d.n == N_SAMPLES,
	   "a link to x,2.npy is taken (%s)", err);
	dataset_free(&d);
	ok(chdir(cwd) == 0, "back");
}

static void test_resolve(void)
{
	char loc[4096], err[GEM_ERRMAX] = "", cwd[1024], want[2048];
	ok(getcwd(cwd, sizeof cwd) && chdir(fixture_dir) == 0, "into the fixtures");
	ok(dataset_resolve("npy:x_v2.npy,y_i8.npy", loc, sizeof loc, err) == 0 &&
		   !strncmp(loc, "npy:/", 5) && strstr(loc, "/x_v2.npy,/") && dataset_is_spec(loc) &&
		   dataset_present(loc),
	   "npy:X,Y: both paths made absolute (%s)", loc);
	snprintf(want, sizeof want, "npz:%s", fx("x_v2.npy"));
	ok(dataset_resolve("npz:x_v2.npy", loc, sizeof loc, err) == 0 && !strcmp(loc, want), "npz:FILE (%s)", loc);
	ok(bad(dataset_resolve("npy:x_v2.npy", loc, sizeof loc, err), err, "FEATURES,LABELS"),
	   "npy: with one path: %s", err);
	ok(bad(dataset_resolve("npz:nothing.npz", loc, sizeof loc, err), err, "nothing.npz", "no such file"),
	   "a missing file named: %s", err);
	ok(bad(dataset_resolve("cifar:x_v2.npy", loc, sizeof loc, err), err, "not a directory"),
	   "cifar: takes a directory: %s", err);
	ok(bad(dataset_resolve("csv:.", loc, sizeof loc, err), err, "not a regular file"), "csv: a file: %s", err);
	ok(chdir(cwd) == 0, "back");
	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_v2.npy"), fx("gone.npy"));
	ok(!dataset_present(loc), "dataset_present: every path must be there");
	test_comma();
}

static void test_holdout(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	struct dataset tr, te, again;
	uint64_t n = 0;
	int seen[N_SAMPLES] = {0}, all = 1;
	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_v2.npy"), fx("y_i8.npy"));
	struct data_source src = {.loc = loc, .holdout = 0.25, .seed = 3};
	ok(bad(dataset_load(loc, "test", &te, err), err, "no test split", "--holdout FRACTION"),
	   "no test split without --holdout: %s", err);
	ok(dataset_open(&src, "train", &tr, err) == 0 && dataset_open(&src, "test", &te, err) == 0 &&
		   tr.n == 9 && te.n == 3 && tr.groups == 6 && tr.dim == 6 && tr.xf && !tr.images,
	   "--holdout 0.25 of 12: 9 train, 3 test, 6 features (%s)", err);
	for (int k = 0; k < tr.n; k++)
		seen[sample_of(&tr, k)]++, all &= tr.labels[k] == sample_of(&tr, k) % N_CLASSES;
	for (int k = 0; k < te.n; k++)
		seen[sample_of(&te, k)]++, all &= te.labels[k] == sample_of(&te, k) % N_CLASSES;
	for (int i = 0; i < N_SAMPLES; i++)
		all &= seen[i] == 1;
	ok(all, "the two splits are disjoint and cover every sample, labels with their features");
	ok(dataset_open(&src, "test", &again, err) == 0 && again.n == te.n &&
		   !memcmp(again.xf, te.xf, (size_t)te.n * 6 * sizeof(float)),
	   "the same seed holds out the same samples");
	dataset_free(&again);
	src.seed = 4;
	int differs = 0;
	for (uint64_t seed = 4; seed < 10 && !differs; seed++) {
		src.seed = seed;
		dataset_open(&src, "test", &again, err);
		differs = memcmp(again.xf, te.xf, (size_t)te.n * 6 * sizeof(float)) != 0;
		dataset_free(&again);
	}
	ok(differs, "another seed holds out others");
	src.seed = 3;
	ok(dataset_count(&src, "test", &n, err) == 0 && n == 3, "dataset_count with a holdout: %llu",
	   (unsigned long long)n);
	src.holdout = 0.95;
	ok(bad(dataset_open(&src, "train", &again, err), err, "too few"), "nothing left to train on: %s", err);
	dataset_free(&tr);
	dataset_free(&te);
}

/* The mean and std of group g of d's inputs once normalised, over every sample. */
static void normalised_stats(const struct dataset *d, int g, double *mean, double *std)
{
	size_t gs = (size_t)(d->dim / d->groups), n = (size_t)d->n * gs;
	float *x = malloc((size_t)d->n * (size_t)d->dim * sizeof *x);
	double s = 0, s2 = 0;
	dataset_fill(d, NULL, 0, (size_t)d->n, 0.5f, 0.5f, x, NULL);
	for (int k = 0; k < d->n; k++)
		for (size_t i = 0; i < gs; i++) {
			double v = x[(size_t)k * (size_t)d->dim + (size_t)g * gs + i];
			s += v;
			s2 += v * v;
		}
	free(x);
	*mean = s / (double)n;
	*std = sqrt(s2 / (double)n - *mean * *mean);
}

static void test_norm(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	double mean[8], std[8], m, sd;
	struct dataset d;
	int fine = 1;
	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_u1.npy"), fx("y_i8.npy"));
	ok(dataset_load(loc, "train", &d, err) == 0 && d.groups == 3 && d.rows == 4 && d.cols == 4 &&
		   d.images, "uint8 images (12, 3, 4, 4): 3 channels (%s)", err);
	dataset_group_stats(&d, mean, std);
	ok(dataset_set_norm(&d, 3, mean, std, err) == 0, "per channel");
	for (int g = 0; g < 3; g++) {
		normalised_stats(&d, g, &m, &sd);
		fine &= fabs(m) < 1e-5 && fabs(sd - 1) < 1e-4;
	}
	ok(fine, "every channel normalised to mean 0, std 1");
	ok(bad(dataset_set_norm(&d, 2, mean, std, err), err, "2 groups, the data 3"), "%s", err);
	std[1] = 0;
	ok(bad(dataset_set_norm(&d, 3, mean, std, err), err, "group 1"), "a std of 0: %s", err);
	dataset_free(&d);

	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_v2.npy"), fx("y_i8.npy"));
	dataset_load(loc, "train", &d, err);
	dataset_group_stats(&d, mean, std);
	dataset_set_norm(&d, 6, mean, std, err);
	fine = 1;
	for (int g = 0; g < 6; g++) {
		normalised_stats(&d, g, &m, &sd);
		fine &= fabs(m) < 1e-5 && fabs(sd - 1) < 1e-4;
	}
	ok(fine, "every feature of a float table normalised to mean 0, std 1");
	dataset_free(&d);

	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_bool.npy"), fx("y_i8.npy"));
	dataset_load(loc, "train", &d, err);
	for (int k = 0; k < d.n; k++) /* feature 1 made constant */
		d.images[k * 2 + 1] = 1;
	dataset_group_stats(&d, mean, std);
	ok(std[1] == 1 && fabs(mean[1] - 1 / 255.0) < 1e-15, "a constant feature gets std 1");
	dataset_free(&d);
}

static void test_wide_labels(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	struct dataset d;
	struct batcher b;
	float x[N_SAMPLES * 6];
	uint16_t y[N_SAMPLES];
	int right = 1;
	snprintf(loc, sizeof loc, "npy:%s,%s", fx("x_v2.npy"), fx("y_u2.npy"));
	ok(dataset_load(loc, "train", &d, err) == 0 && d.classes == 55001, "labels i·5000 mod 65536: %d classes",
	   d.classes);
	ok(batcher_init(&b, &d, N_SAMPLES, 1, 0, 0, 1, 0.f, 1.f, err) == 0 && batcher_next(&b, x, y) == N_SAMPLES,
	   "one batch of all");
	for (int k = 0; k < N_SAMPLES; k++)
		right &= y[k] == (uint16_t)((unsigned)lround(x[k * 6] * 8) * 5000 % 65536);
	ok(right, "every label past 255 reaches the batch with its sample");
	batcher_free(&b);
	dataset_free(&d);
}

/* npz:FILE,FEATURES,LABELS[,TEST_FEATURES,TEST_LABELS]: the arrays by name. */
static void test_npz_names(void)
{
	char loc[4096], name[4096], err[GEM_ERRMAX] = "", cwd[1024];
	struct dataset d;
	snprintf(loc, sizeof loc, "npz:%s", fx("other.npz"));
	ok(bad(dataset_load(loc, "train", &d, err), err, "names gem knows", "it holds a, b"),
	   "npz: a and b, no conventional names: %s", err);
	snprintf(name, sizeof name, "npz:%s,a,b", fx("other.npz"));
	ok(dataset_resolve(name, loc, sizeof loc, err) == 0 && !strcmp(loc, name) && dataset_present(loc),
	   "npz:FILE,a,b resolves to itself, present (%s)", err);
	ok(dataset_load(loc, "train", &d, err) == 0 && d.n == N_SAMPLES && d.groups == 3 &&
		   d.labels[7] == 7 % N_CLASSES, "npz:FILE,a,b: its training split by name (%s)", err);
	dataset_free(&d);
	ok(bad(dataset_load(loc, "test", &d, err), err, "no test split", "--holdout"),
	   "no conventional test names: no test split (%s)", err);
	snprintf(loc, sizeof loc, "npz:%s,a,labels", fx("other.npz"));
	ok(bad(dataset_load(loc, "train", &d, err), err, "no array 'labels'", "it holds a, b)"),
	   "an unknown name lists the arrays: %s", err);
	snprintf(loc, sizeof loc, "npz:%s,x_train,y_train", fx("keras.npz"));
	ok(dataset_load(loc, "test", &d, err) == 0 && d.n == N_SAMPLES / 2 && d.groups == 6,
	   "names of the training split only: the test split by its conventional names (%s)", err);
	dataset_free(&d);
	snprintf(loc, sizeof loc, "npz:%s,x_test,y_test,x_train,y_train", fx("keras.npz"));
	ok(dataset_load(loc, "train", &d, err) == 0 && d.n == N_SAMPLES / 2 && d.groups == 6,
	   "the training split as named: x_test (%s)", err);
	dataset_free(&d);
	ok(dataset_load(loc, "test", &d, err) == 0 && d.n == N_SAMPLES && d.groups == 3,
	   "the test split as named: x_train (%s)", err);
	dataset_free(&d);
	snprintf(loc, sizeof loc, "npz:%s,x_train,y_train,x_test,nope", fx("keras.npz"));
	ok(bad(dataset_load(loc, "test", &d, err), err, "no array 'nope'", "x_train, y_train, x_test, y_test)"),
	   "an unknown test name: %s", err);
	snprintf(loc, sizeof loc, "npz:%s,x", fx("keras.npz"));
	ok(bad(dataset_resolve(loc, name, sizeof name, err), err, "FILE,FEATURES,LABELS"),
	   "one name: %s", err);
	snprintf(loc, sizeof loc, "npz:%s,a,b,c,d,e", fx("keras.npz"));
	ok(bad(dataset_resolve(loc, name, sizeof name, err), err, "FILE,FEATURES,LABELS"),
	   "five names: %s", err);
	snprintf(loc, sizeof loc, "npz:%s,a,,b", fx("keras.npz"));
	ok(bad(dataset_resolve(loc, name, sizeof name, err), err, "FILE,FEATURES,LABELS"),
	   "an empty name: %s", err);
	ok(!dataset_present(loc), "not present either");
	ok(getcwd(cwd, sizeof cwd) && chdir(fixture_dir) == 0 && link("other.npz", "o,1.npz") == 0 &&
		   bad(dataset_resolve("npz:o,1.npz,a", name, sizeof name, err), err, "o: no such file",
		       "cannot hold one") == 1 && chdir(cwd) == 0,
	   "a comma in its path, cut: the hint (%s)", err);
}

static void test_formats(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	struct dataset d;
	snprintf(loc, sizeof loc, "npz:%s", fx("keras.npz"));
	ok(dataset_load(loc, "test", &d, err) == 0 && d.n == N_SAMPLES / 2 && d.groups == 6,
	   "npz: x_test, y_test are its test split (%s)", err);
	dataset_free(&d);
	snprintf(loc, sizeof loc, "npz:%s", fx("xy.npz"));
	ok(bad(dataset_load(loc, "test", &d, err), err, "no test split", "--holdout"), "npz without one: %s", err);
	ok(dataset_load(loc, "train", &d, err) == 0 && d.n == N_SAMPLES && d.groups == 3 && d.rows == 4,
	   "npz: x, y (%s)", err);
	dataset_free(&d);
	test_npz_names();
}

static void test_csv(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	struct dataset d;
	fixtures("csv");
	snprintf(loc, sizeof loc, "csv:%s", fx("good.csv"));
	struct data_source src = {.loc = loc, .label = "label"};
	ok(dataset_open(&src, "train", &d, err) == 0 && d.n == N_SAMPLES && d.dim == 3 && d.groups == 3 &&
		   d.labels[7] == 7 % N_CLASSES, "csv: 3 features and the label column (%s)", err);
	dataset_free(&d);
	src.label = NULL;
	ok(bad(dataset_open(&src, "train", &d, err), err, "--label COLUMN"), "csv without --label: %s", err);
	fixtures_remove();
}

static void test_cifar(void)
{
	char loc[4096], err[GEM_ERRMAX] = "";
	struct dataset d;
	fixtures("cifar");
	snprintf(loc, sizeof loc, "cifar:%s", fx("c10"));
	ok(dataset_load(loc, "train", &d, err) == 0 && d.n == 12 && d.groups == 3 && d.rows == 32 &&
		   d.cols == 32 && d.dim == 3072 && d.images, "cifar: 3 channels of 32×32 (%s)", err);
	dataset_free(&d);
	ok(dataset_load(loc, "test", &d, err) == 0 && d.n == 3, "cifar: test_batch.bin");
	dataset_free(&d);
	fixtures_remove();
}

int main(void)
{
	fixtures("npy");
	test_resolve();
	test_holdout();
	test_norm();
	test_wide_labels();
	fixtures_remove();
	fixtures("npz");
	test_formats();
	fixtures_remove();
	test_csv();
	test_cifar();
	return done_testing();
}
