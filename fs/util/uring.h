/* uring.h - one io_uring ring for reads, its completion thread, a bound on
 * the reads in flight, and short reads carried on to the end.
 *
 * Storage (SOURCE's files) and the SSD tier (its arena files) read the
 * same way: many threads submit, one thread reaps, a submitter waits for
 * room rather than failing, and a read the kernel cut short is submitted
 * again for the rest. What differs stays with them: storage's inline
 * RWF_NOWAIT path and version check, the tier's aligned O_DIRECT buffers
 * and checksums.
 *
 * A read is a struct uring_req that the caller embeds in its own request
 * and fills: fd, buf, len, off, and optionally min and rw_flags. The ring
 * reads [off, off + len) into buf, continuing a short read from where it
 * stopped (and a -EAGAIN or -EINTR from where it was), until MIN bytes
 * are in (min 0: all of len), end of file, or an error. Then DONE(req,
 * res) runs on the completion thread: res is the bytes read in all (fewer
 * than MIN only at end of file) or -errno. DONE returns 0 when it is done
 * with the request (it may free it), or nonzero to have it read again as
 * its fields now say, from GOT on (storage drops RWF_DONTCACHE where the
 * filesystem refuses it, -EOPNOTSUPP); the read keeps its room.
 *
 * Thread safety: uring_read() from any thread, the completion thread
 * included only if the ring cannot be full (it would wait on itself).
 * DONE runs with no lock of the ring held, one at a time, and must not
 * block for long: every other completion waits behind it.
 */
#ifndef EPOCHFS_URING_H
#define EPOCHFS_URING_H

#include <stddef.h>
#include <sys/types.h>

struct uring;
struct uring_req;

typedef int (*uring_done_fn)(struct uring_req *r, ssize_t res);

struct uring_req {
	int fd;
	void *buf;
	size_t len;                 /* bytes to read at most */
	size_t min;                 /* done once this many are in; 0: len */
	off_t off;
	int rw_flags;               /* RWF_* of the read (RWF_DONTCACHE), or 0 */
	uring_done_fn done;
	size_t got;                 /* the ring's: bytes in so far */
};

/* A ring of DEPTH entries (at least 1), at most DEPTH reads in flight, and
 * its completion thread. 0 and *OUT, or -errno (io_uring_queue_init's:
 * -ENOMEM, -EPERM where io_uring is disabled, ...). */
int uring_new(unsigned depth, struct uring **out);

/* Waits until every read in flight is done, stops the thread, frees.
 * Nothing may be submitted once it is called. NULL is fine. */
void uring_free(struct uring *u);

/* Submits R (GOT is set to 0), waiting while DEPTH reads are in flight.
 * R->done runs when the read ends, and again after each time it asked to
 * read again; once it returned 0, the ring holds nothing of R. */
void uring_read(struct uring *u, struct uring_req *r);

#endif
