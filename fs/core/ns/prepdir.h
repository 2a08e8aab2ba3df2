/* prepdir.h - the virtual directory MOUNTPOINT/.prep/: prep groups by name.
 *
 *   .prep/NAME.spec                 write a spec here to declare group NAME
 *                                   (prep/spec.h); read it back, canonical
 *   .prep/NAME.error                why the last spec written was refused
 *   .prep/NAME/epoch-EEEE/batch-BBBBBB   one pre-augmented minibatch (prep/batch.h)
 *
 * Declaring: writes to NAME.spec accumulate its text (a write at offset 0
 * starts it over); the complete lines are checked at once, so a bad key or
 * value fails that write() with EINVAL, its reason in NAME.error and the
 * daemon's log. The group starts at commit: when the file written is
 * released (closed), or at the first lookup of .prep/NAME, whichever comes
 * first; what only the whole spec can show (a missing root, an empty class)
 * lands in NAME.error then, and .prep/NAME does not appear. Writing the
 * spec of a running group again is fine (so each of the k jobs of a search
 * can simply declare the group it wants); a different spec is not applied,
 * and NAME.error says so. unlink(NAME.spec) ends a group (EBUSY only while
 * a batch read is in flight; batch nodes the kernel still holds answer
 * ENOENT afterwards).
 *
 * Consumers: every lookup of a batch file gives a new node, with timeouts
 * of 0, so each open() is one consumer's stream with a page cache of its
 * own and every read reaches the daemon; the group counts the consumer done
 * with a batch once that node has read it whole (prep/group.h). The node's
 * reader is closed when the kernel forgets it.
 *
 * Node numbers are the prep namespace's (ns.h: VIRTUAL | PREP), and carry
 * the kind, the group's slot and the slot's generation (so a node of an
 * ended group never reaches its successor), plus a version for files whose
 * text changes (so the kernel never serves a stale page of them).
 *
 * No FUSE in here; thread-safe (one mutex for names and nodes, the groups
 * lock themselves).
 */
#ifndef EPOCHFS_PREPDIR_H
#define EPOCHFS_PREPDIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/ns/ns.h"
#include "group.h"

#define PREPDIR_NAME ".prep"
#define PREPDIR_MAX_GROUPS 64
#define PREPDIR_MAX_ERRORS 64         /* NAME.error files kept; the oldest goes */

struct prepdir;

struct prepdir_attr {
	uint64_t node;
	int is_dir;
	int writable;               /* NAME.spec */
	size_t size;
};

struct prepdir_io {
	void *ctx;
	/* Reads a dataset file for a group (group.h's read_file). */
	ssize_t (*read_file)(void *ctx, const char *rel, void **buf, size_t *cap);
	/* Lists ImageFolder root REL: folder_scan() against the dataset. */
	int (*scan)(void *ctx, const char *rel, struct folder **out, char *err, size_t errlen);
};

/* O's options for every group; o->mem is the total all groups together
 * hold (one group_pool for all of them, made here; o->pool is ignored). */
int prepdir_new(const struct prepdir_io *io, const struct group_opts *o, struct prepdir **out);
/* Ends every group; no node may be in use. */
void prepdir_free(struct prepdir *pd);

int prepdir_lookup(struct prepdir *pd, uint64_t parent, const char *name, struct prepdir_attr *a);
int prepdir_getattr(struct prepdir *pd, uint64_t node, struct prepdir_attr *a);
/* Reads LEN bytes at OFF of NODE. FN runs once with the bytes (valid only
 * during the call) or -errno: now, or for a batch not made yet, later on a
 * prep worker thread; the caller's thread never waits for a batch. */
void prepdir_read(struct prepdir *pd, uint64_t node, size_t len, off_t off, group_read_fn fn, void *arg);
/* Creates NAME.spec in .prep (to be written): 0 and *A, -EROFS for any
 * other name, -ENOSPC with PREPDIR_MAX_GROUPS names in use. */
int prepdir_create(struct prepdir *pd, uint64_t parent, const char *name, struct prepdir_attr *a);
/* Writes spec text; LEN, or -EINVAL (a complete line refused: see
 * NAME.error), -EFBIG (longer than a spec may be), -EROFS (not a spec). */
ssize_t prepdir_write(struct prepdir *pd, uint64_t node, const void *buf, size_t len, off_t off);
/* The kernel closed a file opened on NODE: commits a spec written to it. */
void prepdir_release(struct prepdir *pd, uint64_t node);
/* Truncates the text written to a spec node (open with O_TRUNC). */
int prepdir_truncate(struct prepdir *pd, uint64_t node, off_t size);
int prepdir_unlink(struct prepdir *pd, uint64_t parent, const char *name);
void prepdir_forget(struct prepdir *pd, uint64_t node, uint64_t nlookup);
/* Kernel passthrough of batch files (fs/core/passthrough.c): FN(ARG,
 * descriptor or -errno, NULL) runs once, now or later on a prep worker,
 * with a descriptor of batch node NODE's file (FN owns it), the batch
 * pinned until prepdir_pt_close(); an open of a batch not made yet waits
 * for it (group_pt_open_async()). -EAGAIN when NODE is no batch or its
 * group's batches are not files (the node is then read through
 * prepdir_read()). The close with READ counts the node's consumer done
 * with the batch (group_pt_close()). */
int prepdir_is_batch(uint64_t node);
void prepdir_pt_open_async(struct prepdir *pd, uint64_t node, group_read_fn fn, void *arg);
void prepdir_pt_close(struct prepdir *pd, uint64_t node, int read);
/* Whether groups started from now on keep their batches in memfds (set
 * when the mount uses kernel passthrough). */
void prepdir_set_memfd(struct prepdir *pd, int on);
/* Where batches live and how consumers get them: "tmpfs: ...", "memfd:
 * ..." (with why there is no tmpfs) or "memory: ..." (stats.json's
 * prep_batch_files). */
const char *prepdir_batch_files(struct prepdir *pd);
/* The POS-th entry of directory DIR: its name (valid until the next call
 * on PD) and whether it is a directory; NULL past the end. */
const char *prepdir_dirent(struct prepdir *pd, uint64_t dir, uint64_t pos, int *is_dir, char *name,
			   size_t len);

/* Sums over all groups, and how many there are; the counters (produced,
 * freed, served_bytes, images, cpu_ns, ...) include the groups that ended,
 * so they never go back; staged_bytes, staged_peak (the most held at once
 * by all groups together) and mem_limit are the pool's. */
void prepdir_stats(struct prepdir *pd, struct group_stats *sum, uint64_t *groups);

#endif
