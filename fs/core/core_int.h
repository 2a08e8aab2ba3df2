/* core_int.h - the inside of struct core, for the core's own files only:
 * core.c (wiring and lifecycle), nodes.c and ns/ns_*.c (the namespaces),
 * read.c and plan.c (the read path), prefetch.c and memory.c (its
 * threads), metrics.c (the catalogue of samples). Everything else sees the
 * opaque struct core of core.h. The modules' own types are declared, not
 * included: each file includes the headers of the modules it calls.
 */
#ifndef EPOCHFS_CORE_INT_H
#define EPOCHFS_CORE_INT_H

#include <stdint.h>

#include "core/core.h"
#include "core/ns/control.h"
#include "core/stats.h"
#include "store/cache.h"
#include "store/source.h"
#include "store/spread.h"

/* The modules the core wires together: each file includes the headers of
 * those it uses. */
struct aside;
struct cache;
struct httpd;
struct index;
struct maint;
struct manifest;
struct order;
struct persist;
struct prefetch;
struct prepdir;
struct pt_opens;
struct memory;
struct staging;
struct storage;
struct tier;
struct watch;

#define CORE_MAX_SAMPLES 640     /* ours (about 110), and the peer layer's (at most 64 peers x 5 + 8) */

struct core {
	char *source;               /* absolute path of SOURCE */
	int rootfd;
	struct index *ix;
	struct storage *st;
	struct control *ctl;
	struct watch *watch;
	struct cache *cache;        /* NULL: no RAM cache */
	struct persist *persist;    /* the cache's state directory; NULL: not kept (see persist_why) */
	char persist_why[720];      /* "on (MODE): DIR", or "off..." and why: stats.json's persist_state */
	char *mountpoint;           /* absolute, for stats.json (NULL: none given) */
	char options[512];          /* the options in force, for stats.json */
	/* Kernel passthrough (passthrough.c). */
	int pt_planned;             /* all it takes but the kernel's offer holds (core_open): large
				     * files go to backings until INIT says otherwise */
	int pt_said;                /* atomic: core_passthrough_start() was called */
	int pt_use;                 /* atomic: the mount uses passthrough (set once, at INIT) */
	int pt_source;              /* misses too (--passthrough on): a file no store holds, opened
				     * while the RAM cache has no room for it, is read by the kernel
				     * from SOURCE */
	uint64_t pt_large_bytes;    /* bytes in files of CORE_PT_MIN_SIZE or more */
	uint64_t pt_large_files;
	char pt_why[240];           /* the plan, in words, for the INIT line */
	char passthrough_text[320]; /* written once, before passthrough points to it */
	char pt_avail_text[200];    /* likewise, for pt_avail */
	const char *passthrough;    /* atomic: stats.json's passthrough; NULL until INIT */
	const char *pt_avail;       /* atomic: stats.json's passthrough_available; NULL until INIT */
	struct pt_opens *opens;     /* the open large files by node, while the mount uses passthrough */
	struct aside *aside;        /* atomic, set once at INIT: whether the cache stands aside
				     * (aside.h); NULL: not for this mount */
	char aside_why[160];        /* stats.json's stand_aside when off: why */
	int served;                 /* core_start() succeeded: a later core_close() is a clean stop */
	struct tier *tier;          /* the SSD tier (the first source, and a store); NULL: none */
	struct maint *maint;        /* the cache's background thread; NULL: none */
	struct prepdir *prep;       /* .prep/; NULL with --no-prep */
	struct manifest *man;       /* --manifest, bound to the index; NULL: none */
	struct order *order;        /* .epochfs/order/: the jobs' orders; NULL with --no-order */
	struct staging *staging;    /* items fetched ahead that no cache kept; with the order */
	struct prefetch *pf;        /* the thread that fetches along the orders; with the order */
	struct memory *memory;      /* the memory budget's thread; NULL with --no-mem-watch */
	struct httpd *httpd;        /* --metrics-addr's server; NULL: none */
	int drop_copies;            /* atomic: ask the kernel to drop files' copies once read */
	int drop_delay_ms;          /* atomic: that long after (core_copy_drop_delay) */
	uint64_t request_slice_ns;  /* atomic: the request threads' slice (core_set_request_slice) */
	uint64_t readahead_bytes;   /* atomic: the mount's readahead window (core_set_readahead) */
	const char *transport;      /* atomic: how requests arrive (core_set_transport); NULL until INIT */
	uint64_t man_files, man_unverified;     /* records bound; files it cannot check */
	struct source sources[CORE_MAX_SOURCES + 1];    /* tried in order; storage last (core_start) */
	int nsources;
	uint32_t chunk;
	uint64_t cache_need;        /* arena bytes the whole dataset would take */
	uint64_t cache_need_small;  /* ... its files under CORE_PT_MIN_SIZE (the rest in backings) */
	uint64_t spread;            /* atomic: the RAM cache's share of each large file
				     * (store/spread.h); 0: files are admitted whole, first come.
				     * Less while staging's share is carved out of the cache */
	int spreading;              /* --spread on in effect (core_spread_setup) */
	uint64_t spread_large_need; /* arena bytes the files spread would take whole */
	char spread_text[200];      /* stats.json's cache_spread */
	double timeout;             /* core_timeout(), settled by core_start() */
	struct stats stats;
	struct core_opts opts;
	struct core_peer_hooks peer;    /* owns == NULL: no peers */
	uint64_t remote_used;           /* atomic: cache bytes admitted for remote items */
	core_change_fn change_fn;       /* set before core_start(), cleared after the loop */
	void *change_arg;
	core_probe_fn probe;            /* set before core_start() */
	void *probe_arg;
	core_copy_fn copy_fn;           /* set before core_start() */
	void *copy_arg;
};

