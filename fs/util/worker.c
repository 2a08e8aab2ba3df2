/* worker.c - see worker.h.
 *
 * DESIGN
 * - The stop flag is written under the lock and read with an acquire
 *   load: worker_wait() reads it under the lock before it sleeps (so a
 *   stop between the owner's last check and the wait is not lost), and a
 *   thread in poll() or epoll_wait() reads it without the lock at each turn.
 * - Wakes broadcast rather than signal: a pool's threads all wait on the
 *   one condvar, and for a single thread the two cost the same.
 * - The condvar measures deadlines on CLOCK_MONOTONIC (clock.h), so a
 *   period or a due time is not stretched or cut by a step of the wall
 *   clock.
 * - A pool's thread handles are allocated; a single thread's live in the
 *   struct, so the common case allocates nothing.
 * - Every thread starts in start_main(), which gives back a short slice
 *   inherited from a FUSE request thread before running the owner's FN:
 *   background work must not preempt the job the way a request does.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "util/clock.h"
#include "util/sched.h"
#include "util/worker.h"

static void *start_main(void *arg)
{
	struct worker *w = arg;

	sched_slice_unshare();
	return w->fn(w->arg);
}

int worker_init(struct worker *w)
{
	int err;

	*w = (struct worker){ .th = NULL };
	if ((err = pthread_mutex_init(&w->lock, NULL)))
		return -err;
	if ((err = clock_cond_init(&w->cond)) < 0) {
		pthread_mutex_destroy(&w->lock);
		return err;
	}
	return 0;
}

void worker_set_kick(struct worker *w, void (*fn)(void *arg), void *arg)
{
	w->kick = fn;
	w->kick_arg = arg;
}

int worker_start(struct worker *w, unsigned n, void *(*fn)(void *), void *arg)
{
	int err = 0;

	if (!n)
		n = 1;
	w->th = n == 1 ? &w->one : calloc(n, sizeof(*w->th));
	if (!w->th)
		return -ENOMEM;
	w->fn = fn;
	w->arg = arg;
	for (w->nth = 0; w->nth < n; w->nth++)
		if ((err = pthread_create(&w->th[w->nth], NULL, start_main, w)))
			break;
	if (err) {
		worker_stop(w);         /* those that did start */
		return -err;
	}
	return 0;
}

int worker_wait(struct worker *w, double seconds)
{
	struct timespec dl;

	if (!worker_running(w))
		return 0;
	if (seconds < 0) {
		pthread_cond_wait(&w->cond, &w->lock);
	} else {
		clock_deadline(&dl, seconds);
		pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	}
	return worker_running(w);
}

int worker_running(struct worker *w)
{
	return !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
}

void worker_wake(struct worker *w)
{
	pthread_cond_broadcast(&w->cond);
}

void worker_stop_locked(struct worker *w)
{
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&w->cond);
}

void worker_stop(struct worker *w)
{
	pthread_mutex_lock(&w->lock);
	worker_stop_locked(w);
	pthread_mutex_unlock(&w->lock);
	if (w->nth && w->kick)
		w->kick(w->kick_arg);
	for (unsigned i = 0; i < w->nth; i++)
		pthread_join(w->th[i], NULL);
	w->nth = 0;
	if (w->th != &w->one)
		free(w->th);
	w->th = NULL;
}

void worker_destroy(struct worker *w)
{
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
}
