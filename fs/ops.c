/* ops.c - the FUSE operation table over struct core; see ops.h.
 *
 * DESIGN (figures in docs/design.md):
 * - open() answers ENOSYS once (FUSE_CAP_NO_OPEN_SUPPORT): the kernel then
 *   opens files itself with keep_cache and sends neither OPEN nor RELEASE,
 *   and flush is unimplemented so FLUSH stops too. A warm file costs the
 *   daemon nothing at all. --open restores per-open round trips.
 * - opendir likewise (FUSE_CAP_NO_OPENDIR_SUPPORT): listings are cached.
 * - Long entry/attr timeouts and negative entries; changes under the mount
 *   arrive through the index's change callback, which invalidates the
 *   kernel's dentry so the next lookup sees the new generation.
 * - Reads are asynchronous: the handler queues the read in the core and
 *   returns; the reply is sent from the storage completion thread.
 * - Every write-type operation answers EROFS, except the spec files of
 *   .prep/ (fs/prepdir.h). So the mount is "ro" only with --no-prep; without
 *   it, an open for writing succeeds (the kernel opens files itself in no-open
 *   mode) and the first write or truncate fails.
 * - .epochfs/ and .prep/ nodes carry CONTROL_NODE_BIT; prep nodes also carry
 *   PREPDIR_NODE_BIT, so every handler asks prepdir_is_node() first.
 */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "path.h"

/* A change the kernel must hear of (struct notifier). */
struct change {
	uint32_t id, parent, old_gen;
};

/* Changes are told to the kernel by a thread of their own, never by the
 * thread that found them: that may be a FUSE worker inside a LOOKUP of the
 * very directory whose dentry the notice invalidates (the kernel would wait
 * for the LOOKUP, the LOOKUP for the notice), or the reader of a page the
 * notice must drop. */
struct notifier {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct change *q;           /* ring, under lock */
	size_t head, len, cap;
	int stop;
	pthread_t th;
	int started;
};

struct ops_session {
	struct ops_config cfg;
	struct fuse_session *se;
	struct core *c;
	int log_fd;
	int no_opendir;             /* kernel can skip OPENDIR */
	struct notifier nt;
};

#define GEN_MASK 0x7fffffffu

static inline fuse_ino_t node_of(uint32_t id, uint32_t gen)
{
	return ((uint64_t)(gen & GEN_MASK) << 32) | id;
}
static inline uint32_t node_id(fuse_ino_t n)
{
	return (uint32_t)n;
}
static inline uint32_t node_gen(fuse_ino_t n)
{
	return (uint32_t)(n >> 32) & GEN_MASK;
}

static struct ops_session *S(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* SOURCE's attributes as they are: st_ino is the backing file's inode
 * number (hard links share one, with SOURCE's link count), st_blocks the
 * backing file's (a sparse file stays sparse). */
static void fill_stat(struct stat *st, const struct index_attr *a)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->v.ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->v.size;
	st->st_blksize = 128 * 1024;
	st->st_blocks = (blkcnt_t)a->blocks;
	st->st_mtim.tv_sec = a->v.mtime_ns / 1000000000;
	st->st_mtim.tv_nsec = a->v.mtime_ns % 1000000000;
	st->st_ctim.tv_sec = a->v.ctime_ns / 1000000000;
	st->st_ctim.tv_nsec = a->v.ctime_ns % 1000000000;
	st->st_atim = st->st_mtim;
}

static void fill_control_stat(struct stat *st, const struct control_attr *a)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->node & ~CONTROL_NODE_BIT;
	st->st_mode = a->is_dir ? S_IFDIR | 0555 : S_IFREG | 0444;
	st->st_nlink = a->is_dir ? 2 : 1;
	st->st_size = (off_t)a->size;
	st->st_blksize = 4096;
	st->st_uid = getuid();
	st->st_gid = getgid();
}

static void fill_prep_stat(struct stat *st, const struct prepdir_attr *a)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->node & 0xffffffffffffull;
	st->st_mode = a->is_dir ? S_IFDIR | 0755 : S_IFREG | (a->writable ? 0644 : 0444);
	st->st_nlink = a->is_dir ? 2 : 1;
	st->st_size = (off_t)a->size;
	st->st_blksize = 128 * 1024;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_uid = getuid();
	st->st_gid = getgid();
}

