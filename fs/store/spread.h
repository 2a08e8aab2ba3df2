/* spread.h - which chunks of a large file the RAM cache admits when it
 * cannot hold the dataset: a share spread evenly through each file.
 *
 * MinIO admits items in the order they are first read until its budget is
 * spent. For a dataset of small files that is any fixed subset of the
 * right size, and every epoch hits its share wherever in the epoch a file
 * falls. For shards (WebDataset tar files and the like: each worker reads
 * a few large files front to back) it caches the shards read first whole
 * and leaves the others to storage whole: a worker on a cached shard needs
 * no disk, a worker on an uncached one needs all of it, and the epoch's
 * disk reads come in bursts that the disk cannot serve while the CPU
 * waits, and lulls where the disk idles (docs/benchmarks.md, "Part 7 with
 * shards"). Spread, the cache holds the same bytes, but as every k-th
 * chunk of every large file: at every point of every shard the disk
 * supplies the same share, (D - cache) / D, which is what lets the disk's
 * work overlap the whole epoch's decoding.
 *
 * The rule, for a file of N chunks (N >= SPREAD_MIN_CHUNKS) and a share F
 * (cache / dataset, in 1/2^32 units): chunk i is admitted when
 * floor((i + 1) F + o) > floor(i F + o), with o a per-file offset drawn from
 * a hash of its id (so the first chunk of every file is not always the one
 * cached). Over any run of chunks of a file, the admitted ones are within
 * one of F times the run. Smaller files are not spread: each is one or a
 * few items, admitted first come as before.
 *
 * Pure functions: no state, any thread.
 */
#ifndef EPOCHFS_SPREAD_H
#define EPOCHFS_SPREAD_H

#include <stdint.h>

#define SPREAD_MIN_CHUNKS 4u        /* files of fewer chunks are admitted whole, first come */
#define SPREAD_ONE (1ull << 32)     /* the share "everything" */

/* The share a cache of CAPACITY bytes holds of a dataset needing NEED
 * bytes, in 1/2^32 units: 0 when the cache holds it all (or NEED is 0),
 * nothing to spread; else in [1, 2^32). */
uint64_t spread_share(uint64_t capacity, uint64_t need);

/* 1 if chunk CHUNK of file ID (NCHUNKS chunks) may be admitted under SHARE
 * (spread_share; 0: any chunk may), else 0. */
int spread_admits(uint64_t share, uint32_t id, uint32_t chunk, uint32_t nchunks);

#endif
