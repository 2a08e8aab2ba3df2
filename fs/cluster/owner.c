/* owner.c - see owner.h.
 *
 * DESIGN: one xxh3 of the key per lookup, then a 64-bit mix (splitmix64's
 * finalizer) of key hash ^ node seed per node, instead of one xxh3 per node:
 * N cheap mixes, and the weights of different nodes are still independent
 * for practical purposes. Ties (equal 64-bit weights) go to the lower index.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/owner.h"

struct owner {
	unsigned n;
	uint64_t digest;            /* of the names, in order */
	uint64_t seed[];
};

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int owner_new(const char *const *ids, unsigned n, struct owner **out)
{
	struct owner *o;

	if (!n)
		return -EINVAL;
	o = calloc(1, sizeof(*o) + n * sizeof(uint64_t));
	if (!o)
		return -ENOMEM;
	o->n = n;
	for (unsigned i = 0; i < n; i++) {
		o->seed[i] = XXH3_64bits(ids[i], strlen(ids[i]));
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(ids[i], ids[j])) {
				free(o);
				return -EINVAL;
			}
		o->digest = XXH3_64bits_withSeed(ids[i], strlen(ids[i]) + 1, o->digest);
	}
	*out = o;
	return 0;
}

void owner_free(struct owner *o)
{
	free(o);
}

unsigned owner_nodes(const struct owner *o)
{
	return o->n;
}

unsigned owner_of(const struct owner *o, const char *rel, size_t len, uint32_t chunk)
{
	uint64_t key = XXH3_64bits_withSeed(rel, len, chunk), best = 0;
	unsigned who = 0;

	for (unsigned i = 0; i < o->n; i++) {
		uint64_t w = mix(key ^ o->seed[i]);
		if (i == 0 || w > best) {
			best = w;
			who = i;
		}
	}
	return who;
}

void owner_ranking(const struct owner *o, const char *rel, size_t len, uint32_t chunk,
		   unsigned *out)
{
	uint64_t key = XXH3_64bits_withSeed(rel, len, chunk), w[o->n];

	/* Insertion sort, heaviest first, ties to the lower index: n is a
	 * cluster's size, and this runs on misses only. */
	for (unsigned i = 0; i < o->n; i++) {
		uint64_t wi = mix(key ^ o->seed[i]);
		unsigned j = i;
		while (j > 0 && w[j - 1] < wi) {
			w[j] = w[j - 1];
			out[j] = out[j - 1];
			j--;
		}
		w[j] = wi;
		out[j] = i;
	}
}

void owner_top(const struct owner *o, const char *rel, size_t len, uint32_t chunk, unsigned k,
	       uint16_t *out)
{
	uint64_t key = XXH3_64bits_withSeed(rel, len, chunk), w[k ? k : 1];
	unsigned have = 0;

	/* The K heaviest, kept sorted as they come: same order and ties as
	 * owner_ranking(). */
	for (unsigned i = 0; i < o->n; i++) {
		uint64_t wi = mix(key ^ o->seed[i]);
		unsigned j = have < k ? have++ : k;
		if (j == k && (!k || w[k - 1] >= wi))
			continue;
		if (j == k)
			j = k - 1;
		while (j > 0 && w[j - 1] < wi) {
			w[j] = w[j - 1];
			out[j] = out[j - 1];
			j--;
		}
		w[j] = wi;
		out[j] = (uint16_t)i;
	}
}

uint64_t owner_digest(const struct owner *o, uint32_t chunk_size)
{
	return mix(o->digest ^ chunk_size);
}
