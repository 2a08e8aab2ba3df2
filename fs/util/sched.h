/* sched.h - the request threads' place in the CPU scheduler.
 *
 * A job that reads through the mount keeps every core busy with its own
 * workers (decoding, augmenting). Each read it sends waits for one of the
 * daemon's FUSE threads, and a thread that wakes behind a busy worker
 * waits for that worker's time slice (1.4 ms on a two-CPU test machine)
 * before it runs, while the worker that sent the read waits for it. Linux
 * 6.12 lets a thread ask for a shorter slice (sched_attr.sched_runtime);
 * a thread with a shorter slice gets an earlier deadline and preempts on
 * wake-up. It takes no privilege and changes no weight: the daemon gets
 * no more CPU than before, only sooner.
 *
 * Contract:
 * - sched_slice_set() sets the calling thread's slice and keeps its policy,
 *   nice value and flags; threads it creates afterwards inherit the slice.
 *   NS 0 returns the thread to the kernel's default. Returns 0 or -errno
 *   (-ENOSYS where the kernel has no sched_setattr or a sandbox hides it;
 *   -EINVAL where the thread's policy is not SCHED_OTHER or SCHED_BATCH:
 *   SCHED_IDLE, SCHED_FIFO, SCHED_RR, SCHED_DEADLINE are the operator's
 *   choice and are left alone). A kernel older than 6.12 takes the call
 *   and ignores the slice: sched_slice_get() tells.
 * - sched_slice_resets_on_fork() is 1 when the calling thread's threads
 *   start on the kernel's defaults whatever it sets (SCHED_RESET_ON_FORK,
 *   which only a privileged caller may clear): then a slice set on it is
 *   not passed on.
 * - sched_slice_get() is the calling thread's slice in nanoseconds as the
 *   kernel reports it, or 0 where it reports none.
 * - sched_slice_configure() records the slice the process's request
 *   threads use (--request-slice; 0: none), before they start; no system
 *   call. sched_slice_for_requests() gives it to the calling thread: the
 *   FUSE loop's (its workers inherit it) and the threads that finish
 *   requests the loop handed on (the io_uring completion threads, the peer
 *   thread). 0, or -errno as sched_slice_set(); nothing when none is set.
 * - sched_slice_unshare() returns the calling thread to the kernel's
 *   default slice if any thread of the process set one; a thread that
 *   starts it does not pass it on (util/worker.c calls it first in every
 *   background thread, so a pool started from a request thread, prep's
 *   group, decodes on the default slice). Nothing and no system call when
 *   no slice was set.
 */
#ifndef EPOCHFS_SCHED_H
#define EPOCHFS_SCHED_H

#include <stdint.h>

/* The kernel's bounds on a requested slice (kernel/sched/syscalls.c). */
#define SCHED_SLICE_MIN_NS 100000ull
#define SCHED_SLICE_MAX_NS 100000000ull

int sched_slice_set(uint64_t ns);
uint64_t sched_slice_get(void);
int sched_slice_resets_on_fork(void);
void sched_slice_configure(uint64_t ns);
int sched_slice_for_requests(void);
void sched_slice_unshare(void);

#endif
