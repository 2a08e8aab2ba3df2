/* clock.h - monotonic time for the daemon and its tools: seconds since an
 * arbitrary start, and deadlines for pthread_cond_timedwait().
 *
 * Seconds are doubles: every caller subtracts two of them (a rate, an age,
 * a due time), and a double holds a monotonic clock to the nanosecond for
 * over a hundred days of uptime. Nothing here can fail: CLOCK_MONOTONIC and
 * CLOCK_MONOTONIC_COARSE are always there on Linux.
 *
 * A timed wait on a condvar measures its deadline on the condvar's clock
 * (CLOCK_REALTIME unless set otherwise), so a deadline from
 * clock_deadline() is only right for a condvar made by clock_cond_init();
 * one on the wall clock would stretch or end early when the time is set.
 *
 * Thread safety: all of it, from any thread.
 */
#ifndef EPOCHFS_CLOCK_H
#define EPOCHFS_CLOCK_H

#include <pthread.h>
#include <time.h>

/* CLOCK_MONOTONIC, in seconds. */
double clock_now(void);

/* CLOCK_MONOTONIC_COARSE, in seconds: the last tick's time (a jiffy, 1 to
 * 10 ms behind), for hot paths that need no better; the vDSO returns it
 * without reading the clock source. Never compare it with clock_now():
 * the two may be a tick apart either way. */
double clock_now_coarse(void);

/* Adds SECONDS (may be negative) to *TS, carrying nanoseconds into
 * seconds: tv_nsec stays in [0, 1e9). */
void clock_add(struct timespec *ts, double seconds);

/* *TS = CLOCK_MONOTONIC now + SECONDS: the deadline of a timed wait on a
 * condvar made by clock_cond_init(). */
void clock_deadline(struct timespec *ts, double seconds);

/* Initializes *C as a condvar whose timed waits measure on CLOCK_MONOTONIC
 * (take clock_deadline()'s deadlines). 0 or -errno. */
int clock_cond_init(pthread_cond_t *c);

#endif
