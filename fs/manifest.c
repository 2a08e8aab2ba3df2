/* manifest.c - build, save, load and check manifests; see manifest.h.
 *
 * DESIGN
 * - One image, two uses. A manifest in memory is its file image (trailer
 *   included) plus one u64 offset per record; a build fills an image, a load
 *   reads one, and both go through the same parse(), so the writer's output
 *   is checked by the reader's rules before it is saved. No per-file malloc:
 *   12,000 files cost 12,000 * (record + 8) bytes.
 * - The load reads the file into memory rather than mmap'ing it: the file is
 *   trusted only once its trailer is checked, and a mapping would let a
 *   later write change bytes after that check.
 * - No size in a file is trusted before it is checked against the file's
 *   length: the record offsets array is sized by what the bytes can hold
 *   (a record takes at least 11), never by the header's count alone.
 * - The build knows every record's size from the scan, so the whole image
 *   (paths, sizes, room for every hash) is laid out before hashing starts:
 *   each file's hashes have their slot, threads write them there in any
 *   order, and the image is in record order by construction. A file whose
 *   size or times move while it is read fails the build: its hashes would
 *   describe no version of it.
 * - Hashing threads take the next file off one atomic counter (files, not
 *   chunks: most dataset files are one chunk, and one file's reads then stay
 *   sequential). Default 2 per CPU: one thread waits on a read while the
 *   other hashes. libsodium's BLAKE2b does about 580 MB/s per core on the
 *   project's machine (2 cores): a warm build of build/bench-data ran at
 *   970 MB/s (hash-bound), a cold one near 600 MB/s, about what one reader
 *   of 1 MiB blocks gets from that disk cold (665 MB/s).
 * - A chunk's hash state is fed across 1 MiB read blocks, so chunks larger
 *   than a block (up to 1 GiB) need no larger buffer.
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

#include "index.h"
#include "manifest.h"
#include "path.h"

#define READ_BLOCK (1u << 20)
#define MIN_RECORD 11u              /* u16 length, one path byte, u64 size */
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
static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t chunks_of(uint64_t size, uint32_t chunk)
{
	return size / chunk + (size % chunk != 0);
}

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok;

static void sodium_start(void)
{
	sodium_ok = sodium_init() >= 0;
}

static int need_sodium(char *err, size_t errlen)
{
	pthread_once(&sodium_once, sodium_start);
	if (!sodium_ok) {
		snprintf(err, errlen, "libsodium failed to initialise");
		return -ENOSYS;
	}
	return 0;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Path order: strcmp's, for byte strings that hold no NUL. */
static int path_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

/* 1 if P (LEN > 0 bytes) is a normalized relative path. */
static int path_normal(const uint8_t *p, size_t len)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] == '\0')
			return 0;
		if (i < len && p[i] != '/')
			continue;
		size_t n = i - start;
		if (n == 0 || (n == 1 && p[start] == '.') ||
		    (n == 2 && p[start] == '.' && p[start + 1] == '.'))
			return 0;
		start = i + 1;
	}
	return 1;
}

/* ---- parse: the rules every manifest obeys ---- */

/* Walks the records of M->buf. Returns 0, or -EBADMSG with what is wrong in
 * WHY; *SHORT says the bytes ran out before the records did (truncation). */
