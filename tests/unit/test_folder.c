/* test_folder.c - ImageFolder's classes, labels and sample order, on a tree
 * built to catch the subtle cases: hidden class directories, upper-case
 * extensions, nested directories ordered by full path ('-' sorts before
 * '/'), non-images and symlinks left out, empty classes refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>

#include "folder.h"
#include "helpers.h"

static char *dir;

static void mk(void)
{
	dir = th_tmpdir();
	const char *dirs[] = { "r", "r/.hidden", "r/a", "r/a/deep", "r/a/deep/er", "r/b", "r/b/sub",
			       "r/b/sub/inner", "r/b/sub-x", "e", "e/full", "e/none", "flat" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		th_mkdir(dir, dirs[i]);
	const char *files[] = { "r/.hidden/h.jpg", "r/a/1.png", "r/a/0.jpeg", "r/a/deep/er/2.jpg",
				"r/b/x.JPG", "r/b/a.jpg", "r/b/notes.txt", "r/b/sub/z.jpg",
				"r/b/sub/inner/w.jpg", "r/b/sub-x/y.jpg", "r/file.jpg", "e/full/1.jpg",
				"e/none/readme", "flat/1.jpg" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		th_write(dir, files[i], "x");
	char p[4096];
	snprintf(p, sizeof(p), "%s/r/b/link.jpg", dir);
	cr_assert_eq(symlink("a.jpg", p), 0);
}

static void rm(void)
{
	th_rmrf(dir);
	free(dir);
}

TestSuite(folder, .init = mk, .fini = rm);

Test(folder, imagefolder_order)
{
	static const char *const want[] = {
		"r/.hidden/h.jpg", "r/a/0.jpeg", "r/a/1.png", "r/a/deep/er/2.jpg", "r/b/a.jpg",
		"r/b/x.JPG", "r/b/sub/z.jpg", "r/b/sub-x/y.jpg", "r/b/sub/inner/w.jpg",
	};
	static const int32_t labels[] = { 0, 1, 1, 1, 2, 2, 2, 2, 2 };
	struct folder *f;
	char err[256];
	int base = open(dir, O_RDONLY | O_DIRECTORY);

	cr_assert_eq(folder_scan(base, "r", &f, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(folder_classes(f), 3);
	cr_expect_str_eq(folder_class(f, 0), ".hidden");
	cr_expect_str_eq(folder_class(f, 2), "b");
	cr_expect_null(folder_class(f, 3));
	cr_assert_eq(folder_samples(f), 9);
	for (uint32_t i = 0; i < 9; i++) {
		cr_expect_str_eq(folder_path(f, i), want[i], "sample %u", i);
		cr_expect_eq(folder_label(f, i), labels[i], "sample %u", i);
	}
	cr_expect_null(folder_path(f, 9));
	folder_free(f);
	/* The base itself as root: paths have no "./". */
	int r = open(dir, O_RDONLY | O_DIRECTORY);
	int rfd = openat(r, "r", O_RDONLY | O_DIRECTORY);
	cr_assert_eq(folder_scan(rfd, "", &f, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(folder_path(f, 0), ".hidden/h.jpg");
	folder_free(f);
	close(rfd), close(r), close(base);
}

Test(folder, errors_name_the_problem)
{
	struct folder *f;
	char err[256];
	int base = open(dir, O_RDONLY | O_DIRECTORY);

	cr_expect_eq(folder_scan(base, "e", &f, err, sizeof(err)), -ENODATA);
	cr_expect(strstr(err, "no image file") && strstr(err, "none"), "%s", err);
	cr_expect_eq(folder_scan(base, "flat", &f, err, sizeof(err)), -ENODATA);
	cr_expect(strstr(err, "no class directories"), "%s", err);
	cr_expect_eq(folder_scan(base, "missing", &f, err, sizeof(err)), -ENOENT);
	cr_expect(strstr(err, "missing"), "%s", err);
	int r = folder_scan(base, "r/b/link.jpg", &f, err, sizeof(err));   /* never followed */
	cr_expect(r == -ELOOP || r == -ENOTDIR, "%d", r);
	close(base);
}
