/* t5501: gem-sim's option values: step-time distributions, stragglers, deaths, and the check of
 * a whole set of options. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "role/sim.h"
#include "tap.h"

static void dist_ok(const char *s, int kind, double a, double b)
{
	struct sim_dist d;
	char err[GEM_ERRMAX] = "";
	int rc = sim_parse_dist(s, &d, err);
	ok(rc == 0 && d.kind == kind && d.a == a && d.b == b, "step time %s: kind %d, %g, %g (%s)", s,
	   kind, a, b, err);
}

static void dist_bad(const char *s)
{
	struct sim_dist d;
	char err[GEM_ERRMAX] = "";
	ok(sim_parse_dist(s, &d, err) == GEM_EUSAGE && strstr(err, "const:T"),
	   "step time \"%s\" refused: %s", s, err);
}

int main(void)
{
	struct sim_opts o;
	struct sim_death dd[2];
	double joins[1] = {3};
	char err[GEM_ERRMAX];
	int k;
	double f;

	dist_ok("const:1", SIM_CONST, 1, 0);
	dist_ok("const:0.25", SIM_CONST, 0.25, 0);
	dist_ok("normal:1,0.2", SIM_NORMAL, 1, 0.2);
	dist_ok("lognormal:0,0.5", SIM_LOGNORMAL, 0, 0.5);
	dist_ok("lognormal:-1.5,0.5", SIM_LOGNORMAL, -1.5, 0.5);
	dist_bad("");
	dist_bad("const");
	dist_bad("const:");
	dist_bad("const:-1");
	dist_bad("const:1,2");
	dist_bad("const:x");
	dist_bad("normal:1");
	dist_bad("normal:-1,1");
	dist_bad("normal:1,-1");
	dist_bad("normal:1,nan");
	dist_bad("lognormal:0");
	dist_bad("lognormal:0,-1");
	dist_bad("uniform:0,1");
	dist_bad("const:inf");

	ok(sim_parse_stragglers("2:4.5", &k, &f, err) == 0 && k == 2 && f == 4.5, "stragglers 2:4.5");
	ok(sim_parse_stragglers("0:1", &k, &f, err) == 0 && k == 0 && f == 1, "stragglers 0:1");
	ok(sim_parse_stragglers("2", &k, &f, err) == GEM_EUSAGE, "stragglers 2 refused");
	ok(sim_parse_stragglers("2:0.5", &k, &f, err) == GEM_EUSAGE, "stragglers 2:0.5 refused");
	ok(sim_parse_stragglers("1.5:2", &k, &f, err) == GEM_EUSAGE, "stragglers 1.5:2 refused");
	ok(sim_parse_stragglers("-1:2", &k, &f, err) == GEM_EUSAGE, "stragglers -1:2 refused");

	ok(sim_parse_death("3@12.5", &dd[0], err) == 0 && dd[0].worker == 3 && dd[0].at == 12.5, "die 3@12.5");
	ok(sim_parse_death("0@0", &dd[1], err) == 0 && dd[1].worker == 0 && dd[1].at == 0, "die 0@0");
	ok(sim_parse_death("3", &dd[1], err) == GEM_EUSAGE, "die 3 refused");
	ok(sim_parse_death("@3", &dd[1], err) == GEM_EUSAGE, "die @3 refused");
	ok(sim_parse_death("1@-1", &dd[1], err) == GEM_EUSAGE, "die 1@-1 refused");
	ok(sim_parse_death("x@1", &dd[1], err) == GEM_EUSAGE, "die x@1 refused");

	sim_opts_default(&o);
	ok(sim_opts_check(&o, err) == 0 && o.nworkers == 1 && o.step.kind == SIM_CONST && o.step.a == 1 &&
	   o.threads == 1 && o.jitter == 0, "defaults: 1 worker, const:1, 1 thread, no jitter");
	o.nworkers = 4;
	o.stragglers = 5;
	o.straggler_factor = 2;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "stragglers"), "5 stragglers of 4: %s", err);
	o.stragglers = 1;
	o.deaths = dd;
	o.ndeaths = 1;
	ok(sim_opts_check(&o, err) == 0, "worker 3 of 0..3 can die: %s", err);
	dd[0].worker = 4;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "die"), "worker 4 of 0..3 cannot: %s", err);
	o.joins = joins;
	o.njoins = 1;
	ok(sim_opts_check(&o, err) == 0, "worker 4 can die once one joins: %s", err);
	o.jitter = 1;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "jitter"), "jitter 1 refused");
	o.jitter = 0;
	o.threads = 0;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "threads"), "0 threads refused");
	o.threads = 1;
	o.nworkers = 0;
	o.njoins = 0;
	o.ndeaths = 0;
	o.stragglers = 0;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "workers"), "no workers refused");
	o.nworkers = SIM_MAX_WORKERS;
	ok(SIM_MAX_WORKERS >= 10000 && sim_opts_check(&o, err) == 0, "%d workers: %s", o.nworkers, err);
	o.nworkers = SIM_MAX_WORKERS + 1;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "workers"), "%d workers refused",
	   o.nworkers);

	sim_opts_default(&o);
	o.jitter = 0.5;
	int rc = sim_timing_preset("measured", &o, err);
	ok(rc == 0 && o.step.kind == SIM_LOGNORMAL && o.step.a == 0 &&
	   o.step.b > 0.3 && o.step.b < 0.8 && o.speed_spread > 0 && o.jitter == 0,
	   "preset measured: lognormal:0,%g, spread %g", o.step.b, o.speed_spread);
	ok(sim_timing_preset("roundrobin", &o, err) == 0 && o.step.kind == SIM_CONST && o.step.a == 1 &&
	   o.speed_spread == 0, "preset roundrobin: const:1, no spread");
	ok(sim_timing_preset("measure", &o, err) == GEM_EUSAGE && strstr(err, "measured"),
	   "an unknown preset names the valid ones: %s", err);
	o.speed_spread = -0.1;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "speed-spread"), "spread < 0 refused");
	sim_opts_default(&o);
	o.step = (struct sim_dist){SIM_LOGNORMAL, -1.5, 0.5};
	ok(sim_opts_check(&o, err) == 0, "lognormal:-1.5,0.5 (steps of e^-1.5 s) taken: %s", err);
	o.step = (struct sim_dist){SIM_NORMAL, -1, 0.5};
	ok(sim_opts_check(&o, err) == GEM_EUSAGE, "normal:-1,0.5 refused");
	o.step = (struct sim_dist){SIM_CONST, 1, 0};
	o.cost_b = -1;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "server-cost"), "a cost < 0 refused");
	o.cost_b = 0;
	o.bandwidth = NAN;
	ok(sim_opts_check(&o, err) == GEM_EUSAGE && strstr(err, "bandwidth"), "bandwidth NaN refused");
	return done_testing();
}
