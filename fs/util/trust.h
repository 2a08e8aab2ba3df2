/* trust.h - deciding whether a path outside SOURCE may be believed, and
 * opening it so that nobody can swap it afterwards.
 *
 * The daemon reads and writes a few things outside SOURCE: the RAM cache's
 * state directory (on /dev/shm), the SSD tier's directory, the peers'
 * secret and the manifest. Each of them decides what readers get, so each
 * must be out of reach of other local users. The rule, the one OpenSSH's
 * StrictModes and the kernel's protected_symlinks apply:
 *
 *   - every directory on the way (after resolving symlinks) is owned by
 *     root or by the daemon's effective user, and is not writable by group
 *     or others unless it has the sticky bit (/tmp, /dev/shm): there, only
 *     an entry's owner can rename or remove it, and the next component is
 *     checked for its owner in turn;
 *   - every symlink met on the way is owned by root or the daemon's user
 *     (a Kubernetes secret volume is a chain of root-owned links);
 *   - the object at the end is owned by the daemon's user (a state
 *     directory it writes: made 0700 if looser) or by root or that user (an
 *     input it only reads), and not writable by group or others.
 *
 * The walk is done once, component by component, with O_NOFOLLOW opens from
 * the fd of the checked parent, and the caller keeps the final fd: a path
 * swapped after the check changes nothing the daemon does. Inside a private
 * directory, files are opened with trust_openat(): no symlink, a regular
 * file owned by the daemon's user, one link, mode 0600.
 *
 * Errors: -errno, with one line in WHY (no program name, no newline) that
 * names the offending path and the reason, e.g.
 *   "/dev/shm/epochfs-0 is owned by uid 1000, not by this daemon's user (0)".
 * -EPERM means "exists but is not trustworthy"; other codes are the
 * system's (-ENOENT, -ENOTDIR, ...).
 */
#ifndef EPOCHFS_TRUST_H
#define EPOCHFS_TRUST_H

#include <stddef.h>
#include <sys/types.h>

enum {
	TRUST_CREATE = 1,       /* make missing directories (0700), the final one included */
	TRUST_OWN = 2,          /* the final directory must be the daemon user's; looser modes are
				 * tightened to 0700 (see trust_dir's *LOOSE) */
};

/* Resolves PATH (absolute or relative to the working directory), checks
 * every directory and symlink on the way and the final directory, and
 * returns an O_RDONLY|O_DIRECTORY fd of it. With TRUST_OWN, *LOOSE (may be
 * NULL) is set to 1 when the directory was writable by group or others
 * before it was tightened: whatever is inside may have been planted by
 * someone else, and the caller must not believe it. */
int trust_dir(const char *path, unsigned flags, int *loose, char *why, size_t whylen);

/* Opens the file PATH read-only after the same walk: the directories
 * trusted, the file regular, owned by root or the daemon's user, not
 * writable by group or others. Returns the fd, or -errno with WHY. */
int trust_file(const char *path, char *why, size_t whylen);

/* Opens NAME in the private directory DIRFD: FLAGS (O_RDWR, O_CREAT, ...;
 * O_NOFOLLOW and O_CLOEXEC are added), MODE for a new file. An existing
 * entry must be a regular file owned by the daemon's user, with one link
 * and no permission for group or others; else -EPERM with WHY. */
int trust_openat(int dirfd, const char *name, int flags, mode_t mode, char *why, size_t whylen);

/* Opens the existing NAME in DIRFD, a private directory of user UID (a
 * state another user's daemon made, looked at by root), read-only and
 * without following links, FIFOs or devices: it must be a regular file of
 * UID with one link and no permission for group or others, checked before
 * the open and again after it. Nothing is made or changed. The fd, or
 * -EPERM with WHY (not such a file), or -errno (-ENOENT: there is none). */
int trust_openat_of(int dirfd, const char *name, uid_t uid, char *why, size_t whylen);

/* Removes every entry of the directory DIRFD but KEEP (a name, or NULL):
 * files and symlinks (removed, never followed), and empty directories; a
 * directory with something in it stays. 0 or -errno (the first failure). */
int trust_empty_dir(int dirfd, const char *keep);

#endif
