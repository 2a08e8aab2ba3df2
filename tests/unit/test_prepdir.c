/* test_prepdir.c - .prep/ without FUSE: prepdir driven the way fs/ops.c
 * drives it, over a fake I/O that reads a small ImageFolder tree of JPEGs.
 * Declaring and reading a group, the canonical spec, the writer's rules
 * (whole lines, values, --prep-mem), refusals that hold no slot, the slot
 * limit, a running group's spec, unlink while a read is in flight, nodes
 * of an ended group that never reach its successor, and one memory total
 * for all groups.
 *
 * Node numbers are opaque here, except in one place that checks a test's
 * own precondition (a slot reused) against the layout of prepdir.c's
 * DESIGN note.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <turbojpeg.h>

#include "batch.h"
#include "core/ns/prepdir.h"
#include "folder.h"
#include "helpers.h"
#include "spec.h"
#include "util/syncwait.h"

#define SPEC "batch=4\nsize=16\nepochs=1\n"
#define MEM (1u << 20)              /* group_opts.mem: one batch of SPEC is ~3 KB */
#define NIMAGES 12                  /* 2 classes x 6: SPEC makes 3 batches an epoch */

/* The fake dataset I/O. read_file blocks while BLOCK is set, so a test can
 * hold a group's worker in the middle of a batch. */
struct fake {
	int base;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int block;                  /* protected by m */
	int waiting;                /* readers held by BLOCK; protected by m */
};

static char *dir;
static struct fake fk = { .base = -1, .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
static struct prepdir *pd;

static ssize_t fake_read_file(void *ctx, const char *rel, void **buf, size_t *cap)
{
	struct fake *f = ctx;
	struct stat st;
	ssize_t n;
	int fd;

	pthread_mutex_lock(&f->m);
	if (f->block) {
		f->waiting++;
		pthread_cond_broadcast(&f->cv);
		while (f->block)
			pthread_cond_wait(&f->cv, &f->m);
		f->waiting--;
	}
	pthread_mutex_unlock(&f->m);
	fd = openat(f->base, rel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		n = -errno;
		close(fd);
		return n;
	}
	if ((size_t)st.st_size + 1 > *cap) {
		void *nb = realloc(*buf, (size_t)st.st_size + 1);
		if (!nb) {
			close(fd);
			return -ENOMEM;
		}
		*buf = nb;
		*cap = (size_t)st.st_size + 1;
	}
	n = pread(fd, *buf, (size_t)st.st_size, 0);
	if (n < 0)
		n = -errno;
	close(fd);
	return n;
}

static int fake_scan(void *ctx, const char *rel, struct folder **out, char *err, size_t errlen)
{
	struct fake *f = ctx;

	return folder_scan(f->base, rel, out, err, errlen);
}

static void set_block(int on)
{
	pthread_mutex_lock(&fk.m);
	fk.block = on;
	pthread_cond_broadcast(&fk.cv);
	pthread_mutex_unlock(&fk.m);
}

/* Waits (at most ~10 s) until a worker is held in fake_read_file. */
static int wait_blocked(void)
{
	struct timespec ts;
	int ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&fk.m);
	while (!fk.waiting && pthread_cond_timedwait(&fk.cv, &fk.m, &ts) == 0)
		;
	ok = fk.waiting > 0;
	pthread_mutex_unlock(&fk.m);
	return ok;
}

static void put_jpeg(const char *rel, int w, int h, int seed)
{
	unsigned char *px = malloc((size_t)w * h * 3), *j = NULL;
	unsigned long len = 0;
	tjhandle tj = tjInitCompress();
	char p[4096];
	FILE *f;

	cr_assert(px && tj);
	for (int i = 0; i < w * h * 3; i++)
		px[i] = (unsigned char)(i * (seed + 3) / 7 + seed * 31);
	cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &j, &len, TJSAMP_420, 85, 0), 0);
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(j, 1, len, f), len);
	fclose(f);
	tjFree(j);
	tjDestroy(tj);
	free(px);
}

static void setup(void)
{
	struct prepdir_io io = { .ctx = &fk, .read_file = fake_read_file, .scan = fake_scan };
	/* One worker a group and one batch ahead: 64 groups stay cheap on a
	 * shared 2-core box. */
	struct group_opts o = { .threads = 1, .mem = MEM, .timeout_s = 60, .wait_s = 20, .ahead = 1 };

	dir = th_tmpdir();
	cr_assert(dir);
	th_mkdir(dir, "c0"), th_mkdir(dir, "c1");
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < NIMAGES / 2; i++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "c%d/img%02d.jpg", c, i);
			put_jpeg(rel, 24 + i, 20 + c * 4, c * 10 + i);
		}
	fk.base = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert(fk.base >= 0);
	cr_assert_eq(prepdir_new(&io, &o, &pd), 0);
}

