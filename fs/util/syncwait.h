/* syncwait.h - waiting on the calling thread for a callback that may run
 * on another one (core_read's done, group_read_async's fn, storage's).
 *
 *   struct sync_wait w = SYNC_WAIT_INIT(buf);
 *   start_something(..., sync_wait_done, &w);
 *   ssize_t res = sync_wait(&w);
 *
 * sync_wait_done copies RES bytes into the destination given to
 * SYNC_WAIT_INIT (the source is valid only during the callback; no copy
 * when the bytes are already there, or with no destination), then wakes
 * the waiter. Header-only: a handful of lines.
 */
#ifndef EPOCHFS_SYNCWAIT_H
#define EPOCHFS_SYNCWAIT_H

#include <pthread.h>
#include <string.h>
#include <sys/types.h>

struct sync_wait {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
	ssize_t res;
	void *dst;
};

#define SYNC_WAIT_INIT(dest) \
	{ .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .dst = (dest) }

static inline void sync_wait_done(void *arg, ssize_t res, const void *buf)
{
	struct sync_wait *w = arg;

	if (res > 0 && w->dst && w->dst != buf)
		memcpy(w->dst, buf, (size_t)res);
	pthread_mutex_lock(&w->m);
	w->res = res;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

static inline ssize_t sync_wait(struct sync_wait *w)
{
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->m);
	pthread_mutex_unlock(&w->m);
	return w->res;
}

#endif
