#include "base/clock.h"

static double seconds_of(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double clock_mono(void)
{
	return seconds_of(CLOCK_MONOTONIC);
}

double clock_wall(void)
{
	return seconds_of(CLOCK_REALTIME);
}

double clock_thread(void)
{
	return seconds_of(CLOCK_THREAD_CPUTIME_ID);
}

int clock_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int rc = pthread_condattr_init(&a);
	if (rc)
		return rc;
	rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (!rc)
		rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

struct timespec clock_deadline(double seconds)
{
	struct timespec ts;
	time_t whole = (time_t)seconds;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += whole;
	ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}