static void teardown(void)
{
	set_block(0);               /* a worker held in read_file must finish */
	prepdir_free(pd);
	pd = NULL;
	if (fk.base >= 0)
		close(fk.base);
	fk.base = -1;
	th_rmrf(dir);
	free(dir);
}

TestSuite(prepdir, .init = setup, .fini = teardown, .timeout = 120);

/* ---- driving prepdir as fs/ops.c does ---- */

static int lk(uint64_t parent, const char *name, struct prepdir_attr *a)
{
	return prepdir_lookup(pd, parent, name, a);
}

/* create + one write at offset 0 + release: what `printf ... > NAME.spec`
 * makes of it. The write's result; *NODE the spec node (may be NULL). */
static ssize_t declare(const char *name, const char *text, uint64_t *node)
{
	struct prepdir_attr a;
	char fn[300];
	ssize_t n;

	snprintf(fn, sizeof(fn), "%s.spec", name);
	cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, fn, &a), 0, "create %s", fn);
	cr_assert(!a.is_dir && a.writable);
	n = prepdir_write(pd, a.node, text, strlen(text), 0);
	prepdir_release(pd, a.node);
	if (node)
		*node = a.node;
	return n;
}

/* Reads LEN bytes at OFF of NODE into BUF, waiting for the callback. */
static ssize_t rd(uint64_t node, void *buf, size_t len, off_t off)
{
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	prepdir_read(pd, node, len, off, sync_wait_done, &w);
	return sync_wait(&w);
}

/* The text of .prep/FILE (a spec or an error file), NUL-terminated in BUF;
 * the lookup's error, or the length. */
static ssize_t read_file_text(const char *file, char *buf, size_t cap)
{
	struct prepdir_attr a;
	int err = lk(PREPDIR_DIR_NODE, file, &a);
	ssize_t n;

	buf[0] = '\0';
	if (err)
		return err;
	n = rd(a.node, buf, cap - 1, 0);
	cr_assert(n >= 0, "read %s: %zd", file, n);
	buf[n] = '\0';
	cr_assert_eq((size_t)n, a.size, "%s: read %zd bytes, getattr says %zu", file, n, a.size);
	return n;
}

static void expect_error(const char *name, const char *needle)
{
	char fn[300], text[1024];

	snprintf(fn, sizeof(fn), "%s.error", name);
	cr_assert(read_file_text(fn, text, sizeof(text)) > 0, "no %s", fn);
	cr_expect(strstr(text, needle), "%s says '%s', not '%s'", fn, text, needle);
	cr_expect(text[strlen(text) - 1] == '\n', "%s does not end a line", fn);
}

/* The batch node of .prep/NAME/epoch-E/batch-I (a new reader each time). */
static uint64_t batch_node(const char *name, unsigned e, unsigned i, struct prepdir_attr *ba)
{
	struct prepdir_attr g, ep;
	char en[32], bn[32];

	snprintf(en, sizeof(en), "epoch-%04u", e);
	snprintf(bn, sizeof(bn), "batch-%06u", i);
	cr_assert_eq(lk(PREPDIR_DIR_NODE, name, &g), 0, "lookup %s", name);
	cr_assert(g.is_dir);
	cr_assert_eq(lk(g.node, en, &ep), 0, "lookup %s/%s", name, en);
	cr_assert(ep.is_dir);
	cr_assert_eq(lk(ep.node, bn, ba), 0, "lookup %s/%s/%s", name, en, bn);
	cr_assert(!ba->is_dir && !ba->writable && ba->size > BATCH_HEADER_BYTES);
	return ba->node;
}

/* Reads batch NODE whole and checks its header. */
static void read_batch(uint64_t node, size_t size, uint32_t n, uint32_t epoch, uint64_t index)
{
	uint8_t *buf = malloc(size);
	struct batch_header h;

	cr_assert(buf);
	ssize_t got = rd(node, buf, size, 0);
	cr_assert_eq(got, (ssize_t)size, "read %zd of %zu bytes", got, size);
	memcpy(&h, buf, sizeof(h));
	cr_expect(!memcmp(h.magic, BATCH_MAGIC, 8));
	cr_expect_eq(h.version, BATCH_VERSION);
	cr_expect_eq(h.n, n, "%u samples, expected %u", h.n, n);
	cr_expect_eq(h.h, 16);
	cr_expect_eq(h.w, 16);
	cr_expect_eq(h.epoch, epoch);
	cr_expect_eq(h.index, index);
	cr_expect_eq(h.total_bytes, size);
	const int32_t *lab = (const int32_t *)(buf + h.labels_offset);
	for (uint32_t i = 0; i < h.n; i++)
		cr_expect(lab[i] == 0 || lab[i] == 1, "label %d", lab[i]);
	free(buf);
}

