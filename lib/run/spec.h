/* spec: how a run is made (run.json itself, struct run_spec, is runjson's). struct run_opts
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
#include "run/runjson.h"


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
#define RUN_OPTS_N 36

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
