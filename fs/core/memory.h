/* pressure.h - a cache that never squeezes the job it serves.
 *
 * The daemon's RAM cache is anonymous memory the kernel cannot reclaim;
 * the job beside it (in the same container, pod or cgroup, or just on the
 * same machine) needs room for its own memory and its libraries' pages. A
 * thread samples memwatch (fs/util/memwatch.h) twice a second and acts in
 * three steps, each undone when room comes back:
 *
 * 1. Kernel copies. Every file read through the mount leaves a copy in the
 *    kernel's page cache above it. When the room left (limit - pinned -
 *    mapped) could hold the whole dataset, those copies are what makes warm
 *    epochs fast, and are kept. When it could not, they can only churn (a
 *    shuffled epoch over a dataset larger than the page cache hits little)
 *    and they push the job's own pages out: the mount then asks the kernel
 *    to drop each file's copy a moment after the file was read to its end
 *    (--page-cache auto; keep and drop force either).
 * 2. Pause. When the room falls under RESERVE, or the job's evicted pages
 *    come back as refaults while the room is under 2 x RESERVE (the sign
 *    of a job squeezed), the cache admits nothing past what is resident
 *    already (the prefaulted arena stays open); what it holds stays.
 *    Whenever a sample finds room over 2 x RESERVE again, it may grow a
 *    give-back step past what it holds (a job's room dips every few
 *    seconds, so waiting for CALM_S of room could freeze it small).
 * 3. Give back. When the room falls under RESERVE / 2 while limit -
 *    pinned is under 2 x RESERVE or refaults pass CRITICAL_REFAULTS_PER_S
 *    (the OOM killer is near, and it picks the biggest process: the
 *    daemon; a room of zero is otherwise the kernel trimming cold mapped
 *    pages, which costs the job nothing), or the job
 *    keeps refaulting for SQUEEZE_GIVE_S with the cache paused, the cache
 *    gives back its newest items, a step at a time, each step counted and
 *    logged. For lack of room alone it gives at most half its capacity
 *    (mapped pages grow into what is freed); past that only when limit -
 *    pinned (nothing reclaimable) nears the limit, or a squeeze, takes more.
 * Room again (2 x RESERVE, no squeeze for CALM_S): the cache admits again,
 * up to its --cache-size; after a give-back, only into the free room.
 * 4. The job's peak. Steps 1-3 react to a room already gone; a job whose
 *    memory jumps (four DataLoader workers each writing a 38 MB batch into
 *    shared memory) can go from room to the OOM killer between two samples.
 *    So the policy also keeps the daemon's own memory (its anonymous and
 *    shared bytes, memwatch's own) under a ceiling: the limit, less the
 *    highest the rest of the cgroup (the job) has been seen to use, less a
 *    margin of RESERVE / 4 and the most a new peak has passed the one before
 *    (the job's next peak may be a batch above the last). The peak decays
 *    slowly (limit / 4096 a second), that jump halves every RISE_HALF_S.
 *    Over the ceiling, the daemon gives back the excess at once (staging
 *    first, then whole cache items), not a step every 2 s, without leaving
 *    its state; under it, the cache and staging grow only up to it. Within
 *    4 x RESERVE of it, the thread samples every MEMORY_FAST_S.
 *    A job's worst case need not be seen to be counted: a loader under
 *    epochfs-run says how many bytes of batches it may hold at once
 *    (workers x prefetch_factor x a batch's bytes, a "#batches" line on
 *    its order stream), and the job's peak is then at least its memory
 *    without the shared memory it holds now plus that. Four workers'
 *    eight batches of 38.5 MB all in flight at once came between two
 *    samples and the OOM killer took the daemon (part 7, W = 4, 942 MiB,
 *    1 run of 2).
 *
 * The policy is a pure function of samples (memory_step), so tests drive
 * it with made-up numbers; the thread only feeds it and carries out what
 * it says.
 */
#ifndef EPOCHFS_MEMORY_H
#define EPOCHFS_MEMORY_H

#include <stdint.h>

#include "util/memwatch.h"

enum page_cache_mode { PAGE_CACHE_AUTO, PAGE_CACHE_KEEP, PAGE_CACHE_DROP };
enum memory_state { MEMORY_CALM, MEMORY_PAUSED, MEMORY_GIVING };

#define MEMORY_PERIOD_S 0.5
#define MEMORY_FAST_S 0.05              /* near the ceiling (a sample costs ~100 us) */
#define RISE_HALF_S 20.0                /* 4: the largest jump seen halves this often */
#define MEMORY_GUARD_SLACK (4ull << 20) /* 4: the cache admits up to this far under the
					 * ceiling and gives back to this far under it, so
					 * the peak's decay and a sample's noise do not make
					 * it admit and give back by turns */
#define MEMORY_TRIM_S 2.0               /* malloc_trim at most this often, when tight */
#define SQUEEZE_REFAULTS_PER_S 2048.0   /* file pages refaulting: 8 MiB/s; the part 7 job
					 * refaults ~700/s in a healthy tight cgroup, a squeezed
					 * one thousands */
