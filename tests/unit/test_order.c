/* test_order.c - the order channel (fs/core/ns/order.c) without a mount:
 * streams made, written, read back, truncated, removed; reads matched to
 * places and heads moved; the next places to fetch, round robin within a
 * window, places seen skipped, places left behind given up; and the bounds
 * on memory: a stream that starts over gives its room back, "#wait"
 * reports cannot run the counters past the clock; "#range" lines are places
 * of their bytes. Paths "fN" resolve to id
 * N; anything else is unknown. */
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ns/ns.h"
#include "core/ns/order.h"

#define ME ((uint32_t)geteuid())
#define ALICE 60001u
#define BOB 60002u

static struct order *o;
static uint32_t resets[16];
static int nresets, wakes;

static int resolve(void *arg, const char *rel, size_t len, uint32_t *id)
{
	(void)arg;
	if (len < 2 || rel[0] != 'f')
		return -ENOENT;
	char buf[32];
	if (len >= sizeof(buf))
		return -ENOENT;
	memcpy(buf, rel + 1, len - 1);
	buf[len - 1] = 0;
	char *end;
	unsigned long v = strtoul(buf, &end, 10);
	if (*end || !v)
		return -ENOENT;
	*id = (uint32_t)v;
	return 0;
}

static void on_reset(void *arg, uint32_t group)
{
	(void)arg;
	if (nresets < 16)
		resets[nresets] = group;
	nresets++;
}

static void on_wake(void *arg)
{
	(void)arg;
	wakes++;
}

static void setup(void)
{
	struct order_opts oo = { .resolve = resolve, .reset = on_reset, .wake = on_wake };

	nresets = wakes = 0;
	cr_assert_eq(order_new(&oo, &o), 0);
}

static void teardown(void)
{
	order_free(o);
}

TestSuite(order, .init = setup, .fini = teardown, .timeout = 30);

/* Makes stream NAME and writes TEXT to it at OFF: its node. */
static uint64_t stream(const char *name, const char *text, off_t off)
{
	struct order_attr a;

	cr_assert_eq(order_create(o, ORDER_DIR_NODE, name, ME, ME, 0, &a), 0, "create %s", name);
	cr_assert_eq(ns_of(a.node), NS_ORDER);
	if (text)
		cr_assert_eq(order_write(o, a.node, text, strlen(text), off), (ssize_t)strlen(text));
	return a.node;
}

/* "f1\nf2\n...fN\n" from FIRST. */
static char *paths(unsigned first, unsigned n)
{
	char *t = malloc((size_t)n * 12 + 1), *p = t;

	for (unsigned i = 0; i < n; i++)
		p += sprintf(p, "f%u\n", first + i);
	return t;
}

Test(order, the_namespace)
{
	struct order_attr a;
	char buf[1024], name[80];

	uint64_t n = stream("job-0", "f1\nf2\nnope\n# a comment\n", 0);
	cr_expect_eq(order_lookup(o, ORDER_DIR_NODE, "job-0", &a), 0);
	cr_expect_neq(a.node, n, "a lookup gives a new node (a fresh status)");
	cr_expect_eq(order_getattr(o, a.node, &a), 0);
	ssize_t len = order_read(o, a.node, buf, sizeof(buf) - 1, 0);
	cr_assert_gt(len, 0);
	buf[len] = 0;
	cr_expect(strstr(buf, "order 1: 2 files (1 paths no file has)"), "%s", buf);
	cr_expect_str_eq(order_dirent(o, 0, name, sizeof(name)), "job-0");
	cr_expect_null(order_dirent(o, 1, name, sizeof(name)));
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "bad/name", ME, ME, 0, &a), -EINVAL);
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, ".hidden", ME, ME, 0, &a), -EINVAL);
	cr_expect_eq(order_create(o, 12345, "x", ME, ME, 0, &a), -EROFS);
	cr_expect_eq(order_write(o, n, "/abs\n", 5, 100), -EINVAL);
	cr_expect_eq(order_write(o, n, "a/../b\n", 7, 100), -EINVAL);
	cr_expect_eq(order_read(o, ORDER_DIR_NODE, buf, 10, 0), -EISDIR);
	cr_expect_eq(order_truncate(o, n, 5), -EINVAL);
	cr_expect_eq(order_unlink(o, ORDER_DIR_NODE, "job-0", ME), 0);
	cr_expect_eq(order_getattr(o, n, &a), -ENOENT, "a removed stream's node still answers");
	cr_expect_eq(order_unlink(o, ORDER_DIR_NODE, "job-0", ME), -ENOENT);
	for (int i = 0; i < ORDER_MAX_STREAMS; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		cr_assert_eq(order_create(o, ORDER_DIR_NODE, name, ME, ME, 0, &a), 0);
	}
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "one-more", ME, ME, 0, &a), -ENOSPC);
}

