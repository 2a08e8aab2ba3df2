/* ns_order.c - the .epochfs/order/ namespace's operations (ns.h) over the
 * order channel (order.c): streams a job creates, writes its order to,
 * reads its state back from, truncates for a new epoch and removes.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/memory.h"
#include "core/ns/order.h"

/* The directory is 1777 (like /tmp: anyone the mount lets in starts a
 * stream, and only its owner ends it); a stream is its creator's, 0644
 * (the kernel, with default_permissions, lets only the owner write). */
static void attr_of(struct core *c, const struct order_attr *oa, struct core_attr *a)
{
	ns_virtual_attr(oa->node, oa->is_dir, oa->is_dir ? 01777 : 0644, oa->size, oa->is_dir ? c->timeout : 0, a);
	if (!oa->is_dir) {
		a->uid = oa->uid;
		a->gid = oa->gid;
	}
}

static int ord_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct order_attr oa;
	int err = order_lookup(c->order, parent, name, &oa);

	if (err < 0)
		return err;
	attr_of(c, &oa, a);
	return 0;
}

static int ord_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	struct order_attr oa;
	int err = c->order ? order_getattr(c->order, node, &oa) : -ENOENT;

	if (err < 0)
		return err;
	attr_of(c, &oa, a);
	return 0;
}

static int ord_readdir(struct core *c, uint64_t dir, uint64_t *posp, struct core_dirent *d)
{
	uint64_t pos = *posp;

	if (dir != ORDER_DIR_NODE)
		return -ENOTDIR;
	if (!order_dirent(c->order, pos, d->name, sizeof(d->name)))
		return 0;
	d->attr = (struct core_attr){ .mode = S_IFREG | 0644, .ino = pos + 3 };
	return 1;
}

static void ord_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	char *buf = malloc(len ? len : 1);
	ssize_t n = buf ? order_read(c->order, node, buf, len, off) : -ENOMEM;

	done(arg, n, buf);
	free(buf);
}

static ssize_t ord_write(struct core *c, uint64_t node, const void *buf, size_t len, off_t off)
{
	return order_write(c->order, node, buf, len, off);
}

static int ord_create(struct core *c, uint64_t parent, const char *name, const struct core_caller *who,
		      struct core_attr *a)
{
	struct order_attr oa;
	unsigned flags = c->memory && memory_holds(c->memory, who->pid) ? ORDER_SAME_MEMORY : 0;
	int err = order_create(c->order, parent, name, who->uid, who->gid, flags, &oa);

	if (err < 0)
		return err;
	attr_of(c, &oa, a);
	return 0;
}

static int ord_truncate(struct core *c, uint64_t node, off_t size, struct core_attr *a)
{
	int err = size >= 0 ? order_truncate(c->order, node, size) : 0;

	return err < 0 ? err : ord_getattr(c, node, a);
}

static int ord_unlink(struct core *c, uint64_t parent, const char *name, const struct core_caller *who)
{
	return order_unlink(c->order, parent, name, who->uid);
}

static int ord_writable(struct core *c, uint64_t node)
{
	(void)c, (void)node;
	return 1;                   /* the directory takes new streams, the streams their orders */
}

const struct ns_ops ns_order_ops = {
	.lookup = ord_lookup, .getattr = ord_getattr, .readdir = ord_readdir, .read = ord_read, .write = ord_write,
	.create = ord_create, .truncate = ord_truncate, .unlink = ord_unlink, .writable = ord_writable,
};
