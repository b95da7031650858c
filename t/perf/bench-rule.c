/* bench-rule: µs of CPU time per commit of every rule on the server (the process's CPU clock:
 * the machine is shared, and wall time counts the other jobs too), θ of the cnn's 163,790
 * floats in its 10 tensors. GEM with and without the per-tensor medians (tensor_stats) and
 * without stats at all (st = NULL). TSV on stdout. Usage: bench-rule [commits per case, default
 * 300] */
#include "base/err.h"
#include "base/rng.h"
#include "rules/rule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct layout cnn_layout(void)
{
	/* conv 10×1×5×5 + 10, conv 20×10×5×5 + 20, dense 300×320 + 300, 200×300 + 200, 10×200 + 10 */
	static const int shapes[10][4] = {{10, 1, 5, 5}, {10}, {20, 10, 5, 5}, {20}, {300, 320},
					  {300}, {200, 300}, {200}, {10, 200}, {10}};
	static const int ndims[10] = {4, 1, 4, 1, 2, 1, 2, 1, 2, 1};
	struct layout l;
	memset(&l, 0, sizeof l);
	l.ntensors = 10;
	for (int i = 0; i < 10; i++) {
		struct layout_tensor *t = &l.t[i];
		snprintf(t->name, sizeof t->name, "%d.%s", i / 2, i % 2 ? "bias" : "weight");
		t->ndim = ndims[i];
		t->size = 1;
		for (int k = 0; k < t->ndim; k++) {
			t->shape[k] = shapes[i][k];
			t->size *= (size_t)shapes[i][k];
		}
		t->offset = l.total;
		l.total += t->size;
	}
	return l;
}

/* Time `commits` commits rotating over `workers` workers; returns µs per commit. */
static double bench(const char *name, int tensor_stats, int use_stats, int workers, int commits,
		    const struct layout *l, const float *theta, float **updates, int nupd,
		    float *reply)
{
	struct rule_config c;
	struct rule *r;
	struct rule_stats st;
	char err[GEM_ERRMAX];
	uint64_t ver = 0;
	double t0, t1;

	rule_config_default(name, &c, err);
	c.nworkers = workers;
	c.tensor_stats = tensor_stats;
	if (rule_create(&c, l, theta, &r, err) < 0) {
		fprintf(stderr, "bench-rule: %s: %s\n", name, err);
		exit(1);
	}
	for (int w = 0; w < workers; w++)
		rule_join(r, w, err);
	/* warm up once over every worker, then time */
	for (int pass = 0; pass < 2; pass++) {
		int n = pass ? commits : workers;
		t0 = now();
		for (int i = 0; i < n; i++) {
			int w = i % workers;
			/* sync needs every worker at the round's version; others see τ = workers − 1 */
			uint64_t base = !strcmp(name, "sync") || ver < (uint64_t)workers ? ver : ver - (uint64_t)workers + 1;
			if (rule_commit(r, w, updates[i % nupd], base, &ver, reply,
					use_stats ? &st : NULL, err) < 0) {
				fprintf(stderr, "bench-rule: %s: %s\n", name, err);
				exit(1);
			}
		}
		t1 = now();
	}
	rule_destroy(r);
	return 1e6 * (t1 - t0) / commits;
}

int main(int argc, char **argv)
{
	struct layout l = cnn_layout();
	int commits = argc > 1 ? atoi(argv[1]) : 300, nupd = 8;
	size_t bytes = l.total * sizeof(float);
	float *theta0 = malloc(bytes), *reply = malloc(bytes);
	float *updates[8], *xs[8];
	struct rng g;
	static const struct {
		const char *name;
		int tensor_stats, use_stats, workers;
	} cases[] = {
		{"gem", 1, 1, 4},      {"gem", 0, 1, 4},    {"gem", 0, 0, 4},  {"gem", 1, 1, 32},
		{"gem", 0, 1, 32},     {"downpour", 0, 1, 4}, {"dynsgd", 0, 1, 4}, {"easgd", 0, 1, 4},
		{"dcasgd", 0, 1, 4},   {"sync", 0, 1, 4},
	};

	if (commits < 1)
		commits = 300;
	rng_seed(&g, 1, 1);
	for (size_t i = 0; i < l.total; i++)
		theta0[i] = 0.05f * (float)rng_normal(&g);
	for (int k = 0; k < nupd; k++) {
		updates[k] = malloc(bytes);
		xs[k] = malloc(bytes);
		for (size_t i = 0; i < l.total; i++) {
			updates[k][i] = 1e-3f * (float)rng_normal(&g);
			xs[k][i] = theta0[i] + updates[k][i];
		}
	}
	printf("# rule\ttensor_stats\tstats\tworkers\tfloats\tcommits\tus_per_commit\n");
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		double us;
		/* every case from the same θ; easgd gets x = θ + u, the others Δθ = u */
		us = bench(cases[k].name, cases[k].tensor_stats, cases[k].use_stats, cases[k].workers,
			   commits, &l, theta0, strcmp(cases[k].name, "easgd") ? updates : xs, nupd,
			   reply);
		printf("%s\t%d\t%d\t%d\t%zu\t%d\t%.1f\n", cases[k].name, cases[k].tensor_stats,
		       cases[k].use_stats, cases[k].workers, l.total, commits, us);
		fflush(stdout);
	}
	for (int k = 0; k < nupd; k++) {
		free(updates[k]);
		free(xs[k]);
	}
	free(theta0);
	free(reply);
	return 0;
}
