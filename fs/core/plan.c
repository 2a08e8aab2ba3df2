/* plan.c - one cache item's way through the stores and the sources; see
 * plan.h for the contract.
 *
 *   plan_read / plan_prefetch
 *    └─ the hit path: a ready RAM item answers at once (no lock, no allocation)
 *    └─ plan_item(): one decision for readers, peers and the prefetcher
 *         from:  RAM (ready / another read's load: wait), a staged copy
 *                (ready / on its way: wait), or the sources
 *         into:  RAM, else the SSD tier, else staging (prefetch), else none
 *    └─ the sources in order (source.h): the tier, the owner peer, storage
 *       last; each answers or passes (-EAGAIN)
 *
 * DESIGN: what a read is (enum read_kind) and everything it needs past the
 * hit path live in one context (struct read_ctx): the version the bytes
 * must come from, and the item as the sources see it (struct source_item):
 * its path below SOURCE, made once (item_of) whoever asks first, and the
 * ranking of the nodes that may hold it, which the peer layer works out
 * once for admission and asking alike. The hit path makes no context.
 * Storage is a source like the others (the last); when it is the only one
 * left, it is called directly, with no context of its own: a miss with
 * storage alone allocates what it did before sources existed.
 * Counters are added where each event ends: reply() for hit and miss
 * bytes, read_reply() for a request; a peer's read counts neither (the
 * peer layer does), nor does a prefetch (the prefetcher does).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "core/ns/order.h"
#include "core/plan.h"
#include "core/prefetch.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/manifest.h"
#include "store/staging.h"
#include "store/storage.h"
#include "store/tier.h"
#include "util/log.h"

/* One item past the hit path: a load, a wait, a read of the sources. */
struct read_ctx {
	struct core *c;
	enum read_kind kind;
	uint32_t id, chunk;
	off_t off;                  /* the request (or part); a prefetch: the item */
	size_t len;
	struct index_attr a;        /* the version it must come from */
	off_t item_off;             /* file offset of the item */
	size_t item_len;
	struct cache_ref ref;       /* into RAM: the item being filled */
	struct cache_waiter w;      /* waiting on another read's load */
	int unchecked;              /* the source that answered does not check its bytes (storage) */
	core_read_fn done;
	void *arg;
	struct plan_prefetch pp;    /* RK_PREFETCH: its callbacks instead of DONE */
	struct source_item item;    /* what the sources and the admission hook are told */
	struct tier_claim *claim;   /* into the tier: its buffer, filled by the sources */
	void *claim_buf;
	int path_len;               /* < 0: not made yet (or the error making it) */
	char path[4096];            /* the file's path below SOURCE */
};

/* X's item, its path made on first use. NULL (and *ERR) if it cannot be. */
static struct source_item *item_of(struct read_ctx *x, int *err)
{
	if (x->path_len == -1) {
		x->path_len = index_path(x->c->ix, x->id, x->path, sizeof(x->path));
		x->item.rel = x->path;
		x->item.rel_len = x->path_len > 0 ? (size_t)x->path_len : 0;
	}
	*err = x->path_len < 0 ? x->path_len : 0;
	return x->path_len < 0 ? NULL : &x->item;
}

static void reply(struct read_ctx *x, ssize_t res, const void *buf, int from_cache)
{
	if (x->kind == RK_PREFETCH) {
		x->pp.done(x->pp.arg, res, from_cache);
		return;
	}
	if (res >= 0 && x->kind != RK_PEER)
		stats_add(&x->c->stats, from_cache ? STAT_CACHE_HIT_BYTES : STAT_CACHE_MISS_BYTES,
			  (uint64_t)res);
	if (x->kind == RK_REQUEST)
		read_reply(x->c, x->id, res, buf, x->done, x->arg);
	else
		x->done(x->arg, res, buf);
}

static void sources_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;

	reply(x, res, buf, 0);
	free(x);
}

/* ---- the sources ---- */

/* A fetch from source NEXT - 1 that may still fall back to a later one. */
struct fetch_ctx {
	struct read_ctx *x;         /* lives until DONE runs */
	int next;
	off_t off;
	size_t len;
	void *buf;
	source_done_fn done;
};

static void fetch(struct read_ctx *x, int i, off_t off, size_t len, void *buf, source_done_fn done);

static void fetch_done(void *arg, ssize_t res, const void *buf)
{
	struct fetch_ctx *f = arg;

	if (res == -EAGAIN) {
		fetch(f->x, f->next, f->off, f->len, f->buf, f->done);
	} else {
		f->x->unchecked = f->x->c->sources[f->next - 1].unchecked;
		f->done(f->x, res, buf);
	}
	free(f);
}

