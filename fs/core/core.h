/* core.h - the filesystem without FUSE: the namespaces, the read path, the
 * stores and counters behind them.
 *
 * The FUSE adapter (ops.c) turns kernel requests into calls on a struct core
 * and core results into replies; tools and tests drive the same core with no
 * mount at all. Everything a kernel asks for is addressed by a *node*
 * number, and the core keeps the three namespaces apart behind it (one
 * dispatch point, fs/core/nodes.c):
 *
 *   data      the dataset, from the index: (generation << 32) | index id
 *   control   .epochfs/ (fs/core/control.c): CONTROL_NODE_BIT
 *   prep      .prep/ (fs/core/prepdir.c): CONTROL_NODE_BIT | PREPDIR_NODE_BIT
 *
 * A read travels: core_read() -> the read path (fs/core/read.c) -> the RAM cache
 * -> on a miss, the sources in order (source.h: a peer, storage always
 * last). The core never calls into the adapter; it tells it of changes
 * under the mount through core_set_change_cb().
 *
 * struct core is opaque; fs/core/core_int.h is its inside, for the core's files.
 */
#ifndef EPOCHFS_CORE_H
#define EPOCHFS_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "core/stats.h"

struct index_version;
struct manifest;
struct source;
struct source_item;

#define CORE_MAX_SOURCES 4
#define CORE_ROOT_NODE 1u           /* the mount's root: SOURCE itself */

/* Defaults the command line shows (options.c) and the core applies. */
#define CORE_DEFAULT_CACHE_PERCENT 25u              /* of RAM, at most what the dataset takes */
#define CORE_DEFAULT_CACHE_CHUNK (256u << 10)       /* docs/design.md: chunk size */
#define CORE_DEFAULT_PREP_MEM_PERCENT 10u           /* of RAM, per prep group */
/* How long a check of an entry against SOURCE stays valid when --timeout is
 * not given: where the inotify watch sees every change (a local
 * filesystem, watch running), and where it cannot (NFS, Lustre, FUSE,
 * --no-watch: other clients' changes raise no event). Figures in
 * docs/design.md. */
#define CORE_TIMEOUT_WATCHED 3600.0
#define CORE_TIMEOUT_UNWATCHED 1.0

struct core;

/* When the RAM cache outlives the daemon (--persist). */
enum persist_mode {
	PERSIST_MODE_OFF,           /* anonymous memory, nothing kept */
	PERSIST_MODE_CRASH,         /* kept after a crash or kill -9; a clean stop frees it (the
				     * daemon's default) */
	PERSIST_MODE_ALWAYS,        /* a clean stop keeps it too */
};

/* Whether the mount serves large cached files by kernel passthrough
 * (--passthrough; docs/design.md, "Kernel passthrough"). */
enum core_passthrough_mode {
	CORE_PT_AUTO,               /* where it is available and large files hold half the bytes */
	CORE_PT_ON,                 /* wherever it is available; misses from SOURCE too */
	CORE_PT_OFF,
};
/* Files this large, when the RAM cache holds them whole, are read by the
 * kernel from the cache's memfd (docs/design.md says why this size). */
#define CORE_PT_MIN_SIZE (4ull << 20)

