/* Unit tests of the index: scan, layout, lookup, paths, refresh. */
#include <criterion/criterion.h>
#include <errno.h>

#include "helpers.h"
#include "store/index.h"

static char *dir;
static int rootfd = -1;
static struct index *ix;

static void setup(void)
{
	dir = th_tmpdir();
	th_mkdir(dir, "b");
	th_mkdir(dir, "a");
	th_mkdir(dir, "a/sub");
	th_write(dir, "a/x", "hello");
	th_write(dir, "a/sub/y", "world!");
	th_write(dir, "b/z", "");
	th_write(dir, "top", "0123456789");
	th_write(dir, ".epochfs", "shadowed");
	char p[4200];
	snprintf(p, sizeof(p), "%s/link", dir);
	symlink("/etc/passwd", p);
	snprintf(p, sizeof(p), "%s/fifo", dir);
	mkfifo(p, 0644);
	rootfd = open(dir, O_RDONLY | O_DIRECTORY);
}

static void teardown(void)
{
	index_free(ix);
	ix = NULL;
	close(rootfd);
	th_rmrf(dir);
	free(dir);
}

TestSuite(index, .init = setup, .fini = teardown, .timeout = 30);

static uint32_t walk(const char *path)
{
	char buf[256], *save, *tok;
	uint32_t id = INDEX_ROOT;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, "/", &save); tok && id; tok = strtok_r(NULL, "/", &save))
		id = index_lookup(ix, id, tok);
	return id;
}

Test(index, scan_counts_and_skips)
{
	struct index_scan_opts o = { .threads = 3 };
	struct index_totals t;

	cr_assert_eq(index_scan(rootfd, &o, &ix), 0);
	index_totals(ix, &t);
	cr_expect_eq(t.files, 4);          /* x y z top; .epochfs is reserved */
	cr_expect_eq(t.dirs, 4);           /* root a b sub */
	cr_expect_eq(t.symlinks, 1);
	cr_expect_eq(t.skipped, 1);        /* the fifo */
	cr_expect_eq(t.bytes, 5 + 6 + 0 + 10);
	cr_expect_eq(index_count(ix), 9);  /* root + 8 */
	cr_expect_eq(walk(".epochfs"), 0);
	cr_expect_eq(walk("fifo"), 0);
}

Test(index, lookup_paths_and_sorted_children)
{
	struct index_attr a;
	char path[256];

	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	uint32_t y = walk("a/sub/y");
	cr_assert_neq(y, 0);
	cr_assert_eq(index_get(ix, y, &a), 0);
	cr_expect_eq(a.v.size, 6);
	cr_expect(S_ISREG(a.mode));
	cr_expect_eq(index_path(ix, y, path, sizeof(path)), 7);
	cr_expect_str_eq(path, "a/sub/y");
	cr_expect_eq(index_path(ix, INDEX_ROOT, path, sizeof(path)), 0);
	cr_expect_str_eq(path, "");
	cr_expect_eq(index_path(ix, y, path, 4), -ENAMETOOLONG);
	cr_expect_eq(walk("a/nope"), 0);
	cr_expect_eq(walk("top/x"), 0);    /* lookup in a file */

	/* Root children come sorted: a b link top. */
	const char *want[] = { "a", "b", "link", "top" };
	cr_assert_eq(index_get(ix, INDEX_ROOT, &a), 0);
	cr_assert_eq(a.nchildren, 4);
	for (uint32_t i = 0; i < 4; i++)
		cr_expect_str_eq(index_name(ix, index_child(ix, INDEX_ROOT, i)), want[i]);
	cr_expect_eq(index_child(ix, INDEX_ROOT, 4), 0);
	cr_expect_eq(index_get(ix, 0, &a), -ENOENT);
	cr_expect_eq(index_get(ix, index_count(ix) + 1, &a), -ENOENT);
	cr_expect_lt(index_memory(ix), 2048);
}

static int changes;
static uint32_t changed_id, changed_gen;
static void on_change(void *arg, uint32_t id, uint32_t parent, const char *name, uint32_t old_gen)
{
	(void)arg, (void)parent, (void)name;
	changes++;
	changed_id = id;
	changed_gen = old_gen;
}

Test(index, refresh_detects_change_and_removal)
{
	struct index_attr a;

	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	index_set_change_cb(ix, on_change, NULL);
	uint32_t x = walk("a/x");
	cr_expect_eq(index_refresh(ix, x, 0), 0);      /* unchanged */
	cr_expect_eq(changes, 0);

	th_write(dir, "a/x", "hello, longer");
	cr_expect_eq(index_refresh(ix, x, 0), 1);
	cr_expect_eq(changes, 1);
	cr_expect_eq(changed_id, x);
	cr_expect_eq(changed_gen, 0);
	cr_assert_eq(index_get(ix, x, &a), 0);
	cr_expect_eq(a.gen, 1);
	cr_expect_eq(a.v.size, 13);

	cr_expect_eq(index_refresh(ix, x, 1), 1);      /* forced: a write was seen */
	cr_assert_eq(index_get(ix, x, &a), 0);
	cr_expect_eq(a.gen, 2);

	char p[4200];
	snprintf(p, sizeof(p), "%s/a/x", dir);
	unlink(p);
	cr_expect_eq(index_refresh(ix, x, 0), 1);
	cr_assert_eq(index_get(ix, x, &a), 0);
	cr_expect(a.gone);
	cr_expect_eq(walk("a/x"), 0);
	cr_expect_eq(index_refresh(ix, x, 0), 0);      /* still gone: no news */

	th_write(dir, "a/x", "back");
	cr_expect_eq(index_refresh(ix, x, 0), 1);
	cr_expect_eq(walk("a/x"), x);
	cr_expect_eq(index_refresh(ix, INDEX_ROOT, 0), -ENOENT);
}

Test(index, refresh_treats_type_change_as_gone)
{
	struct index_attr a;
	char p[4200], q[4200];

	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	uint32_t sub = walk("a/sub");
	snprintf(p, sizeof(p), "%s/a/sub", dir);
	snprintf(q, sizeof(q), "%s/a/sub.old", dir);
	rename(p, q);
	symlink("/etc", p);
	cr_expect_eq(index_refresh(ix, sub, 0), 1);
	cr_assert_eq(index_get(ix, sub, &a), 0);
	cr_expect(a.gone);
}

Test(index, scan_rejects_a_file_root)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/top", dir);
	int fd = open(p, O_RDONLY);
	cr_expect_eq(index_scan(fd, NULL, &ix), -ENOTDIR);
	cr_expect_null(ix);
	close(fd);
}
