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

#endif
