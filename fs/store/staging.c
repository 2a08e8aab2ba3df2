/* staging.c - items fetched ahead that no cache kept; see staging.h.
 *
 * DESIGN
 * - A hash table of entries keyed by (id, chunk), each a malloc'd copy of
 *   one item at one version, chained; and a list in fetch order, so a
 *   lower limit drops the newest entries first: they are the furthest
 *   ahead of the readers, the last to be needed, and the prefetcher
 *   fetches them again when there is room.
 * - An entry is freed when every byte was served (a training read takes a
 *   file whole, possibly in several requests), or when dropped (its group
 *   started over, the sweep says its readers passed it, another version
 *   was asked for, the limit came down). A dropped entry still LOADING is
 *   freed when its fetch lands; one pinned by a reader, when the reader is
 *   done with it.
 * - One mutex; STAGE_SLOTS buckets: a few thousand entries at 64 MiB of
 *   ImageNet-sized items.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/staging.h"

#define STAGE_SLOTS 16384u          /* buckets (a power of two) */

enum { ST_LOADING = 1, ST_READY, ST_DEAD };

struct waiter {
	struct waiter *next;
	staging_wait_fn fn;
	void *arg;
};

struct entry {
	struct entry *next;         /* bucket chain */
	struct entry *older, *newer; /* fetch order */
	uint32_t id, chunk;
	struct index_version v;
	int state;
	unsigned pins;              /* readers copying out of it, or waiting for it */
	int dropped;                /* of no more use: freed once unpinned and landed */
	size_t len, served;
	uint32_t group, place;
	struct waiter *waiters;
	char *data;
};

struct staging {
	pthread_mutex_t lock;
	struct entry *slots[STAGE_SLOTS];
	struct entry *oldest, *newest;
	uint64_t limit, bytes, reserved;
	void (*room)(void *arg);
	void *room_arg;
	struct staging_stats st;    /* the counters; gauges filled when asked */
};

static unsigned slot_of(uint32_t id, uint32_t chunk)
{
	uint64_t k = ((uint64_t)id << 32 | chunk) * 0x9e3779b97f4a7c15ull;

	return (unsigned)(k >> 40) & (STAGE_SLOTS - 1);
}

static struct entry *find(struct staging *s, uint32_t id, uint32_t chunk)
{
	for (struct entry *e = s->slots[slot_of(id, chunk)]; e; e = e->next)
		if (e->id == id && e->chunk == chunk)
			return e;
	return NULL;
}

/* Of no more use: every byte served, or dropped. */
static int done_with(const struct entry *e)
{
	return e->dropped || e->served >= e->len;
}

/* Takes E out of the table and the list and frees it; what no reader took
 * was wasted. Lock held. */
