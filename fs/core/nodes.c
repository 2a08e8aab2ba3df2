/* nodes.c - the core's namespaces behind one table of operations (ns.h),
 * and the dataset's own namespace; see core.h.
 *
 * Four namespaces share the kernel's node numbers: the dataset (index
 * entries at a generation, here), .epochfs/ (ns/ns_control.c), its order/
 * directory (ns/ns_order.c) and .prep/ (ns/ns_prep.c). ns_of() tells them
 * apart once per operation and OPS[] answers it; the places one namespace
 * appears in another (MOUNTS) are looked up here, before the parent's own
 * names. The adapter sees attributes, not modules.
 *
 * DESIGN: attributes of data entries are SOURCE's (st_ino the backing
 * inode, its link count and blocks), cacheable for what is left of their
 * check against SOURCE (index_revalidate): the kernel never outlives
 * --timeout. Virtual files are cacheable for 0 s: every lookup of them is a
 * new node (a fresh snapshot, a new batch consumer). The mounted
 * directories are reachable by name but listed only where their parent
 * lists them (order/ in .epochfs/; .epochfs and .prep never in the root,
 * where torchvision's ImageFolder would take them for classes).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_int.h"
#include "core/ns/order.h"
#include "core/ns/prepdir.h"
#include "store/index.h"
#include "store/path.h"

static const struct ns_ops *const ops[NS__COUNT] = {
	[NS_DATA] = &ns_data_ops,
	[NS_CONTROL] = &ns_control_ops,
	[NS_ORDER] = &ns_order_ops,
	[NS_PREP] = &ns_prep_ops,
};

/* Where a namespace's root appears by name in another's directory. */
static const struct mount {
	enum ns_id parent_ns;
	uint64_t parent;            /* NS_DATA: an index id (any generation) */
	const char *name;
	uint64_t root;
} mounts[] = {
	{ NS_DATA, INDEX_ROOT, CONTROL_DIR_NAME, CONTROL_DIR_NODE },
	{ NS_DATA, INDEX_ROOT, PREPDIR_NAME, PREPDIR_DIR_NODE },
	{ NS_CONTROL, CONTROL_DIR_NODE, ORDER_DIR_NAME, ORDER_DIR_NODE },
};

static int mounted(const struct core *c, uint64_t root)
{
	return root == CONTROL_DIR_NODE || (root == PREPDIR_DIR_NODE && c->prep) ||
	       (root == ORDER_DIR_NODE && c->order);
}

void ns_virtual_attr(uint64_t node, int is_dir, unsigned mode, size_t size, double valid, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = node, .mode = (is_dir ? S_IFDIR : S_IFREG) | mode, .nlink = is_dir ? 2 : 1,
		.uid = getuid(), .gid = getgid(), .blksize = 4096, .ino = node & 0xffffffffffffull,
		.size = size, .valid = valid, .flags = is_dir ? 0 : CORE_F_DIRECT_IO | CORE_F_NEW_NODE,
	};
}

/* ---- the dispatch ---- */

int core_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	enum ns_id ns = ns_of(parent);

	stats_add(&c->stats, STAT_LOOKUPS, 1);
	memset(a, 0, sizeof(*a));
	for (size_t i = 0; i < sizeof(mounts) / sizeof(mounts[0]); i++) {
		const struct mount *m = &mounts[i];
		uint64_t p = ns == NS_DATA ? core_data_id(parent) : parent;
		if (m->parent_ns != ns || m->parent != p || strcmp(m->name, name) || !mounted(c, m->root))
			continue;
		int err = ops[ns_of(m->root)]->getattr(c, m->root, a);
		if (!err)
			a->valid = c->timeout;
		return err;
	}
	return ops[ns]->lookup(c, parent, name, a);
}

int core_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	memset(a, 0, sizeof(*a));
	return ops[ns_of(node)]->getattr(c, node, a);
}

int core_readdir(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	if (*pos < 2) {
		snprintf(d->name, sizeof(d->name), "%s", *pos ? ".." : ".");
		d->attr = (struct core_attr){ .mode = S_IFDIR, .ino = *pos ? 1 : (dir & 0xffffffffu) };
		return 1;
	}
	uint64_t k = *pos - 2;
	int r = ops[ns_of(dir)]->readdir(c, dir, &k, d);
	*pos = k + 2;
	return r;
}

void core_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	ops[ns_of(node)]->read(c, node, off, len, done, arg);
}