/* Fetches LEN bytes at OFF of X's file from the sources, from the I-th on,
 * into BUF (or a source's buffer). The last source is called directly: its
 * answer is final. DONE(X, ...) runs once. */
static void fetch(struct read_ctx *x, int i, off_t off, size_t len, void *buf, source_done_fn done)
{
	struct core *c = x->c;
	struct fetch_ctx *f;
	int err;
	struct source_item *it = item_of(x, &err);

	if (!it || i >= c->nsources) {
		done(x, it ? -EIO : err, NULL);
		return;
	}
	if (i == c->nsources - 1 || !(f = malloc(sizeof(*f)))) {
		i = c->nsources - 1;
		x->unchecked = c->sources[i].unchecked;
		c->sources[i].read(c->sources[i].ctx, it, off, len, buf, done, x);
		return;
	}
	*f = (struct fetch_ctx){ .x = x, .next = i + 1, .off = off, .len = len, .buf = buf, .done = done };
	c->sources[i].read(c->sources[i].ctx, it, off, len, buf, fetch_done, f);
}

/* Fetches the request (a reader's, a peer's) from the sources, keeping
 * nothing. */
static void fetch_request(struct read_ctx *x)
{
	fetch(x, 0, x->off, x->len, NULL, sources_done);
}

int core_add_source(struct core *c, const struct source *s)
{
	int at = c->nsources;

	/* Storage stays last, whenever the others come. */
	if (at && c->sources[at - 1].read == storage_source_read) {
		if (s->read == storage_source_read)
			return -EEXIST;
		at--;
	}
	if (at == CORE_MAX_SOURCES)
		return -ENOSPC;
	memmove(&c->sources[at + 1], &c->sources[at], (size_t)(c->nsources - at) * sizeof(*s));
	c->sources[at] = *s;
	c->nsources++;
	return 0;
}

/* ---- answering from a whole item ---- */

/* How many of the item's bytes (LEN long, at x->item_off) X's request takes. */
static size_t served_of(const struct read_ctx *x, size_t len)
{
	size_t skip = (size_t)(x->off - x->item_off);

	return x->len < len - skip ? x->len : len - skip;
}

/* Serves X from item bytes DATA (LEN long, at x->item_off). HIT: the bytes
 * cost this request no storage read (a cached item, or a load another
 * request made); the read that loads an item is a miss. */
static void reply_from_item(struct read_ctx *x, const char *data, size_t len, int hit)
{
	reply(x, (ssize_t)served_of(x, len), data + (x->off - x->item_off), hit);
}

/* With a manifest: whether bytes from an unchecked source (storage) are
 * the ones it lists, so they may be kept. A mismatch (SOURCE changed in
 * place, or corrupt under us) is counted and logged; SOURCE stays what
 * readers get, but the bytes are never kept, so never served to a peer as
 * checked. */
static int may_keep(struct read_ctx *x, const void *data, size_t len)
{
	struct core *c = x->c;
	int f, err;

	if (!x->unchecked || !c->man || (f = core_verifiable(c, x->id, &x->a.v)) < 0 ||
	    manifest_check(c->man, (uint32_t)f, x->chunk, data, len) == 0)
		return 1;
	stats_add(&c->stats, STAT_MANIFEST_MISMATCHES, 1);
	log_warn("%s (chunk %u): storage bytes do not match the manifest; served, not cached",
		 item_of(x, &err) ? x->path : "?", x->chunk);
	return 0;
}

/* ---- from the RAM cache ---- */

static void wait_done(void *arg, const void *data, size_t len)
{
	struct read_ctx *x = arg;

	if (!data) {                /* the load failed: go to the sources ourselves */
		fetch_request(x);
		return;
	}
	reply_from_item(x, data, len, 1);
	free(x);
}

/* The item X loads into RAM has been read (RES bytes). */
static void ram_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	int ok = res == (ssize_t)x->ref.len, keep = ok && may_keep(x, x->ref.data, x->ref.len);

	(void)buf;
	if (x->kind == RK_PREFETCH) {
		cache_loaded(x->c->cache, &x->ref, keep);   /* readers waiting on it go now */
		reply(x, keep ? (ssize_t)x->ref.len : res < 0 ? res : -EIO, NULL, 1);
		free(x);
		return;
	}
	/* Serve our own request first, then let the waiters go. A peer asking
	 * for bytes we could not check gets an error and reads storage itself. */
	if (ok && (keep || x->kind != RK_PEER))
		reply_from_item(x, x->ref.data, x->ref.len, 0);
	else
		reply(x, res < 0 ? res : ok ? -EBADMSG : -EIO, NULL, 0);
	cache_loaded(x->c->cache, &x->ref, keep);
	free(x);
}

