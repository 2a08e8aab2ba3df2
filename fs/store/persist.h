/* persist.h - the RAM cache's state on tmpfs, so a restarted daemon keeps
 * what the last one cached.
 *
 * A daemon's RAM cache is lost with its process: an upgrade, a crash or a
 * pod restart, and the next epoch refills from storage. With a state
 * directory (--state-dir, on tmpfs) the arena is the file DIR/arena, mapped
 * shared, so its pages outlive the process, and DIR/table lists what the
 * arena holds: one record per item made ready (path below SOURCE, chunk,
 * the file's version, arena offset, length, xxh3 of the bytes) and one per
 * cut (memory given back: records of items past an offset are void). A
 * record carries its own checksum; the table is appended to, one write(2)
 * per record, after the item's bytes are in the arena and hashed.
 *
 * A new daemon adopts the state before it serves (persist_adopt): each
 * record's file must still be in SOURCE at the same version (inode, size,
 * mtime, ctime: what the mount's scan saw, so nothing is read from
 * storage) and its bytes must hash to the record's checksum; anything else
 * is dropped and counted, never served. A table whose header names another
 * SOURCE, another chunk size or another format, or whose header is
 * corrupt, is discarded whole with one log line. The table is then
 * rewritten with the adopted records only (a new file renamed over the old)
 * and the pages nobody holds are punched out of the arena. Before that,
 * the items kept are moved down over the space of those dropped, so no
 * budget is lost to them (and a smaller budget keeps what fits).
 *
 * kill -9 at any moment leaves a state the next daemon can read: the arena
 * lives on in tmpfs; a record is written only once its item is complete; a
 * torn last record fails its checksum and ends the table; a cut is
 * recorded before the arena past it is reused; the table is replaced by
 * rename(2). A record that outlived its bytes fails the data checksum.
 *
 * DIR/lock is held (flock) while a daemon runs: a second daemon on the same
 * state directory is refused. DIR/owner names the mount point and SOURCE,
 * for people and for persist_sweep().
 *
 * Trust (util/trust.h): DIR is reached through directories nobody else can
 * change, is the daemon user's and 0700 (a looser one has its contents
 * discarded), and every file in it is opened without following links and
 * checked (regular, ours, one link, 0600); a file that fails is removed and
 * made anew. So the state is only ever written by this user's daemons, and
 * adopting it trusts nothing more than that. The default root is per user
 * (/dev/shm/epochfs-UID), so one user cannot block another's.
 *
 * Lifetime: a clean stop removes the state (persist_remove), and the
 * user's default root with it when that was its last state, unless the
 * mount keeps it on purpose (persist_mark_kept); a crash, kill -9 or the
 * OOM killer leaves it for the restart. persist_sweep() frees the
 * orphans no restart will come for; persist_list() shows an operator every
 * state of a root and persist_free_states() frees those no daemon holds
 * (epochfs-stat --states, --free-states).
 *
 * Thread safety: persist_record() and persist_cut() (the cache's hooks)
 * may be called from any thread; the rest from one thread, before the
 * cache serves or after it stopped.
 */
#ifndef EPOCHFS_PERSIST_H
#define EPOCHFS_PERSIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/cache.h"
#include "store/index.h"

#define PERSIST_FORMAT 2u                   /* 2: the header names the manifest in force */
#define PERSIST_ROOT_PREFIX "/dev/shm/epochfs"  /* the default root is PREFIX-UID */
#define PERSIST_STOP_WAIT_S 30              /* persist_open waits this long for a stopping holder */

struct persist;

/* 0 if the LEN bytes of DATA, chunk CHUNK of entry ID at version V, are
 * vouched for (the manifest), else nonzero: the item is not adopted. */
typedef int (*persist_check_fn)(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
				const void *data, size_t len);

struct persist_opts {
	const char *dir;            /* the state directory; made (0700) when absent */
	const char *source;         /* SOURCE's absolute path */
	const char *mountpoint;     /* recorded in DIR/owner */
	uint32_t chunk;             /* the cache's item size */
	uint64_t capacity;          /* the arena's size: DIR/arena is made this long */
	int tmpfs;                  /* refuse a DIR that is not on tmpfs (the RAM cache's state) */
	int compact;                /* at adoption, move the items kept down over dropped ones
				     * (through a mapping of the arena: the RAM cache only) */
	const char *what;           /* the option that names DIR, for messages (NULL: --state-dir) */
	int room_check;             /* refuse (-ENOSPC) a CAPACITY that would leave DIR's filesystem
				     * less than persist_headroom() free */
	int keep_held;              /* at adoption, items past CAPACITY are kept and CAPACITY grows to
				     * hold them (the SSD tier at its default size) */
	uint64_t manifest_id;       /* manifest_id() of --manifest, 0: none. A state made under
				     * another one is checked item by item with CHECK (compact
				     * states) or discarded */
	persist_check_fn check;     /* see manifest_id; NULL: such states are discarded */
	void *check_arg;
};