static void entry_free(struct staging *s, struct entry *e)
{
	if (e->served < e->len)
		s->st.wasted_bytes += e->len - e->served;
	for (struct entry **pp = &s->slots[slot_of(e->id, e->chunk)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	if (e->older)
		e->older->newer = e->newer;
	else
		s->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		s->newest = e->older;
	s->bytes -= e->len;
	free(e->data);
	free(e);
}

/* E is of no more use: freed now, or by its last reader or its fetch.
 * Returns the bytes freed now. Lock held. */
static uint64_t drop(struct staging *s, struct entry *e)
{
	uint64_t len = e->len;

	e->dropped = 1;
	if (e->state == ST_LOADING || e->pins)
		return 0;
	entry_free(s, e);
	return len;
}

static void room(struct staging *s, uint64_t freed)
{
	if (freed && s->room)
		s->room(s->room_arg);
}

int staging_new(uint64_t limit, void (*room_fn)(void *arg), void *arg, struct staging **out)
{
	struct staging *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->limit = limit;
	s->room = room_fn;
	s->room_arg = arg;
	*out = s;
	return 0;
}

void staging_free(struct staging *s)
{
	if (!s)
		return;
	for (struct entry *e = s->oldest, *next; e; e = next) {
		next = e->newer;
		for (struct waiter *w = e->waiters, *wn; w; w = wn) {
			wn = w->next;
			free(w);
		}
		free(e->data);
		free(e);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}

uint64_t staging_room(struct staging *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t used = s->bytes + s->reserved, r = s->limit > used ? s->limit - used : 0;
	pthread_mutex_unlock(&s->lock);
	return r;
}

static uint64_t set_limit(struct staging *s, uint64_t limit, int lower_only)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	if (lower_only && limit >= s->limit) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	s->limit = limit;
	for (struct entry *e = s->newest, *older; e && s->bytes > limit; e = older) {
		older = e->older;
		if (e->state != ST_READY || e->pins)
			continue;
		uint64_t n = drop(s, e);
		s->st.shrunk_bytes += n;
		freed += n;
	}
	pthread_mutex_unlock(&s->lock);
	return freed;
}

uint64_t staging_set_limit(struct staging *s, uint64_t limit)
{
	return set_limit(s, limit, 0);
}

uint64_t staging_lower_limit(struct staging *s, uint64_t limit)
{
	return set_limit(s, limit, 1);
}

/* What staging_reserve would grant of BYTES. Lock held. */
static uint64_t grant(const struct staging *s, uint64_t bytes, uint64_t floor)
{
	uint64_t used = s->bytes + s->reserved, room = s->limit > used ? s->limit - used : 0;

	if (!used && s->limit && room < floor)
		room = floor;           /* a limit of 0 is no staging at all */
	return bytes < room ? bytes : room;
}

uint64_t staging_reserve(struct staging *s, uint64_t bytes, uint64_t floor)
{
	pthread_mutex_lock(&s->lock);
	bytes = grant(s, bytes, floor);
	s->reserved += bytes;
	pthread_mutex_unlock(&s->lock);
	return bytes;
}

int staging_fits(struct staging *s, uint64_t bytes, uint64_t floor)
{
	pthread_mutex_lock(&s->lock);
	int r = grant(s, bytes, floor) == bytes;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void staging_unreserve(struct staging *s, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	s->reserved -= bytes < s->reserved ? bytes : s->reserved;
	pthread_mutex_unlock(&s->lock);
	room(s, bytes);
}

int staging_has(struct staging *s, uint32_t id, uint32_t chunk)
{
	pthread_mutex_lock(&s->lock);
	int r = find(s, id, chunk) != NULL;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void *staging_begin(struct staging *s, uint32_t id, uint32_t chunk, const struct index_version *v,
		    size_t len, uint32_t group, uint32_t place, uint64_t *reserved)
{
	struct entry *e = NULL;

	pthread_mutex_lock(&s->lock);
	if (!find(s, id, chunk) && (e = calloc(1, sizeof(*e))) && !(e->data = malloc(len ? len : 1))) {
		free(e);
		e = NULL;
	}
	if (e) {
		e->id = id;
		e->chunk = chunk;
		e->v = *v;
		e->len = len;
		e->state = ST_LOADING;
		e->group = group;
		e->place = place;
		unsigned b = slot_of(id, chunk);
		e->next = s->slots[b];
		s->slots[b] = e;
		e->older = s->newest;
		if (s->newest)
			s->newest->newer = e;
		else
			s->oldest = e;
		s->newest = e;
		s->bytes += len;
		if (reserved) {             /* the reservation becomes the entry's bytes */
			uint64_t t = len < *reserved ? len : *reserved;
			t = t < s->reserved ? t : s->reserved;
			*reserved -= t;
			s->reserved -= t;
		}
		if (s->bytes > s->st.peak)
			s->st.peak = s->bytes;
	}
	pthread_mutex_unlock(&s->lock);
	return e ? e->data : NULL;
}

void staging_landed(struct staging *s, uint32_t id, uint32_t chunk, int ok)
{
	struct waiter *w = NULL;
	const char *data = NULL;
	size_t len = 0;
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	struct entry *e = find(s, id, chunk);
	if (e && e->state == ST_LOADING) {
		w = e->waiters;
		e->waiters = NULL;
		e->state = ok ? ST_READY : ST_DEAD;
		if (!ok)
			e->dropped = 1;
		data = e->data;
		len = e->len;
		/* Its waiters hold pins, and let go through done_with. */
		if (done_with(e) && !e->pins) {
			freed = e->len;
			entry_free(s, e);
		}
	}
	pthread_mutex_unlock(&s->lock);
	/* Waiters run unlocked; a failed fetch sends them to the sources. */
	while (w) {
		struct waiter *next = w->next;
		w->fn(w->arg, ok ? data : NULL, ok ? len : 0);
		free(w);
		w = next;
	}
	room(s, freed);
}

enum staging_take staging_take(struct staging *s, uint32_t id, uint32_t chunk, const struct index_version *v,
			       const void **data, size_t *len, staging_wait_fn fn, void *arg)
{
	enum staging_take r = STAGING_NONE;
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	struct entry *e = find(s, id, chunk);
	if (e && !index_version_eq(&e->v, v)) {
		freed = drop(s, e);         /* another version: never served */
		e = NULL;
	}
	if (e && e->state == ST_READY && !done_with(e)) {
		e->pins++;
		*data = e->data;
		*len = e->len;
		s->st.hits++;
		r = STAGING_HIT;
	} else if (fn && e && e->state == ST_LOADING && !done_with(e)) {
		struct waiter *w = malloc(sizeof(*w));
		if (w) {
			*w = (struct waiter){ .next = e->waiters, .fn = fn, .arg = arg };
			e->waiters = w;
			e->pins++;          /* let go by the waiter's done_with */
			s->st.late++;
			r = STAGING_WAIT;
		}
	}
	pthread_mutex_unlock(&s->lock);
	room(s, freed);
	return r;
}

void staging_done_with(struct staging *s, uint32_t id, uint32_t chunk, size_t served)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	struct entry *e = find(s, id, chunk);
	if (e && e->pins) {
		e->pins--;
		e->served += served;
		if (done_with(e) && !e->pins && e->state != ST_LOADING) {
			freed = e->len;
			entry_free(s, e);
		}
	}
	pthread_mutex_unlock(&s->lock);
	room(s, freed);
}

void staging_drop_group(struct staging *s, uint32_t group)
{
	pthread_mutex_lock(&s->lock);
	for (struct entry *e = s->oldest, *next; e; e = next) {
		next = e->newer;
		if (e->group == group)
			drop(s, e);
	}
	pthread_mutex_unlock(&s->lock);
}

void staging_sweep(struct staging *s, int (*stale)(void *arg, uint32_t group, uint32_t place), void *arg)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	for (struct entry *e = s->oldest, *next; e; e = next) {
		next = e->newer;
		if (e->state != ST_LOADING && !e->pins && !done_with(e) && stale(arg, e->group, e->place))
			freed += drop(s, e);
	}
	pthread_mutex_unlock(&s->lock);
	room(s, freed);
}

void staging_get_stats(struct staging *s, struct staging_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	st->bytes = s->bytes;
	st->reserved = s->reserved;
	st->limit = s->limit;
	pthread_mutex_unlock(&s->lock);
}
