/* staging.h - items fetched ahead of their readers that no cache kept.
 *
 * The prefetcher fetches what a job's order says comes next. An item the
 * RAM cache admits goes there; one the SSD tier takes goes there; the rest
 * waits here, in a bounded store beside the two caches, until a reader
 * takes it: then it is freed (training reads a file once an epoch, so an
 * item served is an item done with). An entry is one item (file ID, piece
 * CHUNK) at one version; a read at another version never sees it.
 *
 *   staging_begin()   an entry LOADING, its buffer handed to the sources
 *   staging_landed()  READY (or DEAD: the fetch failed); waiters run
 *   staging_take()    a reader's miss: HIT (pinned), WAIT (on its way), NONE
 *   staging_done_with()  the reader served N bytes; all served: freed
 *
 * Entries belong to a GROUP (the prefetcher's stream) at a PLACE in its
 * order, so a stream that starts over drops its entries and a sweep frees
 * those its readers went past (wasted).
 *
 * Memory: LIMIT bytes of entries and reservations together (the prefetcher
 * reserves a file's bytes when it chooses it, before the fetch begins, so
 * a batch of fetches cannot overshoot). A lower limit (memory pressure)
 * drops READY entries nobody holds, newest fetches first (the furthest
 * ahead of the readers), down to it.
 *
 * Thread safety: every function may be called from any thread. One mutex,
 * a leaf: no callback runs under it but the sweep's STALE, which must take
 * no lock of its own. Waiters and the room callback run with no lock held.
 */
#ifndef EPOCHFS_STAGING_H
#define EPOCHFS_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "store/index.h"

struct staging;

enum staging_take { STAGING_NONE, STAGING_HIT, STAGING_WAIT };

/* A staged item a reader waited for has landed: DATA (LEN bytes, pinned
 * until staging_done_with), or NULL if its fetch failed. */
typedef void (*staging_wait_fn)(void *arg, const void *data, size_t len);

struct staging_stats {
	uint64_t bytes;             /* gauge: entries, loading and ready */
	uint64_t reserved;          /* gauge: bytes reserved, not begun */
	uint64_t peak;              /* most bytes at once */
	uint64_t limit;             /* gauge */
	uint64_t hits;              /* reads served from an entry */
	uint64_t late;              /* reads that waited for an entry on its way */
	uint64_t wasted_bytes;      /* bytes freed unread (passed, restarted, changed, shrunk) */
	uint64_t shrunk_bytes;      /* of those, dropped to meet a lower limit */
};

/* A store of at most LIMIT bytes. ROOM(ARG) runs (no lock held) whenever
 * bytes are freed, so a producer waiting for room can go on; NULL: none.
 * 0 and *OUT, or -ENOMEM. */
int staging_new(uint64_t limit, void (*room)(void *arg), void *arg, struct staging **out);
/* Frees every entry. No fetch may be in flight. NULL is fine. */
void staging_free(struct staging *s);

/* Bytes that can still be reserved or begun: LIMIT less entries and
 * reservations (0 when over). */
uint64_t staging_room(struct staging *s);
/* Changes the limit; entries over it go (see above). Returns bytes freed. */
uint64_t staging_set_limit(struct staging *s, uint64_t limit);
/* The same, only if LIMIT is under the limit now (another thread may set a
 * higher one later). Calls nothing back: fine under a caller's lock. */
uint64_t staging_lower_limit(struct staging *s, uint64_t limit);
/* Reserves BYTES, or what room is left if less: returns the bytes
 * reserved, 0 when there is no room. An empty store (no entry, no
 * reservation) grants up to FLOOR past its limit, so that a limit lowered
 * to nearly nothing (the cache full before an order came, memory
 * pressure) still lets one item through at a time; that is the most the
 * store can ever be over its limit. A limit of 0 grants nothing. */
uint64_t staging_reserve(struct staging *s, uint64_t bytes, uint64_t floor);
/* 1 if staging_reserve(BYTES, FLOOR) would grant all of BYTES now. */
int staging_fits(struct staging *s, uint64_t bytes, uint64_t floor);
void staging_unreserve(struct staging *s, uint64_t bytes);

/* 1 if an entry for (ID, CHUNK) exists, in any state. */
int staging_has(struct staging *s, uint32_t id, uint32_t chunk);

/* A new LOADING entry for (ID, CHUNK) at version V, LEN bytes, fetched for
 * GROUP at PLACE: its buffer, which the caller fills and then reports with
 * staging_landed(). *RESERVED (may be NULL) is the caller's reservation:
 * up to LEN of it becomes the entry's bytes. NULL: one exists already, or
 * no memory. */
void *staging_begin(struct staging *s, uint32_t id, uint32_t chunk, const struct index_version *v,
		    size_t len, uint32_t group, uint32_t place, uint64_t *reserved);
/* The fetch into (ID, CHUNK)'s buffer ended: OK, all LEN bytes are there.
 * Its waiters run now, here. */
void staging_landed(struct staging *s, uint32_t id, uint32_t chunk, int ok);

/* A reader's miss on (ID, CHUNK) at version V. HIT: *DATA, *LEN (the whole
 * item) pinned until staging_done_with(). WAIT (only with FN): FN(ARG, ...)
 * runs once when it lands, pinned likewise. NONE: not staged, or at
 * another version (that entry is dropped: never served). */
enum staging_take staging_take(struct staging *s, uint32_t id, uint32_t chunk, const struct index_version *v,
			       const void **data, size_t *len, staging_wait_fn fn, void *arg);
/* A reader is done with (ID, CHUNK), having served SERVED of its bytes
 * (0: it did not use it). Freed once all its bytes were served. */
void staging_done_with(struct staging *s, uint32_t id, uint32_t chunk, size_t served);

/* Drops GROUP's entries (its order started over); each is freed now, or
 * by its last reader, or when its fetch lands. ROOM is not called: this
 * runs under the order lock, and ROOM may take the prefetcher's. */
void staging_drop_group(struct staging *s, uint32_t group);
/* Drops the entries STALE(ARG, group, place) says are past use. */
void staging_sweep(struct staging *s, int (*stale)(void *arg, uint32_t group, uint32_t place), void *arg);

void staging_get_stats(struct staging *s, struct staging_stats *st);

#endif
