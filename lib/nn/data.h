/* data: classification datasets (a directory of IDX files, the MNIST family's; or, by a format
 * prefix, a CSV table, NumPy arrays, an .npz archive, CIFAR's binary batches: gem-data(5)) and
 * texts (any file of bytes, for a language model), and the batches training and evaluation
 * read from them: normalised float inputs, sharded across workers, in an order per epoch that
 * a resumed run can recompute from (epoch, pos): a shuffle of the samples, or windows of a
 * text at offsets drawn at random. A dataset without a test split can hold out a fraction of
 * its training samples as one, drawn from the run's seed. */
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

/* Batches of one worker's shard: epoch e visits the shard in an order fixed by (seed, stream,
 * e). Read epoch and pos (samples of this epoch already returned) to checkpoint; seek back. */
struct batcher {
	const struct dataset *d;
	int batch;
	uint64_t seed, stream;
	int shard_i, shard_n;
	uint32_t *shard; /* this worker's sample indices, in their fixed (unshuffled) order */
	uint32_t *order; /* the shard shuffled for the current epoch (a text: window offsets) */
	size_t count;    /* samples in the shard (a text: windows per epoch) */
	size_t lo, hi;   /* a text: the worker's slice of its bytes */
	int kept;        /* d holds this shard's samples alone, in its order (batcher_keep_shard) */
	long epoch;      /* current epoch, from 0 */
	size_t pos;      /* next sample of the epoch's order */
	float lut[256];  /* pixel byte → (byte/255 − mean)/std, of the mean and std of all values */
	float scale, shift; /* float features: x·scale + shift, of the same */
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

/* Worker shard_i of shard_n gets a disjoint, near-equal part of a permutation fixed by seed
 * (the parts cover the dataset); inputs become (pixel/255 − mean)/std, or those of d's groups
 * when it has them (dataset_set_norm). Starts at epoch 0. Of a
 * windowed text, the worker's part is the shard_i-th of shard_n slices of its bytes; an epoch
 * is count = (slice − 1)/seq windows at offsets drawn uniformly, with replacement, from every
 * offset whose window and next byte lie in the slice (a stream fixed by seed, stream, epoch). */
int batcher_init(struct batcher *b, const struct dataset *d, int batch, uint64_t seed,
		 uint64_t stream, int shard_i, int shard_n, float mean, float std, char *err);
/* Fill up to batch samples into x (batch × dim) and y (batch × seq labels for a text); return
 * how many. The last batch of an epoch may be partial; the call after it starts the next
 * epoch. */
int batcher_next(struct batcher *b, float *x, uint16_t *y);
/* The indices of the next batch, as batcher_next would fill it, into idx (batch of them): a
 * sample's index in the split, a text's window offset. Returns how many. An external model's
 * samples are drawn only this way. */
int batcher_next_index(struct batcher *b, uint64_t *idx);
/* Continue at sample pos of epoch's order, as a run checkpointed there would. */
void batcher_seek(struct batcher *b, long epoch, size_t pos);
/* Keep of d, b's dataset, only b's shard: its samples, in the shard's order, the others freed,
 * so that a process that trains on one shard of many holds that part alone. b's batches stay
 * the samples they were (b then indexes d's count samples); d serves no other batcher after.
 * Of a text or of a shard that is the whole set nothing changes. GEM_ENOMEM. */
int batcher_keep_shard(struct batcher *b, struct dataset *d, char *err);
/* Release the index arrays (about 8 bytes a sample of the shard). Where the batcher stands
 * stays (count, epoch, pos): batcher_resume makes them again, so that a worker that waits long
 * between its batches (one of gem-sim's thousands) need not hold them while it waits. */
void batcher_free(struct batcher *b);
/* After batcher_free: the index arrays again, as they were (0 at once when b holds them);
 * GEM_ENOMEM. batcher_next and batcher_seek need them. */
int batcher_resume(struct batcher *b, char *err);
#endif