/* Replies to a lookup (or create) of a .prep/ node: timeouts 0, since groups
 * come and go and every batch lookup is a new consumer (prepdir.h). */
static void prep_entry(const struct prepdir_attr *a, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->node;
	fill_prep_stat(&e->attr, a);
}

/* Fills E for index entry A, cacheable for VALID seconds: what is left of
 * the entry's check against SOURCE (core_timeout). */
static void entry_of(const struct index_attr *a, double valid, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_of(a->id, a->gen);
	e->generation = a->gen;
	fill_stat(&e->attr, a);
	e->attr_timeout = valid;
	e->entry_timeout = valid;
}

/* Resolves node N to an index entry that still exists in its generation. */
static int node_attr(struct ops_session *s, fuse_ino_t n, struct index_attr *a, double *valid)
{
	return core_getattr(s->c, node_id(n), node_gen(n), a, valid);
}

/* ---- metadata ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ops_session *s = userdata;

	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/* Atomic O_TRUNC hands truncation to OPEN, which no-open mode never
	 * sends: the kernel would zero its own idea of the size and tell no
	 * one. Without it an O_TRUNC open sends SETATTR, which answers EROFS
	 * (or truncates a .prep/ spec). */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	s->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	if (!(conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && !s->cfg.handle_open) {
		log_warn("the kernel cannot skip open(); every open costs a round trip");
		s->cfg.handle_open = 1;
	}
	conn->time_gran = 1;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ops_session *s = S(req);
	struct fuse_entry_param e;
	struct index_attr a;
	double valid;

	if (prepdir_is_node(parent)) {
		struct prepdir_attr pa;
		int err = prepdir_lookup(s->c->prep, parent, name, &pa);
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
		prep_entry(&pa, &e);
		fuse_reply_entry(req, &e);
		return;
	}
	if (parent == FUSE_ROOT_ID && s->c->prep && !strcmp(name, PREPDIR_NAME)) {
		struct prepdir_attr pa = { .node = PREPDIR_DIR_NODE, .is_dir = 1, .writable = 1 };
		prep_entry(&pa, &e);
		e.attr_timeout = e.entry_timeout = core_timeout(s->c);
		fuse_reply_entry(req, &e);
		return;
	}
	if (control_is_node(parent)) {
		struct control_attr ca;
		int err = control_lookup(s->c->ctl, parent, name, &ca);
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
		memset(&e, 0, sizeof(e));
		e.ino = ca.node;
		fill_control_stat(&e.attr, &ca);
		/* Timeouts 0: each open gets a fresh snapshot (control.h). */
		fuse_reply_entry(req, &e);
		return;
	}
	if (parent == FUSE_ROOT_ID && !strcmp(name, CONTROL_DIR_NAME)) {
		struct control_attr ca = { .node = CONTROL_DIR_NODE, .is_dir = 1 };
		memset(&e, 0, sizeof(e));
		e.ino = CONTROL_DIR_NODE;
		fill_control_stat(&e.attr, &ca);
		e.attr_timeout = e.entry_timeout = core_timeout(s->c);
		fuse_reply_entry(req, &e);
		return;
	}
	if (core_lookup(s->c, node_id(parent), name, &a, &valid) < 0) {
		/* Negative entry, cached by the kernel while it holds. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = valid;
		fuse_reply_entry(req, &e);
		return;
	}
	entry_of(&a, valid, &e);
	fuse_reply_entry(req, &e);
}

static void forget_one(struct ops_session *s, fuse_ino_t ino, uint64_t nlookup)
{
	if (prepdir_is_node(ino))
		prepdir_forget(s->c->prep, ino, nlookup);
	else if (control_is_node(ino))
		control_forget(s->c->ctl, ino, nlookup);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	/* Index entries live as long as the mount; snapshots and batch readers
	 * are freed. */
	forget_one(S(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *list)
{
	for (size_t i = 0; i < count; i++)
		forget_one(S(req), list[i].ino, list[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ops_session *s = S(req);
	struct index_attr a;
	struct stat st;
	double valid;
	int err;

	(void)fi;
	if (prepdir_is_node(ino)) {
		struct prepdir_attr pa;
		err = prepdir_getattr(s->c->prep, ino, &pa);
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
		fill_prep_stat(&st, &pa);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	if (control_is_node(ino)) {
		struct control_attr ca;
		err = control_getattr(s->c->ctl, ino, &ca);
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
		fill_control_stat(&st, &ca);
		fuse_reply_attr(req, &st, ca.is_dir ? core_timeout(s->c) : 0);
		return;
	}
	/* Valid replies: attr, or err (ESTALE: the file changed since this
	 * node was looked up; a path-based stat then looks it up again). */
	err = node_attr(s, ino, &a, &valid);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	fill_stat(&st, &a);
	fuse_reply_attr(req, &st, valid);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ops_session *s = S(req);
	struct index_attr a;
	char path[4096], target[4096];
	double valid;
	ssize_t n;
	int err, pfd;

	err = control_is_node(ino) ? -EINVAL : node_attr(s, ino, &a, &valid);
	if (!err && !S_ISLNK(a.mode))
		err = -EINVAL;
	if (!err)
		err = index_path(s->c->ix, a.parent, path, sizeof(path));
	if (err < 0) {
		fuse_reply_err(req, -err);
		return;
	}
	/* The link is read, never followed: its text goes to the reader's
	 * kernel, which resolves it in the reader's namespace. */
	pfd = path_open_beneath(s->c->rootfd, path, O_PATH | O_DIRECTORY);
	if (pfd < 0) {
		fuse_reply_err(req, pfd == -ENOENT ? ESTALE : -pfd);
		return;
	}
	n = readlinkat(pfd, index_name(s->c->ix, a.id), target, sizeof(target) - 1);
	err = n < 0 ? errno : 0;
	close(pfd);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	target[n] = '\0';
	fuse_reply_readlink(req, target);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	if (fstatvfs(S(req)->c->rootfd, &sv) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	if (S(req)->cfg.read_only)
		sv.f_flag |= ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	(void)ino, (void)name, (void)size;
	fuse_reply_err(req, ENODATA);
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
	struct prepdir_attr pa;

	if ((mask & W_OK) && prepdir_is_node(ino) &&
	    prepdir_getattr(S(req)->c->prep, ino, &pa) == 0 && pa.writable) {
		fuse_reply_err(req, 0);     /* .prep/ itself and its spec files */
		return;
	}
	fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

/* ---- files ---- */

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ops_session *s = S(req);
	struct index_attr a;
	double valid;
	int err;

	if (!s->cfg.handle_open) {
		/* Valid replies: ENOSYS here makes the kernel stop sending OPEN
		 * (and RELEASE) for good; it keeps the page cache by default. */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (prepdir_is_node(ino)) {
		struct prepdir_attr pa;
		err = prepdir_getattr(s->c->prep, ino, &pa);
		if (!err && (fi->flags & O_ACCMODE) != O_RDONLY && !pa.writable)
			err = -EROFS;
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (control_is_node(ino)) {
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	err = node_attr(s, ino, &a, &valid);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	fi->keep_cache = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
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
	struct ops_session *s = S(req);

	(void)fi;
	if (prepdir_is_node(ino)) {
		/* Valid replies: buf or err, from read_done(), maybe later on a
		 * prep worker once the batch is made. */
		prepdir_read(s->c->prep, ino, size, off, read_done, req);
		return;
	}
	if (control_is_node(ino)) {
		char *buf = malloc(size ? size : 1);
		ssize_t n = buf ? control_read(s->c->ctl, ino, buf, size, off) : -ENOMEM;
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		free(buf);
		return;
	}
	/* Valid replies: fuse_reply_buf or fuse_reply_err, from read_done(),
	 * maybe on the storage completion thread. */
	core_read(s->c, node_id(ino), node_gen(ino), off, size, read_done, req);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	/* Files the kernel opened through us: --open mode, and .prep/ specs
	 * made with create(). A spec written and closed is committed. */
	if (prepdir_is_node(ino))
		prepdir_release(S(req)->c->prep, ino);
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

/* Adds one entry to a readdir(plus) reply at BUF+*USED; 0, or -1 when the
 * buffer is full (the entry is not added). */
static int add_entry(fuse_req_t req, char *buf, size_t size, size_t *used, const char *name,
		     const struct fuse_entry_param *e, off_t next, int plus)
{
	size_t n = plus ? fuse_add_direntry_plus(req, buf + *used, size - *used, name, e, next)
			: fuse_add_direntry(req, buf + *used, size - *used, name, &e->attr, next);

	if (n > size - *used)
		return -1;
	*used += n;
	return 0;
}

/* .prep/ and its group and epoch directories: names only (e.ino 0, so a
 * listing opens no batch reader). Offsets as below. */
static void prep_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct ops_session *s = S(req);
	struct prepdir_attr pa;
	char *buf, name[300];
	size_t used = 0;
	int err = prepdir_getattr(s->c->prep, ino, &pa);

	if (!err && !pa.is_dir)
		err = -ENOTDIR;
	if (err || !(buf = malloc(size))) {
		fuse_reply_err(req, err ? -err : ENOMEM);
		return;
	}
	for (off_t pos = off;; pos++) {
		struct fuse_entry_param e;
		const char *nm;
		int is_dir = 1;

		memset(&e, 0, sizeof(e));
		if (pos < 2)
			nm = pos == 0 ? "." : "..";
		else if (!(nm = prepdir_dirent(s->c->prep, ino, (uint64_t)(pos - 2), &is_dir, name, sizeof(name))))
			break;
		e.attr.st_mode = is_dir ? S_IFDIR | 0755 : S_IFREG | 0444;
		e.attr.st_ino = (fuse_ino_t)(pos + 1);
		if (add_entry(req, buf, size, &used, nm, &e, pos + 1, plus))
			break;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

/* Offsets: 1 is ".", 2 is "..", child at position P is P + 3. */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct ops_session *s = S(req);
	struct index *ix = s->c->ix;
	struct index_attr dir;
	double valid;
	char *buf;
	size_t used = 0;
	int err = 0;

	if (prepdir_is_node(ino)) {
		prep_readdir(req, ino, size, off, plus);
		return;
	}
	if (control_is_node(ino)) {
		if (ino != CONTROL_DIR_NODE) {
			fuse_reply_err(req, ENOTDIR);
			return;
		}
		dir.nchildren = CONTROL__FILES;
	} else {
		err = node_attr(s, ino, &dir, &valid);
		if (!err && !S_ISDIR(dir.mode))
			err = -ENOTDIR;
		if (err) {
			fuse_reply_err(req, -err);
			return;
		}
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (off_t pos = off; pos < (off_t)dir.nchildren + 2; pos++) {
		struct fuse_entry_param e;
		const char *name;

		memset(&e, 0, sizeof(e));
		if (pos < 2) {
			name = pos == 0 ? "." : "..";
			e.attr.st_mode = S_IFDIR;
			e.attr.st_ino = pos == 0 ? (ino & 0xffffffffu) : 1;
		} else if (control_is_node(ino)) {
			name = control_dirent(s->c->ctl, ino, (unsigned)(pos - 2));
			e.attr.st_mode = S_IFREG | 0444;
			e.attr.st_ino = (fuse_ino_t)(pos + 1);
			/* e.ino stays 0: the kernel makes no inode, so no
			 * snapshot is rendered for a mere listing. */
		} else {
			uint32_t id = index_child(ix, dir.id, (uint32_t)(pos - 2));
			struct index_attr a;
			if (!id || index_get(ix, id, &a) < 0 || a.gone)
				continue;
			name = index_name(ix, id);
			/* No stat here: an entry whose check is due goes out with
			 * timeouts 0, and the kernel's next use looks it up. */
			if (plus)
				entry_of(&a, index_valid_for(ix, id), &e);
			else
				fill_stat(&e.attr, &a);
		}
		if (add_entry(req, buf, size, &used, name, &e, pos + 1, plus))
			break;
	}
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
	struct ops_session *s = S(req);
	struct prepdir_attr pa;
	struct stat st;
	int err;

	(void)fi;
	if (!prepdir_is_node(ino)) {
		erofs(req);
		return;
	}
	/* A spec opened with O_TRUNC: truncate what was written; the times a
	 * shell sets alongside are accepted and ignored. */
	if (to_set & ~(FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME |
		       FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)) {
		erofs(req);
		return;
	}
	err = (to_set & FUSE_SET_ATTR_SIZE) ? prepdir_truncate(s->c->prep, ino, attr->st_size) : 0;
	if (!err)
		err = prepdir_getattr(s->c->prep, ino, &pa);
	if (!err && !pa.writable)
		err = -EROFS;
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	fill_prep_stat(&st, &pa);
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
	if (prepdir_is_node(p))
		fuse_reply_err(req, -prepdir_unlink(S(req)->c->prep, p, n));
	else
		erofs(req);
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
	ssize_t n;

	(void)fi;
	if (!prepdir_is_node(ino)) {
		erofs(req);
		return;
	}
	/* Valid replies: write, or err (EINVAL: a refused spec, see NAME.error). */
	n = prepdir_write(S(req)->c->prep, ino, b, sz, off);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	struct prepdir_attr pa;
	int err;

	(void)m;
	if (!prepdir_is_node(p)) {
		erofs(req);
		return;
	}
	err = prepdir_create(S(req)->c->prep, p, n, &pa);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	prep_entry(&pa, &e);
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

static const struct fuse_lowlevel_ops ops = {
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
	/* .flush left out on purpose: ENOSYS once, then the kernel stops
	 * sending FLUSH on every close(). */
};

/* ---- changes under the mount ---- */

/* Drops what the kernel holds of a changed entry: its dentry, so the next
 * lookup returns the new generation's node (an empty page cache) or
 * ENOENT; and the old node's pages and attributes, so a reader still
 * holding it gets no stale page more and reads EIO from the daemon.
 * Notifier thread. */
static void tell_kernel(struct ops_session *s, const struct change *ch)
{
	const char *name = index_name(s->c->ix, ch->id);

	fuse_lowlevel_notify_inval_entry(s->se, node_of(ch->parent, 0), name, strlen(name));
	fuse_lowlevel_notify_inval_inode(s->se, node_of(ch->id, ch->old_gen), 0, 0);
}

static void *notifier_main(void *arg)
{
	struct ops_session *s = arg;
	struct notifier *n = &s->nt;

	pthread_mutex_lock(&n->lock);
	for (;;) {
		while (!n->len && !n->stop)
			pthread_cond_wait(&n->cond, &n->lock);
		if (n->stop)
			break;
		struct change ch = n->q[n->head];
		n->head = (n->head + 1) % n->cap;
		n->len--;
		pthread_mutex_unlock(&n->lock);
		tell_kernel(s, &ch);
		pthread_mutex_lock(&n->lock);
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

static void on_change(void *arg, uint32_t id, uint32_t parent, const char *name, uint32_t old_gen)
{
	struct ops_session *s = arg;
	struct notifier *n = &s->nt;

	(void)name;
	stats_add(&s->c->stats, STAT_CHANGES, 1);
	pthread_mutex_lock(&n->lock);
	if (n->len == n->cap) {
		size_t cap = n->cap ? n->cap * 2 : 64;
		struct change *q = malloc(cap * sizeof(*q));
		if (!q) {
			/* The entry's generation moved anyway: the kernel's next
			 * lookup of it (within --timeout) finds the new node. */
			pthread_mutex_unlock(&n->lock);
			return;
		}
		for (size_t i = 0; i < n->len; i++)
			q[i] = n->q[(n->head + i) % n->cap];
		free(n->q);
		n->q = q;
		n->head = 0;
		n->cap = cap;
	}
	n->q[(n->head + n->len) % n->cap] = (struct change){ .id = id, .parent = parent, .old_gen = old_gen };
	n->len++;
	pthread_cond_signal(&n->cond);
	pthread_mutex_unlock(&n->lock);
}

static int notifier_start(struct ops_session *s)
{
	struct notifier *n = &s->nt;
	int err = pthread_create(&n->th, NULL, notifier_main, s);

	if (err)
		return -err;
	n->started = 1;
	return 0;
}

static void notifier_stop(struct ops_session *s)
{
	struct notifier *n = &s->nt;

	if (!n->started)
		return;
	pthread_mutex_lock(&n->lock);
	n->stop = 1;
	pthread_cond_signal(&n->cond);
	pthread_mutex_unlock(&n->lock);
	pthread_join(n->th, NULL);
	n->started = 0;
}

/* ---- session ---- */

int ops_session_new(const struct ops_config *cfg, struct ops_session **out)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct ops_session *s;
	char opts[1200 + 2 * 4096], *w;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->log_fd = -1;
	pthread_mutex_init(&s->nt.lock, NULL);
	pthread_cond_init(&s->nt.cond, NULL);
	/* fsname=SOURCE (commas and backslashes escaped for libfuse's option
	 * parser): df and /proc/self/mountinfo show what is mounted, and a
	 * later epochfs finds the SOURCE behind a mount it is asked to read. */
	w = opts + sprintf(opts, "%sdefault_permissions,subtype=epochfs,fsname=", cfg->read_only ? "ro," : "");
	for (const char *p = cfg->fsname ? cfg->fsname : "epochfs"; *p && w < opts + 4096 * 2; p++) {
		if (*p == ',' || *p == '\\')
			*w++ = '\\';
		*w++ = *p;
	}
	snprintf(w, sizeof(opts) - (size_t)(w - opts), "%s%s", cfg->fuse_opts && cfg->fuse_opts[0] ? "," : "",
		 cfg->fuse_opts ? cfg->fuse_opts : "");
	if (fuse_opt_add_arg(&args, "epochfs") || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, opts) || (cfg->debug && fuse_opt_add_arg(&args, "-d"))) {
		fuse_opt_free_args(&args);
		free(s);
		return -ENOMEM;
	}
	s->se = fuse_session_new(&args, &ops, sizeof(ops), s);
	fuse_opt_free_args(&args);
	if (!s->se) {
		free(s);
		return -EINVAL;
	}
	if (cfg->log_file) {
		s->log_fd = open(cfg->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (s->log_fd < 0) {
			int err = -errno;
			log_error("%s: cannot open log file: %s", cfg->log_file, strerror(-err));
			fuse_session_destroy(s->se);
			free(s);
			return err;
		}
	}
	*out = s;
	return 0;
}

int ops_session_run(struct ops_session *s, struct core *c)
{
	struct fuse_loop_config *lc;
	int ret;

	s->c = c;
	if (fuse_set_signal_handlers(s->se) != 0)
		return -EIO;
	if (fuse_session_mount(s->se, s->cfg.mountpoint) != 0) {
		fuse_remove_signal_handlers(s->se);
		return -EIO;
	}
	if (!s->cfg.foreground) {
		fuse_daemonize(0);
		if (s->log_fd >= 0)
			dup2(s->log_fd, STDERR_FILENO);
	}
	/* Threads only now: fuse_daemonize() forks. */
	lc = fuse_loop_cfg_create();
	index_set_change_cb(c->ix, on_change, s);
	if (notifier_start(s) < 0 || core_start(c) < 0) {
		ret = -EIO;
	} else if (!lc) {
		ret = -ENOMEM;
	} else {
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
	index_set_change_cb(c->ix, NULL, NULL);
	notifier_stop(s);
	fuse_session_unmount(s->se);
	fuse_remove_signal_handlers(s->se);
	return ret;
}

void ops_session_free(struct ops_session *s)
{
	if (!s)
		return;
	fuse_session_destroy(s->se);
	if (s->log_fd >= 0)
		close(s->log_fd);
	pthread_mutex_destroy(&s->nt.lock);
	pthread_cond_destroy(&s->nt.cond);
	free(s->nt.q);
	free(s);
}