/* Streams belong to their creators: another user can neither reopen nor
 * end them, and no user other than the daemon's and root takes more than
 * its share of the slots or the places. */
Test(order, users_own_their_streams_and_hold_a_share)
{
	struct order_attr a;
	char name[80];

	if (ME == ALICE || ME == BOB)
		cr_skip_test("the test's users are this process's");
	cr_assert_eq(order_create(o, ORDER_DIR_NODE, "alice-job", ALICE, 7, 0, &a), 0);
	cr_expect(a.uid == ALICE && a.gid == 7);
	uint64_t an = a.node;
	cr_expect_eq(order_getattr(o, an, &a), 0);
	cr_expect_eq(a.uid, ALICE);
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "alice-job", BOB, 8, 0, &a), -EACCES);
	cr_expect_eq(order_unlink(o, ORDER_DIR_NODE, "alice-job", BOB), -EPERM);
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "alice-job", ALICE, 7, 0, &a), 0, "its owner reopens it");
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "alice-job", ME, ME, 0, &a), 0, "the daemon's user too");
	/* Slots: ORDER_USER_STREAMS for alice; bob and the daemon's user still get theirs. */
	for (int i = 1; i < ORDER_USER_STREAMS; i++) {
		snprintf(name, sizeof(name), "alice-%d", i);
		cr_assert_eq(order_create(o, ORDER_DIR_NODE, name, ALICE, 7, 0, &a), 0, "%s", name);
	}
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "alice-more", ALICE, 7, 0, &a), -ENOSPC);
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "bob-job", BOB, 8, 0, &a), 0);
	uint64_t bn = a.node;
	cr_expect_eq(order_create(o, ORDER_DIR_NODE, "mine", ME, ME, 0, &a), 0);
	/* Places: alice's streams together take ORDER_USER_PATHS at most. */
	size_t chunk = 1u << 20;
	char *t = paths(1, (unsigned)chunk);
	size_t tl = strlen(t);
	off_t off = 0;
	ssize_t w = 0;
	for (int i = 0; i < 8 && (w = order_write(o, an, t, tl, off)) > 0; i++)
		off += (off_t)tl;
	cr_expect_eq(w, -EDQUOT, "alice's stream took more than a user's share");
	cr_expect_eq(order_getattr(o, an, &a), 0);
	struct order_stats st;
	order_get_stats(o, &st);
	cr_expect_eq(st.places, ORDER_USER_PATHS, "%llu places", (unsigned long long)st.places);
	/* Bob is not held back by alice. */
	cr_expect_eq(order_write(o, bn, t, tl, 0), (ssize_t)tl);
	free(t);
	cr_expect_eq(order_unlink(o, ORDER_DIR_NODE, "alice-job", ALICE), 0);
	cr_expect_eq(order_unlink(o, ORDER_DIR_NODE, "bob-job", ME), 0, "the daemon's user ends any");
}

