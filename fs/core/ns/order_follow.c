/* order_follow.c - following the streams of the order channel: reads
 * matched to places (heads moved), the next places to fetch, places given
 * up behind their readers, idle streams dropped; see order.h, and
 * order.c's DESIGN for the rules.
 */
#include <pthread.h>
#include <stdint.h>

#include "core/ns/order.h"
#include "core/ns/order_int.h"
#include "util/clock.h"
#include "util/log.h"

#define SEARCH 4096u                /* places past the head a read is looked for */
#define NEAR 64u                    /* places around the last match looked at first */

/* ---- following the streams ---- */

static int is_seen(const struct stream *s, uint32_t q)
{
	return s->seen[q / 8] >> (q % 8) & 1;
}

/* Whether a read at OFF of place Q's file is a read of place Q: always,
 * unless Q is a byte range that OFF is not in. Lock held. */
static int covers(const struct stream *s, uint32_t q, uint64_t off)
{
	const struct order_range *r;

	return !s->nranges || !order_range_of(s, q, &r) || (off >= r->off && off - r->off < r->len);
}

/* The place of ID in S at or near its readers (a read at OFF), or -1.
 * Lock held. */
static int64_t match(const struct stream *s, uint32_t id, uint64_t off)
{
	uint32_t from = s->last > NEAR ? s->last - NEAR : 0, to = s->last + NEAR;

	/* Near the last match first: consecutive reads are near neighbours,
	 * and the rest of a file read in several requests is seen already. */
	if (to > s->n)
		to = s->n;
	for (uint32_t q = from; q < to; q++)
		if (s->ids[q] == id && covers(s, q, off))
			return q;
	from = s->head > ORDER_LAG ? s->head - ORDER_LAG : 0;
	to = s->head + SEARCH < s->n ? s->head + SEARCH : s->n;
	for (uint32_t q = from; q < to; q++)
		if (s->ids[q] == id && !is_seen(s, q) && covers(s, q, off))
			return q;
	return -1;
}

void order_seen(struct order *o, uint32_t id, uint64_t off)
{
	int moved = 0;

	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++) {
		struct stream *s = &o->streams[i];
		if (!s->used || !s->n)
			continue;
		int64_t q = match(s, id, off);
		if (q < 0)
			continue;
		s->seen[q / 8] |= (uint8_t)(1u << (q % 8));
		if (q >= s->issue)
			o->st.first++;      /* the reader came before the prefetcher */
		if (q + 1 > s->head) {
			s->head = (uint32_t)q + 1;
			moved = 1;
		}
		s->last = (uint32_t)q;
		s->active = clock_now_coarse();
	}
	pthread_mutex_unlock(&o->lock);
	if (moved && o->o.wake)
		o->o.wake(o->o.arg);
}

/* Gives up S's places its readers left LAG behind. Lock held. */
static void catch_up(struct stream *s)
{
	if (s->head > ORDER_LAG && s->issue < s->head - ORDER_LAG)
		s->issue = s->head - ORDER_LAG;
}

int order_next(struct order *o, unsigned window, struct order_pick *p)
{
	int found = 0;

	pthread_mutex_lock(&o->lock);
	for (unsigned k = 0; k < ORDER_MAX_STREAMS && !found; k++) {
		struct stream *s = &o->streams[(o->turn + k) % ORDER_MAX_STREAMS];
		if (!s->used)
			continue;
		catch_up(s);
		while (s->issue < s->n && (uint64_t)s->issue < (uint64_t)s->head + window) {
			uint32_t place = s->issue++;
			if (is_seen(s, place))
				continue;
			const struct order_range *r;
			*p = (struct order_pick){ .group = group_of(o, s), .place = place, .id = s->ids[place] };
			if (s->nranges && order_range_of(s, place, &r)) {
				p->off = r->off;
				p->len = r->len;
			}
			found = 1;
			break;
		}
	}
	o->turn++;
	pthread_mutex_unlock(&o->lock);
	return found;
}

int order_ready(struct order *o, unsigned window, unsigned batch)
{
	int ready = 0;

	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < ORDER_MAX_STREAMS && !ready; i++) {
		struct stream *s = &o->streams[i];
		if (!s->used)
			continue;
		catch_up(s);
		uint64_t to = (uint64_t)s->head + window;
		if (s->issue >= s->n)
			continue;
		if (to > s->n)
			to = s->n;
		ready = to >= (uint64_t)s->issue + batch || to == s->n;
	}
	pthread_mutex_unlock(&o->lock);
	return ready;
}

void order_snapshot(struct order *o, struct order_heads *h)
{
	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++) {
		const struct stream *s = &o->streams[i];
		h->group[i] = s->used ? group_of(o, s) : 0;
		h->head[i] = s->head;
	}
	pthread_mutex_unlock(&o->lock);
}

int order_passed(const struct order_heads *h, uint32_t group, uint32_t place)
{
	unsigned slot = group >> 16;

	if (!slot || slot > ORDER_MAX_STREAMS || h->group[slot - 1] != group)
		return 1;                   /* its stream ended or was replaced */
	return h->head[slot - 1] > ORDER_LAG && place < h->head[slot - 1] - ORDER_LAG;
}

void order_expire(struct order *o)
{
	double t = clock_now_coarse();

	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++) {
		struct stream *s = &o->streams[i];
		if (s->used && t - s->active > o->o.expire_s) {
			log_info("order %s: no read seen for %.0f s; the stream is dropped", s->name, o->o.expire_s);
			order_stream_end(o, s);
		}
	}
	pthread_mutex_unlock(&o->lock);
}
