/* options.c - see options.h. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "core/prefetch.h"
#include "core/memory.h"
#include "options.h"
#include "store/persist.h"
#include "store/tier.h"

enum {
	OPT_THREADS = 256, OPT_SCAN_THREADS, OPT_TIMEOUT, OPT_NO_WATCH, OPT_OPEN, OPT_LOG,
	OPT_CACHE_SIZE, OPT_CACHE_CHUNK, OPT_VERIFY, OPT_SCRUB_RATE, OPT_KEEP_SOURCE_CACHE, OPT_PREFAULT, OPT_NO_PREP, OPT_PREP_MEM,
	OPT_PREP_THREADS, OPT_PREP_TIMEOUT, OPT_PREP_AHEAD, OPT_PEERS, OPT_PEERS_FILE, OPT_RANK,
	OPT_PEER_PORT, OPT_PEER_LISTEN, OPT_SECRET_FILE, OPT_INSECURE_PEERS, OPT_PEER_TIMEOUT,
	OPT_CACHE_REMOTE, OPT_NO_PEERS, OPT_MANIFEST, OPT_PREFETCH_MEM, OPT_PREFETCH_WINDOW, OPT_ORDER_EXPIRE,
	OPT_NO_ORDER, OPT_PAGE_CACHE, OPT_NO_MEM_WATCH, OPT_STATE_DIR, OPT_NO_PERSIST, OPT_PERSIST,
	OPT_CACHE_DIR, OPT_CACHE_DIR_SIZE, OPT_CACHE_DIR_IO, OPT_METRICS_ADDR, OPT_PASSTHROUGH,
	OPT_REQUEST_SLICE, OPT_READAHEAD, OPT_FUSE_URING, OPT_STAND_ASIDE, OPT_SPREAD,
};

static const struct option longopts[] = {
	{ "foreground", no_argument, NULL, 'f' },
	{ "debug", no_argument, NULL, 'd' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "scan-threads", required_argument, NULL, OPT_SCAN_THREADS },
	{ "request-slice", required_argument, NULL, OPT_REQUEST_SLICE },
	{ "readahead", required_argument, NULL, OPT_READAHEAD },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "no-watch", no_argument, NULL, OPT_NO_WATCH },
	{ "open", no_argument, NULL, OPT_OPEN },
	{ "passthrough", required_argument, NULL, OPT_PASSTHROUGH },
	{ "fuse-uring", required_argument, NULL, OPT_FUSE_URING },
	{ "stand-aside", required_argument, NULL, OPT_STAND_ASIDE },
	{ "spread", required_argument, NULL, OPT_SPREAD },
	{ "log", required_argument, NULL, OPT_LOG },
	{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
	{ "cache-chunk", required_argument, NULL, OPT_CACHE_CHUNK },
	{ "verify", no_argument, NULL, OPT_VERIFY },
	{ "scrub-rate", required_argument, NULL, OPT_SCRUB_RATE },
	{ "keep-source-cache", no_argument, NULL, OPT_KEEP_SOURCE_CACHE },
	{ "manifest", required_argument, NULL, OPT_MANIFEST },
	{ "prefetch-mem", required_argument, NULL, OPT_PREFETCH_MEM },
	{ "prefetch-window", required_argument, NULL, OPT_PREFETCH_WINDOW },
	{ "order-expire", required_argument, NULL, OPT_ORDER_EXPIRE },
	{ "no-order", no_argument, NULL, OPT_NO_ORDER },
	{ "page-cache", required_argument, NULL, OPT_PAGE_CACHE },
	{ "no-mem-watch", no_argument, NULL, OPT_NO_MEM_WATCH },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "no-persist", no_argument, NULL, OPT_NO_PERSIST },
	{ "persist", required_argument, NULL, OPT_PERSIST },
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "cache-dir-size", required_argument, NULL, OPT_CACHE_DIR_SIZE },
	{ "cache-dir-io", required_argument, NULL, OPT_CACHE_DIR_IO },
	{ "metrics-addr", required_argument, NULL, OPT_METRICS_ADDR },
	{ "prefault", required_argument, NULL, OPT_PREFAULT },
	{ "no-prep", no_argument, NULL, OPT_NO_PREP },
	{ "prep-mem", required_argument, NULL, OPT_PREP_MEM },
	{ "prep-threads", required_argument, NULL, OPT_PREP_THREADS },
	{ "prep-timeout", required_argument, NULL, OPT_PREP_TIMEOUT },
	{ "prep-ahead", required_argument, NULL, OPT_PREP_AHEAD },
	{ "peers", required_argument, NULL, OPT_PEERS },
	{ "peers-file", required_argument, NULL, OPT_PEERS_FILE },
	{ "rank", required_argument, NULL, OPT_RANK },
	{ "peer-port", required_argument, NULL, OPT_PEER_PORT },
	{ "peer-listen", required_argument, NULL, OPT_PEER_LISTEN },
	{ "secret-file", required_argument, NULL, OPT_SECRET_FILE },
	{ "insecure-peers", no_argument, NULL, OPT_INSECURE_PEERS },
	{ "peer-timeout", required_argument, NULL, OPT_PEER_TIMEOUT },
	{ "cache-remote", no_argument, NULL, OPT_CACHE_REMOTE },
	{ "no-peers", no_argument, NULL, OPT_NO_PEERS },
	{ NULL, 0, NULL, 0 },
};

void options_usage(void *fp, const char *prog)
{
	FILE *f = fp;

	fprintf(f,
		"usage: %s [OPTIONS] SOURCE MOUNTPOINT [-o OPTION[,OPTION...]]\n"
		"       mount -t fuse.epochfs SOURCE MOUNTPOINT -o OPTION[,OPTION...]\n"
		"\n"
		"Presents the dataset directory SOURCE read-only at MOUNTPOINT, tuned for\n"
		"deep-learning training: every epoch reads each file once in random order.\n"
		"Counters are in MOUNTPOINT/.epochfs/stats.json and .epochfs/metrics.\n"
		"\n"
		"options:\n"
		"  -f, --foreground     stay in the foreground (default: become a daemon)\n"
		"  -d, --debug          print every FUSE request (implies -f)\n"
		"  -o OPT[,OPT...]      any option below as NAME=VALUE or NAME, '_' for '-'\n"
		"                       (-o cache_size=50%%,no_persist: what /etc/fstab and\n"
		"                       mount -t fuse.epochfs take), FUSE's own (allow_other,\n"
		"                       auto_unmount); _netdev, noauto, nofail, x-systemd.*\n"
		"                       and the like are mount(8)'s and are ignored here\n"
		"      --threads N      FUSE worker threads at most (default %u)\n"
		"      --scan-threads N threads for the mount-time scan (default: 4 per CPU)\n"
		"      --request-slice US  the CPU time slice the FUSE threads ask for, in\n"
		"                       microseconds (100-100000; default %u): a short one\n"
		"                       answers a read at once when the job keeps every core\n"
		"                       busy (Linux 6.12+; 0: the kernel's default)\n"
		"      --readahead SIZE the kernel's readahead window on the mount, 4K-16M in\n"
		"                       4K steps (1M: one request reads an image whole; needs\n"
		"                       root); default 0, the kernel's 128K\n"
		"      --timeout SEC    longest a change to SOURCE can go unseen: names,\n"
		"                       attributes and cached bytes are re-checked after SEC\n"
		"                       (default %g where inotify sees every change, else %g)\n"
		"      --no-watch       do not watch SOURCE for changes (inotify)\n"
		"      --open           answer open() in the daemon instead of letting the\n"
		"                       kernel skip it (slower; for comparisons)\n"
		"      --passthrough auto|on|off  let the kernel read files of 4 MiB or more\n"
		"                       that the RAM cache holds whole straight from it, and\n"
		"                       .prep/ batches from their own files (FUSE passthrough:\n"
		"                       needs Linux 6.9+ and CAP_SYS_ADMIN). It costs every\n"
		"                       open() a round trip, so auto (the default) uses it\n"
		"                       only when such files hold half the dataset's bytes;\n"
		"                       on: whenever it is available (the choice for jobs\n"
		"                       reading .prep/), and files no store holds, once the\n"
		"                       cache is full, are read by the kernel from SOURCE too\n"
		"                       (not with peers, --cache-dir or --manifest)\n"
		"      --stand-aside auto|off  where every file can be read from SOURCE by\n"
		"                       passthrough (--passthrough on, in effect), the daemon\n"
		"                       times the job's opens with and without the cache once\n"
		"                       it is warm, and where the cache does not make the job\n"
		"                       faster (a job bound by its own CPU) it stands aside:\n"
		"                       the kernel reads every file from SOURCE and the cache\n"
		"                       gives its memory back (auto, the default); off: never\n"
		"      --spread on|off  a cache smaller than the dataset holds the same share of\n"
		"                       every part of each file of 4 chunks or more: for shard\n"
		"                       jobs the disk holds back (off, the default: first come)\n"
		"      --fuse-uring auto|on|off  take the kernel's requests over io_uring\n"
		"                       (FUSE over io_uring: Linux 6.14+, one ring thread a\n"
		"                       CPU, no read()/write() a request) instead of\n"
		"                       /dev/fuse. auto (the default): when the kernel offers\n"
		"                       it (the fuse module's enable_uring is Y); on: also\n"
		"                       sets enable_uring, which needs root\n"
		"      --log FILE       where the daemon writes its messages once detached\n"
		"      --metrics-addr HOST:PORT  serve the counters over HTTP for Prometheus:\n"
		"                       /metrics (its text format) and /stats.json, as in\n"
		"                       MOUNTPOINT/.epochfs/ (127.0.0.1:9567; :PORT for all addresses)\n"
		"      --cache-size SIZE  RAM cache budget: 64G, 512M, N%% of RAM; 0 disables\n"
		"                       (default %u%% of RAM, at most the dataset). A bare number\n"
		"                       under 1M is refused as a likely slip; 50B is 50 bytes\n"
		"      --cache-chunk SIZE files larger than this are cached in pieces of\n"
		"                       this size (default 256K; a multiple of 128K)\n"
		"      --verify         re-check the checksum of every cache hit\n"
		"      --persist crash|always|off  when the RAM cache outlives the daemon, so a\n"
		"                       restart adopts it (items re-checked against SOURCE):\n"
		"                       crash (default): after a crash, kill -9 or the OOM\n"
		"                       killer only, a clean stop or umount frees it; always:\n"
		"                       a clean stop keeps it too (service restarts, upgrades);\n"
		"                       off: anonymous memory, nothing kept (docs/cache.md)\n"
		"      --no-persist     the same as --persist off\n"
		"      --state-dir DIR  where the cache's state lives, on tmpfs (default: a\n"
		"                       directory per mount point under " PERSIST_ROOT_PREFIX "-UID)\n"
		"      --cache-dir DIR  a second cache tier on a local disk, below RAM: items RAM\n"
		"                       cannot hold are kept there, never evicted (repeat for\n"
		"                       several disks; docs/cache.md)\n"
		"      --cache-dir-size SIZE  bytes the tier may use in each --cache-dir (once\n"
		"                       for all, or once per dir; default: what the dataset\n"
		"                       needs, within %d%% of the disk kept free)\n"
		"      --cache-dir-io direct|buffered  read the tier with O_DIRECT (default,\n"
		"                       where the filesystem takes it) or through its page cache\n"
		"      --scrub-rate SIZE  bytes per second the background scrubber re-checks\n"
		"                       (default 32M; 0 turns it off)\n"
		"      --prefault SIZE  make the cache's memory resident in the background,\n"
		"                       at most SIZE ahead of the fill (default: all the\n"
		"                       dataset needs, right after the mount; 0 off)\n"
		"      --prep-mem SIZE  memory for made batches, all prep groups together\n"
		"                       (K/M/G/T or N%% of RAM; default %u%%)\n"
		"      --prep-threads N decode/augment threads per prep group (default: CPUs)\n"
		"      --prep-timeout SEC drop a consumer that stalls this long (default %u)\n"
		"      --prep-ahead N   batches made past the furthest one read (default:\n"
		"                       2 per thread, at least 4; --prep-mem bounds it too)\n"
		"      --no-prep        no .prep/ directory; the mount is then read-only\n"
		"peers (partitioned caching across nodes; docs/cluster.md):\n"
		"      --peers HOST[:PORT],...  every node, in the same order on every node\n"
		"      --peers-file FILE  the same, one HOST[:PORT] a line\n"
		"                       (under SLURM, SLURM_JOB_NODELIST and SLURM_NODEID\n"
		"                       are used when neither is given; --no-peers: don't)\n"
		"      --rank N         this node's place in the list (default: SLURM_NODEID,\n"
		"                       else the entry matching this host's name)\n"
		"      --peer-port PORT port of entries that give none (default 7070)\n"
		"      --peer-listen ADDR[:PORT]  where to accept peers (default: all\n"
		"                       addresses, this node's port)\n"
		"      --secret-file FILE shared secret authenticating every connection\n"
		"      --manifest FILE  verify every peer reply and storage load against the\n"
		"                       checksums of epochfs-manifest (built with --chunk equal\n"
		"                       to --cache-chunk): a peer holding the secret cannot lie\n"
		"      --insecure-peers run peers without a secret (trusted networks only)\n"
		"      --peer-timeout SEC  connect and per-request limit (default 2)\n"
		"      --cache-remote   let spare cache budget keep items other nodes own\n"
		"      --keep-source-cache  leave what the daemon reads in SOURCE's page cache\n"
		"                       (default: drop it; the RAM cache holds the copy)\n"
		"prefetch and memory (docs/prefetch.md):\n"
		"      --prefetch-mem SIZE  memory for files fetched ahead of a job that wrote its\n"
		"                       order to .epochfs/order/ (epochfs-run does; default 64M;\n"
		"                       0: orders are followed, nothing fetched ahead)\n"
		"      --prefetch-window N  files fetched past where a job reads (default 4096)\n"
		"      --order-expire SEC  drop an order no read or write touched for SEC (default 300)\n"
		"      --no-order       no .epochfs/order/ channel at all\n"
		"      --page-cache auto|keep|drop  the kernel's copy of each file read through\n"
		"                       the mount: keep it, drop it once read, or (auto, the\n"
		"                       default) drop it only while memory cannot hold the dataset\n"
		"      --no-mem-watch   never pause or shrink the cache under memory pressure\n"
		"  -h, --help           print this help\n"
		"  -V, --version        print the version\n",
		prog, OPTIONS_DEFAULT_THREADS, OPTIONS_DEFAULT_REQUEST_SLICE_US, CORE_TIMEOUT_WATCHED, CORE_TIMEOUT_UNWATCHED,
		CORE_DEFAULT_CACHE_PERCENT, TIER_FLOOR_PERCENT,
		CORE_DEFAULT_PREP_MEM_PERCENT, OPTIONS_DEFAULT_PREP_TIMEOUT);
}

int options_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	unsigned long v;
	char *end;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int options_parse_size(const char *s, uint64_t ram_bytes, uint64_t *out)
{
	static const char units[] = "KMGT";
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == '%') {
		if (end[1] || v > 100 || !ram_bytes)
			return -EINVAL;
		*out = ram_bytes / 100 * v;
		return 0;
	}
	if ((end[0] == 'B' || end[0] == 'b') && !end[1]) {
		end++;                  /* "50B": bytes, said so */
	} else if (*end) {
		const char *u = strchr(units, end[0] & ~0x20);
		if (!u || !end[0])
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
		end++;
		if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") || !strcmp(end, "b"))
			end += strlen(end);
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (~0ull >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int options_small_bare(const char *s, uint64_t v)
{
	return s && *s && strspn(s, "0123456789") == strlen(s) && v && v < OPTIONS_BARE_MIN;
}

/* Refuses a budget given as a bare number under OPTIONS_BARE_MIN (OPT
 * names the option): 50 meant 50% or 50G far more often than 50 bytes. */
#define SMALL_BARE(opt, s, v) do { \
	if (options_small_bare(s, v)) { \
		if ((v) <= 100) \
			FAIL(opt " %s: too small to be meant as bytes; did you mean %s%%, %sM or %sG? " \
			     "(%sB if bytes)", s, s, s, s, s); \
		FAIL(opt " %s: too small to be meant as bytes; did you mean %sK or %sM? (%sB if bytes)", \
		     s, s, s, s); \
	} \
} while (0)

/* auto, on, off: 0, 1, 2 (the order of enum core_passthrough_mode and of
 * OPTIONS_URING_*), or -1. */
_Static_assert(CORE_PT_AUTO == 0 && CORE_PT_ON == 1 && CORE_PT_OFF == 2, "auto_on_off's order");
_Static_assert(OPTIONS_URING_AUTO == 0 && OPTIONS_URING_ON == 1 && OPTIONS_URING_OFF == 2, "auto_on_off's order");
static int auto_on_off(const char *s)
{
	return !strcmp(s, "auto") ? 0 : !strcmp(s, "on") ? 1 : !strcmp(s, "off") ? 2 : -1;
}

/* 1 for the word ONE, 0 for ZERO, else -1. */
static int one_of_two(const char *s, const char *one, const char *zero)
{
	return !strcmp(s, one) ? 1 : !strcmp(s, zero) ? 0 : -1;
}

static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= 0) || v > 1e9)
		return -EINVAL;
	*out = v;
	return 0;
}


