/* read.c - the read path of data files: the RAM cache, then the sources.
 *
 *   core_read_data(id, gen, off, len)
 *    ├─ one item?  read_item: cache HIT  -> reply from the arena (no lock, no allocation)
 *    │                        LOAD -> the sources fill the whole item -> reply, wake waiters
 *    │                        WAIT -> answered when another request's load lands
 *    │                        MISS -> (budget spent) the sources read just the request
 *    └─ several?   read_multi: one part per item, assembled, answered once
 *
 * The sources are tried in order (source.h): the SSD tier and a peer answer
 * or pass (-EAGAIN) to the next; storage, always last, is called directly.
 * A miss the RAM cache does not take may be taken by the SSD tier instead
 * (tier_path): the whole item is read into the tier's buffer, the request
 * answered from it, and the buffer written to the tier afterwards.
 *
 * DESIGN: what a read is (enum read_kind) and everything it needs past the
 * hit path live in one context (struct read_ctx): the version the bytes
 * must come from, and the item as the sources see it (struct source_item):
 * its path below SOURCE, made once (item_of) whoever asks first, and the
 * ranking of the nodes that may hold it, which the peer layer works out
 * once for admission and asking alike. The hit path makes no context.
 * Counters are added where each event ends: reply() for hit and miss
 * bytes, reply_request() for a request; a peer's read counts neither
 * (the peer layer does).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core_int.h"
#include "log.h"
#include "syncwait.h"

enum read_kind {
	RK_REQUEST,                 /* a whole request of a reader */
	RK_PART,                    /* one item's share of a request spanning several */
	RK_PEER,                    /* a peer's read (core_read_peer) */
	RK_PREFETCH,                /* the prefetcher's, ahead of the readers (core_prefetch_item) */
};

/* One read past the hit path: a load, a wait on another read's load, or a
 * read of the sources. */
