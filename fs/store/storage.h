/* storage.h - asynchronous reads of SOURCE's files through io_uring.
 *
 * The FUSE threads only queue work here: storage_read() opens the file
 * (confined below SOURCE), copies the data at once if the backing page cache
 * holds it (a non-blocking preadv2), else queues the read on a shared ring
 * and returns. One completion thread reaps the ring, finishes short reads, checks the
 * file is still the version the caller expected, closes it and calls the
 * caller's done() callback. So a handful of FUSE threads keep many reads in
 * flight, and no FUSE thread ever sleeps in a blocking pread.
 *
 * Version check: after the data is in, the completion thread fstat()s the
 * file; if its (inode, size, mtime, ctime) differs from what the caller
 * expected, the data may mix two versions and the read fails with -ESTALE.
 * Nothing is ever served from a file that changed during its read.
 *
 * Thread safety: storage_read() may be called from any thread; callbacks run
 * on the completion thread, one at a time, and must not block for long.
 */
#ifndef EPOCHFS_STORAGE_H
#define EPOCHFS_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/index.h"

struct storage;

/* RES is the number of bytes read (short only at end of file) or -errno.
 * BUF holds the data; it belongs to the caller if one was passed to
 * storage_read(), else to storage and is valid only during the call. Runs on
 * the caller's thread (data was cached) or the completion thread. */
typedef void (*storage_done_fn)(void *arg, ssize_t res, const void *buf);

struct storage_stats {
	uint64_t reads;         /* reads completed */
	uint64_t bytes;         /* bytes read from SOURCE */
	uint64_t stale;         /* reads refused because the file changed */
	uint64_t errors;        /* other failures */
	uint64_t inline_reads;  /* of reads, served inline from the page cache */
};

/* DEPTH is the ring size (in-flight reads); 0 picks a default. ROOTFD is
 * borrowed. Returns 0 and *OUT, or -errno. */
int storage_new(int rootfd, unsigned depth, struct storage **out);
/* Waits for every queued read to complete, then frees. */
void storage_free(struct storage *st);

/* Reads LEN bytes at OFF of the file at REL (relative to SOURCE) into BUF
 * (or a buffer of its own when BUF is NULL). EXPECT, if not NULL, is the
 * version the data must come from. DONE(ARG, ...) is called exactly once,
 * possibly before storage_read() returns (errors found while queuing). */
void storage_read(struct storage *st, const char *rel, const struct index_version *expect,
		  off_t off, size_t len, void *buf, storage_done_fn done, void *arg);

/* Storage as the last of the core's sources (source.h): CTX is the
 * storage; reads IT's file at its version IT->v. */
struct source_item;
void storage_source_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
			 void (*done)(void *arg, ssize_t res, const void *buf), void *arg);

/* Opens the file at REL (relative to SOURCE, no link followed) for the
 * kernel to read it itself (FUSE passthrough): the descriptor when its
 * version is EXPECT, -ESTALE when the file changed or went, or -errno.
 * Counts nothing: the caller counts what it hands on. */
int storage_open_version(struct storage *st, const char *rel, const struct index_version *expect);

/* Synchronous convenience for tools and tests: returns bytes or -errno. */
ssize_t storage_read_sync(struct storage *st, const char *rel,
			  const struct index_version *expect, off_t off, size_t len, void *buf);

/* ON nonzero: the daemon's reads leave no second copy in SOURCE's page
 * cache: read uncached (RWF_DONTCACHE, Linux 6.14) where SOURCE's file
 * system can, else drop the pages each read touched (posix_fadvise
 * DONTNEED). Off by default (tools reading SOURCE directly want the cache). */
void storage_set_drop_source_cache(struct storage *st, int on);

void storage_get_stats(struct storage *st, struct storage_stats *s);

#endif
