/* test_core.c - the core's read path without a mount: the RAM cache in
 * front, the source chain behind it (a source that passes a read on, one
 * that answers it, one that fails), and reads that span several items. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/core_int.h"
#include "helpers.h"
#include "store/cache.h"
#include "store/source.h"
#include "util/syncwait.h"

#define BIG (600u << 10)        /* three 256 KiB items */

static char *dir;
static char big[BIG];
static struct core *core;

/* A read waited for: core_read's callback may run on another thread. */
struct wait {
	char buf[BIG];
};

static ssize_t rd(uint64_t node, off_t off, size_t len, struct wait *w)
{
	struct sync_wait sw = SYNC_WAIT_INIT(w->buf);

	core_read(core, node, off, len, sync_wait_done, &sw);
	return sync_wait(&sw);
}

/* Sample NAME of core C (a test fails without it). */
static const struct sample *find(struct core *c, const char *name)
{
	static struct sample v[600];
	int n = core_samples(c, v, 600);

	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	cr_assert_fail("no sample %s", name);
	return NULL;
}

static uint64_t sample(const char *name)
{
	return find(core, name)->u;
}

static uint64_t storage_bytes(void)
{
	return sample("storage_read_bytes");
}

static uint64_t id_of(const char *name)
{
	struct core_attr a;

	cr_assert_eq(core_stat_path(core, name, &a), 0, "%s not indexed", name);
	return a.node;
}

/* Fake sources. */
static int asked;
static int mode;                /* 0: pass on (-EAGAIN), 1: serve the true bytes, 2: fail */

static void fake_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
		      source_done_fn done, void *arg)
{
	static char own[BIG];
	char *out = buf ? buf : own;
	const char *rel = it->rel;

	(void)ctx;
	cr_assert_eq(it->rel_len, strlen(it->rel));
	cr_assert_eq(it->chunk, (uint32_t)(off / (256 << 10)), "a read outside its item");
	__atomic_add_fetch(&asked, 1, __ATOMIC_RELAXED);
	if (mode == 0) {
		done(arg, -EAGAIN, NULL);
	} else if (mode == 2) {
		done(arg, -EIO, NULL);
	} else {
		cr_assert_str_eq(rel, "big.bin");
		memcpy(out, big + off, len);
		done(arg, (ssize_t)len, out);
	}
}

/* A new SOURCE with big.bin (BIG bytes of a pattern of SEED) in it. */
static void write_big(unsigned seed)
{
	for (size_t i = 0; i < BIG; i++)
		big[i] = (char)(i * seed + i / 4096);
	dir = th_tmpdir();
	char p[4096];
	snprintf(p, sizeof(p), "%s/big.bin", dir);
	FILE *f = fopen(p, "w");
	cr_assert(f && fwrite(big, 1, BIG, f) == BIG);
	fclose(f);
}

static void setup(void)
{
	struct core_opts o = { .cache_size = 8 << 20, .cache_chunk = 256 << 10, .timeout = 3600 };

	write_big(7);
	th_write(dir, "small.txt", "hello, epochfs");
	o.source = dir;
	cr_assert_eq(core_open(&o, &core), 0);
	cr_assert_eq(core_start(core), 0);
	asked = 0;
}

static void teardown(void)
{
	core_close(core);
	th_rmrf(dir);
	free(dir);
}

TestSuite(core, .init = setup, .fini = teardown);

Test(core, reads_through_the_cache_and_across_items)
{
	static struct wait w;
	uint64_t b = id_of("big.bin");

	/* A read spanning all three items, at an odd offset. */
	cr_assert_eq(rd(b, 1000, BIG - 2000, &w), BIG - 2000);
	cr_expect(!memcmp(w.buf, big + 1000, BIG - 2000));
	cr_expect_eq(storage_bytes(), BIG);         /* each item loaded whole, once */
	/* Again: all from the cache. */
	cr_assert_eq(rd(b, 0, BIG, &w), BIG);
	cr_expect(!memcmp(w.buf, big, BIG));
	cr_assert_eq(rd(b, (256 << 10) - 10, 20, &w), 20);
	cr_expect(!memcmp(w.buf, big + (256 << 10) - 10, 20));
	cr_expect_eq(storage_bytes(), BIG);
	/* Reads are clamped at the end of the file. */
	cr_assert_eq(rd(b, BIG - 5, 100, &w), 5);
	cr_expect_eq(rd(b, BIG, 100, &w), 0);
	uint64_t s = id_of("small.txt");
	cr_assert_eq(rd(s, 0, 4096, &w), 14);
	cr_expect(!memcmp(w.buf, "hello, epochfs", 14));
}