/* The entries of directory DIR, as "name" or "name/" (directories). */
static int list(uint64_t d, char names[][310], int max)
{
	char name[300];
	int n = 0, is_dir;

	for (uint64_t pos = 0; prepdir_dirent(pd, d, pos, &is_dir, name, sizeof(name)); pos++) {
		cr_assert(n < max, "more than %d entries", max);
		snprintf(names[n++], 310, "%s%s", name, is_dir ? "/" : "");
	}
	return n;
}

static int listed(char names[][310], int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return 1;
	return 0;
}

static uint64_t readers_now(void)
{
	struct group_stats s;
	uint64_t groups;

	prepdir_stats(pd, &s, &groups);
	return s.readers;
}

/* A batch read's callback answers first; prepdir counts the read done just
 * after, on the thread that answered (the worker's, for a batch that was
 * being made). Until then the read is in flight: unlink says EBUSY, and a
 * forgotten node keeps its reader. These wait that moment out (5 s at
 * most), never a read that has not been answered. */
static int unlink_settled(const char *name)
{
	int ret = -EBUSY;

	for (int i = 0; i < 5000 && ret == -EBUSY; i++)
		if ((ret = prepdir_unlink(pd, PREPDIR_DIR_NODE, name)) == -EBUSY)
			usleep(1000);
	return ret;
}

static uint64_t readers_settled(void)
{
	uint64_t n = readers_now();

	for (int i = 0; i < 5000 && n; i++) {
		usleep(1000);
		n = readers_now();
	}
	return n;
}

/* ---- the tests ---- */

/* 1. A spec written in one write and closed starts the group; its batch
 * node's size is the file's, and the file is an EPBATCH1 batch of 4. */
Test(prepdir, declare_and_read_a_batch)
{
	struct prepdir_attr g, ep, ba, at;
	char names[16][310];

	cr_assert_eq(declare("g1", SPEC, NULL), (ssize_t)strlen(SPEC));
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "g1", &g), 0);
	cr_expect(g.is_dir);
	cr_assert_eq(prepdir_getattr(pd, g.node, &at), 0);
	cr_expect(at.is_dir);

	/* One epoch of 3 batches: 12 images, 4 a batch. */
	cr_expect_eq(list(g.node, names, 16), 1);
	cr_expect_str_eq(names[0], "epoch-0000/");
	cr_expect_eq(lk(g.node, "epoch-0001", &ep), -ENOENT);
	cr_expect_eq(lk(g.node, "epoch-0", &ep), -ENOENT);
	cr_assert_eq(lk(g.node, "epoch-0000", &ep), 0);
	cr_expect(ep.is_dir);
	cr_expect_eq(list(ep.node, names, 16), 3);
	cr_expect_str_eq(names[2], "batch-000002");
	cr_expect_eq(lk(ep.node, "batch-000003", &ba), -ENOENT);

	cr_assert_eq(lk(ep.node, "batch-000000", &ba), 0);
	cr_assert_eq(prepdir_getattr(pd, ba.node, &at), 0);
	cr_expect_eq(at.node, ba.node);
	cr_expect_eq(at.size, ba.size);
	cr_expect(!at.is_dir && !at.writable);
	cr_expect_eq(readers_now(), 1);
	read_batch(ba.node, ba.size, 4, 0, 0);

	/* Past the end: 0 bytes. A second lookup is another reader. */
	char c;
	cr_expect_eq(rd(ba.node, &c, 1, (off_t)ba.size), 0);
	struct prepdir_attr ba2;
	cr_assert_eq(lk(ep.node, "batch-000000", &ba2), 0);
	cr_expect_neq(ba2.node, ba.node);
	cr_expect_eq(readers_now(), 2);

	prepdir_forget(pd, ba.node, 1);
	prepdir_forget(pd, ba2.node, 1);
	cr_expect_eq(readers_settled(), 0, "forget left a reader open");
	cr_expect_eq(prepdir_getattr(pd, ba.node, &at), -ENOENT, "a forgotten batch node still answers");

	/* A node the kernel never forgets (unmount): prepdir_free closes its
	 * reader (nothing read on it, so nothing can be in flight). */
	cr_assert_eq(lk(ep.node, "batch-000001", &ba), 0);
	cr_expect_eq(readers_now(), 1);
}

/* 2. NAME.spec shows the text written until the group starts, then the
 * canonical spec (every key), with a size that matches. */
