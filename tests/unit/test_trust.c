/* test_trust.c - util/trust: which paths outside SOURCE the daemon may
 * believe. The cases are the ones a hostile local user tries: a symlink
 * planted in a shared directory, a directory others can write, a file
 * that is someone else's or a hard link to a file the daemon must not
 * touch. Another user is simulated by chown to "nobody" (the suite runs
 * as root; without root the ownership cases are skipped).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "util/trust.h"

#define NOBODY 65534

static char *tmp;
static char why[512];

static void setup(void)
{
	tmp = th_tmpdir();
	cr_assert(tmp);
	chmod(tmp, 0700);
}

static void teardown(void)
{
	th_rmrf(tmp);
	free(tmp);
}

TestSuite(trust, .init = setup, .fini = teardown, .timeout = 30);

static const char *at(const char *rel)
{
	static char p[4][4096];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", tmp, rel);
	return p[k];
}

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to make files of another user");
}

Test(trust, makes_a_private_directory_and_its_parents)
{
	struct stat st;
	int loose = 7;
	int fd = trust_dir(at("a/b/state"), TRUST_CREATE | TRUST_OWN, &loose, why, sizeof(why));

	cr_assert_geq(fd, 0, "%s", why);
	cr_expect_eq(loose, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	cr_expect(S_ISDIR(st.st_mode));
	cr_expect_eq(st.st_mode & 0777, 0700);
	cr_expect_eq(stat(at("a/b"), &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0700, "a parent made for it is private too");
	close(fd);
	/* Without TRUST_CREATE a missing directory is an error, not made. */
	cr_expect_eq(trust_dir(at("nope/x"), 0, NULL, why, sizeof(why)), -ENOENT);
	cr_expect(strstr(why, "nope"), "%s", why);
}