struct read_ctx {
	struct core *c;
	enum read_kind kind;
	uint32_t id;
	off_t off;                  /* the request (or part) */
	size_t len;
	struct index_attr a;        /* the version it must come from */
	struct cache_ref ref;       /* LOAD: the item being filled */
	off_t item_off;             /* file offset of the item */
	struct cache_waiter w;      /* WAIT */
	int via_storage;            /* LOAD: storage answered (not a peer, which checks its own) */
	core_read_fn done;
	void *arg;
	struct core_prefetch_cb pcb;        /* RK_PREFETCH: its callbacks instead of DONE */
	struct source_item item;    /* what the sources and the admission hook are told */
	struct tier_claim *claim;   /* an item the SSD tier takes: its buffer, filled by the sources */
	void *claim_buf;
	size_t claim_len;
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

/* Counts a finished request, replies, then refreshes a stale entry. */
static void reply_request(struct core *c, uint32_t id, ssize_t res, const void *buf,
			  core_read_fn done, void *arg)
{
	if (res >= 0) {
		stats_add(&c->stats, STAT_READS, 1);
		stats_add(&c->stats, STAT_READ_BYTES, (uint64_t)res);
	} else {
		stats_add(&c->stats, res == -ESTALE ? STAT_STALE_READS : STAT_READ_ERRORS, 1);
	}
	done(arg, res, buf);
	/* After the reply: the refresh makes the kernel drop this file's
	 * caches (through the adapter's notifier). */
	if (res == -ESTALE)
		index_refresh(c->ix, id, 0);
}

static void reply(struct read_ctx *x, ssize_t res, const void *buf, int from_cache)
{
	if (res >= 0 && x->kind != RK_PEER)
		stats_add(&x->c->stats, from_cache ? STAT_CACHE_HIT_BYTES : STAT_CACHE_MISS_BYTES,
			  (uint64_t)res);
	if (x->kind == RK_REQUEST)
		reply_request(x->c, x->id, res, buf, x->done, x->arg);
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

	if (res == -EAGAIN)
		fetch(f->x, f->next, f->off, f->len, f->buf, f->done);
	else
		f->done(f->x, res, buf);
	free(f);
}

/* Fetches LEN bytes at OFF of X's file from the sources, from the I-th on,
 * into BUF (or a source's buffer); storage, the last, is called directly
 * (and sets x->via_storage first). DONE(X, ...) runs once. */
static void fetch(struct read_ctx *x, int i, off_t off, size_t len, void *buf, source_done_fn done)
{
	struct core *c = x->c;
	struct fetch_ctx *f;
	int err;
	struct source_item *it = item_of(x, &err);

	if (!it) {
		done(x, err, NULL);
		return;
	}
	if (i >= c->nsources || !(f = malloc(sizeof(*f)))) {
		x->via_storage = 1;
		storage_read(c->st, it->rel, &x->a.v, off, len, buf, done, x);
		return;
	}
	*f = (struct fetch_ctx){ .x = x, .next = i + 1, .off = off, .len = len, .buf = buf, .done = done };
	c->sources[i].read(c->sources[i].ctx, it, off, len, buf, fetch_done, f);
}

int core_add_source(struct core *c, const struct source *s)
{
	if (c->nsources == CORE_MAX_SOURCES)
		return -ENOSPC;
	c->sources[c->nsources++] = *s;
	return 0;
}

/* ---- one item ---- */

/* How many of item bytes (LEN long, at x->item_off) X's request takes. */
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

static void wait_done(void *arg, const void *data, size_t len)
{
	struct read_ctx *x = arg;

	if (!data) {                /* the load failed: go to the sources ourselves */
		fetch(x, 0, x->off, x->len, NULL, sources_done);
		return;
	}
	reply_from_item(x, data, len, 1);
	free(x);
}

/* With a manifest: whether the storage bytes of a load are the ones it
 * lists. A mismatch (SOURCE changed in place, or corrupt under us) is
 * counted and logged; SOURCE stays what readers get, but the bytes are
 * never cached, so never served to a peer as checked. */
static int load_checks(struct read_ctx *x)
{
	struct core *c = x->c;
	uint32_t chunk = (uint32_t)((uint64_t)x->item_off / c->chunk);
	int f = core_verifiable(c, x->id, &x->a.v), err;

	if (f < 0 || manifest_check(c->man, (uint32_t)f, chunk, x->ref.data, x->ref.len) == 0)
		return 1;
	stats_add(&c->stats, STAT_MANIFEST_MISMATCHES, 1);
	log_warn("%s (chunk %u): storage bytes do not match the manifest; served, not cached",
		 item_of(x, &err) ? x->path : "?", chunk);
	return 0;
}

static void load_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	int ok = res == (ssize_t)x->ref.len, keep = ok && (!x->via_storage || !x->c->man || load_checks(x));

