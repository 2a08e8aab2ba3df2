/* persist_states.c - the cache states of a whole root, seen from outside
 * the daemons that made them: listing them (the mount each served, the
 * memory it holds, whether a daemon holds it now), freeing those no daemon
 * holds, and the daemon's own sweep of the orphans no restart will come
 * for; see persist.h for the contract. One state's own life (open, lock,
 * table, removal at a stop) is persist.c's and persist_table.c's.
 *
 * DESIGN
 * - One look at a state (state_look) serves all three: it opens the state
 *   directory and its lock and owner files without following links,
 *   checks they are the user's own and private, reads DIR/owner, adds up
 *   the blocks its files hold, and tries the lock without blocking.
 *   Listing lets the lock go at once; freeing and the sweep keep it while
 *   they judge and remove, so a daemon that starts on the state meanwhile
 *   finds it taken and is refused, rather than losing its files.
 * - Removal (state_remove) empties the directory but for the lock (links
 *   are removed, never followed), then removes the lock, then the
 *   directory. A daemon racing in after the lock went makes a new lock,
 *   and the last rmdir fails (ENOTEMPTY): that state is said not freed.
 * - Memory is counted in allocated blocks (st_blocks), not lengths: an
 *   arena is made at the cache's full size and fills as items come, so its
 *   length says nothing of what freeing it gives back. Only files with one
 *   link count: the blocks of a file linked from elsewhere stay in use.
 * - Root may list and free any user's states (they hold only that user's
 *   memory, and everything is done through directory fds of that user's
 *   own directories). A root named PREFIX-N is believed only when N owns
 *   it: /dev/shm is writable by all, and anyone may make PREFIX-N first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/path.h"
#include "store/persist_int.h"
#include "util/log.h"
#include "util/trust.h"

/* Marks S skipped, saying WHY; returns -EPERM. */
static int skip(struct persist_state_info *s, const char *why)
{
	s->skipped = 1;
	snprintf(s->why, sizeof(s->why), "%.*s", (int)sizeof(s->why) - 1, why);
	return -EPERM;
}

/* Reads DIR/owner (a private file of UID) into S: mount point, SOURCE,
 * kept. An owner file that fails its checks is left unread. */
static void read_owner(int dirfd, uid_t uid, struct persist_state_info *s)
{
	char why[300], line[4200];
	int fd = trust_openat_of(dirfd, "owner", uid, why, sizeof(why));
	FILE *f;

	if (fd < 0)
		return;
	if (!(f = fdopen(fd, "r"))) {
		close(fd);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "mountpoint=", 11))
			snprintf(s->mountpoint, sizeof(s->mountpoint), "%.4095s", line + 11);
		else if (!strncmp(line, "source=", 7))
			snprintf(s->source, sizeof(s->source), "%.4095s", line + 7);
		else if (!strcmp(line, "kept=1"))
			s->kept = 1;
	}
	fclose(f);
}

/* Adds up the blocks of the regular files of UID (one link each) in DIRFD. */
static void measure(int dirfd, uid_t uid, struct persist_state_info *s)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);                       /* a dup shares the offset */
	while ((e = readdir(d))) {
		struct stat st;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != uid || st.st_nlink != 1)
			continue;
		s->bytes += (uint64_t)st.st_blocks * 512;
		if (!strcmp(e->d_name, "arena")) {
			s->arena_bytes = (uint64_t)st.st_blocks * 512;
			s->arena_size = (uint64_t)st.st_size;
		}
	}
	closedir(d);
}

/* Looks at NAME in ROOTFD as a state of user UID (see DESIGN). 0 with
 * *DIRFD and *LOCKFD (-1: no lock file; else locked by us unless
 * S->alive), or -EPERM with S skipped. */
