/* test_readpath.c - the read path as a matrix, liburing-style: every
 * combination of where an item may be (RAM cache: none, small, large; SSD
 * tier: none, present; peers: none, a fake owner for half the items;
 * staging: none, everything prefetched first) read every way a read comes
 * (a whole file, a request spanning items at odd offsets, a peer's read of
 * one item, a second epoch), with the same checks each time:
 *   - the bytes are the file's;
 *   - read_bytes = cache_hit_bytes + cache_miss_bytes;
 *   - with a large cache or a tier, the second epoch reads nothing from
 *     storage (what is ours was kept; the rest came from its owner);
 *   - with peers, an item another node owns is never read from storage
 *     while its owner answers;
 *   - staged items are served once and then freed, none left behind.
 * Each combination is a core of its own over the same SOURCE. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/plan.h"
#include "helpers.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/source.h"
#include "store/staging.h"
#include "store/tier.h"
#include "util/syncwait.h"

#define CHUNK (128u << 10)
#define NFILES 3

static const char *names[NFILES] = { "a.bin", "b.bin", "c.bin" };
static const size_t sizes[NFILES] = { 5000, 300000, 70000 };   /* 1, 3 and 1 items */
static char data[NFILES][300000];
static char *src, *tierdir;

static void setup(void)
{
	char p[4200];

	src = th_tmpdir();
	tierdir = th_tmpdir();
	for (int f = 0; f < NFILES; f++) {
		for (size_t i = 0; i < sizes[f]; i++)
			data[f][i] = (char)(i * (7 + f) + i / 1000);
		snprintf(p, sizeof(p), "%s/%s", src, names[f]);
		FILE *fp = fopen(p, "w");
		cr_assert(fp && fwrite(data[f], 1, sizes[f], fp) == sizes[f]);
		fclose(fp);
	}
}

static void teardown(void)
{
	th_rmrf(src);
	th_rmrf(tierdir);
	free(src);
	free(tierdir);
}

TestSuite(readpath, .init = setup, .fini = teardown, .timeout = 120);

/* ---- a fake peer: owns items whose (id + chunk) is even ---- */

static int peer_asked, peer_served;

static int fake_owns(void *ctx, struct source_item *it)
{
	(void)ctx;
	return (it->id + it->chunk) % 2 == 0;
}

static int file_of(const char *rel)
{
	for (int f = 0; f < NFILES; f++)
		if (!strcmp(rel, names[f]))
			return f;
	return -1;
}

static void fake_peer_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
			   source_done_fn done, void *arg)
{
	static __thread char own[CHUNK];
	int f = file_of(it->rel);

	(void)ctx;
	__atomic_add_fetch(&peer_asked, 1, __ATOMIC_RELAXED);
	/* As the real one: a read within one item of another node's, or it
	 * passes (ours, or a request across items: storage). */
	if (fake_owns(NULL, it) || f < 0 || cache_span((uint64_t)off, len, CHUNK, NULL) != 1 ||
	    (size_t)off + len > sizes[f]) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	char *out = buf ? buf : own;
	memcpy(out, data[f] + off, len);
	__atomic_add_fetch(&peer_served, 1, __ATOMIC_RELAXED);
	done(arg, (ssize_t)len, out);
}

/* ---- helpers ---- */

enum { CACHE_NONE, CACHE_SMALL, CACHE_LARGE };

struct config {
	int cache, tier, peers, staging;
};

static uint64_t sample(struct core *c, const char *name)
{
	static struct sample v[CORE_MAX_SAMPLES];
	int n = core_samples(c, v, CORE_MAX_SAMPLES);

	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return v[i].u;
	cr_assert_fail("no sample %s", name);
	return 0;
}

static char buf[300000];

static ssize_t rd(struct core *c, int f, off_t off, size_t len)
{
	struct core_attr a;
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	cr_assert_eq(core_stat_path(c, names[f], &a), 0);
	core_read(c, a.node, off, len, sync_wait_done, &w);
	return sync_wait(&w);
}

