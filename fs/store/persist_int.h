/* persist_int.h - what the cache state's two files share: persist.c (the
 * state directory: open, trust, lock, room, removal, the sweep of orphans)
 * and persist_table.c (the table: its format, records, adoption). Not for
 * other modules: persist.h is the contract.
 */
#ifndef EPOCHFS_PERSIST_INT_H
#define EPOCHFS_PERSIST_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "store/persist.h"

/* The table's header: what a state was made for. */
struct persist_hdr {
	char magic[8];
	uint32_t format, chunk;
	uint64_t capacity;
	uint64_t src_dev, src_ino, src_hash;
	uint64_t created;
	uint64_t manifest;              /* manifest_id() of the --manifest in force, 0: none */
	uint64_t xxh;                   /* of the bytes above */
};

struct persist {
	char *dir;
	int dirfd, lockfd, arenafd, tablefd;
	uint64_t capacity;
	uint32_t chunk;
	struct persist_hdr hdr;         /* what this daemon writes */
	int have_table;                 /* DIR/table matched: adopt from it */
	int compact;                    /* move items down over dropped ones at adoption */
	int keep_held;                  /* never drop adopted items past CAPACITY: grow it */
	int recheck;                    /* the state was made under another manifest: CHECK each item */
	persist_check_fn check;
	void *check_arg;
	int recording;                  /* after adoption: records are written (wlock) */
	pthread_mutex_t wlock;          /* one record written at a time */
	persist_path_fn path;
	void *path_arg;
	struct persist_stats st;        /* record_errors atomic */
};

/* persist_table.c: the header this daemon writes (SOURCE, stat of it
 * SRC, CAPACITY, MANIFEST_ID), then DIR/table read and judged: adopted
 * later (have_table), or discarded with the reason in st.discarded and a
 * new empty table made. P's directory is open and locked. 0 or -errno
 * (a new table could not be written). */
int persist_table_open(struct persist *p, const struct stat *src, const char *source, uint64_t capacity,
		       uint64_t manifest_id);

/* persist.c: ROOT goes once its last state has: after a clean stop, or
 * the sweep or an operator freed what was there, /dev/shm holds nothing of
 * epochfs. Only this user's default root (persist_default_root: a
 * --state-dir's parent is the user's own), and only when empty (another
 * daemon's state keeps it). A daemon making its state there at that moment
 * finds its parent gone and starts again (persist_open). */
void persist_drop_root(const char *root);

#endif
