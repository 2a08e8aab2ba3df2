/* Unit tests of the worker thread's lifecycle: a stop ends a long wait at
 * once and joins, a wake ends a wait, a timed wait times out, a pool
 * stops whole, a thread asleep in poll() is kicked, a stop asked
 * before the wait is never slept through, and a worker does not inherit
 * a request thread's short time slice (util/sched.h). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/sched.h"
#include "util/worker.h"

TestSuite(worker, .timeout = 10);

struct t {
	struct worker w;
	int flag;                   /* w.lock */
	int waits;                  /* w.lock: worker_wait() calls that returned 1 */
	int last;                   /* what the last worker_wait() returned */
	double woke;                /* when the thread saw what it waited for */
	int finished;               /* atomic: the thread function returned */
	int pipefd[2];
};

static void nap(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	nanosleep(&ts, NULL);
}

/* Waits a minute at a time until FLAG or a stop; then dawdles, so a stop
 * that did not join would return before FINISHED. */
static void *long_wait(void *arg)
{
	struct t *t = arg;

	pthread_mutex_lock(&t->w.lock);
	while (!t->flag && (t->last = worker_wait(&t->w, 60.0)))
		t->waits++;
	t->woke = clock_now();
	pthread_mutex_unlock(&t->w.lock);
	nap(0.1);
	__atomic_store_n(&t->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(worker, a_stop_ends_a_long_wait_at_once_and_joins)
{
	struct t t = { 0 };

	cr_assert_eq(worker_init(&t.w), 0);
	cr_assert_eq(worker_start(&t.w, 1, long_wait, &t), 0);
	nap(0.05);                  /* let it sleep */
	double t0 = clock_now();
	worker_stop(&t.w);
	double took = clock_now() - t0;
	cr_expect_eq(__atomic_load_n(&t.finished, __ATOMIC_ACQUIRE), 1, "worker_stop() returned before the join");
	cr_expect_lt(took, 2.0, "the stop took %.2f s", took);
	cr_expect_eq(t.last, 0, "worker_wait() said go on after a stop");
	cr_expect_lt(t.woke - t0, 1.0);
	cr_expect_eq(worker_running(&t.w), 0);
	worker_stop(&t.w);          /* twice is fine */
	worker_destroy(&t.w);
}

Test(worker, a_wake_ends_a_wait)
{
	struct t t = { 0 };

	cr_assert_eq(worker_init(&t.w), 0);
	cr_assert_eq(worker_start(&t.w, 1, long_wait, &t), 0);
	nap(0.05);
	double t0 = clock_now();
	pthread_mutex_lock(&t.w.lock);
	t.flag = 1;
	worker_wake(&t.w);
	pthread_mutex_unlock(&t.w.lock);
	while (!__atomic_load_n(&t.finished, __ATOMIC_ACQUIRE))
		nap(0.01);
	cr_expect_lt(t.woke - t0, 1.0, "woke %.2f s after the wake", t.woke - t0);
	cr_expect_eq(t.last, 1, "a wake is not a stop");
	cr_expect_eq(worker_running(&t.w), 1);
	worker_stop(&t.w);
	worker_destroy(&t.w);
}

static void *one_timed_wait(void *arg)
{
	struct t *t = arg;
	double t0 = clock_now();

	pthread_mutex_lock(&t->w.lock);
	do
		t->last = worker_wait(&t->w, 0.2);
	while (t->last && clock_now() - t0 < 0.2);  /* spurious wake-ups */
	t->woke = clock_now() - t0;
	pthread_mutex_unlock(&t->w.lock);
	__atomic_store_n(&t->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(worker, a_timed_wait_times_out_and_goes_on)
{
	struct t t = { 0 };

	cr_assert_eq(worker_init(&t.w), 0);
	cr_assert_eq(worker_start(&t.w, 1, one_timed_wait, &t), 0);
	while (!__atomic_load_n(&t.finished, __ATOMIC_ACQUIRE))
		nap(0.01);
	cr_expect_eq(t.last, 1);
	cr_expect_geq(t.woke, 0.19, "waited %.3f s", t.woke);
	cr_expect_lt(t.woke, 2.0, "waited %.3f s", t.woke);
	worker_stop(&t.w);
	worker_destroy(&t.w);
}

static void *counted(void *arg)
{
	struct t *t = arg;

	pthread_mutex_lock(&t->w.lock);
	t->flag++;                  /* started */
	while (worker_wait(&t->w, WORKER_FOREVER))
		;
	pthread_mutex_unlock(&t->w.lock);
	nap(0.05);
	__atomic_add_fetch(&t->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(worker, a_pool_shares_one_stop_and_is_joined_whole)
{
	struct t t = { 0 };

	cr_assert_eq(worker_init(&t.w), 0);
	cr_assert_eq(worker_start(&t.w, 4, counted, &t), 0);
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&t.w.lock);
		int started = t.flag;
		pthread_mutex_unlock(&t.w.lock);
		if (started == 4)
			break;
		nap(0.01);
	}
	worker_stop(&t.w);
	cr_expect_eq(t.flag, 4);
	cr_expect_eq(__atomic_load_n(&t.finished, __ATOMIC_ACQUIRE), 4, "worker_stop() joined %d of 4",
		     t.finished);
	worker_destroy(&t.w);
}

/* Sleeps in poll() on a pipe, as maint.c's thread does, never in
 * worker_wait(): only the kick can wake it. */
static void *polls(void *arg)
{
	struct t *t = arg;

	while (worker_running(&t->w)) {
		struct pollfd p = { .fd = t->pipefd[0], .events = POLLIN };
		char c;
		if (poll(&p, 1, 60000) > 0 && read(t->pipefd[0], &c, 1) == 1)
			t->waits++;
	}
	__atomic_store_n(&t->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void kick(void *arg)
{
	struct t *t = arg;

	(void)!write(t->pipefd[1], "k", 1);
}

Test(worker, a_kick_wakes_a_thread_asleep_elsewhere)
{
	struct t t = { 0 };

	cr_assert_eq(pipe2(t.pipefd, O_CLOEXEC), 0);
	cr_assert_eq(worker_init(&t.w), 0);
	worker_set_kick(&t.w, kick, &t);
	cr_assert_eq(worker_start(&t.w, 1, polls, &t), 0);
	nap(0.05);
	double t0 = clock_now();
	worker_stop(&t.w);
	cr_expect_lt(clock_now() - t0, 2.0);
	cr_expect_eq(t.finished, 1);
	cr_expect_eq(t.waits, 1, "the kick was written %d times", t.waits);
	worker_destroy(&t.w);
	close(t.pipefd[0]);
	close(t.pipefd[1]);
}

Test(worker, a_stop_asked_before_the_wait_is_not_slept_through)
{
	struct worker w;

	cr_assert_eq(worker_init(&w), 0);
	pthread_mutex_lock(&w.lock);
	worker_stop_locked(&w);
	double t0 = clock_now();
	cr_expect_eq(worker_wait(&w, 30.0), 0);
	cr_expect_eq(worker_wait(&w, WORKER_FOREVER), 0);
	pthread_mutex_unlock(&w.lock);
	cr_expect_lt(clock_now() - t0, 1.0);
	worker_stop(&w);            /* none started: nothing to join */
	worker_destroy(&w);
}

/* ---- the time slice (util/sched.h) ---- */

static uint64_t seen_slice;

static void *note_slice(void *arg)
{
	(void)arg;
	__atomic_store_n(&seen_slice, sched_slice_get(), __ATOMIC_RELEASE);
	return NULL;
}

Test(worker, a_worker_runs_on_the_default_slice_when_its_creator_asked_for_a_short_one)
{
	struct worker w;
	pthread_t raw;
	uint64_t def = sched_slice_get(), shrt = 2 * SCHED_SLICE_MIN_NS;

	if (sched_slice_set(shrt) < 0 || sched_slice_get() != shrt)
		cr_skip_test("this kernel keeps its own slice (Linux 6.12 takes one from a thread)");
	cr_assert_neq(def, shrt, "the default slice is the one asked for: the test proves nothing");
	/* A plain thread inherits the slice (what the request threads rely on)... */
	cr_assert_eq(pthread_create(&raw, NULL, note_slice, NULL), 0);
	pthread_join(raw, NULL);
	cr_assert_eq(__atomic_load_n(&seen_slice, __ATOMIC_ACQUIRE), shrt);
	/* ...a worker gives it back before its function runs. */
	cr_assert_eq(worker_init(&w), 0);
	cr_assert_eq(worker_start(&w, 1, note_slice, NULL), 0);
	worker_stop(&w);
	worker_destroy(&w);
	cr_assert_eq(__atomic_load_n(&seen_slice, __ATOMIC_ACQUIRE), def,
		     "the worker ran on %llu ns, not the default %llu",
		     (unsigned long long)seen_slice, (unsigned long long)def);
	/* Out of range is clamped to the kernel's bounds, 0 is the default again. */
	cr_assert_eq(sched_slice_set(1), 0);
	cr_assert_eq(sched_slice_get(), SCHED_SLICE_MIN_NS);
	cr_assert_eq(sched_slice_set(0), 0);
	cr_assert_eq(sched_slice_get(), def);
}
