/* sim_queue: gem-sim's queues: the event queue (a binary heap), and the server model, each
 * slice's host a link in, a CPU and a link out, each FIFO (role/sim_impl.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/num.h"
#include "role/sim_impl.h"

/* ---- the event queue ---- */

static int ev_before(const struct event *x, const struct event *y)
{
	return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

int sim_heap_push(struct heap *h, struct event e)
{
	size_t i;
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct event *a = realloc(h->a, cap * sizeof *a);
		if (!a)
			return -1;
		h->a = a;
		h->cap = cap;
	}
	for (i = h->n++; i > 0 && ev_before(&e, &h->a[(i - 1) / 2]); i = (i - 1) / 2)
		h->a[i] = h->a[(i - 1) / 2];
	h->a[i] = e;
	return 0;
}

struct event sim_heap_pop(struct heap *h)
{
	struct event top = h->a[0], last = h->a[--h->n];
	size_t i = 0, c;
	while ((c = 2 * i + 1) < h->n) {
		if (c + 1 < h->n && ev_before(&h->a[c + 1], &h->a[c]))
			c++;
		if (!ev_before(&h->a[c], &last))
			break;
		h->a[i] = h->a[c];
		i = c;
	}
	if (h->n)
		h->a[i] = last;
	return top;
}

/* ---- the server model: each slice's host a link in, a CPU and a link out, each FIFO ---- */

/* Seconds a message of bytes takes through a link. */
static double link_time(const struct sim *s, uint64_t bytes)
{
	return s->o->bandwidth > 0 ? (double)bytes / s->o->bandwidth : 0;
}

/* A commit whose slices are bytes[k] (as encoded) arrives at the servers at t: when the last
 * slice is done with it (*start: when the last one started on it; *wait: the longest it waited
 * in a slice's queues). */
double sim_server_take(struct sim *s, double t, const uint64_t *bytes, double *start,
		   double *wait)
{
	double done = t;
	*start = t;
	*wait = 0;
	for (int k = 0; k < s->ncores; k++) {
		double x = link_time(s, bytes[k]), in = t > s->link_in[k] ? t : s->link_in[k];
		double at = in + x, st = at > s->cpu[k] ? at : s->cpu[k];
		double svc = s->o->server_time + s->o->cost_a * (double)s->cut[k].len + s->o->cost_b;
		s->link_in[k] = at;
		s->cpu[k] = st + svc;
		s->busy_in[k] += x;
		s->busy_cpu[k] += svc;
		if (st > *start)
			*start = st;
		if (s->cpu[k] > done)
			done = s->cpu[k];
		if ((in - t) + (st - at) > *wait)
			*wait = (in - t) + (st - at);
	}
	if (done > s->server_free)
		s->server_free = done;
	return done;
}

/* A join or a leave at t: the servers take it when every slice is free (it costs them no time). */
double sim_server_next(struct sim *s, double t)
{
	if (t < s->server_free)
		t = s->server_free;
	for (int k = 0; k < s->ncores; k++)
		s->cpu[k] = t;
	return s->server_free = t;
}

/* Worker w's reply (θ, or its slices), encoded (vworker_reply, vworker_joined), leaves the
 * servers at t: when it reaches w. */
double sim_reply_at(struct sim *s, const struct simw *w, double t)
{
	double r = t;
	for (int k = 0; k < s->ncores; k++) {
		double x = link_time(s, w->v.reply_bytes[k]),
		       out = t > s->link_out[k] ? t : s->link_out[k];
		s->link_out[k] = out + x;
		s->busy_out[k] += x;
		if (s->link_out[k] > r)
			r = s->link_out[k];
	}
	return r + s->o->latency;
}
