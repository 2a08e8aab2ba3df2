/* ops_session.c - the FUSE session around the operation table; see ops.h
 * for the contract, ops_int.h for what it shares with ops.c.
 *
 * It checks the FUSE options (libfuse's complaint said as one line of
 * ours), mounts, detaches, starts the core, runs the multithreaded loop
 * and unmounts. Between, the notifier thread tells the kernel what changed
 * under the mount and drops files' pages once read, and the prefetcher's
 * probes ask the kernel what it caches.
 *
 * DESIGN
 * - Threads only after fuse_daemonize(): it forks, and a thread started
 *   before it would be left in the parent.
 * - The request threads ask for a short CPU time slice (--request-slice,
 *   util/sched.h): set on the main thread just before the loop, so the
 *   threads libfuse starts inherit it; of the core's threads, started
 *   before, only those that finish requests (io_uring completions, the
 *   peer thread) take it, the others keep the default.
 * - The readahead window (--readahead) is written to the mount's bdi in
 *   sysfs between the mount and the loop: the kernel sent INIT with the old
 *   window, and takes the smaller of the bdi's and INIT's reply, so op_init
 *   answers with the new one too (ops.c).
 * - FUSE over io_uring (--fuse-uring): libfuse is asked for it (its
 *   io_uring option) unless off; op_init (ops.c) keeps it when the kernel
 *   offers it. The kernel offers it only while the fuse module's
 *   enable_uring switch is on: `on` sets the switch before the mount
 *   (root), auto takes the host as it is. libfuse starts one ring thread a
 *   CPU after INIT and falls back to /dev/fuse if that fails; its message
 *   is watched for (watch_fuse_log) so stats.json says which is in use.
 * - Notices go out from the notifier thread (a struct worker, util/
 *   worker.h), never from the thread that found the change: that may be a
 *   FUSE worker inside a LOOKUP of the very directory the notice
 *   invalidates. The callbacks only queue, under the worker's lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops_int.h"
#include "store/path.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/notify.h"
#include "util/sched.h"
#include "util/worker.h"

/* A change the kernel must hear of (struct notifier). */
struct change {
	uint64_t parent, old;
	char name[256];
};

/* A file whose pages the kernel is asked to drop once DUE (struct notifier):
 * it was read to its end while memory is tight (core_set_copy_drop). The
 * delay lets its reader finish with the pages first. */
struct drop {
	uint64_t node;
	double due;
};

#define DROP_QUEUE 65536            /* drops waiting at most; more are not queued */

/* ---- what the kernel caches above the mount (the prefetcher asks) ---- */

/* Asks the kernel for the first page of NODE's file: a reply with bytes
 * means it caches the file (a training read takes a file whole). */
static int probe_kernel(void *arg, uint64_t node, void *cookie)
{
	struct ops_session *s = arg;

	return fuse_lowlevel_notify_retrieve(s->se, node, 4096, 0, cookie);
}

/* ---- changes under the mount ---- */

/* Drops what the kernel holds of a changed entry: its dentry, so the next
 * lookup returns the new generation's node (an empty page cache) or
 * ENOENT; and the old node's pages and attributes, so a reader still
 * holding it gets no stale page more and reads EIO from the daemon.
 * Notifier thread. */
static void tell_kernel(struct ops_session *s, const struct change *ch)
{
	fuse_lowlevel_notify_inval_entry(s->se, ch->parent, ch->name, strlen(ch->name));
	fuse_lowlevel_notify_inval_inode(s->se, ch->old, 0, 0);
}

static void *notifier_main(void *arg)
{
	struct ops_session *s = arg;
	struct notifier *n = &s->nt;

	pthread_mutex_lock(&n->w.lock);
	for (;;) {
		while (!n->len && !n->dlen && worker_wait(&n->w, WORKER_FOREVER))
			;
		if (!worker_running(&n->w))
			break;
		if (n->len) {
			struct change ch = n->q[n->head];
			n->head = (n->head + 1) % n->cap;
			n->len--;
			pthread_mutex_unlock(&n->w.lock);
			tell_kernel(s, &ch);
			pthread_mutex_lock(&n->w.lock);
			continue;
		}
		struct drop d = n->d[n->dhead];
		double now = clock_now();
		if (d.due > now) {
			/* Sleep until the oldest is due, or something new comes. */
			worker_wait(&n->w, d.due - now);
			continue;
		}
		n->dhead = (n->dhead + 1) % DROP_QUEUE;
		n->dlen--;
		pthread_mutex_unlock(&n->w.lock);
		/* Pages and attributes (the kernel has no call for pages alone):
		 * the next open of the file asks for its attributes again. */
		fuse_lowlevel_notify_inval_inode(s->se, d.node, 0, 0);
		pthread_mutex_lock(&n->w.lock);
	}
	pthread_mutex_unlock(&n->w.lock);
	return NULL;
}

