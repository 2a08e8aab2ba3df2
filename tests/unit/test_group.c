/* test_group.c - a prep group over a real ImageFolder tree: k consumers get
 * the same bytes, labels follow ImageFolder, memory stays bounded (for
 * many groups on one pool too), a dead consumer does not stall the others,
 * bad images are substitutes counted once, a late reader gets a
 * bit-identical regeneration, and bookkeeping does not grow with epochs=. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <turbojpeg.h>

#include "group.h"
#include "helpers.h"
#include "util/clock.h"
#include "util/syncwait.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static char *dir;
static int base;
static int bad_calls;

static void put(const char *rel, const void *data, size_t len)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

static unsigned char *jpeg(int w, int h, int pf, int samp, int flags, int seed, unsigned long *len)
{
	int ps = tjPixelSize[pf];
	unsigned char *px = malloc((size_t)w * h * ps), *j = NULL;
	tjhandle tj = tjInitCompress();

	for (int i = 0; i < w * h * ps; i++)
		px[i] = (unsigned char)(i * (seed + 3) / 7 + seed * 31);
	cr_assert_eq(tjCompress2(tj, px, w, 0, h, pf, &j, len, samp, 85, flags), 0);
	tjDestroy(tj);
	free(px);
	return j;
}

/* ImageFolder tree: 3 classes x 20 good images, plus, in class c1, the hard
 * cases. Returns how many samples are bad on purpose. */
static int tree(void)
{
	unsigned long len;
	unsigned char *j;

	dir = th_tmpdir();
	th_mkdir(dir, "c0"), th_mkdir(dir, "c1"), th_mkdir(dir, "c2");
	for (int c = 0; c < 3; c++)
		for (int i = 0; i < 20; i++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "c%d/img%02d.jpg", c, i);
			j = jpeg(48 + i, 40 + c * 3, TJPF_RGB, TJSAMP_420, 0, c * 100 + i, &len);
			put(rel, j, len);
			tjFree(j);
		}
	j = jpeg(64, 48, TJPF_GRAY, TJSAMP_GRAY, 0, 5, &len);
	put("c1/gray.jpg", j, len), tjFree(j);
	j = jpeg(64, 48, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE, 6, &len);
	put("c1/progressive.jpg", j, len), tjFree(j);
	j = jpeg(64, 48, TJPF_CMYK, TJSAMP_444, 0, 7, &len);
	put("c1/cmyk.jpg", j, len), tjFree(j);
	j = jpeg(64, 48, TJPF_RGB, TJSAMP_420, 0, 8, &len);
	put("c1/truncated.jpg", j, len / 3);                        /* bad */
	for (unsigned long k = 2; k + 9 < len; k++)
		if (j[k] == 0xFF && j[k + 1] == 0xC0) {
			j[k + 5] = 0xEA, j[k + 6] = 0x60, j[k + 7] = 0xEA, j[k + 8] = 0x60;
			break;
		}
	put("c1/huge.jpg", j, len), tjFree(j);                     /* bad: 60000 x 60000 */
	put("c1/png.jpg", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);    /* bad */
	put("c1/empty.jpg", "", 0);                                 /* bad */
	base = open(dir, O_RDONLY | O_DIRECTORY);
	return 4;
}

