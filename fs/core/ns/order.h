/* order.h - the order channel: jobs say the order they will read files in.
 *
 * The channel is the directory MOUNTPOINT/.epochfs/order/: a job writes
 * the paths it will read, relative to the mount's root, one a line, to a
 * file of its own there (its *stream*: one per DataLoader, per DDP rank,
 * per job). Writing from offset 0, or truncating, starts a new order (a
 * new epoch); writing on appends. Reading the file back gives the stream's
 * state as text. rm ends it; a stream with no write and no read seen for
 * expire_s is dropped (order_expire). A line "#wait W R" is a report, not a
 * path: the job's loader waited W of the R seconds it ran (epochfs-run
 * writes one a second); they add up in job_wait_us and job_run_us, never
 * faster than time passes. A line "#range OFFSET LENGTH PATH" is a place
 * for those bytes of PATH alone (a record reader's slice of a shard).
 *
 * Each stream is followed from the reads that reach the daemon
 * (order_seen): a read of a file moves the stream's head to that file's
 * place. The prefetcher asks for the next places to fetch (order_next):
 * round robin over the streams, within a window past each head, skipping
 * places seen read and giving up places its readers left LAG behind.
 *
 * This module knows paths, ids and places only: what a path is comes from
 * the RESOLVE callback (the index), what happens to a stream's fetched
 * items when it starts over from RESET. So it is unit-tested alone.
 *
 * Users: the directory is open to every user the mount lets in (1777);
 * a stream belongs to its creator, who alone writes and ends it, and a
 * user other than the daemon's and root holds at most ORDER_USER_STREAMS
 * streams and ORDER_USER_PATHS places.
 *
 * Memory: at most ORDER_MAX_PATHS places in all streams together (5 bytes
 * a place) and ORDER_MAX_RANGES byte ranges (20 more bytes each), and a stream's arrays are freed when it starts over, so a
 * stream that once held a long order does not keep its room (4 streams of
 * 16M paths reset: 276 MiB held for nothing before).
 *
 * Thread safety: every function may be called from any thread; one mutex.
 * RESET runs under it (it may take a leaf lock only: staging's); WAKE runs
 * with no lock held.
 */
#ifndef EPOCHFS_ORDER_H
#define EPOCHFS_ORDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ORDER_DIR_NAME "order"
#define ORDER_MAX_STREAMS 64
#define ORDER_MAX_PATHS (16u << 20)        /* places in all streams' orders together */
/* What one user other than the daemon's and root may hold, so that no
 * user's jobs take every slot or place from the others'. */
#define ORDER_USER_STREAMS 16
#define ORDER_MAX_RANGES (1u << 20)        /* "#range" places in all streams (20 bytes each) */
#define ORDER_USER_PATHS (ORDER_MAX_PATHS / 4)
#define ORDER_LAG 4096u                    /* places behind a head a read is still matched, and
					    * a fetched item still waits for its reader (a
					    * loader's spread: workers x batches in flight x
					    * batch size) */

struct order;

struct order_opts {
	double expire_s;            /* an idle stream is dropped after this; 0: 300 s */
	/* 0 and *ID for a regular file at REL (LEN bytes, a checked relative
	 * path), or -ENOENT. */
	int (*resolve)(void *arg, const char *rel, size_t len, uint32_t *id);
	/* GROUP's order started over or ended: what was fetched for it is of
	 * no use. Under the order lock. */
	void (*reset)(void *arg, uint32_t group);
	/* A head moved or an order grew: the prefetcher may have work. */
	void (*wake)(void *arg);
	/* The number of streams changed to N (one was made or ended): before
	 * any order is taken into a new stream. Under the order lock, like
	 * RESET (leaf locks only). May be NULL. */
	void (*streams)(void *arg, unsigned n);
	void *arg;
};

struct order_stats {
	uint64_t streams;           /* gauge */
	uint64_t places;            /* gauge: places in all orders */
	uint64_t paths;             /* paths taken into orders */
	uint64_t unknown;           /* paths no indexed file has (skipped) */
	uint64_t first;             /* reads that came before the prefetcher fetched their file */
	uint64_t job_wait_us;       /* jobs' time waiting for data, from their "#wait" lines */
	uint64_t job_run_us;        /* the time those lines cover */
	uint64_t job_batches;       /* gauge: bytes of batches the live streams' loaders say
				     * they may hold at once ("#batches"; the daemon's user
				     * and root only, from its own memory cgroup) */
};