/* The core asks: drop NODE's pages a moment from now. Read paths; never blocks
 * for long (one mutex). */
static void on_copy_drop(void *arg, uint64_t node)
{
	struct ops_session *s = arg;
	struct notifier *n = &s->nt;

	pthread_mutex_lock(&n->w.lock);
	if (!n->d)
		n->d = calloc(DROP_QUEUE, sizeof(*n->d));
	if (n->d && n->dlen < DROP_QUEUE) {
		n->d[(n->dhead + n->dlen) % DROP_QUEUE] = (struct drop){ .node = node,
									   .due = clock_now() + core_copy_drop_delay(s->c) };
		if (!n->dlen++)
			worker_wake(&n->w);
	}
	pthread_mutex_unlock(&n->w.lock);
}

static void on_change(void *arg, uint64_t parent, const char *name, uint64_t old)
{
	struct ops_session *s = arg;
	struct notifier *n = &s->nt;

	pthread_mutex_lock(&n->w.lock);
	if (n->len == n->cap) {
		size_t cap = n->cap ? n->cap * 2 : 64;
		struct change *q = malloc(cap * sizeof(*q));
		if (!q) {
			/* The entry's generation moved anyway: the kernel's next
			 * lookup of it (within --timeout) finds the new node. */
			pthread_mutex_unlock(&n->w.lock);
			return;
		}
		for (size_t i = 0; i < n->len; i++)
			q[i] = n->q[(n->head + i) % n->cap];
		free(n->q);
		n->q = q;
		n->head = 0;
		n->cap = cap;
	}
	struct change *ch = &n->q[(n->head + n->len) % n->cap];
	ch->parent = parent;
	ch->old = old;
	snprintf(ch->name, sizeof(ch->name), "%s", name);
	n->len++;
	worker_wake(&n->w);
	pthread_mutex_unlock(&n->w.lock);
}

/* ---- session ---- */

/* What libfuse says while it checks the options: kept (it comes in
 * fragments) instead of printed, so that a refusal is one line of ours.
 * Installed only around fuse_session_new, on the main thread, before any
 * other thread of the daemon exists. */
static char fuse_said[1024];

static void keep_fuse_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
	size_t used = strlen(fuse_said);

	(void)level;
	if (used < sizeof(fuse_said) - 1)
		vsnprintf(fuse_said + used, sizeof(fuse_said) - used, fmt, ap);
}

/* One line for what libfuse refused: "unknown mount option(s): a,b" for
 * options it does not know (it wrote "fuse: unknown option(s): `-o a,b'"),
 * else its own words. */
static void report_refusal(void)
{
	static const char unknown[] = "fuse: unknown option(s): `";
	char *m = fuse_said, *end;

	m[strcspn(m, "\n")] = '\0';
	if (!strncmp(m, unknown, sizeof(unknown) - 1)) {
		m += sizeof(unknown) - 1;
		if ((end = strrchr(m, '\'')))
			*end = '\0';
		if (!strncmp(m, "-o ", 3))
			m += 3;
		log_error("unknown mount option(s): %s (see epochfs --help)", m);
		return;
	}
	if (!strncmp(m, "fuse: ", 6))
		m += 6;
	log_error("invalid mount options: %s", m[0] ? m : "refused by libfuse");
}

/* ---- FUSE over io_uring (--fuse-uring) ---- */

#define URING_SWITCH "/sys/module/fuse/parameters/enable_uring"
/* Requests in flight a ring (one a CPU) holds; libfuse's default is 8.
 * Reads the daemon parks (a .prep/ batch not made yet, a load in flight)
 * hold an entry each, and a CPU whose entries are all parked queues its
 * other requests in the kernel. Each entry's buffer is virtual memory of
 * libfuse's request size (1 MiB); what a reply writes becomes resident. */
#define URING_DEPTH 16

