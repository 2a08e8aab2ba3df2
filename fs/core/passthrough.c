/* passthrough.c - kernel FUSE passthrough for the files the RAM cache holds
 * whole, and for the misses a full cache cannot take: whether a mount uses
 * it, and the opens; see core.h ("opens, and kernel passthrough") and
 * docs/design.md ("Kernel passthrough", "Misses by passthrough").
 *
 * A mount uses passthrough when the kernel offers it (INIT), the daemon
 * may register backing files (CAP_SYS_ADMIN in the initial user
 * namespace), there is a RAM cache, and --passthrough says on, or auto
 * and files of CORE_PT_MIN_SIZE or more hold half the dataset's bytes.
 * With on, a file no store holds, opened while the cache has no room for
 * it, is also read by the kernel from SOURCE's file ("misses by
 * passthrough"): the daemon answers the OPEN and never sees the bytes.
 * Not with peers (a miss asks the owner), a tier (misses fill it) or a
 * manifest (every byte is checked).
 * All but the kernel's offer is known after the scan (core_pt_plan), so
 * the cache places large files in backings from the start and the
 * prefaulter leaves their share of the arena alone; INIT only confirms
 * or cancels.
 *
 * DESIGN
 * - Passthrough needs OPEN answered for every file (the no-open mode is
 *   the connection's, not a file's), which costs small files a round trip
 *   each: so auto keeps the no-open mode unless large files dominate
 *   (figures in docs/design.md).
 * - The kernel binds one backing file to an inode while any open of it is
 *   in passthrough, and refuses an open of the other kind meanwhile (the
 *   user's open() fails with EIO). So the opens of each node that may
 *   pass through (a large one; any, when misses go to SOURCE) are
 *   counted here, by kind: while one reads through passthrough, every
 *   later open gets the same backing id; while one reads through the
 *   daemon, every later open does too (its pages would be stale to a
 *   passthrough open). The id is registered at the first passthrough open
 *   and dropped at the last release; the kernel keeps its own reference to
 *   the memfd (or SOURCE's file), so a cache that gives the file back
 *   meanwhile frees nothing under a reader.
 * - A miss sent to SOURCE is checked at OPEN (the descriptor's version
 *   against the index, as a read checks it), then read by the kernel with
 *   the file system's own semantics: a file rewritten in place while a
 *   descriptor is open reads what SOURCE holds then, as it would without
 *   the mount; a file replaced (a new inode) reads old through the old
 *   descriptor and new through the next open.
 * - The table is one mutex over hash chains: an OPEN and a RELEASE take it
 *   once each; small files enter it only when misses go to SOURCE.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/aside.h"
#include "core/core_int.h"
#include "core/ns/ns.h"
#include "core/ns/prepdir.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/maint.h"
#include "store/staging.h"
#include "store/storage.h"
#include "util/clock.h"
#include "util/log.h"

#define PT_BUCKETS 1024u

enum { FH_COPY = 1, FH_PASSTHROUGH = 2 };

/* One large node with opens. */
struct pt_node {
	uint64_t node;
	unsigned copy, pt;          /* opens through the daemon, through passthrough */
	int pending;                /* a batch's open waits for its batch (core_open_file_async) */
	int id;                     /* the kernel's backing id while pt > 0 */
	int src;                    /* ... and it is SOURCE's file, not the cache's memfd */
	struct pt_node *next;
};

struct pt_opens {
	pthread_mutex_t lock;
	struct pt_node *heads[PT_BUCKETS];      /* lock */
};

/* Whether this process may register backing files with the kernel
 * (FUSE_DEV_IOC_BACKING_OPEN): the kernel asks for CAP_SYS_ADMIN in the
 * initial user namespace. 1, or 0 and why in WHY. Read from /proc/self:
 * no libcap. */
