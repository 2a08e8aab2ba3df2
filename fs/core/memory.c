/* memory.c - the daemon's memory in one room: the policy and the thread
 * that carries it out; see memory.h.
 *
 * DESIGN
 * - The thread wakes every MEMORY_PERIOD_S (a sample reads three small
 *   files, about 30 us), feeds memory_step() and carries out its answer:
 *   the core's drop_copies flag (read by the read path), staging's limit,
 *   the cache's limit (paused: the bytes used now; calm: the capacity,
 *   less staging's share while a job sends its order) and give-backs.
 * - Refaults are smoothed over about 2.5 s, so one burst (a library loaded
 *   at import) is not taken for a squeeze; a squeeze counts only while the
 *   kernel copies are being dropped (memory is tight): with room for the
 *   whole dataset, refaults are someone else's business.
 * - A give-back step is max(16 MiB, capacity / 32), at most one every 2 s,
 *   so the kernel sees the room before the next step is decided.
 * - malloc's free memory goes back to the kernel (malloc_trim) at most
 *   every MEMORY_TRIM_S while the state is not calm or staging shrank,
 *   and at once when the daemon is over its ceiling (memory.h, step 4).
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/aside.h"
#include "core/core_int.h"
#include "core/memory.h"
#include "core/ns/order.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/staging.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memwatch.h"
#include "util/worker.h"

#define MIB (1ull << 20)
#define GIVE_EVERY_S 2.0
#define SMOOTH_S 2.5
#define PEAK_DECAY_DIV 4096.0      /* 4: the job's peak falls by limit / this a second */
#define GUARD_LOG_S 10.0            /* give-backs over the ceiling: a line this often */

uint64_t memory_reserve(uint64_t limit)
{
	uint64_t r = limit / 32;

	return r > 32 * MIB ? r : 32 * MIB;
}

void memory_policy_init(struct memory_policy *p, enum page_cache_mode mode)
{
	memset(p, 0, sizeof(*p));
	p->mode = mode;
	p->squeezed_since = p->calm_since = -1;
	p->last_give = -1e9;
	p->drop_copies = mode == PAGE_CACHE_DROP;
}

uint64_t memory_staging_share(uint64_t capacity, uint64_t need, uint64_t prefetch_mem)
{
	if (!capacity || capacity >= need)
		return 0;
	return prefetch_mem < capacity / 4 ? prefetch_mem : capacity / 4;
}