struct persist_stats {
	int found;                  /* a previous daemon's state was there */
	char discarded[200];        /* why the whole state was discarded; "" if it was not */
	uint64_t records;           /* item records read from the table */
	uint64_t adopted, adopted_bytes;
	uint64_t dropped_changed;   /* its file changed in or left SOURCE */
	uint64_t dropped_corrupt;   /* its bytes fail their checksum */
	uint64_t dropped_unverified; /* made without this --manifest, and its bytes do not match it */
	uint64_t dropped_other;     /* void (a cut), outside the arena, overlapping, a duplicate */
	uint64_t dropped_bytes;     /* bytes of every dropped item */
	uint64_t torn_bytes;        /* the table's tail that did not parse (a torn or corrupt record) */
	uint64_t moved;             /* adopted items moved down over the space of dropped ones */
	uint64_t record_errors;     /* records that could not be written (the item stays, unrecorded) */
	double adopt_seconds;       /* persist_adopt() from start to end */
};

/* The index entry of path REL (LEN bytes, below SOURCE) now: 0 with *ID
 * and its version *V, or -ENOENT. */
typedef int (*persist_resolve_fn)(void *arg, const char *rel, size_t len, uint32_t *id,
				  struct index_version *v);
/* The path of entry ID below SOURCE into BUF: its length, or -errno. */
typedef int (*persist_path_fn)(void *arg, uint32_t id, char *buf, size_t len);

/* Opens (or makes) the state directory: checks it (trust, above), takes
 * its lock, checks it is on tmpfs and has room, opens DIR/arena at
 * CAPACITY bytes and reads DIR/table's header, discarding a state that
 * does not match (persist_get_stats() says why). Returns 0 and *OUT, or
 * -EBUSY (another daemon holds it), -EINVAL (not on tmpfs), -EPERM (not
 * trusted), -ENOSPC (no room), -errno; ERR gets one line. A lock held by
 * a daemon whose mount point is no longer an epochfs mount (it is
 * stopping: umount returns before the daemon exits) is waited for, up to
 * PERSIST_STOP_WAIT_S; one held by a serving daemon is -EBUSY at once. */
int persist_open(const struct persist_opts *o, struct persist **out, char *err, size_t errlen);

/* What persist_open leaves free on a filesystem of FS_SIZE bytes: a
 * quarter of it, and at least half of it up to 1 GiB. */
uint64_t persist_headroom(uint64_t fs_size);

/* Writes this process's pid into the state's lock file, for people and
 * `epochfs-stat --states` (the lock itself is the flock): persist_open()
 * does, and a daemon that forked into the background after it does again,
 * or the file names its parent, long gone. */
void persist_note_pid(struct persist *p);

/* The arena file, for cache_opts.arena_fd; valid until persist_close(). */
int persist_arena_fd(const struct persist *p);
/* The arena opened again with FLAGS (O_DIRECT, ...), by its name in DIR
 * without following links, checked to be the same file. fd or -errno. */
int persist_reopen_arena(const struct persist *p, int flags);
/* CAPACITY, or more after an adoption with keep_held. */
uint64_t persist_capacity(const struct persist *p);

/* Adopts the table's items into C (made on persist_arena_fd(), empty, not
 * serving yet) with THREADS threads hashing (0: one per CPU), punches the
 * unheld pages, rewrites the table with what was adopted, and hooks C so
 * every later item and cut is recorded (PATH names an item's file).
 * Returns 0 or -errno (the table could not be rewritten: the state is then
 * discarded and C emptied of nothing but the records; the cache serves
 * what it adopted, and records anew). */
int persist_adopt(struct persist *p, struct cache *c, persist_resolve_fn resolve, persist_path_fn path,
		  void *arg, unsigned threads);

/* The same for any store of items in DIR/arena (the SSD tier, tier.h):
 * FN(FN_ARG, ...) takes each item, which must then check or defer the
 * check of its bytes; *USED gets the end of the last item kept (the store's
 * fill pointer). Records are written afterwards with persist_record() and
 * persist_record_cut(), which the store calls itself. */
typedef int (*persist_adopt_fn)(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
				uint64_t off, size_t len, uint64_t xxh);
int persist_adopt_items(struct persist *p, persist_adopt_fn fn, void *fn_arg, persist_resolve_fn resolve,
			persist_path_fn path, void *arg, unsigned threads, uint64_t *used);
