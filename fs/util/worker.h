/* worker.h - a background thread's lifecycle: start, timed wait, wake, stop.
 *
 * Every module with a thread of its own wrote out the same handful of
 * things: a mutex, a condvar on CLOCK_MONOTONIC, a stop flag, the create,
 * a wait that ends on a deadline or a stop, a signal, and a stop that sets
 * the flag, wakes the thread and joins it. struct worker is that, once:
 *
 *   struct thing { struct worker w; ...fields protected by w.lock... };
 *
 *   static void *thing_main(void *arg)
 *   {
 *           struct thing *t = arg;
 *
 *           pthread_mutex_lock(&t->w.lock);
 *           while (worker_wait(&t->w, 0.5))     (returns 0 once stopped)
 *                   ...one step, the lock held or dropped around I/O...
 *           pthread_mutex_unlock(&t->w.lock);
 *           return NULL;
 *   }
 *
 *   worker_init(&t->w);  worker_start(&t->w, 1, thing_main, t);
 *   ...  worker_stop(&t->w);  worker_destroy(&t->w);
 *
 * Contract:
 * - The lock is the owner's to use as its own: fields the thread shares
 *   with other threads may be "protected by w.lock", so that a change to
 *   them and the thread's wait are one critical section (no wake-up lost).
 *   The owner may also wait on a condvar of its own with it (tier.c's
 *   "idle"). The lock is a leaf of the helper's: worker_* take no other.
 * - Several threads may share one worker (a pool: prep's group): they
 *   share the lock, the condvar and the stop flag.
 * - A thread that sleeps somewhere else (poll(), epoll_wait()) reads the
 *   flag with worker_running() and names a kick (worker_set_kick()) that
 *   worker_stop() calls, with no lock held, to wake it there.
 * - Stopping does not drain anything: a thread that must finish its queue
 *   first (the tier's writer) keeps going while there is work and
 *   worker_running() is 0, and ends when the queue is empty.
 *
 * All functions but worker_wait() and worker_stop_locked() are called
 * without the lock held; worker_wake() works either way.
 */
#ifndef EPOCHFS_WORKER_H
#define EPOCHFS_WORKER_H

#include <pthread.h>

#define WORKER_FOREVER (-1.0)       /* worker_wait(): no deadline, only a wake or a stop */

struct worker {
	pthread_mutex_t lock;       /* the owner's too (above) */
	pthread_cond_t cond;        /* CLOCK_MONOTONIC: what worker_wait() sleeps on */
	int stop;                   /* set under lock; read with worker_running() */
	unsigned nth;               /* threads started and not joined yet */
	pthread_t *th;              /* nth of them: &one, or allocated for a pool */
	pthread_t one;
	void *(*fn)(void *);        /* what the threads run, with ARG */
	void *arg;
	void (*kick)(void *arg);    /* wakes a thread that sleeps elsewhere; NULL: none */
	void *kick_arg;
};

/* Makes the lock and the condvar; no thread yet. 0 or -errno. */
int worker_init(struct worker *w);

/* For a thread that sleeps outside worker_wait(): worker_stop() calls
 * FN(ARG) after setting the flag (a write to the eventfd or pipe it polls,
 * or closing that pipe: it is called once). Before worker_start(). */
void worker_set_kick(struct worker *w, void (*fn)(void *arg), void *arg);

/* Starts N threads (at least 1) running FN(ARG), each on the kernel's
 * default time slice whatever its creator's (util/sched.h). 0, or -errno
 * with none left running (those started are stopped and joined). */
int worker_start(struct worker *w, unsigned n, void *(*fn)(void *), void *arg);

/* W's lock held. Returns 0 at once when a stop was asked; else sleeps
 * until worker_wake(), a stop, or SECONDS (WORKER_FOREVER: no deadline),
 * and returns 1 unless a stop was asked meanwhile. A 1 may also be a
 * spurious wake-up: the caller checks what it waits for again. */
int worker_wait(struct worker *w, double seconds);

/* 1 until a stop is asked. Any thread, lock held or not. */
int worker_running(struct worker *w);

/* Wakes every thread in worker_wait(). After changing, under W's lock,
 * what they wait for (holding it still, or just after). */
void worker_wake(struct worker *w);

/* W's lock held: asks the threads to stop, and wakes those in
 * worker_wait(). For an owner that must refuse new work in the same
 * critical section (prep's group); worker_stop() then joins. */
void worker_stop_locked(struct worker *w);

/* Asks the threads to stop (if not asked yet), wakes them (the kick too)
 * and joins them. Lock not held. Fine when none was started, and twice. */
void worker_stop(struct worker *w);

/* Frees the lock and the condvar. After worker_stop(), or when no thread
 * was started. */
void worker_destroy(struct worker *w);

#endif