#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -EINVAL; } while (0)

static const struct option *long_named(const char *name, size_t n)
{
	for (const struct option *l = longopts; l->name; l++)
		if (strlen(l->name) == n && !strncmp(l->name, name, n))
			return l;
	return NULL;
}

/* The -o elements mount(8), fstab and systemd use for themselves. */
static int mount_only(const char *e)
{
	static const char *const words[] = { "_netdev", "auto", "noauto", "nofail", "defaults", "user",
					     "users", "nouser", "owner", "group" };

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(e, words[i]))
			return 1;
	return !strncmp(e, "x-", 2) || !strncmp(e, "comment=", 8);
}

struct xargs {
	struct options *o;
	size_t used;                /* of o->xbuf */
	int argc;
	char fuse[1024];            /* -o elements for FUSE */
};

static char *xstr(struct xargs *x, const char *a, size_t an, const char *b)
{
	size_t bn = b ? strlen(b) : 0, need = an + bn + 1;
	char *p;

	if (x->used + need > sizeof(x->o->xbuf))
		return NULL;
	p = x->o->xbuf + x->used;
	memcpy(p, a, an);
	if (b)
		memcpy(p + an, b, bn);
	p[an + bn] = '\0';
	x->used += need;
	return p;
}

static int xpush(struct xargs *x, char *s)
{
	if (!s || x->argc + 1 >= (int)(sizeof(x->o->xargv) / sizeof(x->o->xargv[0])))
		return -1;
	x->o->xargv[x->argc++] = s;
	x->o->xargv[x->argc] = NULL;
	return 0;
}

