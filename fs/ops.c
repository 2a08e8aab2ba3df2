/* ops.c - the FUSE operation table over struct core; see ops.h.
 *
 * A thin adapter: each handler turns a kernel request into one core call
 * (core.h, by node number; the core keeps the dataset, .epochfs/ and .prep/
 * apart) and the result into exactly one reply. Nothing here knows the
 * index, SOURCE's files or the namespaces' node layouts. The session around
 * the table (mount, loop, the notifier thread) is ops_session.c's.
 *
 * DESIGN (figures in docs/design.md):
 * - open() answers ENOSYS once (FUSE_CAP_NO_OPEN_SUPPORT): the kernel then
 *   opens files itself with keep_cache and sends neither OPEN nor RELEASE,
 *   and flush is unimplemented so FLUSH stops too. A warm file costs the
 *   daemon nothing at all. --open restores per-open round trips, and so
 *   does kernel passthrough when the core says the mount uses it (INIT):
 *   an OPEN of a file the RAM cache holds whole is answered with a backing
 *   file (the cache's memfd), and the kernel reads it with no round trip.
 * - opendir likewise (FUSE_CAP_NO_OPENDIR_SUPPORT): listings are cached.
 * - Entry and attribute timeouts are what the core says is left of each
 *   entry's check against SOURCE (core_attr.valid); changes arrive through
 *   the core's change callback and are told to the kernel by the notifier.
 * - Reads are asynchronous: the handler hands the read to the core and
 *   returns; the reply is sent from whichever thread completes it.
 * - INIT asks the kernel for what libfuse 3.14 asked for, no more (the
 *   flags are the same on the wire), and FUSE_PASSTHROUGH when the mount
 *   uses it (core_passthrough_start: stats.json's "passthrough", one log
 *   line). Its max_readahead is --readahead's window, which ops_session.c
 *   wrote to the mount's bdi before the loop: the kernel keeps the smaller.
 * - Every write-type operation is the core's to refuse (EROFS) or take
 *   (.prep/ spec files). So the mount is "ro" only with --no-prep; without
 *   it, an open for writing succeeds (the kernel opens files itself in no-open
 *   mode) and the first write or truncate fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops_int.h"
#include "util/log.h"
#include "util/notify.h"

static struct ops_session *S(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct core *C(fuse_req_t req)
{
	return S(req)->c;
}

static void to_stat(const struct core_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = a->blksize;
	st->st_blocks = (blkcnt_t)a->blocks;
	st->st_mtim.tv_sec = a->mtime_ns / 1000000000;
	st->st_mtim.tv_nsec = a->mtime_ns % 1000000000;
	st->st_ctim.tv_sec = a->ctime_ns / 1000000000;
	st->st_ctim.tv_nsec = a->ctime_ns % 1000000000;
	st->st_atim = st->st_mtim;
}

static void to_entry(const struct core_attr *a, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->node;
	e->generation = a->generation;
	to_stat(a, &e->attr);
	e->attr_timeout = a->valid;
	e->entry_timeout = a->valid;
}

/* ---- metadata ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ops_session *s = userdata;

	fuse_set_feature_flag(conn, FUSE_CAP_CACHE_SYMLINKS);   /* where the kernel offers it */
	/* Atomic O_TRUNC hands truncation to OPEN, which no-open mode never
	 * sends: the kernel would zero its own idea of the size and tell no
	 * one. Without it an O_TRUNC open sends SETATTR, which answers EROFS
	 * (or truncates a .prep/ spec). */
	fuse_unset_feature_flag(conn, FUSE_CAP_ATOMIC_O_TRUNC);
	/* Passthrough: the core decides (and says why, in one line); using it
	 * means answering OPEN for every file. Writeback caching would turn
	 * it off in the kernel: it stays off. */
	if (core_passthrough_start(s->c, (conn->capable_ext & FUSE_CAP_PASSTHROUGH) != 0)) {
		fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH);
		fuse_unset_feature_flag(conn, FUSE_CAP_WRITEBACK_CACHE);
		s->cfg.handle_open = 1;
	}
	/* FUSE over io_uring: libfuse was asked for it unless --fuse-uring off
	 * (ops_session.c); kept here when the kernel offers it. */