/* The kernel's switch: 1 on, 0 off, -ENOENT when the kernel has no FUSE
 * over io_uring, or another -errno. */
static int uring_switch(void)
{
	char v[4] = "";
	int fd = open(URING_SWITCH, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), err = 0;

	if (fd < 0)
		return -errno;
	if (read(fd, v, sizeof(v) - 1) < 1)
		err = -EIO;
	close(fd);
	return err ? err : (v[0] == 'Y' || v[0] == '1');
}

/* --fuse-uring on: the switch on, or -errno after one line saying why. */
static int uring_turn_on(void)
{
	int on = uring_switch(), fd, err = 0;

	if (on == 1)
		return 0;
	if (on == -ENOENT) {
		log_error("--fuse-uring on: this kernel has no FUSE over io_uring (Linux 6.14 or newer, "
			  "built with CONFIG_FUSE_IO_URING); --fuse-uring auto uses /dev/fuse");
		return -EOPNOTSUPP;
	}
	fd = open(URING_SWITCH, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || write(fd, "Y", 1) != 1)
		err = -errno;
	if (fd >= 0)
		close(fd);
	if (err || uring_switch() != 1) {
		log_error("--fuse-uring on: cannot turn on the kernel's switch (" URING_SWITCH "): %s; "
			  "as root: echo Y > " URING_SWITCH ", or --fuse-uring auto",
			  strerror(err ? -err : EIO));
		return err ? err : -EIO;
	}
	log_info("--fuse-uring on: turned on the kernel's FUSE over io_uring (" URING_SWITCH ")");
	return 0;
}

/* Whether this session asks libfuse for io_uring (then its options in OPTS
 * get libfuse's io_uring options) and, if not, why (S->uring_off). 0, or
 * -errno after one line when --fuse-uring on cannot be had. */
static int uring_ask(struct ops_session *s, const struct ops_config *cfg, char *opts, size_t size)
{
	/* auto_unmount: fusermount3 unmounts a dead daemon's mount only if
	 * the connection is already gone when the daemon's socket closes; over
	 * io_uring the kernel ends it from the ring's teardown, about 30 ms
	 * after the process (measured), and the mount stayed. */
	const char *o = cfg->fuse_opts ? cfg->fuse_opts : "";
	int unmount = 0;

	for (const char *p = o; *p; p += strcspn(p, ","), p += *p == ',')
		unmount |= !strncmp(p, "auto_unmount", 12) && (p[12] == ',' || !p[12]);
	if (cfg->fuse_uring == OPS_URING_OFF) {
		s->uring_off = "dev: --fuse-uring off";
		return 0;
	}
	if (unmount) {
		if (cfg->fuse_uring == OPS_URING_ON) {
			log_error("--fuse-uring on: not with -o auto_unmount (over io_uring a killed daemon's "
				  "connection ends after fusermount3 looks, and the mount would stay)");
			return -EINVAL;
		}
		s->uring_off = "dev: -o auto_unmount (over io_uring a killed daemon's mount would stay)";
		return 0;
	}
#ifdef FUSE_CAP_OVER_IO_URING
	int err;

	if (cfg->fuse_uring == OPS_URING_ON && (err = uring_turn_on()) < 0)
		return err;
	size_t used = strlen(opts);
	snprintf(opts + used, size - used, ",io_uring,io_uring_q_depth=%d", URING_DEPTH);
	return 0;
#else
	(void)opts;
	(void)size;
	if (cfg->fuse_uring == OPS_URING_ON) {
		log_error("--fuse-uring on: libfuse %s has no FUSE over io_uring (3.18 or newer: "
			  "make LIBFUSE=built, docs/install.md)", fuse_pkgversion());
		return -EOPNOTSUPP;
	}
	s->uring_off = "dev: this libfuse has no FUSE over io_uring (3.18 or newer)";
	return 0;
#endif
}

/* libfuse's messages once the session exists: printed as before (to the
 * log once detached), and its word that the rings did not start (it then
 * serves through /dev/fuse) is told to stats.json. One session a process. */
static struct core *uring_core;

static void watch_fuse_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char m[512];

	(void)level;
	vsnprintf(m, sizeof(m), fmt, ap);
	if (strstr(m, "io-uring") && strstr(m, "fail")) {
		struct core *c = __atomic_load_n(&uring_core, __ATOMIC_ACQUIRE);

		if (c)
			core_set_transport(c, "dev: io_uring did not start (the daemon's log has libfuse's reason)");
	}
	fputs(m, stderr);
}

