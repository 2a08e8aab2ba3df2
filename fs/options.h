/* options.h - the daemon's command line, parsed without side effects.
 *
 * options_parse() only reads argv and fills struct options; it prints nothing
 * and never exits, so the unit tests can feed it anything. main() prints the
 * message it returns and decides what to do.
 */
#ifndef EPOCHFS_OPTIONS_H
#define EPOCHFS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

/* --fuse-uring: the kernel's requests over io_uring (ops.h, ops_config). */
enum { OPTIONS_URING_AUTO = 0, OPTIONS_URING_ON, OPTIONS_URING_OFF };

struct options {
	const char *source;
	const char *mountpoint;
	char fuse_opts[1024];       /* -o values joined with ',' */
	const char *log_file;
	double timeout;             /* staleness bound, seconds; < 0: picked at mount (core.h) */
	unsigned threads;           /* FUSE worker threads at most */
	unsigned scan_threads;      /* 0: default */
	unsigned request_slice_us;  /* FUSE threads' time slice (util/sched.h); 0: the kernel's */
	uint64_t readahead;         /* the mount's readahead window, bytes; 0: the kernel's */
	int foreground, debug;
	int watch;                  /* follow changes with inotify */
	int handle_open;            /* answer open() in the daemon (no FUSE no_open) */
	int passthrough;            /* --passthrough: enum core_passthrough_mode (0: auto) */
	int fuse_uring;             /* --fuse-uring: OPTIONS_URING_* (0: auto) */
	int no_stand_aside;         /* --stand-aside off */
	int spread;                 /* --spread on */
	int cache_size_set;         /* --cache-size given (else the default) */
	uint64_t cache_size;        /* bytes; 0 disables the RAM cache */
	uint64_t cache_chunk;       /* item size for large files */
	int verify;                 /* re-check every cache hit's checksum */
	uint64_t scrub_rate;        /* scrubber bytes per second; 0: off */
	uint64_t prefault_window;   /* cache bytes resident ahead of the fill; 0: off */
	int prep;                   /* serve .prep/ (off: --no-prep, and the mount is ro) */
	uint64_t prep_mem;          /* bytes of made batches, all groups together; 0: default */
	unsigned prep_threads;      /* 0: one per CPU */
	unsigned prep_timeout;      /* seconds */
	unsigned prep_ahead;        /* batches made past the furthest read; 0: default */
	const char *peers;          /* --peers list, or NULL */
	const char *peers_file;
	int rank;                   /* -1: not given */
	char peer_port[8];          /* for entries without one */
	const char *peer_listen;    /* ADDR[:PORT], or NULL */
	const char *secret_file;
	int insecure_peers;
	double peer_timeout;        /* seconds */
	int cache_remote;
	int no_peers;               /* ignore SLURM's environment */
	int keep_source_cache;      /* do not drop SOURCE's page cache after reads */
	const char *manifest;       /* --manifest FILE, or NULL */
	uint64_t prefetch_mem;      /* --prefetch-mem; 0: nothing fetched ahead */
	unsigned prefetch_window;   /* --prefetch-window files; 0: default */
	double order_expire;        /* --order-expire seconds; 0: default */
	int no_order;               /* --no-order: no .epochfs/order/ */
	int page_cache;             /* --page-cache: enum page_cache_mode */
	int no_mem_watch;           /* --no-mem-watch */
	const char *state_dir;      /* --state-dir, or NULL: the default */
	int persist_mode;           /* --persist: enum persist_mode (--no-persist: OFF) */
	const char *cache_dirs[8];  /* --cache-dir, in order (the SSD tier) */
	unsigned ncache_dirs;
	uint64_t cache_dir_sizes[8];        /* --cache-dir-size, in order */
	unsigned ncache_dir_sizes;
	int cache_dir_buffered;     /* --cache-dir-io buffered */
	const char *metrics_addr;   /* --metrics-addr HOST:PORT, or NULL */
	int help, version;
	/* Storage for the command line as options_parse() rewrote it (-o
	 * spellings of long options, options after SOURCE MOUNTPOINT as mount
	 * helpers put them): what the fields above point into. */
	char xbuf[4096];
	char *xargv[256];
};

#define OPTIONS_DEFAULT_TIMEOUT (-1.0)    /* CORE_TIMEOUT_WATCHED or _UNWATCHED */
#define OPTIONS_DEFAULT_THREADS 8u
/* The kernel's shortest slice: the 100 MB/s cell of part 7 (docs/design.md,
 * "The request threads' time slice") measured 1.05x native with it and
 * 1.12x with this machine's default 1.4 ms. */
#define OPTIONS_DEFAULT_REQUEST_SLICE_US 100u
/* The kernel's own window (0): 1M makes an image one READ instead of 1.31
 * and cuts the daemon's CPU, but epochfs-run at 25 MB/s ran slower with it
 * (docs/design.md, "Kernel-cache decisions"). */
#define OPTIONS_DEFAULT_READAHEAD 0ull
#define OPTIONS_DEFAULT_SCRUB_RATE (32ull << 20)
#define OPTIONS_DEFAULT_PREFAULT UINT64_MAX   /* the whole budget the data can fill */
#define OPTIONS_DEFAULT_PREP_TIMEOUT 120u
#define OPTIONS_DEFAULT_PEER_TIMEOUT 2.0
#define OPTIONS_DEFAULT_PEER_PORT "7070"

/* Returns 0, or -EINVAL with a one-line reason (no program name, no
 * newline) in ERR. With -h/-V it returns 0 and sets help/version; SOURCE
 * and MOUNTPOINT are then not required.
 *
 * Options may come before or after SOURCE and MOUNTPOINT (mount(8)'s
 * helpers put them after; "--" ends them). Every long option has an -o
 * spelling, its name with '_' for '-' (-o cache_size=50%,no_persist), so an
 * fstab line or `mount -t fuse.epochfs -o ...` can say anything the command
 * line can. The options mount(8) and systemd keep for themselves (_netdev,
 * auto, noauto, nofail, defaults, user, users, nouser, x-*, comment=...)
 * are dropped; every other -o element goes to FUSE, which refuses what it
 * does not know. */
int options_parse(int argc, char **argv, struct options *o, char *err, size_t errlen);

/* Writes the --help text to F (a FILE *, void to keep stdio out of here). */
void options_usage(void *f, const char *prog);

/* Parses a size: N, or N with K/M/G/T (powers of 1024, an optional "iB"
 * or "B" after; "B" alone: bytes), or N% of RAM_BYTES (N at most 100; refused when RAM_BYTES
 * is 0, for sizes that are not shares of RAM). 0 or -EINVAL. */
int options_parse_size(const char *s, uint64_t ram_bytes, uint64_t *out);
/* 1 when S is a bare number (no unit) of bytes V, more than 0 and under
 * OPTIONS_BARE_MIN: refused for budgets (--cache-size 50 is not 50 bytes
 * anyone wants; "50B" says bytes). */
#define OPTIONS_BARE_MIN (1u << 20)
int options_small_bare(const char *s, uint64_t v);


/* Parses a decimal count in [MIN, MAX]; 0 or -EINVAL. */
int options_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out);

#endif
