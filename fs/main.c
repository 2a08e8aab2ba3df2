/* main.c - the epochfs daemon: options, checks, scan, mount, serve.
 *
 * Everything a user can get wrong is checked before anything is mounted,
 * each with one line naming the problem: the options, SOURCE, MOUNTPOINT,
 * /dev/fuse, the FUSE -o options (libfuse checks those before the scan, so a
 * typo never costs a million-file scan). Exit status: 0 after a clean
 * unmount or SIGINT/SIGTERM, 1 on any error, 2 on a usage error.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/peer.h"
#include "core/core.h"
#include "ops.h"
#include "options.h"
#include "store/path.h"
#include "util/log.h"
#include "util/sched.h"
#include "util/version.h"

static struct core *debug_core;

/* SIGUSR2 with EPOCHFS_DEBUG_HOOKS=1: ask the cache's background thread to corrupt one
 * cached item (tests only). write(2) is async-signal-safe. */
static void debug_signal(int sig)
{
	int fd = debug_core ? core_debug_fd(debug_core) : -1;
	int saved = errno;

	(void)sig;
	if (fd >= 0 && write(fd, "c", 1) < 0) {
		/* the pipe is full: the command is dropped */
	}
	errno = saved;
}

static int check_dir(const char *what, const char *path)
{
	struct stat sb;

	if (stat(path, &sb) < 0) {
		log_error("%s: %s (%s)", path, strerror(errno), what);
		return -1;
	}
	if (!S_ISDIR(sb.st_mode)) {
		log_error("%s: not a directory (%s)", path, what);
		return -1;
	}
	return 0;
}

/* A daemon that died (kill -9, OOM) leaves its mount behind, dead: every
 * access fails with ENOTCONN until someone unmounts it, so a restart (by
 * systemd, by mount -a) would fail on it. If MOUNTPOINT is exactly such a
 * dead fuse.epochfs mount, it is detached (as root, else by fusermount3 -uz)
 * with one line saying so. Nothing else is touched: a live mount answers
 * statfs, and a dead mount of another file system is left to its owner.
 * (statfs, not stat: the kernel may answer stat of the root from its
 * attribute cache long after the daemon died; statfs always asks it.)
 * 0 (nothing to do, or done), -1 (logged). */
static int clear_dead_mount(const char *mountpoint)
{
	char dir[PATH_MAX], abs[PATH_MAX + 256], type[64];
	const char *base;
	struct statfs sf;

	if (statfs(mountpoint, &sf) == 0 || errno != ENOTCONN)
		return 0;
	snprintf(dir, sizeof(dir), "%s", mountpoint);
	for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
		dir[n - 1] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash) {
		base = dir;
		if (!getcwd(abs, PATH_MAX))
			return 0;
		size_t l = strlen(abs);
		snprintf(abs + l, sizeof(abs) - l, "%s%s", abs[l - 1] == '/' ? "" : "/", base);
	} else {
		*slash = '\0';
		base = slash + 1;
		char *parent = realpath(dir[0] ? dir : "/", NULL);
		if (!parent)
			return 0;
		snprintf(abs, sizeof(abs), "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", base);
		free(parent);
	}
	if (path_mount_type("/proc/self/mountinfo", abs, type, sizeof(type)) != 1 ||
	    strcmp(type, "fuse.epochfs"))
		return 0;           /* check_dir says what is wrong */
	if (umount2(abs, MNT_DETACH) < 0) {
		int err = errno;
		char a0[] = "fusermount3", a1[] = "-u", a2[] = "-z";
		char *argv[] = { a0, a1, a2, abs, NULL };
		pid_t pid;
		int st = 0;
		if (err != EPERM || posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) ||
		    waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
			log_error("%s: a dead epochfs mount is there (its daemon died) and cannot be "
				  "unmounted: %s; run fusermount3 -uz %s", abs, strerror(err), abs);
			return -1;
		}
	}
	log_warn("%s: a dead epochfs mount was there (its daemon died); unmounted it", abs);
	return 0;
}