/* ---- from staging ---- */

/* A staged item X waited for has landed (DATA NULL: its fetch failed). */
static void staged_wait(void *arg, const void *data, size_t len)
{
	struct read_ctx *x = arg;
	struct staging *st = x->c->staging;

	if (!data) {
		staging_done_with(st, x->id, x->chunk, 0);
		fetch_request(x);
		return;
	}
	size_t n = served_of(x, len);
	reply_from_item(x, data, len, 0);
	staging_done_with(st, x->id, x->chunk, n);
	free(x);
}

/* A reader's miss: its item fetched ahead serves it (or will, once on its
 * way). 1 if X is answered (or will be). */
static int from_staging(struct read_ctx *x)
{
	struct staging *st = x->c->staging;
	const void *data;
	size_t len;

	switch (staging_take(st, x->id, x->chunk, &x->a.v, &data, &len, staged_wait, x)) {
	case STAGING_HIT: {
		size_t n = served_of(x, len);
		reply_from_item(x, data, len, 0);
		staging_done_with(st, x->id, x->chunk, n);
		free(x);
		return 1;
	}
	case STAGING_WAIT:
		return 1;               /* staged_wait() finishes it */
	case STAGING_NONE:
		break;
	}
	return 0;
}

/* A reader's miss the RAM cache admits (X->ref reserved): when the item
 * was fetched ahead and has landed, its staged bytes fill the cache, rather
 * than a second read of storage (the cache's limit rises while a job runs,
 * after a pause; part 7 then wasted up to 31 MB of staging an epoch, its
 * readers waiting on storage for items already fetched). 1 if X is
 * answered. */
static int ram_from_staging(struct read_ctx *x)
{
	struct staging *st = x->c->staging;
	const void *data;
	size_t len;

	if (staging_take(st, x->id, x->chunk, &x->a.v, &data, &len, NULL, NULL) != STAGING_HIT)
		return 0;
	if (len != x->ref.len) {
		staging_done_with(st, x->id, x->chunk, 0);
		return 0;
	}
	memcpy(x->ref.data, data, len);
	staging_done_with(st, x->id, x->chunk, len);
	/* Checked against the manifest like a storage load (the staged copy
	 * may have come from storage). */
	x->unchecked = 1;
	ram_done(x, (ssize_t)len, NULL);
	return 1;
}

/* ---- into the SSD tier, into staging ---- */

/* The tier's load of X's item has ended: answer X from the item, then hand
 * the bytes to the tier's writer (or give the room up). */
static void tier_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	int ok = res == (ssize_t)x->item_len, keep = ok && may_keep(x, x->claim_buf, x->item_len);

	(void)buf;
	if (x->kind == RK_PREFETCH)
		reply(x, ok ? res : res < 0 ? res : -EIO, NULL, 1);
	else if (ok)
		reply_from_item(x, x->claim_buf, x->item_len, 0);
	else
		reply(x, res < 0 ? res : -EIO, NULL, 0);
	tier_fill(x->c->tier, x->claim, keep);
	free(x);
}

/* The tier takes X's item if it has room (with peers, only an item this
 * node owns: each node's tier holds its own share): 1 and the fetch is on
 * its way; 0 if not, *HELD set when the tier is writing the item already. */
static int into_tier(struct read_ctx *x, int *held)
{
	struct core *c = x->c;
	struct source_item *it;
	void *buf;
	int err;

	*held = 0;
	if (!c->tier || !x->item_len || !(it = item_of(x, &err)))
		return 0;
	if (c->peer.owns && !c->peer.owns(c->peer.ctx, it))
		return 0;
	if (!(x->claim = tier_claim(c->tier, x->id, x->chunk, &x->a.v, x->item_len, &buf, held)))
		return 0;
	x->claim_buf = buf;
	fetch(x, 0, x->item_off, x->item_len, buf, tier_done);
	return 1;
}

static void staging_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	int ok = res == (ssize_t)x->item_len;

	(void)buf;
	staging_landed(x->c->staging, x->id, x->chunk, ok);
	reply(x, ok ? res : res < 0 ? res : -EIO, NULL, 0);
	free(x);
}

/* ---- admission with peers ---- */