void memory_step(struct memory_policy *p, const struct memory_in *in, struct memory_out *out)
{
	uint64_t room = mem_room(&in->mem), reserve = memory_reserve(in->mem.limit);
	int drop = p->drop_copies, squeezed;
	enum memory_state st = p->state;

	if (p->started && in->t > p->last_t) {
		double dt = in->t - p->last_t;
		double inst = in->mem.refaults >= p->last_refaults ?
			      (double)(in->mem.refaults - p->last_refaults) / dt : 0;
		double a = dt / SMOOTH_S > 1 ? 1 : dt / SMOOTH_S;
		p->refault_rate += a * (inst - p->refault_rate);
	}
	/* 4. The rest of the cgroup (the job): its peak, and by how much it
	 * last went over its peak at once. */
	uint64_t own = in->mem.own, job = 0;
	if (own) {
		job = in->mem.pinned > own ? in->mem.pinned - own : 0;
		if (p->started && in->t > p->last_t) {
			double dt = in->t - p->last_t;
			double decay = (double)in->mem.limit / PEAK_DECAY_DIV * dt;
			double fall = (double)(p->job_peak - (p->job_peak > job ? job : p->job_peak));
			p->job_peak -= (uint64_t)(decay < fall ? decay : fall);
			p->jump *= pow(0.5, dt / RISE_HALF_S);
			/* A new peak: by how much it passed the old one. Every batch
			 * a DataLoader writes is a rise, but only rises past the
			 * peak bring the OOM killer nearer; at the slow pace the
			 * rise is scaled to one fast period (a batch lands at once,
			 * so this undercounts until the thread samples fast). */
			if (job > p->job_peak) {
				double r = (double)(job - p->job_peak);
				if (dt > 2 * MEMORY_FAST_S)
					r *= MEMORY_FAST_S / dt;
				if (r > p->jump)
					p->jump = r;
			}
		}
		if (job > p->job_peak)
			p->job_peak = job;
		/* The worst case the jobs said: their memory without the
		 * shared memory they hold now (batches in flight, mostly),
		 * plus every batch their loaders may hold at once. */
		if (in->job_batches) {
			uint64_t shm = in->mem.shmem > in->mem.own_shmem ? in->mem.shmem - in->mem.own_shmem : 0;
			uint64_t worst = job - (shm < job ? shm : job) + in->job_batches;
			if (worst > p->job_peak)
				p->job_peak = worst;
		}
		p->last_job = job;
	}
	p->started = 1;
	p->last_t = in->t;
	p->last_refaults = in->mem.refaults;

	/* 1. Kernel copies: kept while the room could hold the whole dataset. */
	if (p->mode == PAGE_CACHE_KEEP) {
		drop = 0;
	} else if (p->mode == PAGE_CACHE_DROP) {
		drop = 1;
	} else {
		uint64_t margin = in->mem.limit / 16 > 64 * MIB ? in->mem.limit / 16 : 64 * MIB;
		uint64_t need = in->dataset_bytes + margin;
		if (!drop && room < need)
			drop = 1;
		else if (drop && room > need + need / 10)
			drop = 0;
	}

	/* 2, 3. Pause, give back, admit again. */
	/* A squeeze is refaults while there is little room: with room to
	 * spare, the kernel's own LRU churn (the dataset's pages above and
	 * below the mount) refaults too, and giving back the cache would not
	 * help, only cost storage reads (measured: room 300 MiB, refaults over
	 * the threshold, the whole cache given away, epochs 1.0 D from disk). */
	squeezed = drop && p->refault_rate > SQUEEZE_REFAULTS_PER_S && room < 2 * reserve;
	if (squeezed && p->squeezed_since < 0)
		p->squeezed_since = in->t;
	else if (!squeezed)
		p->squeezed_since = -1;
	/* Critical: the room, mapped pages counted as used, is nearly gone,
	 * and either what the kernel cannot reclaim at all is within two
	 * reserves of the limit (a DataLoader batch, tens of MiB of shared
	 * memory, can land in a moment), or the job's evicted pages are
	 * coming back. Mapped pages are reclaimable at a refault each: a
	 * room of zero whose refaults stay low is the kernel trimming cold
	 * library pages, and giving the cache back for it only cost storage
	 * reads (part 7, 720 MiB: room touched 0 at ~20 refaults/s, 48 MiB
	 * given back, epochs at 0.57-0.61 D instead of 0.53). Waiting for the
	 * unreclaimable part alone to near the limit (under half a reserve)
	 * was too late: the OOM killer took the daemon at 679 MiB. */
	uint64_t hard_room = in->mem.limit > in->mem.pinned ? in->mem.limit - in->mem.pinned : 0;
	int critical = room < reserve / 2 &&
		       (hard_room < 2 * reserve || p->refault_rate > CRITICAL_REFAULTS_PER_S);
	/* Mapped pages grow into whatever is freed, so the room may stay near
	 * zero however much the cache gives: for room alone it gives at most
	 * half its capacity (part 7 at 678 MiB: the cache gave back down to
	 * 13 MiB and epochs read 1.0 D). Past that, only what the kernel
	 * cannot reclaim nearing the limit, or a squeezed job, takes more. */
	if (critical && p->soft_given >= in->cache_capacity / 2 && hard_room >= reserve / 2)
		critical = 0;
	int squeezed_long = squeezed && in->t - p->squeezed_since >= SQUEEZE_GIVE_S;
	if (room >= 2 * reserve && !squeezed) {
		if (p->calm_since < 0)
			p->calm_since = in->t;
	} else {
		p->calm_since = -1;
	}
	/* The ceiling: the limit less the job's peak, a quarter reserve (the
	 * kernel OOMs with a few MiB of file pages still in: part 7 at 900
	 * MiB, killed with 10 MiB left; the mapped pages the job needs beyond
	 * that are steps 1-3's room), and the largest jump seen (at most
	 * limit / 8): a peak not seen yet is likely one jump above the one
	 * seen. A whole reserve cost the daemon alone in its cgroup (split,
	 * D/2 + 32 MiB, nothing else there) 30 MiB of cache: 0.59 D read an
	 * epoch instead of 0.49. */
	uint64_t ceiling = 0, excess = 0;
	if (own) {
		uint64_t cap = in->mem.limit / 8;
		uint64_t margin = reserve / 4 + (p->jump < (double)cap ? (uint64_t)p->jump : cap);
		ceiling = in->mem.limit > p->job_peak + margin ? in->mem.limit - p->job_peak - margin : 0;
		/* Under a MiB over is noise between the two files a sample reads. */
		if (own > ceiling + MIB && (in->cache_used || in->staging_used))
			excess = own - ceiling + MEMORY_GUARD_SLACK;
	}
	switch (st) {
	case MEMORY_CALM:
		if (critical)
			st = MEMORY_GIVING;
		else if (room < reserve || squeezed)
			st = MEMORY_PAUSED;
		break;
	case MEMORY_PAUSED:
		if (critical || squeezed_long)
			st = MEMORY_GIVING;
		else if (p->calm_since >= 0 && in->t - p->calm_since >= CALM_S)
			st = MEMORY_CALM;
		break;
	case MEMORY_GIVING:
		if (!critical && !squeezed)
			st = MEMORY_PAUSED;
		break;
	}

	memset(out, 0, sizeof(*out));
	out->ceiling = ceiling;
	if (excess) {
		/* Over the ceiling: the excess at once, staging's first (cut
		 * below), then whole cache items, rounded up to a MiB. The state
		 * stays: steps 1-3 go on as they were. */
		uint64_t need = excess > in->staging_used ? excess - in->staging_used : 0;
		need = (need + MIB - 1) / MIB * MIB;
		out->give_back = need < in->cache_used ? need : in->cache_used;
		out->guard = 1;
		if (out->give_back) {
			p->last_give = in->t;
			p->gave = 1;
		}
	} else if (st == MEMORY_GIVING && in->cache_used && in->t - p->last_give >= GIVE_EVERY_S) {
		uint64_t step = in->cache_capacity / 32 > 16 * MIB ? in->cache_capacity / 32 : 16 * MIB;
		out->give_back = step < in->cache_used ? step : in->cache_used;
		p->last_give = in->t;
		p->gave = 1;
		if (!squeezed_long)
			p->soft_given += out->give_back;
	}
	/* What the cache may fill up to. Calm: its capacity, unless it ever had
	 * to give back; then only what free room allows (above twice the
	 * reserve), so it never refills into the squeeze it just left (the
	 * first policy gave back, calmed, refilled from storage and gave back
	 * again, every 30 s). Paused or giving: what it holds (0 here: the
	 * thread keeps the limit it set). */
	if (st == MEMORY_CALM) {
		uint64_t lim = in->cache_capacity;
		if (p->gave) {
			uint64_t free_room = room > 2 * reserve ? room - 2 * reserve : 0;
			if (in->cache_used + free_room < lim)
				lim = in->cache_used + free_room;
		}
		out->admit_limit = lim;
	} else if (st == MEMORY_PAUSED && !squeezed && room >= 2 * reserve) {
		/* Paused, but there is room right now: grow into it a step at a
		 * time. Waiting for CALM_S of room left a cache paused early in
		 * epoch 0 at a fifth of its size for good: a DataLoader's batches
		 * dip the room every few seconds, so 30 s of calm never came
		 * (part 7, 720 MiB: epochs at 0.9 D). A step it must give back
		 * again costs one give-back step of storage reads. */
		uint64_t step = in->cache_capacity / 32 > 16 * MIB ? in->cache_capacity / 32 : 16 * MIB;
		uint64_t grow = room - 2 * reserve < step ? room - 2 * reserve : step;
		out->admit_limit = in->cache_used + grow < in->cache_capacity ?
				   in->cache_used + grow : in->cache_capacity;
	}
	/* Staging, the cheapest memory to give up (its items are fetched again
	 * if wanted), goes first: none under pressure. Calm, it gets its share
	 * of the cache's budget (memory_staging_share), which the cache leaves
	 * free while a job sends its order (the core sets the cache's reserve
	 * as streams come and go), so cache and staging together stay within
	 * --cache-size: on top of it, part 7's epochfs-run was OOM-killed with
	 * 88 MiB beside the pipeline and a D/2 cache. Less when the cache took
	 * more before an order came. A cache that can hold the dataset leaves
	 * staging what it does not hold; no cache at all, --prefetch-mem. */
	if (st == MEMORY_CALM) {
		uint64_t carve = memory_staging_share(in->cache_capacity, in->cache_need, in->staging_max);
		if (!in->cache_capacity) {
			out->staging_limit = in->staging_max;
		} else if (in->cache_capacity < in->cache_need) {
			uint64_t left = in->cache_used < in->cache_capacity ? in->cache_capacity - in->cache_used : 0;
			/* A cache filled before any order came (it never
			 * evicts) leaves staging what it did not take. */
			out->staging_limit = carve < left ? carve : left;
		} else {
			/* The cache may take the whole dataset: staging gets
			 * what the cache does not hold (with peers or a tier, the
			 * cache keeps only part of it, and staging the rest). */
			uint64_t left = in->cache_used < in->cache_capacity ? in->cache_capacity - in->cache_used : 0;
			out->staging_limit = in->staging_max < left ? in->staging_max : left;
		}
	}
	/* Under the ceiling, the cache and staging each grow no more than
	 * the ceiling leaves (0 stays 0: the thread keeps the limit it set);
	 * over it, staging gives its part of the excess. */
	if (own) {
		uint64_t head = ceiling > own + MEMORY_GUARD_SLACK ? ceiling - own - MEMORY_GUARD_SLACK : 0;
		if (out->admit_limit && out->admit_limit > in->cache_used + head)
			out->admit_limit = in->cache_used + head ? in->cache_used + head : 1;
		uint64_t stage_cap = in->staging_used + head;
		if (excess)
			stage_cap = in->staging_used > excess ? in->staging_used - excess : 0;
		if (out->staging_limit > stage_cap)
			out->staging_limit = stage_cap;
	}
	/* Sample fast while the daemon is near its ceiling, or the room near
	 * gone: that is when a jump can bring the OOM killer. */
	out->period = MEMORY_PERIOD_S;
	if (own && (own + 4 * reserve > ceiling || room < 2 * reserve))
		out->period = MEMORY_FAST_S;
	out->changed = st != p->state || drop != p->drop_copies;
	p->state = out->state = st;
	p->drop_copies = out->drop_copies = drop;
}