static ssize_t read_file(void *ctx, const char *rel, void **buf, size_t *cap)
{
	int fd = openat(*(int *)ctx, rel, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return -errno;
	fstat(fd, &st);
	if ((size_t)st.st_size + 1 > *cap) {
		*cap = (size_t)st.st_size + 1;
		*buf = realloc(*buf, *cap);
	}
	n = pread(fd, *buf, (size_t)st.st_size, 0);
	close(fd);
	return n;
}

static void on_bad(void *ctx, const char *rel, int err)
{
	(void)ctx, (void)rel, (void)err;
	__atomic_add_fetch(&bad_calls, 1, __ATOMIC_RELAXED);
}

static struct group *mkgroup_opts(const char *spec, const struct group_opts *o)
{
	struct prep_spec sp;
	struct folder *f;
	struct group *g;
	char err[256];
	struct group_io io = { .ctx = &base, .read_file = read_file, .bad = on_bad };

	cr_assert_eq(spec_parse(spec, strlen(spec), &sp, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(folder_scan(base, "", &f, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(group_new(&sp, f, &io, o, &g, err, sizeof(err)), 0, "%s", err);
	return g;
}

static struct group *mkgroup_ahead(const char *spec, uint64_t mem, double timeout, uint32_t ahead)
{
	struct group_opts o = { .threads = 2, .mem = mem, .timeout_s = timeout, .wait_s = 20,
				.ahead = ahead };

	return mkgroup_opts(spec, &o);
}

static struct group *mkgroup(const char *spec, uint64_t mem, double timeout)
{
	return mkgroup_ahead(spec, mem, timeout, 0);
}

/* Reads batch (E, I) whole, in 4 KiB pieces; returns its bytes (malloc). */
static uint8_t *read_batch(struct group *g, uint32_t e, uint64_t i, size_t *len)
{
	struct group_reader *r;
	size_t n = group_batch_bytes(g, i), off = 0;
	uint8_t *buf = malloc(n);
	ssize_t got;

	cr_assert_eq(group_open(g, e, i, &r), 0);
	while ((got = group_read(r, (off_t)off, 4096, buf + off)) > 0)
		off += (size_t)got;
	cr_assert_eq(got, 0, "read error %zd", got);
	group_close(r);
	cr_assert_eq(off, n);
	*len = n;
	return buf;
}

/* Stats once the group is quiet: a batch's pixels are released just after
 * its last read's callback returns, which can be a moment after the reader
 * has moved on. */
static void settle(struct group *g, struct group_stats *s)
{
	for (int i = 0; i < 200; i++) {
		group_get_stats(g, s);
		if (!s->staged_bytes)
			return;
		usleep(10000);
	}
}

struct consumer {
	struct group *g;
	uint32_t epochs;
	uint64_t hash[2][16];
};

static void *consume(void *arg)
{
	struct consumer *c = arg;

	for (uint32_t e = 0; e < c->epochs; e++)
		for (uint64_t i = 0; i < group_batches(c->g); i++) {
			size_t n;
			uint8_t *b = read_batch(c->g, e, i, &n);
			c->hash[e][i] = XXH3_64bits(b, n);
			free(b);
		}
	return NULL;
}

static void done(void)
{
	close(base);
	th_rmrf(dir);
	free(dir);
}

TestSuite(group, .fini = done);

Test(group, k_consumers_share_every_batch)
{
	int nbad = tree();
	struct group *g = mkgroup("batch=8\nsize=32\njobs=3\nepochs=2\nseed=5\n", 4 * (128 + 32 + 8 * 32 * 32 * 3), 60);
	struct consumer c[3];
	pthread_t t[3];
	struct group_stats s;
	uint64_t nb = group_batches(g);

	cr_assert_eq(nb, 9);                        /* 67 samples / 8, last one short */
	for (int k = 0; k < 3; k++) {
		c[k] = (struct consumer){ .g = g, .epochs = 2 };
		pthread_create(&t[k], NULL, consume, &c[k]);
	}
	for (int k = 0; k < 3; k++)
		pthread_join(t[k], NULL);
	for (int k = 1; k < 3; k++)
		cr_expect(!memcmp(c[0].hash, c[k].hash, sizeof(c[0].hash)), "consumer %d saw other bytes", k);
	cr_expect(memcmp(c[0].hash[0], c[0].hash[1], 9 * 8), "epochs 0 and 1 are the same");
	settle(g, &s);
	cr_expect_eq(s.produced, 18);
	cr_expect_eq(s.regenerated, 0);
	cr_expect_eq(s.freed, 18);
	cr_expect_eq(s.images, 2 * 67);
	cr_expect_eq(s.bad_samples, 2 * (uint64_t)nbad, "bad %llu", (unsigned long long)s.bad_samples);
	cr_expect_eq(bad_calls, nbad, "each bad file reported once, got %d", bad_calls);
	cr_expect_eq(s.staged_bytes, 0);
	size_t one = group_batch_bytes(g, 0);
	cr_expect(s.staged_peak <= 4 * one + 3 * one, "peak %llu", (unsigned long long)s.staged_peak);
	cr_expect(s.cpu_ns > 0 && s.readers == 0 && s.dropped == 0);

	/* A late reader: batch (0, 2) was freed; it is made again, bit for bit. */
	size_t n;
	uint8_t *b = read_batch(g, 0, 2, &n);
	cr_expect_eq(XXH3_64bits(b, n), c[0].hash[0][2]);
	free(b);
	settle(g, &s);
	cr_expect_eq(s.regenerated, 1);
	cr_expect_eq(s.staged_bytes, 0, "the regenerated batch was not freed");
	struct group_reader *r;
	cr_expect_eq(group_open(g, 2, 0, &r), -ENOENT);
	cr_expect_eq(group_open(g, 0, 9, &r), -ENOENT);
	group_free(g);
}

Test(group, labels_follow_imagefolder_and_bytes_follow_the_spec)
{
	tree();
	struct group *g = mkgroup("batch=8\nsize=32\nseed=5\nepochs=2\n", 1 << 20, 60);
	struct group *h = mkgroup("batch=8\nsize=32\nseed=5\nepochs=2\n", 1 << 20, 60);
	struct group *o = mkgroup("batch=8\nsize=32\nseed=6\nepochs=2\n", 1 << 20, 60);
	struct folder *f;
	char err[256];
	uint32_t order[67];
	size_t n1, n2, n3;

	cr_assert_eq(folder_scan(base, "", &f, err, sizeof(err)), 0);
	batch_order(5, 1, 67, order);
	uint8_t *a = read_batch(g, 1, 3, &n1), *b = read_batch(h, 1, 3, &n2), *c = read_batch(o, 1, 3, &n3);
	cr_expect(n1 == n2 && !memcmp(a, b, n1), "same spec, different bytes");
	cr_expect(memcmp(a, c, n1), "different seeds, same bytes");
	struct batch_header hd;
	memcpy(&hd, a, sizeof(hd));
	cr_expect(!memcmp(hd.magic, "EPBATCH1", 8) && hd.n == 8 && hd.epoch == 1 && hd.index == 3 && hd.first == 24);
	const int32_t *lab = (const int32_t *)(a + hd.labels_offset);
	for (int i = 0; i < 8; i++)
		cr_expect_eq(lab[i], folder_label(f, order[24 + i]), "label %d", i);
	/* The last batch is short: 67 = 8 * 8 + 3. */
	free(a);
	a = read_batch(g, 0, 8, &n1);
	memcpy(&hd, a, sizeof(hd));
	cr_expect(hd.n == 3 && hd.total_bytes == n1);
	free(a), free(b), free(c);
	folder_free(f);
	group_free(g), group_free(h), group_free(o);
}

Test(group, a_dead_consumer_does_not_stall_the_others)
{
	tree();
	size_t one = 128 + 32 + 8 * 32 * 32 * 3;
	/* Three consumers expected, two come; room for two batches. The
	 * timeout must stay well above the longest pause of a live consumer
	 * (sanitizer builds on a loaded 2-core box pause for tenths of a
	 * second), or that consumer is dropped too, as designed. */
	struct group *g = mkgroup("batch=8\nsize=32\njobs=3\nepochs=2\n", 2 * one, 1.0);
	struct consumer c[2];
	pthread_t t[2];
	struct group_stats s;

	for (int k = 0; k < 2; k++) {
		c[k] = (struct consumer){ .g = g, .epochs = 2 };
		pthread_create(&t[k], NULL, consume, &c[k]);
	}
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	cr_expect(!memcmp(c[0].hash, c[1].hash, sizeof(c[0].hash)));
	group_get_stats(g, &s);
	cr_expect_eq(s.dropped, 1);
	cr_expect_eq(s.jobs, 2);
	group_free(g);
}

/* Regression: one reader jumping far ahead while memory held batches made in
 * order that nobody had read waited forever. */
Test(group, a_reader_ahead_of_the_workers_is_served)
{
	tree();
	size_t one = 128 + 64 + 8 * 32 * 32 * 3;
	struct group *g = mkgroup("batch=8\nsize=32\njobs=3\nepochs=2\n", 3 * one, 60);
	struct group_stats s;
	size_t n;

	do {                                    /* let the workers fill the memory */
		usleep(10000);
		group_get_stats(g, &s);
	} while (s.produced < 3);
	uint8_t *b = read_batch(g, 1, 7, &n);   /* far ahead: batch 16 of 18 */
	free(b);
	b = read_batch(g, 0, 0, &n);            /* and back to the start */
	free(b);
	group_free(g);
}

/* Bytes of a full batch of "batch=8 size=32". */
static size_t batch8_bytes(void)
{
	struct group *probe = mkgroup("batch=8\nsize=32\n", 1 << 20, 60);
	size_t one = group_batch_bytes(probe, 0);

	group_free(probe);
	return one;
}

/* G has two consumers, room for two batches and a half, and two batches
 * made ahead. Once batches 0 and 1 are made, consumer A reads 0 and jumps
 * to 3, so batch 1 gives way unread; then consumer B reads 0. */
static void evict_batch_1(struct group *g)
{
	struct group_stats s;
	size_t n;

	for (int i = 0; i < 300; i++) {         /* batches 0 and 1, unread */
		group_get_stats(g, &s);
		if (s.produced >= 2)
			break;
		usleep(10000);
	}
	cr_assert_eq(s.produced, 2);
	uint8_t *a0 = read_batch(g, 0, 0, &n);  /* consumer A reads 0 ... */
	free(read_batch(g, 0, 3, &n));          /* ... jumps to 3: batch 1 gives way */
	uint8_t *b0 = read_batch(g, 0, 0, &n);  /* consumer B reads 0: freed */
	cr_expect(!memcmp(a0, b0, n));
	free(a0), free(b0);
}

/* Regression: a batch whose first copy was evicted unread (a reader far
 * ahead needed its memory) must, once made again, wait for every consumer.
 * It was freed after the first, so the second made it a third time, and in
 * a long run a slow consumer waiting for that remake behind batches the
 * fast one had read was dropped as dead. */
Test(group, a_batch_evicted_unread_waits_for_every_consumer)
{
	tree();
	size_t one = batch8_bytes(), n;
	struct group *g = mkgroup_ahead("batch=8\nsize=32\njobs=2\nepochs=1\n", 2 * one + one / 2, 60, 2);
	struct group_stats s;

	evict_batch_1(g);
	uint8_t *a1 = read_batch(g, 0, 1, &n);  /* A: batch 1 made again */
	uint8_t *b1 = read_batch(g, 0, 1, &n);  /* B: the same copy */
	cr_expect(!memcmp(a1, b1, n));
	free(a1), free(b1);
	group_get_stats(g, &s);
	cr_expect_eq(s.regenerated, 1, "batch 1 made %llu more times", (unsigned long long)s.regenerated);
	group_free(g);
}

Test(group, drop_last_and_too_few_samples)
{
	struct prep_spec sp;
	struct folder *f;
	struct group *g;
	char err[256];
	struct group_io io = { .ctx = &base, .read_file = read_file };
	struct group_opts o = { .threads = 1, .mem = 1 << 20 };

	tree();
	g = mkgroup("batch=8\ndrop_last=1\n", 8 << 20, 60);
	cr_expect_eq(group_batches(g), 8);
	group_free(g);
	cr_assert_eq(spec_parse("batch=100\ndrop_last=1", 21, &sp, err, sizeof(err)), 0);
	cr_assert_eq(folder_scan(base, "", &f, err, sizeof(err)), 0);
	cr_expect_eq(group_new(&sp, f, &io, &o, &g, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "67 samples make no batch of 100"), "%s", err);
}

/* --prep-mem caps a batch too: a spec whose one batch exceeds it is refused
 * with the sizes named, before any worker starts. */
Test(group, a_batch_larger_than_the_memory_is_refused)
{
	struct prep_spec sp;
	struct folder *f;
	struct group *g = NULL;
	char err[256];
	struct group_io io = { .ctx = &base, .read_file = read_file };
	struct group_opts o = { .threads = 1, .mem = 1 << 20 };
	const char *text = "batch=64\nsize=224\ndtype=float32\n";

	tree();
	cr_assert_eq(spec_parse(text, strlen(text), &sp, err, sizeof(err)), 0);
	cr_assert_eq(folder_scan(base, "", &f, err, sizeof(err)), 0);
	cr_expect_eq(group_new(&sp, f, &io, &o, &g, err, sizeof(err)), -EFBIG);
	cr_expect(strstr(err, "--prep-mem") && strstr(err, "38.5 MB"), "%s", err);
	cr_expect_null(g);
}

/* Workers run AHEAD batches past the furthest read and no further, however
 * much memory there is; each read lets them go one further. */
Test(group, run_ahead_is_bounded)
{
	tree();
	struct group *g = mkgroup_ahead("batch=8\nsize=32\njobs=1\nepochs=2\n", 1 << 30, 60, 2);
	struct group_stats s;
	size_t n;

	for (int i = 0; i < 300; i++) {
		group_get_stats(g, &s);
		if (s.produced >= 2)
			break;
		usleep(10000);
	}
	usleep(200000);                         /* time to overshoot, if it would */
	group_get_stats(g, &s);
	cr_expect_eq(s.produced, 2, "made %llu before any read", (unsigned long long)s.produced);
	free(read_batch(g, 0, 0, &n));
	free(read_batch(g, 0, 3, &n));          /* made on demand; furthest read is now 4 */
	for (int i = 0; i < 300; i++) {
		group_get_stats(g, &s);
		if (s.produced >= 6)
			break;
		usleep(10000);
	}
	usleep(200000);
	group_get_stats(g, &s);
	cr_expect_eq(s.produced, 6, "made %llu with batch 3 read", (unsigned long long)s.produced);
	cr_expect_eq(s.regenerated, 0);
	group_free(g);
}

/* Many groups on one pool hold no more than its limit together, plus one
 * batch a group (the allowance), and every consumer of every group still
 * gets exact bytes. Each group alone would hold more than the limit: four
 * batches made ahead each, and batches read by one consumer wait for the
 * other. */
Test(group, groups_on_one_pool_hold_its_total_together)
{
	enum { NG = 6, NB = 9 };
	tree();
	size_t one = batch8_bytes();
	struct group_pool *pool;
	struct group_pool_stats ps;
	struct group *g[NG];
	struct consumer c[NG][2];
	pthread_t t[NG][2];
	char spec[128];

	cr_assert_eq(group_pool_new(3 * one, &pool), 0);
	for (int i = 0; i < NG; i++) {
		struct group_opts o = { .threads = 1, .pool = pool, .timeout_s = 60, .wait_s = 20 };
		snprintf(spec, sizeof(spec), "batch=8\nsize=32\njobs=2\nepochs=2\nseed=%d\n", i);
		g[i] = mkgroup_opts(spec, &o);
		cr_assert_eq(group_batches(g[i]), NB);
	}
	for (int i = 0; i < NG; i++)
		for (int k = 0; k < 2; k++) {
			c[i][k] = (struct consumer){ .g = g[i], .epochs = 2 };
			pthread_create(&t[i][k], NULL, consume, &c[i][k]);
		}
	for (int i = 0; i < NG; i++)
		for (int k = 0; k < 2; k++)
			pthread_join(t[i][k], NULL);
	group_pool_get_stats(pool, &ps);
	cr_expect_leq(ps.held_peak, 3 * one + NG * one, "held %llu bytes, limit %zu + %d batches of %zu",
		      (unsigned long long)ps.held_peak, 3 * one, NG, one);
	cr_expect_geq(ps.peak, 3 * one, "the pool never filled: this tests nothing");
	for (int i = 0; i < NG; i++) {
		struct group_stats s;
		snprintf(spec, sizeof(spec), "batch=8\nsize=32\nepochs=2\nseed=%d\n", i);
		struct group *ref = mkgroup(spec, 1 << 30, 60);
		for (uint32_t e = 0; e < 2; e++)
			for (uint64_t b = 0; b < NB; b++) {
				size_t n;
				uint8_t *want = read_batch(ref, e, b, &n);
				cr_expect_eq(c[i][0].hash[e][b], XXH3_64bits(want, n), "group %d (%u, %llu)", i, e,
					     (unsigned long long)b);
				cr_expect_eq(c[i][1].hash[e][b], XXH3_64bits(want, n), "group %d (%u, %llu)", i, e,
					     (unsigned long long)b);
				free(want);
			}
		group_free(ref);
		settle(g[i], &s);
		cr_expect_eq(s.produced, 2 * NB, "group %d", i);
		cr_expect_eq(s.dropped, 0, "group %d dropped a live consumer", i);
		cr_expect_eq(s.staged_bytes, 0, "group %d", i);
		cr_expect_eq(s.mem_limit, 3 * one);
	}
	for (int i = 0; i < NG; i++)
		group_free(g[i]);
	group_pool_get_stats(pool, &ps);
	cr_expect(ps.held == 0 && ps.staged == 0 && ps.groups == 0, "held %llu staged %llu groups %u",
		  (unsigned long long)ps.held, (unsigned long long)ps.staged, ps.groups);
	group_pool_free(pool);
}

/* Bytes malloc holds for the program, mapped blocks included. */
static size_t heap(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks + m.hblkhd;
}

/* Regression: a group's bookkeeping was sized by batches x epochs (two
 * bitmaps, a bit for every batch of every epoch, allocated up front), so
 * two 4-line specs with epochs=1000000 took 47 GB of address space. Sized
 * by a window of epochs, a group of a million epochs costs what one of four
 * does, and still serves every epoch with the same bytes. */
Test(group, bookkeeping_does_not_grow_with_epochs)
{
	/* batch=1: 67 batches an epoch, so a million epochs were two bitmaps of
	 * 8.4 MB each. */
	const char *few = "batch=1\nsize=8\njobs=2\nepochs=4\n", *many = "batch=1\nsize=8\njobs=2\nepochs=1000000\n";
	struct group_opts o = { .threads = 1, .mem = 1 << 20, .timeout_s = 60, .wait_s = 20, .ahead = 1 };
	size_t n, m;

	tree();
	size_t h0 = heap();
	struct group *a = mkgroup_opts(few, &o);
	size_t h1 = heap();
	struct group *b = mkgroup_opts(many, &o);
	size_t h2 = heap();
#ifndef __SANITIZE_ADDRESS__
	/* Each group's workers allocate as they start: compare with the small
	 * group's own cost, and leave room for it. */
	size_t cost_few = h1 > h0 ? h1 - h0 : 0, cost_many = h2 > h1 ? h2 - h1 : 0;
	cr_expect_lt(cost_many, cost_few + (1u << 20), "a million epochs cost %zu bytes, four %zu", cost_many,
		     cost_few);
#else
	(void)h0, (void)h1, (void)h2;   /* malloc's own figures are not kept under AddressSanitizer */
#endif
	for (uint32_t e = 0; e < 4; e++) {
		uint8_t *x = read_batch(a, e, 5, &n), *y = read_batch(b, e, 5, &m);
		cr_expect(n == m && !memcmp(x, y, n), "epoch %u differs", e);
		free(x), free(y);
	}
	uint8_t *last = read_batch(b, 999999, 66, &n);
	struct batch_header h;
	memcpy(&h, last, sizeof(h));
	cr_expect(h.epoch == 999999 && h.index == 66, "epoch %u index %llu", h.epoch, (unsigned long long)h.index);
	free(last);
	group_free(a), group_free(b);
}

/* A consumer further behind than the window (here a job that comes after
 * the others read six epochs; the window is three) reads batches made again
 * for it alone: the same bytes, counted as regenerated, freed after its one
 * read. So is a batch whose first copy was evicted unread, which within the
 * window waits for every consumer (a_batch_evicted_unread_waits_for_every_
 * consumer): behind it the group no longer knows, and a second copy costs
 * CPU rather than a batch held for a consumer who may never come. */
Test(group, a_consumer_behind_the_window_reads_copies_of_its_own)
{
	tree();
	size_t one = batch8_bytes(), n;
	/* Room for two batches and a half: the window is 3 epochs (group.c,
	 * window_size()). */
	struct group *g = mkgroup_ahead("batch=8\nsize=32\njobs=2\nepochs=6\n", 2 * one + one / 2, 60, 2);
	struct group *ref = mkgroup("batch=8\nsize=32\nepochs=6\n", 1 << 30, 60);
	struct group_stats s;

	evict_batch_1(g);
	for (uint64_t i = 2; i < 9; i++) {      /* both read the rest of epoch 0, but batch 1 */
		if (i != 3)
			free(read_batch(g, 0, i, &n));
		free(read_batch(g, 0, i, &n));
	}
	for (uint32_t e = 1; e < 6; e++)
		for (uint64_t i = 0; i < 9; i++) {
			free(read_batch(g, e, i, &n));
			free(read_batch(g, e, i, &n));
		}
	settle(g, &s);
	cr_assert_eq(s.staged_bytes, 0);
	uint64_t regen = s.regenerated, freed = s.freed;

	/* A late job reads epoch 0: batch 1, evicted unread long ago. */
	uint8_t *late = read_batch(g, 0, 1, &n), *want = read_batch(ref, 0, 1, &n);
	cr_expect(!memcmp(late, want, n), "the late copy differs");
	free(late), free(want);
	settle(g, &s);
	cr_expect_eq(s.regenerated, regen + 1);
	cr_expect_eq(s.staged_bytes, 0, "the late copy is held for a second consumer");
	cr_expect_eq(s.freed, freed + 1);
	cr_expect_eq(s.dropped, 0);
	group_free(g), group_free(ref);
}

/* The whole of descriptor FD, from offset 0 (LEN bytes, malloc). */
static int open_handed(struct group *g, uint32_t e, uint64_t i, struct group_reader **r);

static uint8_t *pread_all(int fd, size_t len)
{
	uint8_t *b = malloc(len);
	size_t off = 0;
	ssize_t n;

	while (off < len && (n = pread(fd, b + off, len - off, (off_t)off)) > 0)
		off += (size_t)n;
	cr_assert_eq(off, len);
	return b;
}

Test(group, a_handed_memfd_reads_the_batch_and_is_never_reused_while_handed)
{
	tree();
	size_t one = 128 + 32 + 8 * 32 * 32 * 3;
	struct group_opts o = { .threads = 2, .mem = 2 * one, .timeout_s = 60, .wait_s = 20, .bufs = GROUP_BUF_MEMFD };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=2\nepochs=2\nseed=5\n", &o);
	struct group_reader *rb, *far;
	struct group_stats s;
	uint64_t nb = group_batches(g);
	size_t n;

	/* Not made yet: no descriptor, the batch is read through the daemon. */
	cr_assert_eq(group_open(g, 1, nb - 1, &far), 0);
	cr_expect_eq(group_pt_open(far), -EAGAIN);
	group_close(far);

	/* Two consumers of each batch: A copies it, then B is handed the
	 * memfd. Same bytes; the batch is freed once both are done. */
	for (uint64_t i = 0; i < nb; i++) {
		uint8_t *a = read_batch(g, 0, i, &n);
		cr_assert_eq(group_open(g, 0, i, &rb), 0);
		int fd = group_pt_open(rb);
		cr_assert(fd >= 0, "batch %llu: group_pt_open %d", (unsigned long long)i, fd);
		cr_expect_eq(group_pt_open(rb), -EBUSY, "one descriptor a reader");
		uint8_t *b = pread_all(fd, n);
		cr_expect(!memcmp(a, b, n), "batch %llu: the memfd holds other bytes", (unsigned long long)i);
		cr_expect_eq(lseek(fd, 0, SEEK_END), (off_t)n, "the memfd is the batch's size");
		close(fd);
		group_get_stats(g, &s);
		uint64_t freed = s.freed;
		group_pt_close(rb, 1);      /* the kernel's last open of it released */
		group_close(rb);
		/* Freed once the last pin goes: A's read may hold one a moment
		 * after its callback (the workers may free made-ahead batches
		 * too). */
		for (int t = 0; t < 200 && (group_get_stats(g, &s), s.freed < freed + 1); t++)
			usleep(10000);
		cr_expect_geq(s.freed, freed + 1, "batch %llu not freed after both consumers", (unsigned long long)i);
		free(a), free(b);
	}
	group_get_stats(g, &s);
	cr_expect_eq(s.handed, nb);
	cr_expect_eq(s.handed_bytes, s.served_bytes, "as many bytes handed as copied");
	/* A reader closed with a descriptor still handed gives the pin back,
	 * not counted as read: the batch waits for its other consumer. */
	uint8_t *a = read_batch(g, 1, 0, &n);
	cr_assert_eq(group_open(g, 1, 0, &rb), 0);
	int fd = group_pt_open(rb);
	cr_assert(fd >= 0);
	close(fd);
	group_get_stats(g, &s);
	uint64_t freed = s.freed;
	group_close(rb);
	usleep(100000);
	group_get_stats(g, &s);
	cr_expect_eq(s.freed, freed, "closed unread, yet counted as read");
	free(a);
	group_free(g);
}

Test(group, a_handed_batch_stays_pinned_when_a_consumer_is_dropped)
{
	tree();
	size_t one = 128 + 32 + 8 * 32 * 32 * 3, n;
	/* Three consumers, memory for about one batch and a short timeout: B
	 * holds batch 0 open, C never comes. A waits for room, the timeout
	 * drops consumers until batch 0 leaves the pool (every consumer left
	 * has it), and the batches A reads from then on reuse each other's
	 * buffers (spares), never batch 0's file, which B still reads. */
	struct group_opts o = { .threads = 2, .mem = 2 * one, .timeout_s = 0.3, .wait_s = 20,
				.bufs = GROUP_BUF_DIR, .files_dir = base };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=3\nepochs=1\nseed=5\n", &o);
	struct group_reader *rb;
	struct group_stats s;
	uint64_t nb = group_batches(g);

	uint8_t *a0 = read_batch(g, 0, 0, &n);
	cr_assert_eq(group_open(g, 0, 0, &rb), 0);
	int fd = group_pt_open(rb);
	cr_assert(fd >= 0, "group_pt_open: %d", fd);
	/* Batches in files of the directory given (here the test's own). */
	char link[64], target[4096] = "";
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	cr_expect(readlink(link, target, sizeof(target) - 1) > 0 && strncmp(target, dir, strlen(dir)) == 0,
		  "the batch is not a file in files_dir: %s", target);
	for (uint64_t i = 1; i < nb; i++) {
		size_t m;
		free(read_batch(g, 0, i, &m));
		uint8_t *b = pread_all(fd, n);
		cr_expect(!memcmp(a0, b, n), "after batch %llu, the handed file holds other bytes",
			  (unsigned long long)i);
		free(b);
	}
	settle(g, &s);              /* A's last batch freed */
	cr_expect_geq(s.dropped, 1, "dropped %llu", (unsigned long long)s.dropped);
	/* The pool's limit, and the handed batch, out of the pool since then,
	 * on top. */
	cr_expect(s.staged_peak <= 2 * n, "peak %llu", (unsigned long long)s.staged_peak);
	uint64_t freed = s.freed;
	close(fd);
	group_pt_close(rb, 1);
	group_close(rb);
	settle(g, &s);
	cr_expect_eq(s.freed, freed + 1, "the handed batch was kept after its close");
	free(a0);
	group_free(g);
}

/* A consumer that holds its batch files open (cmp b0 b1; a loader that
 * opens ahead): a batch every consumer has been handed leaves the pool's
 * count, so the next open is still answered at once, and the file held is
 * never made into another batch. What consumers hold that way is bounded
 * by the pool's limit: past it, an open reads through the daemon (-EAGAIN,
 * also at once), and once the files are closed, opens are handed again. */
Test(group, held_batch_files_do_not_hold_the_pool_and_are_bounded)
{
	tree();
	size_t one = 128 + 32 + 8 * 32 * 32 * 3;
	uint64_t limit = 2 * one + one / 2;
	struct group_opts o = { .threads = 2, .mem = limit, .timeout_s = 60, .wait_s = 20,
				.bufs = GROUP_BUF_MEMFD, .ahead = 1 };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=1\nepochs=1\nseed=5\n", &o);
	struct group_reader *r[5];
	int fd[5];
	uint64_t h0 = 0;
	struct group_stats s;

	for (int i = 0; i < 4; i++) {
		struct sync_wait w = SYNC_WAIT_INIT(NULL);
		cr_assert_eq(group_open(g, 0, (uint64_t)i, &r[i]), 0);
		double t0 = clock_now();
		group_pt_open_async(r[i], sync_wait_done, &w);
		fd[i] = (int)sync_wait(&w);
		cr_expect_lt(clock_now() - t0, 5.0, "batch %d waited %.1f s for room", i, clock_now() - t0);
		if (i < 2) {
			cr_assert(fd[i] >= 0, "open of batch %d: %d", i, fd[i]);
		} else {
			/* Two batches held out of the count: the limit. */
			cr_assert_eq(fd[i], -EAGAIN, "open of batch %d past the limit: %d", i, fd[i]);
			size_t n = group_batch_bytes(g, (uint64_t)i), off = 0;
			uint8_t *buf = malloc(n);
			ssize_t got;
			while ((got = group_read(r[i], (off_t)off, 4096, buf + off)) > 0)
				off += (size_t)got;
			cr_expect_eq(off, n, "batch %d read through the daemon: %zd", i, got);
			cr_expect(!memcmp(buf, "EPBATCH1", 8));
			free(buf);
		}
		size_t n = group_batch_bytes(g, 0);
		uint8_t *b = pread_all(fd[0], n);
		if (i == 0)
			h0 = XXH3_64bits(b, n);
		cr_expect_eq(XXH3_64bits(b, n), h0, "batch 0's file changed after batch %d was made", i);
		free(b);
	}
	group_get_stats(g, &s);
	cr_expect_leq(s.staged_bytes, limit, "batches in the pool: %llu", (unsigned long long)s.staged_bytes);
	cr_expect_eq(s.consumer_bytes, 2 * group_batch_bytes(g, 0), "held by the consumer: %llu",
		     (unsigned long long)s.consumer_bytes);
	cr_expect_leq(s.consumer_peak, limit, "held past the limit: %llu", (unsigned long long)s.consumer_peak);
	cr_expect_eq(s.hand_refused, 2);
	for (int i = 0; i < 4; i++) {
		if (fd[i] >= 0) {
			close(fd[i]);
			group_pt_close(r[i], 1);
		}
		group_close(r[i]);
	}
	/* A worker that answered an open may hold a pin a moment longer. */
	for (int t = 0; t < 200 && (group_get_stats(g, &s), s.consumer_bytes); t++)
		usleep(10000);
	cr_expect_eq(s.consumer_bytes, 0, "closed, yet %llu bytes held", (unsigned long long)s.consumer_bytes);
	fd[4] = open_handed(g, 0, 4, &r[4]);
	cr_expect(fd[4] >= 0, "the files closed, an open is handed again: %d", fd[4]);
	if (fd[4] >= 0) {
		close(fd[4]);
		group_pt_close(r[4], 1);
	}
	group_close(r[4]);
	group_free(g);
}

Test(group, an_open_waits_for_its_batch_to_be_made_and_is_handed_it)
{
	tree();
	struct group_opts o = { .threads = 2, .mem = 0, .timeout_s = 60, .wait_s = 20, .bufs = GROUP_BUF_MEMFD,
				.ahead = 1 };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=1\nepochs=1\nseed=5\n", &o);
	struct group_reader *r;
	struct group_stats s;
	uint64_t nb = group_batches(g);

	/* Far past the run-ahead of one: not made, and nothing asks for it
	 * until the open does. */
	cr_assert_eq(group_open(g, 0, nb - 1, &r), 0);
	usleep(200000);
	group_get_stats(g, &s);
	cr_expect_lt(s.produced, nb, "made before anyone asked");
	struct sync_wait w = SYNC_WAIT_INIT(NULL);
	group_pt_open_async(r, sync_wait_done, &w);
	int fd = (int)sync_wait(&w);
	cr_assert(fd >= 0, "group_pt_open_async: %d", fd);
	char magic[8];
	cr_expect_eq(pread(fd, magic, 8, 0), 8);
	cr_expect(!memcmp(magic, "EPBATCH1", 8), "the handed file is no batch");
	cr_expect_eq(lseek(fd, 0, SEEK_END), (off_t)group_batch_bytes(g, nb - 1));
	close(fd);
	group_get_stats(g, &s);
	uint64_t freed = s.freed;
	group_pt_close(r, 1);
	group_close(r);
	/* The worker that answered may hold a pin a moment longer. */
	for (int t = 0; t < 200 && (group_get_stats(g, &s), s.freed < freed + 1); t++)
		usleep(10000);
	cr_expect_eq(s.handed, 1);
	cr_expect_eq(s.freed, freed + 1, "its one consumer closed it, yet it is held");
	group_free(g);

	/* A group whose batches are not in files answers at once. */
	struct group_opts plain = { .threads = 1, .timeout_s = 60, .wait_s = 20 };
	g = mkgroup_opts("batch=8\nsize=32\njobs=1\nepochs=1\nseed=5\n", &plain);
	cr_assert_eq(group_open(g, 0, 0, &r), 0);
	struct sync_wait w2 = SYNC_WAIT_INIT(NULL);
	group_pt_open_async(r, sync_wait_done, &w2);
	cr_expect_eq(sync_wait(&w2), -EAGAIN);
	group_close(r);
	group_free(g);
}

/* One consumer's open of batch (E, I) by passthrough, waited for: *R and
 * the descriptor (or -errno). */
static int open_handed(struct group *g, uint32_t e, uint64_t i, struct group_reader **r)
{
	struct sync_wait w = SYNC_WAIT_INIT(NULL);

	cr_assert_eq(group_open(g, e, i, r), 0);
	group_pt_open_async(*r, sync_wait_done, &w);
	return (int)sync_wait(&w);
}

/* A passthrough mmap maps the batch's file itself and outlives the
 * release: a file once handed out becomes a spare only when no one else
 * holds it, so a mapping kept after close() (numpy.memmap) never changes.
 * Memfds (no leases) are never reused; files in a directory are, once
 * nobody maps them. */
static void mapping_kept(int bufs)
{
	size_t one = 128 + 32 + 8 * 32 * 32 * 3;
	struct group_opts o = { .threads = 2, .mem = 3 * one, .timeout_s = 60, .wait_s = 20,
				.bufs = bufs, .files_dir = base, .ahead = 1 };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=2\nepochs=2\nseed=5\n", &o);
	struct group_reader *r;
	size_t n = group_batch_bytes(g, 0), m;

	int fd = open_handed(g, 0, 0, &r);
	cr_assert(fd >= 0);
	/* The kernel's passthrough file is an open of its own, read-only:
	 * so is this one (a descriptor of the daemon's own would not do). */
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	int ro = open(link, O_RDONLY);
	cr_assert(ro >= 0);
	const uint8_t *map = mmap(NULL, n, PROT_READ, MAP_SHARED, ro, 0);
	cr_assert(map != MAP_FAILED);
	uint64_t h = XXH3_64bits(map, n);
	close(ro);
	close(fd);
	group_pt_close(r, 1);       /* the release: one consumer is done */
	group_close(r);
	/* The other consumer reads it through the daemon: the batch is freed
	 * now, and every later batch (two consumers each) is made while the
	 * mapping lives (full batches: the ones spares are kept for). */
	free(read_batch(g, 0, 0, &m));
	for (uint64_t i = 1; i < 2 * group_batches(g) - 1; i++)
		for (int k = 0; k < 2; k++)
			free(read_batch(g, (uint32_t)(i / group_batches(g)), i % group_batches(g), &m));
	cr_expect_eq(XXH3_64bits(map, n), h, "a mapped batch file was made into another batch");
	munmap((void *)map, n);
	group_free(g);
}

Test(group, a_mapping_kept_after_the_close_never_changes)
{
	tree();
	mapping_kept(GROUP_BUF_MEMFD);
	mapping_kept(GROUP_BUF_DIR);
}

/* Batch files a consumer opened, read and closed are reused (the lease
 * says no one holds them): one consumer through 8 batches, one at a time,
 * sees a few files, not 8; memfds, which take no lease, are never reused. */
static unsigned files_seen(int bufs)
{
	size_t one = 128 + 32 + 8 * 32 * 32 * 3;
	struct group_opts o = { .threads = 1, .mem = 3 * one, .timeout_s = 60, .wait_s = 20,
				.bufs = bufs, .files_dir = base, .ahead = 1 };
	struct group *g = mkgroup_opts("batch=8\nsize=32\njobs=1\nepochs=1\nseed=5\n", &o);
	ino_t seen[8];
	unsigned distinct = 0;

	for (uint64_t i = 0; i < 8; i++) {
		struct group_reader *r;
		struct stat st;
		int fd = open_handed(g, 0, i, &r);
		cr_assert(fd >= 0);
		cr_assert_eq(fstat(fd, &st), 0);
		close(fd);
		group_pt_close(r, 1);
		group_close(r);
		unsigned k = 0;
		while (k < distinct && seen[k] != st.st_ino)
			k++;
		if (k == distinct)
			seen[distinct++] = st.st_ino;
	}
	group_free(g);
	return distinct;
}

Test(group, closed_batch_files_are_reused_and_memfds_never)
{
	tree();
	unsigned dirs = files_seen(GROUP_BUF_DIR), memfds = files_seen(GROUP_BUF_MEMFD);
	cr_expect_leq(dirs, 4, "8 batches in %u files: closed files were not reused", dirs);
	cr_expect_eq(memfds, 8, "8 batches in %u memfds: a memfd was reused", memfds);
}