struct core_opts {
	const char *source;         /* the dataset directory */
	unsigned scan_threads;      /* 0: default */
	unsigned ring_depth;        /* 0: default */
	int progress;               /* scan progress line on stderr */
	int watch;                  /* follow changes with inotify */
	double timeout;             /* seconds an entry's check against SOURCE stays valid
				     * (--timeout); < 0: picked by core_start() */
	int cache_default;          /* size the cache by default (cache_size ignored) */
	uint64_t cache_size;        /* bytes; 0: no RAM cache */
	uint64_t cache_chunk;       /* item size for large files; 0: default */
	int verify;                 /* re-check every hit's checksum */
	uint64_t scrub_rate;        /* bytes/s the scrubber re-checks; 0: none */
	uint64_t prefault_window;   /* arena bytes kept resident ahead of the fill; 0: none */
	int keep_source_cache;      /* leave SOURCE's page cache alone after reads */
	const char *manifest;       /* checksums to verify loads and peer replies against, or NULL */
	int no_order;               /* no .epochfs/order/ at all */
	uint64_t prefetch_mem;      /* staging bytes for prefetched items; 0: orders are taken,
				     * nothing is fetched ahead */
	unsigned prefetch_window;   /* files fetched past a stream's head; 0: default */
	double order_expire;        /* an idle order is dropped after this; 0: default (300 s) */
	int page_cache;             /* enum page_cache_mode: the kernel's copies of files */
	int no_mem_watch;           /* no pressure thread: the cache never pauses or shrinks */
	int prep;                   /* serve .prep/ */
	uint64_t prep_mem;          /* bytes of made batches, all groups together; 0: default */
	unsigned prep_threads;      /* workers per group; 0: one per CPU */
	double prep_timeout;        /* seconds before a stalled consumer is dropped */
	unsigned prep_ahead;        /* batches made past the furthest read; 0: default */
	int persist;                /* enum persist_mode: whether the RAM cache lives in a state
				     * directory that outlives the daemon (a previous daemon's is
				     * adopted), and whether a clean stop keeps it */
	const char *state_dir;      /* that directory; NULL: persist_default_dir() for MOUNTPOINT */
	const char *mountpoint;     /* named in the state (and picks its default directory) */
	const char *const *cache_dirs;      /* the SSD tier's directories (NULL: none) */
	unsigned ncache_dirs;
	const uint64_t *cache_dir_sizes;    /* one per dir, one for all, or none (NULL) */
	unsigned ncache_dir_sizes;
	int cache_dir_buffered;     /* the tier read through its page cache, not O_DIRECT */
	const char *metrics_addr;   /* serve /metrics and /stats.json over HTTP here (NULL: no) */
	int passthrough;            /* enum core_passthrough_mode */
	int no_stand_aside;         /* --stand-aside off: the cache never stands aside (aside.h) */
	int spread;                 /* --spread on: a cache smaller than the dataset holds an even
				     * share of each large file (store/spread.h); 0: whole, first come */
};

/* The memory the daemon may use (0 if unknown): physical memory, or its
 * memory cgroup's limit where that is smaller. The base of "N%" sizes and
 * of the default --cache-size, so a cache in a 16 GiB container takes a
 * quarter of 16 GiB, not of the host's RAM. */
uint64_t core_ram_bytes(void);

/* Opens and scans SOURCE (its threads are joined before it returns).
 * Returns 0 and *OUT or -errno; on failure a one-line reason naming SOURCE
 * has been logged. */
int core_open(const struct core_opts *o, struct core **out);
/* Starts the long-lived threads: the io_uring reader, the change watcher,
 * the cache's background thread, the peer thread. Separate from
 * core_open() so a daemon can fork in between (fork keeps one thread).
 * Reads need it. Returns 0 or -errno (logged). */
int core_start(struct core *c);
void core_close(struct core *c);

/* ---- the namespaces, by node number (fs/core/nodes.c) ---------------------- */

/* What the kernel is told of a node. */
struct core_attr {
	uint64_t node;              /* its node number */
	uint32_t generation;
	uint32_t mode;              /* type and permission bits */
	uint32_t nlink, uid, gid, blksize;
	uint64_t ino;               /* st_ino: SOURCE's for data nodes */
	uint64_t size, blocks;
	int64_t mtime_ns, ctime_ns;
	double valid;               /* seconds the kernel may cache the entry and attributes */
	unsigned flags;             /* CORE_F_* */
};
#define CORE_F_DIRECT_IO 1u         /* bypass the page cache: control files, .prep/ */
#define CORE_F_NEW_NODE 2u          /* every lookup is a new node (snapshots, batch readers) */

/* NAME in directory PARENT: 0 and *A; -ENOENT (A->valid: how long the
 * absence may be cached), -ENOTDIR, -ENOMEM. Data entries are re-checked
 * against SOURCE when their check is older than core_timeout(), and a file
 * that changed comes back at its new generation (a new node). */
int core_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a);
/* Attributes of NODE, re-checked like core_lookup(). 0; -ESTALE when the
 * file changed since its node was looked up (or vanished); -ENOENT. */
int core_getattr(struct core *c, uint64_t node, struct core_attr *a);
/* The text of symlink NODE into BUF (LEN bytes), NUL-terminated; its
 * length or -errno (-EINVAL: not a link). The link is read, never
 * followed: the reader's kernel resolves it in the reader's namespace. */
ssize_t core_readlink(struct core *c, uint64_t node, char *buf, size_t len);
/* The filesystem of SOURCE, flagged read-only when the mount is (no .prep/). */
int core_statfs(struct core *c, struct statvfs *sv);
/* Where the next read of each cache item of regular file NODE would be
 * answered from (RAM, staging, tier, a peer, storage): the text of the
 * extended attribute user.epochfs.where, described in where.c. Writes it
 * to BUF when it fits in LEN bytes (not NUL-terminated) and returns its
 * length; LEN 0 only measures it. -ERANGE (LEN too small), -ENODATA (not a
 * regular file of SOURCE), -ESTALE, -ENOENT, -ENOMEM. Counts nothing. */