/* One -o value: long options made of its elements, the rest kept for FUSE. */
static int expand_o(struct xargs *x, const char *val, char *err, size_t errlen)
{
	size_t n = strlen(val);

	if (!n || val[0] == ',' || val[n - 1] == ',' || strstr(val, ",,"))
		FAIL("-o %s: empty mount option", val);
	for (const char *e = val; *e;) {
		size_t len = strcspn(e, ","), klen = strcspn(e, "=,");
		char key[64], elem[512];
		if (len >= sizeof(elem))
			FAIL("-o %.40s...: option too long", e);
		memcpy(elem, e, len);
		elem[len] = '\0';
		e += len + (e[len] == ',');
		if (mount_only(elem))
			continue;
		const struct option *l = NULL;
		if (klen < sizeof(key)) {
			for (size_t i = 0; i < klen; i++)
				key[i] = elem[i] == '_' ? '-' : elem[i];
			key[klen] = '\0';
			/* FUSE's own options keep their names (allow_other, max_read...). */
			if (strchr(elem, '_') || strchr(key, '-') || long_named(key, klen))
				l = long_named(key, klen);
		}
		if (!l || l->val == 'h' || l->val == 'V') {
			size_t used = strlen(x->fuse);
			if (used + len + 2 > sizeof(x->fuse))
				FAIL("-o: too many mount options");
			if (used)
				x->fuse[used++] = ',';
			memcpy(x->fuse + used, elem, len + 1);
			continue;
		}
		int has_val = elem[klen] == '=';
		if (l->has_arg == required_argument && !has_val)
			FAIL("-o %s: expected %s=VALUE", elem, elem);
		if (l->has_arg == no_argument && has_val)
			FAIL("-o %s: %.*s takes no value", elem, (int)klen, elem);
		if (xpush(x, xstr(x, "--", 2, key)) ||
		    (has_val && xpush(x, xstr(x, elem + klen + 1, len - klen - 1, NULL))))
			FAIL("-o: too many options");
	}
	return 0;
}