/* user.epochfs.where's text for NAME, NUL-terminated. */
static const char *where(const char *name)
{
	static char buf[8192];
	ssize_t n = core_where(core, id_of(name), NULL, 0);

	cr_assert_gt(n, 0, "core_where(%s) measured %zd", name, n);
	cr_assert_lt((size_t)n, sizeof(buf));
	cr_assert_eq(core_where(core, id_of(name), buf, (size_t)n - 1), -ERANGE);
	cr_assert_eq(core_where(core, id_of(name), buf, sizeof(buf)), n);
	buf[n] = 0;
	return buf;
}

/* Items other than the first are kept by "node-b:7000". */
static int fake_keeper(void *ctx, struct source_item *it, char *name, size_t len)
{
	(void)ctx;
	cr_assert_str_eq(it->rel, "big.bin");
	snprintf(name, len, "%s", it->chunk ? "node-b:7000" : "self:7000");
	return it->chunk == 0;
}

Test(core, where_says_which_items_a_read_would_find_where_and_counts_nothing)
{
	static struct wait w;
	uint64_t reads = sample("reads"), hits = sample("cache_hits");

	cr_expect_str_eq(where("big.bin"), "size 614400\nitem 262144\nitems 3\nram 0 0\nstaging 0 0\n"
					   "tier 0 0\npeer 0 0\nstorage 3 614400\nmap ...\n");
	/* The middle item read: in RAM now. */
	cr_assert_eq(rd(id_of("big.bin"), 300000, 10, &w), 10);
	cr_expect_str_eq(where("big.bin"), "size 614400\nitem 262144\nitems 3\nram 1 262144\n"
					   "staging 0 0\ntier 0 0\npeer 0 0\nstorage 2 352256\nmap .R.\n");
	/* With peers: what another node keeps, and its name once. */
	struct core_peer_hooks h = { .keeper = fake_keeper };
	core_set_peer_hooks(core, &h);
	cr_expect_str_eq(where("big.bin"), "size 614400\nitem 262144\nitems 3\nram 1 262144\n"
					   "staging 0 0\ntier 0 0\npeer 1 90112\nstorage 1 262144\n"
					   "node node-b:7000\nmap .RP\n");
	cr_expect_eq(sample("reads"), reads + 1, "a look counted as a read");
	cr_expect_eq(sample("cache_hits"), hits, "a look counted as a hit");
	/* Neither directories nor the virtual files have it. */
	cr_expect_eq(core_where(core, CORE_ROOT_NODE, NULL, 0), -ENODATA);
	struct core_attr ctl;
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
	cr_expect_eq(core_where(core, ctl.node, NULL, 0), -ENODATA);
}

Test(core, a_source_that_passes_falls_back_to_storage)
{
	static struct wait w;
	struct source src = { .name = "fake", .read = fake_read };

	mode = 0;
	cr_assert_eq(core_add_source(core, &src), 0);
	cr_assert_eq(rd(id_of("big.bin"), 0, BIG, &w), BIG);
	cr_expect(!memcmp(w.buf, big, BIG));
	cr_expect_eq(asked, 3);                     /* one per item */
	cr_expect_eq(storage_bytes(), BIG);
	/* Hits never ask a source. */
	cr_assert_eq(rd(id_of("big.bin"), 0, BIG, &w), BIG);
	cr_expect_eq(asked, 3);
}

Test(core, a_source_that_answers_spares_storage)
{
	static struct wait w;
	struct source src = { .name = "fake", .read = fake_read };

	mode = 1;
	cr_assert_eq(core_add_source(core, &src), 0);
	/* Items 0 and 1 (the boundary is at 262144). */
	cr_assert_eq(rd(id_of("big.bin"), 200000, 200000, &w), 200000);
	cr_expect(!memcmp(w.buf, big + 200000, 200000));
	cr_expect_eq(storage_bytes(), 0);
	cr_expect_eq(asked, 2);
}

Test(core, a_final_error_reaches_the_reader)
{
	static struct wait w;
	struct source src = { .name = "fake", .read = fake_read };

	mode = 2;
	cr_assert_eq(core_add_source(core, &src), 0);
	cr_expect_eq(rd(id_of("big.bin"), 0, 4096, &w), -EIO);
	cr_expect_eq(storage_bytes(), 0);
	/* The failed load admitted nothing: the next read asks again. */
	mode = 0;
	cr_assert_eq(rd(id_of("big.bin"), 0, 4096, &w), 4096);
	cr_expect(!memcmp(w.buf, big, 4096));
}

