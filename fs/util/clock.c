/* clock.c - see clock.h.
 *
 * DESIGN: clock_add() splits SECONDS into whole seconds and a fraction
 * before it adds, rather than turning all of it into nanoseconds: tv_nsec
 * is a long, 32 bits on 32-bit ABIs, where a deadline of three seconds
 * (3e9 ns) would already overflow it. The four copies it replaces each
 * wrote this carry by hand, two of them for under a second only.
 */
#include "util/clock.h"

#define NS 1000000000L

static double seconds_of(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

double clock_now(void)
{
	return seconds_of(CLOCK_MONOTONIC);
}

double clock_now_coarse(void)
{
	return seconds_of(CLOCK_MONOTONIC_COARSE);
}

void clock_add(struct timespec *ts, double seconds)
{
	time_t whole = (time_t)seconds;         /* toward zero: the fraction has the sign of SECONDS */
	long ns = (long)((seconds - (double)whole) * 1e9);

	ts->tv_sec += whole;
	ts->tv_nsec += ns;
	if (ts->tv_nsec >= NS) {
		ts->tv_sec++;
		ts->tv_nsec -= NS;
	} else if (ts->tv_nsec < 0) {
		ts->tv_sec--;
		ts->tv_nsec += NS;
	}
}

void clock_deadline(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	clock_add(ts, seconds);
}

int clock_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	int err = pthread_condattr_init(&ca);

	if (err)
		return -err;
	err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!err)
		err = pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
	return -err;
}
