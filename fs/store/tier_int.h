/* tier_int.h - what the SSD tier's two files share: tier.c (the table,
 * adoption, reads, set-up) and tier_write.c (admission, space and its
 * floor, the writer thread). Not for other modules: tier.h is the
 * contract.
 *
 * Locks, all leaves, one held at a time, no callback under any: lock (the
 * table and every directory's bump pointer), recent_lock (the items kept
 * after their read), w.lock (the write queue; the writer's worker lock).
 */
#ifndef EPOCHFS_TIER_INT_H
#define EPOCHFS_TIER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/index.h"
#include "store/persist.h"
#include "store/tier.h"
#include "util/worker.h"

#define ALIGN 4096ull
#define RECENT 8                        /* items kept after their read, for the rest of a file */

enum { T_FREE = 0, T_WRITING, T_READY, T_DEAD };

struct titem {
	uint64_t key;
	struct index_version v;
	uint64_t off;
	uint64_t xxh;
	uint32_t len;
	uint8_t dir;
	uint8_t state;
};

struct tdir {
	char *path;
	struct persist *p;
	int fd;
	int direct;
	dev_t dev;
	ino_t ino;
	uint64_t size;              /* budget */
	uint64_t used;              /* bump pointer (table lock) */
	uint64_t checked;           /* used at the last floor check */
	uint64_t floor;             /* bytes its filesystem keeps free */
	int down;                   /* atomic: admits nothing (vanished, failed write, floor) */
};

/* An item just read and checked, kept for the next requests of the same
 * file: the kernel asks for a file larger than its request size (128 KiB
 * here) in several requests, and each would read the whole item again. */
struct recent {
	uint64_t key, off;
	uint8_t dir;
	uint32_t len;
	void *buf;                  /* NULL: empty */
	uint64_t used;              /* the clock of its last use */
};

struct tier {
	struct tdir dirs[TIER_MAX_DIRS];
	pthread_mutex_t recent_lock;
	struct recent recent[RECENT];
	uint64_t clock;
	unsigned ndirs;
	uint32_t chunk;
	pthread_mutex_t lock;       /* the table, the bump pointers */
	struct titem *slots;
	uint64_t mask;
	unsigned next_dir;          /* round-robin over directories with room */
	struct uring *ring;         /* the reads */
	struct worker w;            /* the writer; w.lock guards the write queue */
	pthread_cond_t wq_idle;     /* on w.lock: the queue ran empty */
	struct tier_claim *wq_head, *wq_tail;       /* w.lock */
	uint64_t wq_bytes;          /* w.lock */
	int writing;                /* w.lock: the writer holds a claim */
	struct tier_stats st;       /* atomic counters */
};

#define INC(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)

static inline uint64_t tier_key(uint32_t id, uint32_t chunk)
{
	return (uint64_t)id << 32 | chunk;
}

static inline uint64_t tier_round_up(uint64_t n)
{
	return (n + ALIGN - 1) & ~(ALIGN - 1);
}

/* tier.c: the slot of KEY, or the free slot where it would go. Table lock
 * held. */
uint64_t tier_slot(struct tier *t, uint64_t key);

/* tier_write.c: makes the writer's worker and queue (no thread yet; 0 or
 * -errno with nothing to undo), and starts its thread (0 or -errno). */
int tier_writer_init(struct tier *t);
int tier_writer_start(struct tier *t);
/* Lets the writer write what is queued, stops it (if started) and frees
 * the worker. After tier_writer_init(). */
void tier_writer_stop(struct tier *t);

#endif
