/* group_pool.c - the memory of prep groups: one pool for all groups, the
 * batch buffers and spares it counts (malloc'd, or memfds the kernel can
 * read a batch from by passthrough), what a spec may ask of it, and the
 * window of epochs each group's bookkeeping covers (see group.c for
 * slots, workers and readers; group_int.h for the structures).
 *
 * DESIGN
 * - One pool for all groups (struct group_pool): every byte of a batch
 *   made or being made, and of a spare buffer, in any group, counts
 *   against its one limit (--prep-mem), so k groups hold what one may.
 *   Room is claimed with the buffer, under both locks, so no two groups
 *   pass the limit between a check and an allocation. Rules:
 *   (1) a group that holds no batch may always make one a reader waits
 *   for (the allowance: held stays within limit + one batch a group);
 *   (2) a batch a reader waits for may evict its own group's made-ahead
 *   batches that nobody started, the furthest first;
 *   (3) while some group waits for room, the others make ahead only
 *   within their share (limit / groups); while some group's reader waits,
 *   they also give back their spares and the batches made ahead past their
 *   share that nobody started, and look for stalled consumers (the
 *   timeout) as if they waited themselves.
 *   Rules (1) and (2) are the guarantees one group had alone; (3) is
 *   fairness: without it one group's run-ahead could keep every other
 *   group at one batch at a time, or an idle group's stale batches keep
 *   memory from all of them.
 * - No deadlock across groups. A reader waits only for its own group's
 *   batches to drain: a group that holds none gets the batch its reader
 *   wants whatever the other groups hold (1), so another group's memory
 *   is never what a reader needs, and the pool adds no edge to the graph
 *   of who waits for whom that separate budgets did not have. Within a
 *   group, the batches held are either made ahead and unstarted (evicted
 *   for the reader, 2), being made (done soon), or started and waiting for
 *   consumers behind the reader; consumers that read in order need no
 *   memory to read those (they are made), so they drain, unless a consumer
 *   stopped (died, or waits on another group out of order): the timeout
 *   then drops it, and it runs in every group while a reader waits (3).
 *   Locks: a group's lock, then the pool's, a leaf; a group never takes
 *   another group's lock. Memory given back wakes the groups whose workers
 *   wait for room with a broadcast on their condvar, made without their
 *   lock (so a wake-up can be lost in the instant between a worker's last
 *   look at the pool and its wait: the pool counts what came back, the
 *   worker looks once more before it sleeps, and its 0.1 s timed wait is
 *   the backstop). A wake-up rather than polling alone: a group waiting
 *   0.1 s for each batch's memory would run at ten batches a second.
 * - Bookkeeping by a window of epochs, not by the whole spec (epochs= may
 *   be 1000000): two bitmaps, one bit a batch, say which batches were made
 *   (so a later make counts as regenerated) and which were freed after
 *   consumers read them (solo, below), for the epochs [wbase, wbase +
 *   wepochs), kept as a ring of rows. The window's front is the frontier's
 *   epoch; older rows are dropped as it moves on. Consumers that keep up
 *   are never further behind the frontier than the batches the pool can
 *   hold (every batch between the slowest consumer and the frontier is held
 *   until that consumer reads it), so wepochs covers the pool's limit in
 *   batches (at most WINDOW_MAX_SPAN of them), plus two epochs, and no
 *   more than the spec's epochs.
 *   A consumer further behind than that (dropped by the timeout, a late or
 *   restarted job, or one left behind when evictions let the frontier run
 *   on) reads batches counted as made and read: each is made again for it
 *   alone (solo, counted as regenerated) and freed after its one read. The
 *   bytes are the same; the cost is CPU, one make per such reader, where
 *   a batch evicted unread within the window is made once for all of them.
 *   A batch made ahead of the window (a reader far ahead of the frontier)
 *   counts as a first make and is not recorded.
 * - Batch buffers in files (o.bufs, set when the mount uses kernel
 *   passthrough): unnamed files in a tmpfs with huge pages when the
 *   caller made one (GROUP_BUF_DIR), else memfds (whose pages are 4 KiB
 *   unless the host's shmem_enabled says otherwise: a consumer read them
 *   at 3.7 GB/s, against 5.0 from 2 MiB pages, docs/design.md). Their
 *   pages are allocated when the buffer is (posix_fallocate): a full
 *   tmpfs answers ENOMEM there, never a SIGBUS in a worker.
 *   group_pt.c hands a batch's file to the kernel, which then reads it for
 *   a consumer without the daemon copying it. Such a batch stays pinned
 *   until that consumer's open of it is released, and even then its file
 *   is made into another batch only once no one else holds it: a spare
 *   marked CHECK is taken only when a write lease on its tmpfs file is
 *   granted, which the kernel does only then (memfds take no lease: freed
 *   at once). A consumer's mapping of it outlives the release, and the
 *   kernel's own open of it often outlives the RELEASE by a moment. A batch every consumer has been
 *   handed leaves the pool's count (an orphan): its bytes are theirs
 *   until they close, as a file's pages are a reader's, and waiting on
 *   them would let a consumer that holds its files open stall the
 *   others. Orphans have a limit of their own, the pool's limit
 *   (gpool_orphan): past it, group_pt.c hands no more files. The pool
 *   counts a file's bytes like a malloc'd buffer's otherwise: shmem
 *   pages, charged to the daemon's cgroup. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "group.h"
#include "group_int.h"
#include "util/worker.h"

/* ---- the pool ---- */

