/* ns_prep.c - the .prep/ namespace's operations (ns.h) over prepdir.c:
 * spec files written to declare a group, the group's epochs and batch
 * files read by its consumers (every lookup a new node: one consumer).
 */
#include <errno.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/ns/prepdir.h"

static void attr_of(const struct prepdir_attr *pa, double valid, struct core_attr *a)
{
	ns_virtual_attr(pa->node, pa->is_dir, pa->is_dir ? 0755 : pa->writable ? 0644 : 0444, pa->size, valid, a);
	a->blksize = 128 * 1024;
	a->blocks = (pa->size + 511) / 512;
}

static int prp_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct prepdir_attr pa;
	int err = prepdir_lookup(c->prep, parent, name, &pa);

	if (err < 0)
		return err;
	attr_of(&pa, 0, a);
	return 0;
}

static int prp_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	struct prepdir_attr pa;
	int err = prepdir_getattr(c->prep, node, &pa);

	if (err < 0)
		return err;
	attr_of(&pa, 0, a);
	return 0;
}

static int prp_readdir(struct core *c, uint64_t dir, uint64_t *posp, struct core_dirent *d)
{
	struct prepdir_attr pa;
	uint64_t pos = *posp;
	int is_dir = 1, err = prepdir_getattr(c->prep, dir, &pa);

	if (!err && !pa.is_dir)
		err = -ENOTDIR;
	if (err)
		return err;
	if (!prepdir_dirent(c->prep, dir, pos, &is_dir, d->name, sizeof(d->name)))
		return 0;
	d->attr = (struct core_attr){ .mode = is_dir ? S_IFDIR | 0755 : S_IFREG | 0444, .ino = pos + 3 };
	return 1;
}

static void prp_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	/* Answered now, or by the prep worker that makes the batch. */
	prepdir_read(c->prep, node, len, off, done, arg);
}

static ssize_t prp_write(struct core *c, uint64_t node, const void *buf, size_t len, off_t off)
{
	return prepdir_write(c->prep, node, buf, len, off);
}

static int prp_create(struct core *c, uint64_t parent, const char *name, const struct core_caller *who,
		      struct core_attr *a)
{
	struct prepdir_attr pa;

	(void)who;                  /* .prep/ is the daemon's user's alone (0755) */
	int err = prepdir_create(c->prep, parent, name, &pa);

	if (err < 0)
		return err;
	attr_of(&pa, 0, a);
	return 0;
}

static int prp_truncate(struct core *c, uint64_t node, off_t size, struct core_attr *a)
{
	struct prepdir_attr pa;
	int err;

	if ((size >= 0 && (err = prepdir_truncate(c->prep, node, size)) < 0) ||
	    (err = prepdir_getattr(c->prep, node, &pa)) < 0)
		return err;
	if (!pa.writable)
		return -EROFS;
	attr_of(&pa, 0, a);
	return 0;
}

static int prp_unlink(struct core *c, uint64_t parent, const char *name, const struct core_caller *who)
{
	(void)who;
	return prepdir_unlink(c->prep, parent, name);
}

static int prp_writable(struct core *c, uint64_t node)
{
	struct prepdir_attr pa;

	/* .prep/ itself and its spec files take writes. */
	return prepdir_getattr(c->prep, node, &pa) == 0 && pa.writable;
}

static void prp_release(struct core *c, uint64_t node)
{
	prepdir_release(c->prep, node);
}

static void prp_forget(struct core *c, uint64_t node, uint64_t nlookup)
{
	prepdir_forget(c->prep, node, nlookup);
}

const struct ns_ops ns_prep_ops = {
	.lookup = prp_lookup, .getattr = prp_getattr, .readdir = prp_readdir, .read = prp_read, .write = prp_write,
	.create = prp_create, .truncate = prp_truncate, .unlink = prp_unlink, .writable = prp_writable,
	.release = prp_release, .forget = prp_forget,
};
