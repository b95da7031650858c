#include "role/local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "nn/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "role/progress.h"
#include "role/trainer.h"
#include "role/work.h"
#include "run/run.h"
#include "run/runlog.h"

struct local {
	struct local_opts o;
	struct local_info info;
	struct run run;
	struct trainer t;
	struct dataset ds;
	struct feed f;
	int feed_open;
	struct optim opt;
	float *state;          /* the optimiser's state as saved (optim_state_floats) */
	struct run_progress p; /* θ's, as it would be saved now (but elapsed: at the session's start) */
	FILE *log;
	uint64_t target;       /* samples at which the budget is spent */
	struct progress meter; /* rates, ETA and smoothed loss of the session */
};

/* Save θ with the optimiser's state, then θ alone (run/run.h: a crash between the two leaves
 * the state file newer, and the next session resumes from it). */
static int save_local(struct local *l, const struct run_progress *p, char *err)
{
	size_t ns = optim_state_floats(&l->opt);
	uint64_t step;
	fflush(l->log);
	if (ns) {
		optim_state_get(&l->opt, l->state, &step);
		if (run_local_state_save(&l->run, model_params(l->t.m), model_nparams(l->t.m), l->state,
					 ns, p, err) < 0)
			return GEM_EFAIL;
	}
	return run_params_save(&l->run, model_params(l->t.m), model_nparams(l->t.m), p, err);
}

/* The run's optimiser, its schedule over the run's budget of steps, with the momentum or
 * moments of the interrupted session (θ and its progress too, when its state file is newer
 * than params.gem), at the step the progress so loaded puts it, so that a resumed run is the
 * same run. */
static int open_optim(struct local *l, const char *rundir, char *err)
{
	struct optim_config c;
	size_t ns;
	int rc, got = 0;
	run_optim_config(&l->run, feed_steps(&l->f, run_budget(&l->run, feed_epoch(&l->f))), &c);
	if ((rc = optim_init(&l->opt, &c, model_layout(l->t.m), err)) < 0)
		return rc;
	ns = optim_state_floats(&l->opt);
	if (ns && !(l->state = malloc(sizeof *l->state * ns)))
		return gem_errf(err, GEM_ENOMEM, "out of memory for the optimiser's state");
	if (ns && (got = run_local_state_load(&l->run, model_params(l->t.m), model_nparams(l->t.m),
					      l->state, ns, &l->p, err)) < 0)
		return got;
	if (got) {
		optim_state_set(&l->opt, l->state, feed_steps(&l->f, l->p.samples));
		return 0;
	}
	if (ns && l->p.version > 0)
		log_warn("%s: no optimiser state of version %llu; the %s at 0", rundir,
			 (unsigned long long)l->p.version, c.kind == OPTIM_SGD ? "momentum starts" : "moments start");
	optim_restart(&l->opt, feed_steps(&l->f, l->p.samples), c.total_steps);
	return 0;
}

/* θ, the data, the optimiser and the log of the run just opened. */
static int open_training(struct local *l, const char *rundir, char *err)
{
	struct run *run = &l->run;
	int rc;
	if ((rc = run_lock(run, err)) < 0 || (rc = trainer_open(&l->t, run, err)) < 0 ||
	    (rc = run_params_load(run, NULL, model_params(l->t.m), model_nparams(l->t.m), &l->p, err)) < 0 ||
	    (rc = run_data_load(run, NULL, "train", &l->ds, err)) < 0 ||
	    (rc = feed_open(&l->f, run, &l->ds, TRAINER_LOCAL, l->o.t.part_i, l->o.t.part_n, err)) < 0)
		return rc;
	l->feed_open = 1;
	if ((rc = open_optim(l, rundir, err)) < 0 || (rc = run_log_open(run, l->p.version, &l->log, err)) < 0)
		return rc;
	/* Each epoch consumes exactly the part once, so samples seen give the position. */
	feed_seek(&l->f, l->p.samples);
	return 0;
}

