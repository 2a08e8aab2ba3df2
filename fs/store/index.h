/* index.h - the in-memory index of SOURCE: path -> entry, size, mtime, owner.
 *
 * Built once at mount by a parallel scan, then read lock-free by every FUSE
 * thread. Entries live in one array in breadth-first order, so the children of
 * a directory are a contiguous, name-sorted run: lookup is a binary search in
 * that run and readdir walks it, with no hash table and no per-entry pointer.
 *
 * Ids are 1..index_count(); INDEX_ROOT (1) is SOURCE itself. An id never
 * changes while mounted. What may change is an entry's *version* (backing
 * inode, size, mtime, ctime): index_refresh() re-stats an entry and, when the
 * backing file changed, bumps its generation and calls the change callback so
 * the adapter can drop the kernel's caches. A file that vanished is marked
 * gone (lookups miss it, readdir skips it). Files created after the scan are
 * not added (documented in docs/design.md).
 *
 * Concurrency: readers (index_get, index_lookup, ...) take no lock; the
 * mutable fields are published under a sequence counter by index_refresh(),
 * which serialises writers on an internal mutex. Nothing here calls FUSE.
 */
#ifndef EPOCHFS_INDEX_H
#define EPOCHFS_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define INDEX_ROOT 1u

struct index;

/* One incarnation of a backing file; any difference means "changed". */
struct index_version {
	uint64_t ino;
	uint64_t size;
	int64_t mtime_ns;
	int64_t ctime_ns;
};

struct index_attr {
	uint32_t id;
	uint32_t parent;    /* INDEX_ROOT's parent is itself */
	uint32_t gen;       /* bumped on every change of a file or link */
	uint32_t mode;      /* st_mode of the backing entry */
	uint32_t uid, gid;
	uint32_t nchildren; /* directories: number of children (gone included) */
	uint32_t nlink;     /* SOURCE's link count (hard links show as in SOURCE) */
	uint64_t blocks;    /* SOURCE's st_blocks (512-byte units; sparse files stay sparse) */
	int gone;           /* vanished from SOURCE since the scan */
	struct index_version v;
};

struct index_scan_opts {
	unsigned threads;   /* 0: pick from the number of CPUs */
	int progress;       /* print a progress line on stderr after 1 s */
};

struct index_totals {
	uint64_t files, dirs, symlinks, skipped;
	uint64_t bytes;     /* sum of regular file sizes */
	double scan_seconds;
};

/* Scans the tree below ROOTFD (a directory fd the index borrows for its
 * lifetime). Only directories, regular files and symlinks are indexed; other
 * types are skipped and counted. Directories are never entered through a
 * symlink. Unreadable subdirectories are reported once and shown empty.
 * Returns 0 and *OUT, or -errno (the root itself unreadable, no memory). */
int index_scan(int rootfd, const struct index_scan_opts *o, struct index **out);
void index_free(struct index *ix);

uint32_t index_count(const struct index *ix);
int index_rootfd(const struct index *ix);

/* Copies entry ID's attributes. -ENOENT if ID is out of range. */
int index_get(const struct index *ix, uint32_t id, struct index_attr *a);

/* The child named NAME of directory PARENT, or 0 if none or gone. */
uint32_t index_lookup(const struct index *ix, uint32_t parent, const char *name);
/* The same, gone entries included (so a file that comes back is found). */
uint32_t index_find(const struct index *ix, uint32_t parent, const char *name);

/* The POS-th child (0-based, name order, gone ones included) of directory
 * DIR, or 0 past the end. */
uint32_t index_child(const struct index *ix, uint32_t dir, uint32_t pos);

/* NUL-terminated name of ID ("" for the root); valid while IX lives. */
const char *index_name(const struct index *ix, uint32_t id);

/* Writes ID's path relative to SOURCE ("" for the root) into BUF.
 * Returns its length, or -ENAMETOOLONG. */
int index_path(const struct index *ix, uint32_t id, char *buf, size_t len);

/* Bytes of memory the index holds (entries and names). */
size_t index_memory(const struct index *ix);
void index_totals(const struct index *ix, struct index_totals *t);

/* Called (outside any index lock) after index_refresh() found ID changed or
 * gone; OLD_GEN is the generation readers may still hold. */
typedef void (*index_change_fn)(void *arg, uint32_t id, uint32_t parent,
				const char *name, uint32_t old_gen);
void index_set_change_cb(struct index *ix, index_change_fn fn, void *arg);

/* Re-stats ID in SOURCE. FORCE treats it as changed even when the stat looks
 * the same (a write was seen). Returns 1 if it changed or vanished (and the
 * callback ran), 0 if not, -errno on a failure to look. */
int index_refresh(struct index *ix, uint32_t id, int force);

/* Revalidation without inotify. Every entry remembers when it was last
 * checked against SOURCE (the scan, index_refresh, or this call).
 * index_set_max_age() sets how long such a check stays valid (seconds;
 * 0: every use re-checks). index_revalidate(): when ID's check is older
 * than that, one caller re-stats it now (index_refresh) while concurrent
 * callers go on with what the index holds; returns 1 if it changed or
 * vanished (the change callback ran), 0 if not or not due, -errno if it
 * could not look. *VALID (may be NULL) gets how many more seconds the
 * entry's current check holds: what a kernel may cache it for, so nothing
 * above the mount outlives the bound. The root is never re-checked. */
void index_set_max_age(struct index *ix, double seconds);
double index_max_age(const struct index *ix);
int index_revalidate(struct index *ix, uint32_t id, double *valid);
/* Seconds ID's current check still holds (0 when due), without checking. */
double index_valid_for(const struct index *ix, uint32_t id);

/* 1 if A and B are the same version. */
int index_version_eq(const struct index_version *a, const struct index_version *b);
/* The version a stat(2) result describes. */
void index_version_of(const struct stat *st, struct index_version *v);

#endif
