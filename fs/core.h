/* core.h - the filesystem without FUSE: index, storage, counters, control.
 *
 * The FUSE adapter (ops.c) turns kernel requests into calls on a struct core
 * and core results into replies; tools and tests drive the same core with no
 * mount at all. A read travels: core_read() -> the RAM cache -> on a miss,
 * the sources in order (source.h: a peer later, storage always last). The core never calls into the adapter; the adapter
 * learns of changes under the mount through the index's change callback.
 */
#ifndef EPOCHFS_CORE_H
#define EPOCHFS_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"
#include "control.h"
#include "index.h"
#include "maint.h"
#include "manifest.h"
#include "prepdir.h"
#include "source.h"
#include "stats.h"
#include "storage.h"

#define CORE_MAX_SOURCES 4

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
	uint64_t cache_chunk;       /* item size for large files */
	int verify;                 /* re-check every hit's checksum */
	uint64_t scrub_rate;        /* bytes/s the scrubber re-checks; 0: none */
	uint64_t prefault_window;   /* arena bytes kept resident ahead of the fill; 0: none */
	int keep_source_cache;      /* leave SOURCE's page cache alone after reads */
	const char *manifest;       /* checksums to verify loads and peer replies against, or NULL */
	int prep;                   /* serve .prep/ */
	uint64_t prep_mem;          /* bytes of made batches per group; 0: default */
	unsigned prep_threads;      /* workers per group; 0: one per CPU */
	double prep_timeout;        /* seconds before a stalled consumer is dropped */
	unsigned prep_ahead;        /* batches made past the furthest read; 0: default */
};

/* What the peer layer (peer.h) plugs into the core; the core never calls
 * the network itself. */