Test(core, sources_are_bounded)
{
	struct source src = { .name = "fake", .read = fake_read };

	for (int i = 0; i < CORE_MAX_SOURCES; i++)
		cr_assert_eq(core_add_source(core, &src), 0);
	cr_expect_eq(core_add_source(core, &src), -ENOSPC);
}

/* Concurrent readers of the same items: one load each, all bytes right. */
static void *reader(void *arg)
{
	struct wait *w = malloc(sizeof(*w));
	uintptr_t k = (uintptr_t)arg;
	uint64_t b = id_of("big.bin");
	int bad = 0;

	for (int i = 0; i < 50; i++) {
		off_t off = (off_t)((k * 7919 + (uintptr_t)i * 104729) % (BIG - 70000));
		if (rd(b, off, 70000, w) != 70000 || memcmp(w->buf, big + off, 70000))
			bad = 1;
	}
	free(w);
	return (void *)(uintptr_t)bad;
}

Test(core, concurrent_readers_load_each_item_once)
{
	pthread_t t[8];
	void *bad;

	for (uintptr_t i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, reader, (void *)i);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], &bad);
		cr_expect(!bad, "reader %d saw wrong bytes", i);
	}
	cr_expect_eq(storage_bytes(), BIG);
}

/* --cache-remote: items this node does not own take the remote budget, and
 * a request that finds the item loading, or loses the race to admit it,
 * must not be charged for it (or an exact budget runs out before the items
 * do: t_peers.sh's second pass then fetched a file or two again). Eight
 * readers race for item 0 behind a slow source, with a budget of exactly
 * the three items: afterwards all three must still fit. The narrowest race
 * (two lookups both missing before either admits) cannot be forced from
 * here; read.c's unadmit() covers it by construction. */
static int owns_nothing(void *ctx, struct source_item *it)
{
	(void)ctx, (void)it;
	return 0;
}

static void slow_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
		      source_done_fn done, void *arg)
{
	struct timespec ts = { 0, 30 * 1000000 };

	(void)ctx, (void)it;
	__atomic_add_fetch(&asked, 1, __ATOMIC_RELAXED);
	nanosleep(&ts, NULL);           /* the other readers arrive meanwhile */
	memcpy(buf, big + off, len);
	done(arg, (ssize_t)len, buf);
}

static void *first_item(void *arg)
{
	struct wait *w = malloc(sizeof(*w));
	int bad = rd(id_of("big.bin"), 0, 4096, w) != 4096 || memcmp(w->buf, big, 4096);

	(void)arg;
	free(w);
	return (void *)(uintptr_t)bad;
}

Test(core, an_exact_remote_budget_holds_every_item_despite_racing_readers)
{
	static struct wait w;
	struct source src = { .name = "slow", .read = slow_read };
	struct core_peer_hooks h = { .owns = owns_nothing, .remote_budget = BIG };
	pthread_t t[8];
	void *bad;

	cr_assert_eq(core_add_source(core, &src), 0);
	core_set_peer_hooks(core, &h);
	for (uintptr_t i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, first_item, NULL);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], &bad);
		cr_expect(!bad, "reader %d saw wrong bytes", i);
	}
	cr_expect_eq(asked, 1, "item 0 was fetched %d times", asked);
	/* Items 1 and 2 still fit the budget: a second pass asks nothing. */
	cr_assert_eq(rd(id_of("big.bin"), 0, BIG, &w), BIG);
	cr_expect(!memcmp(w.buf, big, BIG));
	int after_fill = asked;
	cr_assert_eq(rd(id_of("big.bin"), 0, BIG, &w), BIG);
	cr_expect_eq(asked, after_fill, "%d items were not admitted", asked - after_fill);
}

/* ---- prefetch: a miss the cache admits takes the staged bytes ---- */

static void setup_pf(void)
{
	struct core_opts o = { .cache_size = 8 << 20, .cache_chunk = 256 << 10, .timeout = 3600,
			       .prefetch_mem = 4 << 20, .no_mem_watch = 1 };

	write_big(5);
	o.source = dir;
	cr_assert_eq(core_open(&o, &core), 0);
	cr_assert_eq(core_start(core), 0);
}

TestSuite(core_pf, .init = setup_pf, .fini = teardown);