Test(prepdir, spec_reads_back_canonical)
{
	struct prepdir_attr a, at;
	struct prep_spec sp;
	char err[256], want[SPEC_MAX_BYTES + 1], text[SPEC_MAX_BYTES + 1];

	cr_assert_eq(spec_parse(SPEC, strlen(SPEC), &sp, err, sizeof(err)), 0, "%s", err);
	int wl = spec_render(&sp, want, sizeof(want));
	cr_assert(wl > 0);

	/* Written, not closed yet: the text as written. */
	cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "g2.spec", &a), 0);
	cr_assert_eq(prepdir_write(pd, a.node, SPEC, strlen(SPEC), 0), (ssize_t)strlen(SPEC));
	cr_assert_eq(prepdir_getattr(pd, a.node, &at), 0);
	cr_expect_eq(at.size, strlen(SPEC));
	cr_expect(at.writable && !at.is_dir);
	cr_assert_eq(rd(a.node, text, sizeof(text), 0), (ssize_t)strlen(SPEC));
	cr_expect(!memcmp(text, SPEC, strlen(SPEC)));
	prepdir_release(pd, a.node);

	cr_assert_eq(read_file_text("g2.spec", text, sizeof(text)), wl);
	cr_expect_str_eq(text, want);
	const char *keys[] = { "root=.\n", "batch=4\n", "size=16\n", "jobs=1\n", "seed=0\n", "epochs=1\n",
			       "scale=", "ratio=", "flip=", "drop_last=0\n", "layout=nchw\n", "dtype=uint8\n" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		cr_expect(strstr(text, keys[i]), "no '%s' in the canonical spec:\n%s", keys[i], text);

	/* The node from create() and a fresh lookup agree on the size. */
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "g2.spec", &at), 0);
	cr_expect_eq(at.size, (size_t)wl);
	cr_assert_eq(prepdir_getattr(pd, a.node, &at), 0);
	cr_expect_eq(at.size, (size_t)wl, "getattr %zu, canonical %d", at.size, wl);
	/* A piece at an offset. */
	cr_assert_eq(rd(a.node, text, 8, 7), 8);
	cr_expect(!memcmp(text, want + 7, 8));
	cr_expect_eq(rd(a.node, text, 8, wl), 0);
	/* No NAME.error for a spec that started. */
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g2.error", &at), -ENOENT);
}

/* 3. Every write must end a line: EINVAL at the write, the line named in
 * NAME.error, and the spec node is stale after. */
Test(prepdir, a_write_must_end_a_line)
{
	struct prepdir_attr a, at;

	cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "g3.spec", &a), 0);
	cr_expect_eq(prepdir_write(pd, a.node, "batch=4", 7, 0), -EINVAL);
	expect_error("g3", "g3.spec: line 1 does not end with a newline");
	cr_expect_eq(prepdir_write(pd, a.node, "\n", 1, 7), -ENOENT, "the refused spec's node still takes writes");
	cr_expect_eq(prepdir_getattr(pd, a.node, &at), -ENOENT);
	prepdir_release(pd, a.node);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g3.spec", &at), -ENOENT);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g3", &at), -ENOENT);

	/* The line counted is the unfinished one. */
	cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "g3b.spec", &a), 0);
	cr_expect_eq(prepdir_write(pd, a.node, "batch=4\n", 8, 0), 8);
	cr_expect_eq(prepdir_write(pd, a.node, "size=16", 7, 8), -EINVAL);
	prepdir_release(pd, a.node);
	expect_error("g3b", "line 2 does not end with a newline");
}

/* 4. A bad value fails its write; a batch over --prep-mem passes the write
 * and is refused when the group would start. */
Test(prepdir, bad_values_and_prep_mem)
{
	struct prepdir_attr a, at;
	uint64_t node;

	cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "g4.spec", &a), 0);
	cr_expect_eq(prepdir_write(pd, a.node, "size=7\n", 7, 0), -EINVAL);
	prepdir_release(pd, a.node);
	expect_error("g4", "line 1: size=7: expected a side in pixels from 8 to 2048");
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4.spec", &at), -ENOENT);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4", &at), -ENOENT);

	/* 64 x 224 x 224 x 3 = 9.6 MB a batch, over the 1 MiB given. */
	const char *big = "batch=64\nsize=224\n";
	cr_expect_eq(declare("g4m", big, &node), (ssize_t)strlen(big), "the write judges text, not memory");
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4m", &at), -ENOENT);
	expect_error("g4m", "--prep-mem");
	expect_error("g4m", "g4m.spec: one batch is");
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4m.spec", &at), -ENOENT);
	cr_expect_eq(prepdir_getattr(pd, node, &at), -ENOENT);

	/* The same name, a spec that fits: it starts, and its old error goes. */
	cr_expect_eq(declare("g4m", SPEC, NULL), (ssize_t)strlen(SPEC));
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4m", &at), 0);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g4m.error", &at), -ENOENT);
}

/* 5. Refusals hold nothing: 500 in a row leave the slots free and keep the
 * newest PREPDIR_MAX_ERRORS reasons. */
