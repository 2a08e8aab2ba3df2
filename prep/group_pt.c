/* group_pt.c - batches handed to the kernel: a consumer's open of a batch
 * file answered with the batch's file (FUSE passthrough), so the kernel
 * reads it without the daemon copying it for each of the k consumers
 * (group.h: group_pt_open, group_pt_close).
 *
 * DESIGN
 * - An open of a batch not made yet waits for it without a thread
 *   (group_pt_open_async: queued on the batch like a read, answered by the
 *   worker that makes it; the FUSE adapter's threads are few). In a
 *   search the k consumers read in step, right behind the workers: 34-74
 *   of 256 opens found their batch made (part 5, K = 4), so handing out
 *   made batches alone left most of the copies in place.
 * - A handed batch is pinned until the kernel's last open of it is
 *   released, and its file is never made into another batch afterwards
 *   (never a spare: a passthrough mmap maps the file itself and outlives
 *   the release). The release stands for "read it whole": the daemon
 *   sees no passthrough read.
 * - A batch every consumer has been handed (or has read) leaves the
 *   pool's count at once (an orphan, group_pool.c): its bytes are the
 *   consumers' until they close. Otherwise a consumer that holds its
 *   batch files open (a prefetching loader; `cmp b0 b1`) would hold the
 *   pool and stall the next open for wait_s. Orphans are bounded by the
 *   pool's limit again: an open that would pass it reads through the
 *   daemon instead (-EAGAIN), so what batches take stays within twice
 *   the limit whatever consumers keep open.
 * - A consumer given up on (the timeout) while it holds a handed batch:
 *   the batch leaves the pool the same way; the kernel's reference keeps
 *   its pages for that consumer meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

#include "group.h"
#include "group_int.h"
#include "util/clock.h"
#include "util/worker.h"

/* Takes back R's pin of a handed descriptor; with READ, its consumer is
 * done with the batch, as after reading it whole. Lock held. */
void gpt_unhand(struct group *g, struct group_reader *r, int read)
{
	struct gbatch *b = r->b;

	r->handed = 0;
	b->handed--;
	if (read && !r->counted) {
		r->counted = 1;
		r->copied = b->len;
		if (++b->done >= g->jobs || b->solo)
			b->want_free = 1;
	}
	if (--b->pins == 0 && b->want_free)
		gslot_release(g, b);
	else if (!b->pins)
		gslot_maybe_unlink(g, b);
}

/* Pins B for R and returns a new descriptor of its file, or -errno. G's
 * lock; B is READY with a file. */
static int hand(struct group *g, struct gbatch *b, struct group_reader *r)
{
	int fd;

	if (r->handed)
		return -EBUSY;
	int last = !b->orphan && (b->solo || b->handed + 1 + b->done >= g->jobs);
	if (last && !gpool_orphan_fits(g, b->len)) {
		/* Consumers already hold as much as the pool out of its
		 * count: this one reads through the daemon, which pins the
		 * batch for no longer than the read. */
		g->st.hand_refused++;
		return -EAGAIN;
	}
	if ((fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return -errno;
	b->pins++;
	b->handed++;
	b->handed_once = 1;
	r->handed = 1;
	b->touched = clock_now();
	g->st.handed++;
	g->st.handed_bytes += b->len;
	if (last)
		/* Every consumer has it (or read it): no one is left for whom
		 * the pool should keep it (if another group took the room
		 * since the check, it stays counted). */
		gpool_orphan(g, b);
	if (b->seq + 1 > g->asked) {
		g->asked = b->seq + 1;
		worker_wake(&g->w);
	}
	return fd;
}

void gpt_hand_waiter(struct group *g, struct gbatch *b, struct gwait *w)
{
	int fd = b->fd >= 0 ? hand(g, b, w->r) : -EAGAIN;

	pthread_mutex_unlock(&g->w.lock);
	w->fn(w->arg, fd, NULL);
	pthread_mutex_lock(&g->w.lock);
}

/* What an open of R's batch gets at once: a descriptor, or -errno;
 * -EINPROGRESS when it may wait for the batch to be made. G's lock. */
static int open_now(struct group *g, struct gbatch *b, struct group_reader *r)
{
	if (!worker_running(&g->w))
		return -ESHUTDOWN;
	if (r->handed)
		return -EBUSY;
	if (b->state == B_READY)
		return b->fd >= 0 ? hand(g, b, r) : -EAGAIN;
	return g->o.bufs == GROUP_BUF_MALLOC ? -EAGAIN : -EINPROGRESS;
}

void group_pt_open_async(struct group_reader *r, group_read_fn fn, void *arg)
{
	struct group *g = r->g;
	struct gbatch *b = r->b;
	struct gwait *w = NULL;

	pthread_mutex_lock(&g->w.lock);
	int res = open_now(g, b, r);
	if (res == -EINPROGRESS && !(w = malloc(sizeof(*w))))
		res = -ENOMEM;
	if (w) {
		/* Answered by the worker that makes it (wake()), or by
		 * expire() after wait_s; an open is a reader's intent, so it
		 * asks for the batch as a first read does. */
		*w = (struct gwait){ .r = r, .open = 1, .since = clock_now(), .fn = fn, .arg = arg,
				     .next = b->waiters };
		b->waiters = w;
		if (b->state == B_EMPTY) {
			b->state = B_QUEUED;
			worker_wake(&g->w);
		}
		if (b->seq + 1 > g->asked) {
			g->asked = b->seq + 1;
			worker_wake(&g->w);
		}
	}
	pthread_mutex_unlock(&g->w.lock);
	if (!w)
		fn(arg, res, NULL);
}

int group_pt_open(struct group_reader *r)
{
	pthread_mutex_lock(&r->g->w.lock);
	int fd = open_now(r->g, r->b, r);
	pthread_mutex_unlock(&r->g->w.lock);
	return fd == -EINPROGRESS ? -EAGAIN : fd;
}

void group_pt_close(struct group_reader *r, int read)
{
	struct group *g = r->g;

	pthread_mutex_lock(&g->w.lock);
	if (r->handed)
		gpt_unhand(g, r, read);
	pthread_mutex_unlock(&g->w.lock);
}
