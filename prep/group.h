/* group.h - one prep group at run time: batches made once, read by k jobs.
 *
 * A group turns a spec and an ImageFolder listing into a stream of batches,
 * epoch after epoch, made by worker threads in the order consumers will read
 * them. It holds made batches in memory until JOBS consumers have each
 * read a batch whole, then frees it. A read of a batch that was freed, or
 * never made, makes it (again): everything in a batch follows from (spec,
 * epoch, index), so freeing early costs CPU, never correctness (counted in
 * `regenerated`).
 *
 * Consumers: each group_open()..group_close() is one consumer's read of one
 * batch (the FUSE adapter opens one per lookup of a batch file). A batch
 * that only some of its consumers have read, and that nobody has touched for
 * TIMEOUT_S while the workers wait for memory, is freed and the group
 * expects one consumer fewer from then on (counted in `dropped`): a job that
 * died does not stall the others. If it comes back, what it reads is made
 * again.
 *
 * Memory: every group of a daemon draws on one pool (group_pool_new()),
 * whose limit bounds the bytes of made batches and spare buffers of all of
 * them together: k groups hold what one may. A group that holds no batch
 * may always make the one a reader waits for (so the pool holds at most
 * its limit plus one batch a group), and a batch a reader waits for may
 * evict its group's batches made ahead that nobody started.
 *
 * Bookkeeping (which batches were made, which read) covers a window of
 * epochs sized by the pool, not the spec's epochs: a consumer further
 * behind than that gets each batch made again for it alone (group.c).
 *
 * Run-ahead: workers make batches in order, at most AHEAD batches past the
 * furthest one any consumer has read (and within the pool). Making further
 * ahead than consumers read buys nothing once they keep up, and every batch
 * held is memory: fresh buffers cost page faults (a third of the CPU of
 * making a batch in bench part 5), recycled ones do not.
 *
 * Images are read through GROUP_IO (the daemon passes its own read path, so
 * prep reads through the RAM cache); bad images become substitutes
 * (batch.h), counted, and reported once each through io->bad.
 *
 * Thread safety: all calls from any thread. One mutex a group guards its
 * batch list and counters; pixels are made and copied outside it. The
 * pool's mutex is a leaf, taken under a group's.
 */
#ifndef EPOCHFS_GROUP_H
#define EPOCHFS_GROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "folder.h"
#include "spec.h"

struct group;
struct group_reader;
struct group_pool;

struct group_io {
	void *ctx;
	/* Reads the whole file REL (a sample path) into *BUF, grown with
	 * realloc as needed (*CAP its size). The length, or -errno. */
	ssize_t (*read_file)(void *ctx, const char *rel, void **buf, size_t *cap);
	/* Told once per sample that was replaced by a substitute. May be NULL. */
	void (*bad)(void *ctx, const char *rel, int err);
};

enum { GROUP_BUF_MALLOC, GROUP_BUF_MEMFD, GROUP_BUF_DIR };

struct group_opts {
	unsigned threads;           /* workers; 0: one per CPU */
	struct group_pool *pool;    /* shared with other groups; NULL: one of MEM of its own */
	uint64_t mem;               /* without a pool: bytes of made batches held at
				     * most (0: no limit); with one, unused */
	double timeout_s;           /* see above; 0: 120 s */
	double wait_s;              /* a read waits this long for its batch; 0: 600 s */
	uint32_t ahead;             /* batches made past the furthest read; 0: 2 per
				     * worker, at least 4 */
	int bufs;                   /* where batches are made: GROUP_BUF_MALLOC (0), or
				     * files group_pt_open() can hand out (kernel
				     * passthrough): GROUP_BUF_MEMFD, or GROUP_BUF_DIR:
				     * unnamed files (O_TMPFILE) in FILES_DIR, a tmpfs
				     * with huge pages (the caller's), memfds where
				     * that fails */
	int files_dir;
};

struct group_stats {
	uint64_t batches;           /* per epoch */
	uint64_t produced;          /* batches made, first time */
	uint64_t regenerated;       /* batches made again */
	uint64_t freed;             /* batches freed after their consumers */
	uint64_t served_bytes;      /* bytes copied to readers */
	uint64_t handed;            /* batch descriptors handed out (group_pt_open) */
	uint64_t handed_bytes;      /* ... and the bytes of their batches */
	uint64_t hand_refused;      /* opens read through the daemon instead: the
				     * batches consumers hold out of the pool's
				     * count were at its limit */
	uint64_t images;            /* samples made */
	uint64_t bad_samples;       /* of those, substitutes */
	uint64_t cpu_ns;            /* worker CPU time making batches */
	uint64_t staged_bytes, staged_peak;    /* bytes of made batches: now, the most */
	uint64_t consumer_bytes, consumer_peak;    /* the pool's orphaned, orphaned_peak
						    * (of every group on it) */
	uint64_t mem_limit;         /* the pool's limit (UINT64_MAX: none) */
	uint64_t readers;           /* open readers now */
	uint64_t dropped;           /* consumers given up on */
	uint32_t jobs;              /* consumers expected now */
};

