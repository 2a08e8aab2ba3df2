/* uring.c - see uring.h.
 *
 * DESIGN
 * - One ring shared by every submitter: submission is under one mutex (a
 *   few hundred nanoseconds), which also counts the reads in flight. The
 *   bound is the ring's depth, so a free submission entry is always there
 *   for a read that got room, and for a short read's rest (it keeps its
 *   room): io_uring_get_sqe() cannot come back empty.
 * - The completion thread is a struct worker (worker.h) that sleeps in
 *   io_uring_wait_cqe(), not on the worker's condvar; its kick is a NOP
 *   whose user data is NULL, submitted once nothing is in flight, which
 *   ends the thread. The ring's lock is the worker's lock.
 * - The room a read holds is given back after DONE returns, as storage.c
 *   and tier.c each did: uring_free() waits for the count to reach zero,
 *   so no DONE is still running, or about to, when the ring goes.
 * - Short reads are rare on regular files (io_uring retries buffered
 *   reads itself), but not impossible: a read racing a truncate, a signal,
 *   a filesystem that returns what it has. Both users carried the rest on
 *   by hand; here it is one loop, and test_uring forces one (a pipe).
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "util/sched.h"
#include "util/uring.h"
#include "util/worker.h"

struct uring {
	struct io_uring ring;
	struct worker w;            /* the completion thread; w.lock guards submission and below */
	pthread_cond_t room;        /* on w.lock: a read ended */
	unsigned depth;
	unsigned inflight;          /* w.lock */
};

/* Queues what is left of R. W's lock held, R's room taken. */
static void submit_locked(struct uring *u, struct uring_req *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	io_uring_prep_read(sqe, r->fd, (char *)r->buf + r->got, (unsigned)(r->len - r->got),
			   (uint64_t)(r->off + (off_t)r->got));
	sqe->rw_flags = r->rw_flags;
	io_uring_sqe_set_data(sqe, r);
	io_uring_submit(&u->ring);
}

static void resubmit(struct uring *u, struct uring_req *r)
{
	pthread_mutex_lock(&u->w.lock);
	submit_locked(u, r);
	pthread_mutex_unlock(&u->w.lock);
}

static void *cq_main(void *arg)
{
	struct uring *u = arg;

	/* A completion finishes a request a reader waits on: the request
	 * threads' slice (util/sched.h). */
	pthread_setname_np(pthread_self(), "epochfs-io");
	(void)sched_slice_for_requests();
	for (;;) {
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&u->ring, &cqe) < 0)
			continue;           /* -EINTR */
		struct uring_req *r = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		if (!r)
			break;              /* the stop's NOP */
		size_t min = r->min ? r->min : r->len;
		if (res == -EAGAIN || res == -EINTR || (res > 0 && r->got + (size_t)res < min)) {
			if (res > 0)
				r->got += (size_t)res;
			resubmit(u, r);
			continue;
		}
		if (res > 0)
			r->got += (size_t)res;
		if (r->done(r, res < 0 ? res : (ssize_t)r->got)) {
			resubmit(u, r);     /* read again as it now says */
			continue;
		}
		pthread_mutex_lock(&u->w.lock);
		u->inflight--;
		pthread_cond_broadcast(&u->room);
		pthread_mutex_unlock(&u->w.lock);
	}
	return NULL;
}

/* The worker's kick: a NOP with no request ends the completion thread. */
static void stop_ring(void *arg)
{
	struct uring *u = arg;

	pthread_mutex_lock(&u->w.lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	io_uring_submit(&u->ring);
	pthread_mutex_unlock(&u->w.lock);
}

int uring_new(unsigned depth, struct uring **out)
{
	struct uring *u = calloc(1, sizeof(*u));
	int err;

	if (!u)
		return -ENOMEM;
	u->depth = depth ? depth : 1;
	if ((err = io_uring_queue_init(u->depth, &u->ring, 0)) < 0)
		goto out_free;
	if ((err = worker_init(&u->w)) < 0)
		goto out_exit;
	if ((err = -pthread_cond_init(&u->room, NULL)) < 0)
		goto out_worker;
	worker_set_kick(&u->w, stop_ring, u);
	if ((err = worker_start(&u->w, 1, cq_main, u)) < 0)
		goto out_cond;
	*out = u;
	return 0;
out_cond:
	pthread_cond_destroy(&u->room);
out_worker:
	worker_destroy(&u->w);
out_exit:
	io_uring_queue_exit(&u->ring);
out_free:
	free(u);
	return err;
}

void uring_free(struct uring *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->w.lock);
	while (u->inflight)
		pthread_cond_wait(&u->room, &u->w.lock);
	pthread_mutex_unlock(&u->w.lock);
	worker_stop(&u->w);         /* its kick: the NOP */
	worker_destroy(&u->w);
	pthread_cond_destroy(&u->room);
	io_uring_queue_exit(&u->ring);
	free(u);
}

void uring_read(struct uring *u, struct uring_req *r)
{
	r->got = 0;
	pthread_mutex_lock(&u->w.lock);
	while (u->inflight >= u->depth)
		pthread_cond_wait(&u->room, &u->w.lock);
	u->inflight++;
	submit_locked(u, r);
	pthread_mutex_unlock(&u->w.lock);
}
