/* aside.c - a cache that cannot pay stands aside: the policy that decides
 * it from the job's own opens, and the collector the open path feeds; see
 * aside.h.
 *
 * DESIGN
 * - The figure is the time between the job's opens of data files: the one
 *   thing the daemon sees of every file in both modes (read by the kernel
 *   from SOURCE, the daemon sees no READ). The files come in the job's
 *   shuffled order, so two windows draw from the same sizes.
 * - The windows alternate (C S C S) so that a drift of the machine (another
 *   process, the page cache warming) falls on both sides.
 * - A tie goes to standing aside: the trial cannot see what the memory
 *   given back buys the job (the cache is kept during it), only what the
 *   cache's hits buy.
 * - One mutex over the window; an open takes it once (a few adds). The
 *   window's end sorts at most ASIDE_WINDOW_MAX doubles and reads the
 *   cache's counters (atomics) under it: the lock is a leaf.
 * - The phase is an atomic copy of the policy's, so the open path and the
 *   memory watcher read it without the lock; what the memory watcher does
 *   with it (staging's limit, the give-back) lags by at most a tick.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/aside.h"
#include "store/cache.h"
#include "util/log.h"

#define MIB (1ull << 20)

const char *aside_phase_name(enum aside_phase ph)
{
	static const char *const names[] = { "off", "warming", "serving", "trial (cache)", "trial (source)",
					     "aside" };

	return (unsigned)ph < sizeof(names) / sizeof(names[0]) ? names[ph] : "?";
}

void aside_policy_init(struct aside_policy *p, uint64_t files)
{
	uint64_t w = files / 8;

	memset(p, 0, sizeof(*p));
	p->files = files;
	p->window = (uint32_t)(w < ASIDE_WINDOW_MIN ? ASIDE_WINDOW_MIN : w > ASIDE_WINDOW_MAX ? ASIDE_WINDOW_MAX : w);
	p->settle = p->window / 4;
	p->backoff = ASIDE_BACKOFF_MIN;
	p->phase = ASIDE_WARMING;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double aside_trimmed_mean(double *gaps, uint32_t n)
{
	double med, sum = 0;
	uint32_t k = 0;

	if (!n)
		return 0;
	qsort(gaps, n, sizeof(*gaps), cmp_double);
	med = n % 2 ? gaps[n / 2] : (gaps[n / 2 - 1] + gaps[n / 2]) / 2;
	for (uint32_t i = 0; i < n; i++)
		if (gaps[i] <= med * ASIDE_OUTLIER) {
			sum += gaps[i];
			k++;
		}
	return k ? sum / k : med;
}

uint32_t aside_settle(const struct aside_policy *p)
{
	return p->phase == ASIDE_TRY_CACHE || p->phase == ASIDE_TRY_SOURCE ? p->settle : 0;
}

static void start_trial(struct aside_policy *p)
{
	p->phase = ASIDE_TRY_CACHE;
	p->step = 0;
}

enum aside_event aside_window(struct aside_policy *p, double gap, uint32_t opens, uint64_t used,
			      uint64_t capacity)
{
	enum aside_event ev = ASIDE_EV_NONE;
	uint64_t grown = used > p->last_used ? used - p->last_used : 0;

	p->last_used = used;
	switch (p->phase) {
	case ASIDE_OFF:
		break;
	case ASIDE_WARMING:
		p->since += opens;
		/* An epoch's opens seen, and the cache no longer filling. */
		if (p->since >= p->files && (double)grown <= ASIDE_GROWN * (double)capacity) {
			start_trial(p);
			ev = ASIDE_EV_TRIAL;
		}
		break;
	case ASIDE_SERVING:
		if (p->wait)
			p->wait--;
		if (!p->wait) {
			start_trial(p);
			ev = ASIDE_EV_TRIAL;
		}
		break;
	case ASIDE_TRY_CACHE:
		p->try_cache[p->step / 2] = gap;
		p->phase = ASIDE_TRY_SOURCE;
		p->step++;
		break;
	case ASIDE_TRY_SOURCE:
		p->try_source[p->step / 2] = gap;
		if (++p->step < 4) {
			p->phase = ASIDE_TRY_CACHE;
			break;
		}
		p->cache_gap = (p->try_cache[0] + p->try_cache[1]) / 2;
		p->source_gap = (p->try_source[0] + p->try_source[1]) / 2;
		p->trials++;
		if (p->source_gap <= p->cache_gap * (1 + ASIDE_MARGIN)) {
			p->phase = ASIDE_ASIDE;
			p->ref = p->source_gap;
			p->slow = 0;
			p->stood++;
			ev = ASIDE_EV_STAND;
		} else {
			p->phase = ASIDE_SERVING;
			p->wait = p->backoff;
			p->backoff = p->backoff * 2 > ASIDE_BACKOFF_MAX ? ASIDE_BACKOFF_MAX : p->backoff * 2;
			ev = ASIDE_EV_STAY;
		}
		break;
	case ASIDE_ASIDE:
		p->slow = gap > p->ref * ASIDE_BACK ? p->slow + 1 : 0;
		if (p->slow >= 2) {
			/* The cache comes back and fills again: warming (an
			 * epoch at least), then a trial; the wait after a lost
			 * trial doubles, so a job that swings between the two
			 * is tried less and less often. */
			p->phase = ASIDE_WARMING;
			p->since = 0;
			p->came_back++;
			p->backoff = p->backoff * 2 > ASIDE_BACKOFF_MAX ? ASIDE_BACKOFF_MAX : p->backoff * 2;
			ev = ASIDE_EV_BACK;
		}
		break;
	}
	return ev;
}

