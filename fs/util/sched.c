/* sched.c - see sched.h.
 *
 * glibc 2.36 wraps neither sched_setattr nor sched_getattr, so both are
 * raw system calls with the kernel's struct sched_attr written out here
 * (its first version, 48 bytes; the kernel takes any size it knows and
 * zero-fills what a caller leaves out). The current attributes are read
 * first and written back with only sched_runtime changed, so a nice value
 * or SCHED_BATCH set by the operator (systemd's Nice=, CPUSchedulingPolicy=)
 * stays as it was.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/sched.h"

static int slice_set;           /* atomic: a thread of this process asked for a slice */
static uint64_t request_ns;     /* atomic: sched_slice_configure()'s */

#define SLICE_RESET_ON_FORK 0x01    /* the kernel's SCHED_FLAG_RESET_ON_FORK */

struct sched_attr_v1 {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime;
	uint64_t sched_deadline;
	uint64_t sched_period;
};

static int get_attr(struct sched_attr_v1 *a)
{
#ifdef SYS_sched_getattr
	memset(a, 0, sizeof(*a));
	if (syscall(SYS_sched_getattr, 0, a, sizeof(*a), 0) != 0)
		return -errno;
	return 0;
#else
	(void)a;
	return -ENOSYS;
#endif
}

int sched_slice_set(uint64_t ns)
{
#ifdef SYS_sched_setattr
	struct sched_attr_v1 a;
	int err;

	if ((err = get_attr(&a)) < 0)
		return err;
	/* The kernel takes a slice from the fair policies only (SCHED_IDLE's
	 * threads run when nothing else wants the CPU: no slice helps). */
	if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
		return -EINVAL;
	if (ns && ns < SCHED_SLICE_MIN_NS)
		ns = SCHED_SLICE_MIN_NS;
	if (ns > SCHED_SLICE_MAX_NS)
		ns = SCHED_SLICE_MAX_NS;
	a.size = sizeof(a);
	a.sched_runtime = ns;
	a.sched_deadline = a.sched_period = 0;
	if (ns)
		__atomic_store_n(&slice_set, 1, __ATOMIC_RELAXED);
	if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
		return -errno;
	return 0;
#else
	(void)ns;
	return -ENOSYS;
#endif
}

uint64_t sched_slice_get(void)
{
	struct sched_attr_v1 a;

	return get_attr(&a) < 0 ? 0 : a.sched_runtime;
}

int sched_slice_resets_on_fork(void)
{
	struct sched_attr_v1 a;

	return get_attr(&a) == 0 && (a.sched_flags & SLICE_RESET_ON_FORK);
}

void sched_slice_configure(uint64_t ns)
{
	__atomic_store_n(&request_ns, ns, __ATOMIC_RELAXED);
}

int sched_slice_for_requests(void)
{
	uint64_t ns = __atomic_load_n(&request_ns, __ATOMIC_RELAXED);

	return ns ? sched_slice_set(ns) : 0;
}

void sched_slice_unshare(void)
{
	if (__atomic_load_n(&slice_set, __ATOMIC_RELAXED))
		(void)sched_slice_set(0);
}