/* Rewrites ARGV into O->xargv: options first (-o elements that name long
 * options made long options), SOURCE and MOUNTPOINT last. */
static int normalize(int argc, char **argv, struct options *o, int *out_argc, char *err, size_t errlen)
{
	struct xargs x = { .o = o };
	char *pos[8];
	int npos = 0, dashdash = 0;  /* after "--", everything is SOURCE or MOUNTPOINT */

	if (xpush(&x, argv[0] ? argv[0] : (char *)"epochfs"))
		FAIL("too many arguments");
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (dashdash || a[0] != '-' || !a[1]) {
			if (npos == (int)(sizeof(pos) / sizeof(pos[0])))
				FAIL("%s: unexpected argument", a);
			pos[npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			dashdash = 1;
			continue;
		}
		if (a[1] == '-') {
			size_t n = strcspn(a + 2, "=");
			const struct option *l = long_named(a + 2, n);
			if (xpush(&x, a))
				FAIL("too many arguments");
			if (l && l->has_arg == required_argument && !a[2 + n] && i + 1 < argc && xpush(&x, argv[++i]))
				FAIL("too many arguments");
			continue;
		}
		/* Short options: -f, -d, -h, -V, possibly together; -o VALUE or -oVALUE. */
		char *o_at = strchr(a, 'o');
		if (!o_at) {
			if (xpush(&x, a))
				FAIL("too many arguments");
			continue;
		}
		if (o_at > a + 1 && xpush(&x, xstr(&x, a, (size_t)(o_at - a), NULL)))
			FAIL("too many arguments");
		const char *val = o_at[1] ? o_at + 1 : i + 1 < argc ? argv[++i] : NULL;
		if (!val)
			FAIL("-o: missing argument");
		if (expand_o(&x, val, err, errlen) < 0)
			return -EINVAL;
	}
	if (x.fuse[0] && (xpush(&x, (char *)"-o") || xpush(&x, xstr(&x, x.fuse, strlen(x.fuse), NULL))))
		FAIL("-o: too many mount options");
	if (npos && xpush(&x, (char *)"--"))
		FAIL("too many arguments");
	for (int i = 0; i < npos; i++)
		if (xpush(&x, pos[i]))
			FAIL("too many arguments");
	*out_argc = x.argc;
	return 0;
}

