/* persist.c - the RAM cache's state directory on tmpfs (and the SSD
 * tier's on its disks): opening it (trust, lock, owner, arena, room), and
 * removing or keeping it at a stop; see persist.h for the contract. The
 * table inside it, its records and the adoption of what it names are
 * persist_table.c's; the states of a whole root (listing them, freeing
 * those no daemon holds, the sweep of orphans) are persist_states.c's
 * (persist_int.h holds what they share).
 *
 * DESIGN
 * - Files: DIR/lock (flock, the holder's pid inside), DIR/owner (text:
 *   mountpoint=, source=, kept=1 when kept on purpose), DIR/arena (the
 *   cache's arena, CAPACITY bytes), DIR/table (persist_table.c).
 * - Every file is opened through the directory's fd, without following
 *   links, and checked (util/trust.h); one that fails is removed and made
 *   anew, never believed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/path.h"
#include "store/persist_int.h"
#include "util/log.h"
#include "util/trust.h"

uint64_t persist_headroom(uint64_t fs_size)
{
	uint64_t half = fs_size / 2, gib = 1ull << 30;

	return fs_size / 4 > (half < gib ? half : gib) ? fs_size / 4 : (half < gib ? half : gib);
}

/* 1 while the lock we hold is still DIR/lock, in a directory still linked. */
static int lock_linked(const struct persist *p)
{
	struct stat d, l, n;

	return fstat(p->dirfd, &d) == 0 && d.st_nlink > 0 && fstat(p->lockfd, &l) == 0 &&
	       fstatat(p->dirfd, "lock", &n, AT_SYMLINK_NOFOLLOW) == 0 && n.st_ino == l.st_ino &&
	       n.st_dev == l.st_dev;
}

static int epochfs_mounted(const char *mnt);
static void read_owner(int dirfd, char *mnt, size_t mlen, int *kept);

/* 1 when the daemon holding P's lock is stopping: the mount point its
 * owner file names is a directory, no longer an epochfs mount. Says it
 * waits. (A holder still starting, its mount not made yet, is waited for
 * too: it either serves, and we give up, or fails and lets go.) */
static int stopping(const struct persist *p, const char *what)
{
	char mnt[4200];
	struct stat sb;
	int kept;

	read_owner(p->dirfd, mnt, sizeof(mnt), &kept);
	if (!*mnt || stat(mnt, &sb) < 0 || !S_ISDIR(sb.st_mode) || epochfs_mounted(mnt))
		return 0;
	log_info("%s %s: waiting up to %d s for the daemon before to finish stopping", what, p->dir,
		 PERSIST_STOP_WAIT_S);
	return 1;
}

/* Removes the state in DIRFD (its lock held through it), named NAME in
 * PARENTFD: everything but the lock, then the lock, then the directory.
 * Unlinking the lock last keeps a daemon starting meanwhile either waiting
 * on our lock or making a new state (persist_open sees an unlinked lock);
 * never sharing files with us. 0, -ENOTEMPTY (a new daemon has made its
 * state there since: left to it), or -errno. */
