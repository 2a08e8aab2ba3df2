/* core.c - the core's wiring: opening SOURCE and the stores behind it
 * (index, RAM cache, manifest, .epochfs/, .prep/), starting and stopping
 * their threads, the staleness bound, and what the modules that plug in
 * (peers) may ask. The namespaces are fs/core/nodes.c, the read path fs/core/read.c,
 * the catalogue of samples fs/core/metrics.c; see core.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/core_int.h"
#include "core/ns/order.h"
#include "core/ns/prepdir.h"
#include "core/prefetch.h"
#include "core/memory.h"
#include "core/watch.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/maint.h"
#include "store/manifest.h"
#include "store/persist.h"
#include "store/staging.h"
#include "store/storage.h"
#include "store/tier.h"
#include "util/httpd.h"
#include "util/log.h"
#include "util/memwatch.h"
#include "util/trust.h"

uint64_t core_ram_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	uint64_t limit = memwatch_limit_bytes();    /* the cgroup's, if tighter */

	return limit && (!ram || limit < ram) ? limit : ram;
}

static int persist_resolve(void *arg, const char *rel, size_t len, uint32_t *id, struct index_version *v)
{
	struct index_attr a;
	int err = core_lookup_rel(arg, rel, len, &a);

	if (err < 0 || !S_ISREG(a.mode))
		return err < 0 ? err : -ENOENT;
	*id = a.id;
	*v = a.v;
	return 0;
}

static int persist_path(void *arg, uint32_t id, char *buf, size_t len)
{
	return index_path(((struct core *)arg)->ix, id, buf, len);
}

/* With --manifest, an adopted item made under another manifest (or none)
 * must match this one: it may have come from a peer nobody checked. */
static int persist_check(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
			 const void *data, size_t len)
{
	struct core *c = arg;
	int f = core_verifiable(c, id, v);

	return f < 0 || manifest_check(c->man, (uint32_t)f, chunk, data, len) != 0;
}

/* Opens the cache's state directory (the default one for the mount point
 * unless --state-dir), after freeing this user's orphaned states. 0 with
 * c->persist set; 1: the cache runs without a state (anonymous memory,
 * said in one line and in c->persist_why); -errno: the mount is refused
 * (logged), for a --state-dir that cannot be used. */
static int persist_setup(struct core *c, const struct core_opts *o, uint64_t cap)
{
	char dir[4096], root[256], err[700];
	struct persist_opts po = { .source = c->source, .chunk = c->chunk, .capacity = cap, .tmpfs = 1,
				   .compact = 1, .room_check = 1, .check = persist_check, .check_arg = c };
	char *mnt = o->mountpoint ? realpath(o->mountpoint, NULL) : NULL;
	int e;

	if (c->man)
		po.manifest_id = manifest_id(c->man);
	po.what = o->state_dir ? "--state-dir" : "the cache state";
	po.mountpoint = mnt ? mnt : o->mountpoint;
	persist_default_root(root, sizeof(root));
	persist_default_dir(root, po.mountpoint ? po.mountpoint : c->source, dir, sizeof(dir));
	if (o->state_dir || o->persist == PERSIST_MODE_OFF) {
		/* An earlier default state of this mount point is freed, not left
		 * behind: --persist off is how a user asks for the memory back. */
		persist_sweep(root, NULL);
		if (o->persist == PERSIST_MODE_OFF) {
			struct persist *old;
			po.dir = dir;
			po.room_check = 0;
			if (access(dir, F_OK) == 0 && persist_open(&po, &old, err, sizeof(err)) == 0) {
				log_info("freed the cache state %s a previous daemon left (--persist off)", dir);
				persist_remove(old);
			}
			snprintf(c->persist_why, sizeof(c->persist_why), "off (--persist off)");
			free(mnt);
			return 1;
		}
		snprintf(dir, sizeof(dir), "%s", o->state_dir);
	} else {
		persist_sweep(root, strrchr(dir, '/') + 1);
	}
	po.dir = dir;
	e = persist_open(&po, &c->persist, err, sizeof(err));
	free(mnt);
	if (e >= 0) {
		snprintf(c->persist_why, sizeof(c->persist_why), "on (%s): %.690s",
			 o->persist == PERSIST_MODE_ALWAYS ? "always" : "crash", dir);
		return 0;
	}
	if (o->state_dir && e != -ENOSPC) {
		log_error("%s", err);
		return e;
	}
	/* The default place is not ours to use, or no state filesystem has
	 * room: the cache lives in anonymous memory and dies with the daemon. */
	snprintf(c->persist_why, sizeof(c->persist_why), "off: %s", err);
	if (e == -ENOSPC)
		log_info("%s: the cache uses anonymous memory and will not survive a restart", err);
	else
		log_warn("%s: the cache uses anonymous memory and will not survive a restart", err);
	return 1;
}

