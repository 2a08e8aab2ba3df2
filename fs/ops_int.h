/* ops_int.h - what the FUSE adapter's two files share: ops.c (the
 * operation table: one handler per kernel request) and ops_session.c (the
 * session around it: options, mount, detach, loop, and the notices the
 * daemon sends the kernel outside any request). Not for other modules:
 * ops.h is the contract. Both files include fuse_lowlevel.h; nothing else
 * in the daemon does.
 */
#ifndef EPOCHFS_OPS_INT_H
#define EPOCHFS_OPS_INT_H

/* libfuse 3.17's API: 64-bit capability flags (capable_ext, set through
 * fuse_set_feature_flag), passthrough. The Makefile links the system's
 * libfuse when it is that new, else builds one (docs/install.md). */
#define FUSE_USE_VERSION 317
#include <fuse_lowlevel.h>
#include <stddef.h>

#if FUSE_VERSION < FUSE_MAKE_VERSION(3, 17)
#error "epochfs needs libfuse 3.17 or newer: see docs/install.md (the Makefile builds one)"
#endif

#include "ops.h"
#include "util/worker.h"

/* Background requests the kernel may have in flight (its default: 12). */
#define OPS_MAX_BACKGROUND 128

struct change;
struct drop;

/* Changes are told to the kernel by a thread of their own, never by the
 * thread that found them: that may be a FUSE worker inside a LOOKUP of the
 * very directory whose dentry the notice invalidates (the kernel would wait
 * for the LOOKUP, the LOOKUP for the notice), or the reader of a page the
 * notice must drop. */
struct notifier {
	struct worker w;            /* the thread; its lock guards the rings */
	struct change *q;           /* ring, w.lock */
	size_t head, len, cap;
	struct drop *d;             /* ring of page drops, w.lock, in due order */
	size_t dhead, dlen;
};

struct ops_session {
	struct ops_config cfg;
	struct fuse_session *se;
	struct core *c;
	int log_fd;
	int no_opendir;             /* kernel can skip OPENDIR */
	int readahead_set;          /* the bdi took --readahead's window (INIT says it too) */
	const char *uring_off;      /* why libfuse was not asked for io_uring; NULL: it was */
	struct notifier nt;
};

/* ops.c: the operation table fuse_session_new() is given. */
extern const struct fuse_lowlevel_ops ops_table;

#endif