Test(trust, a_loose_own_directory_is_tightened_and_said_so)
{
	int loose = 0, fd;
	struct stat st;

	cr_assert_eq(mkdir(at("s"), 0700), 0);
	chmod(at("s"), 0777);
	fd = trust_dir(at("s"), TRUST_OWN, &loose, why, sizeof(why));
	cr_assert_geq(fd, 0, "%s", why);
	cr_expect_eq(loose, 1, "a directory others could write was not reported");
	cr_assert_eq(fstat(fd, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0700);
	close(fd);
	/* Readable by others only: tightened, but nothing can have been planted. */
	chmod(at("s"), 0755);
	fd = trust_dir(at("s"), TRUST_OWN, &loose, why, sizeof(why));
	cr_assert_geq(fd, 0, "%s", why);
	cr_expect_eq(loose, 0);
	close(fd);
}

Test(trust, a_directory_of_another_user_is_refused)
{
	need_root();
	cr_assert_eq(mkdir(at("theirs"), 0700), 0);
	cr_assert_eq(chown(at("theirs"), NOBODY, NOBODY), 0);
	cr_expect_eq(trust_dir(at("theirs"), TRUST_CREATE | TRUST_OWN, NULL, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "is owned by uid 65534, not by this daemon's user (0)") ||
		  strstr(why, "is owned by uid 65534, not by root"), "%s", why);
	/* And a state inside it: the parent decides. */
	cr_expect_eq(trust_dir(at("theirs/state"), TRUST_CREATE | TRUST_OWN, NULL, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "theirs is owned by uid 65534"), "%s", why);
	struct stat st;
	cr_expect_neq(stat(at("theirs/state"), &st), 0, "made a directory inside another user's");
}

Test(trust, a_world_writable_parent_must_be_sticky)
{
	cr_assert_eq(mkdir(at("pub"), 0777), 0);
	chmod(at("pub"), 0777);
	cr_expect_eq(trust_dir(at("pub/state"), TRUST_CREATE | TRUST_OWN, NULL, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "writable by group or others (mode 0777) and not sticky"), "%s", why);
	chmod(at("pub"), 01777);            /* like /tmp and /dev/shm */
	int fd = trust_dir(at("pub/state"), TRUST_CREATE | TRUST_OWN, NULL, why, sizeof(why));
	cr_expect_geq(fd, 0, "%s", why);
	close(fd);
	/* As a place to put a private directory (--cache-dir /tmp) it is fine. */
	fd = trust_dir(at("pub"), 0, NULL, why, sizeof(why));
	cr_expect_geq(fd, 0, "%s", why);
	close(fd);
}

Test(trust, symlinks_of_another_user_are_refused_ours_followed)
{
	need_root();
	cr_assert_eq(mkdir(at("pub"), 01777), 0);
	chmod(at("pub"), 01777);
	cr_assert_eq(mkdir(at("real"), 0700), 0);
	cr_assert_eq(symlink(at("real"), at("pub/link")), 0);
	cr_assert_eq(lchown(at("pub/link"), NOBODY, NOBODY), 0);
	cr_expect_eq(trust_dir(at("pub/link"), TRUST_OWN, NULL, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "is a symlink owned by uid 65534"), "%s", why);
	/* Root's own link (a Kubernetes secret volume's chain) is followed. */
	cr_assert_eq(lchown(at("pub/link"), 0, 0), 0);
	int fd = trust_dir(at("pub/link"), TRUST_OWN, NULL, why, sizeof(why));
	cr_expect_geq(fd, 0, "%s", why);
	struct stat a, b;
	cr_assert_eq(fstat(fd, &a), 0);
	cr_assert_eq(stat(at("real"), &b), 0);
	cr_expect(a.st_ino == b.st_ino, "the link's target was not what was opened");
	close(fd);
}

Test(trust, files_to_read_are_checked_for_owner_and_mode)
{
	th_write(tmp, "secret", "0123456789abcdef0123\n");
	chmod(at("secret"), 0600);
	int fd = trust_file(at("secret"), why, sizeof(why));
	cr_expect_geq(fd, 0, "%s", why);
	close(fd);
	chmod(at("secret"), 0620);
	cr_expect_eq(trust_file(at("secret"), why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "writable by group or others (mode 0620)"), "%s", why);
	chmod(at("secret"), 0600);
	cr_expect_eq(trust_file(at("."), why, sizeof(why)), -EISDIR);
	if (geteuid() == 0) {
		cr_assert_eq(chown(at("secret"), NOBODY, NOBODY), 0);
		cr_expect_eq(trust_file(at("secret"), why, sizeof(why)), -EPERM);
		cr_expect(strstr(why, "owned by uid 65534"), "%s", why);
	}
}

Test(trust, openat_refuses_links_strangers_and_loose_modes_and_never_truncates_them)
{
	int dfd = trust_dir(tmp, TRUST_OWN, NULL, why, sizeof(why));
	cr_assert_geq(dfd, 0, "%s", why);
	/* A symlink to a file that must not be written. */
	th_write(tmp, "victim", "precious");
	cr_assert_eq(symlink(at("victim"), at("arena")), 0);
	cr_expect_eq(trust_openat(dfd, "arena", O_RDWR | O_CREAT | O_TRUNC, 0600, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "arena is a symlink"), "%s", why);
	/* A hard link to it. */
	cr_assert_eq(link(at("victim"), at("table")), 0);
	chmod(at("victim"), 0600);
	cr_expect_eq(trust_openat(dfd, "table", O_WRONLY | O_CREAT | O_TRUNC, 0600, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "2 links"), "%s", why);
	struct stat st;
	cr_assert_eq(stat(at("victim"), &st), 0);
	cr_expect_eq(st.st_size, 8, "the victim was truncated through a planted link");
	/* Loose modes. */
	th_write(tmp, "owner", "x");
	chmod(at("owner"), 0644);
	cr_expect_eq(trust_openat(dfd, "owner", O_RDWR, 0600, why, sizeof(why)), -EPERM);
	cr_expect(strstr(why, "mode 0644, not 0600"), "%s", why);
	/* A new file is made 0600, an old good one truncated on request. */
	int fd = trust_openat(dfd, "lock", O_RDWR | O_CREAT, 0600, why, sizeof(why));
	cr_assert_geq(fd, 0, "%s", why);
	cr_assert_eq(write(fd, "123", 3), 3);
	close(fd);
	fd = trust_openat(dfd, "lock", O_RDWR | O_TRUNC, 0600, why, sizeof(why));
	cr_assert_geq(fd, 0, "%s", why);
	cr_assert_eq(fstat(fd, &st), 0);
	cr_expect_eq(st.st_size, 0);
	cr_expect_eq(st.st_mode & 0777, 0600);
	close(fd);
	if (geteuid() == 0) {
		cr_assert_eq(chown(at("lock"), NOBODY, NOBODY), 0);
		cr_expect_eq(trust_openat(dfd, "lock", O_RDWR, 0600, why, sizeof(why)), -EPERM);
		cr_expect(strstr(why, "owned by uid 65534"), "%s", why);
	}
	/* Emptying removes links and files, follows nothing. */
	cr_expect_eq(trust_empty_dir(dfd, NULL), 0);
	cr_expect_neq(access(at("arena"), F_OK), 0);
	cr_expect_neq(access(at("lock"), F_OK), 0);
	close(dfd);
}