int ops_session_new(const struct ops_config *cfg, struct ops_session **out)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct ops_session *s;
	char opts[1200 + 2 * 4096], *w;
	int err;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->log_fd = -1;
	if ((err = worker_init(&s->nt.w)) < 0) {
		free(s);
		return err;
	}
	/* fsname=SOURCE (commas and backslashes escaped for libfuse's option
	 * parser): df and /proc/self/mountinfo show what is mounted, and a
	 * later epochfs finds the SOURCE behind a mount it is asked to read.
	 * A read-only mount's "ro" goes last: libfuse keeps the last of ro and
	 * rw, and mount(8) passes "rw" to its helpers unless told "ro". */
	w = opts + sprintf(opts, "default_permissions,subtype=epochfs,fsname=");
	for (const char *p = cfg->fsname ? cfg->fsname : "epochfs"; *p && w < opts + 4096 * 2; p++) {
		if (*p == ',' || *p == '\\')
			*w++ = '\\';
		*w++ = *p;
	}
	snprintf(w, sizeof(opts) - (size_t)(w - opts), "%s%s%s", cfg->fuse_opts && cfg->fuse_opts[0] ? "," : "",
		 cfg->fuse_opts ? cfg->fuse_opts : "", cfg->read_only ? ",ro" : "");
	if ((err = uring_ask(s, cfg, opts, sizeof(opts))) < 0) {
		ops_session_free(s);
		return err;
	}
	if (fuse_opt_add_arg(&args, "epochfs") || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, opts) || (cfg->debug && fuse_opt_add_arg(&args, "-d"))) {
		fuse_opt_free_args(&args);
		ops_session_free(s);
		return -ENOMEM;
	}
	fuse_said[0] = '\0';
	fuse_set_log_func(keep_fuse_log);
	s->se = fuse_session_new(&args, &ops_table, sizeof(ops_table), s);
	fuse_set_log_func(NULL);            /* libfuse's own again */
	fuse_opt_free_args(&args);
	if (!s->se) {
		report_refusal();
		ops_session_free(s);
		return -EINVAL;
	}
	if (cfg->log_file) {
		s->log_fd = open(cfg->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (s->log_fd < 0) {
			err = -errno;
			log_error("%s: cannot open log file: %s", cfg->log_file, strerror(-err));
			ops_session_free(s);
			return err;
		}
	}
	*out = s;
	return 0;
}

/* The calling thread, and so every request thread libfuse starts from it,
 * asks for the configured slice; what it got goes to stats.json. */
static void request_slice(struct ops_session *s, struct core *c)
{
	uint64_t want = (uint64_t)s->cfg.request_slice_us * 1000, got;
	int err;

	if (!want)
		return;
	/* Not warnings: the daemon serves as well as before, only without
	 * the gain; --request-slice 0 silences them. */
	if ((err = sched_slice_for_requests()) < 0) {
		log_info("--request-slice: no %u us time slice for the request threads (%s: %s); "
			 "they keep the kernel's", s->cfg.request_slice_us, strerror(-err),
			 err == -EINVAL ? "the daemon runs under a policy other than SCHED_OTHER or "
			 "SCHED_BATCH" : "the kernel or a sandbox refused it");
		return;
	}
	got = sched_slice_get();
	if (got != want) {
		log_info("--request-slice: this kernel keeps its own time slice (%llu ns; Linux 6.12 "
			 "takes one from a thread)", (unsigned long long)got);
		return;
	}
	if (sched_slice_resets_on_fork()) {
		log_info("--request-slice: the daemon runs with SCHED_RESET_ON_FORK, so the request "
			 "threads start on the kernel's time slice");
		return;
	}
	core_set_request_slice(c, got);
}

/* Sets the readahead window of the mount at ABS (its canonical path, or
 * NULL) on its bdi. Called after the mount, before the loop: nothing may
 * touch the mount point here, its first request would wait for a loop not
 * yet running. A refusal is one info line: reads stay correct, a file over
 * the kernel's 128K costs one more request. */