static int may_register(char *why, size_t len)
{
	unsigned long long eff = 0;
	unsigned long inside = 0, outside = 0, count = 0;
	char line[256];
	int found = 0, lines = 0;
	FILE *f = fopen("/proc/self/status", "re");

	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "CapEff: %llx", &eff) == 1) {
				found = 1;
				break;
			}
		fclose(f);
	}
	if (!found) {
		snprintf(why, len, "cannot read the daemon's capabilities in /proc/self/status");
		return 0;
	}
	if (!(eff & (1ULL << 21))) {       /* CAP_SYS_ADMIN */
		snprintf(why, len, "the daemon (uid %u) lacks CAP_SYS_ADMIN, which registering "
			 "backing files needs", (unsigned)getuid());
		return 0;
	}
	/* The initial user namespace maps every uid onto itself, in one line. */
	if ((f = fopen("/proc/self/uid_map", "re"))) {
		while (fgets(line, sizeof(line), f))
			if (lines++ == 0 && sscanf(line, "%lu %lu %lu", &inside, &outside, &count) != 3)
				count = 0;
		fclose(f);
	}
	if (lines != 1 || inside != 0 || outside != 0 || count != 4294967295UL) {
		snprintf(why, len, "the daemon runs in a user namespace; registering backing files "
			 "needs CAP_SYS_ADMIN in the initial one");
		return 0;
	}
	return 1;
}

#define KERNEL_LACKS "the kernel does not offer it (Linux 6.9 or newer, CONFIG_FUSE_PASSTHROUGH=y)"

void core_pt_plan(struct core *c)
{
	const struct core_opts *o = &c->opts;
	uint32_t n = index_count(c->ix);
	struct index_totals t;
	char why[200];

	index_totals(c->ix, &t);
	for (uint32_t id = INDEX_ROOT + 1; id <= n; id++) {
		struct index_attr a;
		if (index_get(c->ix, id, &a) == 0 && !a.gone && S_ISREG(a.mode) && a.v.size >= CORE_PT_MIN_SIZE) {
			c->pt_large_bytes += a.v.size;
			c->pt_large_files++;
		}
	}
	double share = t.bytes ? 100.0 * (double)c->pt_large_bytes / (double)t.bytes : 0;
	c->pt_planned = c->pt_source = 0;
	if (o->passthrough == CORE_PT_OFF)
		snprintf(c->pt_why, sizeof(c->pt_why), "--passthrough off");
	else if ((!o->cache_default && !o->cache_size) || !t.bytes)
		snprintf(c->pt_why, sizeof(c->pt_why), "no RAM cache to serve files from%s",
			 t.bytes ? " (--cache-size 0)" : " (no bytes in SOURCE)");
	else if (!may_register(why, sizeof(why)))
		snprintf(c->pt_why, sizeof(c->pt_why), "not available: %s", why);
	else if (o->passthrough == CORE_PT_AUTO && c->pt_large_bytes * 2 < t.bytes)
		snprintf(c->pt_why, sizeof(c->pt_why), "auto: %.0f%% of the dataset's bytes are in files of "
			 "%llu MiB or more, under half; --passthrough on uses it anyway", share,
			 CORE_PT_MIN_SIZE >> 20);
	else {
		c->pt_planned = 1;
		/* Misses by passthrough (on only: docs/design.md has the figures
		 * that kept them out of auto). Not where something else must see
		 * every miss: the SSD tier fills from them, a manifest checks them;
		 * peers are known at INIT. */
		c->pt_source = o->passthrough == CORE_PT_ON && !o->ncache_dirs && !c->man;
		if (o->passthrough == CORE_PT_ON)
			snprintf(c->pt_why, sizeof(c->pt_why), "--passthrough on");
		else
			snprintf(c->pt_why, sizeof(c->pt_why), "auto: %.0f%% of the dataset's bytes are in "
				 "files of %llu MiB or more", share, CORE_PT_MIN_SIZE >> 20);
	}
}