static int state_look(int rootfd, const char *name, uid_t uid, struct persist_state_info *s, int *dirfd,
		      int *lockfd)
{
	char why[300];
	struct stat st;
	int fd, lfd;

	*dirfd = *lockfd = -1;
	s->uid = uid;
	if (fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return skip(s, strerror(errno));
	if (S_ISLNK(st.st_mode))
		return skip(s, "a symlink: not followed");
	if (!S_ISDIR(st.st_mode))
		return skip(s, "not a directory: not a cache state");
	fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return skip(s, errno == ELOOP || errno == ENOTDIR ? "changed while it was looked at" : strerror(errno));
	if (fstat(fd, &st) < 0) {
		skip(s, strerror(errno));
		goto fail;
	}
	if (st.st_uid != uid) {
		snprintf(why, sizeof(why), "owned by uid %u, not by %u: not trusted", (unsigned)st.st_uid,
			 (unsigned)uid);
		skip(s, why);
		goto fail;
	}
	if (st.st_mode & 077) {
		snprintf(why, sizeof(why), "mode %04o, not 0700: another user may have written in it, not trusted",
			 (unsigned)(st.st_mode & 07777));
		skip(s, why);
		goto fail;
	}
	lfd = trust_openat_of(fd, "lock", uid, why, sizeof(why));
	if (lfd < 0 && lfd != -ENOENT) {
		char w2[340];
		snprintf(w2, sizeof(w2), "%s: not trusted", why);
		skip(s, w2);
		goto fail;
	}
	if (lfd >= 0) {
		char pid[32];
		ssize_t n = pread(lfd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		s->pid = atoi(pid);
		s->locked = 1;
		if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
			if (errno != EWOULDBLOCK) {
				snprintf(why, sizeof(why), "lock: %s", strerror(errno));
				skip(s, why);
				close(lfd);
				goto fail;
			}
			s->alive = 1;
		}
	}
	read_owner(fd, uid, s);
	measure(fd, uid, s);
	*dirfd = fd;
	*lockfd = lfd;
	return 0;
fail:
	close(fd);
	return -EPERM;
}

/* Lets go of what state_look() left open (the lock with its fd). */
static void state_release(int dirfd, int lockfd)
{
	if (lockfd >= 0)
		close(lockfd);
	if (dirfd >= 0)
		close(dirfd);
}

/* Removes the state NAME (DIRFD, its lock held by us) from ROOTFD: its
 * entries, then its lock, then itself. 0, or -errno with WHY. */
static int state_remove(int rootfd, const char *name, int dirfd, char *why, size_t wl)
{
	int err = trust_empty_dir(dirfd, "lock");

	if (err < 0) {
		snprintf(why, wl, "emptying it: %s", strerror(-err));
		return err;
	}
	if (unlinkat(dirfd, "lock", 0) < 0 && errno != ENOENT) {
		err = -errno;
		snprintf(why, wl, "lock: %s", strerror(-err));
		return err;
	}
	if (unlinkat(rootfd, name, AT_REMOVEDIR) < 0) {
		err = -errno;
		snprintf(why, wl, "%s", err == -ENOTEMPTY || err == -EEXIST
						? "a daemon took it while it was being freed"
						: strerror(-err));
	}
	return err;
}

/* Opens the root ROOT read-only (see persist_list's trust rule). The fd
 * and *UID, its owner, or -errno with WHY. */
static int open_root(const char *root, uid_t *uid, char *why, size_t wl)
{
	char parent[PATH_MAX], base[NAME_MAX + 1], w[300];
	size_t len = strlen(root);
	struct stat st;
	int pfd, fd;

	while (len > 1 && root[len - 1] == '/')
		len--;
	const char *slash = memrchr(root, '/', len);
	size_t bl = slash ? len - (size_t)(slash - root) - 1 : len;
	if (!len || len >= sizeof(parent) || bl == 0 || bl > NAME_MAX) {
		snprintf(why, wl, "%s: not a state root", root);
		return -EINVAL;
	}
	memcpy(base, slash ? slash + 1 : root, bl);
	base[bl] = 0;
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == root)
		snprintf(parent, sizeof(parent), "/");
	else
		snprintf(parent, sizeof(parent), "%.*s", (int)(slash - root), root);
	pfd = trust_dir(parent, 0, NULL, w, sizeof(w));
	if (pfd < 0) {
		snprintf(why, wl, "not trusted: %s", w);
		return pfd;
	}
	/* Judged before it is opened: a root that is not the caller's need
	 * not be readable by it to be refused for what it is. */
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		int e = -errno;
		close(pfd);
		snprintf(why, wl, "%.*s: %s", (int)len, root, strerror(-e));
		return e;
	}
	if (S_ISLNK(st.st_mode)) {
		close(pfd);
		snprintf(why, wl, "%.*s is a symlink: not followed", (int)len, root);
		return -EPERM;
	}
	/* Whose it must be: the caller's; for root, the user its name says. */
	const char *pre = strrchr(PERSIST_ROOT_PREFIX, '/') + 1;
	size_t pl = strlen(pre);
	uid_t want = geteuid();
	if (want == 0) {
		char *end;
		want = st.st_uid;
		if (!strncmp(base, pre, pl) && base[pl] == '-' && base[pl + 1] >= '0' && base[pl + 1] <= '9') {
			unsigned long n = strtoul(base + pl + 1, &end, 10);
			if (!*end)
				want = (uid_t)n;
		}
	}
	if (st.st_uid != want) {
		snprintf(why, wl, "%.*s is owned by uid %u, not by %u: not trusted", (int)len, root,
			 (unsigned)st.st_uid, (unsigned)want);
		close(pfd);
		return -EPERM;
	}
	if (st.st_mode & 022) {
		snprintf(why, wl, "%.*s is writable by group or others (mode %04o): not trusted", (int)len, root,
			 (unsigned)(st.st_mode & 07777));
		close(pfd);
		return -EPERM;
	}
	fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(pfd);
	if (fd < 0) {
		int e = -errno;
		snprintf(why, wl, "%.*s: %s", (int)len, root,
			 e == -ELOOP ? "changed into a symlink: not followed" : strerror(-e));
		return e == -ELOOP ? -EPERM : e;
	}
	struct stat now;
	if (fstat(fd, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
		snprintf(why, wl, "%.*s changed while it was looked at", (int)len, root);
		close(fd);
		return -EPERM;
	}
	*uid = st.st_uid;
	return fd;
}