int group_pool_new(uint64_t limit, struct group_pool **out)
{
	struct group_pool *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	if ((err = pthread_mutex_init(&p->lock, NULL))) {
		free(p);
		return -err;
	}
	p->limit = limit ? limit : UINT64_MAX;
	*out = p;
	return 0;
}

void group_pool_free(struct group_pool *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void group_pool_get_stats(struct group_pool *p, struct group_pool_stats *s)
{
	pthread_mutex_lock(&p->lock);
	*s = (struct group_pool_stats){ .limit = p->limit, .held = p->held, .held_peak = p->held_peak,
					.staged = p->staged, .peak = p->peak, .orphaned = p->orphaned,
					.orphaned_peak = p->orphaned_peak, .groups = p->ngroups };
	pthread_mutex_unlock(&p->lock);
}

/* Other groups' workers wait for room (with a reader: READER). Pool lock held. */
static int others_wait(const struct group_pool *p, const struct group *g, int reader)
{
	if (reader)
		return p->nreader > (g->pool_blocked == WAIT_READER);
	return p->nblocked > (g->pool_blocked != WAIT_NONE);
}

int gpool_contended(struct group *g, int reader)
{
	pthread_mutex_lock(&g->pool->lock);
	int on = others_wait(g->pool, g, reader);
	pthread_mutex_unlock(&g->pool->lock);
	return on;
}

int gpool_may_keep_spare(struct group *g)
{
	pthread_mutex_lock(&g->pool->lock);
	int keep = g->pool->held <= g->pool->limit && !others_wait(g->pool, g, 1);
	pthread_mutex_unlock(&g->pool->lock);
	return keep;
}

/* Says whether G's workers wait for room, and why (WAIT_*); returns the
 * pool's count of bytes given back, to look at again before sleeping.
 * G's lock held. */
uint64_t gpool_set_blocked(struct group *g, int why)
{
	struct group_pool *p = g->pool;
	uint64_t gen;

	pthread_mutex_lock(&p->lock);
	if (g->pool_blocked != why) {
		p->nblocked += (why != WAIT_NONE) - (g->pool_blocked != WAIT_NONE);
		p->nreader += (why == WAIT_READER) - (g->pool_blocked == WAIT_READER);
		/* The others give up spares and run-ahead past their share
		 * for a reader (DESIGN, rule 3): tell them now, not at their
		 * next 0.1 s look. */
		if (why == WAIT_READER)
			for (struct group *h = p->groups; h; h = h->pool_next)
				if (h != g)
					worker_wake(&h->w);
		g->pool_blocked = why;
	}
	gen = p->gen;
	pthread_mutex_unlock(&p->lock);
	return gen;
}

uint64_t gpool_gen(struct group *g)
{
	pthread_mutex_lock(&g->pool->lock);
	uint64_t gen = g->pool->gen;
	pthread_mutex_unlock(&g->pool->lock);
	return gen;
}

/* Counts LEN more bytes of G's batches in the pool if HOW allows it (rules
 * in DESIGN); 1 if so. G's lock held. */
int gpool_reserve(struct group *g, size_t len, int how)
{
	struct group_pool *p = g->pool;
	int ok = 1;

	pthread_mutex_lock(&p->lock);
	if (how != ROOM_ALLOWANCE) {
		ok = p->held <= p->limit && len <= p->limit - p->held;
		if (ok && how == ROOM_AHEAD && others_wait(p, g, 0) &&
		    g->st.staged_bytes + len > p->limit / p->ngroups)
			ok = 0;
	}
	if (ok) {
		p->held += len;
		if (p->held > p->held_peak)
			p->held_peak = p->held;
		p->staged += len;
		if (p->staged > p->peak)
			p->peak = p->staged;
	}
	pthread_mutex_unlock(&p->lock);
	if (ok) {
		g->st.staged_bytes += len;
		if (g->st.staged_bytes > g->st.staged_peak)
			g->st.staged_peak = g->st.staged_bytes;
	}
	return ok;
}

/* STAGED bytes of G's batches and SPARE bytes of its spares leave the pool
 * (freed), and the groups waiting for room are woken. G's lock held. */
void gpool_give_back(struct group *g, uint64_t staged, uint64_t spare)
{
	struct group_pool *p = g->pool;

	g->st.staged_bytes -= staged;
	g->spare_bytes -= spare;
	pthread_mutex_lock(&p->lock);
	p->held -= staged + spare;
	p->staged -= staged;
	p->gen++;
	if (p->nblocked)
		for (struct group *h = p->groups; h; h = h->pool_next)
			if (h != g && h->pool_blocked != WAIT_NONE)
				worker_wake(&h->w);
	pthread_mutex_unlock(&p->lock);
}

/* LEN bytes move between G's batches and its spares (TO_SPARE: a freed
 * batch's buffer kept; else a spare taken for a batch): the pool holds as
 * much as before. G's lock held. */
void gpool_move_spare(struct group *g, size_t len, int to_spare)
{
	struct group_pool *p = g->pool;

	if (to_spare) {
		g->st.staged_bytes -= len;
		g->spare_bytes += len;
	} else {
		g->spare_bytes -= len;
		g->st.staged_bytes += len;
		if (g->st.staged_bytes > g->st.staged_peak)
			g->st.staged_peak = g->st.staged_bytes;
	}
	pthread_mutex_lock(&p->lock);
	if (to_spare) {
		p->staged -= len;
	} else {
		p->staged += len;
		if (p->staged > p->peak)
			p->peak = p->staged;
	}
	pthread_mutex_unlock(&p->lock);
}

/* A freed batch's buffer P (LEN bytes, counted as G's batch): kept for
 * reuse, up to one per worker and one more, while the pool is within its
 * limit and no other group's reader waits for room; freed otherwise. (A
 * group that waits only to make ahead does not get them: it would fault in
 * fresh pages where this one reuses warm ones.) Only full batches' buffers
 * are kept, so a spare always fits exactly. Lock held. */
void gpool_put_spare(struct group *g, void *p, size_t len, int fd, int check)
{
	int keep = g->nspares <= g->nth && len == g->full;
	struct spare *sp = NULL;

	if (keep)
		keep = gpool_may_keep_spare(g);
	if (keep && (sp = malloc(sizeof(*sp)))) {
		*sp = (struct spare){ .next = g->spares, .data = p, .cap = len, .fd = fd, .check = check };
		g->spares = sp;
		g->nspares++;
		gpool_move_spare(g, len, 1);
		return;
	}
	gbuf_free(p, len, fd);
	gpool_give_back(g, len, 0);
}

/* Whether no one but the daemon holds file FD: a tmpfs file takes a write
 * lease only when no other open file or mapping of it exists (the kernel's
 * passthrough file, a consumer's mmap). memfds take no lease: never. */
static int gbuf_unshared(int fd)
{
	if (fcntl(fd, F_SETLEASE, F_WRLCK) < 0)
		return 0;
	fcntl(fd, F_SETLEASE, F_UNLCK);
	return 1;
}

struct spare *gpool_take_spare(struct group *g, size_t len)
{
	for (struct spare **pp = &g->spares; *pp; pp = &(*pp)->next) {
		struct spare *sp = *pp;
		if (sp->cap != len || (sp->check && !gbuf_unshared(sp->fd)))
			continue;
		*pp = sp->next;
		g->nspares--;
		gpool_move_spare(g, len, 0);
		return sp;
	}
	return NULL;
}

/* Whether LEN more bytes may be orphaned. Pool lock held. */
static int orphan_room(const struct group_pool *p, size_t len)
{
	return p->orphaned <= p->limit && len <= p->limit - p->orphaned;
}

int gpool_orphan_fits(struct group *g, size_t len)
{
	struct group_pool *p = g->pool;

	pthread_mutex_lock(&p->lock);
	int fits = orphan_room(p, len);
	pthread_mutex_unlock(&p->lock);
	return fits;
}

int gpool_orphan(struct group *g, struct gbatch *b)
{
	struct group_pool *p = g->pool;

	pthread_mutex_lock(&p->lock);
	int fits = orphan_room(p, b->len);
	if (fits) {
		p->orphaned += b->len;
		if (p->orphaned > p->orphaned_peak)
			p->orphaned_peak = p->orphaned;
	}
	pthread_mutex_unlock(&p->lock);
	if (!fits)
		return 0;
	b->orphan = 1;
	gpool_give_back(g, b->len, 0);
	return 1;
}

void gpool_put_handed(struct group *g, void *p, size_t len, int fd, int counted)
{
	struct group_pool *pool = g->pool;

	if (!counted) {
		/* An orphan no consumer holds any more. */
		pthread_mutex_lock(&pool->lock);
		pool->orphaned -= len;
		pthread_mutex_unlock(&pool->lock);
	}

	/* Only a tmpfs file can say when no one holds it (a lease); the
	 * kernel may still hold it now, a moment after the RELEASE (half of
	 * the files, measured), so the lease is asked when a spare is taken. */
	if (g->o.bufs == GROUP_BUF_DIR && fd >= 0) {
		if (!counted) {
			/* An orphan's bytes come back into the pool's count if
			 * they fit (no peak: they were held all along). */
			pthread_mutex_lock(&pool->lock);
			if (pool->held <= pool->limit && len <= pool->limit - pool->held) {
				pool->held += len;
				pool->staged += len;
				counted = 1;
			}
			pthread_mutex_unlock(&pool->lock);
			if (counted)
				g->st.staged_bytes += len;
		}
		if (counted) {
			gpool_put_spare(g, p, len, fd, 1);
			return;
		}
	}
	gbuf_free(p, len, fd);
	if (counted)
		gpool_give_back(g, len, 0);
}

uint8_t *gbuf_new(struct group *g, size_t len, int *fd)
{
	void *p;

	*fd = -1;
	if (g->o.bufs == GROUP_BUF_MALLOC)
		return malloc(len);
	int m = -1;
	if (g->o.bufs == GROUP_BUF_DIR)
		m = openat(g->o.files_dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (m < 0)
		m = memfd_create("epochfs-batch", MFD_CLOEXEC);
	if (m < 0)
		return NULL;
	/* The pages now, not at the worker's first write through the
	 * mapping: a tmpfs out of room there would be a SIGBUS. */
	int e = posix_fallocate(m, 0, (off_t)len);
	if (e == EOPNOTSUPP || e == EINVAL)
		e = ftruncate(m, (off_t)len) < 0 ? errno : 0;
	if (e || (p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0)) == MAP_FAILED) {
		e = e ? e : errno;
		close(m);
		errno = e;
		return NULL;
	}
	*fd = m;
	return p;
}

void gbuf_free(void *p, size_t len, int fd)
{
	if (fd < 0) {
		free(p);
		return;
	}
	/* A descriptor handed to the kernel, or a consumer's mapping, keeps
	 * the file's pages until it goes; this only drops the daemon's hold. */
	munmap(p, len);
	close(fd);
}

/* Frees G's spares, all of them or (ONE) the first. G's lock held. */
void gpool_drop_spares(struct group *g, int one)
{
	while (g->spares) {
		struct spare *sp = g->spares;
		size_t cap = sp->cap;
		g->spares = sp->next;
		g->nspares--;
		gbuf_free(sp->data, cap, sp->fd);
		free(sp);
		gpool_give_back(g, 0, cap);
		if (one)
			return;
	}
}

/* ---- the window ---- */

#define W_BEHIND (-1)
#define W_AHEAD (-2)

/* SEQ's bit in the window's bitmaps, or W_BEHIND / W_AHEAD of it. */
static int64_t wbit(const struct group *g, uint64_t seq)
{
	uint64_t e = seq / g->nb;

	if (e < g->wbase)
		return W_BEHIND;
	if (e - g->wbase >= g->wepochs)
		return W_AHEAD;
	return (int64_t)((e % g->wepochs) * g->row * 8 + seq % g->nb);
}

/* Whether SEQ is marked in MAP; behind the window every batch counts as
 * made and read (DESIGN). */
int gwin_marked(const struct group *g, const uint8_t *map, uint64_t seq)
{
	int64_t i = wbit(g, seq);

	if (i == W_BEHIND)
		return 1;
	return i >= 0 && (map[i / 8] >> (i % 8) & 1);
}

void gwin_mark(const struct group *g, uint8_t *map, uint64_t seq)
{
	int64_t i = wbit(g, seq);

	if (i >= 0)
		map[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* Moves the window on so that it ends at EPOCH, if it ends before; the
 * rows of the epochs left behind are cleared for the new ones. */
void gwin_slide(struct group *g, uint32_t epoch)
{
	if (epoch < g->wbase || epoch - g->wbase < g->wepochs)
		return;
	uint32_t base = epoch - g->wepochs + 1;
	for (uint32_t e = base > g->wbase + g->wepochs ? base - g->wepochs : g->wbase; e < base; e++) {
		memset(g->made + (size_t)(e % g->wepochs) * g->row, 0, g->row);
		memset(g->read + (size_t)(e % g->wepochs) * g->row, 0, g->row);
	}
	g->wbase = base;
}

/* ---- what a spec may ask ---- */

/* BYTES as "38.5 MB" or "3298.5 GB" into BUF. */
static const char *human(double bytes, char *buf, size_t len)
{
	snprintf(buf, len, bytes >= 1e10 ? "%.1f GB" : "%.1f MB", bytes >= 1e10 ? bytes / 1e9 : bytes / 1e6);
	return buf;
}

/* The bytes G may hold: its pool's limit (UINT64_MAX: no limit). */
static uint64_t limit_of(const struct group_opts *o)
{
	if (o->pool)
		return o->pool->limit;
	return o->mem ? o->mem : UINT64_MAX;
}

int group_check_spec(const struct prep_spec *sp, const struct group_opts *o, char *err, size_t errlen)
{
	struct batch_header h;
	size_t one = batch_layout(&sp->p, sp->batch, 0, 0, 0, &h);
	uint64_t limit = limit_of(o);
	char a[32], b[32];

	if (one <= limit)
		return 0;
	snprintf(err, errlen, "one batch is %s (batch=%u at size=%u, %s), more than the prep memory of "
		 "%s (--prep-mem): lower batch= or size=, or mount with a larger --prep-mem",
		 human((double)one, a, sizeof(a)), sp->batch, sp->p.size,
		 sp->p.dtype == BATCH_F32 ? "float32" : "uint8", human((double)limit, b, sizeof(b)));
	return -EFBIG;
}
