/* manifest_int.h - the inside of a manifest, shared by fs/store/manifest.c (load,
 * check, bind) and fs/store/manifest_build.c (the parallel builder): the image
 * and its little-endian fields. See manifest.h for the format.
 */
#ifndef EPOCHFS_MANIFEST_INT_H
#define EPOCHFS_MANIFEST_INT_H

#include <stddef.h>
#include <stdint.h>

#include "store/manifest.h"

#define READ_BLOCK (1u << 20)
#define MIN_RECORD 35u              /* u16 length, one path byte, u64 size, version */
#define REC_FIXED 32u               /* size, ino, mtime_ns, ctime_ns after the path */
#define MAX_PATH_LEN 65535u
#define MAX_FILES ((uint64_t)INT_MAX)

struct manifest {
	uint8_t *buf;               /* the file image, trailer included */
	size_t len;
	uint32_t chunk;
	uint64_t nfiles, bytes;
	uint64_t *off;              /* record i starts at buf + off[i] */
	uint32_t *bound;            /* index id -> record + 1, 0: none; set by bind */
	uint32_t nbound;            /* entries in bound */
};

/* ---- little-endian fields ---- */
static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t chunks_of(uint64_t size, uint32_t chunk)
{
	return size / chunk + (size % chunk != 0);
}

/* Checks M->buf (M->len bytes) by every rule of the format and fills the
 * record offsets; NAME names it in ERR. 0, -EBADMSG, -ENOTSUP, -ENOMEM. */
int manifest_parse(struct manifest *m, const char *name, char *err, size_t errlen);
/* libsodium, initialised once: 0, or -ENOSYS with ERR set. */
int manifest_need_sodium(char *err, size_t errlen);

#endif