Test(prepdir, refusals_hold_no_slot)
{
	static char names[PREPDIR_MAX_GROUPS * 3 + PREPDIR_MAX_ERRORS][310];
	struct prepdir_attr at;
	char nm[32];

	for (int i = 0; i < 500; i++) {
		snprintf(nm, sizeof(nm), "bad%03d", i);
		cr_assert_eq(declare(nm, "size=7\n", NULL), -EINVAL, "%s", nm);
	}
	cr_assert_eq(declare("good", SPEC, NULL), (ssize_t)strlen(SPEC));
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "good", &at), 0);
	cr_expect(at.is_dir);

	int n = list(PREPDIR_DIR_NODE, names, (int)(sizeof(names) / sizeof(names[0]))), errors = 0;
	for (int i = 0; i < n; i++)
		if (strstr(names[i], ".error"))
			errors++;
	cr_expect_eq(errors, PREPDIR_MAX_ERRORS, "%d error files", errors);
	cr_expect_eq(n, PREPDIR_MAX_ERRORS + 2, "%d entries", n);
	cr_expect(listed(names, n, "good/") && listed(names, n, "good.spec"));
	cr_expect(!listed(names, n, "bad000.error"));
	cr_expect(listed(names, n, "bad499.error"));
	/* Exactly the newest 64 are kept. */
	cr_expect(listed(names, n, "bad436.error") && !listed(names, n, "bad435.error"));
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "bad000.error", &at), -ENOENT);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "bad435.error", &at), -ENOENT);
	expect_error("bad499", "bad499.spec: line 1: size=7");
	expect_error("bad436", "bad436.spec: line 1: size=7");

	/* rm NAME.error */
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "bad499.error", &at), 0);
	uint64_t enode = at.node;
	cr_expect_eq(prepdir_unlink(pd, PREPDIR_DIR_NODE, "bad499.error"), 0);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "bad499.error", &at), -ENOENT);
	cr_expect_eq(prepdir_getattr(pd, enode, &at), -ENOENT);
	char c;
	cr_expect_eq(rd(enode, &c, 1, 0), -ENOENT);
	cr_expect_eq(prepdir_unlink(pd, PREPDIR_DIR_NODE, "bad499.error"), -ENOENT);
	n = list(PREPDIR_DIR_NODE, names, (int)(sizeof(names) / sizeof(names[0])));
	cr_expect_eq(n, PREPDIR_MAX_ERRORS + 1);
	cr_expect(!listed(names, n, "bad499.error") && listed(names, n, "bad498.error"));

	/* The room it left is taken first; then the oldest entry makes room,
	 * and a node of its old name never shows the new name's text. */
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "bad436.error", &at), 0);
	uint64_t oldest = at.node;
	cr_assert_eq(declare("bad500", "size=7\n", NULL), -EINVAL);
	cr_expect_eq(prepdir_getattr(pd, oldest, &at), 0, "an entry went while one was free");
	cr_assert_eq(declare("bad501", "size=7\n", NULL), -EINVAL);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "bad436.error", &at), -ENOENT);
	cr_expect_eq(prepdir_getattr(pd, oldest, &at), -ENOENT);
	cr_expect_eq(rd(oldest, &c, 1, 0), -ENOENT);
	expect_error("bad501", "bad501.spec: line 1: size=7");
	expect_error("bad437", "bad437.spec: line 1: size=7");
}

/* 6. Specs created and closed empty (touch) give their slot back; only
 * running groups hold one, and PREPDIR_MAX_GROUPS of them fill .prep/. */
Test(prepdir, slots_come_back_and_run_out)
{
	struct prepdir_attr a, at;
	char nm[32];

	for (int i = 0; i < 100; i++) {
		snprintf(nm, sizeof(nm), "empty%03d.spec", i);
		cr_assert_eq(prepdir_create(pd, PREPDIR_DIR_NODE, nm, &a), 0, "%s", nm);
		prepdir_release(pd, a.node);
		cr_assert_eq(lk(PREPDIR_DIR_NODE, nm, &at), -ENOENT, "%s outlived its close", nm);
	}
	for (int i = 0; i < PREPDIR_MAX_GROUPS; i++) {
		snprintf(nm, sizeof(nm), "g%02d", i);
		cr_assert_eq(declare(nm, SPEC, NULL), (ssize_t)strlen(SPEC), "%s", nm);
		cr_assert_eq(lk(PREPDIR_DIR_NODE, nm, &at), 0, "%s did not start", nm);
	}
	struct group_stats s;
	uint64_t groups;
	prepdir_stats(pd, &s, &groups);
	cr_expect_eq(groups, PREPDIR_MAX_GROUPS);
	cr_expect_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "one-more.spec", &a), -ENOSPC);
	/* A running group's name still opens (to write its spec again). */
	cr_expect_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "g00.spec", &a), 0);
	prepdir_release(pd, a.node);
	/* Names: only NAME.spec is created, and only in .prep itself. */
	cr_expect_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "x.txt", &a), -EROFS);
	cr_expect_eq(prepdir_create(pd, PREPDIR_DIR_NODE, ".x.spec", &a), -EROFS);
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "g00", &at), 0);
	cr_expect_eq(prepdir_create(pd, at.node, "y.spec", &a), -EROFS);
	/* One ends: its slot is free again. */
	cr_expect_eq(prepdir_unlink(pd, PREPDIR_DIR_NODE, "g17.spec"), 0);
	cr_expect_eq(prepdir_create(pd, PREPDIR_DIR_NODE, "one-more.spec", &a), 0);
	prepdir_release(pd, a.node);
}

