/* cache.h - the MinIO cache: a RAM arena that admits until full, never evicts.
 *
 * Training reads every item once per epoch in a fresh random order. Under that
 * pattern LRU evicts each item just before it is wanted again; a cache that
 * admits items until its byte budget is spent and then keeps them forever
 * hits exactly its share of the dataset, every epoch (../docs/design.md).
 *
 * Items are whole files up to CHUNK bytes, and CHUNK-sized pieces of larger
 * files (so a 10 GB shard can be partly cached). An item is keyed by (entry
 * id, chunk index) and remembers the version of the file it came from: a
 * lookup with another version finds it stale, never serves it, and may admit
 * the new version while budget remains. Each item's xxh3 is taken when it is
 * admitted; with verify on, every hit is re-checked, and a mismatch is never
 * served: the item is dropped (counted in `corrupt`) and the same lookup goes
 * on as for an absent item (a fresh load while budget remains, else a miss).
 *
 * Concurrent misses of one item cause one load: the first caller gets
 * CACHE_LOAD and fills the item, the others get CACHE_WAIT and their waiter
 * is called back when the load ends. Nothing here blocks or does I/O; the
 * caller reads its source (storage, later a peer) into the arena memory.
 *
 * Memory: one arena reserved up front (MAP_NORESERVE, huge pages advised),
 * bump-allocated; data bytes never exceed the capacity. Item headers (about
 * 100 bytes each) and the lookup table are outside the budget and bounded by
 * max_items. The arena is anonymous memory, or a file on tmpfs mapped
 * shared (arena_file), which outlives the daemon: persist.h records its
 * items and a new daemon adopts them (cache_adopt). A file arena's pages
 * are allocated (fallocate) before any byte is written there, so a full
 * tmpfs refuses an admission instead of raising SIGBUS.
 *
 * Thread safety: all functions may be called from any thread. A hit takes no
 * lock; a load's start and end take one of 64 striped mutexes.
 */
#ifndef EPOCHFS_CACHE_H
#define EPOCHFS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "store/index.h"

struct cache;
struct citem;

struct cache_opts {
	uint64_t capacity;          /* data bytes at most; > 0 */
	uint32_t chunk;             /* item size for large files; > 0 */
	uint64_t max_items;         /* distinct items at most (sizes the table) */
	int verify;                 /* re-check xxh3 on every hit */
	int arena_file;             /* nonzero: the arena is the file ARENA_FD (tmpfs), mapped
				     * shared; it is at least CAPACITY bytes long */
	int arena_fd;               /* borrowed: the caller closes it after cache_free() */
	uint64_t fs_floor;          /* a file arena: bytes its filesystem keeps free; an admission
				     * that would go below is refused like a full filesystem */
};

/* What a persistent arena records (persist.h). READY: an item became
 * ready at arena offset OFF (its bytes are there and hashed). CUT: items
 * reaching past arena offset OFF are gone (memory given back); records of
 * them made before are void. Both are called before the event can be
 * observed by anyone that could outlive it: READY before the item is
 * served, CUT before any byte at or past OFF is handed out again. */
struct cache_persist_hooks {
	void (*ready)(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
		      uint64_t off, size_t len, uint64_t xxh);
	void (*cut)(void *arg, uint64_t off);
	void *arg;
};

/* Called once when a load this caller waited for ends: DATA/LEN are the
 * item's bytes, or DATA is NULL if the load failed (read the source). */
struct cache_waiter {
	void (*fn)(void *arg, const void *data, size_t len);
	void *arg;
	struct cache_waiter *next;  /* owned by the cache while queued */
};

enum cache_result {
	CACHE_HIT,                  /* ref->data holds the item, immutable */
	CACHE_LOAD,                 /* fill ref->data (ref->len bytes), then cache_loaded() */
	CACHE_WAIT,                 /* another caller loads it; the waiter will be called */
	CACHE_MISS,                 /* not cached and not admitted: read the source */
};

struct cache_ref {
	struct citem *item;
	void *data;
	size_t len;
	unsigned rd;                /* CACHE_HIT: the read section cache_put() leaves */
};

