#include "nn/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#else
#define POOL_PAUSE() ((void)0)
#endif

/* One job at a time: the caller publishes fn, arg, n, sets pending to the workers' count and
 * bumps gen under mu (so that a worker about to sleep cannot miss it); each worker runs its
 * part and the last one to finish signals done. Waiting is a poll of the atomic for `spin`
 * iterations, then a sleep on a condition variable. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static atomic_ulong gen;
static atomic_int pending, quit, busy;
static atomic_long spin = POOL_SPIN_DEFAULT;
static void (*job_fn)(void *, int, int);
static void *job_arg;
static int job_n;
static int nthreads = 1; /* the caller and nthreads − 1 workers */
static pthread_t th[POOL_MAX_THREADS];
static _Thread_local int in_part, self;

struct start {
	int id;
	unsigned long gen;
};
static struct start starts[POOL_MAX_THREADS];

static void *worker(void *p)
{
	int id = ((struct start *)p)->id;
	unsigned long seen = ((struct start *)p)->gen, g = seen;
	self = id;
	in_part = 1; /* a kernel called from a part runs its own parts here, one after another */
	for (;;) {
		long s = atomic_load_explicit(&spin, memory_order_relaxed);
		for (long k = 0; k < s && (g = atomic_load_explicit(&gen, memory_order_acquire)) == seen; k++)
			POOL_PAUSE();
		if (g == seen) {
			pthread_mutex_lock(&mu);
			while ((g = atomic_load_explicit(&gen, memory_order_acquire)) == seen)
				pthread_cond_wait(&wake, &mu);
			pthread_mutex_unlock(&mu);
		}
		seen = g;
		if (atomic_load(&quit))
			return NULL;
		if (id < job_n)
			job_fn(job_arg, id, job_n);
		if (atomic_fetch_sub(&pending, 1) == 1) {
			pthread_mutex_lock(&mu);
			pthread_cond_signal(&done);
			pthread_mutex_unlock(&mu);
		}
	}
}

static void stop_workers(void)
{
	pthread_mutex_lock(&mu);
	atomic_store(&quit, 1);
	atomic_fetch_add(&gen, 1);
	pthread_cond_broadcast(&wake);
	pthread_mutex_unlock(&mu);
	for (int i = 1; i < nthreads; i++)
		pthread_join(th[i], NULL);
	nthreads = 1;
	atomic_store(&quit, 0);
}

int pool_set_threads(int t)
{
	pthread_attr_t attr;
	t = t < 1 ? 1 : t > POOL_MAX_THREADS ? POOL_MAX_THREADS : t;
	if (t == nthreads)
		return nthreads;
	stop_workers();
	if (t == 1 || pthread_attr_init(&attr))
		return nthreads;
	pthread_attr_setstacksize(&attr, POOL_STACK);
	for (int i = 1; i < t; i++) {
		starts[i] = (struct start){i, atomic_load(&gen)};
		if (pthread_create(&th[i], &attr, worker, &starts[i]))
			break;
		nthreads = i + 1;
	}
	pthread_attr_destroy(&attr);
	return nthreads;
}

int pool_threads(void)
{
	return nthreads;
}

int pool_worker(void)
{
	return self;
}

int pool_in_part(void)
{
	return in_part;
}

void pool_set_spin(long spins)
{
	atomic_store(&spin, spins < 0 ? 0 : spins);
}

void pool_run(void (*fn)(void *arg, int i, int n), void *arg, int n)
{
	int expect = 0;
	if (n <= 1 || n > nthreads || in_part || !atomic_compare_exchange_strong(&busy, &expect, 1)) {
		for (int i = 0; i < n; i++)
			fn(arg, i, n);
		return;
	}
	job_fn = fn;
	job_arg = arg;
	job_n = n;
	atomic_store(&pending, nthreads - 1);
	pthread_mutex_lock(&mu);
	atomic_fetch_add_explicit(&gen, 1, memory_order_release);
	pthread_cond_broadcast(&wake);
	pthread_mutex_unlock(&mu);
	in_part = 1;
	fn(arg, 0, n);
	in_part = 0;
	long s = atomic_load_explicit(&spin, memory_order_relaxed);
	for (long k = 0; k < s && atomic_load_explicit(&pending, memory_order_acquire); k++)
		POOL_PAUSE();
	if (atomic_load_explicit(&pending, memory_order_acquire)) {
		pthread_mutex_lock(&mu);
		while (atomic_load(&pending))
			pthread_cond_wait(&done, &mu);
		pthread_mutex_unlock(&mu);
	}
	atomic_store(&busy, 0);
}

/* The chunks of a pool_chunks call: part q owns [n·q/parts, n·(q+1)/parts) and takes them
 * from next[q] on; every part goes through the others' counters when its own runs out. A
 * counter to a cache line: parts take chunks without fighting for one. */
struct chunks {
	void (*fn)(void *, int, int);
	void *arg;
	int n, parts;
	struct {
		atomic_int next;
		char pad[64 - sizeof(atomic_int)];
	} q[POOL_MAX_THREADS];
};

static void run_chunks(void *p, int i, int parts)
{
	struct chunks *c = p;
	for (int d = 0; d < parts; d++) {
		int q = (i + d) % parts, end = (int)((long)c->n * (q + 1) / parts), k;
		while ((k = atomic_fetch_add_explicit(&c->q[q].next, 1, memory_order_relaxed)) < end)
			c->fn(c->arg, k, i);
	}
}

void pool_chunks(int n, int parts_max, void (*fn)(void *arg, int chunk, int part), void *arg)
{
	int parts = n < nthreads ? n : nthreads;
	if (parts_max > 0 && parts > parts_max)
		parts = parts_max;
	if (parts <= 1 || in_part) {
		for (int k = 0; k < n; k++)
			fn(arg, k, 0);
		return;
	}
	struct chunks c;
	c.fn = fn, c.arg = arg, c.n = n, c.parts = parts;
	for (int q = 0; q < parts; q++)
		atomic_init(&c.q[q].next, (int)((long)n * q / parts));
	pool_run(run_chunks, &c, parts);
}

void pool_chunk_bounds(long n, long unit, int chunks, int c, long *lo, long *hi)
{
	long units = (n + unit - 1) / unit, h = units * (c + 1) / chunks * unit;
	*lo = units * c / chunks * unit;
	*hi = h < n ? h : n;
}

int pool_chunk_count(long most)
{
	long n = in_part ? 1 : (long)nthreads * POOL_CHUNKS; /* a part's call runs on its thread */
	return (int)(most < n ? (most < 1 ? 1 : most) : n);
}

struct range {
	void (*fn)(void *, size_t, size_t);
	void *arg;
	size_t n, unit;
	int chunks;
};

static void run_range(void *p, int c, int part)
{
	struct range *r = p;
	long lo, hi;
	(void)part;
	pool_chunk_bounds((long)r->n, (long)r->unit, r->chunks, c, &lo, &hi);
	r->fn(r->arg, (size_t)lo, (size_t)hi);
}

void pool_for(size_t n, size_t unit, size_t min_units, void (*fn)(void *arg, size_t lo, size_t hi), void *arg)
{
	if (!unit)
		unit = 1;
	size_t units = (n + unit - 1) / unit, most = units / (min_units ? min_units : 1);
	if (most <= 1 || nthreads == 1 || in_part) {
		if (n)
			fn(arg, 0, n);
		return;
	}
	struct range r = {fn, arg, n, unit, pool_chunk_count((long)(most < 1L << 30 ? most : 1L << 30))};
	pool_chunks(r.chunks, 0, run_range, &r);
}
