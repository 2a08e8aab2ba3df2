/* nodes.c - the core's namespaces behind one dispatch point; see core.h.
 *
 * Four namespaces share the kernel's node numbers: the dataset (index
 * entries at a generation), .epochfs/ (control.c), its order/ directory
 * (prefetch.c) and .prep/ (prepdir.c).
 * ns_of() tells them apart once, and every operation is one switch over
 * it, so no caller depends on asking the right question first (prep nodes
 * carry the control bit too). The adapter sees attributes, not modules.
 *
 * DESIGN: attributes of data entries are SOURCE's (st_ino the backing
 * inode, its link count and blocks), cacheable for what is left of their
 * check against SOURCE (index_revalidate): the kernel never outlives
 * --timeout. Control and prep files are cacheable for 0 s: every lookup of
 * them is a new node (a fresh snapshot, a new batch consumer).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core_int.h"
#include "log.h"
#include "path.h"

enum ns { NS_DATA, NS_CONTROL, NS_ORDER, NS_PREP };

static enum ns ns_of(uint64_t node)
{
	if (prepdir_is_node(node))
		return NS_PREP;
	if (prefetch_is_node(node))
		return NS_ORDER;
	return control_is_node(node) ? NS_CONTROL : NS_DATA;
}

static uint32_t data_id(uint64_t node)
{
	return (uint32_t)node;
}

static uint32_t data_gen(uint64_t node)
{
	return (uint32_t)(node >> 32) & CORE_GEN_MASK;
}

static void data_attr(const struct index_attr *ia, double valid, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = core_data_node(ia->id, ia->gen), .generation = ia->gen, .mode = ia->mode,
		.nlink = ia->nlink, .uid = ia->uid, .gid = ia->gid, .blksize = 128 * 1024,
		.ino = ia->v.ino, .size = ia->v.size, .blocks = ia->blocks,
		.mtime_ns = ia->v.mtime_ns, .ctime_ns = ia->v.ctime_ns, .valid = valid,
	};
}

static void control_attr(const struct control_attr *ca, double valid, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = ca->node, .mode = ca->is_dir ? S_IFDIR | 0555 : S_IFREG | 0444,
		.nlink = ca->is_dir ? 2 : 1, .uid = getuid(), .gid = getgid(), .blksize = 4096,
		.ino = ca->node & ~CONTROL_NODE_BIT, .size = ca->size, .valid = valid,
		.flags = ca->is_dir ? 0 : CORE_F_DIRECT_IO | CORE_F_NEW_NODE,
	};
}

static void order_attr(const struct prefetch_attr *oa, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = oa->node, .mode = oa->is_dir ? S_IFDIR | 0755 : S_IFREG | 0644,
		.nlink = oa->is_dir ? 2 : 1, .uid = getuid(), .gid = getgid(), .blksize = 4096,
		.ino = oa->node & 0xffffffffffffull, .size = oa->size,
		.flags = oa->is_dir ? 0 : CORE_F_DIRECT_IO | CORE_F_NEW_NODE,
	};
}

static void prep_attr(const struct prepdir_attr *pa, double valid, struct core_attr *a)
{
	*a = (struct core_attr){
		.node = pa->node,
		.mode = pa->is_dir ? S_IFDIR | 0755 : S_IFREG | (pa->writable ? 0644 : 0444),
		.nlink = pa->is_dir ? 2 : 1, .uid = getuid(), .gid = getgid(), .blksize = 128 * 1024,
		.ino = pa->node & 0xffffffffffffull, .size = pa->size, .blocks = (pa->size + 511) / 512,
		.valid = valid, .flags = pa->is_dir ? 0 : CORE_F_DIRECT_IO | CORE_F_NEW_NODE,
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

static int data_lookup(struct core *c, uint32_t parent, const char *name, struct core_attr *a)
{
	struct index_attr ia;
	/* Gone entries too: a file that came back is found by its check. */
	uint32_t id = index_find(c->ix, parent, name);
	double valid = c->timeout;

	if (parent == INDEX_ROOT && c->prep && !strcmp(name, PREPDIR_NAME)) {
		struct prepdir_attr pa = { .node = PREPDIR_DIR_NODE, .is_dir = 1, .writable = 1 };
		prep_attr(&pa, c->timeout, a);
		return 0;
	}
	if (parent == INDEX_ROOT && !strcmp(name, CONTROL_DIR_NAME)) {
		struct control_attr ca = { .node = CONTROL_DIR_NODE, .is_dir = 1 };
		control_attr(&ca, c->timeout, a);
		return 0;
	}
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