struct cache_stats {
	uint64_t capacity, used;    /* bytes; used counts stale and failed items too */
	uint64_t limit;             /* admissions stop here: capacity, less under pressure */
	uint64_t given_back;        /* bytes returned to the kernel under memory pressure */
	uint64_t given_back_items;  /* items dropped with them */
	uint64_t items;             /* items ready to serve */
	uint64_t hits, misses;      /* cache_get() results (WAIT counts as a hit) */
	uint64_t corrupt;           /* items dropped: checksum mismatch (hit or scrub) */
	uint64_t stale;             /* items found with an old version */
	uint64_t full;              /* admissions refused for lack of budget */
	uint64_t scrubbed_bytes;    /* bytes the scrubber re-checked */
	uint64_t scrub_passes;      /* full passes of the scrubber over the table */
	uint64_t prefaulted;        /* arena bytes made resident ahead of the fill */
	uint64_t adopted, adopted_bytes;        /* items taken over from a previous daemon */
	uint64_t no_space;          /* admissions refused: the arena file's filesystem is full */
	/* Large files in backings (cache_set_backing): */
	uint64_t backed_files, backed_bytes;    /* live backings, and their files' bytes */
	uint64_t backing_space;     /* budget charged to backings (part of used) */
	uint64_t backings_made, backings_retired, backing_failures;   /* counters */
};

/* Returns 0 and *OUT, or -EINVAL (bad options) / -ENOMEM. */
int cache_new(const struct cache_opts *o, struct cache **out);
/* Frees everything; no call may be in flight. */
void cache_free(struct cache *c);

/* Sets the hooks a persistent arena calls (NULL: none); before any load. */
void cache_set_persist_hooks(struct cache *c, const struct cache_persist_hooks *h);

/* Adoption of a previous daemon's arena, before the cache serves. Checks
 * that [OFF, OFF+LEN) lies in the capacity, starts on the arena's 64-byte
 * grain and that its bytes hash to XXH, then makes it a READY item of key
 * (ID, CHUNK) at version V (the caller has checked V against SOURCE).
 * Returns 0, -ERANGE (outside the arena), -EBADMSG (checksum mismatch:
 * not adopted, nothing counted), -EEXIST (the key is there already) or
 * -ENOMEM. Several threads may adopt at once. cache_adopt_done() then
 * puts the fill pointer at USED (past every adopted item; the space below
 * it that no item holds stays unused) and counts ITEMS and BYTES adopted. */
int cache_adopt(struct cache *c, uint32_t id, uint32_t chunk, const struct index_version *v,
		uint64_t off, size_t len, uint64_t xxh);
void cache_adopt_done(struct cache *c, uint64_t used);

/* Looks up chunk CHUNK of entry ID at version V; LEN is that chunk's length
 * (cache_chunk_len). W is queued only on CACHE_WAIT. W may be NULL: a
 * loading item then gives CACHE_WAIT with nothing queued (nor counted), so a
 * caller can keep the hit path free of allocation and retry with a waiter.
 * CACHE_HIT: ref->data is the caller's to read until cache_put(ref), which
 * it must call soon (the cache cannot give memory back meanwhile); a
 * waiter's callback may read DATA until it returns. */
enum cache_result cache_get(struct cache *c, uint32_t id, uint32_t chunk,
			    const struct index_version *v, size_t len,
			    struct cache_waiter *w, struct cache_ref *ref);
/* The same; with MAY_ADMIT zero, an absent item is CACHE_MISS (nothing
 * admitted, nothing counted), so a caller can decide whether to admit it
 * only when it is absent (the peer layer admits only owned items). */
enum cache_result cache_get_ex(struct cache *c, uint32_t id, uint32_t chunk,
			       const struct index_version *v, size_t len,
			       struct cache_waiter *w, struct cache_ref *ref, int may_admit);
/* 1 if chunk CHUNK of entry ID is READY at version V (a hint: it may go
 * before a read comes). Counts nothing, admits nothing, checks no bytes. */
int cache_holds(struct cache *c, uint32_t id, uint32_t chunk, const struct index_version *v);
/* 1 if an item of LEN bytes would be admitted now (under the limit and
 * the reserve), else 0. A hint: the answer may change before a read comes. */
int cache_has_room(struct cache *c, uint64_t len);
/* Ends a load begun by CACHE_LOAD: OK nonzero when ref->data holds the
 * bytes. Calls the waiters (outside any lock) before returning. */
void cache_loaded(struct cache *c, struct cache_ref *ref, int ok);

/* Counts a miss the caller decided not to admit (cache_get_ex with
 * MAY_ADMIT 0 counts nothing for an absent item). */
void cache_count_miss(struct cache *c);

/* Ends the use of a CACHE_HIT's bytes (nothing for other results). */
void cache_put(struct cache *c, struct cache_ref *ref);

void cache_get_stats(struct cache *c, struct cache_stats *s);

