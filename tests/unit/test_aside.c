/* Unit tests of standing aside (fs/core/aside.h): the policy fed made-up
 * windows (warming until an epoch is seen and the cache stops growing, a
 * trial C S C S, aside on a tie, serving with a doubling backoff when the
 * cache pays, coming back when the job slows aside), the trimmed mean
 * that leaves pauses out, and the collector fed timed opens. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/aside.h"

TestSuite(aside, .timeout = 10);

#define MB (1ull << 20)

/* One window of GAP seconds between opens, the cache at USED of 100 MB. */
static enum aside_event win(struct aside_policy *p, double gap, uint64_t used)
{
	return aside_window(p, gap, p->window, used, 100 * MB);
}

/* Warms P (800 files: windows of 100) until its trial starts. */
static void warm(struct aside_policy *p)
{
	aside_policy_init(p, 800);
	cr_assert_eq(p->window, 100);
	cr_assert_eq(p->phase, ASIDE_WARMING);
	/* The cache fills: no trial while it grows, even past an epoch. */
	for (int i = 1; i <= 10; i++)
		cr_assert_eq(win(p, 0.01, (uint64_t)i * 10 * MB), ASIDE_EV_NONE, "window %d", i);
	cr_assert_eq(p->phase, ASIDE_WARMING);
	/* Full: the next window that finds it still starts the trial. */
	cr_assert_eq(win(p, 0.01, 100 * MB), ASIDE_EV_TRIAL);
	cr_assert_eq(p->phase, ASIDE_TRY_CACHE);
	cr_assert_eq(aside_settle(p), 25);
}

Test(aside, warming_waits_for_an_epoch_and_a_cache_that_stopped_growing)
{
	struct aside_policy p;

	aside_policy_init(&p, 800);
	/* A cache that holds everything from the start: still an epoch first. */
	for (int i = 0; i < 7; i++)
		cr_expect_eq(win(&p, 0.01, 50 * MB), ASIDE_EV_NONE);
	cr_expect_eq(p.phase, ASIDE_WARMING);
	cr_expect_eq(win(&p, 0.01, 50 * MB), ASIDE_EV_TRIAL);
	warm(&p);
	/* Window sizes: files / 8 within 32 and 2048. */
	aside_policy_init(&p, 10);
	cr_expect_eq(p.window, ASIDE_WINDOW_MIN);
	aside_policy_init(&p, 1281167);
	cr_expect_eq(p.window, ASIDE_WINDOW_MAX);
}

Test(aside, a_cache_that_does_not_pay_stands_aside)
{
	struct aside_policy p;

	warm(&p);
	cr_expect_eq(win(&p, 0.0060, 100 * MB), ASIDE_EV_NONE);   /* C */
	cr_expect_eq(p.phase, ASIDE_TRY_SOURCE);
	cr_expect_eq(win(&p, 0.0058, 100 * MB), ASIDE_EV_NONE);   /* S */
	cr_expect_eq(p.phase, ASIDE_TRY_CACHE);
	cr_expect_eq(win(&p, 0.0062, 100 * MB), ASIDE_EV_NONE);   /* C */
	/* S a hair slower (1%): a tie, which goes to standing aside. */
	cr_expect_eq(win(&p, 0.0066, 100 * MB), ASIDE_EV_STAND);
	cr_expect_eq(p.phase, ASIDE_ASIDE);
	cr_expect_float_eq(p.cache_gap, 0.0061, 1e-9);
	cr_expect_float_eq(p.source_gap, 0.0062, 1e-9);
	cr_expect_eq(p.trials, 1);
	cr_expect_eq(p.stood, 1);
	/* Aside, the job at its pace, or one slow window: it stays aside. */
	cr_expect_eq(win(&p, 0.0062, 0), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.0090, 0), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.0063, 0), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.0090, 0), ASIDE_EV_NONE);
	cr_expect_eq(p.phase, ASIDE_ASIDE);
	/* Two windows in a row over 1.3 x the trial's figure: back, and warm
	 * again (an epoch at least) before the next trial. */
	cr_expect_eq(win(&p, 0.0090, 0), ASIDE_EV_BACK);
	cr_expect_eq(p.phase, ASIDE_WARMING);
	cr_expect_eq(p.came_back, 1);
	for (int i = 0; i < 7; i++)
		cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_TRIAL);
}