/* Lists (FREE 0) or frees (FREE 1) the states of the root ROOT; a root
 * that cannot be used is reported when REPORT. The number of states
 * reported (listing) or freed. */
static int walk_root(const char *root, int report, int free_them, persist_state_fn fn, void *arg)
{
	struct persist_state_info *s = malloc(sizeof(*s));
	uid_t uid;
	int n = 0, rootfd;
	DIR *d;
	struct dirent *e;

	if (!s)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	s->root = root;
	s->name = "";
	rootfd = open_root(root, &uid, s->why, sizeof(s->why));
	if (rootfd < 0) {
		s->skipped = 1;
		if (report || rootfd != -ENOENT)
			fn(arg, s);
		free(s);
		return 0;
	}
	int dfd = dup(rootfd);
	if (!(d = dfd >= 0 ? fdopendir(dfd) : NULL)) {
		int err = -errno;
		if (dfd >= 0)
			close(dfd);
		close(rootfd);
		free(s);
		return err;
	}
	while ((e = readdir(d))) {
		int sfd, lfd;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		memset(s, 0, sizeof(*s));
		s->root = root;
		s->name = e->d_name;
		if (state_look(rootfd, e->d_name, uid, s, &sfd, &lfd) < 0) {
			fn(arg, s);
			continue;
		}
		if (!free_them) {
			n++;
		} else if (!s->alive) {
			if (state_remove(rootfd, e->d_name, sfd, s->why, sizeof(s->why)) == 0) {
				s->freed = 1;
				n++;
			}
		}
		state_release(sfd, lfd);
		fn(arg, s);
	}
	closedir(d);
	close(rootfd);
	free(s);
	return n;
}