Test(order, reads_move_heads_and_the_next_places_follow)
{
	struct order_pick p;
	char *t = paths(1, 100);

	uint64_t n = stream("a", t, 0);
	free(t);
	(void)n;
	/* The window: 10 places past the head (0). */
	for (unsigned i = 0; i < 10; i++) {
		cr_assert_eq(order_next(o, 10, &p), 1, "place %u", i);
		cr_expect_eq(p.place, i);
		cr_expect_eq(p.id, i + 1);
	}
	cr_expect_eq(order_next(o, 10, &p), 0, "past the window");
	cr_expect_eq(order_ready(o, 10, 1), 0);
	/* Reads of places 0-14 (the reader ran ahead of the fetches). */
	int w0 = wakes;
	for (uint32_t id = 1; id <= 15; id++)
		order_seen(o, id, 0);
	cr_expect_gt(wakes, w0, "a moved head did not wake the prefetcher");
	cr_expect_eq(order_ready(o, 10, 8), 1);
	cr_assert_eq(order_next(o, 10, &p), 1);
	cr_expect_eq(p.place, 15, "places seen read were fetched");
	struct order_stats s;
	order_get_stats(o, &s);
	cr_expect_eq(s.first, 5, "reads of places not fetched yet");
	cr_expect_eq(s.paths, 100);
}

Test(order, round_robin_and_places_left_behind)
{
	struct order_pick p;
	char *t = paths(1, 20000), *u = paths(50001, 10);

	stream("a", t, 0);
	stream("b", u, 0);
	free(t);
	free(u);
	uint32_t ga = 0, gb = 0;
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(order_next(o, 100, &p), 1);
		if (p.id >= 50001)
			gb = p.group;
		else
			ga = p.group;
	}
	cr_expect(ga && gb && ga != gb, "one stream starved the other");
	/* A reader 10,000 places on (reads are matched within 4096 places of
	 * the head): what is LAG behind its head is given up. */
	for (uint32_t id = 1000; id <= 10000; id += 1000)
		order_seen(o, id, 0);
	order_seen(o, 10002, 0);
	struct order_heads h;
	order_snapshot(o, &h);
	cr_expect_eq(order_passed(&h, ga, 0), 1);
	cr_expect_eq(order_passed(&h, ga, 9000), 0);
	cr_expect_eq(order_passed(&h, 0x7fff0001, 0), 1, "a group no stream has");
	int got = 0;
	while (order_next(o, 100, &p) == 1)
		if (p.group == ga) {
			cr_expect_geq(p.place, 10002 - ORDER_LAG, "a place left behind was fetched");
			got = 1;
			break;
		}
	cr_expect(got);
}

/* Bytes malloc holds for the program, mapped blocks included. */
static size_t heap(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks + m.hblkhd;
}

Test(order, a_new_order_drops_the_old_ones_fetches_and_room)
{
	struct order_attr a;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("malloc's own figures are not kept under AddressSanitizer");
#endif
	char *t = paths(1, 1u << 20);

	/* 1M paths, then a new order: 5 MB of arrays that must not stay. */
	size_t m0 = heap();
	uint64_t n = stream("big", t, 0);
	size_t m1 = heap();
	cr_assert_gt(m1 - m0, 4u << 20, "the order took no memory?");
	cr_assert_eq(order_truncate(o, n, 0), 0);
	size_t m2 = heap();
	cr_expect_lt(m2 > m0 ? m2 - m0 : 0, 256u << 10, "a reset stream kept %zu bytes", m2 - m0);
	cr_expect_eq(nresets, 2, "creation and truncation each reset");
	struct order_stats s;
	order_get_stats(o, &s);
	cr_expect_eq(s.places, 0);
	/* Writing from offset 0 starts over too. */
	cr_assert_eq(order_write(o, n, "f1\n", 3, 0), 3);
	cr_assert_eq(order_write(o, n, "f2\n", 3, 0), 3);
	order_get_stats(o, &s);
	cr_expect_eq(s.places, 1);
	cr_expect_eq(order_lookup(o, ORDER_DIR_NODE, "big", &a), 0);
	free(t);
}