/* ---- the thread ---- */

struct memory {
	struct core *c;
	struct memwatch *mw;
	struct memory_policy pol;
	uint64_t dataset;
	double trimmed;             /* when malloc's free memory last went back */
	double period;              /* to the next sample (w.lock) */
	double guard_logged;        /* 4: when a give-back over the ceiling was last logged */
	uint64_t guard_given;       /* bytes given over the ceiling since */
	unsigned guard_times;       /* in that many steps */
	struct worker w;            /* the thread; its lock guards st */
	struct memory_stats st;   /* w.lock */
};

static const char *state_name(enum memory_state s)
{
	return s == MEMORY_CALM ? "calm" : s == MEMORY_PAUSED ? "paused" : "giving back";
}

static void tick(struct memory *p)
{
	struct core *c = p->c;
	struct memory_in in = { .t = clock_now(), .dataset_bytes = p->dataset };
	struct memory_out out;
	struct cache_stats cs = { 0 };
	enum memory_state was = p->pol.state;
	uint64_t given = 0, aside_back = 0;

	if (memwatch_sample(p->mw, &in.mem) < 0)
		return;
	if (c->cache) {
		cache_get_stats(c->cache, &cs);
		in.cache_capacity = cs.capacity;
		in.cache_used = cs.used;
		in.cache_need = c->cache_need;
	}
	if (c->staging) {
		struct staging_stats ss;
		staging_get_stats(c->staging, &ss);
		in.staging_used = ss.bytes;
		in.staging_max = c->opts.prefetch_mem;
	}
	if (c->order) {
		struct order_stats os;
		order_get_stats(c->order, &os);
		in.orders = os.streams > 0;
		in.job_batches = os.job_batches;
	}
	memory_step(&p->pol, &in, &out);
	/* Standing aside (aside.h): staging stages nothing while opens go to
	 * SOURCE; aside, the cache also gives back all it holds, below. */
	int hold = aside_hold(__atomic_load_n(&c->aside, __ATOMIC_ACQUIRE));
	uint64_t shrunk = 0;
	if (c->staging)
		shrunk = staging_set_limit(c->staging, hold ? 0 : out.staging_limit);
	/* Freed item-sized buffers (staged items, peer frames, the tier's
	 * queue) stay in malloc's arenas, memory the budget cannot see; they
	 * go back to the kernel while memory is tight or staging shrank. Not
	 * by a fixed mmap threshold: one of 64 KiB made every peer hit mmap and
	 * fault in a fresh buffer, +50 us a hit and a fifth of 4 threads'
	 * peer throughput (docs/benchmarks.md, the house of issue 30). */
#ifdef __GLIBC__
	if (out.guard || ((out.state != MEMORY_CALM || shrunk) && in.t - p->trimmed >= MEMORY_TRIM_S)) {
		malloc_trim(0);
		p->trimmed = in.t;
	}
#endif
	/* Kernel copies next: the ones dropped go sooner under pressure. */
	__atomic_store_n(&c->drop_delay_ms, out.state == MEMORY_CALM ? MEMORY_DROP_CALM_MS : MEMORY_DROP_TIGHT_MS,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&c->drop_copies, out.drop_copies, __ATOMIC_RELAXED);
	if (c->cache && hold != 2) {
		if (out.state == MEMORY_CALM)
			cache_set_limit(c->cache, out.admit_limit);
		else if (was == MEMORY_CALM)
			/* Paused: nothing past what is resident already. The
			 * prefaulted arena costs no more memory when filled, so
			 * it stays open (pausing it only made misses: epochs at
			 * 0.96 D in part 7, paused before the cache held D/2). */
			cache_set_limit(c->cache, cs.used > cs.prefaulted ? cs.used : cs.prefaulted);
		else if (out.state == MEMORY_PAUSED && out.admit_limit > cs.limit)
			cache_set_limit(c->cache, out.admit_limit);
	}
	if (c->cache && hold == 2) {
		/* Aside: nothing admitted, nothing prefaulted, every byte back
		 * (what a reader is copying, at the next tick). */
		cache_set_limit(c->cache, 0);
		if (cs.used || cs.prefaulted) {
			aside_back = cache_give_back(c->cache, cs.used + cs.prefaulted);
			if (aside_back)
				log_info("stand-aside: the cache gave back %.1f MiB", (double)aside_back / MIB);
		}
		out.give_back = 0;
	}
	int empties = 0;            /* given from the arena's unfilled pages, no item */
	if (c->cache && out.give_back) {
		struct cache_stats after;
		given = cache_give_back(c->cache, out.give_back);
		cache_get_stats(c->cache, &after);
		empties = after.given_back_items == cs.given_back_items;
	}
	if (out.changed || given) {
		uint64_t room = mem_room(&in.mem);
		if (given && empties)
			log_warn("memory: %llu MiB left of a %llu MiB limit, the job refaulting %.0f "
				 "pages/s; the cache returned %llu MiB of arena it had not filled yet "
				 "(it keeps its %llu MiB of items)",
				 (unsigned long long)(room / MIB), (unsigned long long)(in.mem.limit / MIB),
				 p->pol.refault_rate, (unsigned long long)(given / MIB),
				 (unsigned long long)(cs.used / MIB));
		else if (given && out.guard) {
			p->guard_given += given;
			p->guard_times++;
			if (in.t - p->guard_logged >= GUARD_LOG_S) {
				log_warn("memory: the daemon held %llu MiB, over the %llu MiB its cgroup leaves "
					 "beside the job's peak of %llu MiB (limit %llu MiB); the cache gave "
					 "back %llu MiB at once in %u step%s (whole items; it keeps %llu MiB)",
					 (unsigned long long)(in.mem.own / MIB), (unsigned long long)(out.ceiling / MIB),
					 (unsigned long long)(p->pol.job_peak / MIB),
					 (unsigned long long)(in.mem.limit / MIB),
					 (unsigned long long)(p->guard_given / MIB), p->guard_times,
					 p->guard_times == 1 ? "" : "s", (unsigned long long)((cs.used - given) / MIB));
				p->guard_logged = in.t;
				p->guard_given = 0;
				p->guard_times = 0;
			}
		} else if (given)
			log_warn("memory: %llu MiB left of a %llu MiB limit, the job refaulting %.0f "
				 "pages/s; the cache gave back %llu MiB (whole items; it keeps %llu MiB)",
				 (unsigned long long)(room / MIB), (unsigned long long)(in.mem.limit / MIB),
				 p->pol.refault_rate, (unsigned long long)(given / MIB),
				 (unsigned long long)((cs.used - given) / MIB));
		else
			log_info("memory: %llu MiB left of a %llu MiB limit (dataset %llu MiB): "
				 "the cache is %s; files' copies in the kernel's page cache are %s",
				 (unsigned long long)(room / MIB), (unsigned long long)(in.mem.limit / MIB),
				 (unsigned long long)(p->dataset / MIB),
				 out.state == MEMORY_CALM ? "admitting" : state_name(out.state),
				 out.drop_copies ? "dropped once read" : "kept");
	}
	pthread_mutex_lock(&p->w.lock);
	p->st.limit = in.mem.limit;
	p->st.room = mem_room(&in.mem);
	p->st.mapped = in.mem.mapped;
	p->st.refaults_per_s = (uint64_t)p->pol.refault_rate;
	p->st.drop_copies = out.drop_copies;
	p->st.state = out.state;
	p->st.given_back += given;
	p->st.aside_given += aside_back;
	p->st.own = in.mem.own;
	p->st.job_peak = p->pol.job_peak;
	if (p->pol.last_job > p->st.job_max)
		p->st.job_max = p->pol.last_job;
	if (in.mem.own > p->st.own_max)
		p->st.own_max = in.mem.own;
	p->st.ceiling = out.ceiling;
	p->st.job_batches = in.job_batches;
	if (out.guard && given)
		p->st.guard_gives++;
	p->period = out.period;
	if (was == MEMORY_CALM && out.state != MEMORY_CALM)
		p->st.pauses++;
	pthread_mutex_unlock(&p->w.lock);
}

