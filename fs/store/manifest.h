/* manifest.h - a trusted list of per-chunk checksums of every file in SOURCE.
 *
 * Built once near storage (epochfs-manifest), then loaded by the daemon
 * (--manifest FILE) to verify every byte a peer node sends, and every
 * storage load, against it: a peer that holds the cluster secret still
 * cannot feed a reader wrong bytes. Files are cut into chunks of CHUNK bytes
 * (the mount's --cache-chunk; a file's last chunk is shorter, an empty file
 * has none); a chunk's hash is unkeyed BLAKE2b with a 16-byte output
 * (libsodium crypto_generichash).
 *
 * FILE FORMAT (version 2; integers little-endian, no padding)
 *   header, 40 bytes:
 *     "EPMANIF1"           8 bytes, the magic
 *     u32 version          2
 *     u32 chunk            chunk size in bytes, 4 KiB .. 1 GiB
 *     u32 hash_len         16
 *     u32 reserved         0
 *     u64 files            number of records
 *     u64 bytes            sum of the records' sizes
 *   records, one per regular file, sorted by path in strcmp (byte) order,
 *   paths unique:
 *     u16 path_len         1 .. 65535
 *     path_len bytes       relative to SOURCE, '/'-separated, normalized: no
 *                          leading or trailing '/', no empty, "." or ".."
 *                          component, no NUL
 *     u64 size             bytes
 *     u64 ino              the file's version when it was hashed: inode
 *     i64 mtime_ns         number, modification and change times in ns
 *     i64 ctime_ns         since the epoch (stat's st_ino, st_mtim, st_ctim)
 *     ceil(size / chunk) hashes of hash_len bytes, chunk 0 first
 *   trailer, 32 bytes:     unkeyed BLAKE2b-256 of every byte before it
 * Record numbers are 0-based positions in that order, and must fit in an
 * int; a file's chunk numbers must fit in a uint32_t.
 *
 * WHY THE VERSION. A record vouches for one version of its file. Version 1
 * bound records by path and size only, so after a file changed in place
 * (same size, mtime copied back) the old manifest still "verified" the old
 * bytes a lying peer sent. A file whose version (size, inode, mtime, ctime:
 * ctime cannot be set from user space) is not the record's is unverified:
 * read from storage only, never from a peer. A copy of the dataset has its
 * own inodes and ctimes, so a manifest belongs to one SOURCE filesystem:
 * nodes that share storage (NFS, Lustre) share one manifest, nodes with
 * their own copy build their own. Version 1 files are refused with a hint.
 *
 * A loaded manifest is immutable: every accessor and manifest_check() may be
 * called from any number of threads at once. manifest_bind() is the one
 * writer; call it before the readers start (it is not safe to run beside
 * manifest_file_of()).
 *
 * Errors: functions return 0 (or a count) or -errno; those taking ERR write a
 * one-line reason there (no program name, no newline) that names the file
 * and, where there is one, the fix.
 */
#ifndef EPOCHFS_MANIFEST_H
#define EPOCHFS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "store/index.h"

#define MANIFEST_MAGIC "EPMANIF1"
#define MANIFEST_VERSION 2u
#define MANIFEST_HASH_LEN 16u
#define MANIFEST_HEADER_LEN 40u
#define MANIFEST_TRAILER_LEN 32u
#define MANIFEST_MIN_CHUNK (4u << 10)
#define MANIFEST_MAX_CHUNK (1u << 30)
#define MANIFEST_DEFAULT_CHUNK (256u << 10)  /* = the daemon's default --cache-chunk */

struct manifest;

struct manifest_build_opts {
	uint32_t chunk;             /* 0: MANIFEST_DEFAULT_CHUNK */
	unsigned threads;           /* hashing threads; 0: 2 per CPU */
	int progress;               /* a progress line on stderr after 1 s */
};

struct manifest_build_stats {
	uint64_t files, bytes;
	double seconds;             /* scan and hashing, wall clock */
};

/* Builds the manifest of every regular file below the directory SOURCE: a
 * parallel scan (symlinks are neither followed nor listed; the root's
 * reserved names .epochfs and .prep are skipped, as the daemon does), then
 * O->threads hash the files, each opened confined below SOURCE and read with
 * pread, then dropped from the page cache. A file that cannot be read, a
 * directory that cannot be listed, or a file that changes while it is read
 * fails the build with a reason naming it. Returns 0 and a new manifest in
 * *OUT (free with manifest_free; save with manifest_save), or -errno. O and
 * ST may be NULL. */