/* ---- the collector ---- */

struct aside {
	pthread_mutex_t lock;
	struct aside_policy p;
	struct cache *cache;
	int phase;                  /* atomic: p.phase, for the open path's lock-free look */
	double last_t;              /* the last open (< 0: none yet) */
	uint32_t skip;              /* opens still to settle */
	uint32_t opens;             /* opens in this window, settling ones included */
	uint32_t n;
	double gaps[];
};

struct aside *aside_new(uint64_t files, struct cache *cache)
{
	struct aside_policy p;
	struct aside *a;

	aside_policy_init(&p, files);
	if (!(a = calloc(1, sizeof(*a) + p.window * sizeof(double))))
		return NULL;
	pthread_mutex_init(&a->lock, NULL);
	a->p = p;
	a->cache = cache;
	a->phase = p.phase;
	a->last_t = -1;
	return a;
}

void aside_free(struct aside *a)
{
	if (!a)
		return;
	pthread_mutex_destroy(&a->lock);
	free(a);
}

static void say(const struct aside_policy *p, enum aside_event ev, uint64_t used)
{
	switch (ev) {
	case ASIDE_EV_TRIAL:
		log_info("stand-aside: the cache is warm (%.1f MiB); a trial of %u opens a window: served "
			 "from it, then read by the kernel from SOURCE, by turns",
			 (double)used / MIB, p->window);
		break;
	case ASIDE_EV_STAND:
		log_info("stand-aside: the job opened a file every %.3f ms served from the cache, every "
			 "%.3f ms read from SOURCE: the cache does not pay here. It stands aside: the kernel "
			 "reads every file from SOURCE, and the cache gives back its %.1f MiB",
			 p->cache_gap * 1e3, p->source_gap * 1e3, (double)used / MIB);
		break;
	case ASIDE_EV_STAY:
		log_info("stand-aside: the job opened a file every %.3f ms served from the cache, every "
			 "%.3f ms read from SOURCE: the cache pays and serves on (next trial in %u windows)",
			 p->cache_gap * 1e3, p->source_gap * 1e3, p->wait);
		break;
	case ASIDE_EV_BACK:
		log_info("stand-aside: the job's opens came %.0f%% slower than the trial measured, two "
			 "windows in a row: the cache serves again and fills", (ASIDE_BACK - 1) * 100);
		break;
	case ASIDE_EV_NONE:
		break;
	}
}

void aside_open(struct aside *a, double t)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	if (a->last_t >= 0) {
		double gap = t - a->last_t;
		a->opens++;
		if (a->skip)
			a->skip--;
		else if (a->n < a->p.window)
			a->gaps[a->n++] = gap > 0 ? gap : 0;
	}
	a->last_t = t;
	if (a->n >= a->p.window) {
		struct cache_stats cs = { 0 };
		if (a->cache)
			cache_get_stats(a->cache, &cs);
		double mean = aside_trimmed_mean(a->gaps, a->n);
		enum aside_event ev = aside_window(&a->p, mean, a->opens, cs.used, cs.capacity);
		say(&a->p, ev, cs.used);
		a->n = 0;
		a->opens = 0;
		a->skip = aside_settle(&a->p);
		__atomic_store_n(&a->phase, (int)a->p.phase, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&a->lock);
}

enum aside_phase aside_phase(const struct aside *a)
{
	return a ? (enum aside_phase)__atomic_load_n(&a->phase, __ATOMIC_ACQUIRE) : ASIDE_OFF;
}

int aside_to_source(const struct aside *a)
{
	enum aside_phase ph = aside_phase(a);

	return ph == ASIDE_TRY_SOURCE || ph == ASIDE_ASIDE;
}

int aside_hold(const struct aside *a)
{
	enum aside_phase ph = aside_phase(a);

	return ph == ASIDE_ASIDE ? 2 : ph == ASIDE_TRY_SOURCE ? 1 : 0;
}

void aside_get(struct aside *a, struct aside_policy *out)
{
	pthread_mutex_lock(&a->lock);
	*out = a->p;
	pthread_mutex_unlock(&a->lock);
}