#ifdef FUSE_CAP_OVER_IO_URING
	if (s->uring_off) {
		fuse_unset_feature_flag(conn, FUSE_CAP_OVER_IO_URING);
		core_set_transport(s->c, s->uring_off);
	} else if (!(conn->capable_ext & FUSE_CAP_OVER_IO_URING)) {
		core_set_transport(s->c, "dev: the kernel does not offer io_uring (the fuse module's "
				   "enable_uring is off: --fuse-uring on turns it on, as root)");
	} else {
		fuse_set_feature_flag(conn, FUSE_CAP_OVER_IO_URING);
		core_set_transport(s->c, "io_uring");
	}
#else
	core_set_transport(s->c, s->uring_off);
#endif
	s->no_opendir = (conn->capable_ext & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	if (!(conn->capable_ext & FUSE_CAP_NO_OPEN_SUPPORT) && !s->cfg.handle_open) {
		log_warn("the kernel cannot skip open(); every open costs a round trip");
		s->cfg.handle_open = 1;
	}
	conn->time_gran = 1;
	/* The kernel keeps the smaller of its bdi's window (ops_session.c
	 * raised it) and this; a window the bdi did not take stays the
	 * kernel's, rather than be lowered here alone. */
	if (s->readahead_set)
		conn->max_readahead = (unsigned)s->cfg.readahead;
	/* Reads the daemon parks (a .prep/ batch not made yet, a load in
	 * flight) hold background requests (async direct I/O, readahead),
	 * 1 MiB each: at the kernel's default of 12, three parked 4.8 MB
	 * batch reads kept out the reads that would have freed memory, and
	 * every consumer stalled. The kernel caps this for a daemon without
	 * CAP_SYS_ADMIN (fs.fuse.max_user_bgreq). */
	conn->max_background = OPS_MAX_BACKGROUND;
	conn->congestion_threshold = OPS_MAX_BACKGROUND * 3 / 4;
	/* The kernel's first request, answered when this returns: from here on
	 * the mount serves, which is what a Type=notify unit waits for. */
	int err = notify_sendf("READY=1\nSTATUS=serving %s", s->cfg.mountpoint);
	if (err < 0)
		log_warn("NOTIFY_SOCKET: cannot tell the service manager the mount is ready: %s",
			 strerror(-err));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct core_attr a;
	int err = core_lookup(C(req), parent, name, &a);

	/* Valid replies: entry, a negative entry (ino 0, cached while
	 * a.valid holds), or err. */
	if (err == -ENOENT) {
		memset(&e, 0, sizeof(e));
		e.entry_timeout = a.valid;
		fuse_reply_entry(req, &e);
	} else if (err) {
		fuse_reply_err(req, -err);
	} else {
		to_entry(&a, &e);
		fuse_reply_entry(req, &e);
	}
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	core_forget(C(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *list)
{
	for (size_t i = 0; i < count; i++)
		core_forget(C(req), list[i].ino, list[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct core_attr a;
	struct stat st;
	int err = core_getattr(C(req), ino, &a);

	(void)fi;
	/* Valid replies: attr, or err (ESTALE: the file changed since this
	 * node was looked up; a path-based stat then looks it up again). */
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	to_stat(&a, &st);
	fuse_reply_attr(req, &st, a.valid);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char target[4096];
	ssize_t n = core_readlink(C(req), ino, target, sizeof(target));

	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_readlink(req, target);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int err = core_statfs(C(req), &sv);

	(void)ino;
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_statfs(req, &sv);
}

/* One attribute, computed when asked and never listed (so cp -a, rsync -X
 * and tar --xattrs copy nothing): user.epochfs.where (core_where). */
static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	if (strcmp(name, CORE_XATTR_WHERE)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	char *buf = size ? malloc(size) : NULL;
	ssize_t n = size && !buf ? -ENOMEM : core_where(C(req), ino, buf, size);

	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (!size)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	(void)ino;
	if (size == 0)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, -core_access(C(req), ino, mask));
}

/* ---- files ---- */

/* The core registers and drops backing files through these, with the
 * request it answers (libfuse's calls take one). */
static int reg_open(void *ctx, int fd)
{
	int id = fuse_passthrough_open(ctx, fd);

	return id > 0 ? id : -EIO;  /* libfuse said why in a line of its own */
}

static void reg_close(void *ctx, int id)
{
	fuse_passthrough_close(ctx, id);
}

/* The same, after the request is gone (an OPEN whose reply the kernel no
 * longer waited for): through the session's descriptor. */
#ifndef FUSE_DEV_IOC_BACKING_CLOSE
#define FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)      /* linux/fuse.h, 6.9 */
#endif
static void reg_close_session(void *ctx, int id)
{
	uint32_t bid = (uint32_t)id;

	ioctl(fuse_session_fd(((struct ops_session *)ctx)->se), FUSE_DEV_IOC_BACKING_CLOSE, &bid);
}

/* An OPEN being answered: libfuse's file info lives on its caller's stack,
 * so an answer that may come later (a batch made meanwhile) keeps a copy. */
struct open_req {
	fuse_req_t req;
	fuse_ino_t ino;
	struct fuse_file_info fi;
};

static void open_done(void *arg, int err, const struct core_attr *a, int id, uint64_t fh)
{
	struct open_req *o = arg;
	struct fuse_file_info *fi = &o->fi;
	struct ops_session *s = S(o->req);

	if (err) {
		fuse_reply_err(o->req, -err);
		free(o);
		return;
	}
	fi->fh = fh;
	if (id > 0) {
		/* The kernel reads the cache's memfd (or a batch's file); no
		 * keep_cache, so it drops whatever pages earlier reads through
		 * us left on this inode. */
		fi->backing_id = id;
		fi->noflush = 1;
	} else if (a->flags & CORE_F_DIRECT_IO) {
		fi->direct_io = 1;
	} else {
		fi->keep_cache = 1;
		fi->noflush = 1;
	}
	/* Valid replies: open, or err. An interrupted open gets no RELEASE:
	 * what it holds is given back here. */
	if (fuse_reply_open(o->req, fi) == -ENOENT && fh) {
		struct core_backing_reg late = { .open = reg_open, .close = reg_close_session, .ctx = s,
						 .unopened = 1 };
		core_release(s->c, o->ino, fh, &late);
	}
	free(o);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct core_backing_reg reg = { .open = reg_open, .close = reg_close, .ctx = req };
	struct open_req *o;

	if (!S(req)->cfg.handle_open) {
		/* Valid replies: ENOSYS here makes the kernel stop sending OPEN
		 * (and RELEASE) for good; it keeps the page cache by default. */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (!(o = malloc(sizeof(*o)))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	o->req = req;
	o->ino = ino;
	o->fi = *fi;
	/* Valid replies: from open_done(), now or (an open of a .prep/ batch
	 * not made yet, with passthrough) on the prep worker that makes it. */
	core_open_file_async(C(req), ino, fi->flags, &reg, open_done, o);
}

static void read_done(void *arg, ssize_t res, const void *buf)
{
	fuse_req_t req = arg;

	if (res < 0)
		fuse_reply_err(req, res == -ESTALE ? EIO : (int)-res);
	else
		fuse_reply_buf(req, buf, (size_t)res);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)fi;
#ifdef FUSE_CAP_OVER_IO_URING
	if (fuse_req_is_uring(req))
		core_count_uring_read(C(req));
#endif
	/* Valid replies: buf or err, from read_done(), maybe later on another
	 * thread (storage completion, a peer, a prep worker). */
	core_read(C(req), ino, off, size, read_done, req);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct core_backing_reg reg = { .open = reg_open, .close = reg_close, .ctx = req };

	/* Files the kernel opened through us (passthrough or --open mode; .prep/
	 * specs made with create()). A spec written and closed is committed;
	 * a node's backing file goes with its last passthrough open. */
	core_release(C(req), ino, fi->fh, &reg);
	fuse_reply_err(req, 0);
}

/* ---- directories ---- */

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (S(req)->no_opendir) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0);
}

/* Offsets: an entry at core position P has offset P + 1 (the next one to
 * ask for). With PLUS, entries whose attr.node is 0 (control and .prep/
 * files) make no inode in the kernel: a listing opens nothing. */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct core_dirent d;
	size_t used = 0;
	char *buf = malloc(size);
	int r = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t pos = (uint64_t)off; (r = core_readdir(C(req), ino, &pos, &d)) > 0; pos++) {
		struct fuse_entry_param e;
		size_t n;

		to_entry(&d.attr, &e);
		n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, d.name, &e, (off_t)pos + 1)
			 : fuse_add_direntry(req, buf + used, size - used, d.name, &e.attr, (off_t)pos + 1);
		if (n > size - used)
			break;          /* full: the kernel asks again from this entry */
		used += n;
	}
	if (r < 0 && !used)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 1);
}

