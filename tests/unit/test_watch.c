/* test_watch.c - the inotify watch (fs/core/watch.c) over an index
 * without a mount: every indexed directory is watched; a rewrite (even one
 * that puts the mtime back), a removal and a rename under the root are
 * seen within a second, as a change of the entry (a new generation, the
 * callback run), a removed file is gone; the thread stops cleanly. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/watch.h"
#include "helpers.h"
#include "store/index.h"

static char *dir;
static struct index *ix;
static struct watch *w;
static int changes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void on_change(void *arg, uint32_t id, uint32_t parent, const char *name, uint32_t old_gen)
{
	(void)arg, (void)id, (void)parent, (void)name, (void)old_gen;
	pthread_mutex_lock(&lock);
	changes++;
	pthread_mutex_unlock(&lock);
}

static int changes_now(void)
{
	pthread_mutex_lock(&lock);
	int n = changes;
	pthread_mutex_unlock(&lock);
	return n;
}

/* Waits up to 2 s for more than N changes. */
static int wait_change(int n)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 200 && changes_now() <= n; i++)
		nanosleep(&ts, NULL);
	return changes_now() > n;
}

static void setup(void)
{
	dir = th_tmpdir();
	th_mkdir(dir, "a");
	th_mkdir(dir, "a/b");
	th_write(dir, "a/b/f.txt", "one");
	th_write(dir, "top.txt", "top");
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(index_scan(fd, NULL, &ix), 0);
	close(fd);
	changes = 0;
	index_set_change_cb(ix, on_change, NULL);
	cr_assert_eq(watch_start(ix, dir, &w), 0);
}

static void teardown(void)
{
	watch_stop(w);
	index_free(ix);
	th_rmrf(dir);
	free(dir);
}

TestSuite(watch, .init = setup, .fini = teardown, .timeout = 30);

static uint32_t id_of(const char *a, const char *b, const char *c)
{
	uint32_t id = index_lookup(ix, INDEX_ROOT, a);

	if (b)
		id = index_lookup(ix, id, b);
	if (c)
		id = index_lookup(ix, id, c);
	cr_assert_neq(id, 0);
	return id;
}

Test(watch, every_directory_and_a_rewrite_even_with_the_old_mtime)
{
	struct index_attr before, after;
	struct stat st;
	char p[4200];

	cr_expect_eq(watch_count(w), 3, "root, a and a/b");
	uint32_t f = id_of("a", "b", "f.txt");
	cr_assert_eq(index_get(ix, f, &before), 0);
	snprintf(p, sizeof(p), "%s/a/b/f.txt", dir);
	cr_assert_eq(stat(p, &st), 0);
	th_write(dir, "a/b/f.txt", "two");          /* same size */
	struct timespec ts[2] = { st.st_atim, st.st_mtim };
	cr_assert_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	cr_assert(wait_change(0), "a rewrite in a subdirectory was not seen");
	cr_assert_eq(index_get(ix, f, &after), 0);
	cr_expect_neq(after.gen, before.gen, "the entry kept its generation");
}

Test(watch, a_removal_and_a_rename)
{
	char a[4200], b[4200];
	struct index_attr ia;

	uint32_t top = id_of("top.txt", NULL, NULL);
	snprintf(a, sizeof(a), "%s/top.txt", dir);
	cr_assert_eq(unlink(a), 0);
	cr_assert(wait_change(0), "a removal was not seen");
	cr_assert_eq(index_get(ix, top, &ia), 0);
	cr_expect(ia.gone, "a removed file is not gone");
	int n = changes_now();
	uint32_t f = id_of("a", "b", "f.txt");
	snprintf(a, sizeof(a), "%s/a/b/f.txt", dir);
	snprintf(b, sizeof(b), "%s/a/moved.txt", dir);
	cr_assert_eq(rename(a, b), 0);
	cr_assert(wait_change(n), "a rename was not seen");
	cr_assert_eq(index_get(ix, f, &ia), 0);
	cr_expect(ia.gone, "a file renamed away is not gone from its old name");
}
