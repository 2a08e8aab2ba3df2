/* prefetch.h - order-aware prefetch: the thread that fetches what a job's
 * order says comes next, ahead of its readers.
 *
 * The orders come from .epochfs/order/ (ns/order.h); fetched items go where
 * a miss's would (plan.h): the RAM cache where MinIO admits them, the SSD
 * tier, else staging (fs/store/staging.h), where a reader finds them. This
 * module is the thread alone: it keeps up to `window` files past each
 * stream's head fetched, within staging's room and a bound on fetches in
 * flight, asks the kernel first whether it caches a file above the mount
 * (a probe: nothing to fetch then), and sweeps staged items whose readers
 * went past them.
 *
 * Thread safety: prefetch_wake(), prefetch_probed() and
 * prefetch_reader_miss() from any thread.
 * Lock order: prefetch.lock -> order.lock -> staging.lock; the thread holds
 * none of them while it fetches or probes.
 */
#ifndef EPOCHFS_PREFETCH_H
#define EPOCHFS_PREFETCH_H

#include <stdint.h>

#define PREFETCH_DEFAULT_MEM (64ull << 20)
#define PREFETCH_DEFAULT_WINDOW 4096u

struct core;
struct order;
struct staging;
struct prefetch;

struct prefetch_opts {
	unsigned window;            /* files fetched past a stream's head; 0: default */
	unsigned inflight;          /* item fetches at once; 0: 64 */
};

struct prefetch_stats {
	uint64_t fetched_bytes;     /* bytes the prefetcher read (into a cache or staging) */
	uint64_t cached_bytes;      /* of those, kept by the RAM cache or the tier */
	uint64_t resident;          /* files not fetched: cached above the mount */
};

/* A prefetcher for C, following ORDER, staging into ST. Nothing runs
 * before prefetch_start(). 0 and *OUT, or -ENOMEM. */
int prefetch_new(struct core *c, struct order *order, struct staging *st, const struct prefetch_opts *o,
		 struct prefetch **out);
int prefetch_start(struct prefetch *pf);
/* Stops the thread, waits for the fetches in flight, frees. NULL is fine. */
void prefetch_free(struct prefetch *pf);
void prefetch_get_stats(struct prefetch *pf, struct prefetch_stats *s);

/* There may be work (an order grew, a head moved, staging has room). */
void prefetch_wake(struct prefetch *pf);
/* A reader's miss on item CHUNK of file ID found nothing staged: the
 * prefetcher fetches none of that file's items up to CHUNK any more (its
 * reader is past them). NULL is fine. */
void prefetch_reader_miss(struct prefetch *pf, uint32_t id, uint32_t chunk);
/* The kernel's answer to a probe the thread sent (core_probe_fn):
 * RESIDENT, the file is cached above the mount and is not fetched. */
void prefetch_probed(struct prefetch *pf, void *cookie, int resident);

#endif
