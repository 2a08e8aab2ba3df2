/* test_staging.c - the store of items fetched ahead (fs/store/staging.c)
 * without a mount: entries begin, land, are taken whole or waited for,
 * freed once served; another version is never served; a group that
 * starts over and a sweep drop theirs; the limit holds, and a lower one
 * drops the newest entries nobody holds. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "store/staging.h"

static struct staging *st;
static int rooms;

static void on_room(void *arg)
{
	(void)arg;
	rooms++;
}

static void setup(void)
{
	rooms = 0;
	cr_assert_eq(staging_new(1000, on_room, NULL, &st), 0);
}

static void teardown(void)
{
	staging_free(st);
}

TestSuite(staging, .init = setup, .fini = teardown, .timeout = 10);

static const struct index_version V1 = { .ino = 1, .size = 100, .mtime_ns = 1, .ctime_ns = 1 };
static const struct index_version V2 = { .ino = 1, .size = 100, .mtime_ns = 2, .ctime_ns = 2 };

/* Begins (ID, 0) with LEN bytes of ID, and lands it. */
static void stage(uint32_t id, size_t len, uint32_t group, uint32_t place)
{
	char *buf = staging_begin(st, id, 0, &V1, len, group, place, NULL);

	cr_assert_not_null(buf, "begin %u", id);
	memset(buf, (int)id, len);
	staging_landed(st, id, 0, 1);
}

static uint64_t stat_bytes(void)
{
	struct staging_stats s;

	staging_get_stats(st, &s);
	return s.bytes;
}

Test(staging, an_entry_served_whole_is_freed)
{
	const void *data;
	size_t len;

	stage(1, 100, 1, 0);
	cr_expect_eq(staging_has(st, 1, 0), 1);
	cr_assert_eq(staging_take(st, 1, 0, &V1, &data, &len, NULL, NULL), STAGING_HIT);
	cr_expect_eq(len, 100);
	cr_expect_eq(((const char *)data)[99], 1);
	staging_done_with(st, 1, 0, 60);            /* a first request: 60 bytes */
	cr_expect_eq(staging_has(st, 1, 0), 1, "freed before all its bytes were served");
	cr_assert_eq(staging_take(st, 1, 0, &V1, &data, &len, NULL, NULL), STAGING_HIT);
	staging_done_with(st, 1, 0, 40);
	cr_expect_eq(staging_has(st, 1, 0), 0);
	cr_expect_eq(stat_bytes(), 0);
	cr_expect_gt(rooms, 0, "freed bytes did not say there is room");
}

Test(staging, another_version_is_never_served)
{
	const void *data;
	size_t len;
	struct staging_stats s;

	stage(1, 100, 1, 0);
	cr_expect_eq(staging_take(st, 1, 0, &V2, &data, &len, NULL, NULL), STAGING_NONE);
	cr_expect_eq(staging_has(st, 1, 0), 0, "a stale entry was kept");
	staging_get_stats(st, &s);
	cr_expect_eq(s.wasted_bytes, 100);
}

static const void *waited;
static size_t waited_len;
static int waits;

static void on_wait(void *arg, const void *data, size_t len)
{
	(void)arg;
	waited = data;
	waited_len = len;
	waits++;
}

Test(staging, a_reader_waits_for_an_entry_on_its_way)
{
	const void *data;
	size_t len;
	char *buf = staging_begin(st, 2, 0, &V1, 50, 1, 0, NULL);

	cr_assert_not_null(buf);
	cr_expect_null(staging_begin(st, 2, 0, &V1, 50, 1, 0, NULL), "two fetches of one item");
	cr_assert_eq(staging_take(st, 2, 0, &V1, &data, &len, NULL, NULL), STAGING_NONE,
		     "a reader without a waiter got a loading entry");
	cr_assert_eq(staging_take(st, 2, 0, &V1, &data, &len, on_wait, NULL), STAGING_WAIT);
	memset(buf, 7, 50);
	staging_landed(st, 2, 0, 1);
	cr_expect_eq(waits, 1);
	cr_expect_eq(waited_len, 50);
	cr_expect_eq(((const char *)waited)[49], 7);
	staging_done_with(st, 2, 0, 50);
	cr_expect_eq(staging_has(st, 2, 0), 0);
	/* A failed fetch sends its waiter to the sources. */
	cr_assert_not_null(staging_begin(st, 3, 0, &V1, 50, 1, 0, NULL));
	cr_assert_eq(staging_take(st, 3, 0, &V1, &data, &len, on_wait, NULL), STAGING_WAIT);
	staging_landed(st, 3, 0, 0);
	cr_expect_eq(waits, 2);
	cr_expect_null(waited);
	staging_done_with(st, 3, 0, 0);
	cr_expect_eq(staging_has(st, 3, 0), 0);
	cr_expect_eq(stat_bytes(), 0);
}