struct core_peer_hooks {
	void *ctx;
	/* 1 if this node owns chunk CHUNK of the file REL: only owned items
	 * are admitted into the cache, unless remote_budget allows. */
	int (*owns)(void *ctx, const char *rel, uint32_t chunk);
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

struct core {
	char *source;               /* absolute path of SOURCE */
	int rootfd;
	struct index *ix;
	struct storage *st;
	struct control *ctl;
	struct watch *watch;
	struct cache *cache;        /* NULL: no RAM cache */
	struct maint *maint;        /* the cache's background thread; NULL: none */
	struct prepdir *prep;       /* .prep/; NULL with --no-prep */
	struct manifest *man;       /* --manifest, bound to the index; NULL: none */
	struct source sources[CORE_MAX_SOURCES];    /* tried in order; storage last */
	int nsources;
	uint32_t chunk;
	uint64_t cache_need;        /* arena bytes the whole dataset would take */
	double timeout;             /* core_timeout(), settled by core_start() */
	uint64_t man_files, man_unverified;         /* manifest records bound; files it cannot check */
	struct stats stats;
	struct core_opts opts;
	struct core_peer_hooks peer;    /* owns == NULL: no peers */
	uint64_t remote_used;           /* atomic: cache bytes admitted for remote items */
};

/* Opens and scans SOURCE (its threads are joined before it returns).
 * Returns 0 and *OUT or -errno; on failure a one-line reason naming SOURCE
 * has been logged. */
int core_open(const struct core_opts *o, struct core **out);
/* Starts the long-lived threads: the io_uring reader and the change watcher.
 * Separate from core_open() so a daemon can fork in between (fork keeps one
 * thread). Reads need it. Returns 0 or -errno (logged). */
int core_start(struct core *c);
void core_close(struct core *c);

/* Puts source S in front of the others (storage stays last): misses are
 * asked of it first, and of the next source when it answers -EAGAIN. Call
 * before reads begin. 0, or -ENOSPC when CORE_MAX_SOURCES are in use. */
int core_add_source(struct core *c, const struct source *s);

/* Installs the peer layer's hooks. Call before reads begin. */
void core_set_peer_hooks(struct core *c, const struct core_peer_hooks *h);
/* The manifest (--manifest), or NULL. core_verifiable() gives the record of
 * file ID at size SIZE, or -1 when its bytes cannot be checked (no
 * manifest, not in it, or another size now). */
const struct manifest *core_manifest(const struct core *c);
int core_verifiable(const struct core *c, uint32_t id, uint64_t size);

/* The counters, for the modules that plug into the core (peers). */
struct stats *core_stats(struct core *c);

/* The cache's item size (also what ownership is computed over). */
uint32_t core_chunk(const struct core *c);
/* Cache bytes the items this node owns would take (OWNS as in the hooks). */
uint64_t core_owned_bytes(struct core *c, int (*owns)(void *ctx, const char *rel, uint32_t chunk),
			  void *ctx);
uint64_t core_cache_capacity(const struct core *c);

/* Debug hooks, for tests only (the daemon arms them when EPOCHFS_DEBUG_HOOKS=1
 * is in its environment): the fd a signal handler writes a command byte to,
 * or -1. Commands: 'c' flips one bit of one cached item (logged with its
 * path), so tests can prove a corrupt item is never served. */
int core_debug_fd(struct core *c);

/* How long a check of an entry against SOURCE stays valid: --timeout, or,
 * when none was given, CORE_TIMEOUT_WATCHED where the inotify watch sees
 * every change (a local filesystem, watch running) and
 * CORE_TIMEOUT_UNWATCHED elsewhere (NFS, Lustre, FUSE, --no-watch: other
 * clients' changes raise no event). Settled by core_start(). Nothing in
 * the kernel above the mount is told to cache an entry for longer than its
 * check has left, so a change is seen within this bound. */
#define CORE_TIMEOUT_WATCHED 3600.0
#define CORE_TIMEOUT_UNWATCHED 1.0
double core_timeout(const struct core *c);

/* Lookup of NAME in directory PARENT (index ids), for the kernel: the entry
 * is re-checked against SOURCE when its check is older than core_timeout()
 * (so a file changed where inotify cannot see is noticed), and a changed
 * file comes back at its new generation. 0 and *A, or -ENOENT; *VALID gets
 * how long the answer (the entry, or its absence) may be cached. */
int core_lookup(struct core *c, uint32_t parent, const char *name, struct index_attr *a,
		double *valid);
/* Attributes of entry ID as of generation GEN (directories: any), re-checked
 * like core_lookup(). 0 and *A; -ESTALE when the file changed since GEN or
 * vanished; -ENOENT for an id the index never had. */
int core_getattr(struct core *c, uint32_t id, uint32_t gen, struct index_attr *a, double *valid);

/* Done callback of core_read(): RES bytes in BUF, or -errno. BUF is valid
 * only during the call. */
typedef void (*core_read_fn)(void *arg, ssize_t res, const void *buf);

/* Reads up to LEN bytes at OFF of file ID as of generation GEN: from the RAM
 * cache when the item is there (or admitted now), else from storage. Clamps
 * to the file's size. The entry is re-checked first when its check is older
 * than core_timeout(), so a cached item is never served past that bound
 * after its file changed. -ESTALE when GEN is not the current generation or
 * the file changed during the read; then the index is refreshed (after DONE
 * ran). DONE is called exactly once, on this thread or the storage
 * completion thread. */
void core_read(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len,
	       core_read_fn done, void *arg);

/* Reads the whole regular file REL (a path below SOURCE, as the index knows
 * it) through core_read(), so the RAM cache serves and admits it, and
 * waits for the bytes: for threads that may block (prep workers). *BUF is
 * grown with realloc (*CAP its size). The length, or -ENOENT (no such file
 * in the index), -EISDIR, -ESTALE (changed), -EIO, -ENOMEM. */
ssize_t core_read_file(struct core *c, const char *rel, void **buf, size_t *cap);

/* Serves a peer's read of the file REL (checked: a normalized relative
 * path) at the version it expects (SIZE, MTIME_NS): LEN bytes at OFF, inside
 * one cache item, from the RAM cache or by loading the item if it may be
 * admitted (hooks.owns). DONE gets the bytes, or -ENOENT (no such regular
 * file), -ESTALE (another version here), -EINVAL (spans items), -ENOSPC
 * (not cached here and not admitted: the asker tries elsewhere), -errno.
 * Counted neither as a read nor as hit or miss bytes (the peer layer
 * counts it). */
void core_read_peer(struct core *c, const char *rel, uint64_t size, int64_t mtime_ns, off_t off,
		    size_t len, core_read_fn done, void *arg);
/* True once the cache refused an admission for lack of budget (it never
 * evicts, so this holds until the remount), or when there is no cache. */
int core_cache_full(const struct core *c);

/* All samples (counters and gauges) shown in .epochfs/; returns how many. */
int core_samples(struct core *c, struct sample *out, int max);

#endif
