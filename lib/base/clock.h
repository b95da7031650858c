/* clock: the library's one reading of time. Durations, timeouts and deadlines use the
 * monotonic clock (a wall clock set back by NTP must not stretch a wait); only what is written
 * for people or other hosts to read (a log line's "time") uses the wall clock. */
#ifndef GEM_CLOCK_H
#define GEM_CLOCK_H
#include <pthread.h>
#include <time.h>

/* Seconds on the monotonic clock (an arbitrary origin: only differences mean anything). */
double clock_mono(void);
/* Wall-clock seconds since the epoch. */
double clock_wall(void);
/* CPU seconds the calling thread has run (an arbitrary origin): what a piece of work costs,
 * whatever else the machine runs meanwhile. */
double clock_thread(void);

/* Initialise a condition variable whose timed waits measure clock_mono's time, so that
 * clock_deadline's deadlines apply to it; 0 or an errno value, as pthread_cond_init. */
int clock_cond_init(pthread_cond_t *cv);
/* The deadline `seconds` from now (>= 0) for pthread_cond_timedwait on a clock_cond_init
 * condition variable. */
struct timespec clock_deadline(double seconds);
#endif
