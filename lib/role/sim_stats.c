/* sim_stats: what gem-sim counts and ends with: the options as a log event, each update's
 * statistics, and the summary (role/sim.h's struct sim_summary) with its quantiles. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "role/sim_impl.h"
#include "run/runlog.h"

/* ---- the summary ---- */

/* The options of the simulation, as an event line (threads left out: they change nothing). */
void sim_log_options(struct sim *s)
{
	const struct sim_opts *o = s->o;
	static const char *kinds[] = {"const", "normal", "lognormal"};
	char step[96];
	json_t *ev, *deaths = json_array(), *joins = json_array();
	if (o->step.kind == SIM_CONST)
		snprintf(step, sizeof step, "const:%.17g", o->step.a);
	else
		snprintf(step, sizeof step, "%s:%.17g,%.17g", kinds[o->step.kind], o->step.a, o->step.b);
	for (int i = 0; i < o->ndeaths; i++)
		json_array_append_new(deaths, json_pack("{s:i, s:f}", "worker", o->deaths[i].worker, "at",
							 o->deaths[i].at));
	for (int i = 0; i < o->njoins; i++)
		json_array_append_new(joins, json_real(o->joins[i]));
	ev = json_pack("{s:s, s:f, s:f, s:I, s:i, s:I, s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:o, s:o}", "event",
		       "sim", "time", clock_wall(), "vtime", 0.0, "version", (json_int_t)ps_version(s->ps),
		       "workers", o->nworkers, "steps", (json_int_t)o->steps, "step_time", step, "jitter",
		       o->jitter, "speed_spread", o->speed_spread, "stragglers", o->stragglers, "straggler_factor", o->straggler_factor,
		       "latency", o->latency, "server_time", o->server_time, "die", deaths, "join", joins);
	if (ev && (o->cost_a > 0 || o->cost_b > 0 || o->bandwidth > 0)) /* the server model: on */
		json_object_update_new(ev, json_pack("{s:f, s:f, s:f}", "server_cost_a", o->cost_a,
						     "server_cost_b", o->cost_b, "bandwidth", o->bandwidth));
	run_log_json(ps_log(s->ps), ev);
	json_decref(ev);
}

/* The figures the summary keeps of an applied update. */
int sim_summary_add(struct sim *s, float loss, const struct rule_stats *st)
{
	s->sum.updates++;
	s->tau_sum += (double)st->staleness;
	if (grow_array(&s->taus, &s->tau_cap, s->ntau + 1, sizeof *s->taus, 1024) < 0)
		return -1;
	s->taus[s->ntau++] = st->staleness;
	if (st->staleness > s->sum.tau_max)
		s->sum.tau_max = st->staleness;
	if (isfinite(loss)) {
		s->loss_ring[s->ring_i] = loss;
		s->ring_i = (s->ring_i + 1) % LOSS_TAIL;
		if (s->ring_n < LOSS_TAIL)
			s->ring_n++;
	}
	if (st->ntensors > 0) {
		if (grow_array(&s->pi_meds, &s->pi_cap, s->npi + (size_t)st->ntensors,
			       sizeof *s->pi_meds, 1024) < 0)
			return -1;
		for (int i = 0; i < st->ntensors; i++)
			s->pi_meds[s->npi++] = st->t[i].pi_median;
		s->scale_sum += st->all.scale;
		s->zero_sum += st->all.clamped0;
		s->scale_n++;
	}
	return 0;
}

/* ---- the summary's quantiles ---- */

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* The q-quantile of n sorted elements (the nearest rank at or below): its index. */
static size_t rank(size_t n, double q)
{
	return (size_t)(q * (double)(n - 1));
}

/* The summary's figures of the server model: staleness quantiles, waits, the busiest slice. */
static void summarise_queue(struct sim *s)
{
	struct sim_summary *m = &s->sum;
	if (s->ntau) {
		qsort(s->taus, s->ntau, sizeof *s->taus, cmp_u64);
		m->tau_p50 = s->taus[rank(s->ntau, 0.5)];
		m->tau_p99 = s->taus[rank(s->ntau, 0.99)];
	}
	if (s->nwait) {
		qsort(s->waits, s->nwait, sizeof *s->waits, cmp_double);
		m->wait_mean = s->wait_sum / (double)s->nwait;
		m->wait_p99 = s->waits[rank(s->nwait, 0.99)];
	}
	for (int k = 0; k < s->ncores; k++) {
		double l = s->busy_in[k] > s->busy_out[k] ? s->busy_in[k] : s->busy_out[k];
		if (s->busy_cpu[k] > m->busy)
			m->busy = s->busy_cpu[k];
		if (l > m->link_busy)
			m->link_busy = l;
	}
}

void sim_summarise(struct sim *s)
{
	struct sim_summary *m = &s->sum;
	struct run_progress p = ps_progress(s->ps);
	double l = 0;
	m->version = p.version;
	m->samples = p.samples;
	m->vtime = s->vnow;
	m->seconds = clock_mono() - s->t0;
	m->bytes_in = m->bytes_out = 0;
	for (int k = 0; k < s->ncores; k++) {
		struct ps_now now;
		ps_now(s->core[k], &now);
		m->bytes_in += now.bytes_in;
		m->bytes_out += now.bytes_out;
	}
	for (int i = 0; i < s->ring_n; i++)
		l += s->loss_ring[i];
	m->loss_tail = s->ring_n ? l / s->ring_n : NAN;
	m->tau_mean = m->updates ? s->tau_sum / (double)m->updates : 0;
	m->pi_median = m->scale_mean = m->zero_mean = NAN;
	if (s->npi) {
		qsort(s->pi_meds, s->npi, sizeof *s->pi_meds, cmp_float);
		m->pi_median = s->npi % 2 ? s->pi_meds[s->npi / 2]
					  : 0.5 * ((double)s->pi_meds[s->npi / 2 - 1] + s->pi_meds[s->npi / 2]);
		m->scale_mean = s->scale_sum / (double)s->scale_n;
		m->zero_mean = s->zero_sum / (double)s->scale_n;
	}
	summarise_queue(s);
}