int order_new(const struct order_opts *o, struct order **out);
void order_free(struct order *o);
void order_get_stats(struct order *o, struct order_stats *s);

/* ---- the namespace: .epochfs/order/ (node numbers: ns.h) ---- */

struct order_attr {
	uint64_t node;
	int is_dir;
	size_t size;
	uint32_t uid, gid;          /* a stream's creator */
};

int order_lookup(struct order *o, uint64_t parent, const char *name, struct order_attr *a);
int order_getattr(struct order *o, uint64_t node, struct order_attr *a);
/* order_create's FLAGS: the creating process's memory is in the daemon's
 * memory cgroup (memwatch_holds), so its "#batches" lines count. */
#define ORDER_SAME_MEMORY 1u
/* A new stream NAME (letters, digits, '.', '_', '-'; at most 64) of user
 * UID (group GID): creating an existing one reopens it, if it is UID's
 * (FLAGS are those of its first creation). -ENOSPC with ORDER_MAX_STREAMS
 * streams, or ORDER_USER_STREAMS of UID's (users other than the daemon's
 * and root), -EACCES (another user's stream), -EINVAL for a bad name,
 * -EROFS outside the directory. */
int order_create(struct order *o, uint64_t parent, const char *name, uint32_t uid, uint32_t gid,
		 unsigned flags, struct order_attr *a);
/* Order text: LEN, or -EINVAL (a line that is no relative path inside the
 * mount: absolute, '..', an empty component, NUL, over 4095 bytes; a
 * "#range" line whose OFFSET or LENGTH is no decimal number, or LENGTH 0;
 * the lines before it are kept), -EFBIG (over ORDER_MAX_PATHS places or
 * ORDER_MAX_RANGES ranges in all), -EDQUOT
 * (over ORDER_USER_PATHS in the streams of a user other than the daemon's
 * and root). The kernel lets only a stream's owner write to it. */
ssize_t order_write(struct order *o, uint64_t node, const void *buf, size_t len, off_t off);
/* SIZE 0 starts a new order (O_TRUNC); other sizes: -EINVAL. */
int order_truncate(struct order *o, uint64_t node, off_t size);
/* Ends stream NAME for user UID: -EPERM when it is another user's (the
 * daemon's user and root end any), -ENOENT. */
int order_unlink(struct order *o, uint64_t parent, const char *name, uint32_t uid);
/* The stream's state as text; the directory: -EISDIR. */
ssize_t order_read(struct order *o, uint64_t node, void *buf, size_t len, off_t off);
/* The POS-th stream's name into NAME, or NULL past the end. */
const char *order_dirent(struct order *o, uint64_t pos, char *name, size_t len);

/* ---- following the streams ---- */

/* A reader's read of file ID at byte OFF reached the daemon: the streams
 * that expect it (a place of the file, or a "#range" place whose range
 * holds OFF) move their heads. */
void order_seen(struct order *o, uint32_t id, uint64_t off);

/* One place to fetch. GROUP names the stream (and its incarnation). */
struct order_pick {
	uint32_t group, place, id;
	uint64_t off, len;          /* a "#range" place's bytes; len 0: the whole file */
};
/* The next place to fetch, round robin over the streams, within WINDOW
 * places past each head: 1 and *P, or 0 when none has one. */
int order_next(struct order *o, unsigned window, struct order_pick *p);
/* 1 if some stream has at least BATCH places to fetch within WINDOW (or
 * the rest of its order). */
int order_ready(struct order *o, unsigned window, unsigned batch);
/* Whether GROUP's fetch for PLACE is past use (its stream ended, or its
 * readers went LAG places past it), as of the last order_snapshot(). */
struct order_heads {
	uint32_t group[ORDER_MAX_STREAMS];          /* 0: no stream in the slot */
	uint32_t head[ORDER_MAX_STREAMS];
};
void order_snapshot(struct order *o, struct order_heads *h);
int order_passed(const struct order_heads *h, uint32_t group, uint32_t place);
/* Drops streams idle past expire_s (one log line each). */
void order_expire(struct order *o);

#endif
