/* gem-init: make a run directory: model, data, rule, hyper-parameters, initial θ. */
#include <getopt.h>
#include <stdio.h>

#include "base/err.h"
#include "base/log.h"
#include "base/prog.h"
#include "run/spec.h"

static const char usage_line[] = "usage: gem-init [options] RUNDIR";

static void usage(FILE *f)
{
	fprintf(f, "%s\n", usage_line);
	fputs("Make a training run: model, data, update rule, hyper-parameters, initial\n"
	      "parameters.\n"
	      "\n"
	      "  -m, --model NAME|FILE|exec:CMD  built-in model NAME (cnn, gpt, mlp,\n"
	      "                          resnet), a spec FILE (see gem-model(5)), or a\n"
	      "                          program CMD that gem runs and asks for losses and\n"
	      "                          gradients on its own data (see gem-exec(7));\n"
	      "                          default cnn\n"
	      "      --exec-timeout S    exec: seconds a request of the program may take;\n"
	      "                          default 60\n"
	      "  -d, --data NAME|DIR|SPEC  dataset: a name or directory of IDX files, a\n"
	      "                          text (text:FILE), csv:FILE, npy:FEATURES,LABELS,\n"
	      "                          npz:FILE[,FEATURES,LABELS] or cifar:DIR (see\n"
	      "                          gem-data(5)); default\n"
	      "                          fashion-mnist\n"
	      "      --label COLUMN      csv: the label column's name\n"
	      "      --holdout FRACTION  hold out FRACTION of the training samples (drawn\n"
	      "                          from the seed) as the test split; a dataset without\n"
	      "                          test files needs it\n"
	      "      --init-from FILE    initial parameters from a safetensors FILE (as\n"
	      "                          gem-export writes it): names and shapes must match\n"
	      "                          the model's\n"
	      "  -r, --rule NAME         update rule for gem-serve: gem downpour dynsgd easgd\n"
	      "                          dcasgd sync dma diloco async-diloco; default gem\n"
	      "      --lr X              learning rate η; default 0.05\n"
	      "      --momentum X        momentum μ; default 0.9\n"
	      "      --nesterov          Nesterov momentum (local training)\n"
	      "      --weight-decay X    weight decay (sgd: L2; adamw: decoupled, of the\n"
	      "                          matrices only); default 0\n"
	      "      --optimizer sgd|adamw  the optimiser of local steps; default sgd\n"
	      "                          (momentum SGD); adamw takes no --momentum\n"
	      "      --warmup STEPS      linear warm-up of the learning rate; default 0\n"
	      "      --schedule constant|cosine  the rate after the warm-up: constant, or a\n"
	      "                          cosine to 0.1 η at the budget's last step; default\n"
	      "                          constant\n"
	      "      --clip NORM         clip the gradient's global norm to NORM; default 0\n"
	      "                          (none)\n"
	      "      --microbatches G    cut each step's batch into G micro-batches whose\n"
	      "                          gradients are summed: with gem-work --threads,\n"
	      "                          each thread trains micro-batches whole; default 1\n"
	      "  -b, --batch N           minibatch size; default 64\n"
	      "  -e, --epochs N          budget: epochs per worker; default 1\n"
	      "  -s, --seed N            seed of initialisation and data order; default 1\n"
	      "      --kappa X           gem: κ; default 1\n"
	      "      --pi-max X          gem: π_max; default 5\n"
	      "      --eps X             gem: ε; default 1e-12\n"
	      "      --gem-ref pull|commit  gem: s_w is theta before the worker's last commit\n"
	      "                          was applied, eps inside |dtheta + eps| (the authors'\n"
	      "                          code), or theta after it; default commit\n"
	      "      --state-precision f32|bf16  gem: m_w and s_w on the server in float32,\n"
	      "                          or bfloat16 rounded to nearest even (half the\n"
	      "                          memory); default f32\n"
	      "      --window N          downpour, easgd: λ local steps per commit; default 1\n"
	      "                          (easgd 10); dma: β local steps per cycle, default 4;\n"
	      "                          diloco, async-diloco: H inner steps per commit,\n"
	      "                          default 50; gem: H inner steps of the run's\n"
	      "                          optimiser per commit, GEM on their sum; default 1\n"
	      "      --alpha X           easgd: α; default 0.9/workers\n"
	      "      --lambda-dc X       dcasgd: λ; default 0.04\n"
	      "      --outer-lr X        diloco, async-diloco: the outer Nesterov step's rate;\n"
	      "                          default 0.7 (async-diloco with --workers N: 0.7/N)\n"
	      "      --outer-momentum X  diloco, async-diloco: the outer momentum; default 0.9;\n"
	      "                          gem with --window H > 1: its proxy's momentum over\n"
	      "                          cycles; default 0\n"
	      "      --delayed-nesterov N  async-diloco: a momentum step with the mean of every\n"
	      "                          N commits, plain steps between; default: --workers\n"
	      "                          (0, off, without it or with --fragments)\n"
	      "      --dynamic-local-updates  async-diloco: each worker's H scaled to its speed\n"
	      "                          (the fastest takes --window steps), told in the reply\n"
	      "      --fragments P       diloco, async-diloco: θ in P slices synchronised in\n"
	      "                          turn, one every H/P inner steps (P divides H);\n"
	      "                          default 1 (gem-serve: not with --slice)\n"
	      "      --mix X             diloco, async-diloco: a fragment's θ mixed into the\n"
	      "                          worker's as x = X·x + (1 − X)·θ, X in [0, 1);\n"
	      "                          default 0 (replaced)\n"
	      "      --overlap T         diloco, async-diloco: T < H/P inner steps taken\n"
	      "                          after a commit before its reply is mixed in;\n"
	      "                          default 0 (it waits; gem-sim only for T > 0)\n"
	      "  -n, --workers N         workers the run expects (sync, dma and diloco wait for\n"
	      "                          that many; easgd's α; async-diloco's outer lr and\n"
	      "                          delayed Nesterov; gem-serve ends the run once they\n"
	      "                          came); default 1\n"
	      "  -f, --force             replace an existing run (not one in use) and remove\n"
	      "                          its files\n"
	      "  -q, --quiet             print nothing on success\n"
	      "  -h, --help              show this help\n"
	      "  -V, --version           show the version\n"
	      "\n"
	      "The training defaults (momentum SGD, lr 0.05, batch 64, one epoch) are the GEM\n"
	      "paper's cnn recipe, for every model: a model spec carries no training options.\n"
	      "The built-in resnet and gpt were measured with others (gem-model(5)). run.json\n"
	      "records every value used.\n",
	      f);
}

