/* test_path.c - reading mountinfo: which file system sits on a mount point
 * (the one on top), and where a path inside an epochfs mount comes from. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "store/path.h"

static char file[] = "/tmp/epochfs-mountinfo-XXXXXX";

static void write_mountinfo(void)
{
	int fd = mkstemp(file);
	FILE *f = fdopen(fd, "w");

	cr_assert(f);
	fputs("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	      "40 22 0:40 / /mnt/data rw,nosuid,nodev,relatime shared:2 - fuse.epochfs /srv/imagenet rw,user_id=0\n"
	      "41 22 0:41 / /mnt/two\\040words rw - fuse.epochfs /srv/a\\040b rw\n"
	      "42 22 0:42 / /mnt/stack rw - tmpfs tmpfs rw\n"
	      "43 42 0:43 / /mnt/stack rw - fuse.epochfs /srv/x rw\n"
	      "44 22 0:44 / /mnt/other rw - fuse.sshfs host:/d rw\n",
	      f);
	fclose(f);
}

Test(path, mount_type_is_the_one_on_top)
{
	char t[64];

	write_mountinfo();
	cr_expect_eq(path_mount_type(file, "/mnt/data", t, sizeof(t)), 1);
	cr_expect_str_eq(t, "fuse.epochfs");
	cr_expect_eq(path_mount_type(file, "/mnt/two words", t, sizeof(t)), 1);
	cr_expect_str_eq(t, "fuse.epochfs");
	cr_expect_eq(path_mount_type(file, "/mnt/stack", t, sizeof(t)), 1);
	cr_expect_str_eq(t, "fuse.epochfs");
	cr_expect_eq(path_mount_type(file, "/mnt/other", t, sizeof(t)), 1);
	cr_expect_str_eq(t, "fuse.sshfs");
	cr_expect_eq(path_mount_type(file, "/mnt/data/sub", t, sizeof(t)), 0, "inside a mount is not a mount point");
	cr_expect_eq(path_mount_type(file, "/mnt", t, sizeof(t)), 0);
	cr_expect_eq(path_mount_type("/nonexistent/mountinfo", "/", t, sizeof(t)), -ENOENT);
	unlink(file);
}

Test(path, mount_dev_is_the_one_on_top)
{
	char d[32];

	write_mountinfo();
	cr_expect_eq(path_mount_dev(file, "/mnt/data", d, sizeof(d)), 1);
	cr_expect_str_eq(d, "0:40");
	cr_expect_eq(path_mount_dev(file, "/mnt/two words", d, sizeof(d)), 1);
	cr_expect_str_eq(d, "0:41");
	cr_expect_eq(path_mount_dev(file, "/mnt/stack", d, sizeof(d)), 1);
	cr_expect_str_eq(d, "0:43", "the mount on top, not the tmpfs under it");
	cr_expect_eq(path_mount_dev(file, "/", d, sizeof(d)), 1);
	cr_expect_str_eq(d, "8:1");
	cr_expect_eq(path_mount_dev(file, "/mnt/data/sub", d, sizeof(d)), 0);
	cr_expect_eq(path_mount_dev(file, "/mnt/data", d, 3), 0, "no room for the answer");
	cr_expect_eq(path_mount_dev("/nonexistent/mountinfo", "/", d, sizeof(d)), -ENOENT);
	unlink(file);
}

Test(path, mount_dev_refuses_a_malformed_device)
{
	int fd = mkstemp(file);
	FILE *f = fdopen(fd, "w");
	char d[32];

	cr_assert(f);
	fputs("40 22 0:40x / /mnt/a rw - fuse.epochfs /s rw\n"
	      "41 22 ../x / /mnt/b rw - fuse.epochfs /s rw\n"
	      "42 22 0:42\n"
	      "43 22 -1:2 / /mnt/c rw - fuse.epochfs /s rw\n"
	      "44 22 1:+2 / /mnt/d rw - fuse.epochfs /s rw\n",
	      f);
	fclose(f);
	cr_expect_eq(path_mount_dev(file, "/mnt/a", d, sizeof(d)), 0);
	cr_expect_eq(path_mount_dev(file, "/mnt/b", d, sizeof(d)), 0);
	cr_expect_eq(path_mount_dev(file, "/mnt/c", d, sizeof(d)), 0);
	cr_expect_eq(path_mount_dev(file, "/mnt/d", d, sizeof(d)), 0);
	unlink(file);
}

Test(path, epochfs_origin_maps_through_the_mount)
{
	char out[256];

	write_mountinfo();
	cr_expect_eq(path_epochfs_origin(file, "/mnt/data/train/a.jpg", out, sizeof(out)), 1);
	cr_expect_str_eq(out, "/srv/imagenet/train/a.jpg");
	cr_expect_eq(path_epochfs_origin(file, "/mnt/data", out, sizeof(out)), 1);
	cr_expect_str_eq(out, "/srv/imagenet");
	cr_expect_eq(path_epochfs_origin(file, "/mnt/two words/f", out, sizeof(out)), 1);
	cr_expect_str_eq(out, "/srv/a b/f");
	cr_expect_eq(path_epochfs_origin(file, "/mnt/other/f", out, sizeof(out)), 0);
	cr_expect_eq(path_epochfs_origin(file, "/mnt/database", out, sizeof(out)), 0, "a prefix is not a parent");
	unlink(file);
}

struct mounts_seen {
	int n;
	char mnt[8][64], src[8][64];
};

static void one_mount(void *arg, const char *mnt, const char *src)
{
	struct mounts_seen *m = arg;

	cr_assert_lt(m->n, 8);
	snprintf(m->mnt[m->n], sizeof(m->mnt[0]), "%s", mnt);
	snprintf(m->src[m->n++], sizeof(m->src[0]), "%s", src);
}

Test(path, epochfs_mounts_are_listed_unescaped)
{
	struct mounts_seen m = { 0 };

	write_mountinfo();
	cr_expect_eq(path_epochfs_mounts(file, one_mount, &m), 3);
	cr_assert_eq(m.n, 3);
	cr_expect_str_eq(m.mnt[0], "/mnt/data");
	cr_expect_str_eq(m.src[0], "/srv/imagenet");
	cr_expect_str_eq(m.mnt[1], "/mnt/two words");
	cr_expect_str_eq(m.src[1], "/srv/a b");
	cr_expect_str_eq(m.mnt[2], "/mnt/stack");
	cr_expect_str_eq(m.src[2], "/srv/x");
	cr_expect_eq(path_epochfs_mounts("/nonexistent/mountinfo", one_mount, &m), -ENOENT);
	unlink(file);
}