int core_open_check(struct core *c, uint64_t node, int flags, struct core_attr *a)
{
	const struct ns_ops *o = ops[ns_of(node)];
	int write = (flags & O_ACCMODE) != O_RDONLY, err = core_getattr(c, node, a);

	if (err)
		return err;
	if (o->writable)
		return write && !(a->mode & S_IWUSR) ? -EROFS : 0;
	if (write || (flags & O_TRUNC))
		return -EROFS;
	return 0;
}

int core_access(struct core *c, uint64_t node, int mask)
{
	const struct ns_ops *o = ops[ns_of(node)];

	if (!(mask & W_OK))
		return 0;
	return o->writable && o->writable(c, node) ? 0 : -EROFS;
}

ssize_t core_write(struct core *c, uint64_t node, const void *buf, size_t len, off_t off)
{
	const struct ns_ops *o = ops[ns_of(node)];

	return o->write ? o->write(c, node, buf, len, off) : -EROFS;
}

static struct core_caller caller_of(const struct core_caller *who)
{
	return who ? *who : (struct core_caller){ .uid = (uint32_t)geteuid(), .gid = (uint32_t)getegid(),
						  .pid = (int)getpid() };
}

int core_create(struct core *c, uint64_t parent, const char *name, const struct core_caller *who,
		struct core_attr *a)
{
	const struct ns_ops *o = ops[ns_of(parent)];
	struct core_caller me = caller_of(who);

	memset(a, 0, sizeof(*a));
	return o->create ? o->create(c, parent, name, &me, a) : -EROFS;
}

int core_truncate(struct core *c, uint64_t node, off_t size, struct core_attr *a)
{
	const struct ns_ops *o = ops[ns_of(node)];

	return o->truncate ? o->truncate(c, node, size, a) : -EROFS;
}

int core_unlink(struct core *c, uint64_t parent, const char *name, const struct core_caller *who)
{
	const struct ns_ops *o = ops[ns_of(parent)];
	struct core_caller me = caller_of(who);

	return o->unlink ? o->unlink(c, parent, name, &me) : -EROFS;
}

void core_release(struct core *c, uint64_t node, uint64_t fh, const struct core_backing_reg *reg)
{
	const struct ns_ops *o = ops[ns_of(node)];

	if (fh)
		core_pt_release(c, node, fh, reg);
	if (o->release)
		o->release(c, node);
}

void core_forget(struct core *c, uint64_t node, uint64_t nlookup)
{
	/* Index entries live as long as the mount, streams until unlinked or
	 * idle; snapshots and batch readers are freed. */
	const struct ns_ops *o = ops[ns_of(node)];

	if (o->forget)
		o->forget(c, node, nlookup);
}

/* ---- the dataset ---- */

static void data_attr(const struct index_attr *ia, double valid, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = core_data_node(ia->id, ia->gen), .generation = ia->gen, .mode = ia->mode,
		.nlink = ia->nlink, .uid = ia->uid, .gid = ia->gid, .blksize = 128 * 1024,
		.ino = ia->v.ino, .size = ia->v.size, .blocks = ia->blocks,
		.mtime_ns = ia->v.mtime_ns, .ctime_ns = ia->v.ctime_ns, .valid = valid,
	};
}

/* Data entry ID as of generation GEN (directories: any), re-checked
 * against SOURCE when due. 0 and *IA, -ESTALE, -ENOENT. */
static int data_get(struct core *c, uint32_t id, uint32_t gen, struct index_attr *ia, double *valid)
{
	*valid = c->timeout;
	if (index_get(c->ix, id, ia) < 0)
		return -ENOENT;
	if (index_revalidate(c->ix, id, valid) > 0 && index_get(c->ix, id, ia) < 0)
		return -ENOENT;
	if (ia->gone || (!S_ISDIR(ia->mode) && ia->gen != gen))
		return -ESTALE;
	return 0;
}

int core_data_get(struct core *c, uint64_t node, struct index_attr *ia, double *valid)
{
	return data_get(c, core_data_id(node), core_data_gen(node), ia, valid);
}

static int data_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct index_attr ia;
	/* Gone entries too: a file that came back is found by its check. */
	uint32_t id = index_find(c->ix, core_data_id(parent), name);
	double valid = c->timeout;

	a->valid = valid;           /* names created after the scan are never added */
	if (!id)
		return -ENOENT;
	index_revalidate(c->ix, id, &valid);
	a->valid = valid;
	if (index_get(c->ix, id, &ia) < 0 || ia.gone)
		return -ENOENT;
	data_attr(&ia, valid, a);
	return 0;
}