static int walk(struct manifest *m, char *why, size_t whylen, int *shortp)
{
	const uint8_t *b = m->buf;
	size_t end = m->len - MANIFEST_TRAILER_LEN, p = MANIFEST_HEADER_LEN;
	uint32_t hlen = get32(b + 16), reserved = get32(b + 20);
	uint64_t total = get64(b + 32), sum = 0, cap, i;

	*shortp = 0;
	m->chunk = get32(b + 12);
	m->nfiles = get64(b + 24);
	m->bytes = total;
	if (hlen != MANIFEST_HASH_LEN) {
		snprintf(why, whylen, "hash length %u, expected %u", hlen, MANIFEST_HASH_LEN);
		return -EBADMSG;
	}
	if (reserved) {
		snprintf(why, whylen, "reserved header field is %u, expected 0", reserved);
		return -EBADMSG;
	}
	if (m->chunk < MANIFEST_MIN_CHUNK || m->chunk > MANIFEST_MAX_CHUNK) {
		snprintf(why, whylen, "chunk size %u, expected 4 KiB to 1 GiB", m->chunk);
		return -EBADMSG;
	}
	if (m->nfiles > MAX_FILES) {
		snprintf(why, whylen, "header claims %llu files, more than %llu",
			 (unsigned long long)m->nfiles, (unsigned long long)MAX_FILES);
		return -EBADMSG;
	}
	/* Never more offsets than the bytes can hold records. */
	cap = (end - p) / MIN_RECORD;
	if (m->nfiles < cap)
		cap = m->nfiles;
	m->off = malloc((cap ? cap : 1) * sizeof(*m->off));
	if (!m->off) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < m->nfiles; i++) {
		uint64_t size, nch;
		uint16_t plen;

		if (i == cap || end - p < 2)
			goto truncated;
		plen = get16(b + p);
		if (plen == 0) {
			snprintf(why, whylen, "record %llu has an empty path", (unsigned long long)i);
			return -EBADMSG;
		}
		if (end - p - 2 < (size_t)plen + 8)
			goto truncated;
		m->off[i] = p;
		const uint8_t *path = b + p + 2;
		if (!path_normal(path, plen)) {
			snprintf(why, whylen, "record %llu: path \"%.*s\" is not normalized",
				 (unsigned long long)i, (int)plen, (const char *)path);
			return -EBADMSG;
		}
		if (i) {
			const uint8_t *prev = b + m->off[i - 1];
			if (path_cmp(prev + 2, get16(prev), path, plen) >= 0) {
				snprintf(why, whylen, "record %llu: path \"%.*s\" is out of order or repeated",
					 (unsigned long long)i, (int)plen, (const char *)path);
				return -EBADMSG;
			}
		}
		p += 2 + (size_t)plen;
		size = get64(b + p);
		p += 8;
		nch = chunks_of(size, m->chunk);
		if (nch > UINT32_MAX) {
			snprintf(why, whylen, "record %llu: %llu chunks, more than 2^32",
				 (unsigned long long)i, (unsigned long long)nch);
			return -EBADMSG;
		}
		if ((end - p) / MANIFEST_HASH_LEN < nch)
			goto truncated;
		p += (size_t)nch * MANIFEST_HASH_LEN;
		if (sum + size < sum) {
			snprintf(why, whylen, "file sizes overflow");
			return -EBADMSG;
		}
		sum += size;
	}
	if (p != end) {
		snprintf(why, whylen, "%zu bytes after the last record", end - p);
		return -EBADMSG;
	}
	if (sum != total) {
		snprintf(why, whylen, "records hold %llu bytes, header says %llu",
			 (unsigned long long)sum, (unsigned long long)total);
		return -EBADMSG;
	}
	return 0;
truncated:
	*shortp = 1;
	snprintf(why, whylen, "the records need more bytes than the file has");
	return -EBADMSG;
}

/* Checks M->buf (M->len bytes) and fills the rest of M. NAME is for
 * messages. 0, or -errno with a reason in ERR. */
static int parse(struct manifest *m, const char *name, char *err, size_t errlen)
{
	const uint8_t *b = m->buf;
	uint8_t sum[MANIFEST_TRAILER_LEN];
	char why[200];
	int ret, shortp, sum_ok;

	if (m->len < 8 || memcmp(b, MANIFEST_MAGIC, 8)) {
		snprintf(err, errlen, "%s: not an epochfs manifest", name);
		return -EBADMSG;
	}
	if (m->len < MANIFEST_HEADER_LEN + MANIFEST_TRAILER_LEN) {
		snprintf(err, errlen, "%s: truncated (%zu bytes): rebuild it with epochfs-manifest",
			 name, m->len);
		return -EBADMSG;
	}
	if (get32(b + 8) != MANIFEST_VERSION) {
		snprintf(err, errlen, "%s: manifest format version %u, this epochfs reads version %u: "
			 "rebuild it with this epochfs-manifest", name, get32(b + 8), MANIFEST_VERSION);
		return -ENOTSUP;
	}
	if ((ret = need_sodium(err, errlen)) < 0)
		return ret;
	crypto_generichash(sum, sizeof(sum), b, m->len - MANIFEST_TRAILER_LEN, NULL, 0);
	sum_ok = !memcmp(sum, b + m->len - MANIFEST_TRAILER_LEN, sizeof(sum));
	ret = walk(m, why, sizeof(why), &shortp);
	if (ret == -ENOMEM)
		snprintf(err, errlen, "%s: out of memory", name);
	else if (!sum_ok && shortp)
		snprintf(err, errlen, "%s: truncated (%zu bytes): rebuild it with epochfs-manifest",
			 name, m->len);
	else if (!sum_ok)
		snprintf(err, errlen, "%s: corrupt (checksum mismatch): rebuild it with "
			 "epochfs-manifest", name);
	else if (ret < 0)
		snprintf(err, errlen, "%s: corrupt (%s): rebuild it with epochfs-manifest", name, why);
	if (ret == 0 && !sum_ok)
		ret = -EBADMSG;
	if (ret < 0) {
		free(m->off);
		m->off = NULL;
	}
	return ret;
}