/* Reads LEN bytes at OFF of file F through C's mount side and checks them. */
static void expect_read(struct core *c, const char *what, int f, off_t off, size_t len)
{
	ssize_t n = rd(c, f, off, len);

	cr_assert_eq(n, (ssize_t)len, "%s: %s at %lld, %zu bytes: %zd", what, names[f], (long long)off, len, n);
	cr_expect(!memcmp(buf, data[f] + off, len), "%s: %s at %lld: wrong bytes", what, names[f], (long long)off);
}

/* A peer's read of item CHUNK of file F. Returns the result. */
static ssize_t peer_read(struct core *c, int f, uint32_t chunk)
{
	struct index_attr a;
	struct sync_wait w = SYNC_WAIT_INIT(buf);
	off_t off = (off_t)chunk * CHUNK;
	size_t len = sizes[f] - (size_t)off < CHUNK ? sizes[f] - (size_t)off : CHUNK;

	cr_assert_eq(core_lookup_rel(c, names[f], strlen(names[f]), &a), 0);
	core_read_peer(c, names[f], a.v.size, a.v.mtime_ns, off, len, sync_wait_done, &w);
	ssize_t n = sync_wait(&w);
	if (n >= 0) {
		cr_expect_eq(n, (ssize_t)len);
		cr_expect(!memcmp(buf, data[f] + off, len), "a peer's read of %s %u: wrong bytes", names[f], chunk);
	}
	return n;
}

/* The prefetcher's fetch of every item, waited for. */
struct pf_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int left;
	int kept, staged, failed;
};

