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
 * - Giving memory back (cache_give_back, under memory pressure only, in
 *   cache_mem.c with everything else about the arena's pages): the
 *   arena's tail is cut off. Hits read items with no lock, so a hit is a
 *   read section: from the lookup to cache_put() the reader's thread counts
 *   in one of RD_STRIPES padded counters (a thread keeps its stripe), one
 *   counter per phase. The giver marks the tail's items DEAD, then flips
 *   the phase and waits for the old counters to drain, twice (rd_drain): a
 *   reader that entered before the marking has left by then, one that
 *   entered after it finds the items DEAD (all of it sequentially
 *   consistent), and readers that keep coming never hold the giver up. Only then are the pages returned
 *   (MADV_DONTNEED) and the bump pointer moved back to the cut.
 * - Large files (cache_set_backing): a file's items live in a memfd of its
 *   own (backing.h), charged as one range of the arena's offsets that the
 *   arena leaves untouched; everything above (offsets, give-backs, cuts)
 *   goes by an item's `off`, its place in that space, not by its address.
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

#include "store/backing.h"

#include "store/cache_int.h"

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
	if (!c->slots || c->arena == MAP_FAILED || backing_set_new(0, &c->bs) < 0) {
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
	pthread_mutex_init(&c->prefault_lock, NULL);
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
	pthread_mutex_destroy(&c->prefault_lock);
	backing_set_free(c->bs);
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






/* Where admissions stop: the limit, and never within the reserve. */
static uint64_t admit_end(struct cache *c)
{
	uint64_t limit = __atomic_load_n(&c->limit, __ATOMIC_SEQ_CST);
	uint64_t r = __atomic_load_n(&c->reserve, __ATOMIC_SEQ_CST);
	uint64_t top = c->o.capacity > r ? c->o.capacity - r : 0;

	return limit < top ? limit : top;
}

int cache_has_room(struct cache *c, uint64_t len)
{
	return __atomic_load_n(&c->used, __ATOMIC_RELAXED) + len <= admit_end(c);
}

/* Reserves LEN bytes of arena from a multiple of ALIGN (a power of two;
 * 1: where the last allocation ended, 64-byte aligned but for the
 * budget's tail), or NULL when the budget cannot hold them. */
static char *arena_alloc(struct cache *c, size_t len, uint64_t align)
{
	uint64_t want, at, u = __atomic_load_n(&c->used, __ATOMIC_RELAXED);

	do {
		uint64_t limit = admit_end(c);
		at = (u + align - 1) & ~(align - 1);
		want = (len + CACHE_ALIGN - 1) & ~(uint64_t)(CACHE_ALIGN - 1);
		/* The last item may use the budget's unaligned tail. */
		if (at + len > limit)
			return NULL;
		if (at + want > limit)
			want = limit - at;
	} while (!__atomic_compare_exchange_n(&c->used, &u, at + want, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return c->arena + at;
}

/* backing.h's reserve callback: SPAN bytes of budget (whole pages) for a
 * new backing, from a page boundary, so the arena can skip the range page
 * by page. Under the backing set's lock: no lock here. */
static int reserve_range(void *arg, uint64_t span, uint64_t *off)
{
	struct cache *c = arg;
	char *d = arena_alloc(c, span, PAGE_BYTES);

	if (!d)
		return -ENOSPC;
	*off = (uint64_t)(d - c->arena);
	return 0;
}


/* Large files: item IT (chunk CHUNK of file ID at version V) is placed in
 * the file's backing, made now if the file has none. 0 and *DATA, or
 * -errno: the arena takes it (no budget for the whole file, a newer
 * version's backing, no memfd). */
static int place_in_backing(struct cache *c, struct citem *it, uint32_t id, uint32_t chunk,
			    const struct index_version *v, char **data)
{
	struct backing_place p;
	int r = backing_claim(c->bs, id, v, c->o.chunk, reserve_range, c, &it->bk, &p);

	if (r < 0) {
		it->bk = NULL;
		return r;
	}
	if (r == 1)
		cache_arena_unback(c, p.off, p.span);
	it->off = p.off + (uint64_t)chunk * c->o.chunk;
	*data = p.map + (uint64_t)chunk * c->o.chunk;
	return 0;
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

/* IT left READY for DEAD. RETIRE: it died alone (stale, corrupt), and its
 * backing, if any, is retired with it: a backing's bytes never change once
 * ready (the kernel may be serving them), so the file gets a new one and
 * the old one's other items go at the next reap. */
void cache_lost(struct cache *c, struct citem *it, int retire)
{
	__atomic_sub_fetch(&c->ready, 1, __ATOMIC_RELAXED);
	if (it->bk) {
		backing_count(it->bk, -1);
		if (retire)
			backing_retire(c->bs, it->bk);
	}
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
		cache_lost(c, it, 1);
	}
	return 0;
}

/* Claims slot *SLOT (holding OLD: NULL or a dead item) with a new LOADING
 * item and reserves its arena space. Returns LOAD, MISS (no budget), or -1
 * if another caller won the slot (probe again). */
static int admit(struct cache *c, struct citem **slot, struct citem *old, uint64_t key,
		 const struct index_version *v, size_t len, struct cache_ref *ref)
{
	uint64_t bmin = __atomic_load_n(&c->backing_min, __ATOMIC_RELAXED);
	int large = bmin && v->size >= bmin;
	struct citem *it;
	char *data;

	/* A large file's backing holds its budget already. */
	if (__atomic_load_n(&c->used, __ATOMIC_RELAXED) + len > admit_end(c) &&
	    !(large && backing_live(c->bs, (uint32_t)(key >> 32), v))) {
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
	if (large && place_in_backing(c, it, (uint32_t)(key >> 32), (uint32_t)key, v, &data) == 0)
		goto placed;
	data = arena_alloc(c, len, 1);
	if (!data) {
		INC(c->st.full);
		finish(c, it, ST_DEAD);
		return CACHE_MISS;
	}
	if (cache_arena_reserve(c, (uint64_t)(data - c->arena) + len) < 0) {
		/* The file's filesystem is full: admissions stop where it ran out. */
		uint64_t at = (uint64_t)(data - c->arena), lim = __atomic_load_n(&c->limit, __ATOMIC_RELAXED);
		while (lim > at && !__atomic_compare_exchange_n(&c->limit, &lim, at, 0, __ATOMIC_SEQ_CST,
								 __ATOMIC_RELAXED))
			;
		INC(c->st.no_space);
		finish(c, it, ST_DEAD);
		return CACHE_MISS;
	}
	it->off = (uint64_t)(data - c->arena);
placed:
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

void cache_count_miss(struct cache *c)
{
	INC(c->st.misses);
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
				cache_lost(c, it, 1);
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
		if (it->bk)                 /* not recorded: a restart keeps no backing */
			backing_count(it->bk, 1);
		else if (c->ph.ready)
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
	struct backing_stats bst;
	backing_get_stats(c->bs, &bst);
	s->backed_files = bst.files;
	s->backed_bytes = bst.bytes;
	s->backing_space = bst.space;
	s->backings_made = bst.made;
	s->backings_retired = bst.retired;
	s->backing_failures = bst.failed;
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



void cache_set_backing(struct cache *c, uint64_t min_size)
{
	__atomic_store_n(&c->backing_min, min_size, __ATOMIC_RELAXED);
}

uint64_t cache_backed_whole(struct cache *c)
{
	return backing_whole(c->bs);
}

int cache_backing_fd(struct cache *c, uint32_t id, const struct index_version *v)
{
	return backing_open_fd(c->bs, id, v);
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
	it->off = off;
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
