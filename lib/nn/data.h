/* data: classification datasets (a directory of IDX files, the MNIST family's; or, by a format
 * prefix, a CSV table, NumPy arrays, an .npz archive, CIFAR's binary batches: gem-data(5)) and
 * texts (any file of bytes, for a language model), and their samples as normalised float
 * inputs (a worker's batches of them: nn/batcher.h). A dataset without a test split can hold
 * out a fraction of its training samples as one, drawn from the run's seed. */
#ifndef GEM_DATA_H
#define GEM_DATA_H
#include <stddef.h>
#include <stdint.h>

#define DATA_DIR_DEFAULT "/usr/share/datasets"
/* A text given by its file: "text:FILE". */
#define DATA_TEXT_PREFIX "text:"
/* The King James Bible as Debian's bible-kjv prints it, by name: DIR/kjv/kjv.txt in a dataset
 * directory (share/gem/install-deps.sh writes DATA_DIR_DEFAULT's). A dataset directory NAME
 * holding NAME.txt is a text. */
#define DATA_KJV "kjv"
/* A text's last 1/DATA_TEXT_HOLD_OUT (its bytes from ⌊len·9/10⌋ on) is split "test". */
#define DATA_TEXT_HOLD_OUT 10
/* The formats of files given by their paths (gem-data(5)): "csv:FILE[,TEST_FILE]",
 * "npy:FEATURES,LABELS[,TEST_FEATURES,TEST_LABELS]",
 * "npz:FILE[,FEATURES,LABELS[,TEST_FEATURES,TEST_LABELS]]" (the arrays' names, else the
 * conventional ones of nn/npz.h), "cifar:DIR". */
#define DATA_CSV_PREFIX   "csv:"
#define DATA_NPY_PREFIX   "npy:"
#define DATA_NPZ_PREFIX   "npz:"
#define DATA_CIFAR_PREFIX "cifar:"
/* The samples of an external model (nn/exec.h, gem-exec(7)), which holds them itself and is
 * named them by index: "model:train=N,test=M", or of a language model's text (N and M tokens,
 * windows of T) "model:train=N,test=M,positions=T". gem-init writes it; nobody reads them. */
#define DATA_MODEL_PREFIX "model:"

/* A dataset: images and their labels, or a text's bytes (a file read as it is, or inflated
 * when gzip'd). A text's sample is a window of seq
 * bytes, its labels the seq bytes after each (the next byte at every position); its n samples
 * for evaluation are the windows one after another from its first byte. */
struct dataset {
	int n;          /* samples */
	int rows, cols; /* an image's height and width (a table: 1, D; a text: 1, seq) */
	int dim;        /* values per sample: channels × rows × cols */
	int groups;     /* normalisation groups: an image's channels, a table's features */
	int classes;    /* largest label + 1 (a text: largest byte of the whole file + 1) */
	uint8_t *images; /* n × dim uint8 features, C order (NULL: float ones, or a text) */
	float *xf;       /* n × dim float32 features (NULL: uint8 ones, or a text) */
	uint16_t *labels; /* n (a text: NULL) */
	/* per group, once dataset_set_norm gave its mean and std (NULL: the mean and std of all
	 * values, given to batcher_init and dataset_fill): an input is x·scale + shift, x the
	 * stored byte or float */
	float *gscale, *gshift;
	int external;    /* an external model's own samples (DATA_MODEL_PREFIX): n (a text's: len and
			  * seq) alone are set, no values and no labels */
	int seq;         /* a text: bytes per window (0 until dataset_window) */
	uint8_t *text;   /* a text: the split's bytes (NULL: images) */
	size_t len;      /* ... how many */
	int whole;       /* split "test" asked of a data set without one, with data_source.whole:
			  * all its samples */
};

/* Where a dataset is and how it is split, as run.json records it. */
struct data_source {
	const char *loc;   /* a directory, a text file, or a spec (dataset_resolve) */
	const char *label; /* csv: the label column's name */
	double holdout;    /* in (0, 1): that fraction of the training samples is split "test"; 0 none */
	uint64_t seed;     /* of the holdout's draw (stream RNG_HOLDOUT) */
	int whole;         /* without holdout: split "test" of a data set that has none is all its
			    * samples (gem-eval -d: the data given is scored), not an error */
};
#define DATA_HOLDOUT_MIN 1e-6
#define DATA_HOLDOUT_MAX 0.9

