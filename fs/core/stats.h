/* stats.h - the daemon's counters and their two renderings.
 *
 * Counters are incremented at the one place where their event happens
 * (stats_add, a relaxed atomic add). What users see is a list of samples:
 * these counters plus gauges other modules supply (index totals, storage
 * bytes). The same list renders as one JSON object (.epochfs/stats.json) and
 * as Prometheus text exposition (.epochfs/metrics), so the two never drift.
 */
#ifndef EPOCHFS_STATS_H
#define EPOCHFS_STATS_H

#include <stddef.h>
#include <stdint.h>

enum stat_id {
	STAT_READS,             /* read requests answered by the daemon */
	STAT_READ_BYTES,        /* bytes returned to readers by the daemon */
	STAT_READ_ERRORS,       /* read requests answered with an error */
	STAT_STALE_READS,       /* reads refused: the backing file changed */
	STAT_LOOKUPS,           /* name lookups */
	STAT_CHANGES,           /* backing entries seen changed or gone */
	STAT_CACHE_HIT_BYTES,   /* of read_bytes, served from the RAM cache */
	STAT_CACHE_MISS_BYTES,  /* of read_bytes, not from the RAM cache (storage or a peer) */
	STAT_PEER_READ_BYTES,   /* bytes fetched from peers (checksum verified) */
	STAT_PEER_SERVED_BYTES, /* bytes sent to peers */
	STAT_PEER_ERRORS,       /* peer faults: refused, timed out, broken, lying */
	STAT_PEER_LIES,         /* peer replies that did not match the manifest */
	STAT_PEER_FALLBACK_BYTES, /* bytes asked of a peer that came from storage */
	STAT_MANIFEST_MISMATCHES, /* storage loads that did not match the manifest */
	STAT_COPIES_DROPPED,    /* files whose kernel copy was dropped once read (memory tight) */
	STAT_OPENS,             /* opens answered by the daemon (it answers OPEN) */
	STAT_PT_OPENS,          /* of them, answered with a backing file: the kernel reads it */
	STAT_PT_REGISTERED,     /* backing files registered with the kernel */
	STAT_PT_BUSY,           /* opens of a file held whole that an open through the daemon kept there */
	STAT_PT_ERRORS,         /* backing files the kernel refused */
	STAT_PT_SOURCE_OPENS,   /* opens answered with SOURCE's file: the kernel reads it there */
	STAT_PT_SOURCE_BYTES,   /* the sizes of those files (what the kernel may read from SOURCE) */
	STAT_PT_PREP_OPENS,     /* opens of .prep/ batches answered with the batch's file */
	STAT_PT_PREP_BYTES,     /* the sizes of those batches */
	STAT_URING_READS,       /* read requests that came over FUSE's io_uring, not /dev/fuse */
	STAT__COUNT
};

struct stats {
	uint64_t c[STAT__COUNT];
	double start;           /* CLOCK_MONOTONIC seconds at stats_init */
};

void stats_init(struct stats *s);
static inline void stats_add(struct stats *s, enum stat_id id, uint64_t n)
{
	__atomic_add_fetch(&s->c[id], n, __ATOMIC_RELAXED);
}
uint64_t stats_get(const struct stats *s, enum stat_id id);
double stats_uptime(const struct stats *s);

/* SAMPLE_INFO is a string (TEXT, escaped as each format wants), not a
 * number: JSON "NAME": "TEXT", Prometheus epochfs_NAME_info{NAME="TEXT"} 1
 * (the usual shape of an info metric). */
enum sample_kind { SAMPLE_COUNTER, SAMPLE_GAUGE, SAMPLE_INFO };

struct sample {
	const char *name;       /* JSON key; Prometheus name is epochfs_NAME[_total] */
	const char *help;
	enum sample_kind kind;
	int is_float;
	uint64_t u;
	double d;
	const char *text;      /* SAMPLE_INFO only */
};

/* Appends the counters of S to OUT (room for at most MAX); returns how many. */
int stats_samples(const struct stats *s, struct sample *out, int max);

/* Render N samples into BUF (size LEN). Return the length written (without
 * the NUL), or -ENOSPC if BUF is too small. */
int stats_render_json(const struct sample *v, int n, char *buf, size_t len);
int stats_render_prom(const struct sample *v, int n, char *buf, size_t len);

#endif