/* Data nodes: index entry ID at generation GEN. The generation keeps 31
 * bits: bit 63 marks the other namespaces. */
#define CORE_GEN_MASK 0x7fffffffu
/* Whether a read of item CHUNK of file ID (SIZE bytes) may admit it into
 * the RAM cache when it is absent: never on the hit path's lookup with
 * peers (plan.c asks whether this node owns it), else as the spread says
 * (store/spread.h: every chunk, unless the cache holds only a share). */
static inline int core_may_admit(const struct core *c, uint32_t id, uint32_t chunk, uint64_t size)
{
	uint64_t share = __atomic_load_n(&c->spread, __ATOMIC_RELAXED);

	return !c->peer.owns && (!share || spread_admits(share, id, chunk, cache_chunks(size, c->chunk)));
}

/* admit.c: the spread's setup for a cache of CAP bytes (before serving);
 * its share for a budget of BUDGET bytes (staging's carve set or lifted);
 * and its end when peers plug in (core_set_peer_hooks). */
void core_spread_setup(struct core *c, uint64_t cap, const struct index_totals *t);
void core_spread_budget(struct core *c, uint64_t budget);
void core_spread_peers(struct core *c);

static inline uint64_t core_data_node(uint32_t id, uint32_t gen)
{
	return ((uint64_t)(gen & CORE_GEN_MASK) << 32) | id;
}
static inline uint32_t core_data_id(uint64_t node)
{
	return (uint32_t)node;
}
static inline uint32_t core_data_gen(uint64_t node)
{
	return (uint32_t)(node >> 32) & CORE_GEN_MASK;
}
/* nodes.c: the index entry of data NODE (directories: any generation),
 * re-checked against SOURCE when due; *VALID: how long the kernel may keep
 * it. 0 and *IA, -ESTALE, -ENOENT. */
int core_data_get(struct core *c, uint64_t node, struct index_attr *ia, double *valid);

/* read.c: reads LEN bytes at OFF of data file ID as of generation GEN (the
 * read path behind core_read()). KERNEL: the read comes from the kernel above
 * the mount (which keeps a copy of what it reads, unless told to drop it). */
void core_read_data(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len, int kernel,
		    core_read_fn done, void *arg);

/* metrics.c: renders a control file (control.h's render callback). */
int core_render(void *arg, enum control_file f, char *buf, size_t len);
/* metrics.c: the same over HTTP (httpd.h's render callback): /metrics,
 * /stats.json, and / (a line saying where they are). */
int core_render_http(void *arg, const char *path, char *buf, size_t len, const char **type);

/* passthrough.c: the plan before the mount (after the scan, before the
 * cache is made): whether large files go to backings; and the table of
 * open large files, freed at core_close(). */
void core_pt_plan(struct core *c);
void core_pt_free(struct core *c);
/* passthrough.c: large nodes open in passthrough now (a gauge). */
unsigned core_pt_open_files(struct core *c);
/* passthrough.c: the release of an open core_open_file() gave FH. */
void core_pt_release(struct core *c, uint64_t node, uint64_t fh, const struct core_backing_reg *reg);

/* The index entry of path REL (LEN bytes) below SOURCE, not gone: 0 and
 * *A, or -ENOENT / -ENAMETOOLONG. */
int core_lookup_rel(struct core *c, const char *rel, size_t len, struct index_attr *a);

#endif
