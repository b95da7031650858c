/* pool: the threads the kernels of nn/ split their work across. The workers are started once
 * (pool_set_threads) and woken at every call, so that a step's hundreds of kernel calls and the
 * passes between them pay a wake-up each, not a thread's start and join. A part writes only its
 * own outputs and reduces in an order fixed by the data, not by the number of threads: results
 * are the same bit for bit at any thread count (the callers' contract; t/t1010 checks it). */
#ifndef GEM_POOL_H
#define GEM_POOL_H
#include <stddef.h>

#define POOL_MAX_THREADS 64
/* Stack of each worker: a part may keep up to 2 MB on it (nn/matmul's packed panel, 512 KB). */
#define POOL_STACK ((size_t)4 << 20)

/* Run on t threads (1..POOL_MAX_THREADS, clamped): starts or stops workers. Not while a
 * pool_run is in progress. Returns the number of threads it has (fewer if a start failed). */
int pool_set_threads(int t);
int pool_threads(void);
/* The calling thread's number in the pool: 1.. for a worker, 0 for any other thread. */
int pool_worker(void);
/* 1 while the calling thread runs a part of a pool_run (a nested call runs on it alone). */
int pool_in_part(void);
/* Iterations a waiting thread polls for work (or for its parts' end) before it sleeps on a
 * condition variable; 0 sleeps at once. The default, POOL_SPIN_DEFAULT, is doc/results/resnet-
 * speed.md's measurement. */
#define POOL_SPIN_DEFAULT 1000
void pool_set_spin(long spins);

/* Call fn(arg, i, n) for i in [0, n), n <= POOL_MAX_THREADS, part i on thread i (0 is the
 * caller); returns when all have returned. n above the pool's threads, a call from inside a
 * part, or one while another thread runs the pool: the parts run one after the other here. */
void pool_run(void (*fn)(void *arg, int i, int n), void *arg, int n);

/* Call fn(arg, c, part) for every chunk c in [0, n) on the pool's threads, part the number of
 * the thread's part (0 on the caller, below parts_max if it is not 0; for scratch of its
 * own). Each part starts on its own share of the chunks, in order, and a part that runs out
 * takes the next chunks of the others: a core the machine slows (another job, the interrupts)
 * does fewer, and a thread mostly reads the samples it wrote in the layer before. Which thread
 * runs a chunk must not change what it computes. */
void pool_chunks(int n, int parts_max, void (*fn)(void *arg, int chunk, int part), void *arg);
/* Chunk c of `chunks` over [0, n) in whole units of `unit` (the last chunk ends at n): [*lo, *hi) */
void pool_chunk_bounds(long n, long unit, int chunks, int c, long *lo, long *hi);
/* Chunks a call should have to balance the threads (POOL_CHUNKS a thread), at most `most`; 1
 * on one thread or inside a part. */
#define POOL_CHUNKS 4
int pool_chunk_count(long most);

/* Split [0, n) into chunks of whole units of `unit` (the last chunk takes the rest), no chunk
 * smaller than min_units units (a wake-up costs about a microsecond, more on a busy machine),
 * and call fn(arg, lo, hi) for each, on the pool's threads as pool_chunks does. */
void pool_for(size_t n, size_t unit, size_t min_units, void (*fn)(void *arg, size_t lo, size_t hi), void *arg);
#endif
