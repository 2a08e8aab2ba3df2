/* test_prefetch.c - the prefetch thread (fs/core/prefetch.c) in a core
 * without a mount: an order written to .epochfs/order/ is fetched ahead
 * within the window and within staging's room; readers take what was
 * staged and staging empties; a new order drops the old one's; a file the
 * kernel says it caches (the probe) is not fetched; --prefetch-mem 0 takes
 * orders and fetches nothing; a file many times staging's room is staged
 * item by item, never past the limit, each byte read once. No RAM cache,
 * so everything fetched is staged and can be counted. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core_int.h"
#include "core/prefetch.h"
#include "helpers.h"
#include "util/syncwait.h"

#define NF 40
#define FSIZE 10000

static char *dir;
static struct core *core;
static uint64_t stream_node;
static size_t big_size;             /* also a file "big" of this many bytes */

static char big_byte(size_t off)
{
	return (char)(off / 4096 % 251);
}

static void open_core(uint64_t mem, unsigned window)
{
	struct core_opts o = { .cache_size = 0, .timeout = 3600, .prefetch_mem = mem, .prefetch_window = window,
			       .no_mem_watch = 1 };
	char name[32], body[FSIZE];

	dir = th_tmpdir();
	for (int i = 0; i < NF; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		memset(body, 'a' + i % 26, sizeof(body));
		body[0] = (char)i;
		char p[4200];
		snprintf(p, sizeof(p), "%s/%s", dir, name);
		FILE *w = fopen(p, "w");
		cr_assert(w && fwrite(body, 1, FSIZE, w) == FSIZE);
		fclose(w);
	}
	if (big_size) {
		char p[4200];
		snprintf(p, sizeof(p), "%s/big", dir);
		FILE *w = fopen(p, "w");
		cr_assert(w);
		for (size_t off = 0; off < big_size; off++)
			fputc(big_byte(off), w);
		fclose(w);
	}
	o.source = dir;
	cr_assert_eq(core_open(&o, &core), 0);
	cr_assert_eq(core_start(core), 0);
}

static void teardown(void)
{
	core_close(core);
	th_rmrf(dir);
	free(dir);
}

static uint64_t sample(const char *name)
{
	static struct sample v[CORE_MAX_SAMPLES];
	int n = core_samples(core, v, CORE_MAX_SAMPLES);

	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return v[i].u;
	cr_assert_fail("no sample %s", name);
	return 0;
}

/* Waits up to 5 s for sample NAME to reach AT LEAST, then 0.2 s more for it to settle. */
static uint64_t settle(const char *name, uint64_t least)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 500 && sample(name) < least; i++)
		nanosleep(&ts, NULL);
	for (int i = 0; i < 20; i++)
		nanosleep(&ts, NULL);
	return sample(name);
}

static void write_text(const char *text);

/* Writes the order "f00".."f(N-1)" (from offset 0: a new order). */
static void write_order(int n)
{
	char text[NF * 8] = "";

	for (int i = 0; i < n; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "f%02d\n", i);
	write_text(text);
}

/* Writes TEXT as the stream's order (from offset 0: a new order). */
static void write_text(const char *text)
{
	struct core_attr ctl, order, st;

	if (!stream_node) {
		cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
		cr_assert_eq(core_lookup(core, ctl.node, "order", &order), 0);
		cr_assert_eq(core_create(core, order.node, "job", NULL, &st), 0);
		stream_node = st.node;
	}
	cr_assert_eq(core_write(core, stream_node, text, strlen(text), 0), (ssize_t)strlen(text));
}

static void read_file(int i)
{
	static char buf[FSIZE];
	char name[16];
	struct core_attr a;
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	snprintf(name, sizeof(name), "f%02d", i);
	cr_assert_eq(core_stat_path(core, name, &a), 0);
	core_read(core, a.node, 0, FSIZE, sync_wait_done, &w);
	cr_assert_eq(sync_wait(&w), FSIZE);
	cr_expect_eq(buf[0], (char)i);
	cr_expect_eq(buf[FSIZE - 1], 'a' + i % 26);
}

static void fini(void)
{
	stream_node = 0;
	big_size = 0;
	teardown();
}

TestSuite(prefetch, .fini = fini, .timeout = 60);

Test(prefetch, the_window_and_the_readers_move_it)
{
	open_core(1 << 20, 8);
	write_order(NF);
	cr_expect_eq(settle("prefetch_staged_bytes", 8 * FSIZE), 8 * FSIZE, "the window is 8 files");
	/* Readers take the first 8: each served from staging, and the window
	 * moves on by as many. */
	for (int i = 0; i < 8; i++)
		read_file(i);
	cr_expect_eq(sample("prefetch_hits"), 8);
	cr_expect_eq(settle("prefetch_bytes", 16 * FSIZE), 16 * FSIZE);
	cr_expect_eq(sample("prefetch_staged_bytes"), 8 * FSIZE);
	cr_expect_eq(sample("storage_read_bytes"), 16 * FSIZE, "a staged file was read twice");
}

