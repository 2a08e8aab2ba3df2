/* memwatch.h - how much memory the daemon's world has left, read from the
 * kernel: the memory cgroup the daemon runs in (v1 or v2), else the whole
 * machine.
 *
 * A training job and the daemon that serves it usually share one memory
 * limit (one container, one pod, one Slurm job). What matters to both is
 * not "free" memory (the page cache fills any limit) but what is left once
 * the memory nobody can reclaim without harm is taken away: anonymous and
 * shared memory (processes, the daemon's arena) and the file pages that
 * processes have mapped (their libraries: reclaiming those makes the job
 * re-read them from disk, page by page, as major faults). memwatch reports
 * that room, and the refault counter that shows a job being squeezed (pages
 * the kernel evicted and had to read back soon after).
 *
 * No thread, no state but the paths found at open: every sample reads a
 * handful of small files (about 30 us). Thread-safe for distinct handles.
 */
#ifndef EPOCHFS_MEMWATCH_H
#define EPOCHFS_MEMWATCH_H

#include <stdint.h>

enum mem_scope { MEM_SYSTEM, MEM_CGROUP_V1, MEM_CGROUP_V2 };

struct mem_sample {
	enum mem_scope scope;
	uint64_t limit;             /* bytes the daemon's world may use: the cgroup limit
				     * (the tightest up its hierarchy), or MemTotal */
	uint64_t pinned;            /* anonymous, shared and unevictable bytes in use */
	uint64_t mapped;            /* file bytes mapped by processes (libraries) */
	uint64_t file;              /* page cache bytes (mapped or not) */
	uint64_t majfaults;         /* major faults so far (a counter) */
	uint64_t refaults;          /* file pages read again soon after the kernel evicted
				     * them (workingset_refault_file; a counter) */
	uint64_t shmem;             /* of pinned, shared memory (tmpfs, /dev/shm: a
				     * DataLoader's batches, a persistent arena) */
	uint64_t own;               /* of pinned, the calling process's own: its anonymous
				     * and shared resident bytes (RssAnon + RssShmem in
				     * /proc/self/status); 0 when unknown */
	uint64_t own_shmem;         /* of own, RssShmem */
};

struct memwatch;

/* Finds the daemon's memory cgroup below ROOT ("" for the real system;
 * tests give a directory laid out like / with proc/self/cgroup,
 * proc/meminfo, proc/vmstat and sys/fs/cgroup/...). A cgroup without a
 * limit (or none at all) gives MEM_SYSTEM. 0 and *OUT, or -ENOMEM. */
int memwatch_open(const char *root, struct memwatch **out);
void memwatch_close(struct memwatch *m);
enum mem_scope memwatch_scope(const struct memwatch *m);
/* 0 and *S, or -errno (a file vanished or could not be parsed). */
int memwatch_sample(struct memwatch *m, struct mem_sample *s);
/* 1 if process PID's memory is part of what M watches: M is the machine,
 * or PID's memory cgroup is M's or one below it; 0 otherwise (another
 * cgroup, PID gone or 0, its /proc/PID/cgroup unreadable). A job in a
 * cgroup of its own, beside a daemon in another (a systemd unit, a
 * DaemonSet), is not. Reads M's fixed fields only: safe beside a
 * memwatch_sample() in another thread. */
int memwatch_holds(const struct memwatch *m, int pid);

/* What is left for page cache and new allocations: limit - pinned -
 * mapped, 0 if none. */
static inline uint64_t mem_room(const struct mem_sample *s)
{
	uint64_t used = s->pinned + s->mapped;

	return s->limit > used ? s->limit - used : 0;
}

/* The memory the daemon may count on at start: the cgroup's limit or the
 * machine's RAM, whichever is smaller (0 if neither can be read). */
uint64_t memwatch_limit_bytes(void);

#endif