/* ---- load and save ---- */

int manifest_load(const char *path, struct manifest **out, char *err, size_t errlen)
{
	struct manifest *m;
	struct stat st;
	size_t got = 0;
	int fd, ret;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		snprintf(err, errlen, "%s: not a regular file (give the manifest file)", path);
		goto out_close;
	}
	m = calloc(1, sizeof(*m));
	if (!m || !(m->buf = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		free(m);
		ret = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory for %lld bytes", path, (long long)st.st_size);
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, m->buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-ret));
			goto out_free;
		}
		if (n == 0)
			break;              /* shrank under us: judged as what we got */
		got += (size_t)n;
	}
	m->len = got;
	ret = parse(m, path, err, errlen);
	if (ret < 0)
		goto out_free;
	close(fd);
	*out = m;
	return 0;
out_free:
	manifest_free(m);
out_close:
	close(fd);
	return ret;
}

int manifest_save(const struct manifest *m, const char *path, char *err, size_t errlen)
{
	char tmp[PATH_MAX + 32];
	size_t done = 0;
	int fd, ret = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp)) {
		snprintf(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(-ret));
		return ret;
	}
	while (done < m->len) {
		ssize_t n = write(fd, m->buf + done, m->len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			goto fail;
		}
		done += (size_t)n;
	}
	if (fsync(fd) < 0) {
		ret = -errno;
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		ret = -errno;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		ret = -errno;
		unlink(tmp);
		snprintf(err, errlen, "%s: cannot rename %s over it: %s", path, tmp, strerror(-ret));
		return ret;
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	snprintf(err, errlen, "%s: cannot write: %s", tmp, strerror(-ret));
	return ret;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	free(m->buf);
	free(m->off);
	free(m->bound);
	free(m);
}

/* ---- accessors ---- */

uint32_t manifest_chunk(const struct manifest *m)
{
	return m->chunk;
}

uint64_t manifest_files(const struct manifest *m)
{
	return m->nfiles;
}

uint64_t manifest_bytes(const struct manifest *m)
{
	return m->bytes;
}

size_t manifest_memory(const struct manifest *m)
{
	return sizeof(*m) + m->len + m->nfiles * sizeof(*m->off) +
	       (size_t)m->nbound * sizeof(*m->bound);
}

int manifest_record(const struct manifest *m, uint64_t i, const char **path, size_t *len,
		    uint64_t *size, const uint8_t **hashes)
{
	const uint8_t *r;
	uint16_t plen;
	uint64_t sz;

	if (i >= m->nfiles)
		return -ENOENT;
	r = m->buf + m->off[i];
	plen = get16(r);
	sz = get64(r + 2 + plen);
	if (path)
		*path = (const char *)r + 2;
	if (len)
		*len = plen;
	if (size)
		*size = sz;
	if (hashes)
		*hashes = sz ? r + 2 + plen + 8 : NULL;
	return 0;
}

