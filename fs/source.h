/* source.h - where the core fetches what its RAM cache does not hold.
 *
 * A miss (an item to load, or a request the cache cannot admit) is fetched
 * from an ordered list of sources: later a peer node that owns the item,
 * always storage (SOURCE itself) last. A source that cannot serve a read
 * answers -EAGAIN and the core asks the next one, so a dead or lying peer
 * costs a fallback, never an error the reader sees. Neither the FUSE
 * adapter nor the cache knows which source answered.
 *
 * With storage as the only source, a fetch is one direct call: no wrapper,
 * no allocation.
 */
#ifndef EPOCHFS_SOURCE_H
#define EPOCHFS_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "index.h"

/* RES bytes in BUF, or -errno; BUF is valid only during the call. */
typedef void (*source_done_fn)(void *arg, ssize_t res, const void *buf);

struct source {
	const char *name;
	void *ctx;
	/* Reads LEN bytes at OFF of entry ID (REL: its path below SOURCE) as of
	 * version V, into BUF, or into a buffer of the source's own when BUF is
	 * NULL. Calls DONE exactly once, on any thread, with no lock held:
	 * LEN bytes (fewer only at the end of the file), -EAGAIN to pass the
	 * read to the next source, or another -errno as the final answer
	 * (-ESTALE: the file is no longer at version V). */
	void (*read)(void *ctx, uint32_t id, const char *rel, const struct index_version *v,
		     off_t off, size_t len, void *buf, source_done_fn done, void *arg);
};

#endif
