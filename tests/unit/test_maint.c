/* test_maint.c - the cache's background thread (fs/store/maint.c) over a
 * cache without a mount: the scrubber finds a flipped bit and drops the
 * item before anyone is served it; the prefaulter makes the arena resident
 * up to its limit and no further; a byte on the command pipe runs the
 * command on the thread; the thread stops promptly. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/cache.h"
#include "store/maint.h"

#define CAP (8u << 20)

static struct cache *c;
static struct maint *m;
static const struct index_version V = { .ino = 1, .size = 10000, .mtime_ns = 1, .ctime_ns = 1 };

static void setup(void)
{
	struct cache_opts o = { .capacity = CAP, .chunk = 1 << 20, .max_items = 100 };

	cr_assert_eq(cache_new(&o, &c), 0);
}

static void teardown(void)
{
	maint_stop(m);
	m = NULL;
	cache_free(c);
}

TestSuite(maint, .init = setup, .fini = teardown, .timeout = 30);

static void load(uint32_t id)
{
	struct cache_ref ref;
	struct cache_waiter w = { 0 };

	cr_assert_eq(cache_get(c, id, 0, &V, 10000, &w, &ref), CACHE_LOAD);
	memset(ref.data, (int)id, 10000);
	cache_loaded(c, &ref, 1);
}

static struct cache_stats stats(void)
{
	struct cache_stats s;

	cache_get_stats(c, &s);
	return s;
}

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

Test(maint, the_scrubber_drops_a_flipped_bit)
{
	struct maint_opts o = { .scrub_rate = 64u << 20 };

	for (uint32_t id = 1; id <= 20; id++)
		load(id);
	cr_assert_eq(cache_debug_corrupt(c, 7, 0, 1234), 0);
	cr_assert_eq(maint_start(c, &o, &m), 0);
	for (int i = 0; i < 300 && !stats().corrupt; i++)
		nap(10);
	cr_expect_eq(stats().corrupt, 1, "a flipped bit was not found");
	cr_expect_eq(stats().items, 19);
	struct cache_ref ref;
	cr_expect_neq(cache_get_ex(c, 7, 0, &V, 10000, NULL, &ref, 0), CACHE_HIT, "the corrupt item was kept");
	cr_expect_gt(stats().scrubbed_bytes, 0);
}

Test(maint, prefault_stops_at_its_limit)
{
	struct maint_opts o = { .prefault_window = UINT64_MAX, .prefault_limit = 3u << 20 };

	cr_assert_eq(maint_start(c, &o, &m), 0);
	for (int i = 0; i < 300 && stats().prefaulted < (3u << 20); i++)
		nap(10);
	cr_expect_geq(stats().prefaulted, 3u << 20);
	nap(100);
	cr_expect_lt(stats().prefaulted, 4u << 20, "prefaulted %llu, past the limit",
		     (unsigned long long)stats().prefaulted);
}

static int cmds;
static char last;

static void on_cmd(void *arg, char cmd)
{
	(void)arg;
	last = cmd;
	__atomic_add_fetch(&cmds, 1, __ATOMIC_RELAXED);
}

Test(maint, commands_run_on_the_thread_and_stop_is_prompt)
{
	struct maint_opts o = { .scrub_rate = 1, .cmd = on_cmd };

	cr_assert_eq(maint_start(c, &o, &m), 0);
	int fd = maint_command_fd(m);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "c", 1), 1);
	for (int i = 0; i < 200 && !__atomic_load_n(&cmds, __ATOMIC_RELAXED); i++)
		nap(10);
	cr_expect_eq(cmds, 1);
	cr_expect_eq(last, 'c');
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	maint_stop(m);
	m = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_expect_lt((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, 1.0, "stopping took too long");
	cr_expect_eq(maint_command_fd(NULL), -1);
}