/* Refuses a MOUNTPOINT on SOURCE, inside it, or holding it, also when
 * SOURCE is itself (a path in) an epochfs mount, whose own SOURCE counts:
 * each would make the daemon wait on the mount it serves. 0, or -1
 * (logged). */
static int check_overlap(const char *source, const char *mountpoint)
{
	char *s = realpath(source, NULL), *m = realpath(mountpoint, NULL), cur[4096];
	int ret = 0;

	if (!s || !m) {
		free(s);
		free(m);
		return 0;           /* check_dir() has reported it */
	}
	snprintf(cur, sizeof(cur), "%s", s);
	for (int depth = 0; depth < 16; depth++) {
		char up[4096];
		if (path_overlap(cur, m)) {
			if (depth)
				log_error("SOURCE %s is read through epochfs from %s, which overlaps MOUNTPOINT "
					  "%s: the daemon would wait on its own mount; mount outside of %s",
					  s, cur, m, cur);
			else
				log_error("SOURCE %s and MOUNTPOINT %s overlap (one is or holds the other): "
					  "the daemon would wait on its own mount; mount outside of %s", s, m, s);
			ret = -1;
			break;
		}
		if (path_epochfs_origin("/proc/self/mountinfo", cur, up, sizeof(up)) <= 0)
			break;
		snprintf(cur, sizeof(cur), "%s", up);
	}
	free(s);
	free(m);
	return ret;
}

/* DIR made canonical where it exists: its deepest existing ancestor
 * resolved, the rest appended (a --cache-dir may be made by the tier). */
static void canonical_dir(const char *dir, char *out, size_t len)
{
	char path[4096], rest[4096] = "";

	snprintf(path, sizeof(path), "%s", dir);
	for (;;) {
		char *r = realpath(path, NULL);
		if (r) {
			snprintf(out, len, "%s%s", r, rest);
			free(r);
			return;
		}
		char *slash = strrchr(path, '/');
		if (!slash || slash == path) {
			snprintf(out, len, "%s", dir);
			return;
		}
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s%s", slash, rest);
		snprintf(rest, sizeof(rest), "%s", tmp);
		*slash = 0;
	}
}

/* Refuses a --cache-dir whose tier directory (DIR/epochfs-tier) is on,
 * inside or around SOURCE (its files would show in the mount, and change
 * the dataset) or MOUNTPOINT (the daemon would wait on its own mount);
 * also --state-dir. 0, or -1 (logged). */
static int check_store_dirs(const struct options *o)
{
	char *s = realpath(o->source, NULL), *m = realpath(o->mountpoint, NULL), d[4200];
	int ret = 0;

	for (unsigned i = 0; i <= o->ncache_dirs && !ret && s && m; i++) {
		const char *what = i < o->ncache_dirs ? "--cache-dir" : "--state-dir";
		const char *dir = i < o->ncache_dirs ? o->cache_dirs[i] : o->state_dir;
		char c[4096];
		if (!dir)
			continue;
		canonical_dir(dir, c, sizeof(c));
		snprintf(d, sizeof(d), "%s%s", c, i < o->ncache_dirs ? "/epochfs-tier" : "");
		if (path_overlap(d, s) || path_overlap(d, m)) {
			log_error("%s %s: %s overlaps %s %s (one is or holds the other): the cache would %s; "
				  "put it elsewhere", what, dir, d, path_overlap(d, s) ? "SOURCE" : "MOUNTPOINT",
				  path_overlap(d, s) ? s : m,
				  path_overlap(d, s) ? "write into the dataset" : "wait on its own mount");
			ret = -1;
		}
	}
	free(s);
	free(m);
	return ret;
}

/* Joins the cluster when a peer list is given (--peers, --peers-file, or
 * SLURM's environment): 0 (with or without peers) or -1 (logged). */
