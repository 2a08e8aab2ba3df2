/* backing.h - per-file backing files for the RAM cache: the whole bytes of
 * one large file in a memfd of exactly its size, so the kernel can serve
 * the file by FUSE passthrough (which has no offset translation: byte 0 of
 * the backing file must be byte 0 of the file) while the cache serves its
 * chunk items from the same pages. One copy, counted once.
 *
 * A backing belongs to one file (index id) at one version. It takes SPAN
 * bytes of the cache's budget at once, as a range of the arena's offsets
 * that the arena never touches (the cache charges it through a reserve
 * callback, so give-backs and records of cuts see it like any item). The
 * registry keeps, under one mutex:
 *   - the live backings by id (at most one per id), found by admissions
 *     and by OPEN;
 *   - every backing whose range is still charged, newest (highest offset)
 *     first, for the cache's give-back and for the arena's page work,
 *     which must skip these ranges.
 *
 * States: LIVE (takes items, found by id) -> DYING (a give-back is cutting
 * past it: found by nobody; back to LIVE if the give-back gives up) ->
 * gone; or LIVE -> RETIRED (a newer version took its place, or one of its
 * items died: never found again, nor written) -> REAPING (the cache is
 * retiring its items) -> FREED (its memory given back; its range stays
 * charged until a cut reaches it, as a dead arena item's does). Memory is
 * freed only by backing_free_dying() and backing_reap_end(), which the
 * cache calls after waiting out every reader of the items in them. The kernel keeps its own reference to a
 * memfd it was given (backing_open_fd): a file open in passthrough reads
 * on until it is closed, whatever happens here.
 *
 * Thread safety: every function may be called from any thread; the set's
 * mutex is a leaf (the reserve callback runs under it and must take no
 * lock).
 */
#ifndef EPOCHFS_BACKING_H
#define EPOCHFS_BACKING_H

#include <stddef.h>
#include <stdint.h>

#include "store/index.h"

struct backing;
struct backing_set;

/* Where one backing's items live: the cache reads these once, at
 * admission. */
struct backing_place {
	char *map;                  /* the file's bytes, mapped shared and writable */
	uint64_t off;               /* its range of the arena's offsets: [off, off + span) */
	uint64_t span;
};

/* MAX_FILES: backings alive at once at most (0: a bound from the process's
 * open-file and mapping limits). 0 and *OUT, or -ENOMEM. */
int backing_set_new(uint64_t max_files, struct backing_set **out);
/* Unmaps and closes everything; no reader may be left. NULL is fine. */
void backing_set_free(struct backing_set *s);

/* Charges LEN bytes of the budget: 0 and *OFF (the range's start), or
 * -ENOSPC. Runs under the set's mutex. */
typedef int (*backing_reserve_fn)(void *arg, uint64_t len, uint64_t *off);

/* The live backing of file ID at version V, made (a memfd of V->size
 * bytes, its range charged through RESERVE) when there is none. CHUNK is
 * the cache's item size. Returns 1 (made) or 0 (found) with *B and *P;
 * -ENOSPC (no budget), -ESTALE (a newer version of the file is live: the
 * caller read an old one), -EMFILE (as many backings as allowed), or the
 * -errno of memfd_create, ftruncate or mmap. A live backing of an older
 * version is retired first. */
int backing_claim(struct backing_set *s, uint32_t id, const struct index_version *v, uint32_t chunk,
		  backing_reserve_fn reserve, void *arg, struct backing **b, struct backing_place *p);
/* 1 if file ID at version V has a live backing (its space is charged). */
int backing_live(struct backing_set *s, uint32_t id, const struct index_version *v);

/* An item of B became ready (+1) or left ready (-1). */
void backing_count(struct backing *b, int delta);
/* One of B's items died (stale, corrupt): B is retired, its bytes never
 * change again, and the next admission of the file makes a new one. */
void backing_retire(struct backing_set *s, struct backing *b);
/* 1 if B is retired, being reaped or freed (its items must go). */
int backing_retired(struct backing *b);

/* A read-only descriptor of the memfd of file ID at version V, when it is
 * live and every one of its items is ready: the caller hands it to the
 * kernel and closes it. -ENOENT (none, or not whole), -errno. */
int backing_open_fd(struct backing_set *s, uint32_t id, const struct index_version *v);

/* ---- the cache's give-back and page work ------------------------------- */

/* Marks DYING every live backing whose range reaches past CUT and lowers
 * *LOW to the lowest start among them and the retired ones that reach
 * past it. Returns how many were marked. */
unsigned backing_mark_past(struct backing_set *s, uint64_t cut, uint64_t *low);
/* The give-back gave up: DYING backings are LIVE again. */
void backing_unmark(struct backing_set *s);
/* 1 if B is DYING. */
int backing_dying(struct backing *b);
/* After the readers drained: frees the DYING backings and forgets every
 * backing whose range reaches past LOW. Returns the bytes of memory freed. */
uint64_t backing_free_dying(struct backing_set *s, uint64_t low);
/* Reaping the retired: backing_reap_begin() takes every RETIRED backing
 * into REAPING and says how many; the cache then retires their items,
 * waits out their readers and calls backing_reap_end(): FREE nonzero frees
 * their memory (FREED), zero puts them back (a load still writes into
 * one). backing_reaping(B): 1 if B is among them. One reaper at a time. */
unsigned backing_reap_begin(struct backing_set *s);
int backing_reaping(struct backing *b);
unsigned backing_reap_end(struct backing_set *s, int free);

/* The first charged range that ends past FROM and starts before TO, as
 * [*START, *END): 1, or 0 when none. The arena skips these. */
int backing_range(struct backing_set *s, uint64_t from, uint64_t to, uint64_t *start, uint64_t *end);

struct backing_stats {
	uint64_t files, bytes;      /* live (or dying) backings and the bytes of their files */
	uint64_t space;             /* budget the charged ranges hold (all states) */
	uint64_t made, retired, failed;     /* counters: made, retired, memfd failures */
};
/* Counters only: cheap (one lock, no walk). */
void backing_get_stats(struct backing_set *s, struct backing_stats *st);
/* Live backings with every item ready: walks them all (for the counters
 * a user reads, not for hot paths). */
uint64_t backing_whole(struct backing_set *s);

#endif