static void pf_done(void *arg, ssize_t res, int kept)
{
	struct pf_wait *w = arg;

	pthread_mutex_lock(&w->lock);
	if (res < 0)
		w->failed++;
	else if (kept)
		w->kept++;
	else
		w->staged++;
	w->left--;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void prefetch_all(struct core *c, struct pf_wait *w)
{
	uint64_t reserved = 0;

	*w = (struct pf_wait){ .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	for (int f = 0; f < NFILES; f++) {
		struct index_attr a;
		cr_assert_eq(core_lookup_rel(c, names[f], strlen(names[f]), &a), 0);
		for (uint32_t k = 0; k < cache_chunks(sizes[f], CHUNK); k++) {
			struct plan_prefetch p = { .group = 1, .place = (uint32_t)f, .reserved = &reserved,
						   .done = pf_done, .arg = w };
			pthread_mutex_lock(&w->lock);
			w->left++;
			pthread_mutex_unlock(&w->lock);
			plan_prefetch(c, a.id, &a, k, &p);
		}
	}
	pthread_mutex_lock(&w->lock);
	while (w->left)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

static void settle(struct core *c)
{
	if (c->tier)
		tier_sync(c->tier);
}

/* One combination: open, (prefetch), two epochs and a peer's reads, check. */
static void run(const struct config *k)
{
	char what[128], *dirs[1] = { tierdir };
	uint64_t dsizes[1] = { 8u << 20 };
	/* No memory watch: its calm rule gives staging only what a small cache
	 * leaves of its budget (test_memwatch), and when its first sample comes
	 * is a race with the prefetches here. */
	struct core_opts o = { .source = src, .cache_chunk = CHUNK, .timeout = 3600, .no_order = !k->staging,
			       .prefetch_mem = 1u << 20, .no_mem_watch = 1 };
	struct core *c;

	snprintf(what, sizeof(what), "cache %d, tier %d, peers %d, staging %d", k->cache, k->tier, k->peers,
		 k->staging);
	o.cache_size = k->cache == CACHE_NONE ? 0 : k->cache == CACHE_SMALL ? 140000 : 8u << 20;
	if (k->tier) {
		th_rmrf(tierdir);
		cr_assert_eq(mkdir(tierdir, 0700), 0);
		o.cache_dirs = (const char *const *)dirs;
		o.ncache_dirs = 1;
		o.cache_dir_sizes = dsizes;
		o.ncache_dir_sizes = 1;
	}
	cr_assert_eq(core_open(&o, &c), 0, "%s: open", what);
	if (k->peers) {
		struct core_peer_hooks h = { .owns = fake_owns };
		struct source s = { .name = "fake peer", .read = fake_peer_read };
		core_set_peer_hooks(c, &h);
		cr_assert_eq(core_add_source(c, &s), 0);
	}
	cr_assert_eq(core_start(c), 0, "%s: start", what);
	peer_asked = peer_served = 0;

	struct pf_wait pw = { 0 };
	if (k->staging) {
		prefetch_all(c, &pw);
		cr_expect_eq(pw.failed, 0, "%s: a prefetch failed", what);
		cr_expect_eq(pw.kept + pw.staged, 5, "%s: prefetched %d + %d items", what, pw.kept, pw.staged);
		settle(c);
	}
	/* Epoch 0: whole files, then a request across items at odd offsets. */
	for (int f = 0; f < NFILES; f++)
		expect_read(c, what, f, 0, sizes[f]);
	expect_read(c, what, 1, 100000, 100000);
	expect_read(c, what, 1, CHUNK - 7, 14);
	if (k->staging) {
		cr_expect_eq(sample(c, "prefetch_staged_bytes"), 0, "%s: staged bytes left behind", what);
		cr_expect_eq(sample(c, "prefetch_hits"), (uint64_t)pw.staged, "%s: %llu staged hits for %d staged",
			     what, (unsigned long long)sample(c, "prefetch_hits"), pw.staged);
	}
	settle(c);
	uint64_t s0 = sample(c, "storage_read_bytes"), served0 = peer_served;
	/* Epoch 1, and a read inside one item another node owns (b.bin's first:
	 * never admitted here without a remote budget). */
	for (int f = 0; f < NFILES; f++)
		expect_read(c, what, f, 0, sizes[f]);
	expect_read(c, what, 1, 10, 1000);
	uint64_t s1 = sample(c, "storage_read_bytes");
	if (k->cache == CACHE_LARGE || k->tier)
		cr_expect_eq(s1 - s0, 0, "%s: epoch 1 read %llu storage bytes", what, (unsigned long long)(s1 - s0));
	if (k->peers)
		cr_expect_gt(peer_served, served0, "%s: the owner was not asked in epoch 1", what);
	if (!k->peers)
		cr_expect_eq(peer_asked, 0);
	/* A peer's reads: served (and kept, when there is room), or refused
	 * when this node keeps nothing, never an error. */
	for (int f = 0; f < NFILES; f++)
		for (uint32_t ch = 0; ch < cache_chunks(sizes[f], CHUNK); ch++) {
			ssize_t n = peer_read(c, f, ch);
			cr_expect(n > 0 || n == -ENOSPC, "%s: a peer's read of %s %u: %zd", what, names[f], ch, n);
			if (k->cache == CACHE_LARGE && !k->peers)
				cr_expect_gt(n, 0, "%s: a peer's read of a cached item refused", what);
		}
	cr_expect_eq(sample(c, "read_bytes"), sample(c, "cache_hit_bytes") + sample(c, "cache_miss_bytes"),
		     "%s: read_bytes is not hits + misses", what);
	cr_expect_eq(sample(c, "read_errors") + sample(c, "stale_reads"), 0, "%s: read errors", what);
	core_close(c);
}

Test(readpath, every_combination)
{
	for (int cache = CACHE_NONE; cache <= CACHE_LARGE; cache++)
		for (int tier = 0; tier <= 1; tier++)
			for (int peers = 0; peers <= 1; peers++)
				for (int staging = 0; staging <= 1; staging++) {
					struct config k = { cache, tier, peers, staging };
					run(&k);
				}
}
