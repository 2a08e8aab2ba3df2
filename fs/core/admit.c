/* admit.c - the core's side of the RAM cache's spread (store/spread.h):
 * with --spread on, a cache that cannot hold the dataset holds an even
 * share of each large file. Here: whether a mount spreads and at what
 * share (at setup, when staging's carve comes and goes, when peers plug
 * in), and its words for stats.json. The read path asks core_may_admit()
 * (core_int.h). Large files spread are never held whole, so none is placed
 * in a backing for passthrough (docs/design.md, "Spreading the cache
 * through large files").
 */
#include <stdio.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/spread.h"
#include "util/log.h"

/* The share of each large file a budget of BUDGET bytes admits: what the
 * small files (admitted whole, first come) leave, over what the large ones
 * need; at least 1 (spreading), so a budget the small files take leaves
 * the large ones next to nothing rather than whole. */
static uint64_t share_of(const struct core *c, uint64_t budget)
{
	uint64_t small = c->cache_need - c->spread_large_need;

	return budget > small ? spread_share(budget - small, c->spread_large_need) : 1;
}

void core_spread_setup(struct core *c, uint64_t cap, const struct index_totals *t)
{
	const struct core_opts *o = &c->opts;
	uint64_t large = 0, files = 0;
	uint32_t n = index_count(c->ix);

	c->spread = 0;
	if (!o->spread) {
		snprintf(c->spread_text, sizeof(c->spread_text), "off: first come (--spread on spreads it)");
		return;
	}
	if (!spread_share(cap, c->cache_need)) {
		snprintf(c->spread_text, sizeof(c->spread_text), "off: the cache holds the whole dataset");
		return;
	}
	c->spread_large_need = 0;
	for (uint32_t id = INDEX_ROOT + 1; id <= n; id++) {
		struct index_attr a;
		uint32_t k;
		if (index_get(c->ix, id, &a) == 0 && !a.gone && S_ISREG(a.mode) &&
		    (k = cache_chunks(a.v.size, c->chunk)) >= SPREAD_MIN_CHUNKS) {
			large += a.v.size;
			c->spread_large_need += a.v.size + (uint64_t)k * 64;
			files++;
		}
	}
	if (c->spread_large_need > c->cache_need)       /* cache_need rounds per file, not per item */
		c->spread_large_need = c->cache_need;
	if (!files) {
		snprintf(c->spread_text, sizeof(c->spread_text), "off: no file of %u chunks or more",
			 SPREAD_MIN_CHUNKS);
		return;
	}
	uint64_t share = share_of(c, cap);
	c->spread = share;
	c->spreading = 1;
	snprintf(c->spread_text, sizeof(c->spread_text),
		 "on: %.1f%% of each of the %llu files of %u chunks or more (%.0f%% of the dataset's bytes)",
		 100.0 * (double)share / (double)SPREAD_ONE, (unsigned long long)files, SPREAD_MIN_CHUNKS,
		 t->bytes ? 100.0 * (double)large / (double)t->bytes : 0.0);
	log_info("cache spread %s: every part of each large file is read from storage at the same share",
		 c->spread_text);
}

void core_spread_budget(struct core *c, uint64_t budget)
{
	if (c->spreading)
		__atomic_store_n(&c->spread, share_of(c, budget), __ATOMIC_RELAXED);
}

void core_spread_peers(struct core *c)
{
	/* With peers each node's cache holds the items it owns (plan.c): no
	 * spread, and large files go to backings as without it. Before
	 * core_start(): nothing reads these yet. */
	if (c->peer.owns && c->spreading) {
		c->spread = 0;
		c->spreading = 0;
		snprintf(c->spread_text, sizeof(c->spread_text),
			 "off: with peers each node's cache holds the items it owns");
		if (c->pt_planned && c->cache)
			cache_set_backing(c->cache, CORE_PT_MIN_SIZE);
	}
}