enum { ADMIT_NO, ADMIT_OWNED, ADMIT_REMOTE };

/* May X's item take cache budget? ADMIT_REMOTE: its length was charged to
 * the remote budget; the caller refunds it (unadmit) unless the item is
 * then really admitted (CACHE_LOAD). */
static int may_admit(struct read_ctx *x)
{
	struct core *c = x->c;
	int err;
	struct source_item *it = item_of(x, &err);

	if (!it)
		return ADMIT_NO;
	if (c->peer.owns(c->peer.ctx, it))
		return ADMIT_OWNED;
	if (!c->peer.remote_budget)
		return ADMIT_NO;
	if (__atomic_add_fetch(&c->remote_used, x->item_len, __ATOMIC_RELAXED) <= c->peer.remote_budget)
		return ADMIT_REMOTE;
	__atomic_sub_fetch(&c->remote_used, x->item_len, __ATOMIC_RELAXED);
	return ADMIT_NO;
}

/* The admission asked for by may_admit() did not happen (another read is
 * loading the item, it landed meanwhile, or the arena is full): the remote
 * budget gets its charge back. Without this, two requests racing for one
 * item charged it twice, and the budget ran out before the items did. */
static void unadmit(struct core *c, int how, size_t len, enum cache_result r)
{
	if (how == ADMIT_REMOTE && r != CACHE_LOAD)
		__atomic_sub_fetch(&c->remote_used, len, __ATOMIC_RELAXED);
}

/* ---- the plan ---- */

static struct read_ctx *ctx_new(struct core *c, enum read_kind kind, uint32_t id, const struct index_attr *a,
				off_t off, size_t len, uint32_t chunk)
{
	struct read_ctx *x = malloc(sizeof(*x));

	if (!x)
		return NULL;
	x->c = c;
	x->kind = kind;
	x->id = id;
	x->chunk = chunk;
	x->off = off;
	x->len = len;
	x->a = *a;
	x->item_off = (off_t)chunk * c->chunk;
	x->item_len = cache_chunk_len(a->v.size, c->chunk, chunk);
	x->unchecked = 0;
	x->item = (struct source_item){ .id = id, .chunk = chunk, .v = a->v };
	x->path_len = -1;
	x->claim = NULL;
	return x;
}

/* Decides where X's item comes from and goes to, and starts it. R and REF:
 * what the hit path's cache lookup found (CACHE_MISS without a cache). */
static void plan_item(struct read_ctx *x, enum cache_result r, struct cache_ref *ref)
{
	struct core *c = x->c;
	int prefetch = x->kind == RK_PREFETCH, held, how;

	/* Into RAM: with peers, an absent item is admitted only if we own it
	 * (or it fits the remote budget), decided here, off the hit path. */
	if (c->cache && c->peer.owns && r == CACHE_MISS && (how = may_admit(x))) {
		r = cache_get(c->cache, x->id, x->chunk, &x->a.v, x->item_len, NULL, ref);
		unadmit(c, how, x->item_len, r);
	}
	if (r == CACHE_WAIT && !prefetch) {
		x->w.fn = wait_done;
		x->w.arg = x;
		r = cache_get(c->cache, x->id, x->chunk, &x->a.v, x->item_len, &x->w, ref);
		if (r == CACHE_WAIT)
			return;             /* wait_done() finishes it */
	}
	if (r == CACHE_HIT || r == CACHE_WAIT) {    /* it landed meanwhile; a prefetch: there already */
		if (prefetch)
			reply(x, 0, NULL, 1);
		else
			reply_from_item(x, ref->data, ref->len, 1);
		cache_put(c->cache, ref);
		free(x);
		return;
	}
	if (r == CACHE_LOAD) {
		x->ref = *ref;
		if (!prefetch && x->kind != RK_PEER && c->staging && ram_from_staging(x))
			return;
		fetch(x, 0, x->item_off, x->ref.len, x->ref.data, ram_done);
		return;
	}
	/* From a staged copy: a reader's. */
	if ((x->kind == RK_REQUEST || x->kind == RK_PART) && c->staging) {
		if (from_staging(x))
			return;
		prefetch_reader_miss(c->pf, x->id, x->chunk);   /* its reader is past what is not staged */
	}
	/* From the tier, which answers from 0 as the first source; into it,
	 * what RAM cannot take. A prefetch of an item it holds or is writing
	 * is done: staged bytes are freed once read, and the item would be
	 * fetched from storage again every epoch. */
	if (c->tier && tier_holds(c->tier, x->id, x->chunk, &x->a.v)) {
		if (prefetch) {
			reply(x, 0, NULL, 1);
			free(x);
		} else {
			fetch_request(x);
		}
		return;
	}
	if (into_tier(x, &held))
		return;
	if (held && prefetch) {
		reply(x, 0, NULL, 1);
		free(x);
		return;
	}
	/* Into staging: a prefetch that no cache keeps. */
	if (prefetch) {
		void *buf = c->staging ? staging_begin(c->staging, x->id, x->chunk, &x->a.v, x->item_len,
						       x->pp.group, x->pp.place, x->pp.reserved) : NULL;
		if (!buf) {
			reply(x, -ENOSPC, NULL, 0);
			free(x);
			return;
		}
		fetch(x, 0, x->item_off, x->item_len, buf, staging_done);
		return;
	}
	/* Kept nowhere. A peer's read we cannot keep: the asker tries the next
	 * node of the item's ranking, which may, rather than have us read
	 * storage for nothing kept; but one the tier is writing here is ours,
	 * and the asker gets storage's bytes from us rather than spill it. */
	if (x->kind == RK_PEER && !held) {
		reply(x, -ENOSPC, NULL, 0);
		free(x);
		return;
	}
	fetch_request(x);
}

