/* rng.h - splitmix64, the tools' one deterministic generator.
 *
 * The dataset generator and the bench must draw the same streams on every
 * machine and run, from a seed alone; splitmix64 is tiny, fast and passes
 * BigCrush, which is all a synthetic dataset and a permutation need.
 */
#ifndef EPOCHFS_RNG_H
#define EPOCHFS_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif
