/* prefetch.c - the prefetch thread; see prefetch.h (and docs/prefetch.md).
 *
 * DESIGN
 * - The thread sleeps until a batch of work is possible (room for
 *   WAKE_FILES files in the window, in staging and under the in-flight
 *   bound), not at every read: a wake-up costs tens of microseconds here,
 *   and the daemon's CPU is the job's (2 cores, docs/prefetch.md).
 * - Staging's bytes are reserved before anything is fetched, so fetches
 *   never overshoot its room; what a cache takes instead is given back. A
 *   file gets what room there is when it is chosen (all of it for most
 *   files), and its items are fetched in order while the reservation
 *   covers them. A file larger than that room (a shard: 100 MB-1 GB,
 *   against --prefetch-mem of tens of MB) is *parked* at its first item
 *   not fetched and goes on as its reader frees room, ahead of any file
 *   not chosen yet; parked files take turns (one per stream: a worker
 *   each, reading its own shard), and a stream's next file is chosen only
 *   while fewer files are parked than there are streams. Reserving a whole
 *   shard at once staged 203 MB of a 200 MB file against a 2 MiB limit
 *   (2026-11-28), which under a memory limit is an OOM kill. An empty
 *   staging lets one item through a limit lowered below it (staging.h),
 *   so a cache full before the order came still leaves prefetch one item
 *   ahead; that item is the most staging is ever over its limit.
 * - A "#range" place (order.h) fetches the items its bytes fall in, not
 *   its whole file, with no kernel probe (the kernel's copy of a part of
 *   a file is not worth a round trip to ask about).
 * - Items a reader has passed are not fetched: a read that found nothing
 *   staged tells where its reader is (prefetch_reader_miss), and a large
 *   file's fetches skip to past it.
 * - The kernel probe (is the file cached above the mount?) costs a FUSE
 *   message per file; when the last PROBE_SPAN probes found nothing cached,
 *   only one file in PROBE_SAMPLE is probed until one is found again.
 * - Where fetched bytes go is the read path's decision (plan.h), the same
 *   as for a reader's miss.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "core/core_int.h"
#include "core/ns/order.h"
#include "core/plan.h"
#include "core/prefetch.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/staging.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/worker.h"

#define WAKE_FILES 8u               /* the thread wakes for this much work at once */
#define PROBE_SPAN 128u             /* probes without a cached file before sampling */
#define PROBE_SAMPLE 16u            /* then one file in this many is probed */
#define SWEEP_S 0.5                 /* staged items past use and idle streams, this often */
#define IDLE_S 0.1                  /* the longest sleep without a wake-up */
#define READERS 16u                 /* readers' places in files, remembered */
#define READER_S 2.0                /* for this long (another job may read the file later) */

struct prefetch {
	struct core *c;
	struct order *order;
	struct staging *st;
	struct prefetch_opts o;
	struct worker w;            /* the thread; its lock guards what follows */
	unsigned inflight;          /* fetches issued, not landed, and probes */
	unsigned probes;            /* of inflight, probes the kernel has not answered */
	struct want *probing;       /* their wants (freed at the end if never answered) */
	int sleeping;               /* the thread waits for work */
	int stopping;               /* no fetch is issued any more */
	unsigned probe_dry;         /* probes in a row that found nothing cached */
	unsigned probe_skip;        /* files not probed since the last probe */
	struct want *parked;        /* files waiting for room, taking turns (FIFO) */
	struct want **parked_tail;
	unsigned nparked;
	unsigned wants;             /* atomic: files chosen and not done with (0: readers' misses are not noted) */
	struct { uint32_t id, chunk; double at; } reader[READERS];     /* the latest misses' items */
	unsigned reader_i;
	struct prefetch_stats stats;
};

/* A file the thread chose, on its way through the kernel probe. */
struct want {
	struct prefetch *pf;
	struct order_pick pick;
	uint64_t reserved;          /* staging bytes reserved for it, not taken yet */
	uint32_t next;              /* its first item not fetched yet */
	uint32_t end;               /* one past its last item (a "#range" place: its bytes') */
	uint64_t need;              /* parked: the room its next item needs beyond RESERVED */
	struct want *pnext, *pprev; /* lock: on pf->probing while the kernel has it */
	struct want *qnext;         /* lock: on pf->parked */
};

/* Could the thread issue a batch now? Lock held. */
static int work_ready(struct prefetch *pf)
{
	if (pf->stopping)
		return 1;
	uint64_t lim, room = staging_room(pf->st);
	struct staging_stats ss;
	staging_get_stats(pf->st, &ss);
	lim = ss.limit;
	if (pf->inflight + WAKE_FILES > pf->o.inflight || !lim)
		return 0;
	if (pf->parked && staging_fits(pf->st, pf->parked->need, pf->c->chunk))
		return 1;                   /* a parked file goes on when its next item fits */
	if (pf->parked) {               /* else a new file only for a stream with none parked */
		struct order_stats os;
		order_get_stats(pf->order, &os);
		if (pf->nparked >= os.streams)
			return 0;
	}
	if (room < lim / 16)
		return 0;
	return order_ready(pf->order, pf->o.window, WAKE_FILES);
}

void prefetch_wake(struct prefetch *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->w.lock);
	if (pf->sleeping && work_ready(pf)) {
		pf->sleeping = 0;
		worker_wake(&pf->w);
	}
	pthread_mutex_unlock(&pf->w.lock);
}

static void fetch_done(void *arg, ssize_t res, int kept)
{
	struct prefetch *pf = arg;

	pthread_mutex_lock(&pf->w.lock);
	pf->inflight--;
	if (res > 0)
		pf->stats.fetched_bytes += (uint64_t)res;
	if (res > 0 && kept)
		pf->stats.cached_bytes += (uint64_t)res;
	if (pf->sleeping && work_ready(pf)) {
		pf->sleeping = 0;
		worker_wake(&pf->w);
	}
	pthread_mutex_unlock(&pf->w.lock);
}

static void link_probe(struct prefetch *pf, struct want *w)
{
	w->pprev = NULL;
	w->pnext = pf->probing;
	if (pf->probing)
		pf->probing->pprev = w;
	pf->probing = w;
	pf->probes++;
	pf->inflight++;
}

static void unlink_probe(struct prefetch *pf, struct want *w)
{
	if (w->pprev)
		w->pprev->pnext = w->pnext;
	else
		pf->probing = w->pnext;
	if (w->pnext)
		w->pnext->pprev = w->pprev;
	pf->probes--;
	pf->inflight--;
}

/* Done with W: what of its reservation staging did not take goes back. */
static void want_end(struct want *w)
{
	__atomic_sub_fetch(&w->pf->wants, 1, __ATOMIC_RELAXED);
	staging_unreserve(w->pf->st, w->reserved);
	free(w);
}

/* The item past the furthest a reader of file ID was seen missing at in
 * the last READER_S seconds (0: none). Only that recent: the k jobs of a
 * search read the same files at other times, and one job's reads say
 * nothing of where another's reader is. Lock held. */
static uint32_t past_reader(struct prefetch *pf, uint32_t id)
{
	for (unsigned i = 0; i < READERS; i++)
		if (pf->reader[i].id == id && pf->reader[i].chunk)
			return clock_now_coarse() - pf->reader[i].at < READER_S ? pf->reader[i].chunk : 0;
	return 0;
}

void prefetch_reader_miss(struct prefetch *pf, uint32_t id, uint32_t chunk)
{
	/* A miss with no file being fetched (no order, or all done) takes no
	 * lock: this is on every storage miss's path. A file chosen just
	 * after still skips nothing wrongly, it only fetches what its
	 * reader may have read already. */
	if (!pf || !__atomic_load_n(&pf->wants, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&pf->w.lock);
	unsigned i;
	for (i = 0; i < READERS && pf->reader[i].id != id; i++)
		;
	if (i == READERS) {
		i = pf->reader_i++ % READERS;
		pf->reader[i].id = id;
		pf->reader[i].chunk = 0;
	}
	double now = clock_now_coarse();
	if (chunk + 1 > pf->reader[i].chunk || now - pf->reader[i].at >= READER_S)
		pf->reader[i].chunk = chunk + 1;
	pf->reader[i].at = now;
	pthread_mutex_unlock(&pf->w.lock);
}

/* Item K of the file is in the RAM cache, or loading into it. */
static int item_cached(struct core *c, uint32_t id, const struct index_attr *a, uint32_t k)
{
	struct cache_ref ref;

	if (!c->cache)
		return 0;
	enum cache_result r = cache_get_ex(c->cache, id, k, &a->v, cache_chunk_len(a->v.size, c->chunk, k), NULL,
					   &ref, 0);
	cache_put(c->cache, &ref);
	return r == CACHE_HIT || r == CACHE_WAIT;
}

/* W waits for room behind the files parked already. Lock held. */
static void park(struct prefetch *pf, struct want *w)
{
	pf->nparked++;
	w->qnext = NULL;
	*pf->parked_tail = w;
	pf->parked_tail = &w->qnext;
}

/* Fetches the items of W's file from W->next on that are not cached,
 * staged or on their way, nor behind its reader, while staging's room
 * covers them; parks W at the first that does not fit and returns 1, else
 * takes W and returns 0. */
static int fetch_items(struct want *w)
{
	struct prefetch *pf = w->pf;
	struct index_attr a;

	if (index_get(pf->c->ix, w->pick.id, &a) == 0 && !a.gone && S_ISREG(a.mode)) {
		uint32_t items = cache_chunks(a.v.size, pf->c->chunk);
		if (items > w->end)
			items = w->end;
		for (uint32_t k = w->next; k < items; k++) {
			if (staging_has(pf->st, w->pick.id, k) || item_cached(pf->c, w->pick.id, &a, k))
				continue;
			size_t len = cache_chunk_len(a.v.size, pf->c->chunk, k);
			if (w->reserved < len)
				w->reserved += staging_reserve(pf->st, len - w->reserved, pf->c->chunk);
			pthread_mutex_lock(&pf->w.lock);
			int stop = pf->stopping;
			uint32_t r = past_reader(pf, w->pick.id);
			if (!stop && r > k && r <= w->end) {
				/* Its reader is past these (a reader beyond a
				 * range's end reads another part of the file). */
				pthread_mutex_unlock(&pf->w.lock);
				k = r - 1;
				continue;
			}
			if (!stop && w->reserved < len) {
				w->next = k;        /* no room: on when a reader frees some */
				w->need = len - w->reserved;
				park(pf, w);
				pthread_mutex_unlock(&pf->w.lock);
				return 1;
			}
			if (!stop)
				pf->inflight++;
			pthread_mutex_unlock(&pf->w.lock);
			if (stop)
				break;
			struct plan_prefetch pp = { .group = w->pick.group, .place = w->pick.place,
						    .reserved = &w->reserved, .done = fetch_done, .arg = pf };
			/* Stages (takes of the reservation) before it returns, if it stages at all. */
			plan_prefetch(pf->c, w->pick.id, &a, k, &pp);
		}
	}
	want_end(w);
	return 0;
}

void prefetch_probed(struct prefetch *pf, void *cookie, int resident)
{
	struct want *w = cookie;

	pthread_mutex_lock(&pf->w.lock);
	unlink_probe(pf, w);
	if (resident) {
		pf->stats.resident++;
		pf->probe_dry = 0;
	} else if (pf->probe_dry < PROBE_SPAN) {
		pf->probe_dry++;
	}
	pthread_mutex_unlock(&pf->w.lock);
	if (resident)
		want_end(w);
	else
		(void)fetch_items(w);
}

/* Fetches the file P picked (or its "#range"'s items), unless it is cached
 * already (RAM, or its first item staged or on its way): asks the kernel
 * first whether it caches the file (the answer comes back through
 * prefetch_probed), else fetches now. */
static void issue_file(struct prefetch *pf, const struct order_pick *p)
{
	struct index_attr a;
	struct core *c = pf->c;
	uint32_t first = 0, end = UINT32_MAX;

	if (index_get(c->ix, p->id, &a) < 0 || a.gone || !S_ISREG(a.mode) || !a.v.size)
		return;
	uint64_t bytes = a.v.size;
	if (p->len) {
		if (p->off >= a.v.size)
			return;             /* past its end: nothing to read */
		uint64_t stop = p->len < a.v.size - p->off ? p->off + p->len : a.v.size;
		first = (uint32_t)(p->off / c->chunk);
		end = (uint32_t)((stop + c->chunk - 1) / c->chunk);
		uint64_t to = (uint64_t)end * c->chunk;
		bytes = (to < a.v.size ? to : a.v.size) - (uint64_t)first * c->chunk;
	}
	if (staging_has(pf->st, p->id, first))
		return;
	if (c->cache) {
		struct cache_ref ref;
		enum cache_result r = cache_get_ex(c->cache, p->id, first, &a.v,
						   cache_chunk_len(a.v.size, c->chunk, first), NULL, &ref, 0);
		cache_put(c->cache, &ref);
		/* In the RAM cache, or loading into it; with the cache spread
		 * through large files (spread.h), the first item says nothing
		 * of the others: fetch_items() looks at each. */
		if ((r == CACHE_HIT || r == CACHE_WAIT) &&
		    (!__atomic_load_n(&c->spread, __ATOMIC_RELAXED) ||
		     cache_chunks(a.v.size, c->chunk) < SPREAD_MIN_CHUNKS))
			return;
	}
	struct want *w = malloc(sizeof(*w));
	if (!w)
		return;
	*w = (struct want){ .pf = pf, .pick = *p, .next = first, .end = end };
	__atomic_add_fetch(&pf->wants, 1, __ATOMIC_RELAXED);
	w->reserved = staging_reserve(pf->st, bytes, c->chunk);     /* held while it is probed and staged */
	pthread_mutex_lock(&pf->w.lock);
	/* Probes that keep finding nothing cached are sampled. */
	int probe = c->probe && !p->len && (pf->probe_dry < PROBE_SPAN || ++pf->probe_skip >= PROBE_SAMPLE);
	if (probe) {
		pf->probe_skip = 0;
		link_probe(pf, w);          /* until answered */
	}
	pthread_mutex_unlock(&pf->w.lock);
	if (probe && c->probe(c->probe_arg, core_data_node(p->id, a.gen), w) < 0) {
		pthread_mutex_lock(&pf->w.lock);
		unlink_probe(pf, w);
		pthread_mutex_unlock(&pf->w.lock);
		probe = 0;
	}
	if (!probe)
		(void)fetch_items(w);
}

static int passed(void *arg, uint32_t group, uint32_t place)
{
	return order_passed(arg, group, place);
}

/* Frees staged items their stream's readers have passed, and parked files
 * likewise (their stream started over or ended, or its readers went past
 * them), and drops streams idle past their expiry. No lock held. */
static void sweep(struct prefetch *pf)
{
	struct order_heads h;
	struct want *gone = NULL;

	order_snapshot(pf->order, &h);
	staging_sweep(pf->st, passed, &h);
	pthread_mutex_lock(&pf->w.lock);
	for (struct want **p = &pf->parked; *p;) {
		struct want *w = *p;
		if (order_passed(&h, w->pick.group, w->pick.place)) {
			pf->nparked--;
			*p = w->qnext;
			w->qnext = gone;
			gone = w;
		} else {
			p = &w->qnext;
		}
	}
	pf->parked_tail = &pf->parked;
	while (*pf->parked_tail)
		pf->parked_tail = &(*pf->parked_tail)->qnext;
	pthread_mutex_unlock(&pf->w.lock);
	for (struct want *next; gone; gone = next) {
		next = gone->qnext;
		want_end(gone);
	}
	order_expire(pf->order);
}

/* The parked file at the head, if there is room for its next item. Lock held. */
static struct want *unpark(struct prefetch *pf)
{
	struct want *w = pf->parked;

	if (!w || !staging_fits(pf->st, w->need, pf->c->chunk))
		return NULL;
	pf->parked = w->qnext;
	if (!pf->parked)
		pf->parked_tail = &pf->parked;
	pf->nparked--;
	return w;
}

static void *prefetch_main(void *arg)
{
	struct prefetch *pf = arg;
	double last_sweep = clock_now();
	int go = 1;

	pthread_mutex_lock(&pf->w.lock);
	while (go) {
		int issued = 0;
		struct order_pick p;
		struct want *w;
		/* Parked files first, taking turns (each stream's reader frees
		 * room as it goes): they come before any file not chosen yet. */
		for (unsigned turns = pf->nparked; turns && !pf->stopping && pf->inflight < pf->o.inflight &&
		     (w = unpark(pf)); turns--) {
			uint32_t at = w->next;
			pthread_mutex_unlock(&pf->w.lock);
			int again = fetch_items(w);
			pthread_mutex_lock(&pf->w.lock);
			if (again && w->next == at)
				break;      /* no further: room went to another thread meanwhile */
			issued = 1;
		}
		/* Round robin over the streams, a file a turn each, while
		 * staging's room and the in-flight bound allow; a stream's next
		 * file waits while files parked are as many as the streams (one
		 * shard each: a later file would take the room the one being
		 * read needs first). */
		struct order_stats os;
		order_get_stats(pf->order, &os);
		while (!pf->stopping && pf->nparked < (os.streams ? os.streams : 1) && pf->inflight < pf->o.inflight &&
		       staging_room(pf->st) && order_next(pf->order, pf->o.window, &p)) {
			pthread_mutex_unlock(&pf->w.lock);
			issue_file(pf, &p);
			issued = 1;
			pthread_mutex_lock(&pf->w.lock);
		}
		if (clock_now() - last_sweep > SWEEP_S) {
			pthread_mutex_unlock(&pf->w.lock);
			sweep(pf);
			last_sweep = clock_now();
			pthread_mutex_lock(&pf->w.lock);
		}
		if (issued || work_ready(pf)) {
			go = worker_running(&pf->w);
			continue;
		}
		pf->sleeping = 1;
		go = worker_wait(&pf->w, IDLE_S);
		pf->sleeping = 0;
	}
	pf->stopping = 1;
	pthread_mutex_unlock(&pf->w.lock);
	return NULL;
}

int prefetch_new(struct core *c, struct order *order, struct staging *st, const struct prefetch_opts *o,
		 struct prefetch **out)
{
	struct prefetch *pf = calloc(1, sizeof(*pf));
	int err;

	if (!pf)
		return -ENOMEM;
	pf->c = c;
	pf->order = order;
	pf->st = st;
	pf->o = *o;
	if (!pf->o.window)
		pf->o.window = PREFETCH_DEFAULT_WINDOW;
	if (!pf->o.inflight)
		pf->o.inflight = 64;
	pf->parked_tail = &pf->parked;
	if ((err = worker_init(&pf->w)) < 0) {
		free(pf);
		return err;
	}
	*out = pf;
	return 0;
}

int prefetch_start(struct prefetch *pf)
{
	return worker_start(&pf->w, 1, prefetch_main, pf);
}

void prefetch_free(struct prefetch *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->w.lock);
	pf->stopping = 1;               /* fetch_items issues no more */
	pthread_mutex_unlock(&pf->w.lock);
	worker_stop(&pf->w);
	/* Fetches in flight land in the core (a dead peer within its
	 * --peer-timeout): wait for them all, or they would land on freed
	 * memory. Probes the kernel never answered (the session ended first)
	 * are not waited for: their wants are freed below. */
	for (long i = 1;; i++) {
		pthread_mutex_lock(&pf->w.lock);
		unsigned n = pf->inflight - pf->probes;
		pthread_mutex_unlock(&pf->w.lock);
		if (!n)
			break;
		if (i % 5000 == 0)
			log_warn("prefetch: still waiting for %u fetches to land (%ld s)", n, i / 1000);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	for (struct want *w = pf->probing, *next; w; w = next) {
		next = w->pnext;
		free(w);
	}
	for (struct want *w = pf->parked, *next; w; w = next) {
		next = w->qnext;
		want_end(w);
	}
	worker_destroy(&pf->w);
	free(pf);
}

void prefetch_get_stats(struct prefetch *pf, struct prefetch_stats *s)
{
	pthread_mutex_lock(&pf->w.lock);
	*s = pf->stats;
	pthread_mutex_unlock(&pf->w.lock);
}
