/* maint.h - the cache's background thread: prefault ahead, scrub behind.
 *
 * Two jobs keep the RAM cache fast and honest without touching the read path:
 * - Prefault. The first touch of arena memory is a page fault, and on this
 *   project's VMs a fresh page also costs the host a fault: filling 1.4 GB
 *   ran at 0.45 GB/s inside reads, against 2.2 GB/s for the same epoch with
 *   no cache. The thread makes the arena resident in bulk, up to WINDOW bytes
 *   past the fill pointer and never past LIMIT (what the dataset can fill),
 *   so loads copy into memory that is already there: 1.7 GB/s. RSS stays at
 *   most used + WINDOW, and never above the budget. By default WINDOW is
 *   unbounded: the whole arena the data can fill is made resident right
 *   after the mount (docs/design.md has the figures).
 * - Scrub. RAM goes bad silently (no ECC on many training nodes, or a stray
 *   write through a bug). --verify re-hashes every hit, which costs a full
 *   pass of xxh3 per read; the scrubber instead walks the whole cache at RATE
 *   bytes per second (default 32 MB/s, under 1% of one core), so a flipped
 *   bit is found within one pass (capacity / RATE seconds) and the item is
 *   dropped before it is served again, counted in cache_corrupt exactly as a
 *   --verify hit is.
 *
 * The same thread carries out debug commands (maint_command_fd()): they come
 * from a signal handler, so a request is one byte written to a pipe.
 */
#ifndef EPOCHFS_MAINT_H
#define EPOCHFS_MAINT_H

#include <stdint.h>

#include "store/cache.h"

struct maint;

struct maint_opts {
	uint64_t scrub_rate;        /* bytes/s to re-check; 0: no scrubbing */
	uint64_t prefault_window;   /* bytes resident ahead of the fill; 0: none */
	uint64_t prefault_limit;    /* never prefault past this (what the data can fill in the
				     * arena), plus the budget charged to backings (cache.h) */
	void (*cmd)(void *arg, char cmd);   /* debug command callback, or NULL */
	void *arg;
};

/* Starts the thread for cache C. Returns 0 and *OUT, or -errno. */
int maint_start(struct cache *c, const struct maint_opts *o, struct maint **out);
/* Stops and joins the thread; NULL is fine. */
void maint_stop(struct maint *m);
/* Changes the prefault limit (the core knows at INIT whether large files
 * go to backings or to the arena); NULL is fine. */
void maint_set_prefault_limit(struct maint *m, uint64_t limit);
/* The write end of the command pipe: one byte written there runs the command
 * callback on the thread. write(2) is async-signal-safe, so a signal handler
 * may do it. -1 for NULL. */
int maint_command_fd(const struct maint *m);

#endif
