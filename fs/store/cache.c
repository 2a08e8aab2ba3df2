/* cache.c - the MinIO arena; see cache.h for the contract.
 *
 * DESIGN
 * - Lookup table: open addressing over item pointers, sized once for
 *   max_items at a load factor of 1/2, linear probing. Items are never
 *   removed (nothing is evicted), so a probe that meets an empty slot knows
 *   the key is absent, and an insert is one CAS on that slot. A stale or
 *   failed item stays in its slot as DEAD and is replaced by CAS.
 * - Arena: bump allocation with a CAS loop that never passes the capacity.
 *   Space of a dead item is not reused (a cache that never evicts has no
 *   free list); it shows in `used` and is rare: it takes a file changing
 *   under the mount or a failed read.
 * - States: LOADING -> READY, or LOADING -> DEAD. Waiters are queued under
 *   a striped mutex while LOADING and called after the transition, outside
 *   the lock. A READY item is immutable, so a hit reads it with no lock.
 * - Giving memory back (cache_give_back, under memory pressure only): the
 *   arena's tail is cut off. Hits read items with no lock, so a hit is a
 *   read section: from the lookup to cache_put() the reader's thread counts
 *   in one of RD_STRIPES padded counters (a thread keeps its stripe), one
 *   counter per phase. The giver marks the tail's items DEAD, then flips
 *   the phase and waits for the old counters to drain, twice (rd_drain): a
 *   reader that entered before the marking has left by then, one that
 *   entered after it finds the items DEAD (all of it sequentially
 *   consistent), and readers that keep coming never hold the giver up. Only then are the pages returned
 *   (MADV_DONTNEED) and the bump pointer moved back to the cut.
 * - A file arena (tmpfs, persist.h) differs in three places: its pages are
 *   allocated with fallocate() before a load or the prefaulter writes
 *   there (the `reserved` mark), since a write fault on a full tmpfs is a
 *   SIGBUS; pages are given back by punching holes (MADV_DONTNEED would
 *   leave the file's pages in place); and the hooks record every item made
 *   ready and every cut, so the next daemon knows what the file holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

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
};

static unsigned rd_next;                /* atomic: hands stripes out to threads */
static __thread int rd_slot = -1;

/* Enters a read section: returns what rd_leave() takes (stripe and phase). */
static unsigned rd_enter(struct cache *c)
{
	unsigned phase = __atomic_load_n(&c->rd_phase, __ATOMIC_SEQ_CST) & 1;

	if (rd_slot < 0)
		rd_slot = (int)(__atomic_fetch_add(&rd_next, 1, __ATOMIC_RELAXED) % RD_STRIPES);
	__atomic_add_fetch(&c->rd[rd_slot].n[phase], 1, __ATOMIC_SEQ_CST);
	return (unsigned)rd_slot << 1 | phase;
}

static void rd_leave(struct cache *c, unsigned slot)
{
	__atomic_sub_fetch(&c->rd[slot >> 1].n[slot & 1], 1, __ATOMIC_SEQ_CST);
}

#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_RELAXED)

static uint64_t key_of(uint32_t id, uint32_t chunk)
{
	return (uint64_t)id << 32 | chunk;
}

static uint64_t hash_key(uint64_t k)
{
	return XXH3_64bits(&k, sizeof(k));
}

static pthread_mutex_t *stripe(struct cache *c, uint64_t key)
{
	return &c->stripes[hash_key(key) >> 58];
}

uint32_t cache_chunks(uint64_t size, uint32_t chunk)
{
	return (uint32_t)((size + chunk - 1) / chunk);
}

size_t cache_chunk_len(uint64_t size, uint32_t chunk, uint32_t i)
{
	uint64_t start = (uint64_t)i * chunk;

	if (start >= size)
		return 0;
	return (size_t)(size - start < chunk ? size - start : chunk);
}