/* Find a dataset: a directory path is used as is, "text:FILE" is FILE; a spec (the prefixes
 * above) is itself with every path made absolute, each checked to be there (a path holding a
 * comma is refused); a name is looked up as <dir>/<name>/ in each directory of $GEM_DATA_PATH
 * (colon-separated), then DATA_DIR_DEFAULT/<name>/. Writes the directory (or file, or spec) to
 * dir (cap bytes); the error lists every place looked in. */
int dataset_resolve(const char *name_or_dir, char *dir, size_t cap, char *err);
/* Whether the dataset dataset_resolve wrote as loc is there to read (every path of a spec). */
int dataset_present(const char *loc);
/* Whether loc (or a dataset's name) is in a format given by a prefix (csv:, npy:, ...). */
int dataset_is_spec(const char *loc);
/* Load split "train" or "test" ("t10k") of the dataset src->loc: a directory's IDX files
 * (idx_find's names), a spec's files through their reader (nn/csv.h, npy.h, npz.h, cifar.h);
 * or, when loc is a file or a directory NAME holding NAME.txt, that text's part
 * (DATA_TEXT_HOLD_OUT), to be windowed by dataset_window before use. With src->holdout, split
 * "train" is the training samples not held out, "test" those held out; without, a dataset with
 * no test split is an error (GEM_EUSAGE) that says to give --holdout. */
int dataset_open(const struct data_source *src, const char *split, struct dataset *out, char *err);
/* The held-out samples of src (src->holdout > 0, else GEM_EUSAGE): their indices among the
 * training samples, from 0, in the file's order (a CSV table's data rows, an array's first
 * axis), into *rows (malloc'd, *k of them). */
int dataset_holdout_rows(const struct data_source *src, uint32_t **rows, size_t *k, char *err);
/* dataset_open of the dataset dir as it is (no holdout). */
int dataset_load(const char *dir, const char *split, struct dataset *out, char *err);
/* Cut a loaded text into windows of seq bytes (the model's positions): sets seq, rows, cols,
 * dim and n; GEM_EUSAGE when the split is shorter than seq + 1 bytes. */
int dataset_window(struct dataset *d, int seq, char *err);
/* The number of samples of split "train" or "test" of src (of an IDX directory without a
 * holdout, its labels only are read); of a text, the split's bytes (a window of T bytes is
 * one sample). */
int dataset_count(const struct data_source *src, const char *split, uint64_t *n, char *err);
/* Release the arrays; d can be loaded again. */
void dataset_free(struct dataset *d);
/* Mean and standard deviation of all values (a text's bytes), bytes scaled to [0, 1]. */
void dataset_stats(const struct dataset *d, double *mean, double *std);
/* Mean and standard deviation of each of d's groups (d->groups of each), bytes scaled to
 * [0, 1]; a group whose values are all equal gets std 1 (its inputs become 0). */
void dataset_group_stats(const struct dataset *d, double *mean, double *std);
/* Normalise d's inputs by group from now on: groups must be d->groups, each std > 0 and finite,
 * each mean finite (GEM_EUSAGE naming the first that is not). */
int dataset_set_norm(struct dataset *d, int groups, const double *mean, const double *std,
		     char *err);
/* Normalised samples for evaluation: sample idx[start+k] (or start+k when idx is NULL) for k
 * in [0, n) into x (n × dim) and y (n labels; y may be NULL); mean and std are of all values,
 * used when d has no normalisation by group. A text's windows are its byte values, not
 * normalised, and n × seq labels. */
void dataset_fill(const struct dataset *d, const uint32_t *idx, size_t start, size_t n,
		  float mean, float std, float *x, uint16_t *y);
/* The window of a windowed text at byte offset off (off + seq < len) into x (seq byte values)
 * and y (the seq bytes after each; y may be NULL). */
void dataset_fill_window(const struct dataset *d, size_t off, float *x, uint16_t *y);
#endif