int core_passthrough_start(struct core *c, int offered)
{
	char avail[200], cap[180];
	int use;

	if (__atomic_exchange_n(&c->pt_said, 1, __ATOMIC_ACQ_REL))
		return __atomic_load_n(&c->pt_use, __ATOMIC_ACQUIRE);
	if (!offered)
		snprintf(avail, sizeof(avail), "no: %s", KERNEL_LACKS);
	else if (!may_register(cap, sizeof(cap)))
		snprintf(avail, sizeof(avail), "no: %s", cap);
	else
		snprintf(avail, sizeof(avail), "yes");
	/* Peers (known by now): misses go to their owners, not to SOURCE. */
	if (c->peer.owns)
		c->pt_source = 0;
	use = c->pt_planned && offered && c->cache;
	if (use && !(c->opens = calloc(1, sizeof(*c->opens))))
		use = 0;
	if (use) {
		pthread_mutex_init(&c->opens->lock, NULL);
		if (c->prep)            /* batches made from now on can pass through */
			prepdir_set_memfd(c->prep, 1);
		snprintf(c->passthrough_text, sizeof(c->passthrough_text), "on");
		log_info("kernel passthrough on (%s): the kernel reads files of %llu MiB or more that the "
			 "RAM cache holds whole straight from it%s; open() is answered by the daemon",
			 c->pt_why, CORE_PT_MIN_SIZE >> 20,
			 c->pt_source ? ", and files no store holds, opened while the cache has no room for "
					"them, from SOURCE" : "");
	} else {
		if (c->pt_planned)
			snprintf(c->pt_why, sizeof(c->pt_why), "not available: %s", KERNEL_LACKS);
		c->pt_source = 0;
		snprintf(c->passthrough_text, sizeof(c->passthrough_text), "off: %s", c->pt_why);
		if (c->opts.passthrough == CORE_PT_ON)
			log_warn("--passthrough on: %s; reads are copied through the daemon", c->pt_why);
		else
			log_info("kernel passthrough off (%s): reads are copied through the daemon", c->pt_why);
		/* Large files were to go to backings: the arena takes them after all. */
		if (c->pt_planned && c->cache) {
			cache_set_backing(c->cache, 0);
			maint_set_prefault_limit(c->maint, c->cache_need);
		}
	}
	/* Standing aside (aside.h): every open may go to SOURCE, and the
	 * memory watcher gives the cache's memory back. */
	if (c->opts.no_stand_aside)
		snprintf(c->aside_why, sizeof(c->aside_why), "off: --stand-aside off");
	else if (!use || !c->pt_source)
		snprintf(c->aside_why, sizeof(c->aside_why), "off: needs every file readable from SOURCE by "
			 "passthrough (--passthrough on, in effect; no peers, --cache-dir or --manifest)");
	else if (!c->memory)
		snprintf(c->aside_why, sizeof(c->aside_why), "off: --no-mem-watch");
	else {
		struct index_totals t;
		index_totals(c->ix, &t);
		struct aside *a = aside_new(t.files, c->cache);
		if (a) {
			__atomic_store_n(&c->aside, a, __ATOMIC_RELEASE);
			log_info("stand-aside: once the cache is warm, the job's opens are timed with and "
				 "without it; where it does not make the job faster, it stands aside");
		} else
			snprintf(c->aside_why, sizeof(c->aside_why), "off: out of memory");
	}
	snprintf(c->pt_avail_text, sizeof(c->pt_avail_text), "%s", avail);
	__atomic_store_n(&c->pt_avail, c->pt_avail_text, __ATOMIC_RELEASE);
	__atomic_store_n(&c->passthrough, c->passthrough_text, __ATOMIC_RELEASE);
	__atomic_store_n(&c->pt_use, use, __ATOMIC_RELEASE);
	return use;
}

/* ---- the opens of large files ---- */

static struct pt_node **chain(struct pt_opens *o, uint64_t node)
{
	return &o->heads[(node * 0x9e3779b97f4a7c15ull) >> 54 & (PT_BUCKETS - 1)];
}