int core_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct prefetch_attr oa;
	struct prepdir_attr pa;
	struct control_attr ca;
	int err;

	stats_add(&c->stats, STAT_LOOKUPS, 1);
	memset(a, 0, sizeof(*a));
	switch (ns_of(parent)) {
	case NS_PREP:
		if ((err = prepdir_lookup(c->prep, parent, name, &pa)) < 0)
			return err;
		prep_attr(&pa, 0, a);
		return 0;
	case NS_ORDER:
		if ((err = prefetch_lookup(c->pf, parent, name, &oa)) < 0)
			return err;
		order_attr(&oa, a);
		return 0;
	case NS_CONTROL:
		if (parent == CONTROL_DIR_NODE && c->pf && !strcmp(name, ORDER_DIR_NAME)) {
			oa = (struct prefetch_attr){ .node = ORDER_DIR_NODE, .is_dir = 1 };
			order_attr(&oa, a);
			a->valid = c->timeout;
			return 0;
		}
		if ((err = control_lookup(c->ctl, parent, name, &ca)) < 0)
			return err;
		control_attr(&ca, 0, a);    /* a fresh snapshot per lookup (control.h) */
		return 0;
	case NS_DATA:
		break;
	}
	return data_lookup(c, data_id(parent), name, a);
}

int core_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	struct prefetch_attr oa;
	struct prepdir_attr pa;
	struct control_attr ca;
	struct index_attr ia;
	double valid;
	int err;

	switch (ns_of(node)) {
	case NS_PREP:
		if ((err = prepdir_getattr(c->prep, node, &pa)) < 0)
			return err;
		prep_attr(&pa, 0, a);
		return 0;
	case NS_ORDER:
		if (!c->pf)
			return -ENOENT;
		if ((err = prefetch_getattr(c->pf, node, &oa)) < 0)
			return err;
		order_attr(&oa, a);
		if (oa.is_dir)
			a->valid = c->timeout;
		return 0;
	case NS_CONTROL:
		if ((err = control_getattr(c->ctl, node, &ca)) < 0)
			return err;
		control_attr(&ca, ca.is_dir ? c->timeout : 0, a);
		return 0;
	case NS_DATA:
		break;
	}
	if ((err = data_get(c, data_id(node), data_gen(node), &ia, &valid)) < 0)
		return err;
	data_attr(&ia, valid, a);
	return 0;
}

