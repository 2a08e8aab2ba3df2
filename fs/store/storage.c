/* storage.c - io_uring reader of SOURCE; see storage.h for the contract.
 *
 * DESIGN: one ring shared by all submitters and one completion thread
 * (util/uring.h: submission under one lock, a few hundred nanoseconds; short
 * reads carried on there). The open is done inline by the submitting thread:
 * on a warm dentry cache openat2 costs about a microsecond, and doing it
 * inline keeps the confinement check (RESOLVE_BENEATH) in one obvious place.
 * The ring depth bounds the reads in flight; a submitter waits for room
 * rather than failing.
 *
 * Fast path: a read is first tried inline with preadv2(RWF_NOWAIT), which
 * copies what the backing page cache already holds and never blocks; only a
 * read that would wait for the device goes to the ring. Measured: 7.5k
 * files/s before, see docs/design.md for after.
 *
 * Reads of cached data never reach this file: the kernel page cache above the
 * mount (and the daemon's RAM cache, later) answer first. So the extra fstat
 * per read that the version check costs is paid only on the storage path,
 * where the device dominates.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store/path.h"
#include "store/source.h"
#include "store/storage.h"
#include "util/log.h"
#include "util/syncwait.h"
#include "util/uring.h"

/* A read on the ring. u.rw_flags has RWF_DONTCACHE when it reads uncached:
 * it leaves nothing to drop. */
struct sreq {
	struct uring_req u;         /* first: the ring hands it back */
	struct storage *st;
	int own_buf;
	int has_expect;
	struct index_version expect;
	storage_done_fn done;
	void *arg;
};

struct storage {
	int rootfd;
	struct uring *ring;
	struct storage_stats stats; /* atomics */
	int drop_source_cache;      /* atomic */
	int dontcache_ok;           /* atomic: SOURCE's file system takes RWF_DONTCACHE */
};

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080    /* Linux 6.14: uncached buffered read */
#endif

static int check_version(int fd, const struct index_version *expect)
{
	struct index_version now;
	struct stat sb;

	if (fstat(fd, &sb) < 0)
		return -errno;
	index_version_of(&sb, &now);
	return index_version_eq(&now, expect) ? 0 : -ESTALE;
}

/* Version check, close, counters: the end of every read, inline or not.
 * DONTCACHE: the read left no pages of its own behind. */