Test(staging, reservations_and_entries_share_the_limit)
{
	uint64_t res = 300;

	cr_expect_eq(staging_room(st), 1000);
	cr_expect_eq(staging_reserve(st, 300, 0), 300);
	cr_expect_eq(staging_room(st), 700);
	cr_assert_not_null(staging_begin(st, 1, 0, &V1, 200, 1, 0, &res));
	cr_expect_eq(res, 100, "the entry did not take its bytes from the reservation");
	cr_expect_eq(staging_room(st), 700);
	staging_unreserve(st, res);
	cr_expect_eq(staging_room(st), 800);
	/* Never past the limit: a reservation gets what room is left... */
	cr_expect(staging_fits(st, 800, 0) && !staging_fits(st, 801, 4096));
	cr_expect_eq(staging_reserve(st, 5000, 4096), 800);
	cr_expect_eq(staging_room(st), 0);
	cr_expect_eq(staging_reserve(st, 1, 4096), 0, "the floor is for an empty store only");
	staging_unreserve(st, 800);
	cr_expect_eq(staging_room(st), 800);
	staging_landed(st, 1, 0, 1);
	const void *data;
	size_t len;
	cr_assert_eq(staging_take(st, 1, 0, &V1, &data, &len, NULL, NULL), STAGING_HIT);
	staging_done_with(st, 1, 0, 200);
	cr_expect_eq(stat_bytes(), 0);
	/* ...but an empty store lets one item (up to FLOOR) through a limit
	 * lowered below it, and nothing more until that is gone. */
	staging_set_limit(st, 10);
	cr_expect(staging_fits(st, 4096, 4096) && !staging_fits(st, 4097, 4096));
	cr_expect_eq(staging_reserve(st, 100000, 4096), 4096);
	cr_expect(!staging_fits(st, 1, 4096));
	cr_expect_eq(staging_reserve(st, 1, 4096), 0);
	staging_unreserve(st, 4096);
	cr_expect_eq(staging_reserve(st, 5, 4096), 5);
	staging_unreserve(st, 5);
	staging_set_limit(st, 0);
	cr_expect_eq(staging_reserve(st, 5, 4096), 0, "a limit of 0 is no staging");
}

static int passed_below;

static int stale(void *arg, uint32_t group, uint32_t place)
{
	(void)arg;
	return group == 9 || place < (uint32_t)passed_below;
}

Test(staging, groups_and_sweeps_drop_theirs_pins_wait)
{
	const void *data;
	size_t len;
	struct staging_stats s;

	stage(1, 100, 1, 0);
	stage(2, 100, 1, 5);
	stage(3, 100, 2, 0);
	stage(4, 100, 9, 0);
	cr_assert_eq(staging_take(st, 1, 0, &V1, &data, &len, NULL, NULL), STAGING_HIT);
	staging_drop_group(st, 1);
	cr_expect_eq(staging_has(st, 2, 0), 0);
	cr_expect_eq(staging_has(st, 1, 0), 1, "a pinned entry was freed under its reader");
	cr_expect_eq(((const char *)data)[0], 1);
	staging_done_with(st, 1, 0, 100);
	cr_expect_eq(staging_has(st, 1, 0), 0);
	passed_below = 0;
	staging_sweep(st, stale, NULL);
	cr_expect_eq(staging_has(st, 4, 0), 0, "the sweep kept an entry of an ended stream");
	cr_expect_eq(staging_has(st, 3, 0), 1);
	passed_below = 1;
	staging_sweep(st, stale, NULL);
	cr_expect_eq(staging_has(st, 3, 0), 0);
	staging_get_stats(st, &s);
	cr_expect_eq(s.wasted_bytes, 300, "entry 1, served after its group dropped it, counted as wasted");
	cr_expect_eq(s.bytes, 0);
}

Test(staging, lower_limit_only_ever_lowers)
{
	struct staging_stats s;

	for (uint32_t id = 1; id <= 3; id++)
		stage(id, 100, 1, id);
	cr_expect_eq(staging_lower_limit(st, 1 << 30), 0, "a higher limit freed something");
	staging_get_stats(st, &s);
	cr_expect_neq(s.limit, 1 << 30, "lower_limit raised the limit");
	cr_expect_eq(staging_lower_limit(st, 150), 200);
	staging_get_stats(st, &s);
	cr_expect_eq(s.limit, 150);
	cr_expect_eq(s.bytes, 100);
}

Test(staging, a_lower_limit_drops_the_newest_unheld)
{
	const void *data;
	size_t len;
	struct staging_stats s;

	for (uint32_t id = 1; id <= 5; id++)
		stage(id, 100, 1, id);
	cr_assert_eq(staging_take(st, 5, 0, &V1, &data, &len, NULL, NULL), STAGING_HIT);   /* held */
	cr_assert_not_null(staging_begin(st, 6, 0, &V1, 100, 1, 6, NULL));                  /* loading */
	cr_expect_eq(staging_set_limit(st, 350), 300);
	/* 5 is held and 6 loading: 4, 3 and 2 go, the oldest, 1, stays. */
	cr_expect_eq(staging_has(st, 1, 0), 1);
	cr_expect_eq(staging_has(st, 2, 0), 0);
	cr_expect_eq(staging_has(st, 4, 0), 0);
	cr_expect_eq(staging_has(st, 5, 0), 1);
	cr_expect_eq(staging_room(st), 50);
	staging_get_stats(st, &s);
	cr_expect_eq(s.shrunk_bytes, 300);
	cr_expect_eq(s.limit, 350);
	staging_done_with(st, 5, 0, 100);
	staging_landed(st, 6, 0, 1);
	cr_expect_eq(stat_bytes(), 200);
}