/* 7. A running group keeps its spec; unlink ends it, but not under a read
 * in flight. */
Test(prepdir, running_group_spec_and_unlink)
{
	struct prepdir_attr at, ba;
	char canon[SPEC_MAX_BYTES + 1], text[SPEC_MAX_BYTES + 1];
	const char *other = "batch=2\nsize=16\nepochs=1\n";

	cr_assert_eq(declare("g7", SPEC, NULL), (ssize_t)strlen(SPEC));
	cr_assert(read_file_text("g7.spec", canon, sizeof(canon)) > 0);

	/* The same spec again (another job joining): no complaint. */
	cr_expect_eq(declare("g7", SPEC, NULL), (ssize_t)strlen(SPEC));
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g7.error", &at), -ENOENT, "the same spec was refused");
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g7", &at), 0);

	/* A different one: reported, not applied. */
	cr_expect_eq(declare("g7", other, NULL), (ssize_t)strlen(other));
	expect_error("g7", "different spec");
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "g7", &at), 0, "the group stopped");
	cr_assert(read_file_text("g7.spec", text, sizeof(text)) > 0);
	cr_expect_str_eq(text, canon);
	/* Still 3 batches of 4, not 6 of 2. */
	batch_node("g7", 0, 2, &ba);
	read_batch(ba.node, ba.size, 4, 0, 2);
	prepdir_forget(pd, ba.node, 1);
	struct prepdir_attr g, ep;
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "g7", &g), 0);
	cr_assert_eq(lk(g.node, "epoch-0000", &ep), 0);
	cr_expect_eq(lk(ep.node, "batch-000003", &ba), -ENOENT);

	/* unlink ends it, and its complaint with it. */
	cr_expect_eq(unlink_settled("g7.spec"), 0);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g7", &at), -ENOENT);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g7.spec", &at), -ENOENT);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "g7.error", &at), -ENOENT, "an ended group's complaint stayed");
	cr_expect_eq(prepdir_unlink(pd, PREPDIR_DIR_NODE, "g7.spec"), -ENOENT);

	/* A group whose worker is held in the middle of batch 0, with a read of
	 * that batch queued: unlink must wait for it. (The fake blocks every
	 * group's reads: no other group may be running here, or ending it would
	 * wait for its held worker.) */
	set_block(1);
	cr_assert_eq(declare("busy", SPEC, NULL), (ssize_t)strlen(SPEC));
	uint64_t node = batch_node("busy", 0, 0, &ba);
	uint8_t *buf = malloc(ba.size);
	struct sync_wait w = SYNC_WAIT_INIT(buf);
	prepdir_read(pd, node, ba.size, 0, sync_wait_done, &w);
	cr_assert(wait_blocked(), "the worker never asked for an image");
	pthread_mutex_lock(&w.m);
	int answered = w.done;
	pthread_mutex_unlock(&w.m);
	cr_assert(!answered, "a batch still being made was served");
	cr_expect_eq(prepdir_unlink(pd, PREPDIR_DIR_NODE, "busy.spec"), -EBUSY);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "busy", &at), 0, "EBUSY, yet the group ended");
	set_block(0);
	cr_expect_eq(sync_wait(&w), (ssize_t)ba.size);
	struct batch_header h;
	memcpy(&h, buf, sizeof(h));
	cr_expect(!memcmp(h.magic, BATCH_MAGIC, 8) && h.n == 4);
	free(buf);
	cr_expect_eq(unlink_settled("busy.spec"), 0);
	cr_expect_eq(lk(PREPDIR_DIR_NODE, "busy", &at), -ENOENT);
	/* The kernel forgets the batch node after the group ended. */
	prepdir_forget(pd, node, 1);
	cr_expect_eq(readers_settled(), 0);
}

/* 8. Nodes of an ended group answer ENOENT, also once its slot holds
 * another group of the same shape. */
