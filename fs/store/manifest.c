/* manifest.c - load, save, check and bind manifests; see manifest.h (the
 * builder is fs/store/manifest_build.c).
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

#include "store/index.h"
#include "store/manifest_int.h"

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok;

static void sodium_start(void)
{
	sodium_ok = sodium_init() >= 0;
}

int manifest_need_sodium(char *err, size_t errlen)
{
	pthread_once(&sodium_once, sodium_start);
	if (!sodium_ok) {
		snprintf(err, errlen, "libsodium failed to initialise");
		return -ENOSYS;
	}
	return 0;
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
		if (end - p - 2 < (size_t)plen + REC_FIXED)
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
		p += REC_FIXED;
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
int manifest_parse(struct manifest *m, const char *name, char *err, size_t errlen)
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
	if (get32(b + 8) == 1) {
		snprintf(err, errlen, "%s: manifest format 1 binds files by path and size only, so a file "
			 "changed in place would still pass: rebuild it with this epochfs-manifest (format %u "
			 "binds each file's version)", name, MANIFEST_VERSION);
		return -ENOTSUP;
	}
	if (get32(b + 8) != MANIFEST_VERSION) {
		snprintf(err, errlen, "%s: manifest format version %u, this epochfs reads version %u: "
			 "rebuild it with this epochfs-manifest", name, get32(b + 8), MANIFEST_VERSION);
		return -ENOTSUP;
	}
	if ((ret = manifest_need_sodium(err, errlen)) < 0)
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
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	*out = NULL;
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-ret));
		return ret;
	}
	ret = manifest_load_fd(fd, path, out, err, errlen);
	close(fd);
	return ret;
}

int manifest_load_fd(int fd, const char *path, struct manifest **out, char *err, size_t errlen)
{
	struct manifest *m;
	struct stat st;
	size_t got = 0;
	int ret;

	*out = NULL;
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
		ssize_t n = pread(fd, m->buf + got, (size_t)st.st_size - got, (off_t)got);
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
	ret = manifest_parse(m, path, err, errlen);
	if (ret < 0)
		goto out_free;
	*out = m;
	return 0;
out_free:
	manifest_free(m);
out_close:
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
		*hashes = sz ? r + 2 + plen + REC_FIXED : NULL;
	return 0;
}

int manifest_record_version(const struct manifest *m, uint64_t i, struct index_version *v)
{
	const uint8_t *r;

	if (i >= m->nfiles)
		return -ENOENT;
	r = m->buf + m->off[i];
	r += 2 + get16(r);
	v->size = get64(r);
	v->ino = get64(r + 8);
	v->mtime_ns = (int64_t)get64(r + 16);
	v->ctime_ns = (int64_t)get64(r + 24);
	return 0;
}

int manifest_verifiable(const struct manifest *m, uint32_t id, const struct index_version *v, uint32_t *file)
{
	struct index_version rv;
	int f = manifest_file_of(m, id);

	if (f < 0 || manifest_record_version(m, (uint64_t)f, &rv) < 0 || !index_version_eq(&rv, v))
		return 0;
	*file = (uint32_t)f;
	return 1;
}

uint64_t manifest_id(const struct manifest *m)
{
	uint64_t id = get64(m->buf + m->len - MANIFEST_TRAILER_LEN);

	return id ? id : 1;
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
		struct index_version rv;
		int len, rec;

		if (index_get(ix, id, &a) < 0 || !S_ISREG(a.mode) || a.gone)
			continue;
		len = index_path(ix, id, path, MAX_PATH_LEN + 512);
		rec = len < 0 ? -ENOENT : manifest_find(m, path, (size_t)len, NULL);
		if (rec < 0) {
			r.missing++;
			set_first(r.first_missing, path, len < 0 ? 0 : (size_t)len);
			continue;
		}
		map[id] = (uint32_t)rec + 1;
		seen[rec] = 1;
		manifest_record_version(m, (uint64_t)rec, &rv);
		if (index_version_eq(&rv, &a.v)) {
			r.matched++;
		} else {
			r.version_differs++;
			set_first(r.first_version, path, (size_t)len);
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