static void *memory_main(void *arg)
{
	struct memory *p = arg;

	pthread_mutex_lock(&p->w.lock);
	while (worker_running(&p->w)) {
		pthread_mutex_unlock(&p->w.lock);
		tick(p);
		pthread_mutex_lock(&p->w.lock);
		worker_wait(&p->w, p->period > 0 ? p->period : MEMORY_PERIOD_S);
	}
	pthread_mutex_unlock(&p->w.lock);
	return NULL;
}

int memory_holds(struct memory *p, int pid)
{
	return memwatch_holds(p->mw, pid);
}

int memory_start(struct core *c, enum page_cache_mode mode, struct memory **out)
{
	struct memory *p = calloc(1, sizeof(*p));
	struct index_totals t;
	int err;

	if (!p)
		return -ENOMEM;
	if ((err = memwatch_open("", &p->mw)) < 0)
		goto out_free;
	if ((err = worker_init(&p->w)) < 0)
		goto out_close;
	p->c = c;
	index_totals(c->ix, &t);
	p->dataset = t.bytes;
	memory_policy_init(&p->pol, mode);
	p->guard_logged = -1e9;
	tick(p);                    /* the first decision before the first read */
	if ((err = worker_start(&p->w, 1, memory_main, p)) < 0)
		goto out_destroy;
	*out = p;
	return 0;
out_destroy:
	worker_destroy(&p->w);
out_close:
	memwatch_close(p->mw);
out_free:
	free(p);
	return err;
}

void memory_stop(struct memory *p)
{
	if (!p)
		return;
	worker_stop(&p->w);
	worker_destroy(&p->w);
	memwatch_close(p->mw);
	free(p);
}

void memory_get_stats(struct memory *p, struct memory_stats *s)
{
	pthread_mutex_lock(&p->w.lock);
	*s = p->st;
	pthread_mutex_unlock(&p->w.lock);
}
