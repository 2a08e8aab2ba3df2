/* group.c - see group.h.
 *
 * DESIGN
 * - A batch slot lives in one list while it is made, held or being read:
 *   QUEUED (a reader wants it) -> MAKING -> READY -> EMPTY (pixels freed;
 *   the slot stays while readers hold it, and a read re-queues it).
 * - Workers take QUEUED slots first (a reader waits for them), then the
 *   frontier: the next batch in epoch order not made yet. Either way only
 *   while the pool has room (below). Consumers that read in order
 *   therefore always progress: the memory they wait for is held by batches
 *   the others will read, or by a dead consumer's, which the timeout frees.
 * - Memory (one pool for all groups, its rules, why they cannot deadlock)
 *   and the window of epochs the bookkeeping covers: group_pool.c.
 * - Reads never wait on a thread: a read of a batch not made yet is queued
 *   on its slot and answered by the worker that makes it (a FUSE adapter
 *   has a handful of threads; blocking them on batches deadlocked three
 *   consumers whose batches needed memory that others' unread batches held).
 * - Readers are served outside the lock with the slot pinned; a free asked
 *   for while pins remain happens when the last pin goes.
 * - A batch made again after consumers read it (solo) is freed as soon as
 *   the reader that asked has it all, or when its last reader closes: its
 *   other consumers read it the first time round. A batch whose first copy
 *   was evicted unread (speculation gave way to a waiting reader) is not
 *   solo: every consumer still has to read it, so it waits for all of
 *   them like a first make. Freeing it after one reader left the others
 *   to make it yet again, and a slow consumer waiting for that remake
 *   behind batches the fast one had read was dropped as dead.
 * - Each epoch's permutation is computed once under the lock into a cache
 *   of two epochs, and a worker copies just its batch's slice.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "group.h"
#include "group_int.h"
#include "util/clock.h"
#include "util/syncwait.h"
#include "util/worker.h"

static uint32_t batch_n(const struct group *g, uint64_t index)
{
	uint64_t first = index * g->sp.batch;

	return (uint32_t)(g->n - first < g->sp.batch ? g->n - first : g->sp.batch);
}

size_t group_batch_bytes(const struct group *g, uint64_t index)
{
	struct batch_header h;

	return batch_layout(&g->sp.p, batch_n(g, index), 0, index, 0, &h);
}

/* ---- slots ---- */

static struct gbatch *find(struct group *g, uint64_t seq)
{
	for (struct gbatch *b = g->list; b; b = b->next)
		if (b->seq == seq)
			return b;
	return NULL;
}

static void unlink_slot(struct group *g, struct gbatch *b);

/* Drops slot B once nothing refers to it: no reader, no pin, no pixels.
 * Lock held. */
void gslot_maybe_unlink(struct group *g, struct gbatch *b)
{
	if (!b->readers && !b->pins && b->state == B_EMPTY && !b->waiters)
		unlink_slot(g, b);
}

static void unlink_slot(struct group *g, struct gbatch *b)
{
	for (struct gbatch **p = &g->list; *p; p = &(*p)->next)
		if (*p == b) {
			*p = b->next;
			free(b);
			return;
		}
}

/* Frees B's pixels now, or when its last pin goes. Lock held. */
void gslot_release(struct group *g, struct gbatch *b)
{
	if (b->state != B_READY)
		return;
	if (b->pins) {
		b->want_free = 1;
		return;
	}
	if (b->done)
		gwin_mark(g, g->read, b->seq);
	if (b->orphan || b->handed_once)    /* a consumer may still map its file */
		gpool_put_handed(g, b->data, b->len, b->fd, !b->orphan);
	else
		gpool_put_spare(g, b->data, b->len, b->fd, 0);
	b->orphan = b->handed_once = 0;     /* made again, it is the pool's again */
	b->data = NULL;
	b->fd = -1;
	b->want_free = 0;
	b->state = B_EMPTY;
	g->st.freed++;
	worker_wake(&g->w);
	gslot_maybe_unlink(g, b);
}

static struct gbatch *new_slot(struct group *g, uint64_t seq, int state)
{
	struct gbatch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->seq = seq;
	b->state = state;
	b->fd = -1;
	b->len = group_batch_bytes(g, seq % g->nb);
	b->touched = clock_now();
	b->next = g->list;
	g->list = b;
	return b;
}

/* Takes slot B for making, with its buffer: a spare, else new memory the
 * pool allows (HOW), spares giving way to it. 1; 0: no room; -ENOMEM.
 * Lock held. */