#define CRITICAL_REFAULTS_PER_S 256.0 /* with no room: the job's pages come back (1 MiB/s) */
#define SQUEEZE_GIVE_S 10.0             /* squeezed this long while paused: give back */
#define CALM_S 30.0                     /* no squeeze this long, and room: admit again */
#define MEMORY_DROP_CALM_MS 2000        /* a kernel copy goes this long after its file was read */
#define MEMORY_DROP_TIGHT_MS 200        /* ... while the cache is paused or giving back */

/* What the policy sees at one sample. */
struct memory_in {
	double t;                   /* seconds, monotonic */
	struct mem_sample mem;
	uint64_t dataset_bytes;     /* what the mount serves */
	uint64_t cache_capacity;    /* --cache-size (0: no cache) */
	uint64_t cache_used;
	uint64_t cache_need;        /* what the cache would take to hold the whole dataset */
	uint64_t staging_max;       /* --prefetch-mem (0: no prefetch) */
	uint64_t staging_used;      /* bytes staged now */
	int orders;                 /* a job sends its order (.epochfs/order/ streams) */
	uint64_t job_batches;       /* 4: the most the jobs say their loaders may hold in
				     * batches at once ("#batches" lines; 0: none said) */
};

/* What it decides. */
struct memory_out {
	int drop_copies;            /* ask the kernel to drop files' copies once read */
	enum memory_state state;
	uint64_t give_back;         /* bytes of cache to give back now (0: none) */
	uint64_t admit_limit;       /* CALM: the cache may fill up to this; PAUSED with room
				     * now: a step past what it holds; 0: keep the limit */
	uint64_t staging_limit;     /* what the prefetcher may stage: --prefetch-mem when calm,
				     * nothing under pressure */
	int changed;                /* state or drop_copies changed at this step: log it */
	int guard;                  /* 4: the daemon was over its ceiling; give_back is the excess */
	uint64_t ceiling;           /* 4: what the daemon's own memory may reach (0: unknown) */
	double period;              /* seconds to the next sample */
};

/* The policy's memory between samples. */
struct memory_policy {
	enum page_cache_mode mode;
	int started;
	double last_t;
	uint64_t last_refaults;
	double refault_rate;        /* file pages a second, smoothed */
	double squeezed_since;      /* < 0: not squeezed */
	double calm_since;          /* < 0: not calm */
	double last_give;
	int gave;                   /* the cache ever gave back: calm regrows into free room only */
	uint64_t soft_given;        /* bytes given back for lack of room alone (capacity / 2 at most) */
	int drop_copies;
	enum memory_state state;
	uint64_t job_peak;          /* 4: the most the rest of the cgroup used (decaying) */
	uint64_t last_job;
	double jump;                /* 4: the most a new peak passed the last (halving) */
};

void memory_policy_init(struct memory_policy *p, enum page_cache_mode mode);
void memory_step(struct memory_policy *p, const struct memory_in *in, struct memory_out *out);
/* Staging's share of a cache of CAPACITY bytes that cannot hold the
 * dataset (it would take NEED): min(PREFETCH_MEM, CAPACITY / 4); 0 when
 * the cache holds the dataset or there is none. While a job sends its
 * order the cache leaves it free (cache_set_reserve) and staging holds at
 * most that, so the two together never pass --cache-size. */
uint64_t memory_staging_share(uint64_t capacity, uint64_t need, uint64_t prefetch_mem);
/* The room the policy keeps free: max(32 MiB, limit / 32). */
uint64_t memory_reserve(uint64_t limit);

/* ---- the thread ---- */

struct core;
struct memory;

struct memory_stats {
	uint64_t limit, room, mapped; /* gauges, bytes: the last sample */
	uint64_t refaults_per_s;    /* gauge: the smoothed rate */
	int drop_copies;            /* gauge */
	enum memory_state state;  /* gauge */
	uint64_t given_back;        /* bytes of cache given back */
	uint64_t pauses;            /* times admission was paused */
	uint64_t own, job_peak, ceiling; /* gauges, bytes: 4, the job's peak */
	uint64_t job_max, own_max;  /* the most the job, and the daemon, were seen to use */
	uint64_t job_batches;       /* gauge: 4, the batches the jobs said they may hold */
	uint64_t guard_gives;       /* times the daemon gave back for being over its ceiling */
	uint64_t aside_given;       /* bytes of cache given back to stand aside (aside.h) */
};

/* Starts watching for core C (whose cache, if any, it pauses and shrinks,
 * and whose drop_copies flag it sets). MODE as --page-cache. 0 and *OUT,
 * or -errno. */
int memory_start(struct core *c, enum page_cache_mode mode, struct memory **out);
void memory_stop(struct memory *p);
void memory_get_stats(struct memory *p, struct memory_stats *s);
/* 1 if process PID's memory is in the cgroup P watches (memwatch_holds):
 * what the process says of its memory (a loader's "#batches") then
 * counts in the job's peak. Any thread. */
int memory_holds(struct memory *p, int pid);

#endif