/* An item of ID's file (piece CHUNK, version V) is complete at OFF, LEN
 * bytes with checksum XXH; a cut: items reaching past OFF are gone. Both
 * after persist_adopt_items() only (before it they do nothing). */
void persist_record(struct persist *p, uint32_t id, uint32_t chunk, const struct index_version *v,
		    uint64_t off, size_t len, uint64_t xxh);
void persist_record_cut(struct persist *p, uint64_t off);
/* Empties the state (arena and table) without adopting or recording: a
 * store that must start empty (--no-persist) but still holds the lock. */
int persist_clear(struct persist *p);

void persist_get_stats(struct persist *p, struct persist_stats *s);
const char *persist_dir(const struct persist *p);

/* Releases the lock and closes the files; the state stays for the next
 * daemon. Call after cache_free(). NULL is fine. */
void persist_close(struct persist *p);
/* The same, after removing the state: its memory goes back (a clean stop). */
void persist_remove(struct persist *p);
/* Marks the state as kept on purpose at a clean stop (--persist always):
 * persist_sweep() leaves it while its mount point exists. */
void persist_mark_kept(struct persist *p);

/* The default root of this user's states, PERSIST_ROOT_PREFIX-UID. */
void persist_default_root(char *buf, size_t len);
/* The default state directory for MOUNTPOINT (an absolute path) under
 * ROOT: a readable tail of the path and a hash of all of it. */
void persist_default_dir(const char *root, const char *mountpoint, char *buf, size_t len);

/* Frees the states under ROOT (a trusted root of this user's) that no
 * daemon holds and no restart will come for: their mount point is gone, or
 * is no longer an epochfs mount and the state was not kept on purpose. A
 * dead epochfs mount (its daemon was killed) keeps its state. EXCEPT (a
 * name in ROOT, or NULL) is left alone. Returns how many went. */
int persist_sweep(const char *root, const char *except);

/* One entry of a state root, as persist_list() and persist_free_states()
 * report it. Strings are valid during the callback only. */
struct persist_state_info {
	const char *root;           /* the root it is in */
	const char *name;           /* its name there; "" when the root itself is reported (skipped) */
	int skipped;                /* not a state that can be believed or freed: WHY says what it is */
	char why[320];              /* skipped, or a free that failed: one line, no program name */
	uid_t uid;                  /* the owner of the state (and of its root) */
	char mountpoint[4096];      /* from DIR/owner: the mount it served; "" if unknown */
	char source[4096];          /* ... and its SOURCE */
	int kept;                   /* kept on purpose at a clean stop (--persist always) */
	int locked;                 /* DIR/lock exists (a daemon made it, or is making it) */
	int alive;                  /* a daemon holds DIR/lock now */
	int pid;                    /* the pid DIR/lock names (the last holder), 0: none */
	uint64_t bytes;             /* memory its files hold (allocated blocks, st_blocks * 512) */
	uint64_t arena_bytes;       /* of which DIR/arena's */
	uint64_t arena_size;        /* DIR/arena's length (most of it may never have been touched) */
	int freed;                  /* persist_free_states(): removed, BYTES given back */
};

typedef void (*persist_state_fn)(void *arg, const struct persist_state_info *s);

/* Reports to FN every entry of the state root ROOT, or with ROOT NULL of
 * the default roots: this user's (PERSIST_ROOT_PREFIX-UID), and for root
 * every user's (PERSIST_ROOT_PREFIX-N, which must be N's). Nothing is made
 * or changed: files are opened read-only, without following links, and a
 * state's lock is tried (flock, not blocking) and let go at once to learn
 * whether a daemon holds it.
 *
 * Trust: the directories up to ROOT are checked as trust_dir() does; ROOT
 * itself is not followed if a link, must be owned by the caller (root: by
 * anyone, by N for PERSIST_ROOT_PREFIX-N) and not writable by group or
 * others; each state must be a directory of the same user, 0700, and its
 * lock and owner files private files of that user (trust_openat_of()).
 * What fails is reported skipped, with why, and never looked into: a
 * missing default root is not reported, any other root that cannot be
 * used is (name ""). Returns the number of states reported (skipped
 * entries not counted), or -errno when the roots cannot be listed at all. */
int persist_list(const char *root, persist_state_fn fn, void *arg);

/* The same walk, and each state no daemon holds is removed while its lock
 * is held (so no daemon takes it meanwhile; the lock goes last): FN learns
 * freed = 1 and the bytes given back, or why it could not be. A state whose
 * lock is held, a skipped entry, and anything outside a state directory
 * are never touched; links inside one are removed, never followed. Kept
 * states are freed too (that is what an operator asks for after a stop).
 * Returns the number of states freed, or -errno as persist_list(). */
int persist_free_states(const char *root, persist_state_fn fn, void *arg);

#endif