int manifest_build(const char *source, const struct manifest_build_opts *o,
		   struct manifest_build_stats *st, struct manifest **out, char *err,
		   size_t errlen);

/* Writes M to PATH: to PATH.tmp.PID first, fsync'd, then renamed over PATH,
 * so a reader never sees half a manifest. 0 or -errno. */
int manifest_save(const struct manifest *m, const char *path, char *err, size_t errlen);

/* Reads and checks the manifest at PATH (every rule of the format above;
 * no size in the file is trusted before it is checked against the file's
 * length). Returns 0 and *OUT, or -EBADMSG (not a manifest, corrupt,
 * truncated), -ENOTSUP (another format version) or another -errno. */
int manifest_load(const char *path, struct manifest **out, char *err, size_t errlen);
/* The same from FD (read from its start; not closed), named PATH in ERR:
 * the daemon opens its --manifest with trust_file() first (util/trust.h). */
int manifest_load_fd(int fd, const char *path, struct manifest **out, char *err, size_t errlen);
void manifest_free(struct manifest *m);

uint32_t manifest_chunk(const struct manifest *m);
uint64_t manifest_files(const struct manifest *m);
uint64_t manifest_bytes(const struct manifest *m);
/* Bytes of memory M holds (its file image, record offsets, binding). */
size_t manifest_memory(const struct manifest *m);

/* Record number I: its path (LEN bytes, not NUL-terminated, valid while M
 * lives), size, and the 16-byte hashes of its chunks, back to back (NULL for
 * an empty file). Any out-pointer may be NULL. 0, or -ENOENT past the end. */
int manifest_record(const struct manifest *m, uint64_t i, const char **path, size_t *len,
		    uint64_t *size, const uint8_t **hashes);
/* The version of its file record I was made from, in *V. 0 or -ENOENT. */
int manifest_record_version(const struct manifest *m, uint64_t i, struct index_version *v);
/* 1 if index entry ID's file is at the version V that its bound record
 * was made from, so its bytes can be checked: the record number is in
 * *FILE. 0 otherwise (no record, or another version: unverified). */
int manifest_verifiable(const struct manifest *m, uint32_t id, const struct index_version *v, uint32_t *file);
/* What identifies this manifest (the first 8 bytes of its BLAKE2b
 * trailer): a state made under one manifest records it, so a restart under
 * another can tell its items were not checked by this one. Never 0. */
uint64_t manifest_id(const struct manifest *m);

/* The record number of path REL (LEN bytes, no NUL needed), and its size in
 * *SIZE (may be NULL); -ENOENT if there is none. Binary search. */
int manifest_find(const struct manifest *m, const char *rel, size_t len, uint64_t *size);

/* Checks that DATA (LEN bytes) is exactly chunk CHUNK of record FILE: 0 if
 * so, -EBADMSG if the bytes differ, -ENOENT if FILE or CHUNK does not exist,
 * -EINVAL if LEN is not that chunk's full length (CHUNK bytes, or the rest of
 * the file for its last chunk). Thread-safe; allocates nothing. */
int manifest_check(const struct manifest *m, uint32_t file, uint32_t chunk, const void *data,
		   size_t len);

struct manifest_report {
	uint64_t matched;           /* in both, same version */
	uint64_t missing;           /* regular files in the index, not in the manifest */
	uint64_t extra;             /* records no file of the index has */
	uint64_t version_differs;   /* in both, another version now (size, inode, mtime or ctime) */
	char first_missing[256], first_extra[256], first_version[256]; /* "" if none */
};

/* Maps every regular file of IX that is not gone to its record, kept inside
 * M (4 bytes per index id), and fills REP (may be NULL). A file at another
 * version than its record's is bound too, and unverified while it stays so
 * (manifest_verifiable). A second call replaces the first binding. 0 or
 * -ENOMEM (M then has no binding). */
int manifest_bind(struct manifest *m, const struct index *ix, struct manifest_report *rep);

/* The record bound to index entry ID, or -ENOENT (none, or never bound). */
int manifest_file_of(const struct manifest *m, uint32_t id);

#endif