/* Whether the kernel should read data file ID (version V) from SOURCE: no
 * item of it is in RAM or staged, and the cache has no room to take it (a
 * read through the daemon would fill it instead). A hint, like its parts:
 * a load that starts meanwhile only means one copy more. */
static int from_source(struct core *c, uint32_t id, const struct index_version *v)
{
	uint32_t n = cache_chunks(v->size, c->chunk);

	if (!n || cache_has_room(c->cache, cache_chunk_len(v->size, c->chunk, 0) + 64))
		return 0;
	for (uint32_t k = 0; k < n; k++)
		if (cache_holds(c->cache, id, k, v) || (c->staging && staging_has(c->staging, id, k)))
			return 0;
	return 1;
}

/* SOURCE's file ID at version V, open for the kernel: a descriptor, or
 * -errno (-ESTALE: it changed; the copy path then finds out as a read). */
static int source_fd(struct core *c, uint32_t id, const struct index_version *v)
{
	char rel[4096];
	int n = index_path(c->ix, id, rel, sizeof(rel));

	return n < 0 ? n : storage_open_version(c->st, rel, v);
}

int core_open_file(struct core *c, uint64_t node, int flags, const struct core_backing_reg *reg,
		   struct core_attr *a, int *backing_id, uint64_t *fh)
{
	struct pt_opens *o = c->opens;
	struct pt_node *n;
	int err = core_open_check(c, node, flags, a), src = 0;

	*backing_id = 0;
	*fh = 0;
	if (err)
		return err;
	stats_add(&c->stats, STAT_OPENS, 1);
	/* .prep/ batches: core_open_file_async. */
	if (!__atomic_load_n(&c->pt_use, __ATOMIC_ACQUIRE) || ns_of(node) != NS_DATA || !S_ISREG(a->mode) ||
	    (a->flags & CORE_F_DIRECT_IO) || (a->size < CORE_PT_MIN_SIZE && !c->pt_source))
		return 0;
	struct index_version v = { .ino = a->ino, .size = a->size, .mtime_ns = a->mtime_ns, .ctime_ns = a->ctime_ns };
	struct aside *as = __atomic_load_n(&c->aside, __ATOMIC_ACQUIRE);
	aside_open(as, clock_now());
	pthread_mutex_lock(&o->lock);
	for (n = *chain(o, node); n && n->node != node; n = n->next)
		;
	if (!n) {
		if (!(n = calloc(1, sizeof(*n)))) {
			pthread_mutex_unlock(&o->lock);
			return -ENOMEM;
		}
		n->node = node;
		n->next = *chain(o, node);
		*chain(o, node) = n;
	}
	if (n->pt) {
		/* The kernel reads this inode from one backing file at a time. */
		n->pt++;
	} else if (!n->copy) {
		int fd = a->size >= CORE_PT_MIN_SIZE ? cache_backing_fd(c->cache, core_data_id(node), &v) : -1;
		/* Standing aside (or a trial's window from SOURCE): every file. */
		if (fd < 0 && c->pt_source && (aside_to_source(as) || from_source(c, core_data_id(node), &v)) &&
		    (fd = source_fd(c, core_data_id(node), &v)) >= 0)
			src = 1;
		if (fd >= 0) {
			int id = reg->open(reg->ctx, fd);
			close(fd);
			if (id > 0) {
				n->id = id;
				n->pt = 1;
				n->src = src;
				stats_add(&c->stats, STAT_PT_REGISTERED, 1);
			} else {
				stats_add(&c->stats, STAT_PT_ERRORS, 1);
				log_warn("kernel passthrough: the kernel refused a backing file (%s); the file is "
					 "read through the daemon", strerror(-id));
			}
		}
	} else {
		int fd = cache_backing_fd(c->cache, core_data_id(node), &v);
		if (fd >= 0) {          /* held whole, but an open reads it through us */
			close(fd);
			stats_add(&c->stats, STAT_PT_BUSY, 1);
		}
	}
	if (n->pt) {
		*backing_id = n->id;
		*fh = FH_PASSTHROUGH;
		if (n->src) {
			stats_add(&c->stats, STAT_PT_SOURCE_OPENS, 1);
			stats_add(&c->stats, STAT_PT_SOURCE_BYTES, a->size);
		} else {
			stats_add(&c->stats, STAT_PT_OPENS, 1);
		}
	} else {
		n->copy++;
		*fh = FH_COPY;
	}
	pthread_mutex_unlock(&o->lock);
	return 0;
}