static int take(struct group *g, struct gbatch *b, int how)
{
	uint8_t *data = NULL;
	int fd = -1;

	struct spare *sp = gpool_take_spare(g, b->len);

	if (sp) {
		fd = sp->fd;
		data = sp->data;
		free(sp);
	} else {
		while (!gpool_reserve(g, b->len, how)) {
			if (!g->spares)
				return 0;
			gpool_drop_spares(g, 1);
		}
		if (!(data = gbuf_new(g, b->len, &fd))) {
			gpool_give_back(g, b->len, 0);
			return -ENOMEM;
		}
	}
	b->data = data;
	b->fd = fd;
	b->state = B_MAKING;
	b->regen = gwin_marked(g, g->made, b->seq);
	b->solo = gwin_marked(g, g->read, b->seq);
	b->done = 0;
	gwin_mark(g, g->made, b->seq);
	return 1;
}

/* Gives back the buffer of B, taken but not made (ENOMEM after take()): B
 * is QUEUED again. Lock held. */
static void untake(struct group *g, struct gbatch *b)
{
	gbuf_free(b->data, b->len, b->fd);
	b->data = NULL;
	b->fd = -1;
	b->state = B_QUEUED;
	gpool_give_back(g, b->len, 0);
}

/* The furthest batch made ahead that no one has started to read, or NULL. */
static struct gbatch *unstarted(struct group *g)
{
	struct gbatch *far = NULL;

	for (struct gbatch *b = g->list; b; b = b->next)
		if (b->state == B_READY && !b->done && !b->readers && !b->pins && !b->waiters &&
		    (!far || b->seq > far->seq))
			far = b;
	return far;
}

/* Takes B, which a reader waits for, making room by freeing batches made
 * ahead that no one has started to read, the furthest ahead first: a
 * reader's wait outranks speculation (they are made again if wanted; CPU,
 * never correctness). Then, if the group holds no batch at all, the
 * allowance. As take(). Lock held. */
static int take_for_reader(struct group *g, struct gbatch *b)
{
	int r;

	while (!(r = take(g, b, ROOM_READER))) {
		struct gbatch *far = unstarted(g);
		if (!far)
			break;
		gslot_release(g, far);
	}
	if (!r && !g->st.staged_bytes)
		r = take(g, b, ROOM_ALLOWANCE);
	return r;
}

/* Another group's reader waits for room: made-ahead batches nobody started
 * past this group's share go back to the pool, and so do spares (DESIGN,
 * rule 3). Lock held. */
static void yield_room(struct group *g)
{
	uint64_t share = g->pool->limit / g->pool->ngroups;
	struct gbatch *far;

	gpool_drop_spares(g, 0);
	while (g->st.staged_bytes > share && (far = unstarted(g)))
		gslot_release(g, far);
}

/* The next slot to make, marked MAKING, or NULL: nothing to do, or (with
 * *BLOCKED set) no memory for it until consumers free some. Batches a
 * reader waits for go first; then the next one in order not made yet.
 * *GEN: the pool's count of bytes given back, when *BLOCKED. Lock held. */
static struct gbatch *pick(struct group *g, int *blocked, uint64_t *gen)
{
	struct gbatch *b;
	int r;

	*blocked = 0;
	if (gpool_contended(g, 1))
		yield_room(g);
	for (b = g->list; b; b = b->next)
		if (b->state == B_QUEUED)
			break;
	if (b) {
		if ((r = take_for_reader(g, b)) > 0) {
			gpool_set_blocked(g, WAIT_NONE);
			return b;
		}
		*blocked = 1;
		*gen = gpool_set_blocked(g, r < 0 ? WAIT_NONE : WAIT_READER);
		return NULL;
	}
	while (g->frontier < g->total) {
		gwin_slide(g, (uint32_t)(g->frontier / g->nb));
		if (!gwin_marked(g, g->made, g->frontier) && !find(g, g->frontier))
			break;
		g->frontier++;
	}
	if (g->frontier == g->total || g->frontier >= g->asked + g->o.ahead) {
		gpool_set_blocked(g, WAIT_NONE);
		return NULL;
	}
	if (!(b = new_slot(g, g->frontier, B_QUEUED)))
		return NULL;
	if ((r = take(g, b, ROOM_AHEAD)) > 0) {
		g->frontier++;
		gpool_set_blocked(g, WAIT_NONE);
		return b;
	}
	unlink_slot(g, b);
	*blocked = 1;
	*gen = gpool_set_blocked(g, r < 0 ? WAIT_NONE : WAIT_AHEAD);
	return NULL;
}