int cache_new(const struct cache_opts *o, struct cache **out)
{
	struct cache *c;
	uint64_t nslots = 16;

	if (!o->capacity || !o->chunk || !o->max_items)
		return -EINVAL;
	while (nslots < o->max_items * 2)
		nslots <<= 1;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	c->limit = o->capacity;
	c->mask = nslots - 1;
	c->slots = calloc(nslots, sizeof(*c->slots));
	if (o->arena_file)
		c->arena = mmap(NULL, o->capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
				o->arena_fd, 0);
	else
		c->arena = mmap(NULL, o->capacity, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!c->slots || c->arena == MAP_FAILED) {
		if (c->arena != MAP_FAILED)
			munmap(c->arena, o->capacity);
		free(c->slots);
		free(c);
		return -ENOMEM;
	}
	/* Fewer TLB misses on a multi-GB arena; a hint, so its failure is fine. */
	madvise(c->arena, o->capacity, MADV_HUGEPAGE);
	for (int i = 0; i < CACHE_STRIPES; i++)
		pthread_mutex_init(&c->stripes[i], NULL);
	pthread_mutex_init(&c->scrub_lock, NULL);
	pthread_mutex_init(&c->give_lock, NULL);
	pthread_mutex_init(&c->reserve_lock, NULL);
	*out = c;
	return 0;
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	for (struct citem *it = c->all, *next; it; it = next) {
		next = it->all_next;
		free(it);
	}
	for (int i = 0; i < CACHE_STRIPES; i++)
		pthread_mutex_destroy(&c->stripes[i]);
	pthread_mutex_destroy(&c->scrub_lock);
	pthread_mutex_destroy(&c->give_lock);
	pthread_mutex_destroy(&c->reserve_lock);
	if (c->o.arena_file) {
		/* What the daemon leaves behind holds items only: the pages made
		 * resident ahead of the fill go back. */
		uint64_t end = (c->used + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
		if (end < c->o.capacity)
			fallocate(c->o.arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)end,
				  (off_t)(c->o.capacity - end));
	}
	munmap(c->arena, c->o.capacity);
	free(c->slots);
	free(c);
}

void cache_set_persist_hooks(struct cache *c, const struct cache_persist_hooks *h)
{
	if (h)
		c->ph = *h;
	else
		memset(&c->ph, 0, sizeof(c->ph));
}

/* A file arena: allocates its pages up to END (rounded up to a page) so a
 * write there cannot fault on a full filesystem. 0 or -errno (-ENOSPC). */
