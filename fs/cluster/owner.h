/* owner.h - which node of a cluster owns a cache item.
 *
 * Rendezvous (highest-random-weight) hashing: every node of the list gets a
 * weight for every item, and the item belongs to the heaviest. The item is
 * named by its path below SOURCE and its chunk index (files larger than the
 * cache chunk are owned chunk by chunk), hashed once with xxh3; a node's
 * weight is that hash mixed with the node's own seed (xxh3 of its "host:port"
 * as written in the peer list). So:
 *   - every node computes the same owner alone, from the list it was given;
 *   - items spread evenly (each node owns 1/N, within sampling noise);
 *   - removing a node moves only the items it owned: every other item's
 *     heaviest node is still there.
 * Pure functions over an immutable table: any thread, no locks.
 */
#ifndef EPOCHFS_OWNER_H
#define EPOCHFS_OWNER_H

#include <stddef.h>
#include <stdint.h>

struct owner;

/* A table for the N nodes named IDS[0..N-1] (the peer list, in order).
 * 0, -EINVAL (N is 0 or two nodes share a name), -ENOMEM. */
int owner_new(const char *const *ids, unsigned n, struct owner **out);
void owner_free(struct owner *o);
unsigned owner_nodes(const struct owner *o);

/* The index (into IDS) of the node that owns chunk CHUNK of the file REL
 * (LEN bytes, not NUL-terminated necessarily). */
unsigned owner_of(const struct owner *o, const char *rel, size_t len, uint32_t chunk);

/* The item's nodes from heaviest to lightest (OUT[0] is the owner; OUT has
 * room for owner_nodes() entries): where the item spills, in order, while
 * the nodes before are full. Removing a node from the table removes it from
 * every ranking and keeps the others' order. */
void owner_ranking(const struct owner *o, const char *rel, size_t len, uint32_t chunk,
		   unsigned *out);

/* The first K nodes of that ranking (K at most owner_nodes()), in O(N K). */
void owner_top(const struct owner *o, const char *rel, size_t len, uint32_t chunk, unsigned k,
	       uint16_t *out);

/* A digest of the table (the names, in order) and of CHUNK_SIZE: two nodes
 * agree on every owner exactly when their digests are equal. */
uint64_t owner_digest(const struct owner *o, uint32_t chunk_size);

#endif