Test(order, all_orders_are_bounded)
{
	char *t = paths(1, 1u << 20);
	char name[16];
	int refused = 0;

	for (int i = 0; i < 20 && !refused; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		struct order_attr a;
		cr_assert_eq(order_create(o, ORDER_DIR_NODE, name, ME, ME, 0, &a), 0);
		refused = order_write(o, a.node, t, strlen(t), 0) == -EFBIG;
	}
	free(t);
	cr_expect(refused, "16M places were not the limit");
	struct order_stats s;
	order_get_stats(o, &s);
	cr_expect_eq(s.places, ORDER_MAX_PATHS);
}

Test(order, wait_reports_add_no_more_than_the_clock)
{
	uint64_t n = stream("j", NULL, 0);
	char line[64];

	/* A writer that keeps starting its numbers again, 4,000 times. */
	for (int i = 0; i < 4000; i++) {
		int k = snprintf(line, sizeof(line), "#wait %d %d\n", i % 2 ? 0 : 1000000, i % 2 ? 0 : 1000000);
		cr_assert_eq(order_write(o, n, line, (size_t)k, 1), k);
	}
	struct order_stats s;
	order_get_stats(o, &s);
	cr_expect_leq(s.job_run_us, 61ull * 1000000, "job_run_us %llu", (unsigned long long)s.job_run_us);
	cr_expect_leq(s.job_wait_us, s.job_run_us);
	/* An honest report within its stream's age goes in whole. */
	struct order_opts oo = { .resolve = resolve };
	struct order *o2;
	cr_assert_eq(order_new(&oo, &o2), 0);
	struct order_attr a;
	cr_assert_eq(order_create(o2, ORDER_DIR_NODE, "j", ME, ME, 0, &a), 0);
	cr_assert_eq(order_write(o2, a.node, "#wait 2 3\n", 10, 0), 10);
	cr_assert_eq(order_write(o2, a.node, "#wait 2.5 4\n", 12, 10), 12);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_wait_us, 2500000);
	cr_expect_eq(s.job_run_us, 4000000);
	order_free(o2);
}

/* "#batches BYTES": what a loader says it may hold in batches at once,
 * summed over live streams, taken from the daemon's user (and root) in
 * the daemon's memory cgroup only, malformed lines ignored, and gone with
 * its stream. */
static off_t say(struct order *o2, uint64_t node, const char *text, off_t off)
{
	size_t n = strlen(text);

	cr_assert_eq(order_write(o2, node, text, n, off), (ssize_t)n, "%s", text);
	return off + (off_t)n;
}

Test(order, batches_lines_say_what_a_loader_may_hold)
{
	struct order_opts oo = { .resolve = resolve };
	struct order *o2;
	struct order_attr a, b, c, d;
	struct order_stats s;
	off_t ob = 0;

	cr_assert_eq(order_new(&oo, &o2), 0);
	cr_assert_eq(order_create(o2, ORDER_DIR_NODE, "j", ME, ME, ORDER_SAME_MEMORY, &a), 0);
	cr_assert_eq(order_create(o2, ORDER_DIR_NODE, "k", ME, ME, ORDER_SAME_MEMORY, &b), 0);
	cr_assert_eq(order_create(o2, ORDER_DIR_NODE, "alice", ALICE, 7, ORDER_SAME_MEMORY, &c), 0);
	cr_assert_eq(order_create(o2, ORDER_DIR_NODE, "apart", ME, ME, 0, &d), 0);
	say(o2, a.node, "#batches 308000000\n", 0);
	ob = say(o2, b.node, "#batches 1000\n", ob);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308001000);
	/* The latest line holds; nonsense changes nothing. */
	ob = say(o2, b.node, "#batches 2000\n", ob);
	ob = say(o2, b.node, "#batches -5\n#batches 12x\n#batches \n#batches 99999999999999999999999\n", ob);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308002000);
	/* Another user's word does not count (it would shrink the cache for
	 * everyone), though the line is taken. */
	say(o2, c.node, "#batches 5000\n", 0);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308002000);
	/* A loader whose memory is not in the daemon's cgroup takes nothing
	 * from the daemon's room: its word does not count either. */
	say(o2, d.node, "#batches 7000\n", 0);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308002000);
	/* A huge figure is held to 1 TiB. */
	say(o2, b.node, "#batches 18000000000000000000\n", ob);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308000000 + (1ull << 40));
	/* Gone with its stream. */
	cr_assert_eq(order_unlink(o2, ORDER_DIR_NODE, "k", ME), 0);
	order_get_stats(o2, &s);
	cr_expect_eq(s.job_batches, 308000000);
	order_free(o2);
}

