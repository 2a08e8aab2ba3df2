/* plan.h - one cache item's way through the stores and the sources, for
 * the core's read path (read.c) and the prefetcher (prefetch.c). Core
 * internal: nothing outside fs/core includes it.
 *
 * For one item (a file, or a --cache-chunk piece of a larger one) at one
 * version, plan_read() and plan_prefetch() decide once where its bytes come
 * from and where they go, then carry it out:
 *
 *   from   the RAM cache (ready, or being loaded by another read: wait),
 *          a staged copy fetched ahead (ready, or on its way: wait),
 *          or the sources in order (the SSD tier, the owner peer, storage
 *          last), which answer or pass the read on (-EAGAIN)
 *   into   the RAM cache (MinIO admits it: budget left, this node's item),
 *          else the SSD tier (room left, this node's item), else staging
 *          (a prefetch only), else nothing: a reader's request is read
 *          alone; a peer's read we cannot keep is refused (-ENOSPC) so the
 *          asker tries the next node of the item's ranking
 *
 * A whole item is read when it goes into a store; the request is answered
 * from it first, then the store is told (waiters run, the tier's writer
 * takes it). With a manifest, bytes from a source that does not check its
 * own (storage) are checked before they are kept; unchecked bytes are
 * served (SOURCE is what readers get) but never kept.
 */
#ifndef EPOCHFS_PLAN_H
#define EPOCHFS_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/core.h"
#include "store/index.h"

enum read_kind {
	RK_REQUEST,                 /* a whole request of a reader */
	RK_PART,                    /* one item's share of a request spanning several */
	RK_PEER,                    /* a peer's read (core_read_peer) */
	RK_PREFETCH,                /* the prefetcher's, ahead of the readers (plan_prefetch's own) */
};

/* Reads [OFF, OFF+LEN) of file ID, version A, inside one cache item (or
 * anywhere, without a cache). REL: the file's path when the caller has it
 * (a peer's read), else NULL (made when first needed). DONE runs once, on
 * any thread, with no core lock held. */
void plan_read(struct core *c, uint32_t id, const struct index_attr *a, off_t off, size_t len,
	       enum read_kind kind, const char *rel, core_read_fn done, void *arg);

/* The prefetcher's fetch of item CHUNK of file ID (version A). GROUP and
 * PLACE say whose order it is for (staging.h); *RESERVED is the caller's
 * staging reservation (what a staged copy takes of it). DONE(ARG, res,
 * kept) runs once: KEPT 1 when the item is in the RAM cache or the tier
 * (already, or now: RES its bytes, or 0 when it was there), 0 when it was
 * staged (RES its bytes) or could not be (-ENOSPC: no room; -errno). */
struct plan_prefetch {
	uint32_t group, place;
	uint64_t *reserved;
	void (*done)(void *arg, ssize_t res, int kept);
	void *arg;
};
void plan_prefetch(struct core *c, uint32_t id, const struct index_attr *a, uint32_t chunk,
		   const struct plan_prefetch *p);

/* read.c: counts a finished request of file ID and replies; a stale one
 * has its entry refreshed after the reply. */
void read_reply(struct core *c, uint32_t id, ssize_t res, const void *buf, core_read_fn done, void *arg);

#endif