ssize_t core_readlink(struct core *c, uint64_t node, char *buf, size_t len)
{
	struct index_attr ia;
	char path[4096];
	double valid;
	ssize_t n;
	int err, pfd;

	if (ns_of(node) != NS_DATA || len < 2)
		return -EINVAL;
	if ((err = data_get(c, data_id(node), data_gen(node), &ia, &valid)) < 0)
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

/* ---- listings ---- */

static int prep_dirent(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	struct prepdir_attr pa;
	int is_dir = 1, err = prepdir_getattr(c->prep, dir, &pa);

	if (!err && !pa.is_dir)
		err = -ENOTDIR;
	if (err)
		return err;
	if (!prepdir_dirent(c->prep, dir, *pos - 2, &is_dir, d->name, sizeof(d->name)))
		return 0;
	d->attr = (struct core_attr){ .mode = is_dir ? S_IFDIR | 0755 : S_IFREG | 0444, .ino = *pos + 1 };
	return 1;
}

static int control_dirent_at(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	const char *name;

	if (dir != CONTROL_DIR_NODE)
		return -ENOTDIR;
	if (*pos - 2 == CONTROL__FILES && c->pf) {
		snprintf(d->name, sizeof(d->name), "%s", ORDER_DIR_NAME);
		d->attr = (struct core_attr){ .mode = S_IFDIR | 0755, .ino = *pos + 1 };
		return 1;
	}
	if (*pos - 2 >= CONTROL__FILES || !(name = control_dirent(c->ctl, dir, (unsigned)(*pos - 2))))
		return 0;
	snprintf(d->name, sizeof(d->name), "%s", name);
	/* attr.node 0: a listing renders no snapshot. */
	d->attr = (struct core_attr){ .mode = S_IFREG | 0444, .ino = *pos + 1 };
	return 1;
}

static int data_dirent(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	struct index_attr da, ia;
	double valid;
	int err = data_get(c, data_id(dir), data_gen(dir), &da, &valid);

	if (!err && !S_ISDIR(da.mode))
		err = -ENOTDIR;
	if (err)
		return err;
	for (; *pos - 2 < da.nchildren; (*pos)++) {
		uint32_t id = index_child(c->ix, da.id, (uint32_t)(*pos - 2));
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

int core_readdir(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d)
{
	if (*pos < 2) {
		snprintf(d->name, sizeof(d->name), "%s", *pos ? ".." : ".");
		d->attr = (struct core_attr){ .mode = S_IFDIR, .ino = *pos ? 1 : (dir & 0xffffffffu) };
		return 1;
	}
	switch (ns_of(dir)) {
	case NS_PREP:
		return prep_dirent(c, dir, pos, d);
	case NS_ORDER:
		if (dir != ORDER_DIR_NODE)
			return -ENOTDIR;
		if (!prefetch_dirent(c->pf, *pos - 2, d->name, sizeof(d->name)))
			return 0;
		d->attr = (struct core_attr){ .mode = S_IFREG | 0644, .ino = *pos + 1 };
		return 1;
	case NS_CONTROL:
		return control_dirent_at(c, dir, pos, d);
	case NS_DATA:
		break;
	}
	return data_dirent(c, dir, pos, d);
}

/* ---- reads ---- */

void core_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	switch (ns_of(node)) {
	case NS_PREP:
		/* Answered now, or by the prep worker that makes the batch. */
		prepdir_read(c->prep, node, len, off, done, arg);
		return;
	case NS_CONTROL:
	case NS_ORDER: {
		char *buf = malloc(len ? len : 1);
		ssize_t n = !buf ? -ENOMEM : ns_of(node) == NS_ORDER ? prefetch_read(c->pf, node, buf, len, off)
								     : control_read(c->ctl, node, buf, len, off);
		done(arg, n, buf);
		free(buf);
		return;
	}
	case NS_DATA:
		break;
	}
	core_read_data(c, data_id(node), data_gen(node), off, len, 1, done, arg);
}

/* ---- what would write: .prep/ only ---- */

int core_open_check(struct core *c, uint64_t node, int flags, struct core_attr *a)
{
	int write = (flags & O_ACCMODE) != O_RDONLY, err = core_getattr(c, node, a);

	if (err)
		return err;
	if (ns_of(node) == NS_PREP || ns_of(node) == NS_ORDER)
		return write && !(a->mode & S_IWUSR) ? -EROFS : 0;
	if (write || (flags & O_TRUNC))
		return -EROFS;
	return 0;
}

int core_access(struct core *c, uint64_t node, int mask)
{
	struct prepdir_attr pa;

	if (!(mask & W_OK))
		return 0;
	/* .prep/ itself and its spec files take writes; so do .epochfs/order/
	 * and its streams. */
	if (ns_of(node) == NS_PREP && prepdir_getattr(c->prep, node, &pa) == 0 && pa.writable)
		return 0;
	if (ns_of(node) == NS_ORDER)
		return 0;
	return -EROFS;
}

ssize_t core_write(struct core *c, uint64_t node, const void *buf, size_t len, off_t off)
{
	switch (ns_of(node)) {
	case NS_PREP:
		return prepdir_write(c->prep, node, buf, len, off);
	case NS_ORDER:
		return prefetch_write(c->pf, node, buf, len, off);
	default:
		return -EROFS;
	}
}

int core_create(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct prefetch_attr oa;
	struct prepdir_attr pa;
	int err;

	if (ns_of(parent) == NS_ORDER) {
		if ((err = prefetch_create(c->pf, parent, name, &oa)) < 0)
			return err;
		order_attr(&oa, a);
		return 0;
	}
	if (ns_of(parent) != NS_PREP)
		return -EROFS;
	if ((err = prepdir_create(c->prep, parent, name, &pa)) < 0)
		return err;
	prep_attr(&pa, 0, a);
	return 0;
}

int core_truncate(struct core *c, uint64_t node, off_t size, struct core_attr *a)
{
	struct prefetch_attr oa;
	struct prepdir_attr pa;
	int err;

	if (ns_of(node) == NS_ORDER) {
		if ((size >= 0 && (err = prefetch_truncate(c->pf, node, size)) < 0) ||
		    (err = prefetch_getattr(c->pf, node, &oa)) < 0)
			return err;
		order_attr(&oa, a);
		return 0;
	}
	if (ns_of(node) != NS_PREP)
		return -EROFS;
	if ((size >= 0 && (err = prepdir_truncate(c->prep, node, size)) < 0) ||
	    (err = prepdir_getattr(c->prep, node, &pa)) < 0)
		return err;
	if (!pa.writable)
		return -EROFS;
	prep_attr(&pa, 0, a);
	return 0;
}

int core_unlink(struct core *c, uint64_t parent, const char *name)
{
	switch (ns_of(parent)) {
	case NS_PREP:
		return prepdir_unlink(c->prep, parent, name);
	case NS_ORDER:
		return prefetch_unlink(c->pf, parent, name);
	default:
		return -EROFS;
	}
}

void core_release(struct core *c, uint64_t node)
{
	if (ns_of(node) == NS_PREP)
		prepdir_release(c->prep, node);
}

void core_forget(struct core *c, uint64_t node, uint64_t nlookup)
{
	/* Index entries live as long as the mount; snapshots and batch readers
	 * are freed. */
	switch (ns_of(node)) {
	case NS_PREP:
		prepdir_forget(c->prep, node, nlookup);
		break;
	case NS_CONTROL:
		control_forget(c->ctl, node, nlookup);
		break;
	case NS_ORDER:          /* streams live until unlinked or idle */
	case NS_DATA:
		break;
	}
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