/* Workers are waiting for memory: give up on a consumer that left a batch
 * half-read (some consumers done, nobody touching it) for TIMEOUT_S. */
static void drop_stalled(struct group *g)
{
	struct gbatch *old = NULL;
	double t = clock_now();

	if (g->jobs <= 1)
		return;
	for (struct gbatch *b = g->list; b; b = b->next)
		if (b->state == B_READY && b->done && b->done < g->jobs && b->pins == b->handed &&
		    t - b->touched > g->o.timeout_s && (!old || b->touched < old->touched))
			old = b;
	if (!old)
		return;
	g->jobs--;
	g->st.dropped++;
	g->st.jobs = g->jobs;
	for (struct gbatch *b = g->list, *next; b; b = next) {
		next = b->next;             /* release() may unlink b */
		if (b->state != B_READY)
			continue;
		if (b->pins && b->pins == b->handed && !b->orphan && b->handed + b->done >= g->jobs) {
			/* Only the kernel reads it now, for the consumers left:
			 * its bytes leave the pool (the others need them) while
			 * consumers hold no more than the pool out of its count,
			 * its file is unmapped once the kernel lets go. */
			gpool_orphan(g, b);
		}
		if (b->done >= g->jobs)
			gslot_release(g, b);
	}
}

/* Copies the slice of EPOCH's order for batch INDEX into IDX. Lock held. */
static int order_slice(struct group *g, uint32_t epoch, uint64_t index, uint32_t n, uint32_t *idx)
{
	struct order_cache *c = NULL;

	for (int i = 0; i < 2; i++)
		if (g->orders[i].valid && g->orders[i].epoch == epoch)
			c = &g->orders[i];
	if (!c) {
		c = &g->orders[g->next_order++ % 2];
		if (!c->v && !(c->v = malloc((size_t)g->n * sizeof(uint32_t))))
			return -ENOMEM;
		batch_order(g->sp.p.seed, epoch, g->n, c->v);
		c->epoch = epoch;
		c->valid = 1;
	}
	memcpy(idx, c->v + index * g->sp.batch, (size_t)n * sizeof(uint32_t));
	return 0;
}

/* Serves W from READY batch B. The reader's share is counted before FN
 * runs: once FN has answered, the reader may be closed at any moment (a
 * FUSE reply lets the kernel forget its node). The pin alone keeps the
 * pixels until FN is done with them. Lock held on entry and on return. */
static void serve(struct group *g, struct gbatch *b, struct gwait *w)
{
	struct group_reader *r = w->r;
	size_t n = b->len - (size_t)w->off < w->len ? b->len - (size_t)w->off : w->len;
	const uint8_t *data = b->data;

	b->pins++;
	b->touched = clock_now();
	g->st.served_bytes += n;
	r->copied += n;
	if (!r->counted && r->copied >= b->len) {
		r->counted = 1;
		/* A batch made again after it was read (solo) serves whoever
		 * asked for it: no waiting for other consumers, who read it the
		 * first time. */
		if (++b->done >= g->jobs || b->solo)
			b->want_free = 1;
	}
	pthread_mutex_unlock(&g->w.lock);
	w->fn(w->arg, (ssize_t)n, data + w->off);
	pthread_mutex_lock(&g->w.lock);
	if (--b->pins == 0 && b->want_free)
		gslot_release(g, b);          /* may drop the slot: B is not used after */
	else if (!b->pins)
		gslot_maybe_unlink(g, b);
}

/* B just became READY: answers its queued reads. Lock held. */
static void wake(struct group *g, struct gbatch *b)
{
	struct gwait *w = b->waiters;

	b->waiters = NULL;
	b->pins++;                  /* keep it while we go through the list */
	while (w) {
		struct gwait *next = w->next;
		if (w->open)
			gpt_hand_waiter(g, b, w);
		else
			serve(g, b, w);
		free(w);
		w = next;
	}
	b->pins--;
	if (b->want_free && !b->pins)
		gslot_release(g, b);
	else
		gslot_maybe_unlink(g, b);
}

/* Fails queued reads older than wait_s (or all, when STOPPING). Lock held. */
static void expire(struct group *g, int stopping)
{
	double t = clock_now();

	for (struct gbatch *b = g->list; b; b = b->next)
		for (struct gwait **p = &b->waiters; *p;) {
			struct gwait *w = *p;
			if (!stopping && t - w->since < g->o.wait_s) {
				p = &w->next;
				continue;
			}
			*p = w->next;
			pthread_mutex_unlock(&g->w.lock);
			w->fn(w->arg, stopping ? -ESHUTDOWN : -ETIMEDOUT, NULL);
			pthread_mutex_lock(&g->w.lock);
			free(w);
			p = &b->waiters;    /* the list may have changed meanwhile */
		}
}