void plan_read(struct core *c, uint32_t id, const struct index_attr *a, off_t off, size_t len,
	       enum read_kind kind, const char *rel, core_read_fn done, void *arg)
{
	uint32_t chunk = (uint32_t)((uint64_t)off / c->chunk);
	enum cache_result r = CACHE_MISS;
	struct read_ctx *x;
	struct cache_ref ref;

	/* The hit path allocates nothing: a waiter is needed only if the item
	 * is loading, and then we ask again with one. */
	if (c->cache) {
		size_t item_len = cache_chunk_len(a->v.size, c->chunk, chunk);
		int may = core_may_admit(c, id, chunk, a->v.size);
		r = cache_get_ex(c->cache, id, chunk, &a->v, item_len, NULL, &ref, may);
		if (r == CACHE_MISS && !may && !c->peer.owns)
			cache_count_miss(c->cache);     /* the spread left it out (peers ask again) */
		if (r == CACHE_HIT) {
			struct read_ctx hx = { .c = c, .kind = kind, .id = id, .off = off, .len = len,
					       .item_off = (off_t)chunk * c->chunk, .done = done, .arg = arg };
			reply_from_item(&hx, ref.data, ref.len, 1);
			cache_put(c->cache, &ref);
			return;
		}
	}
	x = ctx_new(c, kind, id, a, off, len, chunk);
	if (!x) {
		if (r == CACHE_LOAD)
			cache_loaded(c->cache, &ref, 0);
		if (kind == RK_REQUEST)
			read_reply(c, id, -ENOMEM, NULL, done, arg);
		else
			done(arg, -ENOMEM, NULL);
		return;
	}
	x->done = done;
	x->arg = arg;
	if (rel) {                  /* a peer's read names it: no index walk */
		size_t n = strlen(rel);
		x->path_len = n < sizeof(x->path) ? (int)n : -ENAMETOOLONG;
		if (x->path_len >= 0) {
			memcpy(x->path, rel, n + 1);
			x->item.rel = x->path;
			x->item.rel_len = n;
		}
	}
	if (c->order && kind != RK_PEER)
		order_seen(c->order, id, (uint64_t)off);    /* past the hit path: where the job's streams are */
	plan_item(x, r, &ref);
}

void plan_prefetch(struct core *c, uint32_t id, const struct index_attr *a, uint32_t chunk,
		   const struct plan_prefetch *p)
{
	enum cache_result r = CACHE_MISS;
	struct cache_ref ref;
	struct read_ctx *x;

	if (c->cache) {
		r = cache_get_ex(c->cache, id, chunk, &a->v, cache_chunk_len(a->v.size, c->chunk, chunk), NULL,
				 &ref, core_may_admit(c, id, chunk, a->v.size));
		if (r == CACHE_HIT || r == CACHE_WAIT) {
			cache_put(c->cache, &ref);
			p->done(p->arg, 0, 1);
			return;
		}
	}
	x = ctx_new(c, RK_PREFETCH, id, a, (off_t)chunk * c->chunk, 0, chunk);
	if (!x) {
		if (r == CACHE_LOAD)
			cache_loaded(c->cache, &ref, 0);
		p->done(p->arg, -ENOMEM, 0);
		return;
	}
	x->len = x->item_len;
	x->pp = *p;
	plan_item(x, r, &ref);
}
