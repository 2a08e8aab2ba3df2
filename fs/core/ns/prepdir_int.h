/* prepdir_int.h - the inside of .prep/, shared by fs/core/prepdir.c (names,
 * nodes, lookups, batch readers) and fs/core/prepspec.c (declaring: spec writes,
 * commits, refusals and NAME.error). All of it under prepdir's one lock
 * unless a comment says otherwise; see prepdir.h for the contract.
 */
#ifndef EPOCHFS_PREPDIR_INT_H
#define EPOCHFS_PREPDIR_INT_H

#include <limits.h>
#include <pthread.h>

#include "core/ns/prepdir.h"

enum { K_DIR, K_GROUP, K_EPOCH, K_BATCH, K_SPEC, K_ERROR };      /* node kinds */

#define KIND(n) ((unsigned)((n) >> 58) & 15u)
#define SLOT(n) ((unsigned)((n) >> 52) & 63u)
#define GEN(n) ((uint16_t)((n) >> 36))
#define PAYLOAD(n) ((n) & ((1ull << 36) - 1))
#define READER_BUCKETS 1024

struct slot {
	struct prepdir *pd;
	int used;
	uint16_t gen;
	char name[NAME_MAX + 1];
	struct group *g;
	char spec[SPEC_MAX_BYTES + 1];      /* canonical text of the group's spec */
	size_t spec_len;
	char wbuf[SPEC_MAX_BYTES];          /* text written so far */
	size_t wlen;
	int pending;                        /* written since the last commit */
	uint32_t ver;                       /* bumped whenever the spec text changes */
	uint64_t stamp;                     /* when it was created: the oldest unused goes first */
};

/* Why a spec was refused: NAME.error. Kept apart from the slots, in a
 * table of its own whose oldest entry makes room, so refusals never hold a
 * group's slot (500 refused specs in a row leave every slot free). */
struct perr {
	int used;
	uint16_t gen;                       /* bumped when the entry is reused or cleared */
	uint32_t ver;                       /* bumped whenever the text changes */
	uint64_t stamp;                     /* when it was last set: the oldest goes first */
	char name[NAME_MAX + 1];
	char text[600];
};

struct rnode {
	uint64_t node;
	uint64_t nlookup;
	unsigned slot;
	uint16_t gen;
	uint32_t epoch;
	uint64_t index;
	size_t size;
	struct group_reader *r;             /* NULL once its group ended */
	unsigned inflight;                  /* reads not answered yet */
	int forgotten;                      /* free when the last read ends */
	struct rnode *next;
};

struct prepdir {
	struct prepdir_io io;
	struct group_opts o;
	pthread_mutex_t lock;               /* slots, readers, next_reader */
	struct slot slots[PREPDIR_MAX_GROUPS];
	struct perr errs[PREPDIR_MAX_ERRORS];
	uint64_t err_clock;                 /* stamps of errors and slots */
	struct rnode *readers[READER_BUCKETS];
	uint64_t next_reader;
	char names[PREPDIR_MAX_GROUPS * 3][NAME_MAX + 8];   /* dirent scratch */
	char files_text[200];               /* where batches live (prepdir_batch_files) */
	struct group_stats ended;           /* the counters of groups that ended */
};

static inline uint64_t pd_mknode(unsigned kind, unsigned slot, uint16_t gen, uint64_t payload)
{
	return NS_BIT_VIRTUAL | NS_BIT_PREP | (uint64_t)kind << 58 | (uint64_t)slot << 52 |
	       (uint64_t)gen << 36 | (payload & ((1ull << 36) - 1));
}

/* Lock held for all of these. */
struct perr *pd_error_of(struct prepdir *pd, uint64_t node);
struct slot *pd_slot_of(struct prepdir *pd, uint64_t node);
struct slot *pd_find_name(struct prepdir *pd, const char *name, size_t len);
struct perr *pd_find_error(struct prepdir *pd, const char *name, size_t len);
void pd_clear_error(struct prepdir *pd, const char *name);
void pd_release_slot(struct slot *s);
/* "NAME.EXT" with EXT one of spec/error: the name's length, or 0. */
size_t pd_split(const char *name, const char *ext);
void pd_spec_attr(struct slot *s, unsigned i, struct prepdir_attr *a);
/* Applies the text written to slot S (starts its group, or checks it asks
 * for the running one): 0, or -errno with NAME.error set. */
int pd_commit(struct prepdir *pd, struct slot *s);

#endif