static int setup_peers(const struct options *o, struct core *core)
{
	const char *nodelist = getenv("SLURM_JOB_NODELIST"), *nodeid = getenv("SLURM_NODEID");
	struct cluster cl = { 0 };
	struct peer *p;
	uint8_t key[PEER_KEY_BYTES];
	char err[512];
	long rank = o->rank;
	int r;

	if (o->peers) {
		r = cluster_add_list(&cl, o->peers, o->peer_port, err, sizeof(err));
	} else if (o->peers_file) {
		r = cluster_add_file(&cl, o->peers_file, o->peer_port, err, sizeof(err));
	} else if (!o->no_peers && nodelist && *nodelist && nodeid) {
		char *end;
		r = cluster_add_slurm(&cl, nodelist, o->peer_port, err, sizeof(err));
		if (!r && rank < 0) {
			rank = strtol(nodeid, &end, 10);
			if (!*nodeid || *end || rank < 0 || (unsigned long)rank >= cl.n) {
				snprintf(err, sizeof(err), "SLURM_NODEID=%s: not a node of SLURM_JOB_NODELIST "
					 "(%u nodes)", nodeid, cl.n);
				r = -EINVAL;
			}
		}
	} else {
		const char *lone = o->secret_file ? "--secret-file" : o->rank >= 0 ? "--rank"
				 : o->insecure_peers ? "--insecure-peers" : o->cache_remote ? "--cache-remote"
				 : o->peer_listen ? "--peer-listen" : NULL;
		if (lone) {
			log_error("%s needs a peer list (--peers or --peers-file)", lone);
			return -1;
		}
		return 0;
	}
	if (!r)
		r = cluster_finish(&cl, rank, err, sizeof(err));
	if (r) {
		log_error("%s", err);
		cluster_free(&cl);
		return -1;
	}
	if (cl.n == 1) {
		log_info("the peer list holds only this node: running alone");
		cluster_free(&cl);
		return 0;
	}
	if (o->secret_file) {
		r = peer_load_secret(o->secret_file, key, err, sizeof(err));
		if (r < 0) {
			log_error("%s", err);
			cluster_free(&cl);
			return -1;
		}
		if (r > 0)
			log_warn("%s", err);
	} else if (!o->insecure_peers) {
		log_error("peers need --secret-file FILE (a secret every node shares) or, on a trusted "
			  "network only, --insecure-peers");
		cluster_free(&cl);
		return -1;
	}
	struct peer_opts po = { .cl = &cl, .listen = o->peer_listen, .key = o->secret_file ? key : NULL,
				.insecure = o->insecure_peers, .timeout_s = o->peer_timeout,
				.cache_remote = o->cache_remote };
	r = peer_new(core, &po, &p, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err);
		cluster_free(&cl);
		return -1;
	}
	log_info("node %u of %u (%s)%s", cl.self, cl.n, cl.nodes[cl.self].id,
		 o->insecure_peers ? "; peers NOT authenticated (--insecure-peers)" : "");
	if (getenv("EPOCHFS_DEBUG_HOOKS") && !strcmp(getenv("EPOCHFS_DEBUG_HOOKS"), "1") &&
	    getenv("EPOCHFS_DEBUG_PEER_LIE")) {
		int consistent = !strcmp(getenv("EPOCHFS_DEBUG_PEER_LIE"), "consistent");
		peer_debug_lie(p, consistent ? 2 : 1);
		log_warn("debug hooks: this node corrupts every reply it sends to peers%s",
			 consistent ? ", checksum and seal included" : "");
	}
	cluster_free(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	struct ops_session *sess = NULL;
	struct core *core = NULL;
	struct options o;
	char err[256];
	int ret;

	log_init("epochfs", 0);
	/* Few arenas for the daemon's dozen threads. What item-sized buffers
	 * leave in them goes back to the kernel when memory is tight (the
	 * memory thread's malloc_trim), not by a fixed mmap threshold, which
	 * made every peer hit fault in a fresh buffer. */
	mallopt(M_ARENA_MAX, 4);
	if (options_parse(argc, argv, &o, err, sizeof(err)) < 0) {
		log_error("%s", err);
		return 2;
	}
	if (o.help) {
		options_usage(stdout, "epochfs");
		return 0;
	}
	if (o.version) {
		printf("epochfs %s\nlibfuse %s\n", EPOCHFS_VERSION, ops_libfuse_version());
		return 0;
	}
	log_init("epochfs", o.debug);
	if (clear_dead_mount(o.mountpoint))
		return 1;
	if (check_dir("SOURCE", o.source) || check_dir("MOUNTPOINT", o.mountpoint))
		return 1;
	if (check_overlap(o.source, o.mountpoint) || check_store_dirs(&o))
		return 2;
	if (access("/dev/fuse", R_OK | W_OK) < 0) {
		log_error("/dev/fuse: %s (is the fuse module loaded, and may this user open it?)",
			  strerror(errno));
		return 1;
	}

	char *fsname = realpath(o.source, NULL);
	struct ops_config oc = {
		.mountpoint = o.mountpoint, .fuse_opts = o.fuse_opts, .log_file = o.log_file,
		.fsname = fsname, .threads = o.threads, .request_slice_us = o.request_slice_us,
		.readahead = o.readahead,
		.foreground = o.foreground,
		.debug = o.debug, .handle_open = o.handle_open, .read_only = !o.prep,
		.fuse_uring = o.fuse_uring == OPTIONS_URING_ON ? OPS_URING_ON :
			      o.fuse_uring == OPTIONS_URING_OFF ? OPS_URING_OFF : OPS_URING_AUTO,
	};
	if (!fsname) {
		log_error("SOURCE %s: %s", o.source, strerror(errno));
		return 1;
	}
	ret = ops_session_new(&oc, &sess);
	free(fsname);
	if (ret == -ENOMEM)
		log_error("out of memory");
	if (ret < 0)
		return 1;   /* any other failure was reported where it happened */

	struct core_opts co = {
		.source = o.source, .scan_threads = o.scan_threads, .progress = 1, .watch = o.watch,
		.timeout = o.timeout,
		.cache_default = !o.cache_size_set, .cache_size = o.cache_size,
		.cache_chunk = o.cache_chunk, .verify = o.verify, .scrub_rate = o.scrub_rate,
		.prefault_window = o.prefault_window, .prep = o.prep, .prep_mem = o.prep_mem,
		.prep_threads = o.prep_threads, .prep_timeout = o.prep_timeout,
		.prep_ahead = o.prep_ahead,
		.keep_source_cache = o.keep_source_cache, .manifest = o.manifest,
		.no_order = o.no_order, .prefetch_mem = o.prefetch_mem, .prefetch_window = o.prefetch_window,
		.order_expire = o.order_expire,
		.page_cache = o.page_cache, .no_mem_watch = o.no_mem_watch,
		.persist = o.persist_mode, .state_dir = o.state_dir, .mountpoint = o.mountpoint,
		.cache_dirs = o.cache_dirs, .ncache_dirs = o.ncache_dirs,
		.cache_dir_sizes = o.cache_dir_sizes, .ncache_dir_sizes = o.ncache_dir_sizes,
		.cache_dir_buffered = o.cache_dir_buffered, .metrics_addr = o.metrics_addr,
		.passthrough = o.passthrough, .no_stand_aside = o.no_stand_aside,
		.spread = o.spread,
	};
	/* Before core_open(): the SSD tier's completion thread starts there. */
	sched_slice_configure((uint64_t)o.request_slice_us * 1000);
	if (core_open(&co, &core) < 0) {
		ops_session_free(sess);
		return 1;
	}
	if (setup_peers(&o, core) < 0) {
		core_close(core);
		ops_session_free(sess);
		return 1;
	}
	if (getenv("EPOCHFS_DEBUG_HOOKS") && !strcmp(getenv("EPOCHFS_DEBUG_HOOKS"), "1")) {
		struct sigaction sa = { .sa_handler = debug_signal, .sa_flags = SA_RESTART };
		sigemptyset(&sa.sa_mask);
		debug_core = core;
		sigaction(SIGUSR2, &sa, NULL);
		log_warn("debug hooks armed: SIGUSR2 corrupts one cached item");
	}
	ret = ops_session_run(sess, core);
	core_close(core);
	ops_session_free(sess);
	return ret ? 1 : 0;
}