/* ---- everything that would write: EROFS, but for .prep/ specs ---- */

static void erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct core_attr a;
	struct stat st;
	int err;

	(void)fi;
	/* A spec opened with O_TRUNC: truncate what was written; the times a
	 * shell sets alongside are accepted and ignored. Nothing else. */
	if (to_set & ~(FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME |
		       FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)) {
		erofs(req);
		return;
	}
	err = core_truncate(C(req), ino, (to_set & FUSE_SET_ATTR_SIZE) ? attr->st_size : -1, &a);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	to_stat(&a, &st);
	fuse_reply_attr(req, &st, 0);
}

static void op_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d)
{
	(void)p, (void)n, (void)m, (void)d;
	erofs(req);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
	(void)p, (void)n, (void)m;
	erofs(req);
}

static void op_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
	const struct fuse_ctx *x = fuse_req_ctx(req);
	struct core_caller who = { .uid = x->uid, .gid = x->gid, .pid = (int)x->pid };

	fuse_reply_err(req, -core_unlink(C(req), p, n, &who));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t p, const char *n)
{
	(void)p, (void)n;
	erofs(req);
}

static void op_symlink(fuse_req_t req, const char *l, fuse_ino_t p, const char *n)
{
	(void)l, (void)p, (void)n;
	erofs(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np,
		      const char *nn, unsigned int flags)
{
	(void)p, (void)n, (void)np, (void)nn, (void)flags;
	erofs(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np, const char *nn)
{
	(void)ino, (void)np, (void)nn;
	erofs(req);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *b, size_t sz, off_t off,
		     struct fuse_file_info *fi)
{
	ssize_t n = core_write(C(req), ino, b, sz, off);

	(void)fi;
	/* Valid replies: write, or err (EINVAL: a refused spec, see NAME.error). */
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
		      struct fuse_file_info *fi)
{
	const struct fuse_ctx *x = fuse_req_ctx(req);
	struct core_caller who = { .uid = x->uid, .gid = x->gid, .pid = (int)x->pid };
	struct fuse_entry_param e;
	struct core_attr a;
	int err = core_create(C(req), p, n, &who, &a);

	(void)m;
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	to_entry(&a, &e);
	fi->direct_io = 1;          /* spec text goes straight to the daemon */
	fuse_reply_create(req, &e, fi);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *n, const char *v,
			size_t sz, int flags)
{
	(void)ino, (void)n, (void)v, (void)sz, (void)flags;
	erofs(req);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *n)
{
	(void)ino, (void)n;
	erofs(req);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)off, (void)len, (void)fi;
	erofs(req);
}

/* ---- what the kernel caches above the mount ---- */

/* The answer to a probe (ops_session.c asks, for the prefetcher): bytes
 * mean the kernel caches the file. */
static void op_retrieve_reply(fuse_req_t req, void *cookie, fuse_ino_t ino, off_t offset,
			      struct fuse_bufvec *bufv)
{
	(void)ino, (void)offset;
	core_probe_answer(C(req), cookie, fuse_buf_size(bufv) > 0);
	fuse_reply_none(req);
}

const struct fuse_lowlevel_ops ops_table = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.access = op_access,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.write = op_write,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.fallocate = op_fallocate,
	.retrieve_reply = op_retrieve_reply,
	/* .flush left out on purpose: ENOSYS once, then the kernel stops
	 * sending FLUSH on every close(). */
};