static int data_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	struct index_attr ia;
	double valid;
	int err = data_get(c, core_data_id(node), core_data_gen(node), &ia, &valid);

	if (err < 0)
		return err;
	data_attr(&ia, valid, a);
	return 0;
}

static int data_readdir(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	struct index_attr da, ia;
	double valid;
	int err = data_get(c, core_data_id(dir), core_data_gen(dir), &da, &valid);

	if (!err && !S_ISDIR(da.mode))
		err = -ENOTDIR;
	if (err)
		return err;
	for (; *pos < da.nchildren; (*pos)++) {
		uint32_t id = index_child(c->ix, da.id, (uint32_t)*pos);
		if (!id || index_get(c->ix, id, &ia) < 0 || ia.gone)
			continue;
		snprintf(d->name, sizeof(d->name), "%s", index_name(c->ix, id));
		/* No stat here: an entry whose check is due goes out with
		 * timeouts 0, and the kernel's next use looks it up. */
		data_attr(&ia, index_valid_for(c->ix, id), &d->attr);
		return 1;
	}
	return 0;
}

static void data_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	core_read_data(c, core_data_id(node), core_data_gen(node), off, len, 1, done, arg);
}

const struct ns_ops ns_data_ops = {
	.lookup = data_lookup, .getattr = data_getattr, .readdir = data_readdir, .read = data_read,
};

ssize_t core_readlink(struct core *c, uint64_t node, char *buf, size_t len)
{
	struct index_attr ia;
	char path[4096];
	double valid;
	ssize_t n;
	int err, pfd;

	if (ns_of(node) != NS_DATA || len < 2)
		return -EINVAL;
	if ((err = data_get(c, core_data_id(node), core_data_gen(node), &ia, &valid)) < 0)
		return err;
	if (!S_ISLNK(ia.mode))
		return -EINVAL;
	if ((err = index_path(c->ix, ia.parent, path, sizeof(path))) < 0)
		return err;
	pfd = path_open_beneath(c->rootfd, path, O_PATH | O_DIRECTORY);
	if (pfd < 0)
		return pfd == -ENOENT ? -ESTALE : pfd;
	n = readlinkat(pfd, index_name(c->ix, ia.id), buf, len - 1);
	err = n < 0 ? -errno : 0;
	close(pfd);
	if (err)
		return err;
	buf[n] = '\0';
	return n;
}

int core_statfs(struct core *c, struct statvfs *sv)
{
	if (fstatvfs(c->rootfd, sv) < 0)
		return -errno;
	if (!c->prep)
		sv->f_flag |= ST_RDONLY;
	return 0;
}

/* ---- for tools and tests ---- */

int core_lookup_rel(struct core *c, const char *rel, size_t len, struct index_attr *a)
{
	char path[4096], *save = NULL, *tok;
	uint32_t id = INDEX_ROOT;

	if (len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, rel, len);
	path[len] = '\0';
	for (tok = strtok_r(path, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
		if (strcmp(tok, ".") && !(id = index_lookup(c->ix, id, tok)))
			return -ENOENT;
	if (index_get(c->ix, id, a) < 0 || a->gone)
		return -ENOENT;
	return 0;
}

int core_stat_path(struct core *c, const char *rel, struct core_attr *a)
{
	struct index_attr ia;
	int err = core_lookup_rel(c, rel, strlen(rel), &ia);

	if (err < 0)
		return err;
	data_attr(&ia, index_valid_for(c->ix, ia.id), a);
	return 0;
}

/* ---- changes under the mount ---- */

static void on_index_change(void *arg, uint32_t id, uint32_t parent, const char *name, uint32_t old_gen)
{
	struct core *c = arg;
	core_change_fn fn = __atomic_load_n(&c->change_fn, __ATOMIC_ACQUIRE);

	stats_add(&c->stats, STAT_CHANGES, 1);
	if (fn)
		fn(c->change_arg, core_data_node(parent, 0), name, core_data_node(id, old_gen));
}

void core_set_change_cb(struct core *c, core_change_fn fn, void *arg)
{
	c->change_arg = arg;
	__atomic_store_n(&c->change_fn, fn, __ATOMIC_RELEASE);
	index_set_change_cb(c->ix, on_index_change, c);
}
