/* Unit tests of the monotonic clock: seconds that move forward, the
 * nanosecond carry of deadline arithmetic (both ways), and deadlines that
 * a CLOCK_MONOTONIC condvar keeps. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "util/clock.h"

TestSuite(clock, .timeout = 10);

Test(clock, now_moves_forward_with_the_monotonic_clock)
{
	struct timespec ts;
	double a = clock_now();

	clock_gettime(CLOCK_MONOTONIC, &ts);
	double b = clock_now(), raw = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;

	cr_expect_leq(a, raw);
	cr_expect_leq(raw, b);
	struct timespec nap = { 0, 20 * 1000 * 1000 };
	nanosleep(&nap, NULL);
	cr_expect_geq(clock_now() - b, 0.019);
	/* The coarse clock is within a few ticks (at most 10 ms each) of it. */
	double c = clock_now_coarse(), d = clock_now();
	cr_expect_lt(c - d, 0.05);
	cr_expect_lt(d - c, 0.05);
}

Test(clock, add_carries_nanoseconds_into_seconds)
{
	struct timespec ts = { .tv_sec = 10, .tv_nsec = 900000000 };

	clock_add(&ts, 0.25);
	cr_expect_eq(ts.tv_sec, 11);
	cr_expect(ts.tv_nsec >= 149999999 && ts.tv_nsec <= 150000001, "tv_nsec %ld", ts.tv_nsec);

	ts = (struct timespec){ .tv_sec = 10, .tv_nsec = 999999999 };
	clock_add(&ts, 0.5);
	cr_expect_eq(ts.tv_sec, 11);
	cr_expect_eq(ts.tv_nsec, 499999999);

	/* Exactly a second of nanoseconds: tv_nsec must not be left at 1e9. */
	ts = (struct timespec){ .tv_sec = 10, .tv_nsec = 500000000 };
	clock_add(&ts, 0.5);
	cr_expect_eq(ts.tv_sec, 11);
	cr_expect_eq(ts.tv_nsec, 0);

	ts = (struct timespec){ .tv_sec = 5, .tv_nsec = 0 };
	clock_add(&ts, 3600.5);
	cr_expect_eq(ts.tv_sec, 3605);
	cr_expect_eq(ts.tv_nsec, 500000000);
}

Test(clock, add_borrows_for_a_negative_step)
{
	struct timespec ts = { .tv_sec = 10, .tv_nsec = 100000000 };

	clock_add(&ts, -0.25);
	cr_expect_eq(ts.tv_sec, 9);
	cr_expect(ts.tv_nsec >= 849999999 && ts.tv_nsec <= 850000001, "tv_nsec %ld", ts.tv_nsec);
	clock_add(&ts, -2.0);
	cr_expect_eq(ts.tv_sec, 7);
}

Test(clock, a_deadline_is_kept_by_a_monotonic_condvar)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c;
	struct timespec dl;

	cr_assert_eq(clock_cond_init(&c), 0);
	double t0 = clock_now();
	clock_deadline(&dl, 0.15);
	cr_expect_geq((double)dl.tv_sec + (double)dl.tv_nsec / 1e9 - t0, 0.149);
	pthread_mutex_lock(&m);
	int r;
	do
		r = pthread_cond_timedwait(&c, &m, &dl);
	while (r == 0);                 /* spurious wake-ups: nobody signals */
	pthread_mutex_unlock(&m);
	double waited = clock_now() - t0;
	cr_expect_eq(r, ETIMEDOUT);
	/* A realtime condvar would read this deadline as 1970: no wait at all. */
	cr_expect_geq(waited, 0.14, "waited %.3f s", waited);
	cr_expect_lt(waited, 2.0, "waited %.3f s", waited);
	pthread_cond_destroy(&c);
}