/* A batch maker (one of nth). */
static void *make_batches(void *arg)
{
	struct group *g = arg;
	struct batch_worker w = { 0 };
	uint32_t *idx = malloc((size_t)g->sp.batch * sizeof(uint32_t));
	size_t ss = batch_sample_bytes(&g->sp.p), cap = 0;
	void *file = NULL;

	pthread_mutex_lock(&g->w.lock);
	while (worker_running(&g->w)) {
		int blocked = 0;
		uint64_t gen = 0;
		struct gbatch *b = idx ? pick(g, &blocked, &gen) : NULL;
		if (!b) {
			/* Stalled consumers are looked for while another
			 * group's reader waits for room too: this group's may
			 * hold what it waits for (DESIGN, rule 3). */
			if (blocked || gpool_contended(g, 1))
				drop_stalled(g);
			expire(g, 0);
			/* Memory that came back since pick() looked: no sleep. */
			if (!blocked || gpool_gen(g) == gen)
				worker_wait(&g->w, 0.1);
			continue;
		}
		uint32_t epoch = (uint32_t)(b->seq / g->nb);
		uint64_t index = b->seq % g->nb, first = index * g->sp.batch;
		uint32_t n = batch_n(g, index);
		struct batch_header h;
		batch_layout(&g->sp.p, n, epoch, index, first, &h);
		uint8_t *data = b->data;
		if (order_slice(g, epoch, index, n, idx) < 0) {
			untake(g, b);               /* try again shortly */
			worker_wait(&g->w, 0.1);
			continue;
		}
		pthread_mutex_unlock(&g->w.lock);

		struct timespec c0, c1;
		uint32_t bad = 0;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
		int32_t *labels = (int32_t *)(data + h.labels_offset);
		memset(data + h.labels_offset + 4ull * n, 0, h.pixels_offset - h.labels_offset - 4ull * n);
		for (uint32_t s = 0; s < n; s++) {
			const char *rel = folder_path(g->f, idx[s]);
			ssize_t got = g->io.read_file(g->io.ctx, rel, &file, &cap);
			int err = got < 0 ? (int)got
					  : batch_make_sample(&g->sp.p, &w, epoch, first + s, file, (size_t)got,
							      data + h.pixels_offset + (size_t)s * ss);
			if (got < 0)            /* unreadable: the substitute too */
				batch_make_sample(&g->sp.p, &w, epoch, first + s, "", 0,
						  data + h.pixels_offset + (size_t)s * ss);
			labels[s] = folder_label(g->f, idx[s]);
			if (err) {
				bad++;
				pthread_mutex_lock(&g->w.lock);
				int seen = g->bad_seen[idx[s] / 8] & (1u << idx[s] % 8);
				g->bad_seen[idx[s] / 8] |= (uint8_t)(1u << idx[s] % 8);
				pthread_mutex_unlock(&g->w.lock);
				if (!seen && g->io.bad)
					g->io.bad(g->io.ctx, rel, err);
			}
		}
		h.bad_samples = bad;
		memcpy(data, &h, sizeof(h));
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);

		pthread_mutex_lock(&g->w.lock);
		g->st.cpu_ns += (uint64_t)((c1.tv_sec - c0.tv_sec) * 1000000000ll + (c1.tv_nsec - c0.tv_nsec));
		g->st.images += n;
		g->st.bad_samples += bad;
		if (b->regen)
			g->st.regenerated++;
		else
			g->st.produced++;
		b->state = B_READY;
		b->touched = clock_now();
		wake(g, b);
	}
	pthread_mutex_unlock(&g->w.lock);
	batch_worker_free(&w);
	free(file);
	free(idx);
	return NULL;
}

/* Sizes the window (DESIGN): the batches the pool can hold, one more for
 * the allowance and one for the batch being read, in whole epochs, plus
 * two; never more than the spec has. Tiny batches in a large pool would
 * make that a bit for every few hundred bytes of the pool, in every group:
 * past WINDOW_MAX_SPAN batches (1 MiB a bitmap) the window stops growing,
 * and a consumer that far behind reads solo copies (DESIGN). */
#define WINDOW_MAX_SPAN (8ull << 20)