static void set_readahead(struct ops_session *s, struct core *c, const char *abs)
{
	char dev[32], path[96], val[32];
	unsigned long long kb = (unsigned long long)(s->cfg.readahead >> 10);
	int fd, n, err = 0;

	if (!kb)
		return;
	if (!abs || path_mount_dev("/proc/self/mountinfo", abs, dev, sizeof(dev)) != 1) {
		log_info("--readahead: the mount's device is not in /proc/self/mountinfo; the "
			 "kernel's readahead window stays");
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	n = snprintf(val, sizeof(val), "%llu\n", kb);
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		err = errno;
	} else {
		errno = 0;              /* a short write sets none */
		if (write(fd, val, (size_t)n) != n)
			err = errno ? errno : EIO;
	}
	if (fd >= 0)
		close(fd);
	if (err) {
		log_info("--readahead: cannot set %s to %llu (%s); the kernel's window stays, and a "
			 "file larger than it takes more than one read request", path, kb,
			 strerror(err));
		return;
	}
	s->readahead_set = 1;
	core_set_readahead(c, (uint64_t)kb << 10);
}

int ops_session_run(struct ops_session *s, struct core *c)
{
	/* Resolved before the mount: afterwards the last component is the
	 * mount's own root, and looking at it waits for the loop. */
	char *abs = s->cfg.readahead ? realpath(s->cfg.mountpoint, NULL) : NULL;
	struct fuse_loop_config *lc;
	int ret;

	s->c = c;
	if (fuse_set_signal_handlers(s->se) != 0) {
		free(abs);
		return -EIO;
	}
	/* A stop signal during the mount would interrupt libfuse's wait for
	 * fusermount3 (EINTR: "fuse: waitpid", the mount fails, exit 1; seen
	 * once in CI, SIGTERM sent as the mount appeared). Held on this thread
	 * meanwhile, it goes to another or comes at the unblock; either way
	 * the loop then ends at once, cleanly. */
	sigset_t stop, old_mask;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, &old_mask);
	int mounted = fuse_session_mount(s->se, s->cfg.mountpoint) == 0;
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	if (!mounted) {
		fuse_remove_signal_handlers(s->se);
		free(abs);
		return -EIO;
	}
	set_readahead(s, c, abs);
	free(abs);
	if (!s->cfg.foreground) {
		fuse_daemonize(0);
		if (s->log_fd >= 0)
			dup2(s->log_fd, STDERR_FILENO);
	}
	/* Threads only now: fuse_daemonize() forks. */
	lc = fuse_loop_cfg_create();
	core_set_change_cb(c, on_change, s);
	core_set_probe(c, probe_kernel, s);
	core_set_copy_drop(c, on_copy_drop, s);
	if (worker_start(&s->nt.w, 1, notifier_main, s) < 0 || core_start(c) < 0) {
		ret = -EIO;
	} else if (!lc) {
		ret = -ENOMEM;
	} else {
		request_slice(s, c);
		__atomic_store_n(&uring_core, c, __ATOMIC_RELEASE);
		fuse_set_log_func(watch_fuse_log);
		fuse_loop_cfg_set_clone_fd(lc, 1);
		fuse_loop_cfg_set_max_threads(lc, s->cfg.threads);
		fuse_loop_cfg_set_idle_threads(lc, s->cfg.threads);
		ret = fuse_session_loop_mt(s->se, lc);
		/* A signal is a requested, clean end. */
		if (ret == SIGINT || ret == SIGTERM || ret == SIGHUP || ret == -SIGINT ||
		    ret == -SIGTERM || ret == -SIGHUP)
			ret = 0;
		else if (ret > 0)
			ret = -EIO;
	}
	if (lc)
		fuse_loop_cfg_destroy(lc);
	core_set_change_cb(c, NULL, NULL);
	notify_send("STOPPING=1\nSTATUS=unmounting");
	worker_stop(&s->nt.w);
	fuse_session_unmount(s->se);
	fuse_remove_signal_handlers(s->se);
	fuse_set_log_func(NULL);
	__atomic_store_n(&uring_core, NULL, __ATOMIC_RELEASE);
	return ret;
}

const char *ops_libfuse_version(void)
{
	return fuse_pkgversion();
}

void ops_session_free(struct ops_session *s)
{
	if (!s)
		return;
	if (s->se)
		fuse_session_destroy(s->se);
	if (s->log_fd >= 0)
		close(s->log_fd);
	worker_destroy(&s->nt.w);
	free(s->nt.q);
	free(s->nt.d);
	free(s);
}