/* Every default root: this user's, or for root every user's. */
static int walk(const char *root, int free_them, persist_state_fn fn, void *arg)
{
	char def[PATH_MAX], why[300];

	if (root)
		return walk_root(root, 1, free_them, fn, arg);
	persist_default_root(def, sizeof(def));
	if (geteuid() != 0)
		return walk_root(def, 0, free_them, fn, arg);
	/* Root: PREFIX-N for every N, in PREFIX's directory. */
	char dir[PATH_MAX];
	const char *pre = strrchr(PERSIST_ROOT_PREFIX, '/') + 1;
	size_t pl = strlen(pre);
	int n = 0, dfd;
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "%.*s", (int)(pre - 1 - PERSIST_ROOT_PREFIX), PERSIST_ROOT_PREFIX);
	dfd = trust_dir(dir, 0, NULL, why, sizeof(why));
	if (dfd < 0)
		return dfd == -ENOENT ? 0 : dfd;
	if (!(d = fdopendir(dfd))) {
		int err = -errno;
		close(dfd);
		return err;
	}
	while ((e = readdir(d))) {
		const char *p = e->d_name + pl + 1;
		if (strncmp(e->d_name, pre, pl) || e->d_name[pl] != '-' || !*p || strspn(p, "0123456789") != strlen(p))
			continue;
		snprintf(def, sizeof(def), "%.3800s/%s", dir, e->d_name);
		int k = walk_root(def, 1, free_them, fn, arg);
		if (k > 0)
			n += k;
	}
	closedir(d);
	return n;
}

int persist_list(const char *root, persist_state_fn fn, void *arg)
{
	return walk(root, 0, fn, arg);
}

int persist_free_states(const char *root, persist_state_fn fn, void *arg)
{
	char def[PATH_MAX];
	int n = walk(root, 1, fn, arg);

	persist_default_root(def, sizeof(def));
	persist_drop_root(root ? root : def);
	return n;
}

/* Whether the orphan S (its lock held by us) is to go: its mount point is
 * gone, or no longer an epochfs mount (unmounted cleanly or by hand: no
 * restart will come for it), unless it was kept on purpose (--persist
 * always). A dead epochfs mount (a crash, a kill -9) keeps its state for
 * the restart. */
static int orphan_goes(const struct persist_state_info *s)
{
	char type[64];
	struct stat sb;

	if (!s->mountpoint[0])
		return 0;                   /* not a state we can read: left alone */
	if (stat(s->mountpoint, &sb) < 0 && errno == ENOENT)
		return 1;
	if (s->kept)
		return 0;
	return path_mount_type("/proc/self/mountinfo", s->mountpoint, type, sizeof(type)) != 1 ||
	       strcmp(type, "fuse.epochfs") != 0;
}

int persist_sweep(const char *root, const char *except)
{
	char why[300];
	struct persist_state_info *s = malloc(sizeof(*s));
	int rootfd = trust_dir(root, TRUST_OWN, NULL, why, sizeof(why)), removed = 0;
	DIR *d = NULL;
	struct dirent *e;

	if (rootfd >= 0 && s)
		d = fdopendir(dup(rootfd));
	if (!d) {
		if (rootfd >= 0)
			close(rootfd);
		free(s);
		return 0;
	}
	while ((e = readdir(d))) {
		int fd, lock;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (except && !strcmp(except, e->d_name))
			continue;
		memset(s, 0, sizeof(*s));
		if (state_look(rootfd, e->d_name, geteuid(), s, &fd, &lock) < 0)
			continue;                   /* not one of ours */
		/* Held, or not a state (no lock), is left alone. */
		if (s->locked && !s->alive && orphan_goes(s) &&
		    state_remove(rootfd, e->d_name, fd, why, sizeof(why)) == 0) {
			removed++;
			log_info("freed the cache state %s/%s: its daemon is gone and %s is no longer an "
				 "epochfs mount", root, e->d_name, s->mountpoint);
		}
		state_release(fd, lock);
	}
	closedir(d);
	close(rootfd);
	free(s);
	if (removed)
		persist_drop_root(root);
	return removed;
}