static void window_size(struct group *g)
{
	uint64_t span = g->pool->limit / g->full + 2;
	uint64_t w = (span < WINDOW_MAX_SPAN ? span : WINDOW_MAX_SPAN) / g->nb + 3;

	g->wepochs = (uint32_t)(w < g->sp.epochs ? w : g->sp.epochs);
	g->row = (size_t)(g->nb + 7) / 8;
}

int group_new(const struct prep_spec *sp, struct folder *f, const struct group_io *io,
	      const struct group_opts *o, struct group **out, char *err, size_t errlen)
{
	struct group *g = calloc(1, sizeof(*g));
	uint32_t n = folder_samples(f);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int e;

	err[0] = '\0';
	if (!g) {
		folder_free(f);
		return -ENOMEM;
	}
	g->sp = *sp;
	g->f = f;
	g->io = *io;
	g->o = *o;
	if (g->o.timeout_s <= 0)
		g->o.timeout_s = 120;
	if (g->o.wait_s <= 0)
		g->o.wait_s = 600;
	g->n = n;
	g->nb = sp->drop_last ? n / sp->batch : (n + sp->batch - 1) / sp->batch;
	if (!g->nb) {
		snprintf(err, errlen, "%u samples make no batch of %u with drop_last=1", n, sp->batch);
		e = -EINVAL;
		goto out_free;
	}
	if ((e = group_check_spec(sp, o, err, errlen)) < 0)
		goto out_free;
	g->pool = o->pool;
	if (!g->pool) {
		if ((e = group_pool_new(o->mem, &g->pool)) < 0)
			goto out_free;
		g->own_pool = 1;
	}
	g->total = g->nb * sp->epochs;
	g->full = group_batch_bytes(g, 0);
	g->jobs = sp->jobs;
	g->st.jobs = sp->jobs;
	g->st.batches = g->nb;
	g->nth = o->threads ? o->threads : (unsigned)(cpus > 0 ? cpus : 1);
	if (!g->o.ahead)
		g->o.ahead = g->nth * 2 > 4 ? g->nth * 2 : 4;
	window_size(g);
	if ((e = worker_init(&g->w)) < 0)
		goto out_pool;
	pthread_mutex_lock(&g->pool->lock);
	g->pool_next = g->pool->groups;
	g->pool->groups = g;
	g->pool->ngroups++;
	pthread_mutex_unlock(&g->pool->lock);
	/* From here group_free() undoes everything. */
	g->bad_seen = calloc((size_t)n / 8 + 1, 1);
	g->made = calloc((size_t)g->wepochs * g->row, 1);
	g->read = calloc((size_t)g->wepochs * g->row, 1);
	if (!g->bad_seen || !g->made || !g->read) {
		group_free(g);
		return -ENOMEM;
	}
	if ((e = worker_start(&g->w, g->nth, make_batches, g)) < 0) {
		group_free(g);
		return e;
	}
	*out = g;
	return 0;
out_pool:
	if (g->own_pool)
		group_pool_free(g->pool);
out_free:
	folder_free(f);
	free(g);
	return e;
}

void group_stop(struct group *g)
{
	/* Stopped and its queued reads failed in one critical section: a read
	 * arriving after it is refused, never queued for no one. */
	pthread_mutex_lock(&g->w.lock);
	worker_stop_locked(&g->w);
	expire(g, 1);
	pthread_mutex_unlock(&g->w.lock);
	worker_stop(&g->w);
}

void group_free(struct group *g)
{
	struct group_pool *p;

	if (!g)
		return;
	p = g->pool;
	group_stop(g);
	/* Off the pool, its bytes given back, before its condvar goes: the
	 * other groups wake it only from the pool's list, under its lock. */
	pthread_mutex_lock(&p->lock);
	for (struct group **pp = &p->groups; *pp; pp = &(*pp)->pool_next)
		if (*pp == g) {
			*pp = g->pool_next;
			break;
		}
	p->ngroups--;
	p->nblocked -= g->pool_blocked != WAIT_NONE;
	p->nreader -= g->pool_blocked == WAIT_READER;
	p->held -= g->st.staged_bytes + g->spare_bytes;
	p->staged -= g->st.staged_bytes;
	p->gen++;
	for (struct group *h = p->groups; h; h = h->pool_next)
		if (h->pool_blocked != WAIT_NONE)
			worker_wake(&h->w);
	pthread_mutex_unlock(&p->lock);
	while (g->list) {
		struct gbatch *b = g->list;
		g->list = b->next;
		if (b->data)
			gbuf_free(b->data, b->len, b->fd);
		free(b);
	}
	while (g->spares) {
		struct spare *sp = g->spares;
		g->spares = sp->next;
		gbuf_free(sp->data, sp->cap, sp->fd);
		free(sp);
	}
	for (int i = 0; i < 2; i++)
		free(g->orders[i].v);
	worker_destroy(&g->w);
	folder_free(g->f);
	free(g->bad_seen);
	free(g->made);
	free(g->read);
	if (g->own_pool)
		group_pool_free(p);
	free(g);
}