static ssize_t conclude(struct storage *st, int fd, off_t off, const struct index_version *expect,
			ssize_t res, int dontcache)
{
	if (res >= 0 && expect) {
		int err = check_version(fd, expect);
		if (err)
			res = err;
	}
	/* The bytes now live where the caller keeps them (the RAM cache, the
	 * kernel's cache of the mount): a second copy in SOURCE's page cache
	 * would only take memory the cache budget does not count. Reads with
	 * RWF_DONTCACHE drop their pages as they complete; the fallback
	 * (fadvise) costs an LRU drain on every CPU per call, 6% of the
	 * daemon's CPU in a cold epoch (docs/design.md). */
	if (res > 0 && !dontcache && __atomic_load_n(&st->drop_source_cache, __ATOMIC_RELAXED))
		posix_fadvise(fd, off, res, POSIX_FADV_DONTNEED);
	close(fd);
	if (res >= 0) {
		__atomic_add_fetch(&st->stats.reads, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&st->stats.bytes, (uint64_t)res, __ATOMIC_RELAXED);
	} else if (res == -ESTALE) {
		__atomic_add_fetch(&st->stats.stale, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_add_fetch(&st->stats.errors, 1, __ATOMIC_RELAXED);
	}
	return res;
}

/* The end of a ring read, on the completion thread (uring.h). */
static int ring_done(struct uring_req *u, ssize_t res)
{
	struct sreq *r = (struct sreq *)u;
	struct storage *st = r->st;
	int dontcache = (u->rw_flags & RWF_DONTCACHE) != 0;

	if (res == -EOPNOTSUPP && dontcache) {
		/* SOURCE's file system has no uncached reads: fall back to
		 * fadvise from now on, and read this one again. */
		__atomic_store_n(&st->dontcache_ok, 0, __ATOMIC_RELAXED);
		u->rw_flags = 0;
		return 1;
	}
	res = conclude(st, u->fd, u->off, r->has_expect ? &r->expect : NULL, res, dontcache);
	r->done(r->arg, res, u->buf);
	if (r->own_buf)
		free(u->buf);
	free(r);
	return 0;
}

int storage_new(int rootfd, unsigned depth, struct storage **out)
{
	struct storage *st;
	int err;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->rootfd = rootfd;
	st->dontcache_ok = 1;
	if ((err = uring_new(depth ? depth : 256, &st->ring)) < 0) {
		free(st);
		return err;
	}
	*out = st;
	return 0;
}

void storage_free(struct storage *st)
{
	if (!st)
		return;
	uring_free(st->ring);       /* waits for every read queued */
	free(st);
}

static void *inline_buf(size_t len);

int storage_open_version(struct storage *st, const char *rel, const struct index_version *expect)
{
	int fd = path_open_beneath(st->rootfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return fd == -ENOENT || fd == -ELOOP || fd == -EXDEV ? -ESTALE : fd;
	int err = check_version(fd, expect);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

void storage_read(struct storage *st, const char *rel, const struct index_version *expect,
		  off_t off, size_t len, void *buf, storage_done_fn done, void *arg)
{
	struct sreq *r;
	int fd, dontcache;

	if (len == 0) {
		done(arg, 0, buf);
		return;
	}
	fd = path_open_beneath(st->rootfd, rel, O_RDONLY | O_NOFOLLOW);
	if (fd < 0) {
		/* Vanished or swapped for a link since the scan: the version the
		 * caller expects is gone. */
		if ((fd == -ENOENT || fd == -ELOOP || fd == -EXDEV) && expect)
			fd = -ESTALE;
		__atomic_add_fetch(fd == -ESTALE ? &st->stats.stale : &st->stats.errors, 1,
				   __ATOMIC_RELAXED);
		done(arg, fd, buf);
		return;
	}
	/* Fast path: data already in the backing page cache is copied right
	 * here (RWF_NOWAIT never blocks), sparing two thread hops and a ring
	 * round trip. Anything that would wait goes to the ring. Pages found
	 * here were cached by someone else when uncached reads work: they are
	 * left alone. */
	dontcache = __atomic_load_n(&st->drop_source_cache, __ATOMIC_RELAXED) &&
		    __atomic_load_n(&st->dontcache_ok, __ATOMIC_RELAXED);
	{
		void *b = buf ? buf : inline_buf(len);
		struct iovec iov = { b, len };
		/* A miss here starts readahead: uncached too, or the ring's
		 * read would find those pages and leave them. */
		ssize_t n = b ? preadv2(fd, &iov, 1, off, RWF_NOWAIT | (dontcache ? RWF_DONTCACHE : 0)) : -1;

		if (n == (ssize_t)len || (n >= 0 && expect && (uint64_t)off + (uint64_t)n >= expect->size)) {
			__atomic_add_fetch(&st->stats.inline_reads, 1, __ATOMIC_RELAXED);
			n = conclude(st, fd, off, expect, n, dontcache);
			done(arg, n, b);
			return;
		}
	}
	r = calloc(1, sizeof(*r));
	if (r && !buf) {
		buf = malloc(len);
		r->own_buf = 1;
	}
	if (!r || !buf) {
		free(r);
		close(fd);
		done(arg, -ENOMEM, NULL);
		return;
	}
	r->u = (struct uring_req){ .fd = fd, .buf = buf, .len = len, .off = off,
				   .rw_flags = dontcache ? RWF_DONTCACHE : 0, .done = ring_done };
	r->st = st;
	r->done = done;
	r->arg = arg;
	if (expect) {
		r->expect = *expect;
		r->has_expect = 1;
	}
	uring_read(st->ring, &r->u);
}

/* One buffer per calling thread for the fast path, grown on demand: the
 * hot path allocates nothing once a thread has seen its largest read. A
 * thread-specific key frees it when its thread (a FUSE worker) exits. */
struct tl_buf {
	size_t cap;
	char data[];
};

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_key_init(void)
{
	pthread_key_create(&tl_key, free);
}

static void *inline_buf(size_t len)
{
	struct tl_buf *b;

	pthread_once(&tl_once, tl_key_init);
	b = pthread_getspecific(tl_key);
	if (!b || b->cap < len) {
		struct tl_buf *nb = realloc(b, sizeof(*nb) + len);
		if (!nb)
			return NULL;
		nb->cap = len;
		pthread_setspecific(tl_key, nb);
		b = nb;
	}
	return b->data;
}

ssize_t storage_read_sync(struct storage *st, const char *rel,
			  const struct index_version *expect, off_t off, size_t len, void *buf)
{
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	storage_read(st, rel, expect, off, len, buf, sync_wait_done, &w);
	return sync_wait(&w);
}

void storage_set_drop_source_cache(struct storage *st, int on)
{
	__atomic_store_n(&st->drop_source_cache, on, __ATOMIC_RELAXED);
}

void storage_get_stats(struct storage *st, struct storage_stats *s)
{
	s->reads = __atomic_load_n(&st->stats.reads, __ATOMIC_RELAXED);
	s->bytes = __atomic_load_n(&st->stats.bytes, __ATOMIC_RELAXED);
	s->stale = __atomic_load_n(&st->stats.stale, __ATOMIC_RELAXED);
	s->errors = __atomic_load_n(&st->stats.errors, __ATOMIC_RELAXED);
	s->inline_reads = __atomic_load_n(&st->stats.inline_reads, __ATOMIC_RELAXED);
}

void storage_source_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
			 void (*done)(void *arg, ssize_t res, const void *buf), void *arg)
{
	storage_read(ctx, it->rel, &it->v, off, len, buf, done, arg);
}
