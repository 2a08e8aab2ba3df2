/* where.c - "is this file cached?": where the next read of each of a
 * file's cache items would be answered from, as a short text the adapter
 * returns for the extended attribute user.epochfs.where (getfattr -n
 * user.epochfs.where FILE; epochfs-stat --file FILE prints it as a table).
 *
 * Each item is put in the first place the read path would look (plan.c):
 * the RAM cache (R), the staging area the prefetcher filled (S), the SSD
 * tier (T), another node's cache (P: the node a miss goes to, which holds
 * it after its first read there), or none of them (.: the next read goes
 * to SOURCE). It is a look, not a read: nothing is counted, admitted or
 * fetched, and an item may come or go right after. The kernel's own page
 * cache, above the daemon, is for the reader to ask (mincore(2)); the tool
 * does.
 *
 * The text, one "key value" line each, keys in this order:
 *   size BYTES             the file's size, as the index has it
 *   item BYTES             the cache's item size (--chunk-size)
 *   items N                the file's items
 *   ram N BYTES            items (and their bytes) the RAM cache answers
 *   staging N BYTES        ... the prefetcher's staging
 *   tier N BYTES           ... the SSD tier
 *   peer N BYTES           ... another node
 *   storage N BYTES        ... SOURCE (in none of the above)
 *   node NAME              (with peers, once per node named by a P item)
 *   map CHARS[+N]          one letter per item, in order; +N when N more
 *                          items did not fit (WHERE_MAP_MAX)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/ns/ns.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/staging.h"
#include "store/tier.h"

#define WHERE_MAP_MAX 16384         /* letters in the map line */
#define WHERE_NODES 8               /* node lines at most */

enum { W_RAM, W_STAGING, W_TIER, W_PEER, W_STORAGE, W__N };
static const char w_letter[W__N] = { 'R', 'S', 'T', 'P', '.' };
static const char *const w_key[W__N] = { "ram", "staging", "tier", "peer", "storage" };

/* Where item I of entry IA would be read from; a peer's name in NODE. */
static int where_item(struct core *c, const struct index_attr *ia, const char *rel, size_t rel_len,
		      uint32_t i, char *node, size_t node_len)
{
	if (c->cache && cache_holds(c->cache, ia->id, i, &ia->v))
		return W_RAM;
	if (c->staging && staging_has(c->staging, ia->id, i))
		return W_STAGING;
	if (c->tier && tier_holds(c->tier, ia->id, i, &ia->v))
		return W_TIER;
	if (c->peer.keeper && rel) {
		struct source_item it = { .id = ia->id, .chunk = i, .rel = rel, .rel_len = rel_len,
					  .v = ia->v };
		if (c->peer.keeper(c->peer.ctx, &it, node, node_len) == 0)
			return W_PEER;
	}
	return W_STORAGE;
}

ssize_t core_where(struct core *c, uint64_t node, char *buf, size_t len)
{
	struct index_attr ia;
	char rel[4096], name[WHERE_NODES][272], peer[272];
	uint64_t n[W__N] = { 0 }, bytes[W__N] = { 0 };
	int nnames = 0, rl;
	double valid;
	size_t at = 0, cap = 4096;
	char *map, *out;

	if (ns_of(node) != NS_DATA)
		return -ENODATA;
	int err = core_data_get(c, node, &ia, &valid);
	if (err < 0)
		return err;
	if (!S_ISREG(ia.mode))
		return -ENODATA;
	rl = c->peer.keeper ? index_path(c->ix, ia.id, rel, sizeof(rel)) : -1;
	uint32_t items = cache_chunks(ia.v.size, c->chunk);
	uint32_t shown = items < WHERE_MAP_MAX ? items : WHERE_MAP_MAX;
	if (!(map = malloc((size_t)shown + 1)))
		return -ENOMEM;
	for (uint32_t i = 0; i < items; i++) {
		int w = where_item(c, &ia, rl > 0 ? rel : NULL, rl > 0 ? (size_t)rl : 0, i, peer,
				   sizeof(peer));
		n[w]++;
		bytes[w] += cache_chunk_len(ia.v.size, c->chunk, i);
		if (i < shown)
			map[i] = w_letter[w];
		if (w == W_PEER) {
			int k = 0;
			while (k < nnames && strcmp(name[k], peer))
				k++;
			if (k == nnames && nnames < WHERE_NODES)
				memcpy(name[nnames++], peer, sizeof(peer));
		}
	}
	map[shown] = 0;
	cap += shown + (size_t)nnames * 280;
	if (!(out = malloc(cap))) {
		free(map);
		return -ENOMEM;
	}
	at += (size_t)snprintf(out + at, cap - at, "size %llu\nitem %u\nitems %u\n",
			       (unsigned long long)ia.v.size, c->chunk, items);
	for (int w = 0; w < W__N; w++)
		at += (size_t)snprintf(out + at, cap - at, "%s %llu %llu\n", w_key[w],
				       (unsigned long long)n[w], (unsigned long long)bytes[w]);
	for (int k = 0; k < nnames; k++)
		at += (size_t)snprintf(out + at, cap - at, "node %s\n", name[k]);
	at += (size_t)snprintf(out + at, cap - at, "map %s", map);
	if (items > shown)
		at += (size_t)snprintf(out + at, cap - at, "+%u", items - shown);
	at += (size_t)snprintf(out + at, cap - at, "\n");
	free(map);
	if (len && at > len) {
		free(out);
		return -ERANGE;
	}
	if (len)
		memcpy(buf, out, at);
	free(out);
	return (ssize_t)at;
}
