/* spec: how a run is made. struct run_spec is run.json (gem-protocol(7)): run_spec_to_json
 * writes it, run_spec_from_json reads it (run_open reads run.json through it). struct run_opts
 * is a new run as a command line asks for it: gem-init's options, which gem-sim takes too, each
 * parsed here once. run_make is the one maker of a run: the model built once, θ₀ written to
 * params.gem and run.json last, under the run's lock throughout. */
#ifndef GEM_SPEC_H
#define GEM_SPEC_H
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>

#include "nn/optim.h"
#include "rules/rule.h"

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
	int shard_data;        /* the workers split the training set between them ("shard") */
	struct rule_config rule;
	size_t nparams;        /* θ's floats, of the model: run_make sets it */
};

/* run.json's object for s (new reference; NULL: out of memory). */
json_t *run_spec_to_json(const struct run_spec *s);
/* Read and check run.json's object j into s (s->model a new reference): every missing or
 * ill-typed field is named (GEM_EUSAGE). s is the caller's to free either way. */
int run_spec_from_json(const json_t *j, struct run_spec *s, char *err);
void run_spec_free(struct run_spec *s);

/* run_make's flags. */
enum {
	RUN_MAKE_FORCE = 1, /* replace a run there (not one in use), and every file it left */
};

/* Make a run in dir (made with its parents, or an empty directory taken) from spec: the model
 * built once from spec->model, its θ₀ drawn from the seed into params.gem at version 0, then
 * run.json, all under the run's lock, so that a run is whole once run.json is there, and no
 * server or trainer takes it before. A spec whose run.json run_open would refuse is refused
 * (GEM_EUSAGE) before anything is written; so is an existing run unless RUN_MAKE_FORCE, which
 * removes its run.json first and then every file it left; a run in use is refused (GEM_EUSAGE
 * naming the holder). Sets spec->nparams, and spec->created when empty. */
int run_make(const char *dir, struct run_spec *spec, int flags, char *err);

/* A new run as its options ask for it (run_opts_init's defaults are gem-init's). */
struct run_opts {
	const char *model;      /* a built-in model's name (share/gem/models/NAME.json) or a file */
	const char *data;       /* a dataset's name or directory (dataset_resolve) */
	int data_set;           /* --data was given (an external model refuses it) */
	double exec_timeout;    /* --exec-timeout: seconds an external model's request may take */
	const char *label;      /* --label: a CSV table's label column */
	double holdout;         /* --holdout */
	const char *init_from;  /* --init-from: θ₀ from this safetensors file */
	const char *rule;
	struct run_train_spec train;
	struct {
		int opt;
		const char *arg;
	} ruleopts[32];         /* the rule's options, in the order given: applied once the rule
				 * is known */
	int nruleopts;
	int force;
	int usage;              /* after an error: it is about one option (its usage line applies) */
	int nsamples;           /* run_make_new: the training set's samples */
	int momentum_set;       /* --momentum was given (AdamW refuses one) */
};

/* The options' getopt_long table (the short letters: RUN_OPTS_SHORT), and how many. */
extern const struct option run_opts_long[];
#define RUN_OPTS_SHORT "m:d:r:b:e:s:n:f"
#define RUN_OPTS_N 35

void run_opts_init(struct run_opts *o);
/* Option c (a val of run_opts_long) with its argument into o: 0, 1 when c is no option of a
 * run, GEM_EUSAGE for a bad value ("--lr: not a positive number: x"). A rule's options are
 * checked by run_make_new, once the rule is known. */
int run_opts_take(struct run_opts *o, int c, const char *arg, char *err);
/* Which option of a run the command-line argument a is ("--lr", "--lr=0.1", "-m", "-mcnn"): its
 * val, and *value whether the next argument is its value; -1 for none. */
int run_opts_match(const char *a, int *value);
/* run_opts_long and then more (up to its zero entry) into out (cap entries, the zero one
 * included): a command's own table. 0, or -1 when cap is too small. */
int run_opts_table(const struct option *more, struct option *out, size_t cap);

/* Make a new run in dir as o asks: its rule's options checked, the model found (a name, else a
 * file) and built once, the data found and its training set checked against the model (its
 * mean, std and o->nsamples taken), then run_make's files (RUN_MAKE_FORCE when o->force).
 * *spec is the run made (the caller frees it either way). GEM_EUSAGE: options, a model or data
 * that do not fit (o->usage when one option is at fault); GEM_EFAIL: the data cannot be read, or
 * the directory written. */
int run_make_new(const char *dir, struct run_opts *o, struct run_spec *spec, char *err);
#endif