#define CORE_XATTR_WHERE "user.epochfs.where"
ssize_t core_where(struct core *c, uint64_t node, char *buf, size_t len);

struct core_dirent {
	char name[264];             /* an index name (255), or a .prep/ NAME.error */
	struct core_attr attr;      /* attr.node 0: the kernel should make no inode
				     * from a listing (snapshots, batch readers) */
};
/* The first entry of directory DIR at position *POS or after it (0 is
 * ".", 1 is ".."): 1 and *D with *POS its position (the next call starts
 * at *POS + 1), 0 past the end, or -errno. Data entries whose check is due
 * come with valid 0 (no stat here: the kernel's next use looks them up). */
int core_readdir(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d);

/* Done callback of core_read(): RES bytes in BUF, or -errno. BUF is valid
 * only during the call. */
typedef void (*core_read_fn)(void *arg, ssize_t res, const void *buf);

/* Reads up to LEN bytes at OFF of NODE. A data file is read through the RAM
 * cache when the item is there (or admitted now), else from the sources;
 * clamped to its size; re-checked first when its check is older than
 * core_timeout(), so a cached item is never served past that bound after
 * its file changed; -ESTALE (EIO to a reader) when NODE's generation is
 * not the file's now or the file changed during the read, never mixed
 * bytes. A batch file not made yet is answered when it is. DONE is called
 * exactly once, on this thread or another. */
void core_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg);

/* Write-type calls: only .prep/ (spec files) and .epochfs/order/ (the
 * jobs' streams) take them; anything else is -EROFS. core_open_check(): may NODE be opened with FLAGS (O_ACCMODE,
 * O_TRUNC)? 0 or -errno; *A gets its attributes (flags say how). */
int core_open_check(struct core *c, uint64_t node, int flags, struct core_attr *a);

/* ---- opens, and kernel passthrough (fs/core/passthrough.c) ------------- */

/* What the adapter lends the core for the length of one request: the means
 * to register a backing file with the kernel (OPEN: FD, which the core
 * closes after; the kernel's id > 0, or -errno) and to drop one (RELEASE,
 * or an OPEN whose reply did not arrive). */
struct core_backing_reg {
	int (*open)(void *ctx, int fd);
	void (*close)(void *ctx, int id);
	void *ctx;
	int unopened;               /* at a release: the opener never got its file
				     * (an OPEN whose reply did not arrive) */
};

/* The kernel connected (INIT). OFFERED: it offers FUSE passthrough.
 * Decides, once, whether this mount uses passthrough: answers OPEN and
 * has the kernel read files the RAM cache holds whole from it; logs one
 * line saying which and why; stats.json's "passthrough" says the same.
 * Returns 1 when it does (the adapter asks the kernel for it and answers
 * OPEN), else 0 (the copy path; the adapter may keep the no-open mode). */
int core_passthrough_start(struct core *c, int offered);

/* An OPEN of NODE with FLAGS (the adapter answers OPEN). Checks as
 * core_open_check() (attributes in *A), and while the mount uses
 * passthrough: *BACKING_ID > 0 when the kernel should read the file from
 * that backing file, else 0 (the copy path). The backing is the cache's
 * memfd for a file of CORE_PT_MIN_SIZE bytes or more that the RAM cache
 * holds whole; or, when the plan sends misses to the kernel, SOURCE's own
 * file, for a file no store holds (RAM, staging) while the cache has no
 * room to admit it; or whatever an earlier open of the same node reads. *FH: what the open holds, for
 * core_release() (0: nothing). Revalidates as a read does: a file that
 * changed is never opened on its old backing. 0 or -errno. */
int core_open_file(struct core *c, uint64_t node, int flags, const struct core_backing_reg *reg,
		   struct core_attr *a, int *backing_id, uint64_t *fh);
/* The same, answered through DONE (once: now, or later on another
 * thread) with core_open_file()'s results: an open of a .prep/ batch not
 * made yet, on a mount that uses passthrough, waits for the batch (without
 * a thread) and is then handed its file; every other open is answered now.
 * A (valid during the call) holds the attributes. */
typedef void (*core_open_fn)(void *arg, int err, const struct core_attr *a, int backing_id, uint64_t fh);
void core_open_file_async(struct core *c, uint64_t node, int flags, const struct core_backing_reg *reg,
			  core_open_fn done, void *arg);
