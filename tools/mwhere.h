/* mwhere.h - a file's user.epochfs.where text as the tools see it.
 *
 * The daemon answers getxattr("user.epochfs.where") on a regular file of
 * the dataset with a few "key value" lines (fs/core/where.c has the exact
 * text): the file's size and items, how many items and bytes the next read
 * would find in each place (RAM cache, staging, SSD tier, a peer, or none:
 * storage), the peers named, and a map of one letter per item. This module
 * parses that text for epochfs-stat --file; unknown keys are skipped, so a
 * newer daemon may add lines.
 */
#ifndef EPOCHFS_MWHERE_H
#define EPOCHFS_MWHERE_H

#include <stddef.h>
#include <stdint.h>

enum mwhere_place { MWHERE_RAM, MWHERE_STAGING, MWHERE_TIER, MWHERE_PEER, MWHERE_STORAGE, MWHERE__N };

#define MWHERE_NODES 8
#define MWHERE_MAP 16384            /* map letters kept (the daemon sends at most as many) */

struct mwhere {
	uint64_t size;              /* the file's size */
	uint64_t item;              /* the cache's item size */
	uint64_t items;             /* the file's items */
	uint64_t n[MWHERE__N];      /* items the next read finds in each place */
	uint64_t bytes[MWHERE__N];  /* ... and their bytes */
	int nodes;
	char node[MWHERE_NODES][256];   /* peers named by the items in MWHERE_PEER */
	char map[MWHERE_MAP + 1];   /* one letter per item: R S T P . (MWHERE_LETTERS) */
	uint64_t map_more;          /* items past the end of MAP */
};

/* The letter of each place in the map, in enum order. */
#define MWHERE_LETTERS "RSTP."

/* Parses TEXT (LEN bytes, not NUL-terminated) into W. 0, or -EBADMSG when
 * a line the text must have (size, items, the five places, map) is
 * missing or malformed. */
int mwhere_parse(const char *text, size_t len, struct mwhere *w);

/* The key of place P in the text ("ram", "staging", ...). */
const char *mwhere_key(enum mwhere_place p);

#endif
