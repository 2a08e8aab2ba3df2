/* trust.c - checked opens of the daemon's own files outside SOURCE; see
 * trust.h for the rule and the contract.
 *
 * DESIGN
 * - Two passes. resolve() turns the path into a canonical one the way the
 *   kernel would (symlinks, "..", "."), refusing symlinks owned by anyone
 *   but root or us; walk() then opens the canonical path one component at a
 *   time with O_NOFOLLOW from the parent's fd and checks each directory by
 *   fstat of what it opened, so what is checked is what is used. A symlink
 *   swapped in between the passes makes walk() fail (ELOOP/ENOTDIR), never
 *   follow it.
 * - The final directory of a state (TRUST_OWN) is tightened to 0700 rather
 *   than refused: a umask of 022 gives 0755, which leaks nothing writable.
 *   Group or other *write* means someone else may have planted entries:
 *   the caller learns it (*loose) and discards the contents.
 * - O_TRUNC is never passed to openat(): an existing file is checked first
 *   and truncated after, so a planted link to another file is never cut.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/trust.h"

#define MAX_LINKS 40

static int owner_ok(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

/* Who may own what we trust, for messages. */
static const char *owners(char *buf, size_t len)
{
	if (geteuid() == 0)
		snprintf(buf, len, "root");
	else
		snprintf(buf, len, "root or this daemon's user (%u)", (unsigned)geteuid());
	return buf;
}

/* A directory others cannot change, or a sticky one (where they can only
 * change their own entries, and ours are checked one by one). */
