/* aside.h - a cache that cannot pay stands aside (issue 28: never slower
 * than native).
 *
 * The MinIO cache pays when the job waits for storage: each hit is a read
 * the device no longer makes. When the job is bound by its own CPU (one
 * DataLoader worker decoding, a fast disk), storage keeps up without the
 * cache and each hit only costs: the bytes are copied through the daemon,
 * a round trip the worker waits for, while the kernel would have read
 * them from SOURCE's page cache on its own (part 7 at one worker: 1.09-1.23x
 * native, docs/benchmarks.md). Whether the cache pays is not known ahead
 * (it depends on the job's CPU, the disk, the memory), so the daemon
 * measures it on the job itself:
 *
 * 1. Warming. The cache fills (epoch 0). Once the job has opened as many
 *    files as the dataset has and the cache's bytes stopped growing over
 *    a window, the trial starts.
 * 2. Trial: four windows of the job's opens, served by turns from the
 *    cache as always (C) and by the kernel from SOURCE through FUSE
 *    passthrough (S, the cache kept but unused), C S C S. A window is the
 *    mean time between the job's opens of data files, pauses (an epoch's
 *    end, an evaluation) left out: gaps over ASIDE_OUTLIER times the
 *    window's median. Each window starts after a settling quarter.
 * 3. If S's mean is within ASIDE_MARGIN of C's (or better), the cache does
 *    not pay: it stands aside. Every open is then read by the kernel from
 *    SOURCE, the cache gives back all its memory (the page cache, the job,
 *    the host get it), staging stages nothing. Else the cache serves on,
 *    and the trial comes again after a backoff of windows (doubling).
 * 4. Aside, the windows go on: if the job's opens come ASIDE_BACK times
 *    slower than the trial measured, two windows in a row (another job on
 *    the disk, a new phase), the cache comes back, fills again, and a
 *    trial follows (with the backoff doubled).
 *
 * Only where every open can go to SOURCE (--passthrough on, in effect: the
 * kernel offers passthrough, the daemon may register backing files, no
 * peers, tier or manifest) and the memory watcher runs (it carries out the
 * give-back). The policy (aside_window) is a pure function of the windows,
 * so tests drive it with made-up numbers; struct aside collects the windows
 * from the open path (any thread).
 */
#ifndef EPOCHFS_ASIDE_H
#define EPOCHFS_ASIDE_H

#include <stdint.h>

enum aside_phase {
	ASIDE_OFF,          /* not for this mount */
	ASIDE_WARMING,      /* the cache fills; no trial yet */
	ASIDE_SERVING,      /* the cache serves (a trial lost, or waiting for the next) */
	ASIDE_TRY_CACHE,    /* trial: a window served as always */
	ASIDE_TRY_SOURCE,   /* trial: a window read from SOURCE, the cache kept */
	ASIDE_ASIDE,        /* the cache stands aside: everything from SOURCE, its memory given back */
};

#define ASIDE_MARGIN 0.02           /* S within 2% of C: the cache does not pay */
#define ASIDE_BACK 1.30             /* aside, opens this much slower than the trial: come back */
#define ASIDE_OUTLIER 8.0           /* a gap over 8 x the median is a pause, not a file */
#define ASIDE_WINDOW_MIN 32u        /* opens a window counts: files / 8, within these */
#define ASIDE_WINDOW_MAX 2048u
#define ASIDE_BACKOFF_MIN 16u       /* windows between a lost trial and the next (doubling) */
#define ASIDE_BACKOFF_MAX 512u
#define ASIDE_GROWN 0.01            /* the cache grew less than 1% of its capacity: warm */

/* What a window's end changed (for the log and the counters). */
enum aside_event { ASIDE_EV_NONE, ASIDE_EV_TRIAL, ASIDE_EV_STAND, ASIDE_EV_STAY, ASIDE_EV_BACK };

struct aside_policy {
	enum aside_phase phase;
	uint32_t window;            /* gaps a window counts */
	uint32_t settle;            /* opens skipped after a switch, before the window counts */
	uint64_t files;             /* the dataset's files: an epoch's opens */
	uint64_t since;             /* opens counted since warming started */
	uint64_t last_used;         /* the cache's bytes at the last window's end */
	int step;                   /* trial: windows done (0-3) */
	double try_cache[2], try_source[2];
	double ref;                 /* aside: the trial's SOURCE figure */
	int slow;                   /* aside: windows in a row over ref x ASIDE_BACK */
	uint32_t wait;              /* serving: windows before the next trial */
	uint32_t backoff;
	/* What the last trial measured (seconds between opens) and counters. */
	double cache_gap, source_gap;
	uint64_t trials, stood, came_back;
};

/* A policy for a dataset of FILES files. */
void aside_policy_init(struct aside_policy *p, uint64_t files);
/* The mean of GAPS[0..N) left after the pauses (gaps over ASIDE_OUTLIER x
 * the median) are taken out; reorders GAPS. 0 when N is 0. */
double aside_trimmed_mean(double *gaps, uint32_t n);
/* A window ended: its trimmed mean GAP (seconds between opens), OPENS the
 * opens it took (settling ones included), the cache's bytes USED of
 * CAPACITY now. Moves the phase; returns what changed. */
enum aside_event aside_window(struct aside_policy *p, double gap, uint32_t opens, uint64_t used,
			      uint64_t capacity);
/* Opens to skip before the window that starts in phase PH counts. */
uint32_t aside_settle(const struct aside_policy *p);
const char *aside_phase_name(enum aside_phase ph);

/* ---- the collector, fed by the open path ---- */

struct aside;
struct cache;

/* A collector for a mount of FILES files whose cache is CACHE; NULL on
 * ENOMEM (the mount then runs without). */
struct aside *aside_new(uint64_t files, struct cache *cache);
void aside_free(struct aside *a);
/* The job opened a data file at time T (clock_now()). Any thread. */
void aside_open(struct aside *a, double t);
/* Whether opens go to SOURCE now (trial S windows, and aside). Any thread;
 * NULL: no. */
int aside_to_source(const struct aside *a);
/* Whether the cache gives its memory back and staging stages nothing
 * (aside), or only staging pauses (a trial's S window): 2, 1 or 0. */
int aside_hold(const struct aside *a);
enum aside_phase aside_phase(const struct aside *a);
/* A copy of the policy (for the counters). */
void aside_get(struct aside *a, struct aside_policy *out);

#endif
