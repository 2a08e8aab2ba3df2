/* order_int.h - what order.c (streams, their text, the namespace) and
 * order_follow.c (following the streams: matching reads, the next places
 * to fetch) share: the streams themselves. Not for other modules: they
 * use order.h. */
#ifndef EPOCHFS_ORDER_INT_H
#define EPOCHFS_ORDER_INT_H

#include <stdint.h>
#include <pthread.h>

#include "core/ns/order.h"

#define LINE_MAX_BYTES 4096u             /* a line of an order, at most */

struct stream {
	int used;
	uint16_t gen;               /* bumped when the slot is reused: old nodes go stale */
	char name[65];
	uint32_t *ids;              /* the order */
	uint8_t *seen;              /* a bit per place: a read of it was seen */
	uint32_t n, cap;
	uint32_t head;              /* one past the furthest place seen read */
	uint32_t last;              /* the place of the last read matched */
	uint32_t issue;             /* next place to fetch */
	uint64_t unknown;           /* paths of this order no indexed file has */
	char part[LINE_MAX_BYTES];  /* a line cut by the end of a write */
	size_t part_len;
	size_t text_len;            /* bytes written to this order */
	double active;              /* last write or matched read */
	uint64_t epoch;             /* orders written (a new one each truncate / offset 0) */
	double wait_s, run_s;       /* the stream's last "#wait" report (cumulative) */
	uint64_t batches;           /* its last "#batches" line: bytes of batches in flight */
	double born;                /* when the stream was created */
	double added;               /* run seconds its reports added to job_run_us */
	struct order_range *ranges; /* the "#range" places' byte ranges, by place */
	uint32_t nranges, rcap;
	uint32_t uid, gid;          /* its creator */
	int same_memory;            /* its creator's memory is in the daemon's cgroup */
	uint64_t room;              /* places this write may still add (ORDER_USER_PATHS) */
};

/* A place's byte range (packed: 20 bytes, not 24). */
struct order_range {
	uint32_t place;
	uint64_t off, len;
} __attribute__((packed));

struct order {
	struct order_opts o;
	pthread_mutex_t lock;
	struct stream streams[ORDER_MAX_STREAMS];
	uint64_t places;            /* in all orders (ORDER_MAX_PATHS at most) */
	uint64_t ranges;            /* of those, with a byte range (ORDER_MAX_RANGES at most) */
	uint64_t lookups;           /* node numbers of stream lookups */
	unsigned turn;              /* order_next's round robin */
	double born;                /* order_new */
	double added;               /* run seconds all reports added */
	struct order_stats st;
};

/* GROUP of stream S: its slot (from 1) and generation. */
static inline uint32_t group_of(const struct order *o, const struct stream *s)
{
	return (uint32_t)(s - o->streams + 1) << 16 | s->gen;
}

/* PLACE's byte range in S: 1 and *R, or 0 (the whole file). Lock held. */
int order_range_of(const struct stream *s, uint32_t place, const struct order_range **r);
/* Ends stream S (its slot free, its nodes stale). Lock held. */
void order_stream_end(struct order *o, struct stream *s);

#endif