static int arena_reserve(struct cache *c, uint64_t end)
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
	    (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < c->o.fs_floor + (end - from)) {
		err = -ENOSPC;      /* others need the rest (PyTorch's batches on /dev/shm) */
	} else if (end > from) {
		if (fallocate(c->o.arena_fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(end - from)) < 0)
			err = -errno;
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

/* Where admissions stop: the limit, and never within the reserve. */
static uint64_t admit_end(struct cache *c)
{
	uint64_t limit = __atomic_load_n(&c->limit, __ATOMIC_SEQ_CST);
	uint64_t r = __atomic_load_n(&c->reserve, __ATOMIC_SEQ_CST);
	uint64_t top = c->o.capacity > r ? c->o.capacity - r : 0;

	return limit < top ? limit : top;
}

/* Reserves LEN bytes of arena, or NULL when the budget cannot hold them. */
static char *arena_alloc(struct cache *c, size_t len)
{
	uint64_t want = (len + CACHE_ALIGN - 1) & ~(uint64_t)(CACHE_ALIGN - 1);
	uint64_t u = __atomic_load_n(&c->used, __ATOMIC_RELAXED);

	do {
		uint64_t limit = admit_end(c);
		/* The last item may use the budget's unaligned tail. */
		if (u + len > limit)
			return NULL;
		if (u + want > limit)
			want = limit - u;
	} while (!__atomic_compare_exchange_n(&c->used, &u, u + want, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return c->arena + u;
}

static struct citem *item_new(struct cache *c, uint64_t key, const struct index_version *v)
{
	struct citem *it = calloc(1, sizeof(*it));

	if (!it)
		return NULL;
	it->key = key;
	it->v = *v;
	it->state = ST_LOADING;
	it->all_next = __atomic_load_n(&c->all, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&c->all, &it->all_next, it, 1, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
	return it;
}

/* Wakes the waiters of IT after it left LOADING for STATE. */
static void finish(struct cache *c, struct citem *it, int state)
{
	struct cache_waiter *w;
	pthread_mutex_t *m = stripe(c, it->key);

	pthread_mutex_lock(m);
	__atomic_store_n(&it->state, state, __ATOMIC_RELEASE);
	w = it->waiters;
	it->waiters = NULL;
	pthread_mutex_unlock(m);
	unsigned rd = rd_enter(c);          /* the waiters read the bytes */
	while (w) {
		struct cache_waiter *next = w->next;
		if (state == ST_READY)
			w->fn(w->arg, it->data, it->len);
		else
			w->fn(w->arg, NULL, 0);
		w = next;
	}
	rd_leave(c, rd);
}

/* Checks a READY item's bytes against its checksum. On a mismatch the item
 * is retired (DEAD, counted once) and 0 returned: it is never served again,
 * and the next read goes to the source and may admit it anew. */
static int item_intact(struct cache *c, struct citem *it)
{
	int ready = ST_READY;

	if (XXH3_64bits(it->data, it->len) == it->xxh)
		return 1;
	if (__atomic_compare_exchange_n(&it->state, &ready, ST_DEAD, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED)) {
		INC(c->st.corrupt);
		__atomic_sub_fetch(&c->ready, 1, __ATOMIC_RELAXED);
	}
	return 0;
}

/* Claims slot *SLOT (holding OLD: NULL or a dead item) with a new LOADING
 * item and reserves its arena space. Returns LOAD, MISS (no budget), or -1
 * if another caller won the slot (probe again). */
static int admit(struct cache *c, struct citem **slot, struct citem *old, uint64_t key,
		 const struct index_version *v, size_t len, struct cache_ref *ref)
{
	struct citem *it;

	if (__atomic_load_n(&c->used, __ATOMIC_RELAXED) + len > admit_end(c)) {
		INC(c->st.full);
		return CACHE_MISS;
	}
	it = item_new(c, key, v);
	if (!it)
		return CACHE_MISS;
	if (!__atomic_compare_exchange_n(slot, &old, it, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Lost the race; the item stays on the free-at-exit list, inert. */
		it->state = ST_DEAD;
		return -1;
	}
	it->len = len;              /* before data: cache_give_back reads both */
	char *data = arena_alloc(c, len);
	if (!data) {
		INC(c->st.full);
		finish(c, it, ST_DEAD);
		return CACHE_MISS;
	}
	if (arena_reserve(c, (uint64_t)(data - c->arena) + len) < 0) {
		/* The file's filesystem is full: admissions stop where it ran out. */
		uint64_t at = (uint64_t)(data - c->arena), lim = __atomic_load_n(&c->limit, __ATOMIC_RELAXED);
		while (lim > at && !__atomic_compare_exchange_n(&c->limit, &lim, at, 0, __ATOMIC_SEQ_CST,
								 __ATOMIC_RELAXED))
			;
		INC(c->st.no_space);
		finish(c, it, ST_DEAD);
		return CACHE_MISS;
	}
	__atomic_store_n(&it->data, data, __ATOMIC_RELEASE);
	ref->item = it;
	ref->data = data;
	ref->len = len;
	return CACHE_LOAD;
}

enum cache_result cache_get(struct cache *c, uint32_t id, uint32_t chunk,
			    const struct index_version *v, size_t len,
			    struct cache_waiter *w, struct cache_ref *ref)
{
	return cache_get_ex(c, id, chunk, v, len, w, ref, 1);
}

static enum cache_result get(struct cache *c, uint32_t id, uint32_t chunk,
			     const struct index_version *v, size_t len,
			     struct cache_waiter *w, struct cache_ref *ref, int may_admit);

enum cache_result cache_get_ex(struct cache *c, uint32_t id, uint32_t chunk,
			       const struct index_version *v, size_t len,
			       struct cache_waiter *w, struct cache_ref *ref, int may_admit)
{
	unsigned rd = rd_enter(c);
	enum cache_result r = get(c, id, chunk, v, len, w, ref, may_admit);

	if (r == CACHE_HIT)
		ref->rd = rd + 1;           /* left in cache_put() */
	else
		rd_leave(c, rd);
	return r;
}

void cache_put(struct cache *c, struct cache_ref *ref)
{
	if (ref->rd) {
		rd_leave(c, ref->rd - 1);
		ref->rd = 0;
	}
}

static enum cache_result get(struct cache *c, uint32_t id, uint32_t chunk,
			     const struct index_version *v, size_t len,
			     struct cache_waiter *w, struct cache_ref *ref, int may_admit)
{
	uint64_t key = key_of(id, chunk);

	memset(ref, 0, sizeof(*ref));
	for (;;) {
		uint64_t i = hash_key(key) & c->mask, probes = 0;
		struct citem **slot, *it;

		for (;;) {
			slot = &c->slots[i];
			it = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
			if (!it || it->key == key)
				break;
			i = (i + 1) & c->mask;
			if (++probes > c->mask) {
				INC(c->st.misses);  /* table full: more items than max_items */
				return CACHE_MISS;
			}
		}

		int state = it ? __atomic_load_n(&it->state, __ATOMIC_ACQUIRE) : 0;
		if (it && state != ST_DEAD && !index_version_eq(&it->v, v)) {
			/* The file changed since this item was loaded. Only a
			 * READY item is retired here; a LOADING one is retired by
			 * its loader's cache_loaded(). */
			if (state == ST_READY &&
			    __atomic_compare_exchange_n(&it->state, &state, ST_DEAD, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				INC(c->st.stale);
				__atomic_sub_fetch(&c->ready, 1, __ATOMIC_RELAXED);
			}
			if (state == ST_LOADING) {
				INC(c->st.misses);
				return CACHE_MISS;
			}
			continue;
		}
		if (!it || state == ST_DEAD) {
			if (!may_admit)
				return CACHE_MISS;  /* not counted: the caller asks again */
			int r = admit(c, slot, it, key, v, len, ref);
			if (r < 0)
				continue;
			INC(c->st.misses);
			return (enum cache_result)r;
		}
		if (state == ST_LOADING) {
			pthread_mutex_t *m = stripe(c, key);
			if (!w)
				return CACHE_WAIT;
			pthread_mutex_lock(m);
			if (__atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_LOADING) {
				w->next = it->waiters;
				it->waiters = w;
				pthread_mutex_unlock(m);
				INC(c->st.hits);
				return CACHE_WAIT;
			}
			pthread_mutex_unlock(m);
			continue;           /* it just finished: look again */
		}
		/* READY */
		if (c->o.verify && !item_intact(c, it))
			continue;           /* never served: now DEAD, so admit a new copy */
		INC(c->st.hits);
		ref->item = it;
		ref->data = it->data;
		ref->len = it->len;
		return CACHE_HIT;
	}
}

int cache_holds(struct cache *c, uint32_t id, uint32_t chunk, const struct index_version *v)
{
	uint64_t key = key_of(id, chunk), i = hash_key(key) & c->mask;
	unsigned rd = rd_enter(c);
	int held = 0;

	for (uint64_t probes = 0; probes <= c->mask; probes++, i = (i + 1) & c->mask) {
		struct citem *it = __atomic_load_n(&c->slots[i], __ATOMIC_ACQUIRE);
		if (!it)
			break;
		if (it->key == key) {
			held = __atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_READY &&
			       index_version_eq(&it->v, v);
			break;
		}
	}
	rd_leave(c, rd);
	return held;
}

void cache_loaded(struct cache *c, struct cache_ref *ref, int ok)
{
	struct citem *it = ref->item;

	if (ok) {
		it->xxh = XXH3_64bits(it->data, it->len);
		if (c->ph.ready)
			c->ph.ready(c->ph.arg, (uint32_t)(it->key >> 32), (uint32_t)it->key, &it->v,
				    (uint64_t)(it->data - c->arena), it->len, it->xxh);
		/* Counted once recorded: an item in cache_items survives a kill -9. */
		__atomic_add_fetch(&c->ready, 1, __ATOMIC_RELAXED);
	}
	finish(c, it, ok ? ST_READY : ST_DEAD);
}

void cache_get_stats(struct cache *c, struct cache_stats *s)
{
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
	s->capacity = c->o.capacity;
	s->limit = LD(c->limit);
	s->used = LD(c->used);
	s->given_back = LD(c->given_back);
	s->given_back_items = LD(c->given_back_items);
	s->items = LD(c->ready);
	s->hits = LD(c->st.hits);
	s->misses = LD(c->st.misses);
	s->corrupt = LD(c->st.corrupt);
	s->stale = LD(c->st.stale);
	s->full = LD(c->st.full);
	s->scrubbed_bytes = LD(c->st.scrubbed_bytes);
	s->scrub_passes = LD(c->st.scrub_passes);
	s->prefaulted = LD(c->prefaulted);
	s->adopted = LD(c->st.adopted);
	s->adopted_bytes = LD(c->st.adopted_bytes);
	s->no_space = LD(c->st.no_space);
#undef LD
}

uint64_t cache_scrub(struct cache *c, uint64_t max_bytes)
{
	uint64_t done = 0, looked = 0;

	pthread_mutex_lock(&c->scrub_lock);
	while (done < max_bytes && looked <= c->mask) {
		uint64_t i = c->scrub_cursor;
		struct citem *it = __atomic_load_n(&c->slots[i], __ATOMIC_ACQUIRE);

		c->scrub_cursor = (i + 1) & c->mask;
		looked++;
		if (c->scrub_cursor == 0)
			INC(c->st.scrub_passes);
		if (!it)
			continue;
		unsigned rd = rd_enter(c);
		if (__atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_READY) {
			item_intact(c, it);
			done += it->len;
		}
		rd_leave(c, rd);
	}
	pthread_mutex_unlock(&c->scrub_lock);
	__atomic_add_fetch(&c->st.scrubbed_bytes, done, __ATOMIC_RELAXED);
	return done;
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
		int err = arena_reserve(c, done + n);
		if (err < 0)
			return err;
		/* Touches each page for writing without changing its bytes, so
		 * racing a load that writes the same pages is harmless. */
		if (madvise(c->arena + done, n, MADV_POPULATE_WRITE) < 0)
			return -errno;
		done += n;
		__atomic_store_n(&c->prefaulted, done, __ATOMIC_RELAXED);
	}
	return (int64_t)(done - start);
}

int cache_debug_corrupt_any(struct cache *c, uint64_t start, uint32_t *id, uint32_t *chunk)
{
	for (uint64_t n = 0; n <= c->mask; n++) {
		struct citem *it = __atomic_load_n(&c->slots[(start + n) & c->mask], __ATOMIC_ACQUIRE);
		if (it && it->len && __atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_READY) {
			it->data[it->len / 2] ^= 0x01;
			*id = (uint32_t)(it->key >> 32);
			*chunk = (uint32_t)it->key;
			return 0;
		}
	}
	return -ENOENT;
}

int cache_debug_corrupt(struct cache *c, uint32_t id, uint32_t chunk, size_t off)
{
	uint64_t key = key_of(id, chunk), i = hash_key(key) & c->mask;

	for (uint64_t probes = 0; probes <= c->mask; probes++, i = (i + 1) & c->mask) {
		struct citem *it = __atomic_load_n(&c->slots[i], __ATOMIC_ACQUIRE);
		if (!it)
			break;
		if (it->key == key && __atomic_load_n(&it->state, __ATOMIC_ACQUIRE) == ST_READY) {
			if (off >= it->len)
				return -EINVAL;
			it->data[off] ^= 0x01;
			return 0;
		}
	}
	return -ENOENT;
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
	/* Items reaching past the cut go; one loading there (or not placed
	 * yet) holds it all up: try again later. */
	low = cut;
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		int st = __atomic_load_n(&it->state, __ATOMIC_ACQUIRE);
		char *d = __atomic_load_n(&it->data, __ATOMIC_ACQUIRE);
		if (st == ST_LOADING && (!d || d + it->len > c->arena + cut))
			busy = 1;
		if (d && st != ST_LOADING && d + it->len > c->arena + cut && (uint64_t)(d - c->arena) < low)
			low = (uint64_t)(d - c->arena);
	}
	if (busy) {
		__atomic_store_n(&c->used, u, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&c->give_lock);
		return released;
	}
	for (struct citem *it = __atomic_load_n(&c->all, __ATOMIC_ACQUIRE); it; it = it->all_next) {
		int ready = ST_READY;
		if (it->data && it->data + it->len > c->arena + low &&
		    __atomic_compare_exchange_n(&it->state, &ready, ST_DEAD, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED)) {
			__atomic_sub_fetch(&c->ready, 1, __ATOMIC_RELAXED);
			items++;
		}
	}
	rd_drain(c);                /* no reader is inside those items now */
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

int cache_adopt(struct cache *c, uint32_t id, uint32_t chunk, const struct index_version *v,
		uint64_t off, size_t len, uint64_t xxh)
{
	uint64_t key = key_of(id, chunk), i = hash_key(key) & c->mask;
	struct citem *it;

	if (off % CACHE_ALIGN || off > c->o.capacity || len > c->o.capacity - off)
		return -ERANGE;
	if (XXH3_64bits(c->arena + off, len) != xxh)
		return -EBADMSG;
	it = item_new(c, key, v);
	if (!it)
		return -ENOMEM;
	it->data = c->arena + off;
	it->len = len;
	it->xxh = xxh;
	it->state = ST_READY;
	for (uint64_t probes = 0; probes <= c->mask; probes++, i = (i + 1) & c->mask) {
		struct citem *old = NULL;
		if (__atomic_compare_exchange_n(&c->slots[i], &old, it, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			__atomic_add_fetch(&c->ready, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&c->st.adopted, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&c->st.adopted_bytes, len, __ATOMIC_RELAXED);
			return 0;
		}
		if (old->key == key) {
			it->state = ST_DEAD;        /* inert on the free-at-exit list */
			return -EEXIST;
		}
	}
	it->state = ST_DEAD;
	return -ENOMEM;                     /* the table is full */
}

void cache_adopt_done(struct cache *c, uint64_t used)
{
	if (used > c->o.capacity)
		used = c->o.capacity;
	__atomic_store_n(&c->used, used, __ATOMIC_SEQ_CST);
	uint64_t page = (used + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
	if (page > c->o.capacity)
		page = c->o.capacity;
	/* The adopted items' pages are there already; the prefaulter goes on
	 * from the page they end in. */
	__atomic_store_n(&c->reserved, page, __ATOMIC_RELEASE);
	__atomic_store_n(&c->prefaulted, used & ~(PAGE_BYTES - 1), __ATOMIC_RELAXED);
}
