/* control.h - the virtual control directory MOUNTPOINT/.epochfs/.
 *
 * Its files (stats.json, metrics) change all the time, yet the mount runs
 * with the kernel's "no open" mode and keep_cache, where the kernel would
 * happily serve a stale page. So every lookup of a control file renders a
 * fresh *snapshot* and gives it a node number of its own: the kernel sees a
 * new inode each time (entry and attr timeouts are 0), reads it from the
 * start, and never mixes two snapshots. A snapshot is freed when the kernel
 * forgets its node. Node numbers are the control namespace's (ns.h) and never
 * collide with the index's.
 *
 * Thread-safe (one internal mutex; control files are not on the data path).
 */
#ifndef EPOCHFS_CONTROL_H
#define EPOCHFS_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/ns/ns.h"

#define CONTROL_DIR_NAME ".epochfs"

enum control_file { CONTROL_STATS_JSON, CONTROL_METRICS, CONTROL__FILES };

/* Renders FILE into BUF of LEN bytes; returns its length or -ENOSPC. */
typedef int (*control_render_fn)(void *arg, enum control_file file, char *buf, size_t len);

struct control;

struct control_attr {
	uint64_t node;
	int is_dir;
	size_t size;
};

int control_new(control_render_fn render, void *arg, struct control **out);
void control_free(struct control *ct);

/* NAME inside control directory DIR: 0 and *A (a fresh snapshot for a
 * file, holding one lookup reference), or -ENOENT / -ENOMEM. */
int control_lookup(struct control *ct, uint64_t dir, const char *name, struct control_attr *a);
/* -ENOENT once the node was forgotten (or never existed). */
int control_getattr(struct control *ct, uint64_t node, struct control_attr *a);
/* Copies up to LEN bytes at OFF of snapshot NODE; bytes or -errno. */
ssize_t control_read(struct control *ct, uint64_t node, void *buf, size_t len, off_t off);
/* Drops NLOOKUP references; the snapshot is freed at zero. */
void control_forget(struct control *ct, uint64_t node, uint64_t nlookup);
/* Name of the POS-th entry of control directory DIR, or NULL past the end. */
const char *control_dirent(const struct control *ct, uint64_t dir, unsigned pos);

#endif