int core_access(struct core *c, uint64_t node, int mask);
ssize_t core_write(struct core *c, uint64_t node, const void *buf, size_t len, off_t off);
/* Who asks for a create or an unlink (the FUSE request's caller): a
 * stream of .epochfs/order/ belongs to its creator. NULL: the daemon's
 * own user. */
struct core_caller {
	uint32_t uid, gid;
	int pid;                    /* the calling process (0: unknown) */
};
int core_create(struct core *c, uint64_t parent, const char *name, const struct core_caller *who,
		struct core_attr *a);
/* Truncates NODE to SIZE (a spec being rewritten; SIZE < 0: only the
 * attributes); 0 and *A, or -errno. */
int core_truncate(struct core *c, uint64_t node, off_t size, struct core_attr *a);
int core_unlink(struct core *c, uint64_t parent, const char *name, const struct core_caller *who);
/* The kernel closed a file it opened through us (FH from core_open_file(),
 * 0 for a create): a spec is committed; a node's backing file is dropped
 * with its last passthrough open (REG as for the open). */
void core_release(struct core *c, uint64_t node, uint64_t fh, const struct core_backing_reg *reg);
/* The kernel dropped NLOOKUP references to NODE. */
void core_forget(struct core *c, uint64_t node, uint64_t nlookup);

/* Called, outside any core lock and from whatever thread noticed, when a
 * data entry changed or vanished: the kernel should drop its dentry NAME in
 * PARENT, and what it caches of OLD (the node readers may still hold). */
typedef void (*core_change_fn)(void *arg, uint64_t parent, const char *name, uint64_t old);
void core_set_change_cb(struct core *c, core_change_fn fn, void *arg);

/* Asks the kernel above the mount whether it caches the start of data
 * NODE's file (the prefetcher fetches only what neither the RAM cache nor
 * the kernel holds). 0: the answer comes later, through
 * core_probe_answer(C, COOKIE, resident); -errno: no answer will come (the
 * kernel does not know the node: not cached). Set by the adapter before
 * core_start(); without it, nothing is taken for cached above the mount. */
typedef int (*core_probe_fn)(void *arg, uint64_t node, void *cookie);
void core_set_probe(struct core *c, core_probe_fn fn, void *arg);
void core_probe_answer(struct core *c, void *cookie, int resident);

/* Asks the adapter to drop the kernel's copy of data NODE's pages a moment
 * from now: the file was just read to its end and memory is too tight for
 * the kernel's page cache to hold the dataset (fs/core/memory.h). Called
 * on read paths; must not block. Set before core_start(). */
typedef void (*core_copy_fn)(void *arg, uint64_t node);
void core_set_copy_drop(struct core *c, core_copy_fn fn, void *arg);
/* What the adapter's request threads got when they asked the kernel for a
 * short time slice (util/sched.h): NS, or 0 for the kernel's default. For
 * stats.json ("request_slice_ns"); any thread, any time. */
void core_set_request_slice(struct core *c, uint64_t ns);
/* The readahead window the adapter set on the mount (--readahead), in
 * bytes, or 0 when it left the kernel's. For stats.json
 * ("readahead_bytes"); any thread, any time. */
void core_set_readahead(struct core *c, uint64_t bytes);
/* How the kernel's requests reach the adapter, for stats.json
 * ("fuse_transport"): "io_uring", or "dev: WHY" (/dev/fuse). TEXT must
 * outlive the core (a string literal); any thread, any time. */
void core_set_transport(struct core *c, const char *text);
/* One read request came over FUSE's io_uring ("fuse_uring_reads"): the
 * adapter's proof that the transport it asked for is the one in use. */
void core_count_uring_read(struct core *c);
/* How long after a file was read to its end its kernel copy should go:
 * longer while memory is calm (a reader may come back to it), short under
 * pressure (every copy in the kernel squeezes the job). Seconds. */
double core_copy_drop_delay(const struct core *c);


/* How long a check of an entry against SOURCE stays valid: --timeout, or
 * the CORE_TIMEOUT_* default settled by core_start(). Nothing in the kernel
 * above the mount is told to cache an entry for longer than its check has
 * left, so a change is seen within this bound. */
double core_timeout(const struct core *c);

/* ---- for tools, tests and the modules that plug in --------------------- */

/* The data entry of path REL below SOURCE ("" is the root): 0 and *A, or
 * -ENOENT / -ENAMETOOLONG. Only indexed names resolve: nothing outside
 * SOURCE, no symlink followed. */