/* Sizes and creates the RAM cache. The default is a quarter of RAM, but no
 * more than the dataset needs (items are 64-byte aligned, and files larger
 * than a chunk make one item per chunk). The arena is
 * reserved with MAP_NORESERVE, so budget the data never fills costs nothing.
 * With a state directory, the arena is its file, and the items a previous
 * daemon left there are adopted before anything is served. */
static int cache_setup(struct core *c, const struct core_opts *o)
{
	struct index_totals t;
	struct cache_opts co;
	uint64_t cap = o->cache_size;
	int err;

	index_totals(c->ix, &t);
	c->cache_need = t.bytes + (t.files + t.bytes / c->chunk + 1) * 64;
	/* Large files in backings: whole pages, and one more to align each. */
	uint64_t small = t.bytes - (c->pt_planned ? c->pt_large_bytes : 0);
	c->cache_need_small = small + (t.files + small / c->chunk + 1) * 64;
	if (c->pt_planned)
		c->cache_need += c->pt_large_files * 8192;
	if (o->cache_default) {
		cap = core_ram_bytes() / 100 * CORE_DEFAULT_CACHE_PERCENT;
		if (cap > c->cache_need)
			cap = c->cache_need;
	}
	if (!cap || !t.bytes)
		return 0;
	co = (struct cache_opts){ .capacity = cap, .chunk = c->chunk, .verify = o->verify,
				  .max_items = t.files + t.bytes / c->chunk + 16 };
	if ((err = persist_setup(c, o, cap)) < 0)
		return err;
	if (c->persist) {
		struct statfs sf;
		co.arena_file = 1;
		co.arena_fd = persist_arena_fd(c->persist);
		/* It never takes the last of its filesystem while it fills. */
		if (fstatfs(co.arena_fd, &sf) == 0)
			co.fs_floor = persist_headroom((uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize);
	}
	err = cache_new(&co, &c->cache);
	if (err < 0) {
		log_error("cannot reserve a cache of %llu bytes: %s", (unsigned long long)cap,
			  strerror(-err));
		return err;
	}
	core_spread_setup(c, cap, &t);
	if (c->pt_planned && !c->spread)
		cache_set_backing(c->cache, CORE_PT_MIN_SIZE);
	if (c->persist)
		persist_adopt(c->persist, c->cache, persist_resolve, persist_path, c, o->scan_threads);
	return 0;
}

/* --cache-dir: the SSD tier, the first source a miss asks (before a peer
 * and storage). 0 or -errno (logged). */
static int tier_setup(struct core *c, const struct core_opts *o)
{
	struct index_totals t;
	struct tier_opts to = { .ndirs = o->ncache_dirs, .source = c->source, .mountpoint = o->mountpoint,
				.chunk = c->chunk, .persist = o->persist != PERSIST_MODE_OFF, .buffered = o->cache_dir_buffered };
	struct source s = { .name = "tier", .read = tier_read };
	char err[600];
	int e;

	index_totals(c->ix, &t);
	if (c->man)
		to.manifest_id = manifest_id(c->man);
	to.max_items = t.files + t.bytes / c->chunk + 16;
	to.need = t.bytes + (t.files + t.bytes / c->chunk + 1) * 4096;
	for (unsigned k = 0; k < o->ncache_dirs && k < TIER_MAX_DIRS; k++) {
		to.dirs[k] = o->cache_dirs[k];
		to.sizes[k] = !o->ncache_dir_sizes ? 0 : o->cache_dir_sizes[o->ncache_dir_sizes == 1 ? 0 : k];
	}
	if ((e = tier_open(&to, persist_resolve, persist_path, c, &c->tier, err, sizeof(err))) < 0) {
		log_error("%s", err);
		return e;
	}
	s.ctx = c->tier;
	return core_add_source(c, &s);
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
	int fd = trust_file(path, err, sizeof(err)), e;

	/* What checks every peer's bytes must be out of other users' reach. */
	if (fd < 0) {
		log_error("--manifest %s: not trusted: %s", path, err);
		return fd;
	}
	e = manifest_load_fd(fd, path, &c->man, err, sizeof(err));
	close(fd);
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
	c->man_unverified = rep.missing + rep.version_differs;
	if (rep.missing || rep.extra || rep.version_differs)
		log_warn("--manifest %s does not match SOURCE: %llu files not in it%s%s%s, %llu at another "
			 "version (size, inode, mtime or ctime)%s%s%s, %llu records name no file%s%s%s; files it "
			 "cannot check are read from storage only (rebuild it with epochfs-manifest on this "
			 "SOURCE)", path,
			 (unsigned long long)rep.missing, rep.missing ? " (first: " : "", rep.first_missing,
			 rep.missing ? ")" : "", (unsigned long long)rep.version_differs,
			 rep.version_differs ? " (first: " : "", rep.first_version, rep.version_differs ? ")" : "",
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

int core_verifiable(const struct core *c, uint32_t id, const struct index_version *v)
{
	uint32_t f;

	if (!c->man || !manifest_verifiable(c->man, id, v, &f))
		return -1;
	return (int)f;
}

/* .prep/: groups read images through the core (and so the RAM cache). */
static int prep_setup(struct core *c, const struct core_opts *o)
{
	struct prepdir_io io = { .ctx = c, .read_file = prep_read_file, .scan = prep_scan };
	struct group_opts go = { .threads = o->prep_threads, .mem = o->prep_mem,
				 .timeout_s = o->prep_timeout, .ahead = o->prep_ahead };

	/* The total for all groups together (one pool, prepdir's), not each's. */
	if (!go.mem)
		go.mem = core_ram_bytes() / 100 * CORE_DEFAULT_PREP_MEM_PERCENT;
	return prepdir_new(&io, &go, &c->prep);
}

/* The options in force, in words, for stats.json ("options"). */
static void options_text(struct core *c)
{
	const struct core_opts *o = &c->opts;
	static const char *const persist[] = { "off", "crash", "always" };
	static const char *const page[] = { "auto", "keep", "drop" };
	static const char *const pt[] = { "auto", "on", "off" };

	snprintf(c->options, sizeof(c->options),
		 "cache-size=%llu cache-chunk=%u persist=%s cache-dirs=%u prefetch-mem=%llu prefetch-window=%u "
		 "order=%s page-cache=%s mem-watch=%s timeout=%g verify=%s manifest=%s prep=%s peers=%s "
		 "passthrough=%s stand-aside=%s spread=%s",
		 (unsigned long long)core_cache_capacity(c), c->chunk, persist[o->persist % 3], o->ncache_dirs,
		 (unsigned long long)o->prefetch_mem, o->prefetch_window ? o->prefetch_window : PREFETCH_DEFAULT_WINDOW,
		 o->no_order ? "off" : "on", page[o->page_cache % 3], o->no_mem_watch ? "off" : "on", o->timeout,
		 o->verify ? "on" : "off", c->man ? "on" : "off", c->prep ? "on" : "off",
		 c->peer.owns ? "on" : "off", pt[o->passthrough % 3], o->no_stand_aside ? "off" : "auto",
		 o->spread ? "on" : "off");
}

/* ---- .epochfs/order/, staging and the prefetcher ---- */

static int order_resolve(void *arg, const char *rel, size_t len, uint32_t *id)
{
	struct index_attr a;

	if (core_lookup_rel(arg, rel, len, &a) < 0 || !S_ISREG(a.mode))
		return -ENOENT;
	*id = a.id;
	return 0;
}

static void order_reset(void *arg, uint32_t group)
{
	struct core *c = arg;

	staging_drop_group(c->staging, group);
}

static void order_wake(void *arg)
{
	prefetch_wake(((struct core *)arg)->pf);
}

/* While a job sends its order, the cache leaves staging its share of the
 * budget, from the first stream on (a prefetcher that filled the cache
 * before the memory thread's next sample left staging on top of it). */
static void order_streams(void *arg, unsigned n)
{
	struct core *c = arg;

	if (!c->cache)
		return;
	uint64_t cap = core_cache_capacity(c), share = memory_staging_share(cap, c->cache_need, c->opts.prefetch_mem);
	cache_set_reserve(c->cache, n ? share : 0);
	/* The spread shares what the cache may now take among the files. */
	core_spread_budget(c, cap - (n ? share : 0));
	if (n && share && c->staging) {
		struct cache_stats cs;
		cache_get_stats(c->cache, &cs);
		uint64_t left = cs.used < cap ? cap - cs.used : 0;
		staging_lower_limit(c->staging, share < left ? share : left);
	}
}

static void staging_room_cb(void *arg)
{
	prefetch_wake(((struct core *)arg)->pf);
}

/* The order channel, the staging store and the prefetch thread (started
 * by core_start). --prefetch-mem 0: orders are taken, nothing is fetched. */
static int order_setup(struct core *c, const struct core_opts *o)
{
	struct order_opts oo = { .expire_s = o->order_expire, .resolve = order_resolve, .reset = order_reset,
				 .wake = order_wake, .streams = order_streams, .arg = c };
	struct prefetch_opts po = { .window = o->prefetch_window };
	int err;

	if ((err = staging_new(o->prefetch_mem, staging_room_cb, c, &c->staging)) < 0 ||
	    (err = order_new(&oo, &c->order)) < 0 ||
	    (err = prefetch_new(c, c->order, c->staging, &po, &c->pf)) < 0)
		return err;
	return 0;
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
	c->chunk = (uint32_t)(o->cache_chunk ? o->cache_chunk : CORE_DEFAULT_CACHE_CHUNK);
	if (o->mountpoint)
		c->mountpoint = realpath(o->mountpoint, NULL);
	/* The manifest first: what the caches adopt is checked against it. */
	if (o->manifest && (err = manifest_setup(c, o->manifest)) < 0)
		goto fail;
	core_pt_plan(c);            /* before the cache: where large files go */
	err = cache_setup(c, o);
	if (err < 0)
		goto fail;
	if (o->ncache_dirs && (err = tier_setup(c, o)) < 0)
		goto fail;
	if (o->prep && (err = prep_setup(c, o)) < 0)
		goto fail;
	if (!o->no_order && (err = order_setup(c, o)) < 0)
		goto fail;
	core_set_change_cb(c, NULL, NULL);      /* counts changes until the adapter listens */
	options_text(c);
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

int core_start(struct core *c)
{
	int err = storage_new(c->rootfd, c->opts.ring_depth, &c->st);

	if (err < 0) {
		log_error("cannot set up io_uring: %s", strerror(-err));
		return err;
	}
	storage_set_drop_source_cache(c->st, !c->opts.keep_source_cache);
	if (c->tier) {
		char why[300];
		if ((err = tier_start(c->tier, why, sizeof(why))) < 0) {
			log_error("%s", why);
			return err;
		}
	}
	/* The state's lock names the process that serves: the adapter may have
	 * forked into the background since persist_open(). */
	if (c->persist)
		persist_note_pid(c->persist);
	/* Storage is the last source: the tier and the peers pass to it. */
	struct source s = { .name = "storage", .ctx = c->st, .read = storage_source_read, .unchecked = 1 };
	if ((err = core_add_source(c, &s)) < 0)
		return err;
	if (c->cache) {
		struct maint_opts mo = { .scrub_rate = c->opts.scrub_rate,
					 .prefault_window = c->opts.prefault_window,
					 .prefault_limit = c->pt_planned && !c->spread ? c->cache_need_small
										: c->cache_need,
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
	if (c->opts.no_mem_watch) {
		__atomic_store_n(&c->drop_copies, c->opts.page_cache == PAGE_CACHE_DROP, __ATOMIC_RELAXED);
	} else if ((err = memory_start(c, (enum page_cache_mode)c->opts.page_cache, &c->memory)) < 0) {
		log_error("cannot start the memory watcher: %s", strerror(-err));
		return err;
	}
	if (c->pf && (err = prefetch_start(c->pf)) < 0) {
		log_error("cannot start the prefetch thread: %s", strerror(-err));
		return err;
	}
	if (c->peer.start && (err = c->peer.start(c->peer.ctx)) < 0) {
		log_error("cannot start the peer thread: %s", strerror(-err));
		return err;
	}
	if (c->opts.metrics_addr) {
		char why[300];
		if ((err = httpd_start(c->opts.metrics_addr, core_render_http, c, &c->httpd, why, sizeof(why))) < 0) {
			log_error("%s", why);
			return err;
		}
		log_info("metrics at http://%s/metrics (port %d)", c->opts.metrics_addr, httpd_port(c->httpd));
	}
	c->served = 1;
	return 0;
}

void core_close(struct core *c)
{
	if (!c)
		return;
	httpd_stop(c->httpd);       /* it renders the counters of everything below */
	memory_stop(c->memory);     /* each tick reads the orders, the staging and the cache: before
				     * any of them goes (a tick racing order_free() crashed a stop) */
	c->memory = NULL;
	prepdir_free(c->prep);      /* its groups read through the core (and peers): first */
	prefetch_free(c->pf);       /* its fetches too, and prep's reads tell it of progress */
	c->pf = NULL;               /* the order and staging call it no more */
	order_free(c->order);
	c->order = NULL;
	if (c->peer.stop) {         /* it serves and fetches through the core: next */
		c->peer.stop(c->peer.ctx);
		memset(&c->peer, 0, sizeof(c->peer));
		c->nsources = 0;        /* the tier's and the peers' sources */
	}
	watch_stop(c->watch);
	maint_stop(c->maint);
	tier_free(c->tier);         /* its writes land first */
	storage_free(c->st);
	staging_free(c->staging);
	control_free(c->ctl);
	core_pt_free(c);
	cache_free(c->cache);
	/* After the cache: it records until then. A clean stop gives the
	 * memory back unless the state is kept on purpose; a mount refused
	 * before it served leaves no new state behind. */
	if (c->persist) {
		struct persist_stats ps;
		persist_get_stats(c->persist, &ps);
		if (c->served && c->opts.persist == PERSIST_MODE_ALWAYS) {
			persist_mark_kept(c->persist);
			persist_close(c->persist);
		} else if (c->served || !ps.found) {
			persist_remove(c->persist);
		} else {
			persist_close(c->persist);
		}
	}
	manifest_free(c->man);
	index_free(c->ix);
	if (c->rootfd >= 0)
		close(c->rootfd);
	free(c->source);
	free(c->mountpoint);
	free(c);
}

void core_set_peer_hooks(struct core *c, const struct core_peer_hooks *h)
{
	c->peer = *h;
	core_spread_peers(c);
}

void core_set_probe(struct core *c, core_probe_fn fn, void *arg)
{
	c->probe = fn;
	c->probe_arg = arg;
}

double core_copy_drop_delay(const struct core *c)
{
	int ms = __atomic_load_n(&c->drop_delay_ms, __ATOMIC_RELAXED);

	return (ms ? ms : MEMORY_DROP_CALM_MS) / 1000.0;
}

void core_set_copy_drop(struct core *c, core_copy_fn fn, void *arg)
{
	c->copy_fn = fn;
	c->copy_arg = arg;
}

void core_set_request_slice(struct core *c, uint64_t ns)
{
	__atomic_store_n(&c->request_slice_ns, ns, __ATOMIC_RELAXED);
}

void core_set_readahead(struct core *c, uint64_t bytes)
{
	__atomic_store_n(&c->readahead_bytes, bytes, __ATOMIC_RELAXED);
}

void core_set_transport(struct core *c, const char *text)
{
	__atomic_store_n(&c->transport, text, __ATOMIC_RELEASE);
}

void core_count_uring_read(struct core *c)
{
	stats_add(&c->stats, STAT_URING_READS, 1);
}

void core_probe_answer(struct core *c, void *cookie, int resident)
{
	prefetch_probed(c->pf, cookie, resident);
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
	int ram_full = 1;

	if (c->cache) {
		cache_get_stats(c->cache, &s);
		ram_full = s.full > 0;
	}
	/* With an SSD tier, the node keeps taking its items until both are. */
	return ram_full && (!c->tier || tier_is_full(c->tier));
}

uint64_t core_cache_capacity(const struct core *c)
{
	struct cache_stats s = { 0 };

	if (c->cache)
		cache_get_stats(c->cache, &s);
	return s.capacity;
}

uint64_t core_owned_bytes(struct core *c, int (*owns)(void *ctx, struct source_item *it), void *ctx)
{
	uint32_t n = index_count(c->ix);
	uint64_t sum = 0;
	char path[4096];

	for (uint32_t id = INDEX_ROOT + 1; id <= n; id++) {
		struct index_attr a;
		int len;
		if (index_get(c->ix, id, &a) < 0 || a.gone || !S_ISREG(a.mode) ||
		    (len = index_path(c->ix, id, path, sizeof(path))) < 0)
			continue;
		uint32_t chunks = cache_chunks(a.v.size, c->chunk);
		for (uint32_t k = 0; k < chunks; k++) {
			struct source_item it = { .id = id, .chunk = k, .rel = path, .rel_len = (size_t)len,
						  .v = a.v };
			if (owns(ctx, &it))
				sum += cache_chunk_len(a.v.size, c->chunk, k) + 64;
		}
	}
	return sum;
}

int core_debug_fd(struct core *c)
{
	return maint_command_fd(c->maint);
}