Test(core_pf, a_miss_the_cache_admits_fills_it_from_staging_not_storage)
{
	static struct wait w;
	struct core_attr ctl, order, st;
	uint64_t b = id_of("big.bin");

	/* The cache admits nothing (as when paused): the prefetcher stages. */
	cache_set_limit(core->cache, 0);
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
	cr_assert_eq(core_lookup(core, ctl.node, "order", &order), 0);
	cr_assert_eq(core_create(core, order.node, "job", NULL, &st), 0);
	cr_assert_eq(core_write(core, st.node, "big.bin\n", 8, 0), 8);
	/* Staged bytes count an item from its allocation, before its load
	 * lands: wait for storage's count too, so the loads are done. */
	for (int i = 0; i < 500 && (sample("prefetch_staged_bytes") < BIG || storage_bytes() < BIG);
	     i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	cr_assert_eq(sample("prefetch_staged_bytes"), BIG, "the order was not fetched ahead");
	char wb[512];
	ssize_t wn = core_where(core, b, wb, sizeof(wb) - 1);
	cr_assert_gt(wn, 0);
	wb[wn] = 0;
	cr_expect(strstr(wb, "staging 3 614400\n") && strstr(wb, "map SSS\n"), "%s", wb);
	uint64_t stored = storage_bytes();
	cr_expect_eq(stored, BIG);
	/* Room again (the pressure thread lifting the limit): the reader's
	 * misses are admitted, and filled from what was staged. */
	cache_set_limit(core->cache, UINT64_MAX);
	cr_assert_eq(rd(b, 0, BIG, &w), BIG);
	cr_expect(!memcmp(w.buf, big, BIG));
	cr_expect_eq(storage_bytes(), stored, "storage was read again for staged bytes");
	cr_expect_eq(sample("prefetch_hits"), 3);
	cr_expect_eq(sample("prefetch_staged_bytes"), 0, "staging keeps what the cache took");
	/* And they are cached now. */
	uint64_t hits = sample("cache_hits");
	cr_assert_eq(rd(b, 0, BIG, &w), BIG);
	cr_expect(!memcmp(w.buf, big, BIG));
	cr_expect_eq(sample("cache_hits"), hits + 3);
	cr_expect_eq(storage_bytes(), stored);
}

/* The memory thread reads the order and sets staging's and the cache's
 * limits: core_close() stops it before any of them goes. A thread that
 * ticks right as the mount closes (its first tick comes at once) must find
 * them all (a NULL order here was a crash at umount). */
Test(core_close, stops_the_memory_thread_before_what_it_reads)
{
	char *d = th_tmpdir();

	th_write(d, "a", "bytes");
	for (int i = 0; i < 150; i++) {
		struct core_opts o = { .source = d, .cache_size = 1 << 20, .timeout = 3600,
				       .prefetch_mem = 1 << 20 };
		struct core *c;
		cr_assert_eq(core_open(&o, &c), 0);
		cr_assert_eq(core_start(c), 0);
		core_close(c);
	}
	th_rmrf(d);
	free(d);
}

static int owns_all(void *ctx, struct source_item *it)
{
	(void)ctx;
	(void)it;
	return 1;
}

static const char *info(struct core *c, const char *name)
{
	return find(c, name)->text;
}

/* --spread on (store/spread.h, core/admit.c): off by default; with peers
 * off, and says why; on, a cache of a quarter of a 4 MiB file spreads at
 * about that share and says so. */
Test(core_spread, on_off_and_peers)
{
	char *d = th_tmpdir(), p[4096];
	static char buf[4 << 20];
	struct core *c;

	memset(buf, 'x', sizeof(buf));
	snprintf(p, sizeof(p), "%s/shard.tar", d);
	FILE *f = fopen(p, "w");
	cr_assert(f && fwrite(buf, 1, sizeof(buf), f) == sizeof(buf));
	fclose(f);
	struct core_opts o = { .source = d, .cache_size = 1 << 20, .cache_chunk = 256 << 10, .timeout = 3600 };
	cr_assert_eq(core_open(&o, &c), 0);
	cr_assert_eq(core_start(c), 0);
	cr_expect(!strncmp(info(c, "cache_spread"), "off: first come", 15), "%s", info(c, "cache_spread"));
	core_close(c);

	o.spread = 1;
	cr_assert_eq(core_open(&o, &c), 0);
	/* The peers plug in before core_start(), as the daemon's do. */
	struct core_peer_hooks h = { .owns = owns_all };
	core_set_peer_hooks(c, &h);
	cr_assert_eq(core_start(c), 0);
	cr_expect(!strncmp(info(c, "cache_spread"), "off: with peers", 15), "%s", info(c, "cache_spread"));
	core_close(c);

	cr_assert_eq(core_open(&o, &c), 0);
	cr_assert_eq(core_start(c), 0);
	const char *t = info(c, "cache_spread");
	cr_expect(!strncmp(t, "on: 2", 5) && strstr(t, "of each of the 1 files"), "%s", t);
	core_close(c);
	th_rmrf(d);
	free(d);
}
