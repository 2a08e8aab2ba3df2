/* storage.c - io_uring reader of SOURCE; see storage.h for the contract.
 *
 * DESIGN: one ring shared by all submitters (submission under sq_lock, a few
 * hundred nanoseconds) and one completion thread. The open is done inline by
 * the submitting thread: on a warm dentry cache openat2 costs about a
 * microsecond, and doing it inline keeps the confinement check
 * (RESOLVE_BENEATH) in one obvious place. The ring depth bounds the reads in
 * flight; a submitter waits for room rather than failing.
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
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "path.h"
#include "source.h"
#include "storage.h"
#include "syncwait.h"

struct sreq {
	int fd;
	int own_buf;
	int has_expect;
	int dontcache;              /* read with RWF_DONTCACHE: nothing left to drop */
	void *buf;
	size_t len, got;
	off_t off;
	struct index_version expect;
	storage_done_fn done;
	void *arg;
};

struct storage {
	int rootfd;
	unsigned depth;
	struct io_uring ring;
	pthread_mutex_t sq_lock;    /* guards ring submission and the fields below */
	pthread_cond_t room;
	unsigned inflight;          /* sq_lock */
	pthread_t cq_thread;
	struct storage_stats stats; /* atomics */
	int drop_source_cache;      /* atomic */
	int dontcache_ok;           /* atomic: SOURCE's file system takes RWF_DONTCACHE */
};

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080    /* Linux 6.14: uncached buffered read */
#endif

static void queue_locked(struct storage *st, struct sreq *r)
{
	struct io_uring_sqe *sqe;

	/* inflight < depth guarantees a free SQ slot. */
	sqe = io_uring_get_sqe(&st->ring);
	io_uring_prep_read(sqe, r->fd, (char *)r->buf + r->got, (unsigned)(r->len - r->got),
			   (uint64_t)(r->off + (off_t)r->got));
	if (r->dontcache)
		sqe->rw_flags = RWF_DONTCACHE;
	io_uring_sqe_set_data(sqe, r);
	io_uring_submit(&st->ring);
}

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

static void finish(struct storage *st, struct sreq *r, ssize_t res)
{
	res = conclude(st, r->fd, r->off, r->has_expect ? &r->expect : NULL, res, r->dontcache);
	r->done(r->arg, res, r->buf);
	if (r->own_buf)
		free(r->buf);
	free(r);

	pthread_mutex_lock(&st->sq_lock);
	st->inflight--;
	pthread_cond_broadcast(&st->room);
	pthread_mutex_unlock(&st->sq_lock);
}

static void *cq_main(void *arg)
{
	struct storage *st = arg;

	for (;;) {
		struct io_uring_cqe *cqe;
		struct sreq *r;
		int res;

		if (io_uring_wait_cqe(&st->ring, &cqe) < 0)
			continue;           /* -EINTR */
		r = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&st->ring, cqe);
		if (!r)
			break;              /* the stop sentinel from storage_free() */
		if (res == -EOPNOTSUPP && r->dontcache) {
			/* SOURCE's file system has no uncached reads: fall back
			 * to fadvise from now on, and read this one again. */
			__atomic_store_n(&st->dontcache_ok, 0, __ATOMIC_RELAXED);
			r->dontcache = 0;
			pthread_mutex_lock(&st->sq_lock);
			queue_locked(st, r);
			pthread_mutex_unlock(&st->sq_lock);
			continue;
		}
		if (res == -EAGAIN || res == -EINTR || (res > 0 && r->got + (size_t)res < r->len)) {
			if (res > 0)
				r->got += (size_t)res;
			pthread_mutex_lock(&st->sq_lock);
			queue_locked(st, r);
			pthread_mutex_unlock(&st->sq_lock);
			continue;
		}
		if (res < 0)
			finish(st, r, res);
		else
			finish(st, r, (ssize_t)(r->got + (size_t)res));
	}
	return NULL;
}

int storage_new(int rootfd, unsigned depth, struct storage **out)
{
	struct storage *st;
	int err;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->rootfd = rootfd;
	st->depth = depth ? depth : 256;
	st->dontcache_ok = 1;
	err = io_uring_queue_init(st->depth, &st->ring, 0);
	if (err < 0) {
		free(st);
		return err;
	}
	pthread_mutex_init(&st->sq_lock, NULL);
	pthread_cond_init(&st->room, NULL);
	err = -pthread_create(&st->cq_thread, NULL, cq_main, st);
	if (err) {
		io_uring_queue_exit(&st->ring);
		free(st);
		return err;
	}
	*out = st;
	return 0;
}

void storage_free(struct storage *st)
{
	struct io_uring_sqe *sqe;

	if (!st)
		return;
	pthread_mutex_lock(&st->sq_lock);
	while (st->inflight)
		pthread_cond_wait(&st->room, &st->sq_lock);
	sqe = io_uring_get_sqe(&st->ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	io_uring_submit(&st->ring);
	pthread_mutex_unlock(&st->sq_lock);
	pthread_join(st->cq_thread, NULL);
	io_uring_queue_exit(&st->ring);
	pthread_mutex_destroy(&st->sq_lock);
	pthread_cond_destroy(&st->room);
	free(st);
}

static void *inline_buf(size_t len);

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
	r->fd = fd;
	r->buf = buf;
	r->len = len;
	r->off = off;
	r->done = done;
	r->arg = arg;
	if (expect) {
		r->expect = *expect;
		r->has_expect = 1;
	}
	r->dontcache = dontcache;
	pthread_mutex_lock(&st->sq_lock);
	while (st->inflight >= st->depth)
		pthread_cond_wait(&st->room, &st->sq_lock);
	st->inflight++;
	queue_locked(st, r);
	pthread_mutex_unlock(&st->sq_lock);
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