Test(prepdir, nodes_of_an_ended_group_are_stale)
{
	struct prepdir_attr g, ep, ba, sa, at;
	uint64_t spec_node;
	char c;

	cr_assert_eq(declare("old", SPEC, &spec_node), (ssize_t)strlen(SPEC));
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "old", &g), 0);
	cr_assert_eq(lk(g.node, "epoch-0000", &ep), 0);
	cr_assert_eq(lk(ep.node, "batch-000000", &ba), 0);
	read_batch(ba.node, ba.size, 4, 0, 0);
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "old.spec", &sa), 0);
	/* The batch node is still held (not forgotten) when the group ends. */
	cr_assert_eq(unlink_settled("old.spec"), 0);

	for (int round = 0; round < 2; round++) {
		const uint64_t nodes[] = { g.node, ep.node, ba.node, sa.node, spec_node };
		const char *what[] = { "dir", "epoch", "batch", "spec", "created spec" };
		for (int i = 0; i < 5; i++)
			cr_expect_eq(prepdir_getattr(pd, nodes[i], &at), -ENOENT, "round %d: getattr of the %s node",
				     round, what[i]);
		uint8_t *buf = malloc(ba.size);
		cr_expect_eq(rd(ba.node, buf, ba.size, 0), -ENOENT, "round %d: batch read", round);
		free(buf);
		char text[SPEC_MAX_BYTES + 1];
		cr_expect_eq(rd(sa.node, text, sizeof(text), 0), -ENOENT, "round %d: spec read", round);
		cr_expect_eq(rd(spec_node, &c, 1, 0), -ENOENT, "round %d: created spec read", round);
		cr_expect_eq(prepdir_write(pd, spec_node, SPEC, strlen(SPEC), 0), -ENOENT, "round %d: write",
			     round);
		cr_expect_eq(prepdir_truncate(pd, spec_node, 0), -ENOENT, "round %d: truncate", round);
		cr_expect_eq(lk(g.node, "epoch-0000", &at), -ENOENT, "round %d: lookup in the dir", round);
		cr_expect_eq(lk(ep.node, "batch-000001", &at), -ENOENT, "round %d: lookup in the epoch", round);
		int is_dir;
		char name[300];
		cr_expect_null(prepdir_dirent(pd, g.node, 0, &is_dir, name, sizeof(name)));
		cr_expect_null(prepdir_dirent(pd, ep.node, 0, &is_dir, name, sizeof(name)));
		if (round)
			break;

		/* The same slot, another name, the same shape. */
		struct prepdir_attr ng;
		cr_assert_eq(declare("new", SPEC, NULL), (ssize_t)strlen(SPEC));
		cr_assert_eq(lk(PREPDIR_DIR_NODE, "new", &ng), 0);
		cr_assert_eq((ng.node >> 52) & 63, (g.node >> 52) & 63, "precondition: the slot was not reused");
		cr_expect_neq(ng.node, g.node);
	}
	/* The new group is whole. */
	struct prepdir_attr nb;
	batch_node("new", 0, 0, &nb);
	read_batch(nb.node, nb.size, 4, 0, 0);
	prepdir_forget(pd, nb.node, 1);
	prepdir_forget(pd, ba.node, 1);
	cr_expect_eq(readers_settled(), 0);
}

/* 9. --prep-mem is one total for all groups: six groups whose batches made
 * ahead would each fit it hold no more than it together, and reading every
 * batch of every group still works (a group that holds none may always
 * make the batch its reader waits for, one beyond the total). */
Test(prepdir, groups_share_prep_mem)
{
	enum { NG = 6 };
	const char *big = "batch=6\nsize=128\nepochs=1\n";    /* ~295 KB a batch, 2 an epoch */
	struct group_stats s;
	uint64_t groups, made = 0;
	char nm[32];

	for (int i = 0; i < NG; i++) {
		snprintf(nm, sizeof(nm), "m%d", i);
		cr_assert_eq(declare(nm, big, NULL), (ssize_t)strlen(big), "%s", nm);
	}
	/* Each group makes one batch ahead (setup's ahead = 1) if the pool
	 * lets it; wait until the workers stop. */
	for (int i = 0; i < 500; i++) {
		usleep(20000);
		prepdir_stats(pd, &s, &groups);
		if (s.produced == made && made)
			break;
		made = s.produced;
	}
	prepdir_stats(pd, &s, &groups);
	size_t one = 128 + 64 + 6 * 128 * 128 * 3;
	cr_expect_eq(s.mem_limit, MEM);
	cr_expect_leq(s.staged_peak, MEM, "made ahead: %llu bytes held, --prep-mem %u",
		      (unsigned long long)s.staged_peak, MEM);
	cr_expect_geq(s.staged_bytes, 2 * one, "the groups made nothing ahead");
	for (int i = 0; i < NG; i++)
		for (unsigned b = 0; b < 2; b++) {
			struct prepdir_attr ba;
			snprintf(nm, sizeof(nm), "m%d", i);
			batch_node(nm, 0, b, &ba);
			uint8_t *buf = malloc(ba.size);
			cr_assert(buf);
			cr_expect_eq(rd(ba.node, buf, ba.size, 0), (ssize_t)ba.size, "%s batch %u", nm, b);
			free(buf);
			prepdir_forget(pd, ba.node, 1);
		}
	prepdir_stats(pd, &s, &groups);
	cr_expect_leq(s.staged_peak, MEM + NG * one, "%llu bytes held", (unsigned long long)s.staged_peak);
	cr_expect_eq(readers_settled(), 0);
}

