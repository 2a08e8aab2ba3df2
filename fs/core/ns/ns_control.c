/* ns_control.c - the .epochfs/ namespace's operations (ns.h): the control
 * directory's snapshots (control.c), and the order directory listed in it.
 * Each lookup of a control file renders a fresh snapshot under a new node
 * (timeouts 0), so keep_cache can never show a stale one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/ns/order.h"

static void attr_of(struct core *c, const struct control_attr *ca, struct core_attr *a)
{
	ns_virtual_attr(ca->node, ca->is_dir, ca->is_dir ? 0555 : 0444, ca->size, ca->is_dir ? c->timeout : 0, a);
	a->ino = ca->node & ~NS_BIT_VIRTUAL;
}

static int ctl_lookup(struct core *c, uint64_t parent, const char *name, struct core_attr *a)
{
	struct control_attr ca;
	int err = control_lookup(c->ctl, parent, name, &ca);

	if (err < 0)
		return err;
	attr_of(c, &ca, a);
	a->valid = 0;               /* a fresh snapshot per lookup (control.h) */
	return 0;
}

static int ctl_getattr(struct core *c, uint64_t node, struct core_attr *a)
{
	struct control_attr ca;
	int err = control_getattr(c->ctl, node, &ca);

	if (err < 0)
		return err;
	attr_of(c, &ca, a);
	return 0;
}

static int ctl_readdir(struct core *c, uint64_t dir, uint64_t *posp, struct core_dirent *d)
{
	uint64_t pos = *posp;
	const char *name;

	if (dir != CONTROL_DIR_NODE)
		return -ENOTDIR;
	if (pos == CONTROL__FILES && c->order) {
		snprintf(d->name, sizeof(d->name), "%s", ORDER_DIR_NAME);
		d->attr = (struct core_attr){ .mode = S_IFDIR | 0755, .ino = pos + 3 };
		return 1;
	}
	if (pos >= CONTROL__FILES || !(name = control_dirent(c->ctl, dir, (unsigned)pos)))
		return 0;
	snprintf(d->name, sizeof(d->name), "%s", name);
	/* attr.node 0: a listing renders no snapshot. */
	d->attr = (struct core_attr){ .mode = S_IFREG | 0444, .ino = pos + 3 };
	return 1;
}

static void ctl_read(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg)
{
	char *buf = malloc(len ? len : 1);
	ssize_t n = buf ? control_read(c->ctl, node, buf, len, off) : -ENOMEM;

	done(arg, n, buf);
	free(buf);
}

static void ctl_forget(struct core *c, uint64_t node, uint64_t nlookup)
{
	control_forget(c->ctl, node, nlookup);
}

const struct ns_ops ns_control_ops = {
	.lookup = ctl_lookup, .getattr = ctl_getattr, .readdir = ctl_readdir, .read = ctl_read, .forget = ctl_forget,
};
