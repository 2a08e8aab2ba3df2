/* core.c - see core.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "options.h"
#include "syncwait.h"
#include "watch.h"

#define CORE_MAX_SAMPLES 512     /* ours, and the peer layer's (at most 64 peers x 5 + 8) */

static int core_render(void *arg, enum control_file f, char *buf, size_t len)
{
	struct sample v[CORE_MAX_SAMPLES];
	int n = core_samples(arg, v, CORE_MAX_SAMPLES);

	return f == CONTROL_STATS_JSON ? stats_render_json(v, n, buf, len)
				       : stats_render_prom(v, n, buf, len);
}

/* Sizes and creates the RAM cache. The default is a quarter of RAM, but no
 * more than the dataset needs (items are 64-byte aligned, and files larger
 * than a chunk make one item per chunk). The arena is
 * reserved with MAP_NORESERVE, so budget the data never fills costs nothing. */
static int cache_setup(struct core *c, const struct core_opts *o)
{
	struct index_totals t;
	struct cache_opts co;
	uint64_t cap = o->cache_size;
	int err;

	index_totals(c->ix, &t);
	c->chunk = (uint32_t)(o->cache_chunk ? o->cache_chunk : OPTIONS_DEFAULT_CACHE_CHUNK);
	c->cache_need = t.bytes + (t.files + t.bytes / c->chunk + 1) * 64;
	if (o->cache_default) {
		cap = options_ram_bytes() / 100 * OPTIONS_DEFAULT_CACHE_PERCENT;
		if (cap > c->cache_need)
			cap = c->cache_need;
	}
	if (!cap || !t.bytes)
		return 0;
	co = (struct cache_opts){ .capacity = cap, .chunk = c->chunk, .verify = o->verify,
				  .max_items = t.files + t.bytes / c->chunk + 16 };
	err = cache_new(&co, &c->cache);
	if (err < 0)
		log_error("cannot reserve a cache of %llu bytes: %s", (unsigned long long)cap,
			  strerror(-err));
	return err;
}

static ssize_t prep_read_file(void *ctx, const char *rel, void **buf, size_t *cap)
{
	return core_read_file(ctx, rel, buf, cap);
}

static int prep_scan(void *ctx, const char *rel, struct folder **out, char *err, size_t errlen)
{
	return folder_scan(((struct core *)ctx)->rootfd, rel, out, err, errlen);
}

/* --manifest: loads, checks it fits this mount, binds it to the index. A
 * manifest that does not match SOURCE's files is reported in one line and
 * used for the files it does match; the others are read from storage only
 * (core_verifiable), never from a peer. */
static int manifest_setup(struct core *c, const char *path)
{
	struct manifest_report rep;
	char err[600];
	int e = manifest_load(path, &c->man, err, sizeof(err));

	if (e < 0) {
		log_error("--manifest %s", err);
		return e;
	}
	if (manifest_chunk(c->man) != c->chunk) {
		log_error("--manifest %s: built with %u-byte chunks, this mount caches %u-byte ones: rebuild "
			  "it with epochfs-manifest --chunk %u, or mount with --cache-chunk %u", path,
			  manifest_chunk(c->man), c->chunk, c->chunk, manifest_chunk(c->man));
		return -EINVAL;
	}
	if ((e = manifest_bind(c->man, c->ix, &rep)) < 0) {
		log_error("--manifest %s: %s", path, strerror(-e));
		return e;
	}
	c->man_files = rep.matched;
	c->man_unverified = rep.missing + rep.size_differs;
	if (rep.missing || rep.extra || rep.size_differs)
		log_warn("--manifest %s does not match SOURCE: %llu files not in it%s%s%s, %llu sizes differ%s%s%s, "
			 "%llu records name no file%s%s%s; files it cannot check are read from storage "
			 "only (rebuild it with epochfs-manifest)", path,
			 (unsigned long long)rep.missing, rep.missing ? " (first: " : "", rep.first_missing,
			 rep.missing ? ")" : "", (unsigned long long)rep.size_differs,
			 rep.size_differs ? " (first: " : "", rep.first_size, rep.size_differs ? ")" : "",
			 (unsigned long long)rep.extra, rep.extra ? " (first: " : "", rep.first_extra,
			 rep.extra ? ")" : "");
	else
		log_info("--manifest %s: %llu files, every byte from storage or a peer is checked", path,
			 (unsigned long long)rep.matched);
	return 0;
}

