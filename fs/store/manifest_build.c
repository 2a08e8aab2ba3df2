/* manifest_build.c - epochfs-manifest's builder: every regular file of
 * SOURCE hashed per chunk, in parallel, into a manifest image; see
 * manifest.h, and fs/store/manifest.c's DESIGN note for the image.
 *
 * DESIGN: the scan is the daemon's (index_scan); the image is laid out
 * whole before hashing starts, each file's hashes in their slot, so
 * threads (2 per CPU: one waits on a read while the other hashes) take
 * files off one atomic counter and the image is in record order by
 * construction. A file that changes while it is read fails the build.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/index.h"
#include "store/manifest_int.h"
#include "store/path.h"
#include "util/clock.h"

/* ---- build ---- */

/* What the hashing threads share. */
struct build {
	int rootfd;
	const char *source;
	uint32_t chunk;
	uint8_t *img;               /* the image being filled */
	size_t len;                 /* its bytes */
	uint64_t n;
	const char **rel;           /* record i's path, NUL-terminated */
	uint64_t *off;              /* record i's offset in img */
	uint64_t total;             /* bytes of all files */
	uint64_t next;              /* atomic: the next record to hash */
	uint64_t done_files, done_bytes; /* atomic */
	int failed;                 /* atomic: stop taking files */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned live;              /* threads still running; lock */
	int err;                    /* first failure; lock */
	char msg[512];              /* its reason; lock */
};

static void build_fail(struct build *b, int err, const char *msg)
{
	pthread_mutex_lock(&b->lock);
	if (!b->err) {
		b->err = err;
		snprintf(b->msg, sizeof(b->msg), "%s", msg);
	}
	pthread_mutex_unlock(&b->lock);
	__atomic_store_n(&b->failed, 1, __ATOMIC_RELAXED);
}

