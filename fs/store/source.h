/* source.h - what the core's read path fetches a miss from: the interface
 * every source implements (the SSD tier and storage here in store/, the
 * owner peer in cluster/), so none of them includes the core.
 *
 * A miss (an item to load, or a request no store keeps) is fetched from an
 * ordered list of sources: the SSD tier, a peer node that owns the item,
 * and storage (SOURCE itself) always last. A source that cannot serve a
 * read answers -EAGAIN and the core asks the next one, so a dead or lying
 * peer costs a fallback, never an error the reader sees. Neither the FUSE
 * adapter nor the cache knows which source answered.
 *
 * With storage as the only source, a fetch is one direct call: no wrapper,
 * no allocation (fs/core/plan.c).
 */
#ifndef EPOCHFS_SOURCE_H
#define EPOCHFS_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/index.h"

/* RES bytes in BUF, or -errno; BUF is valid only during the call. */
typedef void (*source_done_fn)(void *arg, ssize_t res, const void *buf);

#define SOURCE_RANKS 3              /* an item's owner and its two runner-ups: all ever asked */

/* The cache item a miss is about, made once by the core's read path and
 * handed to every source it tries and to the admission hook, so what one
 * of them works out, the next reuses: the path (the core makes it), the
 * ranking of the nodes that may hold it (the peer layer fills it on first
 * use). Valid until the read's DONE has run. */
struct source_item {
	uint32_t id;                /* index entry */
	uint32_t chunk;             /* which item of the file */
	const char *rel;            /* the file's path below SOURCE */
	size_t rel_len;
	struct index_version v;     /* the version the bytes must come from */
	int ranked;                 /* rank[] holds the first SOURCE_RANKS (or fewer) nodes */
	uint16_t rank[SOURCE_RANKS];
};

struct source {
	const char *name;
	void *ctx;
	/* Reads LEN bytes at OFF of IT's file (inside item IT->chunk) as of
	 * version IT->v, into BUF, or into a buffer of the source's own when
	 * BUF is NULL. Calls DONE exactly once, on any thread, with no lock
	 * held: LEN bytes (fewer only at the end of the file), -EAGAIN to pass
	 * the read to the next source, or another -errno as the final answer
	 * (-ESTALE: the file is no longer at version V). */
	void (*read)(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
		     source_done_fn done, void *arg);
	/* Its bytes are not checked by the source itself: with --manifest,
	 * the core checks them before it keeps them (storage; a peer checks
	 * its replies, the tier checked its items when it took them). */
	int unchecked;
};

#endif