int core_stat_path(struct core *c, const char *rel, struct core_attr *a);

/* Reads the whole regular file REL (a path below SOURCE, as the index knows
 * it) through core_read(), so the RAM cache serves and admits it, and
 * waits for the bytes: for threads that may block (prep workers). *BUF is
 * grown with realloc (*CAP its size). The length, or -ENOENT (no such file
 * in the index), -EISDIR, -ESTALE (changed), -EIO, -ENOMEM. */
ssize_t core_read_file(struct core *c, const char *rel, void **buf, size_t *cap);

/* All samples (counters and gauges) shown in .epochfs/; returns how many
 * (fs/core/metrics.c, the one catalogue of names). */
int core_samples(struct core *c, struct sample *out, int max);
/* The counters, for the modules that plug into the core (peers). */
struct stats *core_stats(struct core *c);

/* Debug hooks, for tests only (the daemon arms them when EPOCHFS_DEBUG_HOOKS=1
 * is in its environment): the fd a signal handler writes a command byte to,
 * or -1. Commands: 'c' flips one bit of one cached item (logged with its
 * path), so tests can prove a corrupt item is never served. */
int core_debug_fd(struct core *c);

/* ---- the peer layer's plugs (peer.h) ------------------------------------ */

/* What the peer layer plugs into the core; the core never calls the network
 * itself. */
struct core_peer_hooks {
	void *ctx;
	/* 1 if this node may keep item IT (it owns it, or the nodes ranked
	 * before it are full): only such items are admitted into the cache,
	 * unless remote_budget allows. May fill IT's ranking. */
	int (*owns)(void *ctx, struct source_item *it);
	/* The node a miss of IT is fetched from (its owner, or the first
	 * ranked after it that is not full): its name in NAME (LEN bytes);
	 * 1 if that is this node, else 0. For core_where(); may be NULL. */
	int (*keeper)(void *ctx, struct source_item *it, char *name, size_t len);
	/* Appends the peer layer's samples; returns how many. */
	int (*samples)(void *ctx, struct sample *out, int max);
	/* Cache bytes items owned elsewhere may take (--cache-remote). */
	uint64_t remote_budget;
	/* Called at the end of core_start() (threads may start: after the
	 * fork), and in core_close() once prep's workers are gone, before
	 * anything the peer layer reads through is freed. */
	int (*start)(void *ctx);
	void (*stop)(void *ctx);
};

/* Adds source S after those added before it, storage staying last
 * (core_start adds it): a miss asks the sources in that order, each
 * passing to the next with -EAGAIN. Call before reads begin. 0, or
 * -ENOSPC when CORE_MAX_SOURCES (storage aside) are in use. */
int core_add_source(struct core *c, const struct source *s);
/* Installs the peer layer's hooks. Call before reads begin. */
void core_set_peer_hooks(struct core *c, const struct core_peer_hooks *h);
/* The cache's item size (also what ownership is computed over). */
uint32_t core_chunk(const struct core *c);
/* Cache bytes the items this node owns would take (OWNS as in the hooks). */
uint64_t core_owned_bytes(struct core *c, int (*owns)(void *ctx, struct source_item *it), void *ctx);
uint64_t core_cache_capacity(const struct core *c);
/* True once the cache refused an admission for lack of budget (it never
 * evicts, so this holds until the remount), or when there is no cache;
 * with an SSD tier, only once the tier has no room either. */
int core_cache_full(const struct core *c);
/* The manifest (--manifest), or NULL. core_verifiable() gives the record of
 * file ID at version V, or -1 when its bytes cannot be checked (no
 * manifest, not in it, or another version now: size, inode, mtime, ctime). */
const struct manifest *core_manifest(const struct core *c);
int core_verifiable(const struct core *c, uint32_t id, const struct index_version *v);

/* Serves a peer's read of the file REL (checked: a normalized relative
 * path) at the version it expects (SIZE, MTIME_NS): LEN bytes at OFF, inside
 * one cache item, from the RAM cache or by loading the item if it may be
 * admitted (hooks.owns). DONE gets the bytes, or -ENOENT (no such regular
 * file), -ESTALE (another version here), -EINVAL (spans items), -ENOSPC
 * (not cached here and not admitted: the asker tries elsewhere), -EBADMSG
 * (our storage bytes fail the manifest), -errno. Counted neither as a read
 * nor as hit or miss bytes (the peer layer counts it). */
void core_read_peer(struct core *c, const char *rel, uint64_t size, int64_t mtime_ns, off_t off,
		    size_t len, core_read_fn done, void *arg);

#endif