const struct manifest *core_manifest(const struct core *c)
{
	return c->man;
}

int core_verifiable(const struct core *c, uint32_t id, uint64_t size)
{
	uint64_t rsize;
	int f;

	if (!c->man || (f = manifest_file_of(c->man, id)) < 0 ||
	    manifest_record(c->man, (uint64_t)f, NULL, NULL, &rsize, NULL) < 0 || rsize != size)
		return -1;
	return f;
}

/* .prep/: groups read images through the core (and so the RAM cache). */
static int prep_setup(struct core *c, const struct core_opts *o)
{
	struct prepdir_io io = { .ctx = c, .read_file = prep_read_file, .scan = prep_scan };
	struct group_opts go = { .threads = o->prep_threads, .mem = o->prep_mem,
				 .timeout_s = o->prep_timeout, .ahead = o->prep_ahead };

	if (!go.mem)
		go.mem = options_ram_bytes() / 100 * OPTIONS_DEFAULT_PREP_MEM_PERCENT;
	return prepdir_new(&io, &go, &c->prep);
}

int core_open(const struct core_opts *o, struct core **out)
{
	struct index_scan_opts so = { .threads = o->scan_threads, .progress = o->progress };
	struct core *c;
	struct stat sb;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->rootfd = -1;
	c->opts = *o;
	c->opts.source = NULL;
	stats_init(&c->stats);
	c->source = realpath(o->source, NULL);
	if (!c->source) {
		err = -errno;
		log_error("%s: %s", o->source, strerror(-err));
		goto fail;
	}
	c->rootfd = open(c->source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->rootfd < 0) {
		err = -errno;
		if (err == -ENOTDIR || (stat(c->source, &sb) == 0 && !S_ISDIR(sb.st_mode)))
			log_error("%s: not a directory", o->source);
		else
			log_error("%s: %s", o->source, strerror(-err));
		goto fail;
	}
	err = index_scan(c->rootfd, &so, &c->ix);
	if (err < 0) {
		log_error("%s: cannot scan: %s", o->source, strerror(-err));
		goto fail;
	}
	err = control_new(core_render, c, &c->ctl);
	if (err < 0)
		goto fail;
	err = cache_setup(c, o);
	if (err < 0)
		goto fail;
	if (o->manifest && (err = manifest_setup(c, o->manifest)) < 0)
		goto fail;
	if (o->prep && (err = prep_setup(c, o)) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	core_close(c);
	return err;
}

/* Runs on the cache's background thread: a debug command byte. */
static void debug_cmd(void *arg, char cmd)
{
	struct core *c = arg;
	static uint64_t next_slot;
	uint32_t id, chunk;
	char path[4096];

	if (cmd != 'c' || !c->cache)
		return;
	if (cache_debug_corrupt_any(c->cache, next_slot++ * 7919, &id, &chunk) < 0) {
		log_warn("debug hook: no cached item to corrupt");
		return;
	}
	if (index_path(c->ix, id, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "#%u", id);
	log_warn("debug hook: flipped one bit of cached item %s (chunk %u)", path, chunk);
}

/* Filesystems where inotify sees only this host's changes (f_type magic
 * numbers, linux/magic.h and the filesystems' own sources). */
static const char *remote_fs(int rootfd)
{
	static const struct { unsigned long magic; const char *name; } remote[] = {
		{ 0x6969, "NFS" }, { 0xff534d42, "CIFS" }, { 0xfe534d42, "SMB2" }, { 0x517b, "SMB" },
		{ 0x0bd00bd0, "Lustre" }, { 0x00c36400, "Ceph" }, { 0x65735546, "FUSE" },
		{ 0x01021997, "9p" }, { 0x47504653, "GPFS" }, { 0x5346414f, "AFS" },
		{ 0x19830326, "BeeGFS" }, { 0x01161970, "GFS2" }, { 0x7461636f, "OCFS2" },
		{ 0x013111a8, "IBRIX" }, { 0x6b414653, "kAFS" }, { 0x564c, "NCP" },
	};
	struct statfs sf;

	if (fstatfs(rootfd, &sf) < 0)
		return NULL;
	for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
		if ((unsigned long)(unsigned)sf.f_type == remote[i].magic)
			return remote[i].name;
	return NULL;
}

/* The staleness bound (core_timeout): --timeout, or picked from whether the
 * watch can see every change. */
static void settle_timeout(struct core *c)
{
	const char *fs = remote_fs(c->rootfd);

	c->timeout = c->opts.timeout;
	if (c->timeout < 0) {
		c->timeout = c->watch && !fs ? CORE_TIMEOUT_WATCHED : CORE_TIMEOUT_UNWATCHED;
		if (fs && c->opts.watch)
			log_info("%s is on %s, where inotify misses other hosts' changes: entries are "
				 "re-checked after %g s (--timeout)", c->source, fs, c->timeout);
	}
	index_set_max_age(c->ix, c->timeout);
}

double core_timeout(const struct core *c)
{
	return c->timeout;
}

int core_lookup(struct core *c, uint32_t parent, const char *name, struct index_attr *a,
		double *valid)
{
	/* Gone entries too: a file that came back is found by its check. */
	uint32_t id = index_find(c->ix, parent, name);

	*valid = c->timeout;
	stats_add(&c->stats, STAT_LOOKUPS, 1);
	if (!id)
		return -ENOENT;     /* names created after the scan are never added */
	index_revalidate(c->ix, id, valid);
	if (index_get(c->ix, id, a) < 0 || a->gone)
		return -ENOENT;
	return 0;
}

int core_getattr(struct core *c, uint32_t id, uint32_t gen, struct index_attr *a, double *valid)
{
	*valid = c->timeout;
	if (index_get(c->ix, id, a) < 0)
		return -ENOENT;
	if (index_revalidate(c->ix, id, valid) > 0 && index_get(c->ix, id, a) < 0)
		return -ENOENT;
	if (a->gone || (!S_ISDIR(a->mode) && a->gen != gen))
		return -ESTALE;
	return 0;
}

int core_start(struct core *c)
{
	int err = storage_new(c->rootfd, c->opts.ring_depth, &c->st);

	if (err < 0) {
		log_error("cannot set up io_uring: %s", strerror(-err));
		return err;
	}
	storage_set_drop_source_cache(c->st, !c->opts.keep_source_cache);
	if (c->cache) {
		struct maint_opts mo = { .scrub_rate = c->opts.scrub_rate,
					 .prefault_window = c->opts.prefault_window,
					 .prefault_limit = c->cache_need,
					 .cmd = debug_cmd, .arg = c };
		err = maint_start(c->cache, &mo, &c->maint);
		if (err < 0) {
			log_error("cannot start the cache's background thread: %s", strerror(-err));
			return err;
		}
	}
	if (c->opts.watch) {
		err = watch_start(c->ix, c->source, &c->watch);
		if (err < 0) {
			log_warn("cannot watch %s for changes (%s); changes are seen only through "
				 "the entry timeout", c->source, strerror(-err));
			c->watch = NULL;
		}
	}
	settle_timeout(c);
	if (c->peer.start && (err = c->peer.start(c->peer.ctx)) < 0) {
		log_error("cannot start the peer thread: %s", strerror(-err));
		return err;
	}
	return 0;
}

void core_close(struct core *c)
{
	if (!c)
		return;
	prepdir_free(c->prep);      /* its groups read through the core (and peers): first */
	if (c->peer.stop) {         /* it serves and fetches through the core: next */
		c->peer.stop(c->peer.ctx);
		memset(&c->peer, 0, sizeof(c->peer));
		c->nsources = 0;        /* the peer source was the only one */
	}
	watch_stop(c->watch);
	maint_stop(c->maint);
	storage_free(c->st);
	control_free(c->ctl);
	cache_free(c->cache);
	manifest_free(c->man);
	index_free(c->ix);
	if (c->rootfd >= 0)
		close(c->rootfd);
	free(c->source);
	free(c);
}

/* What a read_item() call is: a whole request, one item's share of a
 * request (struct core_multi), or a read a peer asked for. */
enum { PART_NO, PART_YES, PART_PEER };

/* One read in flight past core_read(): the storage fallback, a cache load,
 * or a wait on another request's load. A PART is one item's share of a
 * request that spans several items (struct core_multi): it counts only its
 * hit or miss bytes, and the request does the rest once. */
struct core_read_ctx {
	struct core *c;
	uint32_t id;
	int part;
	off_t off;                  /* the request (or part) */
	size_t len;
	struct index_attr a;        /* the version it must come from */
	struct cache_ref ref;       /* LOAD: the item being filled */
	off_t item_off;             /* file offset of the item */
	struct cache_waiter w;      /* WAIT */
	int via_storage;            /* LOAD: storage answered (not a peer, which checks its own) */
	core_read_fn done;
	void *arg;
};

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
	/* Only after the reply: the refresh may make the adapter notify the
	 * kernel about this very inode. */
	if (res == -ESTALE)
		index_refresh(c->ix, id, 0);
}

static void reply(struct core_read_ctx *x, ssize_t res, const void *buf, int from_cache)
{
	if (res >= 0 && x->part != PART_PEER)
		stats_add(&x->c->stats, from_cache ? STAT_CACHE_HIT_BYTES : STAT_CACHE_MISS_BYTES,
			  (uint64_t)res);
	if (x->part)
		x->done(x->arg, res, buf);
	else
		reply_request(x->c, x->id, res, buf, x->done, x->arg);
}

static void storage_done(void *arg, ssize_t res, const void *buf)
{
	struct core_read_ctx *x = arg;

	reply(x, res, buf, 0);
	free(x);
}

/* A fetch from source I that may still fall back to a later one. */
struct fetch_ctx {
	struct core *c;
	int next;
	int *via_storage;           /* set to 1 if storage answers (or NULL) */
	uint32_t id;
	struct index_version v;
	off_t off;
	size_t len;
	void *buf;
	source_done_fn done;
	void *arg;
};

static void fetch(struct core *c, int i, uint32_t id, const char *rel,
		  const struct index_version *v, off_t off, size_t len, void *buf,
		  int *via_storage, source_done_fn done, void *arg);

static void fetch_done(void *arg, ssize_t res, const void *buf)
{
	struct fetch_ctx *f = arg;
	char path[4096];

	if (res != -EAGAIN) {
		f->done(f->arg, res, buf);
	} else if ((res = index_path(f->c->ix, f->id, path, sizeof(path))) < 0) {
		f->done(f->arg, res, NULL);
	} else {
		fetch(f->c, f->next, f->id, path, &f->v, f->off, f->len, f->buf, f->via_storage, f->done,
		      f->arg);
	}
	free(f);
}

/* Fetches a miss from the sources, from the I-th on; storage, the last,
 * is called directly (and sets *VIA_STORAGE, when given, first). DONE runs
 * once. */
static void fetch(struct core *c, int i, uint32_t id, const char *rel,
		  const struct index_version *v, off_t off, size_t len, void *buf,
		  int *via_storage, source_done_fn done, void *arg)
{
	struct fetch_ctx *f;

	if (i >= c->nsources || !(f = malloc(sizeof(*f)))) {
		if (via_storage)
			*via_storage = 1;
		storage_read(c->st, rel, v, off, len, buf, done, arg);
		return;
	}
	*f = (struct fetch_ctx){ .c = c, .next = i + 1, .via_storage = via_storage, .id = id, .v = *v,
				 .off = off, .len = len, .buf = buf, .done = done, .arg = arg };
	c->sources[i].read(c->sources[i].ctx, id, rel, v, off, len, buf, fetch_done, f);
}

int core_add_source(struct core *c, const struct source *s)
{
	if (c->nsources == CORE_MAX_SOURCES)
		return -ENOSPC;
	c->sources[c->nsources++] = *s;
	return 0;
}

/* Reads the request itself from the sources (no cache involved). */
static void read_storage(struct core_read_ctx *x)
{
	char path[4096];
	int err = index_path(x->c->ix, x->id, path, sizeof(path));

	if (err < 0) {
		storage_done(x, err, NULL);
		return;
	}
	fetch(x->c, 0, x->id, path, &x->a.v, x->off, x->len, NULL, NULL, storage_done, x);
}

/* Serves the request from item bytes DATA (LEN long, at x->item_off).
 * HIT: the bytes cost this request no storage read (a cached item, or a
 * load another request made); the read that loads an item is a miss. */
static void reply_from_item(struct core_read_ctx *x, const char *data, size_t len, int hit)
{
	size_t skip = (size_t)(x->off - x->item_off);
	size_t n = x->len < len - skip ? x->len : len - skip;

	reply(x, (ssize_t)n, data + skip, hit);
}

static void wait_done(void *arg, const void *data, size_t len)
{
	struct core_read_ctx *x = arg;

	if (!data) {
		read_storage(x);        /* the load failed: go to the source ourselves */
		return;
	}
	reply_from_item(x, data, len, 1);
	free(x);
}

/* With a manifest: whether the storage bytes of a load are the ones it
 * lists. A mismatch (SOURCE changed in place, or corrupt under us) is
 * counted and logged; SOURCE stays what readers get, but the bytes are
 * never cached, so never served to a peer as checked. */
static int load_checks(struct core_read_ctx *x)
{
	struct core *c = x->c;
	uint32_t chunk = (uint32_t)((uint64_t)x->item_off / c->chunk);
	int f = core_verifiable(c, x->id, x->a.v.size);
	char path[4096];

	if (f < 0 || manifest_check(c->man, (uint32_t)f, chunk, x->ref.data, x->ref.len) == 0)
		return 1;
	stats_add(&c->stats, STAT_MANIFEST_MISMATCHES, 1);
	if (index_path(c->ix, x->id, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "#%u", x->id);
	log_warn("%s (chunk %u): storage bytes do not match the manifest; served, not cached", path, chunk);
	return 0;
}

static void load_done(void *arg, ssize_t res, const void *buf)
{
	struct core_read_ctx *x = arg;
	int ok = res == (ssize_t)x->ref.len, keep = ok && (!x->via_storage || !x->c->man || load_checks(x));

	(void)buf;
	/* Serve our own request first, then let the waiters go. A peer asking
	 * for bytes we could not check gets an error and reads storage itself. */
	if (ok && (keep || x->part != PART_PEER))
		reply_from_item(x, x->ref.data, x->ref.len, 0);
	else
		reply(x, res < 0 ? res : ok ? -EBADMSG : -EIO, NULL, 0);
	cache_loaded(x->c->cache, &x->ref, keep);
	free(x);
}

/* With peers: may chunk CHUNK of file ID (LEN bytes) take cache budget? */
static int may_admit(struct core *c, uint32_t id, uint32_t chunk, size_t len)
{
	char path[4096];

	if (index_path(c->ix, id, path, sizeof(path)) < 0)
		return 0;
	if (c->peer.owns(c->peer.ctx, path, chunk))
		return 1;
	if (!c->peer.remote_budget)
		return 0;
	if (__atomic_add_fetch(&c->remote_used, len, __ATOMIC_RELAXED) <= c->peer.remote_budget)
		return 1;
	__atomic_sub_fetch(&c->remote_used, len, __ATOMIC_RELAXED);
	return 0;
}

/* Reads [OFF, OFF+LEN) of file ID, version A, which lies inside one cache
 * item (or anywhere, without a cache): hit, load, wait, or storage. */
static void read_item(struct core *c, uint32_t id, const struct index_attr *a, off_t off,
		      size_t len, int part, core_read_fn done, void *arg)
{
	uint32_t chunk = (uint32_t)((uint64_t)off / c->chunk);
	off_t item_off = (off_t)chunk * c->chunk;
	size_t item_len = c->cache ? cache_chunk_len(a->v.size, c->chunk, chunk) : 0;
	enum cache_result r = CACHE_MISS;
	struct core_read_ctx *x;
	struct cache_ref ref;

	if (c->cache) {
		/* The hit path allocates nothing: a waiter is needed only if the
		 * item is loading, and then we ask again with one. With peers, an
		 * absent item is admitted only if we own it (or it fits the
		 * remote budget): that is decided on the miss path alone. */
		int may = !c->peer.owns;
		r = cache_get_ex(c->cache, id, chunk, &a->v, item_len, NULL, &ref, may);
		if (!may && r == CACHE_MISS && may_admit(c, id, chunk, item_len))
			r = cache_get(c->cache, id, chunk, &a->v, item_len, NULL, &ref);
		if (r == CACHE_HIT) {
			struct core_read_ctx hx = { .c = c, .id = id, .part = part, .off = off,
						    .len = len, .item_off = item_off,
						    .done = done, .arg = arg };
			reply_from_item(&hx, ref.data, ref.len, 1);
			return;
		}
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		if (r == CACHE_LOAD)
			cache_loaded(c->cache, &ref, 0);
		if (part)
			done(arg, -ENOMEM, NULL);
		else
			reply_request(c, id, -ENOMEM, NULL, done, arg);
		return;
	}
	*x = (struct core_read_ctx){ .c = c, .id = id, .part = part, .off = off, .len = len,
				     .a = *a, .item_off = item_off, .done = done, .arg = arg };
	if (r == CACHE_WAIT) {
		x->w.fn = wait_done;
		x->w.arg = x;
		r = cache_get(c->cache, id, chunk, &a->v, item_len, &x->w, &ref);
		if (r == CACHE_WAIT)
			return;             /* wait_done() finishes it */
		if (r == CACHE_HIT) {
			reply_from_item(x, ref.data, ref.len, 1);
			free(x);
			return;
		}
	}
	if (r == CACHE_LOAD) {
		char path[4096];
		int err = index_path(c->ix, id, path, sizeof(path));
		x->ref = ref;
		if (err < 0) {
			load_done(x, err, NULL);
			return;
		}
		fetch(c, 0, id, path, &a->v, item_off, ref.len, ref.data, &x->via_storage, load_done, x);
		return;
	}
	if (part == PART_PEER) {
		/* We cannot keep it: the asker tries the next node of the item's
		 * ranking, which may, rather than have us read storage for
		 * nothing kept. */
		done(arg, -ENOSPC, NULL);
		free(x);
		return;
	}
	read_storage(x);
}

/* A request that spans several cache items (a read larger than a chunk, or
 * one that crosses a chunk boundary): one part per item, each going the
 * single-item way, assembled in BUF and answered once. One copy more than a
 * single-item hit, and only on this path. */
struct core_multi {
	struct core *c;
	uint32_t id;
	size_t len;
	int pending;                /* atomic: parts not done, +1 while submitting */
	int err;                    /* atomic: the first part's error, or 0 */
	core_read_fn done;
	void *arg;
	char *buf;
};

struct core_part {
	struct core_multi *m;
	size_t at;                  /* offset in m->buf */
	size_t want;
};

static void multi_put(struct core_multi *m)
{
	if (__atomic_sub_fetch(&m->pending, 1, __ATOMIC_ACQ_REL))
		return;
	reply_request(m->c, m->id, m->err ? m->err : (ssize_t)m->len, m->buf, m->done, m->arg);
	free(m);
}

static void part_done(void *arg, ssize_t res, const void *buf)
{
	struct core_part *p = arg;
	struct core_multi *m = p->m;
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
	uint32_t first = (uint32_t)((uint64_t)off / c->chunk);
	uint32_t n = (uint32_t)((uint64_t)(off + (off_t)len - 1) / c->chunk) - first + 1;
	struct core_multi *m = malloc(sizeof(*m) + n * sizeof(struct core_part) + len);
	struct core_part *parts;

	if (!m) {
		reply_request(c, id, -ENOMEM, NULL, done, arg);
		return;
	}
	parts = (struct core_part *)(m + 1);
	*m = (struct core_multi){ .c = c, .id = id, .len = len, .pending = (int)n + 1,
				  .done = done, .arg = arg, .buf = (char *)(parts + n) };
	for (uint32_t i = 0; i < n; i++) {
		off_t lo = i ? (off_t)(first + i) * c->chunk : off;
		off_t hi = (off_t)(first + i + 1) * c->chunk;
		if (hi > off + (off_t)len)
			hi = off + (off_t)len;
		parts[i] = (struct core_part){ .m = m, .at = (size_t)(lo - off), .want = (size_t)(hi - lo) };
		read_item(c, id, a, lo, (size_t)(hi - lo), 1, part_done, &parts[i]);
	}
	multi_put(m);
}

void core_read(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len,
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
	if (c->cache && (uint64_t)off / c->chunk != (uint64_t)(off + (off_t)len - 1) / c->chunk)
		read_multi(c, id, &a, off, len, done, arg);
	else
		read_item(c, id, &a, off, len, 0, done, arg);
}

/* The index entry of the path REL (LEN bytes) below SOURCE, in *A. 0 or
 * -ENOENT / -ENAMETOOLONG. Only indexed names resolve: nothing outside
 * SOURCE, no symlink followed. */
static int lookup_rel(struct core *c, const char *rel, size_t len, struct index_attr *a)
{
	char path[4096], *save = NULL, *tok;
	uint32_t id = INDEX_ROOT;

	if (len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, rel, len);
	path[len] = '\0';
	for (tok = strtok_r(path, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
		if (strcmp(tok, ".") && !(id = index_lookup(c->ix, id, tok)))
			return -ENOENT;
	if (index_get(c->ix, id, a) < 0 || a->gone)
		return -ENOENT;
	return 0;
}

ssize_t core_read_file(struct core *c, const char *rel, void **buf, size_t *cap)
{
	struct index_attr a;
	size_t got = 0;
	int err = lookup_rel(c, rel, strlen(rel), &a);

	if (err < 0)
		return err;
	uint32_t id = a.id;
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
		core_read(c, id, a.gen, (off_t)got, want, sync_wait_done, &w);
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
	int err = lookup_rel(c, rel, strlen(rel), &a);

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
	if ((uint64_t)off / c->chunk != (uint64_t)(off + (off_t)len - 1) / c->chunk) {
		done(arg, -EINVAL, NULL);
		return;
	}
	read_item(c, a.id, &a, off, len, PART_PEER, done, arg);
}

void core_set_peer_hooks(struct core *c, const struct core_peer_hooks *h)
{
	c->peer = *h;
}

struct stats *core_stats(struct core *c)
{
	return &c->stats;
}

uint32_t core_chunk(const struct core *c)
{
	return c->chunk;
}

int core_cache_full(const struct core *c)
{
	struct cache_stats s = { 0 };

	if (!c->cache)
		return 1;
	cache_get_stats(c->cache, &s);
	return s.full > 0;
}

uint64_t core_cache_capacity(const struct core *c)
{
	struct cache_stats s = { 0 };

	if (c->cache)
		cache_get_stats(c->cache, &s);
	return s.capacity;
}

uint64_t core_owned_bytes(struct core *c, int (*owns)(void *ctx, const char *rel, uint32_t chunk),
			  void *ctx)
{
	uint32_t n = index_count(c->ix);
	uint64_t sum = 0;
	char path[4096];

	for (uint32_t id = INDEX_ROOT + 1; id <= n; id++) {
		struct index_attr a;
		if (index_get(c->ix, id, &a) < 0 || a.gone || !S_ISREG(a.mode) ||
		    index_path(c->ix, id, path, sizeof(path)) < 0)
			continue;
		uint32_t chunks = cache_chunks(a.v.size, c->chunk);
		for (uint32_t k = 0; k < chunks; k++)
			if (owns(ctx, path, k))
				sum += cache_chunk_len(a.v.size, c->chunk, k) + 64;
	}
	return sum;
}

int core_debug_fd(struct core *c)
{
	return maint_command_fd(c->maint);
}

int core_samples(struct core *c, struct sample *out, int max)
{
	struct index_totals t;
	struct storage_stats ss;
	int n = 0;

	index_totals(c->ix, &t);
	storage_get_stats(c->st, &ss);
#define GAUGE(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_GAUGE, .u = (val) }
#define COUNTER(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_COUNTER, .u = (val) }
	GAUGE("files", "Regular files in the index", t.files);
	GAUGE("dirs", "Directories in the index", t.dirs);
	GAUGE("symlinks", "Symbolic links in the index", t.symlinks);
	GAUGE("bytes_total", "Sum of the sizes of the indexed files", t.bytes);
	GAUGE("index_bytes", "Memory held by the index", index_memory(c->ix));
	GAUGE("watched_dirs", "Directories watched for changes", watch_count(c->watch));
	COUNTER("storage_read_bytes", "Bytes the daemon read from SOURCE", ss.bytes);
	COUNTER("storage_reads", "Reads the daemon issued to SOURCE", ss.reads);
	COUNTER("storage_errors", "Reads of SOURCE that failed", ss.errors);
	COUNTER("storage_inline_reads", "Reads of SOURCE served at once from its page cache", ss.inline_reads);
	struct cache_stats cs = { 0 };
	if (c->cache)
		cache_get_stats(c->cache, &cs);
	GAUGE("cache_capacity_bytes", "Byte budget of the RAM cache", cs.capacity);
	GAUGE("cache_used_bytes", "Bytes of the budget in use", cs.used);
	GAUGE("cache_items", "Items ready in the RAM cache", cs.items);
	COUNTER("cache_hits", "Reads served from (or waiting on) a cached item", cs.hits);
	COUNTER("cache_misses", "Reads that found no cached item", cs.misses);
	COUNTER("cache_corrupt", "Cached items dropped for a checksum mismatch", cs.corrupt);
	COUNTER("cache_stale", "Cached items dropped because their file changed", cs.stale);
	COUNTER("cache_full", "Items not admitted: budget spent", cs.full);
	COUNTER("cache_scrubbed_bytes", "Bytes the background scrubber re-checked", cs.scrubbed_bytes);
	COUNTER("cache_scrub_passes", "Full passes of the scrubber over the cache", cs.scrub_passes);
	GAUGE("cache_prefaulted_bytes", "Arena bytes made resident ahead of the fill", cs.prefaulted);
	GAUGE("manifest_files", "Files the manifest (--manifest) checks", c->man_files);
	GAUGE("manifest_unverified", "Files the manifest cannot check (not in it, or another size): storage only",
	      c->man_unverified);
	struct group_stats ps = { 0 };
	uint64_t groups = 0;
	if (c->prep)
		prepdir_stats(c->prep, &ps, &groups);
	GAUGE("prep_groups", "Prep groups declared in .prep/", groups);
	COUNTER("prep_batches_produced", "Batches made (first time)", ps.produced);
	COUNTER("prep_batches_regenerated", "Batches made again after they were freed", ps.regenerated);
	COUNTER("prep_batches_freed", "Batches freed once their consumers read them", ps.freed);
	COUNTER("prep_served_bytes", "Batch bytes read by consumers", ps.served_bytes);
	COUNTER("prep_images", "Images decoded and augmented", ps.images);
	COUNTER("prep_bad_samples", "Images replaced by a substitute (corrupt, not JPEG, too large)", ps.bad_samples);
	GAUGE("prep_staged_bytes", "Bytes of made batches held in memory", ps.staged_bytes);
	GAUGE("prep_staged_peak_bytes", "Most bytes of made batches held at once (sum over groups)", ps.staged_peak);
	GAUGE("prep_consumers", "Batch files open now", ps.readers);
	COUNTER("prep_consumers_dropped", "Consumers given up on after stalling", ps.dropped);
#undef GAUGE
#undef COUNTER
	if (n < max)
		out[n++] = (struct sample){ .name = "prep_cpu_seconds", .help = "CPU seconds spent making batches",
					    .kind = SAMPLE_COUNTER, .is_float = 1, .d = ps.cpu_ns / 1e9 };
	n += stats_samples(&c->stats, out + n, max - n);
	if (c->peer.samples)
		n += c->peer.samples(c->peer.ctx, out + n, max - n);
	if (n < max)
		out[n++] = (struct sample){ .name = "uptime_s", .help = "Seconds since mount",
					    .kind = SAMPLE_GAUGE, .is_float = 1,
					    .d = stats_uptime(&c->stats) };
	if (n < max)
		out[n++] = (struct sample){ .name = "scan_seconds", .help = "Seconds the mount-time scan took",
					    .kind = SAMPLE_GAUGE, .is_float = 1, .d = t.scan_seconds };
	return n;
}