const struct prep_spec *group_spec(const struct group *g)
{
	return &g->sp;
}

uint64_t group_batches(const struct group *g)
{
	return g->nb;
}

void group_get_stats(struct group *g, struct group_stats *s)
{
	pthread_mutex_lock(&g->w.lock);
	*s = g->st;
	s->mem_limit = g->pool->limit;
	pthread_mutex_unlock(&g->w.lock);
	pthread_mutex_lock(&g->pool->lock);
	s->consumer_bytes = g->pool->orphaned;
	s->consumer_peak = g->pool->orphaned_peak;
	pthread_mutex_unlock(&g->pool->lock);
}

int group_open(struct group *g, uint32_t epoch, uint64_t index, struct group_reader **out)
{
	struct group_reader *r;
	struct gbatch *b;

	if (epoch >= g->sp.epochs || index >= g->nb)
		return -ENOENT;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_lock(&g->w.lock);
	uint64_t seq = (uint64_t)epoch * g->nb + index;
	b = find(g, seq);
	if (!b) {
		/* Made and freed before, or ahead of the workers. Opening asks for
		 * nothing: a stat (ls -l) must not make batches; the first read
		 * queues it. */
		b = new_slot(g, seq, B_EMPTY);
		if (!b) {
			pthread_mutex_unlock(&g->w.lock);
			free(r);
			return -ENOMEM;
		}
	}
	b->readers++;
	g->st.readers++;
	pthread_mutex_unlock(&g->w.lock);
	r->g = g;
	r->b = b;
	*out = r;
	return 0;
}

void group_read_async(struct group_reader *r, off_t off, size_t len, group_read_fn fn, void *arg)
{
	struct group *g = r->g;
	struct gbatch *b = r->b;

	/* The end is known without the pixels: a read there must not ask for
	 * a batch its own consumer may just have finished, and freed. */
	if (off < 0 || (uint64_t)off >= b->len || !len) {
		fn(arg, off < 0 ? -EINVAL : 0, NULL);
		return;
	}
	pthread_mutex_lock(&g->w.lock);
	if (!worker_running(&g->w)) {
		pthread_mutex_unlock(&g->w.lock);
		fn(arg, -ESHUTDOWN, NULL);
		return;
	}
	if (b->seq + 1 > g->asked) {        /* consumers moved on: workers may too */
		g->asked = b->seq + 1;
		worker_wake(&g->w);
	}
	if (b->state == B_READY) {
		struct gwait w = { .r = r, .off = off, .len = len, .fn = fn, .arg = arg };
		serve(g, b, &w);
		pthread_mutex_unlock(&g->w.lock);
		return;
	}
	struct gwait *w = malloc(sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&g->w.lock);
		fn(arg, -ENOMEM, NULL);
		return;
	}
	*w = (struct gwait){ .r = r, .off = off, .len = len, .since = clock_now(), .fn = fn, .arg = arg,
			     .next = b->waiters };
	b->waiters = w;
	if (b->state == B_EMPTY) {          /* freed under us: make it again */
		b->state = B_QUEUED;
		worker_wake(&g->w);
	}
	pthread_mutex_unlock(&g->w.lock);
}

ssize_t group_read(struct group_reader *r, off_t off, size_t len, void *buf)
{
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	group_read_async(r, off, len, sync_wait_done, &w);
	return sync_wait(&w);
}

void group_close(struct group_reader *r)
{
	struct group *g;

	if (!r)
		return;
	g = r->g;
	pthread_mutex_lock(&g->w.lock);
	if (r->handed)
		gpt_unhand(g, r, 0);
	g->st.readers--;
	if (--r->b->readers == 0) {
		if (r->b->state == B_READY && r->b->solo && !r->b->pins)
			gslot_release(g, r->b);   /* nobody else is coming for it */
		else
			gslot_maybe_unlink(g, r->b);
	}
	pthread_mutex_unlock(&g->w.lock);
	free(r);
}
