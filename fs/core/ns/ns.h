/* ns.h - the namespaces that share the kernel's node numbers: the one
 * place their bits are handed out, and the table of operations each one
 * answers (nodes.c dispatches on it).
 *
 *   namespace  where                      node number
 *   data       the dataset (SOURCE)       (generation << 32) | index id; bit 63 clear
 *   control    .epochfs/                  VIRTUAL | its own counter (control.c)
 *   order      .epochfs/order/            VIRTUAL | ORDER | slot, generation, lookup (order.c)
 *   prep       .prep/                     VIRTUAL | PREP | kind, slot, ... (prepdir_int.h)
 *
 * A node's namespace is told by ns_of() alone, once per operation, so no
 * handler depends on asking the right question first. The generation of a
 * data node keeps 31 bits (CORE_GEN_MASK) so bit 63 stays free.
 */
#ifndef EPOCHFS_NS_H
#define EPOCHFS_NS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/core.h"

#define NS_BIT_VIRTUAL (1ull << 63)         /* every node that is not the dataset's */
#define NS_BIT_PREP (1ull << 62)            /* with VIRTUAL: .prep/ */
#define NS_BIT_ORDER (1ull << 61)           /* with VIRTUAL (not PREP): .epochfs/order/ */

#define CONTROL_DIR_NODE (NS_BIT_VIRTUAL | 1u)             /* .epochfs itself */
#define ORDER_DIR_NODE (NS_BIT_VIRTUAL | NS_BIT_ORDER)    /* .epochfs/order itself */
#define PREPDIR_DIR_NODE (NS_BIT_VIRTUAL | NS_BIT_PREP)   /* .prep itself */

enum ns_id { NS_DATA, NS_CONTROL, NS_ORDER, NS_PREP, NS__COUNT };

static inline enum ns_id ns_of(uint64_t node)
{
	if (!(node & NS_BIT_VIRTUAL))
		return NS_DATA;
	if (node & NS_BIT_PREP)
		return NS_PREP;
	return node & NS_BIT_ORDER ? NS_ORDER : NS_CONTROL;
}

/* What a namespace answers. NULL: the operation is refused (-EROFS for
 * writes, -EINVAL or nothing for the rest, as core.h says for each). Each
 * is called with the node of its own namespace only. */
struct ns_ops {
	int (*lookup)(struct core *c, uint64_t parent, const char *name, struct core_attr *a);
	int (*getattr)(struct core *c, uint64_t node, struct core_attr *a);
	/* The entry of DIR at *POS (counting from 0 after "." and ".."), or the
	 * next one there is, *POS moved to it: 1 and *D, 0 past the end, or
	 * -errno. */
	int (*readdir)(struct core *c, uint64_t dir, uint64_t *pos, struct core_dirent *d);
	void (*read)(struct core *c, uint64_t node, off_t off, size_t len, core_read_fn done, void *arg);
	ssize_t (*write)(struct core *c, uint64_t node, const void *buf, size_t len, off_t off);
	int (*create)(struct core *c, uint64_t parent, const char *name, const struct core_caller *who,
		      struct core_attr *a);
	/* SIZE < 0: attributes only (a setattr without a size). */
	int (*truncate)(struct core *c, uint64_t node, off_t size, struct core_attr *a);
	int (*unlink)(struct core *c, uint64_t parent, const char *name, const struct core_caller *who);
	/* 1 if NODE takes writes (access W_OK, an open for writing). */
	int (*writable)(struct core *c, uint64_t node);
	void (*release)(struct core *c, uint64_t node);
	void (*forget)(struct core *c, uint64_t node, uint64_t nlookup);
};

extern const struct ns_ops ns_data_ops;       /* nodes.c */
extern const struct ns_ops ns_control_ops;    /* ns/ns_control.c */
extern const struct ns_ops ns_order_ops;      /* ns/ns_order.c */
extern const struct ns_ops ns_prep_ops;       /* ns/ns_prep.c */

/* A virtual file's attributes: the daemon's user, mode MODE, SIZE bytes,
 * not cached by the kernel (each lookup a new node: a fresh snapshot, a
 * new batch reader), read with direct I/O. A directory: cached VALID s. */
void ns_virtual_attr(uint64_t node, int is_dir, unsigned mode, size_t size, double valid, struct core_attr *a);

#endif