static int remove_state(int dirfd, int parentfd, const char *name)
{
	int e = trust_empty_dir(dirfd, "lock");

	if (e < 0)
		return e;
	if (unlinkat(dirfd, "lock", 0) < 0 && errno != ENOENT)
		return -errno;
	return unlinkat(parentfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* Opens DIR/NAME, owned by us: a file that fails the checks (a link, a
 * stranger's, loose modes) is removed and made anew. */
static int own_file(struct persist *p, const char *name, int flags, char *err, size_t errlen, const char *what)
{
	char why[300];
	int fd = trust_openat(p->dirfd, name, flags, 0600, why, sizeof(why));

	if (fd == -EPERM) {
		log_warn("%s %s: %s: removed and made anew", what, p->dir, why);
		if (unlinkat(p->dirfd, name, 0) < 0 && errno != ENOENT) {
			snprintf(err, errlen, "%s %s: %s, and it cannot be removed: %s", what, p->dir, why,
				 strerror(errno));
			return -EPERM;
		}
		fd = trust_openat(p->dirfd, name, flags | O_CREAT | O_EXCL, 0600, why, sizeof(why));
	}
	if (fd < 0)
		snprintf(err, errlen, "%s %s: %s", what, p->dir, why);
	return fd;
}

void persist_note_pid(struct persist *p)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());

	if (!p || p->lockfd < 0)
		return;
	if (ftruncate(p->lockfd, 0) < 0 || pwrite(p->lockfd, buf, (size_t)n, 0) < 0) {
		/* the pid is for people only */
	}
}

int persist_open(const struct persist_opts *o, struct persist **out, char *err, size_t errlen)
{
	struct persist *p = calloc(1, sizeof(*p));
	const char *what = o->what ? o->what : "--state-dir";
	struct statfs sf;
	struct stat sb;
	char why[400];
	int e, loose = 0, tries = 0;

	if (!p)
		return -ENOMEM;
	p->dirfd = p->lockfd = p->arenafd = p->tablefd = -1;
	p->capacity = o->capacity;
	p->chunk = o->chunk;
	p->compact = o->compact;
	p->keep_held = o->keep_held;
	p->check = o->check;
	p->check_arg = o->check_arg;
	pthread_mutex_init(&p->wlock, NULL);
	p->dir = strdup(o->dir);
	if (!p->dir) {
		e = -ENOMEM;
		goto fail;
	}
again:
	/* Ours, 0700, reached through directories nobody else can change;
	 * missing ones are made 0700. */
	p->dirfd = trust_dir(p->dir, TRUST_CREATE | TRUST_OWN, &loose, why, sizeof(why));
	if (p->dirfd == -ENOENT && ++tries < 8)
		goto again;             /* a daemon stopping removed the empty root we were making in */
	if (p->dirfd < 0) {
		e = p->dirfd;
		snprintf(err, errlen, "%s %s: not trusted: %s", what, p->dir, why);
		goto fail;
	}
	if (o->tmpfs && (fstatfs(p->dirfd, &sf) < 0 || (unsigned long)sf.f_type != TMPFS_MAGIC)) {
		e = -EINVAL;
		snprintf(err, errlen, "%s %s is not on tmpfs: the RAM cache's state must live in "
			 "memory (a directory under /dev/shm), or mount with --no-persist", what, p->dir);
		goto fail;
	}
	if (loose) {
		/* Others could write here: nothing in it can be believed. */
		log_warn("%s %s was writable by group or others: what it held is discarded, and it is "
			 "0700 now", what, p->dir);
		trust_empty_dir(p->dirfd, NULL);
	}
	p->lockfd = own_file(p, "lock", O_RDWR | O_CREAT, err, errlen, what);
	if (p->lockfd < 0) {
		e = p->lockfd;
		goto fail;
	}
	if (flock(p->lockfd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK && stopping(p, what)) {
		/* The daemon before us is stopping (umount returns before it
		 * has let go): wait for it, as a restart by hand would. */
		for (int i = 0; i < PERSIST_STOP_WAIT_S * 50; i++) {
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			if (flock(p->lockfd, LOCK_EX | LOCK_NB) == 0)
				break;
		}
	}
	if (flock(p->lockfd, LOCK_EX | LOCK_NB) < 0) {
		char pid[32] = "";
		e = errno == EWOULDBLOCK ? -EBUSY : -errno;
		ssize_t n = pread(p->lockfd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		snprintf(err, errlen, "%s %s is in use by another epochfs%s%s%s: give each mount a "
			 "state of its own", what, p->dir, *pid ? " (pid " : "", pid, *pid ? ")" : "");
		goto fail;
	}
	if (!lock_linked(p)) {
		/* The daemon before us removed the state between our open and
		 * our lock (remove_state() unlinks the lock last): start again
		 * on what is there now. */
		close(p->lockfd);
		close(p->dirfd);
		p->lockfd = p->dirfd = -1;
		if (++tries < 8)
			goto again;
		e = -EAGAIN;
		snprintf(err, errlen, "%s %s keeps being removed under us", what, p->dir);
		goto fail;
	}
	persist_note_pid(p);
	{
		FILE *f;
		int fd = own_file(p, "owner", O_WRONLY | O_CREAT | O_TRUNC, err, errlen, what);
		if (fd < 0) {
			e = fd;
			goto fail;
		}
		if ((f = fdopen(fd, "w"))) {
			fprintf(f, "mountpoint=%s\nsource=%s\n", o->mountpoint ? o->mountpoint : "",
				o->source);
			fclose(f);
		} else {
			close(fd);
		}
	}
	/* A larger arena than the budget (a smaller --cache-size now) keeps its
	 * length until the adoption has moved what fits below the budget. */
	p->arenafd = own_file(p, "arena", O_RDWR | O_CREAT, err, errlen, what);
	if (p->arenafd < 0) {
		e = p->arenafd;
		goto fail;
	}
	if (fstat(p->arenafd, &sb) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s %s: arena: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	/* Room: the state never takes the last of its filesystem (on /dev/shm,
	 * PyTorch's DataLoader hands its batches over there). The arena's own
	 * pages count as ours. */
	if (o->room_check && fstatfs(p->dirfd, &sf) == 0) {
		uint64_t size = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
		uint64_t avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize + (uint64_t)sb.st_blocks * 512;
		uint64_t keep = persist_headroom(size);
		if (avail < keep || o->capacity > avail - keep) {
			e = -ENOSPC;
			snprintf(err, errlen, "%s %s: its filesystem has %llu MiB free of %llu MiB; a %llu MiB "
				 "cache there would leave less than the %llu MiB kept for others", what, p->dir,
				 (unsigned long long)(avail >> 20), (unsigned long long)(size >> 20),
				 (unsigned long long)(o->capacity >> 20), (unsigned long long)(keep >> 20));
			goto fail;
		}
	}
	if ((uint64_t)sb.st_size < p->capacity && ftruncate(p->arenafd, (off_t)p->capacity) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s %s: arena: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	if (stat(o->source, &sb) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s: %s", o->source, strerror(-e));
		goto fail;
	}
	if ((e = persist_table_open(p, &sb, o->source, o->capacity, o->manifest_id)) < 0) {
		snprintf(err, errlen, "%s %s: table: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	*out = p;
	return 0;
fail:
	persist_close(p);
	return e;
}

int persist_arena_fd(const struct persist *p)
{
	return p->arenafd;
}

int persist_reopen_arena(const struct persist *p, int flags)
{
	struct stat a, b;
	int fd = openat(p->dirfd, "arena", flags | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &a) < 0 || fstat(p->arenafd, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

uint64_t persist_capacity(const struct persist *p)
{
	return p->capacity;
}

void persist_drop_root(const char *root)
{
	char def[256];

	persist_default_root(def, sizeof(def));
	if (strcmp(root, def))
		return;
	if (rmdir(root) < 0 && errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT)
		log_info("%s: left in place: %s", root, strerror(errno));
}

void persist_remove(struct persist *p)
{
	if (!p)
		return;
	if (p->dirfd >= 0) {
		pthread_mutex_lock(&p->wlock);
		p->recording = 0;
		pthread_mutex_unlock(&p->wlock);
		int e = remove_state(p->dirfd, AT_FDCWD, p->dir);
		if (e < 0 && e != -ENOTEMPTY)
			log_warn("cache state %s: cannot remove it: %s", p->dir, strerror(-e));
		else if (e == 0) {
			char *slash = strrchr(p->dir, '/');
			if (slash && slash != p->dir) {
				*slash = '\0';         /* p->dir is freed right after */
				persist_drop_root(p->dir);
			}
		}
	}
	persist_close(p);
}

const char *persist_dir(const struct persist *p)
{
	return p->dir;
}

void persist_get_stats(struct persist *p, struct persist_stats *s)
{
	*s = p->st;
	s->record_errors = __atomic_load_n(&p->st.record_errors, __ATOMIC_RELAXED);
}

void persist_mark_kept(struct persist *p)
{
	char why[300];
	int fd = trust_openat(p->dirfd, "owner", O_WRONLY | O_APPEND, 0600, why, sizeof(why));

	if (fd < 0 || write(fd, "kept=1\n", 7) != 7)
		log_warn("cache state %s: cannot mark it kept: %s", p->dir, fd < 0 ? why : strerror(errno));
	if (fd >= 0)
		close(fd);
}

void persist_close(struct persist *p)
{
	if (!p)
		return;
	if (p->tablefd >= 0)
		close(p->tablefd);
	if (p->arenafd >= 0)
		close(p->arenafd);
	if (p->lockfd >= 0)
		close(p->lockfd);       /* the lock goes with it */
	if (p->dirfd >= 0)
		close(p->dirfd);
	pthread_mutex_destroy(&p->wlock);
	free(p->dir);
	free(p);
}

void persist_default_dir(const char *root, const char *mountpoint, char *buf, size_t len)
{
	char tail[48];
	size_t ml = strlen(mountpoint), from = ml > 40 ? ml - 40 : 0, k = 0;

	for (size_t i = from; i < ml && k < sizeof(tail) - 1; i++) {
		char ch = mountpoint[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			 ch == '.' || ch == '_';
		if (!k && !ok)
			continue;           /* no leading dash */
		tail[k++] = ok ? ch : '-';
	}
	tail[k] = 0;
	snprintf(buf, len, "%s/%s%s%08llx", root, tail, k ? "-" : "",
		 (unsigned long long)(XXH3_64bits(mountpoint, ml) & 0xffffffffu));
}

/* Reads DIRFD/owner: its mount point into MNT ("" when unreadable) and
 * whether it was kept on purpose (kept=1). */
static void read_owner(int dirfd, char *mnt, size_t mlen, int *kept)
{
	char line[4200];
	int ofd = openat(dirfd, "owner", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *f;

	*mnt = 0;
	*kept = 0;
	if (ofd < 0 || !(f = fdopen(ofd, "r"))) {
		if (ofd >= 0)
			close(ofd);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "mountpoint=", 11))
			snprintf(mnt, mlen, "%s", line + 11);
		else if (!strcmp(line, "kept=1"))
			*kept = 1;
	}
	fclose(f);
}

/* 1 if MNT is an epochfs mount now. */
static int epochfs_mounted(const char *mnt)
{
	char type[64];

	return path_mount_type("/proc/self/mountinfo", mnt, type, sizeof(type)) == 1 &&
	       !strcmp(type, "fuse.epochfs");
}

void persist_default_root(char *buf, size_t len)
{
	snprintf(buf, len, "%s-%u", PERSIST_ROOT_PREFIX, (unsigned)geteuid());
}
