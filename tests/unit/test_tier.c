/* Unit tests of the SSD tier without a mount: a claimed item is written,
 * read back through the source interface with its bytes checked, adopted
 * by the next tier on the same directory; a changed version, a corrupt
 * byte or a full budget are never served or exceeded. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/tier.h"
#include "util/syncwait.h"

#define CHUNK 65536u
static char dir[200], src[256];
static struct index_version vers[9];

static int resolve(void *arg, const char *rel, size_t len, uint32_t *id, struct index_version *v)
{
	(void)arg;
	if (len == 2 && rel[0] == 'f' && rel[1] >= '1' && rel[1] <= '8') {
		*id = (uint32_t)(rel[1] - '0');
		*v = vers[*id];
		return 0;
	}
	return -ENOENT;
}

static int path_of(void *arg, uint32_t id, char *buf, size_t len)
{
	(void)arg;
	return snprintf(buf, len, "f%u", id);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/epochfs-ut-tier.XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(src, sizeof(src), "%s/src", dir);
	cr_assert_eq(mkdir(src, 0700), 0);
	for (int i = 1; i <= 8; i++)
		vers[i] = (struct index_version){ .ino = (uint64_t)i, .size = 50000, .mtime_ns = 1, .ctime_ns = 1 };
}

static void teardown(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(tier, .init = setup, .fini = teardown);

static struct tier *open_tier(uint64_t size, int persist)
{
	struct tier_opts o = { .ndirs = 1, .source = src, .mountpoint = "/nowhere", .chunk = CHUNK,
			       .max_items = 64, .need = 1 << 20, .persist = persist };
	char path[300], err[600];
	struct tier *t;

	snprintf(path, sizeof(path), "%s/ssd", dir);
	o.dirs[0] = path;
	o.sizes[0] = size;
	cr_assert_eq(tier_open(&o, resolve, path_of, NULL, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(tier_start(t, err, sizeof(err)), 0, "%s", err);
	return t;
}

/* Writes item ID (chunk 0, LEN bytes of FILL): the file is LEN bytes long
 * now, as the daemon's items are always a whole piece of their file. */
static void put(struct tier *t, uint32_t id, size_t len, int fill)
{
	void *buf;

	vers[id].size = len;
	struct tier_claim *cl = tier_claim(t, id, 0, &vers[id], len, &buf, NULL);

	cr_assert_not_null(cl, "claim of %u", id);
	memset(buf, fill, len);
	tier_fill(t, cl, 1);
}

struct got {
	ssize_t res;
	unsigned char first, last;
};

/* Reads LEN bytes at OFF of item ID through the source interface. */
static struct got get(struct tier *t, uint32_t id, off_t off, size_t len)
{
	static unsigned char buf[CHUNK];
	struct source_item it = { .id = id, .chunk = 0, .v = vers[id] };
	struct sync_wait w = SYNC_WAIT_INIT(buf);
	struct got g = { 0 };

	memset(buf, 0, sizeof(buf));
	tier_read(t, &it, off, len, NULL, sync_wait_done, &w);
	g.res = sync_wait(&w);
	if (g.res > 0) {
		g.first = buf[0];
		g.last = buf[g.res - 1];
	}
	return g;
}

Test(tier, written_items_read_back_checked)
{
	struct tier *t = open_tier(1 << 20, 1);
	struct tier_stats s;

	put(t, 1, 50000, 0x11);
	put(t, 2, 4096, 0x22);
	int held = 0;
	cr_expect_null(tier_claim(t, 1, 0, &vers[1], 50000, &(void *){ NULL }, &held), "a second claim of one item");
	cr_expect_eq(held, 1);
	tier_sync(t);
	struct got g = get(t, 1, 1000, 4000);
	cr_expect_eq(g.res, 4000);
	cr_expect_eq(g.first, 0x11);
	g = get(t, 2, 0, 65536);
	cr_expect_eq(g.res, 4096, "clamped to the item");
	cr_expect_eq(g.last, 0x22);
	cr_expect_eq(get(t, 3, 0, 100).res, -EAGAIN, "not held: the next source");
	tier_get_stats(t, &s);
	cr_expect_eq(s.items, 2);
	cr_expect_eq(s.admitted, 2);
	cr_expect_eq(s.used, 53248 + 4096);
	tier_free(t);
}