/* ---- opens of .prep/ batches, which may wait for their batch ---- */

/* An open of a batch node waiting to be handed its batch's file. */
struct batch_open {
	struct core *c;
	uint64_t node;
	struct core_backing_reg reg;
	struct core_attr a;
	core_open_fn done;
	void *arg;
};

/* The node's entry in the table, made if need be. O's lock. */
static struct pt_node *node_entry(struct pt_opens *o, uint64_t node)
{
	struct pt_node *n;

	for (n = *chain(o, node); n && n->node != node; n = n->next)
		;
	if (!n && (n = calloc(1, sizeof(*n)))) {
		n->node = node;
		n->next = *chain(o, node);
		*chain(o, node) = n;
	}
	return n;
}

/* The batch's file came (FD), or not (-errno: not made in time, the group
 * ended, no file): the open is answered, by passthrough or through the
 * daemon. Any thread, no lock of ours held. */
static void batch_opened(void *arg, ssize_t fd, const void *buf)
{
	struct batch_open *bo = arg;
	struct core *c = bo->c;
	struct pt_opens *o = c->opens;
	struct pt_node *n;
	uint64_t fh = FH_COPY;
	int id = 0;

	(void)buf;
	if (fd >= 0) {
		id = bo->reg.open(bo->reg.ctx, (int)fd);
		close((int)fd);
		if (id > 0) {
			stats_add(&c->stats, STAT_PT_REGISTERED, 1);
		} else {
			prepdir_pt_close(c->prep, bo->node, 0);     /* read through the daemon after all */
			stats_add(&c->stats, STAT_PT_ERRORS, 1);
			log_warn("kernel passthrough: the kernel refused a batch's file (%s); the batch is read "
				 "through the daemon", strerror(-id));
			id = 0;
		}
	}
	pthread_mutex_lock(&o->lock);
	n = node_entry(o, bo->node);    /* kept while pending: found, never made */
	if (!n) {                       /* cannot happen; never a crash */
		pthread_mutex_unlock(&o->lock);
		if (id > 0) {
			bo->reg.close(bo->reg.ctx, id);
			prepdir_pt_close(c->prep, bo->node, 0);
		}
		bo->done(bo->arg, -ENOMEM, &bo->a, 0, 0);
		free(bo);
		return;
	}
	n->pending = 0;
	if (id) {
		n->pt++;
		n->id = id;
		fh = FH_PASSTHROUGH;
		bo->a.flags &= ~CORE_F_DIRECT_IO;
		stats_add(&c->stats, STAT_PT_PREP_OPENS, 1);
		stats_add(&c->stats, STAT_PT_PREP_BYTES, bo->a.size);
	} else {
		n->copy++;
	}
	pthread_mutex_unlock(&o->lock);
	bo->done(bo->arg, 0, &bo->a, id, fh);
	free(bo);
}

