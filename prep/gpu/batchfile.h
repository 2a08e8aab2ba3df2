/* batchfile.h - reading a batch file (EPBATCH1, docs/prep-format.md) from
 * outside the daemon, trusting nothing in it.
 *
 * The GPU consumer reads `.prep/` batch files into pinned memory and hands
 * their pixels to a kernel: a header that lies about a size would make the
 * copy or the kernel run past a buffer. So every field a reader relies on
 * is checked against the format and against the bytes actually read, and
 * a bad file gets an -errno and a one-line reason, never a crash.
 *
 * Errors (the sentence in *WHY is a static string):
 *   -ENODATA          shorter than a header, or than the header says
 *                     (a truncated file)
 *   -EBADMSG          not a batch (magic), or fields that contradict the
 *                     format or each other, or trailing bytes
 *   -EPROTONOSUPPORT  a batch of another format version
 *   -EFBIG            sizes that overflow 64 bits or this address space
 *
 * Plain C, no CUDA: in every build, and the unit tests use it.
 */
#ifndef EPOCHFS_BATCHFILE_H
#define EPOCHFS_BATCHFILE_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes the BATCH_HEADER_BYTES little-endian bytes at BUF into H. */
void batchfile_parse(const void *buf, struct batch_header *h);

/* Checks H, read from a file of SIZE bytes. 0 or an error above. */
int batchfile_check(const struct batch_header *h, uint64_t size, const char **why);

/* Reads the open batch file FD whole into BUF (CAP bytes), parses and
 * checks it: 0 with *H and *LEN (the file's bytes, all in BUF), or an
 * error above, -ENOBUFS when the file is larger than CAP (*LEN then says
 * how large: grow BUF and call again), or -errno from fstat/read. */
int batchfile_read(int fd, void *buf, size_t cap, struct batch_header *h, size_t *len, const char **why);

#ifdef __cplusplus
}
#endif

#endif
