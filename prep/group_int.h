/* group_int.h - the inside of a prep group, shared by group.c (slots,
 * workers, readers) and group_pool.c (the memory pool across groups and
 * the window of epochs the bookkeeping covers). Nothing outside prep/'s
 * group files includes it.
 *
 * Locking: a group's fields are guarded by its worker lock (g->w.lock);
 * the pool's by its own lock, a leaf taken under a group's. Every
 * function below says which it needs.
 */
#ifndef EPOCHFS_PREP_GROUP_INT_H
#define EPOCHFS_PREP_GROUP_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "group.h"
#include "util/worker.h"

enum { B_QUEUED, B_MAKING, B_READY, B_EMPTY };

/* A read waiting for its batch to be made, or (OPEN) an open waiting to
 * be handed the batch's file (group_pt_open_async). */
struct gwait {
	struct group_reader *r;
	int open;
	off_t off;
	size_t len;
	double since;
	group_read_fn fn;
	void *arg;
	struct gwait *next;
};

struct gbatch {
	struct gwait *waiters;      /* reads queued until READY */
	uint64_t seq;               /* epoch * batches + index */
	int state;
	int regen;                  /* made before: count it as regenerated */
	int solo;                   /* read before: free after its reader */
	int want_free;              /* free once unpinned */
	uint8_t *data;              /* MAKING and READY: len bytes, counted in the pool */
	int fd;                     /* ... a file of them (o.bufs), else -1 */
	size_t len;
	uint32_t readers, pins, done;
	uint32_t handed;            /* of the pins, descriptors handed out (group_pt_open) */
	int handed_once;            /* its file was handed out: never a spare (a
				     * consumer's mapping can outlive its close) */
	int orphan;                 /* out of the pool's count while handed (every
				     * consumer has it, or one was dropped holding
				     * it): unmapped at the last unpin */
	double touched;             /* last made or read, monotonic seconds */
	struct gbatch *next;
};

struct group_reader {
	struct group *g;
	struct gbatch *b;
	uint64_t copied;
	int counted;
	int handed;                 /* holds a pin for a descriptor given out (group_pt_open) */
};

/* A freed batch's buffer kept for the next batch: a fresh malloc of tens
 * of MB is an mmap whose every page faults on first touch, which cost a
 * third of the CPU of making a batch. */
struct spare {
	struct spare *next;
	void *data;
	size_t cap;
	int fd;                     /* its file, or -1 */
	int check;                  /* its file was handed out: reused only once no
				     * one else holds it (gbuf_unshared) */
};

struct order_cache {
	int valid;
	uint32_t epoch;
	uint32_t *v;
};

/* Why a group's workers wait for the pool (group.pool_blocked). */
enum { WAIT_NONE, WAIT_AHEAD, WAIT_READER };

struct group_pool {
	pthread_mutex_t lock;       /* everything below; a leaf, taken under a group's lock */
	uint64_t limit;             /* fixed at creation */
	uint64_t held, held_peak;   /* batches made or being made, and spares, of all
				     * groups: now, and the most at once */
	uint64_t staged, peak;      /* of those, batches */
	uint64_t orphaned, orphaned_peak;   /* batches out of the count that only
				     * consumers hold (handed files): at most limit */
	uint64_t gen;               /* bumped whenever bytes come back */
	unsigned ngroups;
	unsigned nblocked;          /* groups whose pool_blocked is not WAIT_NONE */
	unsigned nreader;           /* of those, WAIT_READER */
	struct group *groups;       /* every group on the pool, by pool_next */
};

struct group {
	struct prep_spec sp;
	struct folder *f;
	struct group_io io;
	struct group_opts o;
	struct group_pool *pool;
	int own_pool;               /* made by group_new (o.pool was NULL) */
	struct group *pool_next;    /* protected by pool->lock */
	int pool_blocked;           /* WAIT_*; protected by pool->lock */
	uint32_t n;                 /* samples */
	uint64_t nb, total;         /* batches per epoch, in all */
	size_t full;                /* bytes of a full batch: the size spares are kept at */
	uint64_t frontier;          /* next batch to make in order */
	uint64_t asked;             /* 1 + the furthest batch any consumer read */
	uint32_t jobs;              /* consumers expected now */
	struct gbatch *list;
	struct spare *spares;       /* buffers of freed batches, for reuse */
	unsigned nspares;
	uint64_t spare_bytes;
	struct order_cache orders[2];
	unsigned next_order;
	uint8_t *bad_seen;          /* one bit a sample */
	/* The window (DESIGN): epochs wbase .. wbase + wepochs - 1, epoch e's
	 * bits in row e % wepochs of ROW bytes. */
	uint32_t wbase, wepochs;
	size_t row;
	uint8_t *made;              /* one bit a batch made at least once */
	uint8_t *read;              /* one bit a batch freed after consumers read it */
	struct group_stats st;
	struct worker w;            /* the batch makers; w.lock guards everything above */
	unsigned nth;               /* how many */
};

