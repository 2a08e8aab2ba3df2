/* prefetch.h - order-aware prefetch: a job says the order it will read
 * files in, and the daemon fetches what the caches lack ahead of it.
 *
 * The order channel is the directory MOUNTPOINT/.epochfs/order/: a job
 * writes the paths it will read, relative to the mount's root, one a line,
 * to a file of its own there (its *stream*: one per DataLoader, per DDP
 * rank, per job). Writing from offset 0, or truncating, starts a new order
 * (a new epoch); writing on appends. Reading the file back gives the
 * stream's state as text. rm ends it; a stream with no write and no read
 * seen for expire_s is dropped. epochfs-run writes these for unmodified
 * PyTorch jobs (docs/prefetch.md).
 *
 * The daemon follows each stream: a reader's read of a file that reaches
 * it (any read the RAM cache does not answer) moves the stream's head to
 * that file's place in the order, and a thread keeps up to `window` files
 * past the head fetched: into the RAM cache where MinIO admits them (budget
 * left, this node's item), else into a staging area of at most `mem` bytes,
 * where a read finds them (or waits for them, if they are on their way) and
 * frees them once served. Peers are the read path's sources, so with
 * --peers the items come from their owners. A reader that strays from its
 * order gets exact bytes all the same and wastes at most the window;
 * staged bytes are versioned like cached ones, never served stale.
 *
 * Thread-safe; one mutex (streams and staging), never held while reading.
 */
#ifndef EPOCHFS_PREFETCH_H
#define EPOCHFS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "control.h"
#include "index.h"
#include "prepdir.h"

#define ORDER_DIR_NAME "order"
#define ORDER_NODE_BIT (1ull << 61)
#define ORDER_DIR_NODE (CONTROL_NODE_BIT | ORDER_NODE_BIT)
#define PREFETCH_MAX_STREAMS 64
#define PREFETCH_MAX_ORDER (16u << 20)      /* paths in all streams' orders together */
#define PREFETCH_DEFAULT_MEM (64ull << 20)
#define PREFETCH_DEFAULT_WINDOW 4096u

/* Nodes of .epochfs/order/ (the directory and its streams). */
static inline int prefetch_is_node(uint64_t node)
{
	return (node & (CONTROL_NODE_BIT | PREPDIR_NODE_BIT | ORDER_NODE_BIT)) ==
	       (CONTROL_NODE_BIT | ORDER_NODE_BIT);
}

struct core;
struct prefetch;

struct prefetch_opts {
	uint64_t mem;               /* staging bytes at most; 0: no prefetch (orders still taken) */
	unsigned window;            /* files fetched past a stream's head; 0: default */
	double expire_s;            /* an idle stream is dropped after this; 0: 300 s */
	unsigned inflight;          /* item fetches at once; 0: 64 */
};

struct prefetch_stats {
	uint64_t streams;           /* gauge */
	uint64_t order_paths;       /* paths taken into orders */
	uint64_t order_unknown;     /* paths no indexed file has (skipped) */
	uint64_t fetched_bytes;     /* bytes the prefetcher read (into the cache or staging) */
	uint64_t cached_bytes;      /* of those, admitted into the RAM cache */
	uint64_t hits;              /* reads served from staging */
	uint64_t late;              /* reads that waited for a fetch on its way, or came first */
	uint64_t wasted_bytes;      /* staged bytes freed unread */
	uint64_t resident;          /* files not fetched: cached above the mount */
	uint64_t staged_bytes, staged_peak;     /* gauges */
	uint64_t job_wait_us;       /* jobs' time waiting for data, from their "#wait" lines */
	uint64_t job_run_us;        /* the time those lines cover */
};

/* For C's read path: 0 and *OUT, or -ENOMEM. Nothing runs before
 * prefetch_start(). */
int prefetch_new(struct core *c, const struct prefetch_opts *o, struct prefetch **out);
int prefetch_start(struct prefetch *pf);
/* Stops the thread, waits for fetches in flight, frees everything. */
void prefetch_free(struct prefetch *pf);
void prefetch_get_stats(struct prefetch *pf, struct prefetch_stats *s);

/* ---- the order channel (nodes.c routes .epochfs/order/ here) ---- */

struct prefetch_attr {
	uint64_t node;
	int is_dir;
	size_t size;
};

int prefetch_lookup(struct prefetch *pf, uint64_t parent, const char *name, struct prefetch_attr *a);
int prefetch_getattr(struct prefetch *pf, uint64_t node, struct prefetch_attr *a);
/* A new stream NAME (letters, digits, '.', '_', '-'; at most 64). -EEXIST
 * is never returned: creating an existing stream reopens it. -ENOSPC with
 * PREFETCH_MAX_STREAMS streams, -EINVAL for a bad name. */
int prefetch_create(struct prefetch *pf, uint64_t parent, const char *name, struct prefetch_attr *a);
/* Order text: LEN, or -EINVAL (a line that is no relative path inside the
 * mount: absolute, '..', empty component, NUL, over 4095 bytes; the lines
 * before it are kept), -EFBIG (all orders together are over PREFETCH_MAX_ORDER paths). */
ssize_t prefetch_write(struct prefetch *pf, uint64_t node, const void *buf, size_t len, off_t off);
/* SIZE 0 starts a new order (O_TRUNC); other sizes: -EINVAL. */
int prefetch_truncate(struct prefetch *pf, uint64_t node, off_t size);
int prefetch_unlink(struct prefetch *pf, uint64_t parent, const char *name);
/* The stream's state as text, or the directory: -EISDIR. */
ssize_t prefetch_read(struct prefetch *pf, uint64_t node, void *buf, size_t len, off_t off);
/* The POS-th stream's name into NAME, or NULL past the end. */
const char *prefetch_dirent(struct prefetch *pf, uint64_t pos, char *name, size_t len);

/* The kernel's answer to a probe the prefetcher sent (core_probe_fn):
 * RESIDENT, the file is cached above the mount and is not fetched. */
void prefetch_probed(struct prefetch *pf, void *cookie, int resident);

/* ---- the read path ---- */

/* A reader's read of file ID reached the daemon past the RAM cache: the
 * streams that expect it move their heads. */
void prefetch_seen(struct prefetch *pf, uint32_t id);

/* Staged bytes for a read, keyed by (ID, CHUNK) and the version V they must
 * be: PREFETCH_HIT (*DATA, *LEN pinned until prefetch_done_with), PREFETCH_WAIT
 * (they are on their way: FN(ARG, data, len) runs once when they land,
 * data NULL if the fetch failed; with FN NULL, PREFETCH_NONE instead), or
 * PREFETCH_NONE. */
enum prefetch_take { PREFETCH_NONE, PREFETCH_HIT, PREFETCH_WAIT };
typedef void (*prefetch_wait_fn)(void *arg, const void *data, size_t len);
enum prefetch_take prefetch_take(struct prefetch *pf, uint32_t id, uint32_t chunk,
				 const struct index_version *v, const void **data, size_t *len,
				 prefetch_wait_fn fn, void *arg);
/* A read is done with staged item (ID, CHUNK), having served SERVED bytes
 * of it: once all its bytes were served, it is freed. */
void prefetch_done_with(struct prefetch *pf, uint32_t id, uint32_t chunk, size_t served);

#endif
