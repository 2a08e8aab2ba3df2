/* clock.h - monotonic time for the daemon (placeholder until util/clock.c lands). */
#ifndef EPOCHFS_CLOCK_H
#define EPOCHFS_CLOCK_H

#include <time.h>

static inline double clock_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline double clock_now_coarse(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline void clock_deadline(struct timespec *ts, double after_s)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	long ns = ts->tv_nsec + (long)((after_s - (double)(long)after_s) * 1e9);
	ts->tv_sec += (time_t)after_s + ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

#endif
