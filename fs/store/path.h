/* path.h - confined opens below SOURCE.
 *
 * Every file the daemon opens in SOURCE goes through path_open_beneath(): it
 * resolves a relative path with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
 * so neither "..", nor an absolute path, nor a symlink (even one swapped in
 * after the scan) can lead it outside SOURCE. Links inside SOURCE are still
 * shown to readers as links; the reader's kernel follows them, never us.
 */
#ifndef EPOCHFS_PATH_H
#define EPOCHFS_PATH_H

/* Opens REL (relative to ROOTFD; "" or "." is the root itself) with FLAGS
 * (O_CLOEXEC is added). Returns the new fd, or -errno: -ELOOP/-EXDEV when a
 * component is a symlink or leaves the root. */
int path_open_beneath(int rootfd, const char *rel, int flags);

/* 0 if NAME is one component a directory entry may have (non-empty, no '/',
 * not "." or "..", at most 255 bytes), else -EINVAL. */
int path_check_name(const char *name);

/* Where SOURCE and MOUNTPOINT may not be: 1 if absolute, canonical paths A
 * and B are the same directory or one lies inside the other ("/a" and
 * "/a/b", not "/a" and "/ab"), else 0. A mount on SOURCE or inside it would
 * make the daemon's own path-based calls (the inotify watch) wait on the
 * mount it serves. */
int path_overlap(const char *a, const char *b);

/* If canonical path P lies in an epochfs mount (the deepest mount holding
 * it, per MOUNTINFO, normally "/proc/self/mountinfo"), writes the path
 * below that mount's SOURCE that P shows into OUT and returns 1; 0 when P
 * is on another filesystem; -errno. epochfs names its SOURCE as the mount's
 * source field (fsname), so reading through a chain of epochfs mounts ends
 * at a real directory. */
int path_epochfs_origin(const char *mountinfo, const char *p, char *out, size_t len);

/* If absolute path P is itself a mount point (per MOUNTINFO), writes the
 * file system type of the mount on top there ("fuse.epochfs", ...) into
 * TYPE and returns 1; 0 when P is not a mount point; -errno. */
int path_mount_type(const char *mountinfo, const char *p, char *type, size_t len);

/* If absolute path P is itself a mount point (per MOUNTINFO), writes the
 * device of the mount on top there as "MAJ:MIN" into DEV (what names its
 * backing device info in /sys/class/bdi) and returns 1; 0 when P is not a
 * mount point or its entry's device is malformed; -errno. */
int path_mount_dev(const char *mountinfo, const char *p, char *dev, size_t len);

/* Calls FN(ARG, MNT, SRC) for every epochfs mount (type fuse.epochfs) in
 * MOUNTINFO, in its order (a mount under another on the same point
 * included), with the mount point and SOURCE unescaped. Returns how many,
 * or -errno when MOUNTINFO cannot be read. */
typedef void (*path_mount_fn)(void *arg, const char *mnt, const char *src);
int path_epochfs_mounts(const char *mountinfo, path_mount_fn fn, void *arg);

#endif