static int dir_ok(const struct stat *st, const char *path, char *why, size_t wl)
{
	if (!owner_ok(st)) {
		char o[64];
		snprintf(why, wl, "%s is owned by uid %u, not by %s", path, (unsigned)st->st_uid,
			 owners(o, sizeof(o)));
		return -EPERM;
	}
	if ((st->st_mode & 022) && !(st->st_mode & S_ISVTX)) {
		snprintf(why, wl, "%s is writable by group or others (mode %04o) and not sticky: another user "
			 "could replace what is in it", path, (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* Pops the last component of canonical path RES ("" is the root). */
static void pop(char *res)
{
	char *s = strrchr(res, '/');

	if (s)
		*s = 0;
}

/* The canonical form of PATH into OUT ("" for "/"). With CREATE, a missing
 * tail is kept as written (it may not hold ".."). */
static int resolve(const char *path, int create, char *out, size_t outlen, char *why, size_t wl)
{
	char todo[2 * PATH_MAX + 2], res[PATH_MAX + 1] = "", cand[PATH_MAX + 1], link[PATH_MAX + 1];
	size_t pos = 0;
	int links = 0, missing = 0;

	if (!path || !*path) {
		snprintf(why, wl, "an empty path");
		return -EINVAL;
	}
	if (path[0] == '/') {
		if (snprintf(todo, sizeof(todo), "%s", path) >= (int)sizeof(todo))
			goto too_long;
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(todo, sizeof(todo), "%s/%s", cwd, path) >= (int)sizeof(todo))
			goto too_long;
	}
	while (todo[pos]) {
		while (todo[pos] == '/')
			pos++;
		if (!todo[pos])
			break;
		size_t end = pos;
		while (todo[end] && todo[end] != '/')
			end++;
		size_t clen = end - pos;
		char comp[NAME_MAX + 1];
		if (clen > NAME_MAX)
			goto too_long;
		memcpy(comp, todo + pos, clen);
		comp[clen] = 0;
		pos = end;
		if (!strcmp(comp, "."))
			continue;
		if (!strcmp(comp, "..")) {
			if (missing) {
				snprintf(why, wl, "%s: \"..\" after a directory that does not exist", path);
				return -EINVAL;
			}
			pop(res);
			continue;
		}
		if (snprintf(cand, sizeof(cand), "%s/%s", res, comp) >= (int)sizeof(cand))
			goto too_long;
		struct stat st;
		if (missing || lstat(cand, &st) < 0) {
			if (!missing && errno != ENOENT) {
				int e = -errno;
				snprintf(why, wl, "%s: %s", cand, strerror(-e));
				return e;
			}
			if (!create) {
				snprintf(why, wl, "%s: %s", cand, strerror(ENOENT));
				return -ENOENT;
			}
			missing = 1;
			memcpy(res, cand, strlen(cand) + 1);
			continue;
		}
		if (!S_ISLNK(st.st_mode)) {
			memcpy(res, cand, strlen(cand) + 1);
			continue;
		}
		if (!owner_ok(&st)) {
			char o[64];
			snprintf(why, wl, "%s is a symlink owned by uid %u, not by %s", cand, (unsigned)st.st_uid,
				 owners(o, sizeof(o)));
			return -EPERM;
		}
		if (++links > MAX_LINKS) {
			snprintf(why, wl, "%s: %s", path, strerror(ELOOP));
			return -ELOOP;
		}
		ssize_t n = readlink(cand, link, sizeof(link) - 1);
		if (n < 0) {
			int e = -errno;
			snprintf(why, wl, "%s: %s", cand, strerror(-e));
			return e;
		}
		link[n] = 0;
		char rest[sizeof(todo)];
		if (snprintf(rest, sizeof(rest), "%s%s", link, todo + pos) >= (int)sizeof(rest))
			goto too_long;
		memcpy(todo, rest, strlen(rest) + 1);
		pos = 0;
		if (link[0] == '/')
			res[0] = 0;
	}
	if (snprintf(out, outlen, "%s", res) >= (int)outlen)
		goto too_long;
	return 0;
too_long:
	snprintf(why, wl, "%.200s...: %s", path, strerror(ENAMETOOLONG));
	return -ENAMETOOLONG;
}

/* Opens canonical path RES (made by resolve()) one component at a time. The
 * directories before the last must pass dir_ok(); the last is opened with
 * FINAL_FLAGS (O_PATH for a directory to walk on, O_RDONLY for the end)
 * and its stat left in *ST. */
static int walk(const char *res, unsigned flags, int final_flags, struct stat *st, char *why, size_t wl)
{
	char sofar[PATH_MAX + 1] = "";
	size_t len = 0;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), e;
	const char *p = res;

	if (fd < 0 || fstat(fd, st) < 0) {
		e = -errno;
		snprintf(why, wl, "/: %s", strerror(-e));
		goto fail;
	}
	while (*p) {
		while (*p == '/')
			p++;
		const char *end = strchr(p, '/');
		size_t clen = end ? (size_t)(end - p) : strlen(p);
		char comp[NAME_MAX + 1];
		if (!clen)
			break;
		if ((e = dir_ok(st, len ? sofar : "/", why, wl)) < 0)
			goto fail;
		memcpy(comp, p, clen);
		comp[clen] = 0;
		p += clen;
		while (*p == '/')
			p++;
		int last = !*p;
		len += (size_t)snprintf(sofar + len, sizeof(sofar) - len, "/%s", comp);
		int of = (last ? final_flags : O_PATH | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC;
		int nfd = openat(fd, comp, of);
		if (nfd < 0 && errno == ENOENT && (flags & TRUST_CREATE) && (of & O_DIRECTORY)) {
			if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
				e = -errno;
				snprintf(why, wl, "cannot make %s: %s", sofar, strerror(-e));
				goto fail;
			}
			nfd = openat(fd, comp, of);
		}
		if (nfd < 0) {
			e = -errno;
			if (e == -ELOOP || (e == -ENOTDIR && !last))
				snprintf(why, wl, "%s changed into a symlink or another file while it was checked",
					 sofar);
			else
				snprintf(why, wl, "%s: %s", sofar, strerror(-e));
			goto fail;
		}
		close(fd);
		fd = nfd;
		if (fstat(fd, st) < 0) {
			e = -errno;
			snprintf(why, wl, "%s: %s", sofar, strerror(-e));
			goto fail;
		}
	}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return e;
}

int trust_dir(const char *path, unsigned flags, int *loose, char *why, size_t wl)
{
	char res[PATH_MAX + 1];
	struct stat st;
	int fd, e;

	if (loose)
		*loose = 0;
	if ((e = resolve(path, !!(flags & TRUST_CREATE), res, sizeof(res), why, wl)) < 0)
		return e;
	fd = walk(res, flags, O_RDONLY | O_DIRECTORY, &st, why, wl);
	if (fd < 0)
		return fd;
	const char *shown = *res ? res : "/";
	if (!(flags & TRUST_OWN)) {
		if ((e = dir_ok(&st, shown, why, wl)) < 0)
			goto fail;
		return fd;
	}
	if (st.st_uid != geteuid()) {
		snprintf(why, wl, "%s is owned by uid %u, not by this daemon's user (%u)", shown,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		e = -EPERM;
		goto fail;
	}
	if (st.st_mode & 077) {
		if (loose && (st.st_mode & 022))
			*loose = 1;
		if (fchmod(fd, 0700) < 0) {
			e = -errno;
			snprintf(why, wl, "%s has mode %04o and cannot be made 0700: %s", shown,
				 (unsigned)(st.st_mode & 07777), strerror(-e));
			goto fail;
		}
	}
	return fd;
fail:
	close(fd);
	return e;
}

int trust_file(const char *path, char *why, size_t wl)
{
	char res[PATH_MAX + 1];
	struct stat st;
	int fd, e;

	if ((e = resolve(path, 0, res, sizeof(res), why, wl)) < 0)
		return e;
	fd = walk(res, 0, O_RDONLY, &st, why, wl);
	if (fd < 0)
		return fd;
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, wl, "%s is not a regular file", res);
		e = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto fail;
	}
	if (!owner_ok(&st)) {
		char o[64];
		snprintf(why, wl, "%s is owned by uid %u, not by %s", res, (unsigned)st.st_uid, owners(o, sizeof(o)));
		e = -EPERM;
		goto fail;
	}
	if (st.st_mode & 022) {
		snprintf(why, wl, "%s is writable by group or others (mode %04o): chmod go-w it", res,
			 (unsigned)(st.st_mode & 07777));
		e = -EPERM;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return e;
}

/* Whether ST (of NAME) is a private file of user UID: regular, UID's, one
 * link, no permission for group or others. 0, or -EPERM with WHY. */
static int private_file(const struct stat *st, const char *name, uid_t uid, const char *whose, char *why,
			size_t wl)
{
	if (!S_ISREG(st->st_mode))
		snprintf(why, wl, "%s is not a regular file", name);
	else if (st->st_uid != uid)
		snprintf(why, wl, "%s is owned by uid %u, not by %s (%u)", name, (unsigned)st->st_uid, whose,
			 (unsigned)uid);
	else if (st->st_nlink != 1)
		snprintf(why, wl, "%s has %lu links (a hard link to another file?)", name,
			 (unsigned long)st->st_nlink);
	else if (st->st_mode & 077)
		snprintf(why, wl, "%s has mode %04o, not 0600", name, (unsigned)(st->st_mode & 07777));
	else
		return 0;
	return -EPERM;
}

int trust_openat(int dirfd, const char *name, int flags, mode_t mode, char *why, size_t wl)
{
	int trunc = flags & O_TRUNC;
	int fd = openat(dirfd, name, (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC, mode);
	struct stat st;
	int e;

	if (fd < 0) {
		e = -errno;
		if (e == -ELOOP) {
			snprintf(why, wl, "%s is a symlink", name);
			return -EPERM;
		}
		snprintf(why, wl, "%s: %s", name, strerror(-e));
		return e;
	}
	if (fstat(fd, &st) < 0) {
		e = -errno;
		snprintf(why, wl, "%s: %s", name, strerror(-e));
		goto fail;
	}
	if ((e = private_file(&st, name, geteuid(), "this daemon's user", why, wl)) < 0)
		goto fail;
	if (trunc && ftruncate(fd, 0) < 0) {
		e = -errno;
		snprintf(why, wl, "%s: %s", name, strerror(-e));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return e;
}

int trust_openat_of(int dirfd, const char *name, uid_t uid, char *why, size_t wl)
{
	struct stat before, st;
	int fd, e;

	/* Looked at before it is opened: a FIFO or a device is never opened. */
	if (fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) < 0) {
		e = -errno;
		snprintf(why, wl, "%s: %s", name, strerror(-e));
		return e;
	}
	if (S_ISLNK(before.st_mode)) {
		snprintf(why, wl, "%s is a symlink", name);
		return -EPERM;
	}
	if ((e = private_file(&before, name, uid, "the state's user", why, wl)) < 0)
		return e;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		e = errno == ELOOP ? -EPERM : -errno;
		snprintf(why, wl, "%s: %s", name, e == -EPERM ? "changed into a symlink" : strerror(-e));
		return e;
	}
	if (fstat(fd, &st) < 0 || st.st_dev != before.st_dev || st.st_ino != before.st_ino) {
		snprintf(why, wl, "%s changed while it was checked", name);
		close(fd);
		return -EPERM;
	}
	return fd;
}

int trust_empty_dir(int dirfd, const char *keep)
{
	int fd = dup(dirfd), err = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	rewinddir(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (keep && !strcmp(e->d_name, keep)))
			continue;
		if (unlinkat(dirfd, e->d_name, 0) < 0 && errno != ENOENT) {
			/* A directory: removed when empty, else left (it cannot be
			 * mistaken for one of our files). */
			if ((errno == EISDIR || errno == EPERM) && unlinkat(dirfd, e->d_name, AT_REMOVEDIR) == 0)
				continue;
			if (errno != ENOTEMPTY && errno != EEXIST && !err)
				err = -errno;
		}
	}
	closedir(d);
	return err;
}