int options_parse(int argc, char **argv, struct options *o, char *err, size_t errlen)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->timeout = OPTIONS_DEFAULT_TIMEOUT;
	o->persist_mode = PERSIST_MODE_CRASH;
	o->threads = OPTIONS_DEFAULT_THREADS;
	o->request_slice_us = OPTIONS_DEFAULT_REQUEST_SLICE_US;
	o->readahead = OPTIONS_DEFAULT_READAHEAD;
	o->watch = 1;
	o->cache_chunk = CORE_DEFAULT_CACHE_CHUNK;
	o->scrub_rate = OPTIONS_DEFAULT_SCRUB_RATE;
	o->prefault_window = OPTIONS_DEFAULT_PREFAULT;
	o->prep = 1;
	o->prep_timeout = OPTIONS_DEFAULT_PREP_TIMEOUT;
	o->rank = -1;
	o->peer_timeout = OPTIONS_DEFAULT_PEER_TIMEOUT;
	o->prefetch_mem = PREFETCH_DEFAULT_MEM;
	snprintf(o->peer_port, sizeof(o->peer_port), "%s", OPTIONS_DEFAULT_PEER_PORT);
	err[0] = '\0';
	if (normalize(argc, argv, o, &argc, err, errlen) < 0)
		return -EINVAL;
	argv = o->xargv;
	optind = 0;                 /* full re-initialisation, so tests can call us again */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:fdhVo:", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			o->foreground = 1;
			break;
		case 'd':
			o->debug = o->foreground = 1;
			break;
		case 'h':
			o->help = 1;
			return 0;
		case 'V':
			o->version = 1;
			return 0;
		case 'o': {
			size_t used = strlen(o->fuse_opts), n = strlen(optarg);
			if (!n || optarg[0] == ',' || optarg[n - 1] == ',' || strstr(optarg, ",,"))
				FAIL("-o %s: empty mount option", optarg);
			if (used + n + 2 > sizeof(o->fuse_opts))
				FAIL("-o: too many mount options");
			if (used)
				o->fuse_opts[used++] = ',';
			memcpy(o->fuse_opts + used, optarg, n + 1);
			break;
		}
		case OPT_THREADS:
			if (options_parse_uint(optarg, 1, 1024, &o->threads))
				FAIL("--threads %s: expected a number from 1 to 1024", optarg);
			break;
		case OPT_REQUEST_SLICE:
			if (options_parse_uint(optarg, 0, 100000, &o->request_slice_us) ||
			    (o->request_slice_us && o->request_slice_us < 100))
				FAIL("--request-slice %s: expected microseconds from 100 to 100000, "
				     "or 0 for the kernel's default", optarg);
			break;
		case OPT_READAHEAD:
			if (options_parse_size(optarg, 0, &o->readahead) || o->readahead % 4096 ||
			    (o->readahead && (o->readahead < 4096 || o->readahead > (16u << 20))))
				FAIL("--readahead %s: expected a multiple of 4K from 4K to 16M, or 0 "
				     "for the kernel's default", optarg);
			break;
		case OPT_SCAN_THREADS:
			if (options_parse_uint(optarg, 1, 1024, &o->scan_threads))
				FAIL("--scan-threads %s: expected a number from 1 to 1024", optarg);
			break;
		case OPT_TIMEOUT:
			if (parse_seconds(optarg, &o->timeout))
				FAIL("--timeout %s: expected seconds (a number >= 0)", optarg);
			break;
		case OPT_NO_WATCH:
			o->watch = 0;
			break;
		case OPT_OPEN:
			o->handle_open = 1;
			break;
		case OPT_PASSTHROUGH:
			if ((o->passthrough = auto_on_off(optarg)) < 0)
				FAIL("--passthrough %s: expected auto, on or off", optarg);
			break;
		case OPT_STAND_ASIDE:
			if ((o->no_stand_aside = one_of_two(optarg, "off", "auto")) < 0)
				FAIL("--stand-aside %s: expected auto or off", optarg);
			break;
		case OPT_SPREAD:
			if ((o->spread = one_of_two(optarg, "on", "off")) < 0)
				FAIL("--spread %s: expected on or off", optarg);
			break;
		case OPT_FUSE_URING:
			if ((o->fuse_uring = auto_on_off(optarg)) < 0)
				FAIL("--fuse-uring %s: expected auto, on or off", optarg);
			break;
		case OPT_LOG:
			o->log_file = optarg;
			break;
		case OPT_CACHE_SIZE:
			if (options_parse_size(optarg, core_ram_bytes(), &o->cache_size))
				FAIL("--cache-size %s: expected bytes with K/M/G/T, or N%% of RAM", optarg);
			SMALL_BARE("--cache-size", optarg, o->cache_size);
			if (core_ram_bytes() && o->cache_size > core_ram_bytes())
				FAIL("--cache-size %s: more than this machine's RAM (%.1f GiB); the cache "
				     "lives in RAM", optarg, core_ram_bytes() / 1073741824.0);
			o->cache_size_set = 1;
			break;
		case OPT_CACHE_CHUNK:
			if (options_parse_size(optarg, 0, &o->cache_chunk) || !o->cache_chunk ||
			    o->cache_chunk % (128u << 10) || o->cache_chunk > (1ull << 30))
				FAIL("--cache-chunk %s: expected a multiple of 128K up to 1G", optarg);
			break;
		case OPT_VERIFY:
			o->verify = 1;
			break;
		case OPT_SCRUB_RATE:
			if (options_parse_size(optarg, 0, &o->scrub_rate))
				FAIL("--scrub-rate %s: expected bytes per second with K/M/G/T", optarg);
			break;
		case OPT_PREFAULT:
			if (options_parse_size(optarg, 0, &o->prefault_window))
				FAIL("--prefault %s: expected a size with K/M/G/T", optarg);
			break;
		case OPT_NO_PREP:
			o->prep = 0;
			break;
		case OPT_PREP_MEM:
			if (options_parse_size(optarg, core_ram_bytes(), &o->prep_mem) || !o->prep_mem)
				FAIL("--prep-mem %s: expected bytes with K/M/G/T, or N%% of RAM", optarg);
			SMALL_BARE("--prep-mem", optarg, o->prep_mem);
			break;
		case OPT_PREP_THREADS:
			if (options_parse_uint(optarg, 1, 1024, &o->prep_threads))
				FAIL("--prep-threads %s: expected a number from 1 to 1024", optarg);
			break;
		case OPT_PREP_TIMEOUT:
			if (options_parse_uint(optarg, 1, 86400 * 7, &o->prep_timeout))
				FAIL("--prep-timeout %s: expected seconds, 1 or more", optarg);
			break;
		case OPT_PREP_AHEAD:
			if (options_parse_uint(optarg, 1, 1u << 30, &o->prep_ahead))
				FAIL("--prep-ahead %s: expected a number of batches, 1 or more", optarg);
			break;
		case OPT_KEEP_SOURCE_CACHE:
			o->keep_source_cache = 1;
			break;
		case OPT_PREFETCH_MEM:
			if (options_parse_size(optarg, core_ram_bytes(), &o->prefetch_mem))
				FAIL("--prefetch-mem %s: expected a size (K/M/G, or N%% of RAM), or 0", optarg);
			SMALL_BARE("--prefetch-mem", optarg, o->prefetch_mem);
			break;
		case OPT_PREFETCH_WINDOW:
			if (options_parse_uint(optarg, 1, 1u << 24, &o->prefetch_window))
				FAIL("--prefetch-window %s: expected a number of files from 1 to 16777216", optarg);
			break;
		case OPT_ORDER_EXPIRE:
			if (parse_seconds(optarg, &o->order_expire) || o->order_expire < 0.1)
				FAIL("--order-expire %s: expected seconds, at least 0.1", optarg);
			break;
		case OPT_NO_ORDER:
			o->no_order = 1;
			break;
		case OPT_PAGE_CACHE:
			if (!strcmp(optarg, "auto"))
				o->page_cache = PAGE_CACHE_AUTO;
			else if (!strcmp(optarg, "keep"))
				o->page_cache = PAGE_CACHE_KEEP;
			else if (!strcmp(optarg, "drop"))
				o->page_cache = PAGE_CACHE_DROP;
			else
				FAIL("--page-cache %s: expected auto, keep or drop", optarg);
			break;
		case OPT_NO_MEM_WATCH:
			o->no_mem_watch = 1;
			break;
		case OPT_STATE_DIR:
			if (!*optarg)
				FAIL("--state-dir: expected a directory (on tmpfs)");
			o->state_dir = optarg;
			break;
		case OPT_NO_PERSIST:
			o->persist_mode = PERSIST_MODE_OFF;
			break;
		case OPT_PERSIST:
			if (!strcmp(optarg, "crash"))
				o->persist_mode = PERSIST_MODE_CRASH;
			else if (!strcmp(optarg, "always"))
				o->persist_mode = PERSIST_MODE_ALWAYS;
			else if (!strcmp(optarg, "off"))
				o->persist_mode = PERSIST_MODE_OFF;
			else
				FAIL("--persist %s: expected crash, always or off", optarg);
			break;
		case OPT_CACHE_DIR:
			if (!*optarg)
				FAIL("--cache-dir: expected a directory on a local disk");
			if (o->ncache_dirs == sizeof(o->cache_dirs) / sizeof(o->cache_dirs[0]))
				FAIL("--cache-dir %s: at most %u directories", optarg, o->ncache_dirs);
			o->cache_dirs[o->ncache_dirs++] = optarg;
			break;
		case OPT_METRICS_ADDR:
			if (!*optarg || !strchr(optarg, ':'))
				FAIL("--metrics-addr %s: expected HOST:PORT (127.0.0.1:9567), [IPV6]:PORT or :PORT", optarg);
			o->metrics_addr = optarg;
			break;
		case OPT_CACHE_DIR_IO:
			if (!strcmp(optarg, "direct"))
				o->cache_dir_buffered = 0;
			else if (!strcmp(optarg, "buffered"))
				o->cache_dir_buffered = 1;
			else
				FAIL("--cache-dir-io %s: expected direct or buffered", optarg);
			break;
		case OPT_CACHE_DIR_SIZE: {
			uint64_t v;
			if (options_parse_size(optarg, 0, &v) || !v)
				FAIL("--cache-dir-size %s: expected bytes with K/M/G/T, more than 0", optarg);
			SMALL_BARE("--cache-dir-size", optarg, v);
			if (o->ncache_dir_sizes == sizeof(o->cache_dir_sizes) / sizeof(o->cache_dir_sizes[0]))
				FAIL("--cache-dir-size %s: at most %u sizes", optarg, o->ncache_dir_sizes);
			o->cache_dir_sizes[o->ncache_dir_sizes++] = v;
			break;
		}
		case OPT_MANIFEST:
			if (!*optarg)
				FAIL("--manifest: expected a file (built by epochfs-manifest)");
			o->manifest = optarg;
			break;
		case OPT_PEERS:
			if (!*optarg)
				FAIL("--peers: empty list");
			o->peers = optarg;
			break;
		case OPT_PEERS_FILE:
			o->peers_file = optarg;
			break;
		case OPT_RANK: {
			unsigned r;
			if (options_parse_uint(optarg, 0, 1023, &r))
				FAIL("--rank %s: expected a number from 0 to 1023", optarg);
			o->rank = (int)r;
			break;
		}
		case OPT_PEER_PORT: {
			unsigned port;
			if (options_parse_uint(optarg, 1, 65535, &port))
				FAIL("--peer-port %s: expected a port from 1 to 65535", optarg);
			snprintf(o->peer_port, sizeof(o->peer_port), "%u", port);
			break;
		}
		case OPT_PEER_LISTEN:
			o->peer_listen = optarg;
			break;
		case OPT_SECRET_FILE:
			o->secret_file = optarg;
			break;
		case OPT_INSECURE_PEERS:
			o->insecure_peers = 1;
			break;
		case OPT_PEER_TIMEOUT:
			if (parse_seconds(optarg, &o->peer_timeout) || o->peer_timeout < 0.01)
				FAIL("--peer-timeout %s: expected seconds, at least 0.01", optarg);
			break;
		case OPT_CACHE_REMOTE:
			o->cache_remote = 1;
			break;
		case OPT_NO_PEERS:
			o->no_peers = 1;
			break;
		case ':':
			FAIL("%s: missing argument", argv[optind - 1]);
		default:
			if (optopt)
				FAIL("-%c: unknown option (see --help)", optopt);
			FAIL("%s: unknown option (see --help)", argv[optind - 1]);
		}
	}
	if (o->peers && o->peers_file)
		FAIL("--peers and --peers-file: give one of them");
	if (o->secret_file && o->insecure_peers)
		FAIL("--secret-file and --insecure-peers: give one of them");
	if (o->no_peers && (o->peers || o->peers_file))
		FAIL("--no-peers with --peers or --peers-file");
	if (o->persist_mode == PERSIST_MODE_OFF && o->state_dir)
		FAIL("--state-dir with --persist off (or --no-persist): give one of them");
	if (o->ncache_dir_sizes && !o->ncache_dirs)
		FAIL("--cache-dir-size needs --cache-dir");
	/* One budget: what the daemon holds in RAM, given together, fits the
	 * machine (or its memory cgroup). The default cache takes what the
	 * others leave (core_open). With a RAM cache, prefetch staging lives
	 * inside --cache-size (memory_staging_share): it adds nothing. */
	uint64_t ram = core_ram_bytes();
	uint64_t held = (o->cache_size_set && o->cache_size ? o->cache_size : o->prefetch_mem) + o->prep_mem;
	if (ram && o->prefetch_mem > ram)
		FAIL("--prefetch-mem: %.1f GiB, more than this machine's memory (%.1f GiB)", o->prefetch_mem / 1073741824.0,
		     ram / 1073741824.0);
	if (ram && o->prep_mem > ram)
		FAIL("--prep-mem: %.1f GiB, more than this machine's memory (%.1f GiB)", o->prep_mem / 1073741824.0,
		     ram / 1073741824.0);
	if (ram && held > ram)
		FAIL("%s and --prep-mem come to %.1f GiB together, more than this machine's memory (%.1f GiB): "
		     "they share one budget", o->cache_size_set && o->cache_size ? "--cache-size" : "--prefetch-mem",
		     held / 1073741824.0, ram / 1073741824.0);
	if (o->ncache_dir_sizes > 1 && o->ncache_dir_sizes != o->ncache_dirs)
		FAIL("%u --cache-dir-size for %u --cache-dir: give one for all, or one per directory",
		     o->ncache_dir_sizes, o->ncache_dirs);
	if (argc - optind < 2)
		FAIL(argc - optind == 1 ? "missing MOUNTPOINT (see --help)"
					: "missing SOURCE and MOUNTPOINT (see --help)");
	if (argc - optind > 2)
		FAIL("%s: unexpected argument (options go before SOURCE)", argv[optind + 2]);
	o->source = argv[optind];
	o->mountpoint = argv[optind + 1];
	if (!o->source[0] || !o->mountpoint[0])
		FAIL("SOURCE and MOUNTPOINT must not be empty");
	return 0;
}