static int same_version(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_ino == b->st_ino &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Hashes record I's file into its slot of the image, reading through BUF
 * (READ_BLOCK bytes). 0, or -errno with a reason in MSG. */
static int hash_file(struct build *b, uint64_t i, uint8_t *buf, char *msg, size_t msglen)
{
	const char *rel = b->rel[i];
	uint8_t *r = b->img + b->off[i];
	uint16_t plen = get16(r);
	uint64_t size = get64(r + 2 + plen), off = 0;
	uint64_t ino = get64(r + 2 + plen + 8);
	int64_t mtime = (int64_t)get64(r + 2 + plen + 16), ctime = (int64_t)get64(r + 2 + plen + 24);
	uint8_t *out = r + 2 + plen + REC_FIXED;
	crypto_generichash_state hs;
	uint32_t fill = 0;
	struct stat st0, st1;
	int fd, ret = 0;

	fd = path_open_beneath(b->rootfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(msg, msglen, "%s/%s: cannot open: %s", b->source, rel,
			 fd == -ELOOP || fd == -EXDEV ? "it became a symlink during the build"
						      : strerror(-fd));
		return fd;
	}
	if (fstat(fd, &st0) < 0) {
		ret = -errno;
		snprintf(msg, msglen, "%s/%s: cannot stat: %s", b->source, rel, strerror(-ret));
		goto out;
	}
	/* The record names the version the scan saw: the bytes must be that one's. */
	if (!S_ISREG(st0.st_mode) || (uint64_t)st0.st_size != size || (uint64_t)st0.st_ino != ino ||
	    (int64_t)st0.st_mtim.tv_sec * 1000000000 + st0.st_mtim.tv_nsec != mtime ||
	    (int64_t)st0.st_ctim.tv_sec * 1000000000 + st0.st_ctim.tv_nsec != ctime) {
		ret = -ESTALE;
		goto changed;
	}
	crypto_generichash_init(&hs, NULL, 0, MANIFEST_HASH_LEN);
	while (off < size) {
		size_t want = size - off < READ_BLOCK ? (size_t)(size - off) : READ_BLOCK;
		ssize_t n = pread(fd, buf, want, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			snprintf(msg, msglen, "%s/%s: cannot read: %s", b->source, rel, strerror(-ret));
			goto out;
		}
		if (n == 0) {
			ret = -ESTALE;      /* shrank */
			goto changed;
		}
		for (size_t p = 0; p < (size_t)n;) {
			size_t take = (size_t)n - p;
			if (take > b->chunk - fill)
				take = b->chunk - fill;
			crypto_generichash_update(&hs, buf + p, take);
			p += take;
			fill += (uint32_t)take;
			if (fill == b->chunk || off + p == size) {
				crypto_generichash_final(&hs, out, MANIFEST_HASH_LEN);
				out += MANIFEST_HASH_LEN;
				crypto_generichash_init(&hs, NULL, 0, MANIFEST_HASH_LEN);
				fill = 0;
			}
		}
		off += (uint64_t)n;
		__atomic_add_fetch(&b->done_bytes, (uint64_t)n, __ATOMIC_RELAXED);
	}
	if (fstat(fd, &st1) < 0) {
		ret = -errno;
		snprintf(msg, msglen, "%s/%s: cannot stat: %s", b->source, rel, strerror(-ret));
		goto out;
	}
	if (!same_version(&st0, &st1)) {
		ret = -ESTALE;
		goto changed;
	}
	/* The manifest is what a build is for; SOURCE's pages are not. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	goto out;
changed:
	snprintf(msg, msglen, "%s/%s: changed during the build (scanned at %llu bytes): build "
		 "again once SOURCE is quiet", b->source, rel, (unsigned long long)size);
out:
	close(fd);
	return ret;
}

static void *hash_worker(void *arg)
{
	struct build *b = arg;
	uint8_t *buf = malloc(READ_BLOCK);
	char msg[512];

	if (!buf) {
		build_fail(b, -ENOMEM, "out of memory for a read buffer");
		goto out;
	}
	for (;;) {
		uint64_t i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
		int err;

		if (i >= b->n || __atomic_load_n(&b->failed, __ATOMIC_RELAXED))
			break;
		err = hash_file(b, i, buf, msg, sizeof(msg));
		if (err < 0) {
			build_fail(b, err, msg);
			break;
		}
		__atomic_add_fetch(&b->done_files, 1, __ATOMIC_RELAXED);
	}
	free(buf);
out:
	pthread_mutex_lock(&b->lock);
	b->live--;
	pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

static void build_progress(struct build *b, double t0, int final)
{
	double dt = clock_now() - t0;
	uint64_t bytes = __atomic_load_n(&b->done_bytes, __ATOMIC_RELAXED);

	fprintf(stderr, "\repochfs-manifest: %llu/%llu files, %.0f/%.0f MB, %.0f MB/s%s",
		(unsigned long long)__atomic_load_n(&b->done_files, __ATOMIC_RELAXED),
		(unsigned long long)b->n, bytes / 1e6, b->total / 1e6,
		dt > 0 ? bytes / 1e6 / dt : 0.0, final ? "\n" : "");
	fflush(stderr);
}

/* Runs NTHR hashing threads over B and waits for them. 0 or -errno with a
 * reason in ERR. */
static int hash_all(struct build *b, unsigned nthr, int progress, char *err, size_t errlen)
{
	pthread_t *tids = calloc(nthr, sizeof(*tids));
	double t0 = clock_now(), last = t0;
	unsigned started = 0;
	int printed = 0, ret;

	if (!tids) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* Workers leave under the lock, so none is counted out before live is set. */
	pthread_mutex_lock(&b->lock);
	for (; started < nthr; started++)
		if (pthread_create(&tids[started], NULL, hash_worker, b))
			break;
	b->live = started;
	while (b->live) {
		struct timespec dl;

		clock_deadline(&dl, 0.25);
		pthread_cond_timedwait(&b->cond, &b->lock, &dl);
		if (progress && clock_now() - t0 > 1.0 && clock_now() - last >= 0.5) {
			last = clock_now();
			build_progress(b, t0, 0);
			printed = 1;
		}
	}
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	if (printed)
		build_progress(b, t0, 1);
	if (!started && nthr) {
		snprintf(err, errlen, "cannot start a hashing thread");
		return -EAGAIN;
	}
	ret = b->err;
	if (ret < 0)
		snprintf(err, errlen, "%s", b->msg);
	return ret;
}

static unsigned default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	n = n > 0 ? n * 2 : 4;
	return n > 128 ? 128 : (unsigned)n;
}

/* The regular files of a scan: paths (NUL-terminated, back to back in
 * BLOB) and versions. */
struct file_ent {
	uint64_t path_off;          /* into blob */
	struct index_version v;
};

struct file_list {
	char *blob;
	size_t blob_len, blob_cap;
	struct file_ent *e;
	uint64_t n, cap;
};

static int list_add(struct file_list *l, const char *path, size_t len, const struct index_version *v)
{
	if (l->n == l->cap) {
		uint64_t cap = l->cap ? l->cap * 2 : 1024;
		struct file_ent *e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		l->e = e;
		l->cap = cap;
	}
	if (l->blob_len + len + 1 > l->blob_cap) {
		size_t cap = l->blob_cap ? l->blob_cap * 2 : 65536;
		while (cap < l->blob_len + len + 1)
			cap *= 2;
		char *nb = realloc(l->blob, cap);
		if (!nb)
			return -ENOMEM;
		l->blob = nb;
		l->blob_cap = cap;
	}
	memcpy(l->blob + l->blob_len, path, len + 1);
	l->e[l->n].path_off = l->blob_len;
	l->e[l->n++].v = *v;
	l->blob_len += len + 1;
	return 0;
}

/* 0 if the directory REL can be listed and its entries looked at. The scan
 * shows a directory it cannot list as empty (with a warning); a manifest
 * must not quietly leave its files out. */
static int dir_readable(int rootfd, const char *rel)
{
	int fd = path_open_beneath(rootfd, rel, O_RDONLY | O_DIRECTORY);
	int ret = 0;

	if (fd < 0)
		return fd;
	if (faccessat(fd, ".", R_OK | X_OK, AT_EACCESS) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Fills L with the regular files of IX. 0 or -errno with a reason in ERR. */
static int collect(const struct index *ix, int rootfd, const char *source, struct file_list *l,
		   char *err, size_t errlen)
{
	uint32_t n = index_count(ix);
	char *path = malloc(MAX_PATH_LEN + 512);
	int ret = 0;

	if (!path)
		goto nomem;
	for (uint32_t id = INDEX_ROOT; id <= n; id++) {
		struct index_attr a;
		int len;

		if (index_get(ix, id, &a) < 0 || a.gone || !(S_ISREG(a.mode) || S_ISDIR(a.mode)))
			continue;
		len = index_path(ix, id, path, MAX_PATH_LEN + 512);
		if (len < 0 || (unsigned)len > MAX_PATH_LEN) {
			ret = -ENAMETOOLONG;
			snprintf(err, errlen, "%s: a path below it is longer than %u bytes, the most "
				 "a manifest holds", source, MAX_PATH_LEN);
			goto out;
		}
		if (S_ISDIR(a.mode)) {
			if ((ret = dir_readable(rootfd, path)) < 0) {
				snprintf(err, errlen, "%s/%s: cannot list directory (%s): a manifest "
					 "must cover every file; fix its permissions", source, path,
					 strerror(-ret));
				goto out;
			}
			continue;
		}
		if (list_add(l, path, (size_t)len, &a.v) < 0)
			goto nomem;
	}
	goto out;
nomem:
	ret = -ENOMEM;
	snprintf(err, errlen, "out of memory listing %s", source);
out:
	free(path);
	return ret;
}

static int cmp_ent(const void *a, const void *b, void *blob)
{
	return strcmp((const char *)blob + ((const struct file_ent *)a)->path_off,
		      (const char *)blob + ((const struct file_ent *)b)->path_off);
}

/* Lays out B's image for the sorted files of L: header, every record with
 * room for its hashes, room for the trailer. 0 or -errno with ERR. */
static int layout(struct build *b, const struct file_list *l, char *err, size_t errlen)
{
	size_t len = MANIFEST_HEADER_LEN, p = MANIFEST_HEADER_LEN;
	uint64_t n = l->n ? l->n : 1;

	b->n = l->n;
	b->rel = malloc(n * sizeof(*b->rel));
	b->off = malloc(n * sizeof(*b->off));
	if (!b->rel || !b->off)
		goto nomem;
	for (uint64_t i = 0; i < l->n; i++) {
		const char *path = l->blob + l->e[i].path_off;
		uint64_t nch = chunks_of(l->e[i].v.size, b->chunk);

		if (nch > UINT32_MAX) {
			snprintf(err, errlen, "%s/%s: %llu bytes is more than 2^32 chunks of %u: "
				 "use a larger --chunk", b->source, path,
				 (unsigned long long)l->e[i].v.size, b->chunk);
			return -EFBIG;
		}
		b->rel[i] = path;
		len += 2 + strlen(path) + REC_FIXED + (size_t)nch * MANIFEST_HASH_LEN;
		b->total += l->e[i].v.size;
	}
	len += MANIFEST_TRAILER_LEN;
	b->img = calloc(1, len);
	if (!b->img)
		goto nomem;
	b->len = len;
	memcpy(b->img, MANIFEST_MAGIC, 8);
	put32(b->img + 8, MANIFEST_VERSION);
	put32(b->img + 12, b->chunk);
	put32(b->img + 16, MANIFEST_HASH_LEN);
	put32(b->img + 20, 0);
	put64(b->img + 24, b->n);
	put64(b->img + 32, b->total);
	for (uint64_t i = 0; i < l->n; i++) {
		size_t plen = strlen(b->rel[i]);

		b->off[i] = p;
		put16(b->img + p, (uint16_t)plen);
		memcpy(b->img + p + 2, b->rel[i], plen);
		put64(b->img + p + 2 + plen, l->e[i].v.size);
		put64(b->img + p + 2 + plen + 8, l->e[i].v.ino);
		put64(b->img + p + 2 + plen + 16, (uint64_t)l->e[i].v.mtime_ns);
		put64(b->img + p + 2 + plen + 24, (uint64_t)l->e[i].v.ctime_ns);
		p += 2 + plen + REC_FIXED + (size_t)chunks_of(l->e[i].v.size, b->chunk) * MANIFEST_HASH_LEN;
	}
	return 0;
nomem:
	snprintf(err, errlen, "out of memory for the manifest of %llu files",
		 (unsigned long long)l->n);
	return -ENOMEM;
}

int manifest_build(const char *source, const struct manifest_build_opts *o,
		   struct manifest_build_stats *st, struct manifest **out, char *err,
		   size_t errlen)
{
	struct index_scan_opts so = { .threads = 0, .progress = o ? o->progress : 0 };
	unsigned nthr = o && o->threads ? o->threads : default_threads();
	struct build b = {
		.source = source,
		.chunk = o && o->chunk ? o->chunk : MANIFEST_DEFAULT_CHUNK,
		.lock = PTHREAD_MUTEX_INITIALIZER,
	};
	struct file_list l = { 0 };
	struct manifest *m;
	struct index *ix = NULL;
	double t0 = clock_now();
	int ret;

	*out = NULL;
	if (b.chunk < MANIFEST_MIN_CHUNK || b.chunk > MANIFEST_MAX_CHUNK) {
		snprintf(err, errlen, "chunk size %u: expected 4 KiB to 1 GiB", b.chunk);
		return -EINVAL;
	}
	if ((ret = manifest_need_sodium(err, errlen)) < 0)
		return ret;
	b.rootfd = open(source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b.rootfd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", source,
			 ret == -ENOTDIR ? "not a directory (give the dataset's root)" : strerror(-ret));
		return ret;
	}
	clock_cond_init(&b.cond);   /* the progress line's waits are monotonic */
	ret = index_scan(b.rootfd, &so, &ix);
	if (ret < 0) {
		snprintf(err, errlen, "%s: cannot scan: %s", source, strerror(-ret));
		goto out;
	}
	ret = collect(ix, b.rootfd, source, &l, err, errlen);
	index_free(ix);
	if (ret < 0)
		goto out;
	if (l.n > MAX_FILES) {
		ret = -EFBIG;
		snprintf(err, errlen, "%s: %llu files, more than a manifest holds (%llu)", source,
			 (unsigned long long)l.n, (unsigned long long)MAX_FILES);
		goto out;
	}
	if (l.n > 1)
		qsort_r(l.e, l.n, sizeof(*l.e), cmp_ent, l.blob);
	if ((ret = layout(&b, &l, err, errlen)) < 0)
		goto out;
	if (nthr > l.n)
		nthr = (unsigned)l.n;
	if (nthr && (ret = hash_all(&b, nthr, so.progress, err, errlen)) < 0)
		goto out;
	crypto_generichash(b.img + b.len - MANIFEST_TRAILER_LEN, MANIFEST_TRAILER_LEN, b.img,
			   b.len - MANIFEST_TRAILER_LEN, NULL, 0);

	/* The reader's rules check the writer's work. */
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	m->buf = b.img;
	m->len = b.len;
	b.img = NULL;
	if ((ret = manifest_parse(m, "the new manifest", err, errlen)) < 0) {
		manifest_free(m);
		goto out;
	}
	if (st) {
		st->files = m->nfiles;
		st->bytes = m->bytes;
		st->seconds = clock_now() - t0;
	}
	*out = m;
out:
	free(b.img);
	free(b.rel);
	free(b.off);
	free(l.blob);
	free(l.e);
	close(b.rootfd);
	pthread_mutex_destroy(&b.lock);
	pthread_cond_destroy(&b.cond);
	return ret;
}
