/* cache_mem.c - the RAM cache's memory; see cache.h for the contract,
 * cache.c's DESIGN for the arena.
 *
 * Pages: a file arena's are allocated (fallocate) before anything is
 * written there; the prefaulter makes them resident ahead of the fill;
 * a give-back returns them. Every one of these skips the ranges charged to
 * large files' backings (backing.h), whose bytes live in their memfds: a
 * page there would be a second copy nobody reads.
 *
 * Give-backs and reaps take items out of service with no lock on the hit
 * path: they mark the items DEAD, then wait out every read section that
 * may have begun before (rd_drain), and only then free the bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>

#include "store/cache_int.h"

/* Calls FN on the parts of [FROM, TO) (whole pages) that no backing's
 * range covers: the arena never touches those ranges (backing.h). Stops
 * at the first error. */
static int64_t arena_parts(struct cache *c, uint64_t from, uint64_t to,
			   int64_t (*fn)(struct cache *c, uint64_t from, uint64_t to))
{
	uint64_t s, e;
	int64_t sum = 0, r;

	while (from < to) {
		if (!backing_range(c->bs, from, to, &s, &e))
			s = e = to;
		if (s > from && (r = fn(c, from, s)) < 0)
			return r;
		sum += s > from ? (int64_t)(s - from) : 0;
		from = e;
	}
	return sum;
}

static int64_t part_len(struct cache *c, uint64_t from, uint64_t to)
{
	(void)c, (void)from, (void)to;
	return 0;
}

static int64_t part_allocate(struct cache *c, uint64_t from, uint64_t to)
{
	return fallocate(c->o.arena_fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from)) < 0 ? -errno : 0;
}

/* A file arena: allocates its pages up to END (rounded up to a page) so a
 * write there cannot fault on a full filesystem. 0 or -errno (-ENOSPC). */