Test(tier, a_new_version_is_never_served)
{
	struct tier *t = open_tier(1 << 20, 1);

	put(t, 1, 30000, 0x33);
	tier_sync(t);
	vers[1].mtime_ns = 2;
	cr_expect_eq(get(t, 1, 0, 100).res, -EAGAIN);
	cr_expect_eq(tier_holds(t, 1, 0, &vers[1]), 0);
	put(t, 1, 30000, 0x44);         /* the new version takes the key again */
	tier_sync(t);
	struct got g = get(t, 1, 0, 100);
	cr_expect_eq(g.res, 100);
	cr_expect_eq(g.first, 0x44);
	tier_free(t);
}

Test(tier, a_corrupt_byte_drops_the_item)
{
	struct tier *t = open_tier(1 << 20, 1);
	char path[300];

	put(t, 1, 8000, 0x55);
	tier_sync(t);
	snprintf(path, sizeof(path), "%s/ssd/epochfs-tier/arena", dir);
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "X", 1, 7000), 1);
	close(fd);
	cr_expect_eq(get(t, 1, 0, 100).res, -EAGAIN, "a corrupt item passes the read on");
	struct tier_stats s;
	tier_get_stats(t, &s);
	cr_expect_eq(s.corrupt, 1);
	cr_expect_eq(s.items, 0);
	tier_free(t);
}

Test(tier, the_budget_is_never_passed)
{
	struct tier *t = open_tier(3 * 4096, 1);
	void *buf;

	put(t, 1, 4096, 1);
	put(t, 2, 8000, 2);
	cr_expect_null(tier_claim(t, 3, 0, &vers[3], 10, &buf, NULL));
	struct tier_stats s;
	tier_get_stats(t, &s);
	cr_expect_eq(s.full, 1);
	cr_expect_eq(s.used, 3 * 4096);
	tier_free(t);
}

Test(tier, a_restart_adopts_and_no_persist_starts_empty)
{
	struct tier *t = open_tier(1 << 20, 1);
	struct tier_stats s;

	put(t, 1, 20000, 0x66);
	put(t, 2, 20000, 0x77);
	tier_free(t);                   /* drains the writes */
	vers[2].ctime_ns = 9;           /* changed while no daemon ran */
	t = open_tier(1 << 20, 1);
	tier_get_stats(t, &s);
	cr_expect_eq(s.adopted, 1);
	cr_expect_eq(s.dropped, 1);
	struct got g = get(t, 1, 19000, 1000);
	cr_expect_eq(g.res, 1000);
	cr_expect_eq(g.last, 0x66);
	cr_expect_eq(get(t, 2, 0, 10).res, -EAGAIN);
	tier_free(t);
	t = open_tier(1 << 20, 0);
	tier_get_stats(t, &s);
	cr_expect_eq(s.adopted, 0);
	cr_expect_eq(get(t, 1, 0, 10).res, -EAGAIN, "--no-persist starts empty");
	tier_free(t);
	t = open_tier(1 << 20, 1);
	tier_get_stats(t, &s);
	cr_expect_eq(s.adopted, 0, "and leaves nothing to adopt");
	tier_free(t);
}

Test(tier, a_smaller_budget_drops_what_lies_past_it)
{
	struct tier *t = open_tier(1 << 20, 1);
	struct tier_stats s;

	put(t, 1, 20000, 1);
	put(t, 2, 20000, 2);
	put(t, 3, 20000, 3);
	tier_free(t);
	t = open_tier(45056, 1);        /* room for the first two only */
	tier_get_stats(t, &s);
	cr_expect_eq(s.adopted, 2);
	cr_expect_eq(s.dropped, 1);
	cr_expect_eq(get(t, 2, 0, 10).res, 10);
	cr_expect_eq(get(t, 3, 0, 10).res, -EAGAIN);
	tier_free(t);
}