Test(aside, a_cache_that_pays_serves_on_and_tries_again_after_a_doubling_backoff)
{
	struct aside_policy p;
	uint32_t backoff = ASIDE_BACKOFF_MIN;

	warm(&p);
	for (int trial = 0; trial < 8; trial++) {
		/* Storage-bound: from SOURCE the job opens 60% slower. */
		cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
		cr_expect_eq(win(&p, 0.0080, 100 * MB), ASIDE_EV_NONE);
		cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
		cr_expect_eq(win(&p, 0.0080, 100 * MB), ASIDE_EV_STAY);
		cr_expect_eq(p.phase, ASIDE_SERVING);
		cr_expect_eq(p.wait, backoff, "trial %d: wait %u, expected %u", trial, p.wait, backoff);
		cr_expect_eq(aside_settle(&p), 0);
		for (uint32_t i = 1; i < backoff; i++)
			cr_assert_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
		cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_TRIAL);
		backoff = backoff * 2 > ASIDE_BACKOFF_MAX ? ASIDE_BACKOFF_MAX : backoff * 2;
	}
	cr_expect_eq(p.trials, 8);
	cr_expect_eq(p.stood, 0);
	/* 3% slower from SOURCE is past the margin: it serves on. */
	cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.00515, 100 * MB), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.0050, 100 * MB), ASIDE_EV_NONE);
	cr_expect_eq(win(&p, 0.00515, 100 * MB), ASIDE_EV_STAY);
}

Test(aside, the_trimmed_mean_leaves_pauses_out)
{
	double g[10] = { 0.004, 0.005, 0.006, 0.005, 0.004, 0.006, 0.005, 0.005, 0.005, 2.0 };

	/* An epoch's end (2 s) among 5 ms files: not a file's time. */
	cr_expect_float_eq(aside_trimmed_mean(g, 10), 0.045 / 9, 1e-12);
	double h[4] = { 0.001, 0.001, 0.007, 0.009 };
	/* Within 8 x the median (4 ms): all kept. */
	cr_expect_float_eq(aside_trimmed_mean(h, 4), 0.0045, 1e-12);
	cr_expect_float_eq(aside_trimmed_mean(h, 0), 0, 0);
}

Test(aside, the_collector_times_opens_and_routes_them)
{
	struct aside *a = aside_new(256, NULL);     /* windows of 32, settling 8 */
	double t = 100;

	cr_assert_not_null(a);
	cr_expect_eq(aside_phase(a), ASIDE_WARMING);
	cr_expect_eq(aside_to_source(a), 0);
	cr_expect_eq(aside_phase(NULL), ASIDE_OFF);
	cr_expect_eq(aside_to_source(NULL), 0);
	cr_expect_eq(aside_hold(NULL), 0);
	/* An epoch (256 opens, 8 windows): the trial starts. */
	for (int i = 0; i < 1 + 256; i++)
		aside_open(a, t += 0.001);
	cr_expect_eq(aside_phase(a), ASIDE_TRY_CACHE);
	cr_expect_eq(aside_hold(a), 0);
	/* C: 8 settling opens and 32 counted, at 2 ms with one long pause. */
	for (int i = 0; i < 40; i++)
		aside_open(a, t += i == 20 ? 5.0 : 0.002);
	cr_expect_eq(aside_phase(a), ASIDE_TRY_SOURCE);
	cr_expect_eq(aside_to_source(a), 1);
	cr_expect_eq(aside_hold(a), 1);
	for (int i = 0; i < 40; i++)                /* S: 1 ms */
		aside_open(a, t += 0.001);
	for (int i = 0; i < 40; i++)                /* C */
		aside_open(a, t += 0.002);
	for (int i = 0; i < 40; i++)                /* S */
		aside_open(a, t += 0.001);
	cr_expect_eq(aside_phase(a), ASIDE_ASIDE);
	cr_expect_eq(aside_to_source(a), 1);
	cr_expect_eq(aside_hold(a), 2);
	struct aside_policy p;
	aside_get(a, &p);
	cr_expect_float_eq(p.cache_gap, 0.002, 1e-9);
	cr_expect_float_eq(p.source_gap, 0.001, 1e-9);
	cr_expect_eq(p.stood, 1);
	aside_free(a);
	aside_free(NULL);
}