int cache_arena_reserve(struct cache *c, uint64_t end)
{
	int err = 0;

	if (!c->o.arena_file || end <= __atomic_load_n(&c->reserved, __ATOMIC_ACQUIRE))
		return 0;
	end = (end + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
	if (end > c->o.capacity)
		end = c->o.capacity;
	pthread_mutex_lock(&c->reserve_lock);
	uint64_t from = __atomic_load_n(&c->reserved, __ATOMIC_ACQUIRE);
	struct statfs sf;
	if (end > from && c->o.fs_floor && fstatfs(c->o.arena_fd, &sf) == 0 &&
	    (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < c->o.fs_floor + (uint64_t)arena_parts(c, from, end, part_len)) {
		err = -ENOSPC;      /* others need the rest (PyTorch's batches on /dev/shm) */
	} else if (end > from) {
		int64_t r = arena_parts(c, from, end, part_allocate);
		if (r < 0)
			err = (int)r;
		else
			__atomic_store_n(&c->reserved, end, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->reserve_lock);
	return err;
}

/* Gives the arena's pages in [FROM, TO) back to the kernel (FROM page
 * aligned). No item may be read or written there. */
static void arena_release(struct cache *c, uint64_t from, uint64_t to)
{
	if (to <= from)
		return;
	if (!c->o.arena_file) {
		madvise(c->arena + from, to - from, MADV_DONTNEED);
		return;
	}
	pthread_mutex_lock(&c->reserve_lock);
	fallocate(c->o.arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from));
	if (__atomic_load_n(&c->reserved, __ATOMIC_ACQUIRE) > from)
		__atomic_store_n(&c->reserved, from, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->reserve_lock);
}

/* The arena pages under a new backing's range were perhaps made resident
 * (prefault) or allocated (a file arena) before the range was charged:
 * they go back. The lock orders it after a prefault step in flight, which
 * skips the range from then on. */
void cache_arena_unback(struct cache *c, uint64_t off, uint64_t span)
{
	pthread_mutex_lock(&c->prefault_lock);
	if (c->o.arena_file) {
		pthread_mutex_lock(&c->reserve_lock);
		fallocate(c->o.arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)span);
		pthread_mutex_unlock(&c->reserve_lock);
	} else {
		madvise(c->arena + off, span, MADV_DONTNEED);
	}
	pthread_mutex_unlock(&c->prefault_lock);
}

static int64_t part_populate(struct cache *c, uint64_t from, uint64_t to)
{
	/* Touches each page for writing without changing its bytes, so
	 * racing a load that writes the same pages is harmless. */
	return madvise(c->arena + from, to - from, MADV_POPULATE_WRITE) < 0 ? -errno : 0;
}

int64_t cache_prefault(struct cache *c, uint64_t upto)
{
	uint64_t done = __atomic_load_n(&c->prefaulted, __ATOMIC_RELAXED), start = done;
	/* Never past the limit: pages given back stay given back. */
	uint64_t end = (__atomic_load_n(&c->limit, __ATOMIC_RELAXED) + PAGE_BYTES - 1) &
		       ~(uint64_t)(PAGE_BYTES - 1);
	/* Whole pages only, so the next call starts page-aligned, as madvise
	 * requires; the mapping itself runs to the capacity's last page. */
	uint64_t target = upto > end ? end : (upto + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);

	while (done < target) {
		uint64_t n = target - done < PREFAULT_STEP ? target - done : PREFAULT_STEP;
		/* Around the backings' ranges, whose bytes are in their memfds. */
		pthread_mutex_lock(&c->prefault_lock);
		int64_t err = cache_arena_reserve(c, done + n);
		if (err == 0)
			err = arena_parts(c, done, done + n, part_populate);
		pthread_mutex_unlock(&c->prefault_lock);
		if (err < 0)
			return err;
		done += n;
		__atomic_store_n(&c->prefaulted, done, __ATOMIC_RELAXED);
	}
	return (int64_t)(done - start);
}


void cache_set_reserve(struct cache *c, uint64_t bytes)
{
	__atomic_store_n(&c->reserve, bytes, __ATOMIC_SEQ_CST);
}

void cache_set_limit(struct cache *c, uint64_t limit)
{
	if (limit > c->o.capacity)
		limit = c->o.capacity;
	pthread_mutex_lock(&c->give_lock);
	__atomic_store_n(&c->limit, limit, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->give_lock);
}

/* Waits out every read section that may have begun before the caller's
 * last store. Two phases, as in sleepable RCU: readers enter the counter
 * the phase names; each counter is drained while the phase points at the
 * other one, so only a reader that read the phase before the flip can
 * still enter it, and that reader's lookup comes after our stores. New
 * readers never hold a drain up (no starvation under a steady stream of
 * hits). Give lock held. */
static void rd_drain(struct cache *c)
{
	for (int flip = 0; flip < 2; flip++) {
		unsigned old = __atomic_fetch_add(&c->rd_phase, 1, __ATOMIC_SEQ_CST) & 1;
		for (unsigned i = 0; i < RD_STRIPES; i++)
			while (__atomic_load_n(&c->rd[i].n[old], __ATOMIC_SEQ_CST)) {
				struct timespec ts = { 0, 50000 };
				nanosleep(&ts, NULL);
			}
	}
}

uint64_t cache_give_back(struct cache *c, uint64_t bytes)
{
	uint64_t u, cut, low, freed, items = 0;
	int busy = 0;

	pthread_mutex_lock(&c->give_lock);
	u = __atomic_load_n(&c->used, __ATOMIC_SEQ_CST);
	if (!bytes) {
		pthread_mutex_unlock(&c->give_lock);
		return 0;
	}
	/* Arena pages made resident ahead of the fill but holding no item yet
	 * go first: giving them costs no cached byte. Part 7 gave back during
	 * epoch 0, with 57 MiB used of a 226 MiB prefaulted arena: only the
	 * newest items went, the empty 169 MiB stayed resident, and the cache
	 * stayed paused at 41 MiB (epochs at 0.9 D). Nothing is placed at or
	 * past the bump pointer while it is parked, so no reader or loader is
	 * in the pages above it. */
	uint64_t released = 0;
	{
		uint64_t pf = __atomic_load_n(&c->prefaulted, __ATOMIC_RELAXED), empty;
		if (__atomic_load_n(&c->limit, __ATOMIC_SEQ_CST) > u)
			__atomic_store_n(&c->limit, u, __ATOMIC_SEQ_CST);
		u = __atomic_exchange_n(&c->used, UINT64_MAX / 2, __ATOMIC_SEQ_CST);
		empty = (u + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);
		if (pf > empty) {
			arena_release(c, empty, pf);
			__atomic_store_n(&c->prefaulted, empty, __ATOMIC_RELAXED);
			__atomic_add_fetch(&c->given_back, pf - empty, __ATOMIC_RELAXED);
			released = pf - empty;
		}
		__atomic_store_n(&c->used, u, __ATOMIC_SEQ_CST);
		if (released >= bytes || !u) {   /* no item to give, or enough given */
			pthread_mutex_unlock(&c->give_lock);
			return released;
		}
		bytes -= released;  /* the rest from the newest items */
	}
	cut = bytes >= u ? 0 : u - bytes;
	/* Nothing new at or past the cut: the limit comes down first, then the
	 * bump pointer is parked far above it, so an allocation racing us
	 * (it read the old limit) fails its compare-and-swap and sees both. */
	if (__atomic_load_n(&c->limit, __ATOMIC_SEQ_CST) > cut)
		__atomic_store_n(&c->limit, cut, __ATOMIC_SEQ_CST);
	u = __atomic_exchange_n(&c->used, UINT64_MAX / 2, __ATOMIC_SEQ_CST);
	/* Items reaching past the cut go, and large files' backings whole
	 * (marked first: from here no admission places an item in them); one
	 * item loading there (or not placed yet) holds it all up: try again
	 * later. */
	low = cut;
	backing_mark_past(c->bs, cut, &low);
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		int st = __atomic_load_n(&it->state, __ATOMIC_ACQUIRE);
		char *d = __atomic_load_n(&it->data, __ATOMIC_ACQUIRE);
		if (d && st != ST_LOADING && it->off + it->len > cut && it->off < low)
			low = it->off;
	}
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		char *d = __atomic_load_n(&it->data, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_LOADING && (!d || it->off + it->len > low))
			busy = 1;
	}
	if (busy) {
		backing_unmark(c->bs);
		__atomic_store_n(&c->used, u, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&c->give_lock);
		return released;
	}
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		int ready = ST_READY;
		if (__atomic_load_n(&it->data, __ATOMIC_ACQUIRE) && it->off + it->len > low &&
		    __atomic_compare_exchange_n(&it->state, &ready, ST_DEAD, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED)) {
			cache_lost(c, it, 0);
			items++;
		}
	}
	rd_drain(c);                /* no reader is inside those items now */
	backing_free_dying(c->bs, low);     /* a passthrough open keeps its memfd until closed */
	if (c->ph.cut)
		c->ph.cut(c->ph.arg, low);  /* before anything is placed past LOW again */
	uint64_t from = (low + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
	arena_release(c, from, u);
	if (__atomic_load_n(&c->prefaulted, __ATOMIC_RELAXED) > from)
		__atomic_store_n(&c->prefaulted, from, __ATOMIC_RELAXED);
	freed = u - low;
	__atomic_add_fetch(&c->given_back, freed, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->given_back_items, items, __ATOMIC_RELAXED);
	if (__atomic_load_n(&c->limit, __ATOMIC_SEQ_CST) > low)
		__atomic_store_n(&c->limit, low, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->used, low, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->give_lock);
	return released + freed;
}

unsigned cache_reap(struct cache *c)
{
	unsigned n;
	int busy = 0;

	pthread_mutex_lock(&c->give_lock);
	if (!(n = backing_reap_begin(c->bs))) {
		pthread_mutex_unlock(&c->give_lock);
		return 0;
	}
	/* Their items go as a give-back's do; one loading holds them all. */
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		int ready = ST_READY;
		if (!__atomic_load_n(&it->data, __ATOMIC_ACQUIRE) || !it->bk || !backing_reaping(it->bk))
			continue;
		if (__atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_LOADING)
			busy = 1;
		else if (__atomic_compare_exchange_n(&it->state, &ready, ST_DEAD, 0, __ATOMIC_SEQ_CST,
						     __ATOMIC_RELAXED))
			cache_lost(c, it, 0);
	}
	if (!busy)
		rd_drain(c);
	n = backing_reap_end(c->bs, !busy);
	pthread_mutex_unlock(&c->give_lock);
	return n;
}