int manifest_find(const struct manifest *m, const char *rel, size_t len, uint64_t *size)
{
	uint64_t lo = 0, hi = m->nfiles;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		const uint8_t *r = m->buf + m->off[mid];
		uint16_t plen = get16(r);
		int c = path_cmp(r + 2, plen, (const uint8_t *)rel, len);

		if (c == 0) {
			if (size)
				*size = get64(r + 2 + plen);
			return (int)mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

int manifest_check(const struct manifest *m, uint32_t file, uint32_t chunk, const void *data,
		   size_t len)
{
	uint8_t h[MANIFEST_HASH_LEN];
	const uint8_t *hashes;
	uint64_t size, nch, want;

	if (manifest_record(m, file, NULL, NULL, &size, &hashes) < 0)
		return -ENOENT;
	nch = chunks_of(size, m->chunk);
	if (chunk >= nch)
		return -ENOENT;
	want = chunk + 1 < nch ? m->chunk : size - (uint64_t)chunk * m->chunk;
	if (len != want)
		return -EINVAL;
	crypto_generichash(h, sizeof(h), data, len, NULL, 0);
	if (memcmp(h, hashes + (size_t)chunk * MANIFEST_HASH_LEN, sizeof(h)))
		return -EBADMSG;
	return 0;
}

/* ---- bind to the daemon's index ---- */

static void set_first(char *dst, const char *path, size_t len)
{
	if (!dst[0])
		snprintf(dst, 256, "%.*s", (int)(len > 255 ? 255 : len), path);
}

int manifest_bind(struct manifest *m, const struct index *ix, struct manifest_report *rep)
{
	struct manifest_report r;
	uint32_t n = index_count(ix);
	uint32_t *map = calloc((size_t)n + 1, sizeof(*map));
	uint8_t *seen = calloc(m->nfiles ? m->nfiles : 1, 1);
	char *path = malloc(MAX_PATH_LEN + 512);
	int ret = 0;

	memset(&r, 0, sizeof(r));
	free(m->bound);
	m->bound = NULL;
	m->nbound = 0;
	if (!map || !seen || !path) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t id = INDEX_ROOT; id <= n; id++) {
		struct index_attr a;
		uint64_t size;
		int len, rec;

		if (index_get(ix, id, &a) < 0 || !S_ISREG(a.mode) || a.gone)
			continue;
		len = index_path(ix, id, path, MAX_PATH_LEN + 512);
		rec = len < 0 ? -ENOENT : manifest_find(m, path, (size_t)len, &size);
		if (rec < 0) {
			r.missing++;
			set_first(r.first_missing, path, len < 0 ? 0 : (size_t)len);
			continue;
		}
		map[id] = (uint32_t)rec + 1;
		seen[rec] = 1;
		if (size == a.v.size) {
			r.matched++;
		} else {
			r.size_differs++;
			set_first(r.first_size, path, (size_t)len);
		}
	}
	for (uint64_t i = 0; i < m->nfiles; i++) {
		const char *p;
		size_t len;

		if (seen[i])
			continue;
		r.extra++;
		manifest_record(m, i, &p, &len, NULL, NULL);
		set_first(r.first_extra, p, len);
	}
	m->bound = map;
	m->nbound = n + 1;
	map = NULL;
out:
	if (rep)
		*rep = r;
	free(map);
	free(seen);
	free(path);
	return ret;
}

int manifest_file_of(const struct manifest *m, uint32_t id)
{
	if (!m->bound || id >= m->nbound || !m->bound[id])
		return -ENOENT;
	return (int)(m->bound[id] - 1);
}

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
	uint8_t *out = r + 2 + plen + 8;
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
	if (!S_ISREG(st0.st_mode) || (uint64_t)st0.st_size != size) {
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
	double dt = now_s() - t0;
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
	double t0 = now_s(), last = t0;
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

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 250000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&b->cond, &b->lock, &dl);
		if (progress && now_s() - t0 > 1.0 && now_s() - last >= 0.5) {
			last = now_s();
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
 * BLOB) and sizes. */
struct file_ent {
	uint64_t path_off;          /* into blob */
	uint64_t size;
};

struct file_list {
	char *blob;
	size_t blob_len, blob_cap;
	struct file_ent *e;
	uint64_t n, cap;
};

static int list_add(struct file_list *l, const char *path, size_t len, uint64_t size)
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
	l->e[l->n++].size = size;
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
		if (list_add(l, path, (size_t)len, a.v.size) < 0)
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
		uint64_t nch = chunks_of(l->e[i].size, b->chunk);

		if (nch > UINT32_MAX) {
			snprintf(err, errlen, "%s/%s: %llu bytes is more than 2^32 chunks of %u: "
				 "use a larger --chunk", b->source, path,
				 (unsigned long long)l->e[i].size, b->chunk);
			return -EFBIG;
		}
		b->rel[i] = path;
		len += 2 + strlen(path) + 8 + (size_t)nch * MANIFEST_HASH_LEN;
		b->total += l->e[i].size;
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
		put64(b->img + p + 2 + plen, l->e[i].size);
		p += 2 + plen + 8 + (size_t)chunks_of(l->e[i].size, b->chunk) * MANIFEST_HASH_LEN;
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
		.cond = PTHREAD_COND_INITIALIZER,
	};
	struct file_list l = { 0 };
	struct manifest *m;
	struct index *ix = NULL;
	double t0 = now_s();
	int ret;

	*out = NULL;
	if (b.chunk < MANIFEST_MIN_CHUNK || b.chunk > MANIFEST_MAX_CHUNK) {
		snprintf(err, errlen, "chunk size %u: expected 4 KiB to 1 GiB", b.chunk);
		return -EINVAL;
	}
	if ((ret = need_sodium(err, errlen)) < 0)
		return ret;
	b.rootfd = open(source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b.rootfd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", source,
			 ret == -ENOTDIR ? "not a directory (give the dataset's root)" : strerror(-ret));
		return ret;
	}
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
	if ((ret = parse(m, "the new manifest", err, errlen)) < 0) {
		manifest_free(m);
		goto out;
	}
	if (st) {
		st->files = m->nfiles;
		st->bytes = m->bytes;
		st->seconds = now_s() - t0;
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
