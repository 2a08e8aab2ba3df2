/* Unit tests of the io_uring reader: bytes, EOF, confinement, version check. */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/statfs.h>

#include "helpers.h"
#include "store/path.h"
#include "store/storage.h"

static char *dir;
static int rootfd = -1;
static struct storage *st;

static void setup(void)
{
	dir = th_tmpdir();
	th_mkdir(dir, "d");
	th_write(dir, "d/f", "0123456789abcdef");
	char p[4200];
	snprintf(p, sizeof(p), "%s/esc", dir);
	symlink("/etc/hostname", p);
	rootfd = open(dir, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(storage_new(rootfd, 8, &st), 0);
}

static void teardown(void)
{
	storage_free(st);
	close(rootfd);
	th_rmrf(dir);
	free(dir);
}

TestSuite(storage, .init = setup, .fini = teardown, .timeout = 30);

static void version_now(const char *rel, struct index_version *v)
{
	struct stat sb;

	cr_assert_eq(fstatat(rootfd, rel, &sb, 0), 0);
	index_version_of(&sb, v);
}

Test(storage, reads_bytes_and_stops_at_eof)
{
	char buf[64] = { 0 };
	struct index_version v;
	struct storage_stats s;

	version_now("d/f", &v);
	cr_expect_eq(storage_read_sync(st, "d/f", &v, 4, 6, buf), 6);
	cr_expect_arr_eq(buf, "456789", 6);
	cr_expect_eq(storage_read_sync(st, "d/f", &v, 10, 60, buf), 6);
	cr_expect_arr_eq(buf, "abcdef", 6);
	cr_expect_eq(storage_read_sync(st, "d/f", NULL, 16, 8, buf), 0);
	storage_get_stats(st, &s);
	cr_expect_eq(s.reads, 3);
	cr_expect_eq(s.bytes, 12);
}

Test(storage, never_leaves_source)
{
	char buf[64];

	cr_expect_eq(storage_read_sync(st, "esc", NULL, 0, 8, buf), -ELOOP);
	cr_expect_lt(storage_read_sync(st, "../etc/hostname", NULL, 0, 8, buf), 0);
	cr_expect_lt(storage_read_sync(st, "/etc/hostname", NULL, 0, 8, buf), 0);
	cr_expect_eq(storage_read_sync(st, "missing", NULL, 0, 8, buf), -ENOENT);
	cr_expect_eq(path_open_beneath(rootfd, "d/../../x", O_RDONLY), -EXDEV);
}

Test(storage, changed_file_is_stale)
{
	char buf[64];
	struct index_version v;
	struct storage_stats s;

	version_now("d/f", &v);
	th_write(dir, "d/f", "0123456789ABCDEF");  /* same size, new bytes */
	cr_expect_eq(storage_read_sync(st, "d/f", &v, 0, 16, buf), -ESTALE);
	storage_get_stats(st, &s);
	cr_expect_eq(s.stale, 1);
	char p[4200];
	snprintf(p, sizeof(p), "%s/d/f", dir);
	unlink(p);
	cr_expect_eq(storage_read_sync(st, "d/f", &v, 0, 16, buf), -ESTALE);
}

struct many {
	int done;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int bad;
};

static void many_done(void *arg, ssize_t res, const void *buf)
{
	struct many *m = arg;

	pthread_mutex_lock(&m->lock);
	if (res != 16 || memcmp(buf, "0123456789abcdef", 16))
		m->bad++;
	m->done++;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

Test(storage, more_reads_than_ring_slots)
{
	struct many m = { 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

	for (int i = 0; i < 200; i++)
		storage_read(st, "d/f", NULL, 0, 16, NULL, many_done, &m);
	pthread_mutex_lock(&m.lock);
	while (m.done < 200)
		pthread_cond_wait(&m.cond, &m.lock);
	pthread_mutex_unlock(&m.lock);
	cr_expect_eq(m.bad, 0);
}

Test(storage, uncached_data_goes_through_the_ring)
{
	static char big[1 << 20];
	char p[4200];
	struct index_version v;
	struct storage_stats s0, s1;
	int fd;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + 3);
	snprintf(p, sizeof(p), "%s/d/big", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	fsync(fd);
	close(fd);
	fd = open(p, O_RDONLY);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);

	char *buf = malloc(sizeof(big));
	version_now("d/big", &v);
	storage_get_stats(st, &s0);
	cr_expect_eq(storage_read_sync(st, "d/big", &v, 0, sizeof(big), buf), (ssize_t)sizeof(big));
	cr_expect_arr_eq(buf, big, sizeof(big));
	storage_get_stats(st, &s1);
	cr_expect_eq(s1.reads, s0.reads + 1);
	cr_expect_eq(s1.inline_reads, s0.inline_reads, "the evicted file was read inline");
	/* Now it is cached: the next read is served inline. */
	cr_expect_eq(storage_read_sync(st, "d/big", &v, 4096, 4096, buf), 4096);
	cr_expect_arr_eq(buf, big + 4096, 4096);
	storage_get_stats(st, &s0);
	cr_expect_eq(s0.inline_reads, s1.inline_reads + 1);
	free(buf);
}

/* Pages of file P resident in the page cache (mincore over a mapping). */
static size_t resident_pages(const char *p, size_t len)
{
	int fd = open(p, O_RDONLY);
	size_t n = (len + 4095) / 4096, in = 0;
	unsigned char *vec = malloc(n);
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	cr_assert(m != MAP_FAILED);
	cr_assert_eq(mincore(m, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	munmap(m, len);
	free(vec);
	close(fd);
	return in;
}

Test(storage, the_daemons_reads_leave_no_copy_in_sources_page_cache)
{
	static char big[1 << 20];
	char p[4200];
	struct index_version v;
	struct statfs sf;
	int fd;

	cr_assert_eq(statfs(dir, &sf), 0);
	if (sf.f_type == TMPFS_MAGIC)
		cr_skip_test("the test directory is on tmpfs, whose pages are the file itself");
	memset(big, 'x', sizeof(big));
	snprintf(p, sizeof(p), "%s/d/big", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	fsync(fd);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	cr_assert_eq(resident_pages(p, sizeof(big)), 0, "the kernel kept the written pages");

	char *buf = malloc(sizeof(big));
	version_now("d/big", &v);
	storage_set_drop_source_cache(st, 1);
	cr_expect_eq(storage_read_sync(st, "d/big", &v, 0, sizeof(big), buf), (ssize_t)sizeof(big));
	cr_expect_arr_eq(buf, big, sizeof(big));
	cr_expect_eq(resident_pages(p, sizeof(big)), 0, "a dropping read left pages behind");
	/* Without the drop, the read leaves the file cached (the control). */
	storage_set_drop_source_cache(st, 0);
	cr_expect_eq(storage_read_sync(st, "d/big", &v, 0, sizeof(big), buf), (ssize_t)sizeof(big));
	cr_expect_gt(resident_pages(p, sizeof(big)), 0);
	free(buf);
}

/* A read with no buffer of the caller's: the bytes are copied out in DONE,
 * the only time they are valid. */
struct copy_out {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
	ssize_t res;
	char *out;
};

static void copy_done(void *arg, ssize_t res, const void *buf)
{
	struct copy_out *c = arg;

	pthread_mutex_lock(&c->lock);
	if (res > 0)
		memcpy(c->out, buf, (size_t)res);
	c->res = res;
	c->done = 1;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static ssize_t read_unkept(const char *rel, const struct index_version *v, off_t off, size_t len, char *out)
{
	struct copy_out c = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, out };

	storage_read(st, rel, v, off, len, NULL, copy_done, &c);
	pthread_mutex_lock(&c.lock);
	while (!c.done)
		pthread_cond_wait(&c.cond, &c.lock);
	pthread_mutex_unlock(&c.lock);
	return c.res;
}

Test(storage, reads_kept_nowhere_of_uncached_files_go_direct)
{
	enum { SIZE = 300001 };     /* not a multiple of any block */
	static char data[SIZE];
	char p[4200], *out = malloc(SIZE + 8192);
	struct index_version v;
	struct storage_stats s0, s1;
	struct statfs sf;
	int fd;

	cr_assert_eq(statfs(dir, &sf), 0);
	if (sf.f_type == TMPFS_MAGIC)
		cr_skip_test("the test directory is on tmpfs: no device to read directly");
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 13 + 5);
	snprintf(p, sizeof(p), "%s/d/odd", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
	fsync(fd);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	version_now("d/odd", &v);
	storage_set_drop_source_cache(st, 1);

	/* Asked past the end, as the kernel's readahead asks: the bytes that
	 * exist, none of the rounding's, and no page left in SOURCE's cache. */
	storage_get_stats(st, &s0);
	memset(out, 0x55, SIZE + 8192);
	cr_expect_eq(read_unkept("d/odd", &v, 0, SIZE + 4096, out), SIZE);
	cr_expect_arr_eq(out, data, SIZE);
	cr_expect_eq((unsigned char)out[SIZE], 0x55, "bytes past the end were handed back");
	storage_get_stats(st, &s1);
	cr_expect_eq(s1.direct_reads, s0.direct_reads + 1, "an uncached read kept nowhere did not go direct");
	cr_expect_eq(s1.reads, s0.reads + 1);
	cr_expect_eq(s1.bytes, s0.bytes + SIZE);
	cr_expect_eq(resident_pages(p, SIZE), 0, "the direct read left pages behind");

	/* A middle piece, asked shorter than the file: exactly what was asked. */
	cr_expect_eq(read_unkept("d/odd", &v, 8192, 5000, out), 5000);
	cr_expect_arr_eq(out, data + 8192, 5000);
	storage_get_stats(st, &s0);
	cr_expect_eq(s0.direct_reads, s1.direct_reads + 1);

	/* Not aligned: the buffered path. */
	cr_expect_eq(read_unkept("d/odd", &v, 100, 1000, out), 1000);
	cr_expect_arr_eq(out, data + 100, 1000);
	storage_get_stats(st, &s1);
	cr_expect_eq(s1.direct_reads, s0.direct_reads, "an unaligned read went direct");

	/* Cached (someone else read it: a file no uncached read touched, whose
	 * pages stay): inline, from the page cache. */
	{
		char w[4200];
		struct index_version wv;
		snprintf(w, sizeof(w), "%s/d/warm", dir);
		fd = open(w, O_RDWR | O_CREAT | O_TRUNC, 0644);
		cr_assert_eq(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
		cr_assert_eq(pread(fd, out, SIZE, 0), SIZE);
		close(fd);
		cr_assert_eq(resident_pages(w, SIZE), (SIZE + 4095) / 4096);
		version_now("d/warm", &wv);
		storage_get_stats(st, &s0);
		cr_expect_eq(read_unkept("d/warm", &wv, 0, SIZE, out), SIZE);
		cr_expect_arr_eq(out, data, SIZE);
		storage_get_stats(st, &s1);
		cr_expect_eq(s1.direct_reads, s0.direct_reads, "a cached file was read direct");
		cr_expect_eq(s1.inline_reads, s0.inline_reads + 1);
	}

	/* Keeping SOURCE's cache (tools, --keep-source-cache): never direct. */
	fd = open(p, O_RDONLY);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	storage_set_drop_source_cache(st, 0);
	storage_get_stats(st, &s0);
	cr_expect_eq(read_unkept("d/odd", &v, 0, SIZE, out), SIZE);
	storage_get_stats(st, &s1);
	cr_expect_eq(s1.direct_reads, s0.direct_reads);
	free(out);
}

Test(storage, a_direct_read_of_a_changed_file_is_stale)
{
	enum { SIZE = 65536 };
	static char data[SIZE];
	char p[4200], *out = malloc(SIZE);
	struct index_version v;
	struct storage_stats s;
	int fd;

	memset(data, 'a', sizeof(data));
	snprintf(p, sizeof(p), "%s/d/chg", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
	fsync(fd);
	close(fd);
	version_now("d/chg", &v);
	/* Grown since the scan: the version differs, the read is refused. */
	fd = open(p, O_WRONLY | O_APPEND);
	cr_assert_eq(write(fd, "more", 4), 4);
	fsync(fd);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	storage_set_drop_source_cache(st, 1);
	cr_expect_eq(read_unkept("d/chg", &v, 0, SIZE, out), -ESTALE);
	storage_get_stats(st, &s);
	cr_expect_eq(s.stale, 1);
	free(out);
}