/* "#range OFFSET LENGTH PATH": a place for those bytes alone. The next
 * places carry their ranges; a read is matched to the ranged place whose
 * bytes hold its offset, so consecutive ranges of one file move the head
 * one by one; malformed ranges are refused with the lines before kept. */
Test(order, range_lines_are_places_of_their_bytes)
{
	struct order_pick p;
	const char *t = "#range 0 100 f1\n#range 100 100 f1\n#range 4096 50 f1\nf2\n#range 0 10 nosuch\n";
	uint64_t n = stream("r", t, 0);
	static const struct { uint32_t id; uint64_t off, len; } want[] = {
		{ 1, 0, 100 }, { 1, 100, 100 }, { 1, 4096, 50 }, { 2, 0, 0 },
	};

	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(order_next(o, 10, &p), 1, "place %u", i);
		cr_expect_eq(p.place, i);
		cr_expect(p.id == want[i].id && p.off == want[i].off && p.len == want[i].len,
			  "place %u: id %u, bytes %llu+%llu", i, p.id, (unsigned long long)p.off,
			  (unsigned long long)p.len);
	}
	cr_expect_eq(order_next(o, 10, &p), 0);
	struct order_stats s;
	order_get_stats(o, &s);
	cr_expect_eq(s.paths, 4);
	cr_expect_eq(s.unknown, 1, "a range of a path no file has is counted and skipped");

	/* A read at 150 is the second range's; at 4100 the third's. */
	char buf[512];
	order_seen(o, 1, 150);
	ssize_t r = order_read(o, n, buf, sizeof(buf) - 1, 0);
	cr_assert_gt(r, 0);
	buf[r] = 0;
	cr_expect(strstr(buf, "read up to 2,"), "after a read at 150: %s", buf);
	order_seen(o, 1, 4100);
	r = order_read(o, n, buf, sizeof(buf) - 1, 0);
	buf[r] = 0;
	cr_expect(strstr(buf, "read up to 3,"), "after a read at 4100: %s", buf);
	/* Between the ranges: no place of the stream. */
	order_seen(o, 1, 3000);
	r = order_read(o, n, buf, sizeof(buf) - 1, 0);
	buf[r] = 0;
	cr_expect(strstr(buf, "read up to 3,"), "a read outside every range moved the head: %s", buf);

	static const char *bad[] = {
		"#range 0 0 f1\n", "#range x 10 f1\n", "#range 10 f1\n", "#range 1 2 /f1\n",
		"#range 1 2 \n", "#range 18446744073709551615 1 f1\n", "#range 99999999999999999999 1 f1\n",
		"#range -1 5 f1\n", "#range 1  2 f1\n",
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char line[128];
		snprintf(line, sizeof(line), "f7\n%s", bad[i]);
		order_get_stats(o, &s);
		uint64_t before = s.paths;
		cr_expect_eq(order_write(o, n, line, strlen(line), 1000 + (off_t)i * 100), -EINVAL, "%s", bad[i]);
		order_get_stats(o, &s);
		cr_expect_eq(s.paths, before + 1, "the line before %s was not kept", bad[i]);
	}
	/* A new order gives the ranges' room back; the limit holds. */
	cr_assert_eq(order_truncate(o, n, 0), 0);
	order_get_stats(o, &s);
	cr_expect_eq(s.places, 0);
}