static const struct option own_opts[] = {
	{.name = "quiet", .has_arg = no_argument, .val = 'q'},
	{.name = "help", .has_arg = no_argument, .val = 'h'},
	{.name = "version", .has_arg = no_argument, .val = 'V'},
	{0},
};

/* What gem-init made, in one line. */
static void print_made(const char *dir, const struct run_spec *s, const struct run_opts *o)
{
	printf("%s: model %s (%zu parameters), data %s (%d samples, mean %.4f, std %.4f), rule %s\n",
	       dir, s->model_name, s->nparams, s->data_dir, o->nsamples, s->mean, s->std, s->rule.name);
}

int main(int argc, char **argv)
{
	struct option longopts[RUN_OPTS_N + 4];
	char err[GEM_ERRMAX];
	struct run_opts o;
	struct run_spec spec;
	int c, quiet = 0, rc;

	if (log_init("gem-init", err) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		return EXIT_USAGE;
	}
	run_opts_init(&o);
	run_opts_table(own_opts, longopts, sizeof longopts / sizeof *longopts);
	/* RUN_OPTS_SHORT and ours, spelt out: t0101 reads a program's letters from its source */
	while ((c = getopt_long(argc, argv, "m:d:r:b:e:s:n:fqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'q': quiet = 1; log_quiet(); break;
		case 'h': usage(stdout); return 0;
		case 'V': prog_print_version("gem-init"); return 0;
		case '?': fprintf(stderr, "%s\n", usage_line); return EXIT_USAGE;
		default:
			if (run_opts_take(&o, c, optarg, err) < 0) {
				fprintf(stderr, "gem-init: %s\n%s\n", err, usage_line);
				return EXIT_USAGE;
			}
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "gem-init: %s\n%s\n", optind == argc ? "no RUNDIR given" : "too many arguments",
			usage_line);
		return EXIT_USAGE;
	}
	prog_blas_init();
	if ((rc = run_make_new(argv[optind], &o, &spec, err)) < 0) {
		fprintf(stderr, "gem-init: %s\n", err);
		if (o.usage)
			fprintf(stderr, "%s\n", usage_line);
	} else if (!quiet) {
		print_made(argv[optind], &spec, &o);
	}
	run_spec_free(&spec);
	return prog_exit(rc);
}