int local_open(const char *rundir, const struct local_opts *o, struct local **out, char *err)
{
	struct local *l = calloc(1, sizeof *l);
	uint64_t epoch;
	int rc;
	*out = NULL;
	if (!l)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	l->o = *o;
	if (run_open(rundir, &l->run, err) < 0) {
		local_close(l);
		return GEM_EUSAGE;
	}
	if ((rc = open_training(l, rundir, err)) < 0) {
		/* a run in use, data that does not fit the model: refused as gem-serve refuses them */
		local_close(l);
		return rc;
	}
	epoch = feed_epoch(&l->f);
	l->target = o->t.steps ? UINT64_MAX
		    : o->t.epochs ? l->p.samples + (uint64_t)o->t.epochs * epoch
				  : run_budget(&l->run, epoch);
	l->info = (struct local_info){.epochs = l->run.spec.train.epochs,
				      .steps = l->run.spec.train.steps, .epoch = epoch,
				      .version = l->p.version, .samples = l->p.samples,
				      .spent = l->p.samples >= l->target};
	*out = l;
	return 0;
}

const struct local_info *local_info(const struct local *l)
{
	return &l->info;
}

/* A checkpoint when checkpoint_every seconds have passed since *last (a failure is a warning:
 * training goes on, and the final save says whether it is fatal). */
static void checkpoint_due(struct local *l, double now, double t0, double *last)
{
	char err[GEM_ERRMAX];
	struct run_progress cp = l->p;
	if (l->o.checkpoint_every <= 0 || now - *last < l->o.checkpoint_every)
		return;
	cp.elapsed += now - t0;
	if (save_local(l, &cp, err) < 0)
		log_warn("checkpoint failed: %s", err);
	*last = now;
}

int local_run(struct local *l, prog_stop_flag *stop, local_progress_fn progress, void *ctx,
	      struct local_result *r, char *err)
{
	double t0 = clock_mono(), last_ckpt = t0;
	float *theta = model_params(l->t.m);
	int n;

	memset(r, 0, sizeof *r);
	r->version = l->p.version;
	r->total = l->p.samples;
	if (l->info.spent) {
		r->end = LOCAL_SPENT;
		return 0;
	}
	run_log_start(l->log, &l->run, "local", NULL, l->p.version, model_layout(l->t.m));
	progress_start(&l->meter, l->p.version, l->p.samples,
		       l->o.t.steps
			       ? l->p.samples + l->o.t.steps * (uint64_t)l->run.spec.train.batch
			       : l->target, t0);
	while (!(stop && *stop) && l->p.samples < l->target && (!l->o.t.steps || r->steps < l->o.t.steps)) {
		double step_start = clock_mono(), now;
		int rc = trainer_step(&l->t, &l->f, &r->loss, &n, err);
		if (rc < 0) /* the model failed: nothing saved past the last checkpoint */
			return rc;
		if (rc) {
			r->end = LOCAL_DIVERGED;
			break;
		}
		optim_step(&l->opt, theta, model_grads(l->t.m));
		l->p.version++;
		l->p.samples += (uint64_t)n;
		now = clock_mono();
		run_log_update(l->log, &(struct run_log_update){.time = clock_wall(),
				.elapsed = l->p.elapsed + (now - t0), .vtime = -1, .version = l->p.version,
				.loss = r->loss, .samples = l->p.samples});
		if (l->o.t.slowdown > 1)
			work_slowdown(now - step_start, l->o.t.slowdown);
		r->steps++;
		r->samples = l->p.samples - l->info.samples;
		r->version = l->p.version;
		r->total = l->p.samples;
		r->seconds = now - t0;
		progress_loss(&l->meter, r->loss);
		progress_at(&l->meter, l->p.version, l->p.samples, now);
		if (progress) {
			progress_get(&l->meter, now, &r->p);
			progress(r, ctx);
		}
		checkpoint_due(l, now, t0, &last_ckpt);
	}
	if (r->end == LOCAL_BUDGET && stop && *stop)
		r->end = LOCAL_STOPPED;
	r->seconds = clock_mono() - t0;
	if (r->end == LOCAL_DIVERGED) {
		fflush(l->log);
		return 0;
	}
	l->p.elapsed += r->seconds;
	return save_local(l, &l->p, err) < 0 ? GEM_EFAIL : 0;
}

void local_close(struct local *l)
{
	if (!l)
		return;
	optim_free(&l->opt);
	free(l->state);
	if (l->log)
		fclose(l->log);
	if (l->feed_open)
		feed_close(&l->f);
	dataset_free(&l->ds);
	trainer_close(&l->t);
	if (l->run.json)
		run_close(&l->run);
	free(l);
}
