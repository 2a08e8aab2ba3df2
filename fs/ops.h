/* ops.h - the FUSE adapter: mounts a struct core and serves it.
 *
 * The only module that includes fuse_lowlevel.h (ops.c, the operation table;
 * ops_session.c, the session and the notifier). It maps kernel requests to
 * core calls and core results to replies, exactly one reply per request.
 * Node numbers: an index entry ID at generation GEN is node (GEN << 32) | ID,
 * so a file that changed under the mount gets a new kernel inode (and an
 * empty page cache) while readers of the old one keep consistent bytes or
 * get EIO; control files use CONTROL_NODE_BIT (control.h).
 */
#ifndef EPOCHFS_OPS_H
#define EPOCHFS_OPS_H

#include "core/core.h"

/* Which channel the kernel's requests come by (--fuse-uring). */
enum ops_uring {
	OPS_URING_AUTO = 0,         /* io_uring when the kernel offers it, else /dev/fuse */
	OPS_URING_ON,               /* the same, and the kernel's switch set first (root) */
	OPS_URING_OFF,              /* /dev/fuse always */
};

struct ops_config {
	const char *mountpoint;
	const char *fuse_opts;      /* user's -o options, may be "" */
	const char *log_file;       /* NULL: messages go nowhere once detached */
	const char *fsname;         /* the mount's source field: SOURCE's absolute path */
	unsigned threads;
	unsigned request_slice_us;  /* 0: the kernel's default slice */
	uint64_t readahead;         /* bytes, set on the mount's bdi; 0: the kernel's */
	int foreground, debug;
	int handle_open;
	int read_only;              /* mount "ro": no .prep/ to write specs to */
	int fuse_uring;             /* enum ops_uring */
};

struct ops_session;

/* Checks the FUSE options and prepares a session; mounts nothing. Returns 0
 * and *OUT, -EINVAL after logging, in one line, which options libfuse
 * refused, or another -errno after logging why (the --log file cannot be
 * opened). */
int ops_session_new(const struct ops_config *cfg, struct ops_session **out);

/* Mounts, detaches unless foreground (fuse_daemonize: the parent exits once
 * the mount is up), calls core_start(C) in the process that stays, serves
 * until unmounted or a SIGINT/SIGTERM/SIGHUP arrives, then unmounts.
 * Returns 0 on a clean end, or -errno (nothing is left mounted). */
int ops_session_run(struct ops_session *s, struct core *c);
void ops_session_free(struct ops_session *s);

/* The release of the libfuse the daemon runs with ("3.18.3"), for
 * --version. */
const char *ops_libfuse_version(void);

#endif