/* The pool: LIMIT bytes (0: no limit) for the made batches and spare
 * buffers of every group given it in group_opts.pool. 0 and *OUT, or
 * -errno. Freed after the last of its groups. */
int group_pool_new(uint64_t limit, struct group_pool **out);
void group_pool_free(struct group_pool *p);

struct group_pool_stats {
	uint64_t limit;             /* UINT64_MAX: none */
	uint64_t held, held_peak;   /* batches and spares of all groups: now, the most */
	uint64_t staged, peak;      /* batches alone: now, the most at once */
	uint64_t orphaned, orphaned_peak;   /* handed batches out of the count that
				     * only consumers hold: now, the most (at
				     * most limit: past it, opens read through
				     * the daemon) */
	unsigned groups;
};
void group_pool_get_stats(struct group_pool *p, struct group_pool_stats *s);

/* What a spec may ask of the memory O gives a group: 0, or -EFBIG when one
 * batch alone is larger than the pool's limit (o->mem without a pool): a
 * spec writer must not size the daemon's memory. ERR names the sizes and
 * the fix. */
int group_check_spec(const struct prep_spec *sp, const struct group_opts *o, char *err, size_t errlen);

/* Starts a group over F (taken over, freed with the group). 0 and *OUT;
 * -EINVAL (fewer samples than one batch with drop_last: ERR says so),
 * -EFBIG (group_check_spec), -ENOMEM, or a thread error. */
int group_new(const struct prep_spec *sp, struct folder *f, const struct group_io *io,
	      const struct group_opts *o, struct group **out, char *err, size_t errlen);
/* Stops the workers and fails the reads and opens still waiting
 * (-ESHUTDOWN): after it, no callback of G runs. Idempotent; readers may
 * be closed after it. */
void group_stop(struct group *g);
/* group_stop(), then frees everything; every reader must be closed first. */
void group_free(struct group *g);

const struct prep_spec *group_spec(const struct group *g);
uint64_t group_batches(const struct group *g);
/* Bytes of batch INDEX's file (the last one may hold fewer samples). */
size_t group_batch_bytes(const struct group *g, uint64_t index);
void group_get_stats(struct group *g, struct group_stats *s);

/* Begins one consumer's read of batch INDEX of EPOCH. 0, -ENOENT (no such
 * batch), -ENOMEM. Does not wait, and makes nothing by itself: the first
 * read asks for a batch that is not made. */
int group_open(struct group *g, uint32_t epoch, uint64_t index, struct group_reader **r);
/* Called once per group_read_async(): RES bytes at BUF (valid only during
 * the call), or -ETIMEDOUT, -ENOMEM, -ESHUTDOWN (the group is stopping). */
typedef void (*group_read_fn)(void *arg, ssize_t res, const void *buf);

/* Reads up to LEN bytes at OFF of the batch. If it is made, FN runs now, on
 * this thread; otherwise the read waits in a queue, FN runs on the worker
 * thread that makes the batch, and this call returns at once: a read never
 * holds a thread while it waits (the FUSE adapter's threads are few). When
 * a reader has read every byte, its consumer counts as done with the batch.
 * Reads on one reader may overlap; it must not be closed while one is in
 * flight. */
void group_read_async(struct group_reader *r, off_t off, size_t len, group_read_fn fn, void *arg);

/* The same, waiting on this thread: bytes copied into BUF (0 past the end)
 * or -errno. */
ssize_t group_read(struct group_reader *r, off_t off, size_t len, void *buf);

/* A descriptor of R's batch's file (read-only use: the caller must not
 * write it), for the kernel to read the batch without the daemon (FUSE
 * passthrough). Only a batch already made, of a group whose batches are
 * files (o.bufs): otherwise -EAGAIN, and the consumer reads with
 * group_read_async(). Also -EBUSY (R already holds one), -ESHUTDOWN, or
 * an errno of dup. The batch is pinned until group_pt_close(R, READ):
 * then, with READ, the consumer counts as done with the batch (the daemon
 * never sees a passthrough read, so the close stands for "read it
 * whole"). A file once handed out is never made into another batch: a
 * mapping of it can outlive the close. A batch handed to (or done by)
 * every consumer leaves the pool's count at once: its bytes are the
 * consumers' until they close. The caller closes the descriptor once the
 * kernel holds its own reference. */
int group_pt_open(struct group_reader *r);
/* The same for an open that waits: FN(ARG, fd or -errno, NULL) runs once,
 * now or on the worker that makes the batch (or -ETIMEDOUT after wait_s,
 * -ESHUTDOWN); unlike group_open(), this asks for the batch to be made. A
 * group whose batches are not files answers -EAGAIN at once. FN owns the
 * descriptor. */
void group_pt_open_async(struct group_reader *r, group_read_fn fn, void *arg);
void group_pt_close(struct group_reader *r, int read);
/* Ends R; a descriptor still handed is taken back, not counted as read. */
void group_close(struct group_reader *r);

#endif