/* Kernel passthrough of batches: with passthrough on (prepdir_set_memfd),
 * a batch already made hands its file out for the kernel to read, the
 * same bytes a read gets; the close counts its consumer done. Counters
 * never go back: a group that ends leaves its counts in the sums. */
Test(prepdir, a_made_batch_is_handed_out_and_counters_outlive_groups)
{
	struct prepdir_attr a, b, g;
	struct group_stats s;
	uint64_t groups;

	cr_expect_str_eq(prepdir_batch_files(pd), "memory: copied to each consumer by the daemon");
	prepdir_set_memfd(pd, 1);
	const char *where = prepdir_batch_files(pd);
	cr_expect(!strncmp(where, "tmpfs:", 6) || !strncmp(where, "memfd:", 6), "%s", where);
	const char *spec = "batch=4\nsize=16\nepochs=1\njobs=2\n";
	cr_assert_eq(declare("h", spec, NULL), (ssize_t)strlen(spec));
	cr_assert_eq(lk(PREPDIR_DIR_NODE, "h", &g), 0);
	struct sync_wait w0 = SYNC_WAIT_INIT(NULL), w1 = SYNC_WAIT_INIT(NULL);
	prepdir_pt_open_async(pd, g.node, sync_wait_done, &w0);
	cr_expect_eq(sync_wait(&w0), -EAGAIN, "a directory handed out");
	batch_node("h", 0, 0, &a);
	batch_node("h", 0, 0, &b);
	uint8_t *x = malloc(a.size), *y = malloc(a.size);
	cr_assert_eq(rd(a.node, x, a.size, 0), (ssize_t)a.size);     /* consumer 1: made, copied */
	prepdir_pt_open_async(pd, b.node, sync_wait_done, &w1);
	int fd = (int)sync_wait(&w1);
	cr_assert(fd >= 0, "prepdir_pt_open_async: %d", fd);
	cr_expect_eq(pread(fd, y, a.size, 0), (ssize_t)a.size);
	cr_expect(!memcmp(x, y, a.size), "the handed file holds other bytes");
	close(fd);
	prepdir_pt_close(pd, b.node, 1);                            /* consumer 2: done */
	prepdir_forget(pd, a.node, 1);
	prepdir_forget(pd, b.node, 1);
	cr_expect_eq(readers_settled(), 0);
	prepdir_stats(pd, &s, &groups);
	cr_expect_eq(s.handed, 1);
	cr_expect_eq(s.handed_bytes, a.size);
	uint64_t made = s.produced, imgs = s.images;
	cr_expect_geq(made, 1);
	cr_assert_eq(unlink_settled("h.spec"), 0);
	prepdir_stats(pd, &s, &groups);
	cr_expect_eq(groups, 0);
	cr_expect_geq(s.produced, made, "a counter went back when its group ended");
	cr_expect_geq(s.images, imgs);
	cr_expect_eq(s.handed, 1);
	free(x), free(y);
}

static void *unblock_later(void *arg)
{
	(void)arg;
	usleep(200000);
	set_block(0);
	return NULL;
}

/* The daemon stops while an open waits for its batch (the worker making it
 * is held in read_file): the open is answered -ESHUTDOWN while its node is
 * alive, and nothing is touched after it is freed (ASan says). */
Test(prepdir, an_open_waiting_at_shutdown_is_answered)
{
	struct prepdir_attr b;
	struct sync_wait w = SYNC_WAIT_INIT(NULL);
	pthread_t t;

	prepdir_set_memfd(pd, 1);
	set_block(1);
	const char *spec = "batch=4\nsize=16\nepochs=1\n";
	cr_assert_eq(declare("s", spec, NULL), (ssize_t)strlen(spec));
	batch_node("s", 0, 2, &b);
	prepdir_pt_open_async(pd, b.node, sync_wait_done, &w);
	cr_assert(wait_blocked(), "no worker reached read_file");
	pthread_create(&t, NULL, unblock_later, NULL);
	prepdir_free(pd);
	pd = NULL;
	pthread_join(t, NULL);
	cr_expect_eq(sync_wait(&w), -ESHUTDOWN);
}