Test(prefetch, staging_room_bounds_what_is_fetched)
{
	open_core(5 * FSIZE, 1000);
	write_order(NF);
	uint64_t staged = settle("prefetch_staged_bytes", 5 * FSIZE);
	cr_expect_leq(staged, 5 * FSIZE, "staging took %llu bytes, room for 5 files", (unsigned long long)staged);
	cr_expect_geq(staged, 4 * FSIZE);
	for (int i = 0; i < NF; i++)
		read_file(i);               /* exact bytes whether staged or not */
	cr_expect_leq(sample("prefetch_staged_peak_bytes"), 5 * FSIZE);
}

Test(prefetch, a_new_order_drops_the_old_ones_items)
{
	open_core(1 << 20, 10);
	write_order(NF);
	cr_assert_eq(settle("prefetch_staged_bytes", 10 * FSIZE), 10 * FSIZE);
	write_order(3);                     /* from offset 0: a new order */
	uint64_t wasted = settle("prefetch_wasted_bytes", 7 * FSIZE);
	cr_expect_geq(wasted, 7 * FSIZE, "the old order's items were kept");
	cr_expect_leq(sample("prefetch_staged_bytes"), 3 * FSIZE);
}

static int probed;

/* The kernel, asked whether it caches a file above the mount: every even one. */
static int probe(void *arg, uint64_t node, void *cookie)
{
	(void)arg;
	probed++;
	prefetch_probed(core->pf, cookie, (node & 1) == 0);
	return 0;
}

Test(prefetch, files_the_kernel_caches_are_not_fetched)
{
	open_core(1 << 20, 20);
	core_set_probe(core, probe, NULL);
	write_order(20);
	settle("prefetch_resident", 10);
	cr_expect_gt(probed, 0);
	cr_expect_eq(sample("prefetch_resident") * FSIZE + sample("prefetch_bytes"), 20 * FSIZE,
		     "resident %llu, fetched %llu bytes", (unsigned long long)sample("prefetch_resident"),
		     (unsigned long long)sample("prefetch_bytes"));
	cr_expect_gt(sample("prefetch_resident"), 0);
}

Test(prefetch, no_room_takes_orders_and_fetches_nothing)
{
	struct timespec ts = { 0, 300 * 1000 * 1000 };

	open_core(0, 10);
	write_order(NF);
	nanosleep(&ts, NULL);
	cr_expect_eq(sample("order_streams"), 1);
	cr_expect_eq(sample("order_places"), NF);
	cr_expect_eq(sample("prefetch_bytes"), 0);
	read_file(0);
}

/* A shard: 3 MiB (12 items of 256K) through 1 MiB of staging. Before, the
 * file's whole size was reserved at once and all of it staged. Now the
 * room fills with whole items, the rest waits (parked) and follows the
 * reader as it takes items, and storage is read once for every byte. (A
 * reader with no pause between items outran the prefetch thread's
 * wake-ups here: half its reads went to storage, each byte still read
 * once, since a reader's miss moves the prefetcher past it.) */
Test(prefetch, a_file_larger_than_staging_is_staged_item_by_item)
{
	big_size = 3u << 20;
	open_core(1u << 20, 8);
	size_t item = core->chunk;
	cr_assert_eq(big_size % item, 0);
	write_text("big\n");
	uint64_t staged = settle("prefetch_staged_bytes", 1u << 20);
	cr_expect_eq(staged, 1u << 20, "staging holds %llu bytes, room for 1 MiB", (unsigned long long)staged);

	struct core_attr a;
	static char buf[1u << 20];
	cr_assert_eq(core_stat_path(core, "big", &a), 0);
	for (size_t off = 0; off < big_size; off += item) {
		struct sync_wait w = SYNC_WAIT_INIT(buf);
		core_read(core, a.node, (off_t)off, item, sync_wait_done, &w);
		cr_assert_eq(sync_wait(&w), (ssize_t)item);
		cr_assert(buf[0] == big_byte(off) && buf[item - 1] == big_byte(off + item - 1), "bytes at %zu", off);
		struct timespec decode = { 0, 20 * 1000 * 1000 };
		nanosleep(&decode, NULL);   /* a reader that decodes what it reads */
	}
	uint64_t items = big_size / item;
	cr_expect_eq(sample("prefetch_hits") + sample("prefetch_late"), items, "every read served from staging: %llu hits, %llu late of %llu", (unsigned long long)sample("prefetch_hits"), (unsigned long long)sample("prefetch_late"), (unsigned long long)items);
	cr_expect_leq(sample("prefetch_staged_peak_bytes"), 1u << 20, "staging went past its limit");
	cr_expect_eq(sample("storage_read_bytes"), big_size, "a byte was read twice");
	cr_expect_eq(settle("prefetch_staged_bytes", 0), 0);
}
