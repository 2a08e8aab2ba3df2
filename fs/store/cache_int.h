/* cache_int.h - what the RAM cache's two files share: cache.c (the table,
 * items, admission, hits, loads, checksums) and cache_mem.c (the arena's
 * memory: its pages allocated, made resident and given back, retired
 * backings freed). Not for other modules: cache.h is the contract.
 */
#ifndef EPOCHFS_CACHE_INT_H
#define EPOCHFS_CACHE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "store/backing.h"
#include "store/cache.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23      /* Linux 5.14 */
#endif
#define PREFAULT_STEP (32ull << 20)
#define PAGE_BYTES 4096ull

enum { ST_LOADING = 1, ST_READY, ST_DEAD };

#define CACHE_STRIPES 64
#define CACHE_ALIGN 64
#define RD_STRIPES 64

struct rd_stripe {
	uint64_t n[2];                  /* atomic: threads inside a read section, per phase */
	char pad[48];
};

struct citem {
	uint64_t key;
	struct index_version v;
	char *data;
	size_t len;
	uint64_t off;                   /* where it is charged: its arena offset, or its place in
					 * its backing's range (set before data is published) */
	struct backing *bk;             /* its file's backing, or NULL: the arena holds it */
	uint64_t xxh;                   /* set before READY is published */
	int state;                      /* atomic */
	struct cache_waiter *waiters;   /* stripe lock, while LOADING */
	struct citem *all_next;         /* every item ever made, for cache_free */
};

struct cache {
	struct cache_opts o;
	char *arena;
	uint64_t used;                  /* atomic: bytes handed out */
	struct citem **slots;           /* atomic pointers */
	uint64_t mask;
	struct citem *all;              /* atomic push-only list */
	pthread_mutex_t stripes[CACHE_STRIPES];
	struct cache_stats st;          /* atomic counters (capacity/used/items derived) */
	pthread_mutex_t scrub_lock;     /* one scrubber at a time (its cursor) */
	uint64_t scrub_cursor;          /* next slot the scrubber looks at */
	uint64_t ready;                 /* atomic */
	uint64_t prefaulted;            /* atomic; arena bytes made resident by cache_prefault */
	uint64_t limit;                 /* atomic: admissions stop here (<= capacity) */
	uint64_t reserve;               /* atomic: ... or this far short of the capacity */
	uint64_t given_back, given_back_items;  /* atomic counters */
	pthread_mutex_t give_lock;      /* one giver at a time */
	struct rd_stripe rd[RD_STRIPES];
	unsigned rd_phase;              /* atomic: the counter (n[phase & 1]) readers enter */
	struct cache_persist_hooks ph;  /* set before use; fn NULL: none */
	uint64_t reserved;              /* atomic: file arena bytes allocated (fallocate) */
	pthread_mutex_t reserve_lock;   /* one allocator of the file at a time */
	struct backing_set *bs;         /* the large files' memfds (backing.h) */
	uint64_t backing_min;           /* atomic: files this large go to a backing; 0: none do */
	pthread_mutex_t prefault_lock;  /* a prefault step, or the arena pages under a new backing */
};

#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_RELAXED)

/* cache.c: IT left READY for DEAD (see there for RETIRE). */
void cache_lost(struct cache *c, struct citem *it, int retire);

/* cache_mem.c: a file arena's pages allocated up to END (0 or -ENOSPC,
 * -errno); the arena pages under a new backing's range given back. */
int cache_arena_reserve(struct cache *c, uint64_t end);
void cache_arena_unback(struct cache *c, uint64_t off, uint64_t span);

#endif