void core_open_file_async(struct core *c, uint64_t node, int flags, const struct core_backing_reg *reg,
			  core_open_fn done, void *arg)
{
	struct core_attr a;
	struct pt_node *n;
	uint64_t fh;
	int id, err;

	if (!__atomic_load_n(&c->pt_use, __ATOMIC_ACQUIRE) || ns_of(node) != NS_PREP || !c->prep ||
	    !prepdir_is_batch(node)) {
		err = core_open_file(c, node, flags, reg, &a, &id, &fh);
		done(arg, err, &a, id, fh);
		return;
	}
	if ((err = core_open_check(c, node, flags, &a)) < 0) {
		done(arg, err, &a, 0, 0);
		return;
	}
	stats_add(&c->stats, STAT_OPENS, 1);
	pthread_mutex_lock(&c->opens->lock);
	if (!(n = node_entry(c->opens, node))) {
		pthread_mutex_unlock(&c->opens->lock);
		done(arg, -ENOMEM, &a, 0, 0);
		return;
	}
	/* One backing a node: a second open while the first is handed the
	 * file shares its id; while it waits, the second reads through the
	 * daemon (a direct-I/O open, which the kernel allows beside one in
	 * passthrough). */
	if (n->pt || n->pending) {
		if (n->pt) {
			n->pt++;
			id = n->id, fh = FH_PASSTHROUGH;
			a.flags &= ~CORE_F_DIRECT_IO;
			stats_add(&c->stats, STAT_PT_PREP_OPENS, 1);
			stats_add(&c->stats, STAT_PT_PREP_BYTES, a.size);
		} else {
			n->copy++;
			id = 0, fh = FH_COPY;
		}
		pthread_mutex_unlock(&c->opens->lock);
		done(arg, 0, &a, id, fh);
		return;
	}
	struct batch_open *bo = malloc(sizeof(*bo));
	if (!bo) {
		n->copy++;
		pthread_mutex_unlock(&c->opens->lock);
		done(arg, 0, &a, 0, FH_COPY);
		return;
	}
	n->pending = 1;
	pthread_mutex_unlock(&c->opens->lock);
	*bo = (struct batch_open){ .c = c, .node = node, .reg = *reg, .a = a, .done = done, .arg = arg };
	prepdir_pt_open_async(c->prep, node, batch_opened, bo);
}

void core_pt_release(struct core *c, uint64_t node, uint64_t fh, const struct core_backing_reg *reg)
{
	struct pt_opens *o = c->opens;
	struct pt_node **p, *n;
	int drop = 0;

	if (!o || (fh != FH_COPY && fh != FH_PASSTHROUGH))
		return;
	pthread_mutex_lock(&o->lock);
	for (p = chain(o, node); (n = *p) && n->node != node; p = &n->next)
		;
	if (n && fh == FH_PASSTHROUGH && n->pt && !--n->pt)
		drop = n->id;
	else if (n && fh == FH_COPY && n->copy)
		n->copy--;
	if (n && !n->pt && !n->copy && !n->pending) {
		*p = n->next;
		free(n);
	}
	pthread_mutex_unlock(&o->lock);
	/* Files open on it keep their own reference; the next open of the
	 * node registers afresh. */
	if (drop && reg)
		reg->close(reg->ctx, drop);
	/* A batch's last passthrough open is closed: its consumer is done
	 * with it (the daemon saw none of its reads), and the batch's memfd
	 * may be freed or reused, the kernel holding no open of it. */
	if (drop && ns_of(node) == NS_PREP && c->prep)
		prepdir_pt_close(c->prep, node, !(reg && reg->unopened));
}

unsigned core_pt_open_files(struct core *c)
{
	unsigned n = 0;

	if (!__atomic_load_n(&c->pt_use, __ATOMIC_ACQUIRE))
		return 0;               /* the table is made before pt_use is set */
	pthread_mutex_lock(&c->opens->lock);
	for (unsigned i = 0; i < PT_BUCKETS; i++)
		for (struct pt_node *x = c->opens->heads[i]; x; x = x->next)
			n += x->pt > 0;
	pthread_mutex_unlock(&c->opens->lock);
	return n;
}

void core_pt_free(struct core *c)
{
	aside_free(c->aside);
	c->aside = NULL;
	if (!c->opens)
		return;
	for (unsigned i = 0; i < PT_BUCKETS; i++)
		for (struct pt_node *n = c->opens->heads[i], *next; n; n = next) {
			next = n->next;
			free(n);
		}
	pthread_mutex_destroy(&c->opens->lock);
	free(c->opens);
	c->opens = NULL;
}
