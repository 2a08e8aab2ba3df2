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

/* Drops file P's pages from the page cache and returns how many stay.
 * One fadvise is not always enough: a folio still on another CPU's LRU
 * batch, or finishing writeback, is skipped, so it is asked a few times. */
static size_t evict(const char *p, size_t len)
{
	size_t left = 0;

	for (int i = 0; i < 50; i++) {
		int fd = open(p, O_RDONLY);

		cr_assert(fd >= 0);
		fdatasync(fd);
		cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
		close(fd);
		if ((left = resident_pages(p, len)) == 0)
			break;
		usleep(10000);
	}
	return left;
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
	cr_assert_eq(evict(p, sizeof(big)), 0, "the kernel kept the written pages");

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
	close(fd);
	cr_assert_eq(evict(p, sizeof(big)), 0, "the kernel kept the written pages");

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
