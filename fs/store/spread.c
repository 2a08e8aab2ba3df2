/* spread.c - the chunks of a large file the RAM cache admits when it holds
 * only a share of the dataset; see spread.h. */
#include "store/spread.h"

uint64_t spread_share(uint64_t capacity, uint64_t need)
{
	if (!need || capacity >= need)
		return 0;
	uint64_t s = (uint64_t)(((unsigned __int128)capacity << 32) / need);
	return s ? s : 1;
}

/* The file's offset in [0, 2^32): a mix of its id (splitmix64's finalizer),
 * so neighbouring ids do not start their stripes together. */
static uint64_t offset_of(uint32_t id)
{
	uint64_t z = (uint64_t)id + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (z ^ (z >> 31)) >> 32;
}

int spread_admits(uint64_t share, uint32_t id, uint32_t chunk, uint32_t nchunks)
{
	if (!share || share >= SPREAD_ONE || nchunks < SPREAD_MIN_CHUNKS)
		return 1;
	unsigned __int128 o = offset_of(id);
	unsigned __int128 a = (unsigned __int128)chunk * share + o, b = a + share;

	return (b >> 32) > (a >> 32);
}
