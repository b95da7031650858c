/* runjson: run.json, both ways. struct run_spec is what run.json records (gem-protocol(7)):
 * run_spec_to_json writes it, run_spec_from_json reads and checks it, and run.c, the one reader
 * of the file, reads it through these alone (run_open; run_peek, leniently, its rule and model).
 * Below run.c and above nothing of run/: the maker of a run (spec.c) and the run directory
 * (run.c) both use it. */
#ifndef GEM_RUNJSON_H
#define GEM_RUNJSON_H
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/optim.h"
#include "rules/rule.h"

#define RUN_FORMAT 1
#define RUN_MAX_BATCH 65536       /* run.json "train": batch in [1, RUN_MAX_BATCH] */
#define RUN_MAX_EPOCHS (1 << 20)  /* epochs in [1, RUN_MAX_EPOCHS] */
#define RUN_MAX_STEPS (1ull << 40) /* a budget in steps: in [1, RUN_MAX_STEPS] */
#define RUN_MAX_WARMUP (1ull << 40) /* warm-up steps: at most this */
#define RUN_MAX_CLIP 1e6

/* run.json's "train": the hyper-parameters of local training, as given (narrowed to floats when
 * a run is opened: struct run_train). */
struct run_train_spec {
	double lr, momentum, weight_decay;
	int nesterov, batch, epochs;
	uint64_t seed;
	/* the optimiser of local steps; written only when not the default (momentum SGD at a
	 * constant rate, unclipped), so that such a run's run.json is the one gem always wrote */
	enum optim_kind optimizer;
	uint64_t warmup;         /* steps */
	enum lr_shape schedule;
	double clip;             /* the gradient's global norm at most this; 0: none */
	/* micro-batches a local step's batch is cut into (model_set_micro), at most the batch;
	 * 0 or 1: none, not written */
	int micro;
	/* the run's budget in local steps per worker, which replaces its epochs; 0: the epochs.
	 * Stored by the server that is given one (gem-serve --steps), written only when set */
	uint64_t steps;
};

/* What run.json records. */
struct run_spec {
	char created[32];      /* UTC, "YYYY-MM-DDTHH:MM:SSZ"; "": run_make writes the time now */
	char model_name[64];
	json_t *model;         /* the model spec: a reference the spec holds (run_spec_free) */
	char data_name[256];   /* the dataset's name, or the directory given for it */
	char data_dir[PATH_MAX]; /* where it is (dataset_resolve's, paths absolute) */
	char data_label[256];  /* a CSV table's label column ("": none) */
	double holdout;        /* the fraction of the training samples held out as test (0: none) */
	double mean, std;      /* of the training set's values, bytes scaled to [0, 1] */
	/* per group (the data's channels or features: dataset_group_stats), malloc'ed; 0 groups:
	 * a run made before, normalised with mean and std */
	int norm_groups;
	double *norm_mean, *norm_std;
	double norm_scale;     /* what a stored value is multiplied by first: 1/255 (bytes) or 1 */
	struct run_train_spec train;
	int part_data;         /* the workers split the training set between them ("part_data") */
	struct rule_config rule;
	size_t nparams;        /* θ's floats, of the model: run_make sets it */
};

/* run.json's object for s (new reference; NULL: out of memory). */
json_t *run_spec_to_json(const struct run_spec *s);
/* Read and check run.json's object j into s (s->model a new reference): every missing or
 * ill-typed field is named (GEM_EUSAGE). s is the caller's to free either way. */
int run_spec_from_json(const json_t *j, struct run_spec *s, char *err);
void run_spec_free(struct run_spec *s);
/* For readers that want one member of a run.json that may be partial (a label): the rule's
 * name ("rule": a name, or an object with "name") and the model spec, NULL when missing; both
 * point into j. */
const char *run_spec_rule_name(const json_t *j);
const json_t *run_spec_model(const json_t *j);

/* The numbers of run.json's "train": their range, which gem-init's options check too, and what
 * an option's bad value is told. RUN_TRAIN_NUMS of them: lr, momentum, weight_decay, batch,
 * epochs. */
struct run_train_num {
	const char *key, *bad;
	double lo, hi;
	int integral;
	size_t off; /* in struct run_train_spec: a double, or an int when integral */
};
#define RUN_TRAIN_NUMS 5
extern const struct run_train_num run_train_nums[RUN_TRAIN_NUMS];
#endif