	(void)buf;
	if (x->kind == RK_PREFETCH) {
		cache_loaded(x->c->cache, &x->ref, keep);   /* readers waiting on it go now */
		x->pcb.done(x->pcb.arg, keep ? (ssize_t)x->ref.len : res < 0 ? res : -EIO, 1);
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

/* A prefetched item X waited for has landed (DATA NULL: its fetch failed). */
static void staged_wait(void *arg, const void *data, size_t len)
{
	struct read_ctx *x = arg;
	uint32_t chunk = x->item.chunk;

	if (!data) {
		prefetch_done_with(x->c->pf, x->id, chunk, 0);
		fetch(x, 0, x->off, x->len, NULL, sources_done);
		return;
	}
	size_t n = served_of(x, len);
	reply_from_item(x, data, len, 0);
	prefetch_done_with(x->c->pf, x->id, chunk, n);
	free(x);
}

/* A reader's miss: takes the item from staging if it was fetched ahead (or
 * waits for it if it is on its way). 1 if X is answered (or will be), 0 to
 * read the sources. */
static int take_staged(struct read_ctx *x, uint32_t chunk)
{
	struct prefetch *pf = x->c->pf;
	const void *data;
	size_t len;

	switch (prefetch_take(pf, x->id, chunk, &x->a.v, &data, &len, staged_wait, x)) {
	case PREFETCH_HIT: {
		size_t n = served_of(x, len);
		reply_from_item(x, data, len, 0);
		prefetch_done_with(pf, x->id, chunk, n);
		free(x);
		return 1;
	}
	case PREFETCH_WAIT:
		return 1;               /* staged_wait() finishes it */
	case PREFETCH_NONE:
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
static int load_staged(struct read_ctx *x, uint32_t chunk)
{
	struct prefetch *pf = x->c->pf;
	const void *data;
	size_t len;

	if (prefetch_take(pf, x->id, chunk, &x->a.v, &data, &len, NULL, NULL) != PREFETCH_HIT)
		return 0;
	if (len != x->ref.len) {
		prefetch_done_with(pf, x->id, chunk, 0);
		return 0;
	}
	memcpy(x->ref.data, data, len);
	prefetch_done_with(pf, x->id, chunk, len);
	/* Checked against the manifest like a storage load (the staged copy
	 * may have come from storage). */
	x->via_storage = 1;
	load_done(x, (ssize_t)len, NULL);
	return 1;
}

/* Whether the bytes X's tier claim was filled with (RES of them) may be
 * kept: all there and, read from storage with a manifest, the ones it
 * lists (unchecked bytes are served, SOURCE is what readers get, but not
 * kept, as for the RAM cache). */
static int tier_keep(struct read_ctx *x, ssize_t res)
{
	struct core *c = x->c;
	int f;

	if (res != (ssize_t)x->claim_len)
		return 0;
	if (!x->via_storage || !c->man || (f = core_verifiable(c, x->id, &x->a.v)) < 0 ||
	    !manifest_check(c->man, (uint32_t)f, x->item.chunk, x->claim_buf, x->claim_len))
		return 1;
	stats_add(&c->stats, STAT_MANIFEST_MISMATCHES, 1);
	return 0;
}

/* The SSD tier's load of X's item has ended: answer X from the item, then
 * hand the bytes to the tier's writer (or give the room up). */
static void tier_load_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	struct core *c = x->c;
	int ok = res == (ssize_t)x->claim_len, keep = tier_keep(x, res);

	(void)buf;
	if (ok)
		reply_from_item(x, x->claim_buf, x->claim_len, 0);
	else
		reply(x, res < 0 ? res : -EIO, NULL, 0);
	tier_fill(c->tier, x->claim, keep);
	free(x);
}

/* A miss the RAM cache did not take, with an SSD tier (source 0, ahead of
 * a peer and storage): the tier serves the item if it holds it; else it
 * takes the item when it has room (with peers, only an item this node
 * owns: each node's tier holds its own share). 1 if X is answered (or will
 * be), 0 to go on as without a tier. */
static int tier_path(struct read_ctx *x, uint32_t chunk)
{
	struct core *c = x->c;
	size_t item_len = cache_chunk_len(x->a.v.size, c->chunk, chunk);
	struct source_item *it;
	void *buf;
	int err;

	if (tier_holds(c->tier, x->id, chunk, &x->a.v)) {
		fetch(x, 0, x->off, x->len, NULL, sources_done);
		return 1;
	}
	if (!item_len || !(it = item_of(x, &err)))
		return 0;
	if (c->peer.owns && !c->peer.owns(c->peer.ctx, it))
		return 0;
	int held = 0;
	if (!(x->claim = tier_claim(c->tier, x->id, chunk, &x->a.v, item_len, &buf, &held))) {
		if (held && x->kind == RK_PEER) {
			/* Ours, being written: the asker gets storage's bytes
			 * from us rather than spill it to another node. */
			fetch(x, 1, x->off, x->len, NULL, sources_done);
			return 1;
		}
		return 0;
	}
	x->claim_buf = buf;
	x->claim_len = item_len;
	fetch(x, 1, x->item_off, item_len, buf, tier_load_done);
	return 1;
}

enum { ADMIT_NO, ADMIT_OWNED, ADMIT_REMOTE };

/* With peers: may X's item (LEN bytes) take cache budget? ADMIT_REMOTE:
 * LEN was charged to the remote budget; the caller refunds it (unadmit)
 * unless the item is then really admitted (CACHE_LOAD). */
static int may_admit(struct read_ctx *x, size_t len)
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
	if (__atomic_add_fetch(&c->remote_used, len, __ATOMIC_RELAXED) <= c->peer.remote_budget)
		return ADMIT_REMOTE;
	__atomic_sub_fetch(&c->remote_used, len, __ATOMIC_RELAXED);
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

/* A context for a read of [OFF, OFF+LEN) of file ID (version A) inside item
 * CHUNK, its path not made yet; NULL when out of memory. */
static struct read_ctx *ctx_new(struct core *c, enum read_kind kind, uint32_t id,
				const struct index_attr *a, off_t off, size_t len, uint32_t chunk,
				core_read_fn done, void *arg)
{
	struct read_ctx *x = malloc(sizeof(*x));

	if (!x)
		return NULL;
	x->c = c;
	x->kind = kind;
	x->id = id;
	x->off = off;
	x->len = len;
	x->a = *a;
	x->item_off = (off_t)chunk * c->chunk;
	x->via_storage = 0;
	x->done = done;
	x->arg = arg;
	x->item = (struct source_item){ .id = id, .chunk = chunk, .v = a->v };
	x->path_len = -1;
	x->claim = NULL;
	return x;
}

/* Reads [OFF, OFF+LEN) of file ID, version A, which lies inside one cache
 * item (or anywhere, without a cache): hit, load, wait, or the sources.
 * REL is the file's path when the caller has it (a peer's read), else NULL
 * (made when first needed). */
static void read_item(struct core *c, uint32_t id, const struct index_attr *a, off_t off,
		      size_t len, enum read_kind kind, const char *rel, core_read_fn done, void *arg)
{
	uint32_t chunk = (uint32_t)((uint64_t)off / c->chunk);
	off_t item_off = (off_t)chunk * c->chunk;
	size_t item_len = c->cache ? cache_chunk_len(a->v.size, c->chunk, chunk) : 0;
	enum cache_result r = CACHE_MISS;
	struct read_ctx *x;
	struct cache_ref ref;

	/* The hit path allocates nothing: a waiter is needed only if the item
	 * is loading, and then we ask again with one. With peers, an absent
	 * item is admitted only if we own it (or it fits the remote budget):
	 * that is decided on the miss path alone. */
	if (c->cache) {
		r = cache_get_ex(c->cache, id, chunk, &a->v, item_len, NULL, &ref, !c->peer.owns);
		if (r == CACHE_HIT) {
			struct read_ctx hx = { .c = c, .kind = kind, .id = id, .off = off, .len = len,
					       .item_off = item_off, .done = done, .arg = arg };
			reply_from_item(&hx, ref.data, ref.len, 1);
			cache_put(c->cache, &ref);
			return;
		}
	}
	x = ctx_new(c, kind, id, a, off, len, chunk, done, arg);
	if (!x) {
		if (r == CACHE_LOAD)
			cache_loaded(c->cache, &ref, 0);
		if (kind == RK_REQUEST)
			reply_request(c, id, -ENOMEM, NULL, done, arg);
		else
			done(arg, -ENOMEM, NULL);
		return;
	}
	if (rel) {                  /* a peer's read names it: no index walk */
		size_t n = strlen(rel);
		x->path_len = n < sizeof(x->path) ? (int)n : -ENAMETOOLONG;
		if (x->path_len >= 0) {
			memcpy(x->path, rel, n + 1);
			x->item.rel = x->path;
			x->item.rel_len = n;
		}
	}
	if (c->pf && kind != RK_PEER)
		prefetch_seen(c->pf, id);   /* past the hit path: where the job's streams are */
	int how;
	if (c->cache && c->peer.owns && r == CACHE_MISS && (how = may_admit(x, item_len))) {
		r = cache_get(c->cache, id, chunk, &a->v, item_len, NULL, &ref);
		unadmit(c, how, item_len, r);
	}
	if (r == CACHE_WAIT) {
		x->w.fn = wait_done;
		x->w.arg = x;
		r = cache_get(c->cache, id, chunk, &a->v, item_len, &x->w, &ref);
		if (r == CACHE_WAIT)
			return;             /* wait_done() finishes it */
	}
	if (r == CACHE_HIT) {               /* it landed meanwhile */
		reply_from_item(x, ref.data, ref.len, 1);
		cache_put(c->cache, &ref);
		free(x);
		return;
	}
	if (r == CACHE_LOAD) {
		x->ref = ref;
		if (c->pf && kind != RK_PEER && load_staged(x, chunk))
			return;
		fetch(x, 0, item_off, ref.len, ref.data, load_done);
		return;
	}
	if (kind == RK_PEER) {
		if (c->tier && tier_path(x, chunk))
			return;
		/* We cannot keep it: the asker tries the next node of the item's
		 * ranking, which may, rather than have us read storage for
		 * nothing kept. */
		done(arg, -ENOSPC, NULL);
		free(x);
		return;
	}
	if (c->pf && take_staged(x, chunk))
		return;
	if (c->tier && tier_path(x, chunk))
		return;
	fetch(x, 0, off, len, NULL, sources_done);
}

/* ---- ahead of the readers ---- */

/* A prefetch the SSD tier took has been read: the tier writes it. */
static void prefetch_tier_done(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;
	int ok = res == (ssize_t)x->claim_len;

	(void)buf;
	tier_fill(x->c->tier, x->claim, tier_keep(x, res));
	x->pcb.done(x->pcb.arg, ok ? res : res < 0 ? res : -EIO, 1);
	free(x);
}

static void prefetch_fetched(void *arg, ssize_t res, const void *buf)
{
	struct read_ctx *x = arg;

	(void)buf;
	x->pcb.done(x->pcb.arg, res, 0);
	free(x);
}

void core_prefetch_item(struct core *c, uint32_t id, const struct index_attr *a, uint32_t chunk,
			const struct core_prefetch_cb *cb)
{
	off_t item_off = (off_t)chunk * c->chunk;
	size_t item_len = cache_chunk_len(a->v.size, c->chunk, chunk);
	enum cache_result r = CACHE_MISS;
	struct cache_ref ref;
	struct read_ctx *x;
	void *buf;

	if (c->cache) {
		r = cache_get_ex(c->cache, id, chunk, &a->v, item_len, NULL, &ref, !c->peer.owns);
		if (r == CACHE_HIT || r == CACHE_WAIT) {
			cache_put(c->cache, &ref);
			cb->done(cb->arg, 0, 1);
			return;
		}
	}
	x = ctx_new(c, RK_PREFETCH, id, a, item_off, item_len, chunk, NULL, NULL);
	if (!x) {
		if (r == CACHE_LOAD)
			cache_loaded(c->cache, &ref, 0);
		cb->done(cb->arg, -ENOMEM, 0);
		return;
	}
	x->pcb = *cb;
	int how;
	if (c->cache && c->peer.owns && r == CACHE_MISS && (how = may_admit(x, item_len))) {
		r = cache_get(c->cache, id, chunk, &a->v, item_len, NULL, &ref);
		unadmit(c, how, item_len, r);
		if (r == CACHE_HIT || r == CACHE_WAIT) {
			cache_put(c->cache, &ref);
			cb->done(cb->arg, 0, 1);
			free(x);
			return;
		}
	}
	if (r == CACHE_LOAD) {
		x->ref = ref;
		fetch(x, 0, item_off, ref.len, ref.data, load_done);
		return;
	}
	if (c->tier) {
		/* What RAM cannot take goes to the tier, not to staging: staged
		 * bytes are freed once read, and the item would be fetched from
		 * storage again every epoch. */
		int err, held = 0;
		struct source_item *it = item_of(x, &err);
		if (tier_holds(c->tier, id, chunk, &a->v)) {
			cb->done(cb->arg, 0, 1);
			free(x);
			return;
		}
		if (it && item_len && (!c->peer.owns || c->peer.owns(c->peer.ctx, it)) &&
		    (x->claim = tier_claim(c->tier, id, chunk, &a->v, item_len, &buf, &held))) {
			x->claim_buf = buf;
			x->claim_len = item_len;
			fetch(x, 1, item_off, item_len, buf, prefetch_tier_done);
			return;
		}
		if (held) {
			cb->done(cb->arg, 0, 1);
			free(x);
			return;
		}
	}
	if (!(buf = cb->stage(cb->arg, item_len))) {
		cb->done(cb->arg, -ENOSPC, 0);
		free(x);
		return;
	}
	fetch(x, 0, item_off, item_len, buf, prefetch_fetched);
}

/* ---- several items ---- */

/* A request that spans several cache items (a read larger than a chunk, or
 * one that crosses a chunk boundary): one part per item, each going the
 * single-item way, assembled in BUF and answered once. One copy more than a
 * single-item hit, and only on this path. */
struct multi {
	struct core *c;
	uint32_t id;
	size_t len;
	int pending;                /* atomic: parts not done, +1 while submitting */
	int err;                    /* atomic: the first part's error, or 0 */
	core_read_fn done;
	void *arg;
	char *buf;
};

struct part {
	struct multi *m;
	size_t at;                  /* offset in m->buf */
	size_t want;
};

static void multi_put(struct multi *m)
{
	if (__atomic_sub_fetch(&m->pending, 1, __ATOMIC_ACQ_REL))
		return;
	reply_request(m->c, m->id, m->err ? m->err : (ssize_t)m->len, m->buf, m->done, m->arg);
	free(m);
}

static void part_done(void *arg, ssize_t res, const void *buf)
{
	struct part *p = arg;
	struct multi *m = p->m;
	int none = 0;

	/* Every part lies inside the file's size, so a short part means the
	 * file changed under the read. */
	if (res >= 0 && (size_t)res != p->want)
		res = -ESTALE;
	if (res < 0)
		__atomic_compare_exchange_n(&m->err, &none, (int)res, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	else
		memcpy(m->buf + p->at, buf, (size_t)res);
	multi_put(m);
}

static void read_multi(struct core *c, uint32_t id, const struct index_attr *a, off_t off,
		       size_t len, core_read_fn done, void *arg)
{
	uint32_t first, n = cache_span((uint64_t)off, len, c->chunk, &first);
	struct multi *m = malloc(sizeof(*m) + n * sizeof(struct part) + len);
	struct part *parts;

	if (!m) {
		reply_request(c, id, -ENOMEM, NULL, done, arg);
		return;
	}
	parts = (struct part *)(m + 1);
	*m = (struct multi){ .c = c, .id = id, .len = len, .pending = (int)n + 1,
			     .done = done, .arg = arg, .buf = (char *)(parts + n) };
	for (uint32_t i = 0; i < n; i++) {
		off_t lo = i ? (off_t)(first + i) * c->chunk : off;
		off_t hi = (off_t)(first + i + 1) * c->chunk;
		if (hi > off + (off_t)len)
			hi = off + (off_t)len;
		parts[i] = (struct part){ .m = m, .at = (size_t)(lo - off), .want = (size_t)(hi - lo) };
		read_item(c, id, a, lo, (size_t)(hi - lo), RK_PART, NULL, part_done, &parts[i]);
	}
	multi_put(m);
}

void core_read_data(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len, int kernel,
		    core_read_fn done, void *arg)
{
	struct index_attr a;

	/* A coarse clock read on the hit path; a stat when the check is due. */
	index_revalidate(c->ix, id, NULL);
	if (index_get(c->ix, id, &a) < 0 || !S_ISREG(a.mode)) {
		stats_add(&c->stats, STAT_READ_ERRORS, 1);
		done(arg, -EIO, NULL);
		return;
	}
	if (a.gen != gen || a.gone) {
		stats_add(&c->stats, STAT_STALE_READS, 1);
		done(arg, -ESTALE, NULL);
		return;
	}
	if (off < 0 || (uint64_t)off >= a.v.size) {
		stats_add(&c->stats, STAT_READS, 1);
		done(arg, 0, NULL);
		return;
	}
	if (len > a.v.size - (uint64_t)off)
		len = (size_t)(a.v.size - (uint64_t)off);
	/* Read to its end: the kernel's copy of the file may go (the adapter
	 * drops it a moment later, once its reader is done with it). */
	if (kernel && c->copy_fn && (uint64_t)off + len >= a.v.size &&
	    __atomic_load_n(&c->drop_copies, __ATOMIC_RELAXED)) {
		stats_add(&c->stats, STAT_COPIES_DROPPED, 1);
		c->copy_fn(c->copy_arg, core_data_node(id, a.gen));
	}
	if (c->cache && cache_span((uint64_t)off, len, c->chunk, NULL) > 1)
		read_multi(c, id, &a, off, len, done, arg);
	else
		read_item(c, id, &a, off, len, RK_REQUEST, NULL, done, arg);
}

/* ---- reads by path: prep workers, peers ---- */

ssize_t core_read_file(struct core *c, const char *rel, void **buf, size_t *cap)
{
	struct index_attr a;
	size_t got = 0;
	int err = core_lookup_rel(c, rel, strlen(rel), &a);

	if (err < 0)
		return err;
	if (!S_ISREG(a.mode))
		return S_ISDIR(a.mode) ? -EISDIR : -ENOENT;
	if (a.v.size + 1 > *cap) {
		void *q = realloc(*buf, a.v.size + 1);
		if (!q)
			return -ENOMEM;
		*buf = q;
		*cap = a.v.size + 1;
	}
	while (got < a.v.size) {
		struct sync_wait w = SYNC_WAIT_INIT((char *)*buf + got);
		size_t want = a.v.size - got < (8u << 20) ? a.v.size - got : (8u << 20);
		core_read_data(c, a.id, a.gen, (off_t)got, want, 0, sync_wait_done, &w);
		ssize_t n = sync_wait(&w);
		if (n < 0)
			return n;
		if (n == 0)
			break;              /* shrank under us: the version check says why next time */
		got += (size_t)n;
	}
	return (ssize_t)got;
}

void core_read_peer(struct core *c, const char *rel, uint64_t size, int64_t mtime_ns, off_t off,
		    size_t len, core_read_fn done, void *arg)
{
	struct index_attr a;
	int err = core_lookup_rel(c, rel, strlen(rel), &a);

	if (err < 0 || !S_ISREG(a.mode)) {
		done(arg, err < 0 ? err : -ENOENT, NULL);
		return;
	}
	if (a.v.size != size || a.v.mtime_ns != mtime_ns) {
		/* The asker may have seen a change we have not: look again. */
		index_refresh(c->ix, a.id, 0);
		if (index_get(c->ix, a.id, &a) < 0 || a.gone || a.v.size != size ||
		    a.v.mtime_ns != mtime_ns) {
			done(arg, -ESTALE, NULL);
			return;
		}
	}
	if (off < 0 || (uint64_t)off >= a.v.size) {
		done(arg, 0, NULL);
		return;
	}
	if (len > a.v.size - (uint64_t)off)
		len = (size_t)(a.v.size - (uint64_t)off);
	if (cache_span((uint64_t)off, len, c->chunk, NULL) > 1) {
		done(arg, -EINVAL, NULL);
		return;
	}
	read_item(c, a.id, &a, off, len, RK_PEER, rel, done, arg);
}