/* How a batch's bytes may claim room (group_pool.c, DESIGN): made ahead
 * of any reader, for a reader that waits, or under the allowance of one
 * batch a group. */
enum { ROOM_AHEAD, ROOM_READER, ROOM_ALLOWANCE };

/* Whether other groups' workers wait for room (READER: for a reader). */
int gpool_contended(struct group *g, int reader);
/* Whether G may keep a freed batch's buffer as a spare: the pool is
 * within its limit and no other group's reader waits for room. */
int gpool_may_keep_spare(struct group *g);
/* Says whether G's workers wait for room and why (WAIT_*); returns the
 * pool's count of give-backs, to look at again before sleeping. G's lock. */
uint64_t gpool_set_blocked(struct group *g, int why);
/* The pool's count of give-backs. */
uint64_t gpool_gen(struct group *g);
/* Counts LEN more bytes of G's batches in the pool if HOW (ROOM_*) allows;
 * 1 if so. G's lock. */
int gpool_reserve(struct group *g, size_t len, int how);
/* STAGED bytes of batches and SPARE of spares leave the pool; groups
 * waiting for room are woken. G's lock. */
void gpool_give_back(struct group *g, uint64_t staged, uint64_t spare);
/* LEN bytes move between G's batches and its spares. G's lock. */
void gpool_move_spare(struct group *g, size_t len, int to_spare);
/* Drops slot B once nothing refers to it: no reader, no pin, no pixels.
 * G's lock. */
void gslot_maybe_unlink(struct group *g, struct gbatch *b);
/* B leaves the pool's count while only its consumers hold it (an orphan),
 * if the bytes held that way stay within the pool's limit: 1, else 0 (it
 * stays counted). G's lock. */
int gpool_orphan(struct group *g, struct gbatch *b);
/* Whether LEN more bytes could be orphaned now. G's lock. */
int gpool_orphan_fits(struct group *g, size_t len);
/* Frees B's pixels now (a spare, or unmapped if an orphan), or when its
 * last pin goes. G's lock. */
void gslot_release(struct group *g, struct gbatch *b);
/* Answers open waiter W of READY batch B with a descriptor of its file
 * (group_pt.c); the lock is let go around W's callback. G's lock. */
void gpt_hand_waiter(struct group *g, struct gbatch *b, struct gwait *w);
/* Takes back R's pin of a handed descriptor (group_pt.c); with READ, its
 * consumer is done with the batch. G's lock. */
void gpt_unhand(struct group *g, struct group_reader *r, int read);
/* A freed batch's buffer P (LEN bytes, file FD or -1): kept as a spare
 * or freed (group_pool.c says when); CHECK: see struct spare. G's lock. */
void gpool_put_spare(struct group *g, void *p, size_t len, int fd, int check);
/* A spare of LEN bytes that may be made into a batch now, off the list and
 * counted as a batch again (free the node, keep its buffer), or NULL.
 * G's lock. */
struct spare *gpool_take_spare(struct group *g, size_t len);
/* The same for a buffer whose file was handed out (COUNTED: its bytes are
 * still the pool's, not an orphan's): a spare only when no one else holds
 * the file, else freed. G's lock. */
void gpool_put_handed(struct group *g, void *p, size_t len, int fd, int counted);
/* A batch buffer of LEN bytes: malloc'd, or with G's o.bufs a shared
 * mapping of a file of exactly LEN bytes, its pages allocated now (*FD;
 * -1 otherwise). NULL: out of memory (errno). */
uint8_t *gbuf_new(struct group *g, size_t len, int *fd);
/* Frees a buffer from gbuf_new (or a spare's). */
void gbuf_free(void *p, size_t len, int fd);
/* Frees G's spares, all or (ONE) the first. G's lock. */
void gpool_drop_spares(struct group *g, int one);

/* The window: whether SEQ is marked in MAP (behind the window: yes), mark
 * it, and move the window on to end at EPOCH. G's lock. */
int gwin_marked(const struct group *g, const uint8_t *map, uint64_t seq);
void gwin_mark(const struct group *g, uint8_t *map, uint64_t seq);
void gwin_slide(struct group *g, uint32_t epoch);

#endif
