/* tier.h - the SSD tier: a second no-eviction cache on local disks, below RAM.
 *
 * A dataset larger than RAM reads (1 - RAM/D) of itself from storage every
 * epoch, while training nodes usually carry local NVMe no cache used. With
 * --cache-dir DIR (several for several disks), an item the RAM cache
 * cannot admit is written to the tier while its budget (--cache-dir-size)
 * lasts, and the tier, like RAM, never evicts: every epoch reads the same
 * items from it. A read passes kernel page cache -> RAM -> tier -> owner
 * peer -> storage.
 *
 * Each directory holds DIR/epochfs-tier/ (persist.h: lock, owner, table,
 * and `arena`, the data file, sparse at the budget's length). Items are
 * placed on 4 KiB boundaries and read with O_DIRECT where the filesystem
 * takes it (tmpfs does not: buffered there), through one io_uring and its
 * completion thread; every read is checked against the item's xxh3, and a
 * mismatch or an I/O error drops the item and passes the read on (-EAGAIN)
 * to the next source: a dying disk costs storage reads, never a wrong byte
 * or an error a reader sees. Writes go through one writer thread, after the
 * reader that brought the bytes has been answered; an item is recorded in
 * the table once written, so a restarted daemon adopts it (its version
 * checked against SOURCE at mount, its bytes at every read).
 *
 * A disk is never filled past a floor (5% of its filesystem): the tier
 * stops admitting there. A write that fails (read-only, full, I/O error)
 * or a directory that vanished or was replaced (checked every second)
 * takes that directory out of admission; its items are still served while
 * their reads succeed.
 *
 * Thread safety: every function may be called from any thread. The item
 * table is behind one mutex (the tier's work is I/O: tens of thousands of
 * items a second at most); no callback runs under it.
 */
#ifndef EPOCHFS_TIER_H
#define EPOCHFS_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/index.h"
#include "store/persist.h"
#include "store/source.h"

#define TIER_MAX_DIRS 8
#define TIER_FLOOR_PERCENT 5        /* of each directory's filesystem, kept free */

struct tier;

struct tier_opts {
	const char *dirs[TIER_MAX_DIRS];
	uint64_t sizes[TIER_MAX_DIRS];  /* bytes each may hold; 0: what the data needs, within the floor */
	unsigned ndirs;
	const char *source;         /* SOURCE's absolute path */
	const char *mountpoint;
	uint32_t chunk;
	uint64_t max_items;         /* sizes the table */
	uint64_t need;              /* bytes the dataset's items take (the default size) */
	int persist;                /* adopt and record (off: the tier starts empty every time) */
	int buffered;               /* never O_DIRECT (--cache-dir-io buffered) */
	uint64_t manifest_id;       /* manifest_id() of --manifest, 0: none; a tier written under
				     * another (or none) is discarded, not read back unchecked */
};

struct tier_stats {
	uint64_t capacity, used, items;
	uint64_t hits, hit_bytes;   /* reads served from the tier */
	uint64_t admitted, admitted_bytes;      /* items written */
	uint64_t full;              /* admissions refused: budget spent, floor reached, writes queued */
	uint64_t read_errors, write_errors, corrupt, stale;
	uint64_t adopted, adopted_bytes, dropped;       /* at mount */
	unsigned dirs, dirs_down;
	int direct;                 /* O_DIRECT on every directory */
};

/* Opens the directories (made when absent) and adopts what they hold
 * (RESOLVE and PATH as for persist_adopt_items()); no thread yet
 * (tier_start()). Each DIR must be trusted (util/trust.h:
 * nobody else can change it, or it is sticky) and DIR/epochfs-tier is
 * this user's, 0700. Returns 0, or -EBUSY (another daemon holds a
 * directory), -ENOSPC (a directory's filesystem is already past its
 * floor, or cannot hold the size asked), -EPERM (not trusted), -errno;
 * ERR gets one line. At its default size a tier counts its own data as
 * room it has, and never drops at adoption what its table holds. */
int tier_open(const struct tier_opts *o, persist_resolve_fn resolve, persist_path_fn path, void *arg,
	      struct tier **out, char *err, size_t errlen);
/* Starts the tier's threads: its ring's completion thread and the writer.
 * Apart from tier_open() because the daemon forks into the background
 * between the two (fuse_daemonize(), which keeps no thread): tier_open()
 * checks and reports before the mount, this runs after. Before any read,
 * fill or sync. 0, or -errno with ERR's one line and nothing started. */
int tier_start(struct tier *t, char *err, size_t errlen);
/* Waits for the writes queued, stops the threads, closes. NULL is fine,
 * and so is a tier never started. */
void tier_free(struct tier *t);

/* The tier as a source (source.h): serves an item it holds at version
 * IT->v, else -EAGAIN. */
void tier_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf, source_done_fn done,
	       void *arg);

/* Admission of item (ID, CHUNK) at version V, LEN bytes: NULL when the
 * tier holds or is writing it (*HELD set, may be NULL), or has no room;
 * else a claim, with *BUF a
 * buffer of LEN bytes (4 KiB aligned) to fill. tier_fill() ends the claim:
 * OK nonzero when *BUF holds the bytes (they are written and recorded
 * later, on the writer thread, which frees the buffer); zero gives the
 * room up unused. */
struct tier_claim;
struct tier_claim *tier_claim(struct tier *t, uint32_t id, uint32_t chunk, const struct index_version *v,
			      size_t len, void **buf, int *held);
void tier_fill(struct tier *t, struct tier_claim *cl, int ok);

/* 1 if the tier holds the item at version V (a hint: a read may still pass). */
int tier_holds(struct tier *t, uint32_t id, uint32_t chunk, const struct index_version *v);

/* 1 when no directory can take another item of CHUNK bytes (all full or
 * down): with peers, the node then lets its items spill to the next ones. */
int tier_is_full(struct tier *t);

void tier_get_stats(struct tier *t, struct tier_stats *s);
/* Waits until every queued write is done (tests, warm-up). */
void tier_sync(struct tier *t);

#endif