/* Memory pressure. cache_set_limit: admissions stop once LIMIT bytes are
 * used (at most the capacity; the capacity again lifts it): what is cached
 * stays. cache_give_back: first returns to the kernel the arena pages
 * made resident ahead of the fill that hold no item yet (all of them);
 * when they are fewer than BYTES, drops the most recently admitted items
 * for the rest (whole items) and returns their pages too. Either way the
 * limit comes down to what is left. Returns the bytes given back (the
 * empty pages only, or 0, when an item there is still loading: call
 * again later). Never loses a byte a
 * reader is copying: it waits for the readers inside those items to leave.
 * Calls from one thread (the pressure watcher) at a time. */
void cache_set_limit(struct cache *c, uint64_t limit);
uint64_t cache_give_back(struct cache *c, uint64_t bytes);
/* Admissions also stop BYTES short of the capacity (0: none), whatever the
 * limit: room kept for another user of the same budget (the prefetcher's
 * staging, while a job sends its order). What is cached stays. Any thread. */
void cache_set_reserve(struct cache *c, uint64_t bytes);

/* Chunk maths: how many items a file of SIZE bytes makes, and the length of
 * item I (0 for I past the end). A file of 0 bytes makes no item.
 * cache_span(): how many items bytes [OFF, OFF+LEN) touch (LEN > 0), and
 * the first in *FIRST (may be NULL): more than 1 means the range crosses an
 * item boundary. */
static inline uint32_t cache_span(uint64_t off, uint64_t len, uint32_t chunk, uint32_t *first)
{
	uint64_t a = off / chunk, b = (off + len - 1) / chunk;

	if (first)
		*first = (uint32_t)a;
	return (uint32_t)(b - a + 1);
}
uint32_t cache_chunks(uint64_t size, uint32_t chunk);
size_t cache_chunk_len(uint64_t size, uint32_t chunk, uint32_t i);

/* Re-checks the checksums of ready items, going on from where the last call
 * stopped (wrapping round the table), until about MAX_BYTES were hashed or
 * every slot was looked at once. A mismatch is dropped exactly as a failed
 * --verify hit is (counted in `corrupt`, never served). Returns the bytes
 * hashed. Calls are serialized; hits and loads go on meanwhile. */
uint64_t cache_scrub(struct cache *c, uint64_t max_bytes);

/* Makes the first UPTO bytes of the arena resident (MADV_POPULATE_WRITE;
 * rounded up to whole pages, never past the capacity's last page), so loads copy into memory that is already there
 * instead of faulting it in. Item bytes are never changed. Returns the bytes
 * newly made resident (0 when already that far) or -errno (-EINVAL: the
 * kernel has no MADV_POPULATE_WRITE). One caller at a time (a background
 * thread); hits and loads go on meanwhile. */
int64_t cache_prefault(struct cache *c, uint64_t upto);

/* Large files (docs/design.md, "Kernel passthrough"). From MIN_SIZE bytes
 * on (0: never, the default), a file's items are placed in a backing of
 * its own (store/backing.h): a memfd holding the whole file at its own
 * offsets, charged to the budget whole at its first item's admission (an
 * arena range of its length that the arena never touches; when the budget
 * cannot hold the whole file, its items go to the arena as before). Items
 * are served and checked as arena items are; give-backs drop such a file
 * whole; a stale or corrupt item retires its file's backing (the file
 * gets a new one) and cache_reap() frees a retired backing's memory once
 * no reader is in it. Backed items are not recorded (persist hooks): a
 * restart keeps only the arena's items. Any thread, at any time. */
void cache_set_backing(struct cache *c, uint64_t min_size);
/* How many files in backings the cache holds whole (a passthrough open
 * may use them): walks the backings, for the counters a user reads. */
uint64_t cache_backed_whole(struct cache *c);
/* A read-only descriptor of the backing of file ID at version V when the
 * cache holds the whole file there (every item ready): the caller gives it
 * to the kernel and closes it. -ENOENT when not, or -errno. */
int cache_backing_fd(struct cache *c, uint32_t id, const struct index_version *v);
/* Frees the memory of retired backings (waits out readers like a
 * give-back); how many. The background thread calls it; cheap when there
 * is nothing to do. Calls from one thread at a time. */
unsigned cache_reap(struct cache *c);

/* Debug hook: flips one bit in the middle of the first ready item at or after
 * table slot START and reports its key. -ENOENT if no item is ready. */
int cache_debug_corrupt_any(struct cache *c, uint64_t start, uint32_t *id, uint32_t *chunk);

/* Test hook: flips one bit of byte OFF of a ready item. -ENOENT if absent. */
int cache_debug_corrupt(struct cache *c, uint32_t id, uint32_t chunk, size_t off);

#endif
