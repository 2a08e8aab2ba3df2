/* persist.c - the RAM cache's state on tmpfs; see persist.h for the contract.
 *
 * DESIGN
 * - Files: DIR/lock (flock, the holder's pid inside), DIR/owner (text:
 *   mountpoint=, source=), DIR/arena (the cache's arena, CAPACITY bytes),
 *   DIR/table (a 64-byte header, then records).
 * - Header: magic "EPFSSTAT", format, chunk, capacity, SOURCE's device,
 *   inode and path hash, then the xxh3 of the bytes before it.
 * - Record: a fixed part (struct rec: magic, kind, path length, chunk,
 *   offset, length, version, data checksum), the path, zero padding to 8
 *   bytes, then the xxh3 of everything before it. A reader stops at the
 *   first record that does not check: its length field cannot be trusted.
 * - Adoption: parse (cuts void earlier records past them), resolve each
 *   path in the index and compare versions, keep the last record of a key,
 *   sort by offset and drop overlaps, hash and adopt in parallel, punch
 *   the gaps, rewrite the table (table.new, rename).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "clock.h"
#include "log.h"
#include "path.h"
#include "persist.h"
#include "trust.h"

#define HDR_MAGIC "EPFSSTAT"
#define REC_MAGIC 0x52534645u          /* "EFSR" */
#define REC_ITEM 1u
#define REC_CUT 2u
#define PAGE 4096ull
#define GRAIN 64ull                     /* the cache's arena alignment */

struct hdr {
	char magic[8];
	uint32_t format, chunk;
	uint64_t capacity;
	uint64_t src_dev, src_ino, src_hash;
	uint64_t created;
	uint64_t manifest;              /* manifest_id() of the --manifest in force, 0: none */
	uint64_t xxh;                   /* of the bytes above */
};

struct rec {
	uint32_t magic;
	uint16_t kind, path_len;
	uint32_t chunk, pad;
	uint64_t off, len;
	struct index_version v;
	uint64_t xxh;                   /* of the item's bytes */
};

struct persist {
	char *dir;
	int dirfd, lockfd, arenafd, tablefd;
	uint64_t capacity;
	uint32_t chunk;
	struct hdr hdr;                 /* what this daemon writes */
	int have_table;                 /* DIR/table matched: adopt from it */
	int compact;                    /* move items down over dropped ones at adoption */
	int keep_held;                  /* never drop adopted items past CAPACITY: grow it */
	int recheck;                    /* the state was made under another manifest: CHECK each item */
	persist_check_fn check;
	void *check_arg;
	int recording;                  /* after adoption: records are written */
	pthread_mutex_t wlock;          /* one record written at a time */
	persist_path_fn path;
	void *path_arg;
	struct persist_stats st;        /* record_errors atomic */
};

static uint64_t hdr_sum(const struct hdr *h)
{
	return XXH3_64bits(h, offsetof(struct hdr, xxh));
}

static size_t rec_size(size_t path_len)
{
	return sizeof(struct rec) + ((path_len + 7) & ~(size_t)7) + 8;
}

/* Writes all of BUF at the end of the table. */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Builds a record in BUF (rec_size(path_len) bytes). */
static size_t rec_build(char *buf, uint16_t kind, const char *path, size_t path_len, uint32_t chunk,
			uint64_t off, uint64_t len, const struct index_version *v, uint64_t xxh)
{
	struct rec r = { .magic = REC_MAGIC, .kind = kind, .path_len = (uint16_t)path_len,
			 .chunk = chunk, .off = off, .len = len, .xxh = xxh };
	size_t n = rec_size(path_len);

	if (v)
		r.v = *v;
	memset(buf, 0, n);
	memcpy(buf, &r, sizeof(r));
	if (path_len)
		memcpy(buf + sizeof(r), path, path_len);
	uint64_t sum = XXH3_64bits(buf, n - 8);
	memcpy(buf + n - 8, &sum, 8);
	return n;
}

void persist_record(struct persist *p, uint32_t id, uint32_t chunk, const struct index_version *v,
		    uint64_t off, size_t len, uint64_t xxh)
{
	char path[4096], buf[sizeof(struct rec) + 4096 + 16];

	if (!p->recording)
		return;
	int n = p->path(p->path_arg, id, path, sizeof(path));

	if (n < 0 || n > 4095) {
		__atomic_add_fetch(&p->st.record_errors, 1, __ATOMIC_RELAXED);
		return;
	}
	size_t sz = rec_build(buf, REC_ITEM, path, (size_t)n, chunk, off, len, v, xxh);
	pthread_mutex_lock(&p->wlock);
	int err = p->tablefd >= 0 ? write_all(p->tablefd, buf, sz) : -EBADF;
	pthread_mutex_unlock(&p->wlock);
	if (err < 0)
		__atomic_add_fetch(&p->st.record_errors, 1, __ATOMIC_RELAXED);
}

static void hook_ready(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
		       uint64_t off, size_t len, uint64_t xxh)
{
	persist_record(arg, id, chunk, v, off, len, xxh);
}

void persist_record_cut(struct persist *p, uint64_t off)
{
	char buf[sizeof(struct rec) + 16];

	if (!p->recording)
		return;
	size_t sz = rec_build(buf, REC_CUT, NULL, 0, 0, off, 0, NULL, 0);

	pthread_mutex_lock(&p->wlock);
	int err = p->tablefd >= 0 ? write_all(p->tablefd, buf, sz) : -EBADF;
	pthread_mutex_unlock(&p->wlock);
	if (err < 0) {
		/* A cut that is not recorded would let stale records name bytes
		 * that will be overwritten: the data checksum still catches
		 * them, but the table can no longer be trusted, so it goes. */
		__atomic_add_fetch(&p->st.record_errors, 1, __ATOMIC_RELAXED);
		if (p->tablefd >= 0 && ftruncate(p->tablefd, (off_t)sizeof(struct hdr)) < 0)
			log_warn("state %s: cannot record memory given back, nor empty the table: %s",
				 p->dir, strerror(errno));
	}
}

static void hook_cut(void *arg, uint64_t off)
{
	persist_record_cut(arg, off);
}

/* Writes a new table at DIR/table: the header, then N records from RECS
 * (already built, back to back, LEN bytes). Opens it for appending. */
static int table_replace(struct persist *p, const char *recs, size_t len)
{
	char why[300];
	int fd, err;

	unlinkat(p->dirfd, "table.new", 0);
	fd = trust_openat(p->dirfd, "table.new", O_WRONLY | O_CREAT | O_EXCL, 0600, why, sizeof(why));
	if (fd < 0)
		return fd;
	err = write_all(fd, &p->hdr, sizeof(p->hdr));
	if (!err && len)
		err = write_all(fd, recs, len);
	if (!err && renameat(p->dirfd, "table.new", p->dirfd, "table") < 0)
		err = -errno;
	if (err) {
		close(fd);
		unlinkat(p->dirfd, "table.new", 0);
		return err;
	}
	close(fd);
	fd = trust_openat(p->dirfd, "table", O_WRONLY | O_APPEND, 0600, why, sizeof(why));
	if (fd < 0)
		return fd;
	pthread_mutex_lock(&p->wlock);
	if (p->tablefd >= 0)
		close(p->tablefd);
	p->tablefd = fd;
	pthread_mutex_unlock(&p->wlock);
	return 0;
}

/* Empties the arena (every page back to the kernel) and starts a new table. */
static int discard(struct persist *p, const char *why)
{
	snprintf(p->st.discarded, sizeof(p->st.discarded), "%s", why);
	log_info("cache state %s discarded: %s", p->dir, why);
	if (ftruncate(p->arenafd, 0) < 0 || ftruncate(p->arenafd, (off_t)p->capacity) < 0)
		return -errno;
	p->have_table = 0;
	return table_replace(p, NULL, 0);
}

int persist_clear(struct persist *p)
{
	if (ftruncate(p->arenafd, 0) < 0 || ftruncate(p->arenafd, (off_t)p->capacity) < 0)
		return -errno;
	p->have_table = 0;
	p->recording = 0;
	return table_replace(p, NULL, 0);
}

/* Reads DIR/table's header and decides: adopt (have_table), or discard. */
static int check_table(struct persist *p)
{
	struct hdr h;
	char why[300];
	int fd = trust_openat(p->dirfd, "table", O_RDONLY, 0, why, sizeof(why));

	if (fd == -ENOENT)
		return table_replace(p, NULL, 0);   /* a new state: nothing to say */
	if (fd < 0) {
		p->st.found = 1;
		unlinkat(p->dirfd, "table", 0);
		return discard(p, why);
	}
	ssize_t n = pread(fd, &h, sizeof(h), 0);
	close(fd);
	p->st.found = 1;
	if (n != (ssize_t)sizeof(h) || memcmp(h.magic, HDR_MAGIC, 8) || h.xxh != hdr_sum(&h))
		snprintf(why, sizeof(why), "its table's header is missing or corrupt");
	else if (h.format != PERSIST_FORMAT)
		snprintf(why, sizeof(why), "its table has format %u, this daemon reads %u", h.format,
			 PERSIST_FORMAT);
	else if (h.src_dev != p->hdr.src_dev || h.src_ino != p->hdr.src_ino || h.src_hash != p->hdr.src_hash)
		snprintf(why, sizeof(why), "it was made for another SOURCE");
	else if (h.chunk != p->chunk)
		snprintf(why, sizeof(why), "it was made with %u-byte chunks, this mount uses %u", h.chunk,
			 p->chunk);
	else if (p->hdr.manifest && h.manifest != p->hdr.manifest && !(p->compact && p->check))
		snprintf(why, sizeof(why), "it was made %s, and its items were not checked against this one",
			 h.manifest ? "under another --manifest" : "without --manifest");
	else {
		/* Items made without this manifest are checked one by one (the
		 * RAM cache: they are in memory) before they are adopted. */
		p->recheck = p->hdr.manifest && h.manifest != p->hdr.manifest;
		p->have_table = 1;
		return 0;
	}
	return discard(p, why);
}

uint64_t persist_headroom(uint64_t fs_size)
{
	uint64_t half = fs_size / 2, gib = 1ull << 30;

	return fs_size / 4 > (half < gib ? half : gib) ? fs_size / 4 : (half < gib ? half : gib);
}

/* Opens DIR/NAME, owned by us: a file that fails the checks (a link, a
 * stranger's, loose modes) is removed and made anew. */
static int own_file(struct persist *p, const char *name, int flags, char *err, size_t errlen, const char *what)
{
	char why[300];
	int fd = trust_openat(p->dirfd, name, flags, 0600, why, sizeof(why));

	if (fd == -EPERM) {
		log_warn("%s %s: %s: removed and made anew", what, p->dir, why);
		if (unlinkat(p->dirfd, name, 0) < 0 && errno != ENOENT) {
			snprintf(err, errlen, "%s %s: %s, and it cannot be removed: %s", what, p->dir, why,
				 strerror(errno));
			return -EPERM;
		}
		fd = trust_openat(p->dirfd, name, flags | O_CREAT | O_EXCL, 0600, why, sizeof(why));
	}
	if (fd < 0)
		snprintf(err, errlen, "%s %s: %s", what, p->dir, why);
	return fd;
}

int persist_open(const struct persist_opts *o, struct persist **out, char *err, size_t errlen)
{
	struct persist *p = calloc(1, sizeof(*p));
	const char *what = o->what ? o->what : "--state-dir";
	struct statfs sf;
	struct stat sb;
	char why[400];
	int e, loose = 0;

	if (!p)
		return -ENOMEM;
	p->dirfd = p->lockfd = p->arenafd = p->tablefd = -1;
	p->capacity = o->capacity;
	p->chunk = o->chunk;
	p->compact = o->compact;
	p->keep_held = o->keep_held;
	p->check = o->check;
	p->check_arg = o->check_arg;
	pthread_mutex_init(&p->wlock, NULL);
	p->dir = strdup(o->dir);
	if (!p->dir) {
		e = -ENOMEM;
		goto fail;
	}
	/* Ours, 0700, reached through directories nobody else can change;
	 * missing ones are made 0700. */
	p->dirfd = trust_dir(p->dir, TRUST_CREATE | TRUST_OWN, &loose, why, sizeof(why));
	if (p->dirfd < 0) {
		e = p->dirfd;
		snprintf(err, errlen, "%s %s: not trusted: %s", what, p->dir, why);
		goto fail;
	}
	if (o->tmpfs && (fstatfs(p->dirfd, &sf) < 0 || (unsigned long)sf.f_type != TMPFS_MAGIC)) {
		e = -EINVAL;
		snprintf(err, errlen, "%s %s is not on tmpfs: the RAM cache's state must live in "
			 "memory (a directory under /dev/shm), or mount with --no-persist", what, p->dir);
		goto fail;
	}
	if (loose) {
		/* Others could write here: nothing in it can be believed. */
		log_warn("%s %s was writable by group or others: what it held is discarded, and it is "
			 "0700 now", what, p->dir);
		trust_empty_dir(p->dirfd);
	}
	p->lockfd = own_file(p, "lock", O_RDWR | O_CREAT, err, errlen, what);
	if (p->lockfd < 0) {
		e = p->lockfd;
		goto fail;
	}
	if (flock(p->lockfd, LOCK_EX | LOCK_NB) < 0) {
		char pid[32] = "";
		e = errno == EWOULDBLOCK ? -EBUSY : -errno;
		ssize_t n = pread(p->lockfd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		snprintf(err, errlen, "%s %s is in use by another epochfs%s%s%s: give each mount its "
			 "own %s", what, p->dir, *pid ? " (pid " : "", pid, *pid ? ")" : "", what);
		goto fail;
	}
	{
		char buf[32];
		int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
		if (ftruncate(p->lockfd, 0) < 0 || pwrite(p->lockfd, buf, (size_t)n, 0) < 0) {
			/* the pid is for people only */
		}
	}
	{
		FILE *f;
		int fd = own_file(p, "owner", O_WRONLY | O_CREAT | O_TRUNC, err, errlen, what);
		if (fd < 0) {
			e = fd;
			goto fail;
		}
		if ((f = fdopen(fd, "w"))) {
			fprintf(f, "mountpoint=%s\nsource=%s\n", o->mountpoint ? o->mountpoint : "",
				o->source);
			fclose(f);
		} else {
			close(fd);
		}
	}
	/* A larger arena than the budget (a smaller --cache-size now) keeps its
	 * length until the adoption has moved what fits below the budget. */
	p->arenafd = own_file(p, "arena", O_RDWR | O_CREAT, err, errlen, what);
	if (p->arenafd < 0) {
		e = p->arenafd;
		goto fail;
	}
	if (fstat(p->arenafd, &sb) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s %s: arena: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	/* Room: the state never takes the last of its filesystem (on /dev/shm,
	 * PyTorch's DataLoader hands its batches over there). The arena's own
	 * pages count as ours. */
	if (o->room_check && fstatfs(p->dirfd, &sf) == 0) {
		uint64_t size = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
		uint64_t avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize + (uint64_t)sb.st_blocks * 512;
		uint64_t keep = persist_headroom(size);
		if (avail < keep || o->capacity > avail - keep) {
			e = -ENOSPC;
			snprintf(err, errlen, "%s %s: its filesystem has %llu MiB free of %llu MiB; a %llu MiB "
				 "cache there would leave less than the %llu MiB kept for others", what, p->dir,
				 (unsigned long long)(avail >> 20), (unsigned long long)(size >> 20),
				 (unsigned long long)(o->capacity >> 20), (unsigned long long)(keep >> 20));
			goto fail;
		}
	}
	if ((uint64_t)sb.st_size < p->capacity && ftruncate(p->arenafd, (off_t)p->capacity) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s %s: arena: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	if (stat(o->source, &sb) < 0) {
		e = -errno;
		snprintf(err, errlen, "%s: %s", o->source, strerror(-e));
		goto fail;
	}
	memcpy(p->hdr.magic, HDR_MAGIC, 8);
	p->hdr.format = PERSIST_FORMAT;
	p->hdr.chunk = o->chunk;
	p->hdr.capacity = o->capacity;
	p->hdr.src_dev = (uint64_t)sb.st_dev;
	p->hdr.src_ino = (uint64_t)sb.st_ino;
	p->hdr.src_hash = XXH3_64bits(o->source, strlen(o->source));
	p->hdr.created = (uint64_t)time(NULL);
	p->hdr.manifest = o->manifest_id;
	p->hdr.xxh = hdr_sum(&p->hdr);
	if ((e = check_table(p)) < 0) {
		snprintf(err, errlen, "%s %s: table: %s", what, p->dir, strerror(-e));
		goto fail;
	}
	*out = p;
	return 0;
fail:
	persist_close(p);
	return e;
}

int persist_arena_fd(const struct persist *p)
{
	return p->arenafd;
}

int persist_reopen_arena(const struct persist *p, int flags)
{
	struct stat a, b;
	int fd = openat(p->dirfd, "arena", flags | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &a) < 0 || fstat(p->arenafd, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

uint64_t persist_capacity(const struct persist *p)
{
	return p->capacity;
}

void persist_remove(struct persist *p)
{
	if (!p)
		return;
	if (p->dirfd >= 0) {
		pthread_mutex_lock(&p->wlock);
		p->recording = 0;
		pthread_mutex_unlock(&p->wlock);
		if (trust_empty_dir(p->dirfd) < 0 || rmdir(p->dir) < 0)
			log_warn("cache state %s: cannot remove it: %s", p->dir, strerror(errno));
	}
	persist_close(p);
}

const char *persist_dir(const struct persist *p)
{
	return p->dir;
}

/* One record read from the old table, on its way to adoption. */
struct cand {
	uint64_t off, len, xxh;
	uint32_t id, chunk;
	struct index_version v;
	const char *path;               /* in the mapped table */
	uint16_t path_len;
	int state;                      /* 0: a candidate; 1: adopted; <0: dropped (why) */
};

enum { DROP_CHANGED = -1, DROP_CORRUPT = -2, DROP_OTHER = -3, DROP_UNVERIFIED = -4 };

static int by_off(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

struct adopt_job {
	persist_adopt_fn fn;
	void *fn_arg;
	struct cand *cands;
	size_t n, next;                 /* next: atomic */
	persist_check_fn check;         /* non-NULL: each item's bytes (at ARENA) are checked first */
	void *check_arg;
	const char *arena;
};

static void *adopt_worker(void *arg)
{
	struct adopt_job *j = arg;

	for (;;) {
		size_t i = __atomic_fetch_add(&j->next, 64, __ATOMIC_RELAXED);
		if (i >= j->n)
			break;
		size_t end = i + 64 < j->n ? i + 64 : j->n;
		for (; i < end; i++) {
			struct cand *d = &j->cands[i];
			if (d->state)
				continue;
			if (j->check && j->check(j->check_arg, d->id, d->chunk, &d->v, j->arena + d->off, d->len)) {
				d->state = DROP_UNVERIFIED;
				continue;
			}
			int r = j->fn(j->fn_arg, d->id, d->chunk, &d->v, d->off, d->len, d->xxh);
			d->state = !r ? 1 : r == -EBADMSG ? DROP_CORRUPT : DROP_OTHER;
		}
	}
	return NULL;
}

/* Parses the mapped table T (LEN bytes) into candidates. */
static size_t parse(struct persist *p, const char *t, size_t len, struct cand **out,
		    persist_resolve_fn resolve, void *arg)
{
	size_t pos = sizeof(struct hdr), n = 0, cap = 0;
	struct cand *v = NULL;

	while (pos + sizeof(struct rec) + 8 <= len) {
		struct rec r;
		memcpy(&r, t + pos, sizeof(r));
		size_t sz = rec_size(r.path_len);
		uint64_t sum;
		if (r.magic != REC_MAGIC || (r.kind != REC_ITEM && r.kind != REC_CUT) || pos + sz > len)
			break;
		memcpy(&sum, t + pos + sz - 8, 8);
		if (sum != XXH3_64bits(t + pos, sz - 8))
			break;
		if (r.kind == REC_CUT) {
			for (size_t i = 0; i < n; i++)
				if (!v[i].state && v[i].off + v[i].len > r.off)
					v[i].state = DROP_OTHER;
			pos += sz;
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			struct cand *nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		struct cand *d = &v[n++];
		memset(d, 0, sizeof(*d));
		d->off = r.off;
		d->len = r.len;
		d->xxh = r.xxh;
		d->chunk = r.chunk;
		d->path = t + pos + sizeof(r);
		d->path_len = r.path_len;
		p->st.records++;
		struct index_version now;
		if (resolve(arg, d->path, d->path_len, &d->id, &now) < 0 || !index_version_eq(&now, &r.v))
			d->state = DROP_CHANGED;
		else if (r.chunk >= cache_chunks(now.size, p->chunk) ||
			 r.len != cache_chunk_len(now.size, p->chunk, r.chunk))
			d->state = DROP_OTHER;      /* not a piece this file has */
		else
			d->v = now;
		pos += sz;
	}
	p->st.torn_bytes = len > pos ? len - pos : 0;
	*out = v;
	return n;
}

/* The last record of each key wins: earlier ones with the same key drop. */
static void dedupe(struct cand *v, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	int64_t *slot = malloc(cap * sizeof(*slot));

	if (!slot)
		return;
	for (size_t i = 0; i < cap; i++)
		slot[i] = -1;
	for (size_t i = n; i-- > 0;) {
		if (v[i].state)
			continue;
		uint64_t key = (uint64_t)v[i].id << 32 | v[i].chunk;
		uint64_t h = XXH3_64bits(&key, sizeof(key)) & (cap - 1);
		for (;; h = (h + 1) & (cap - 1)) {
			if (slot[h] < 0) {
				slot[h] = (int64_t)i;
				break;
			}
			struct cand *o = &v[slot[h]];
			if (((uint64_t)o->id << 32 | o->chunk) == key) {
				v[i].state = DROP_OTHER;
				break;
			}
		}
	}
	free(slot);
}

/* Moves the items to keep down over the space of those dropped, in
 * offset order, so the budget a dropped item held is not lost for good (a
 * budget sized to the dataset could otherwise never cache it all again).
 * An item that moves is checked at its old place first; one that stays is
 * checked by cache_adopt(). Items that no longer fit below the capacity
 * are dropped. A kill -9 in here leaves the old table naming old places:
 * what was overwritten fails its checksum next time. */
static void compact(struct persist *p, struct cand *v, size_t n, char *arena, uint64_t len_arena)
{
	uint64_t pos = 0;

	(void)len_arena;
	for (size_t i = 0; i < n; i++) {
		struct cand *d = &v[i];
		if (d->state)
			continue;
		if (pos + d->len > p->capacity) {
			d->state = DROP_OTHER;
			continue;
		}
		if (d->off != pos) {
			if (XXH3_64bits(arena + d->off, d->len) != d->xxh) {
				d->state = DROP_CORRUPT;
				continue;
			}
			memmove(arena + pos, arena + d->off, d->len);
			d->off = pos;
			p->st.moved++;
		}
		pos = (d->off + d->len + GRAIN - 1) & ~(GRAIN - 1);
	}
}

int persist_adopt_items(struct persist *p, persist_adopt_fn fn, void *fn_arg, persist_resolve_fn resolve,
			persist_path_fn path, void *arg, unsigned threads, uint64_t *used_out)
{
	double t0 = clock_now();
	struct cand *v = NULL;
	size_t n = 0;
	char *recs = NULL;
	size_t recs_len = 0;
	uint64_t used = 0;
	int err = 0;

	p->path = path;
	p->path_arg = arg;
	if (p->have_table) {
		int fd = openat(p->dirfd, "table", O_RDONLY | O_CLOEXEC);
		struct stat sb;
		struct stat ab;
		uint64_t len_arena = fstat(p->arenafd, &ab) == 0 ? (uint64_t)ab.st_size : 0;
		char *arena = len_arena && p->compact ? mmap(NULL, len_arena, PROT_READ | PROT_WRITE, MAP_SHARED,
							     p->arenafd, 0) : MAP_FAILED;
		if (arena == MAP_FAILED && p->compact)
			len_arena = 0;
		if (len_arena && fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size > sizeof(struct hdr)) {
			size_t len = (size_t)sb.st_size;
			char *t = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
			if (t != MAP_FAILED) {
				n = parse(p, t, len, &v, resolve, arg);
				dedupe(v, n);
				/* Overlaps: by offset, the first one holds the bytes. */
				if (n)
					qsort(v, n, sizeof(*v), by_off);
				uint64_t end = 0;
				/* Without compaction nothing moves: what lies past a
				 * smaller budget goes with the truncation below, unless
				 * the store keeps what it holds (the tier at its
				 * default size). */
				uint64_t lim = p->compact || p->keep_held || len_arena < p->capacity ? len_arena
												    : p->capacity;
				for (size_t i = 0; i < n; i++) {
					if (v[i].state)
						continue;
					if (v[i].off < end || v[i].off % GRAIN || v[i].off > lim || v[i].len > lim - v[i].off)
						v[i].state = DROP_OTHER;
					else
						end = v[i].off + v[i].len;
				}
				if (p->compact)
					compact(p, v, n, arena, len_arena);
				/* Hash and adopt: the bytes are in memory, the threads share it. */
				long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
				if (!threads)
					threads = ncpu > 0 ? (unsigned)ncpu : 1;
				if (threads > 16)
					threads = 16;
				struct adopt_job job = { .fn = fn, .fn_arg = fn_arg, .cands = v, .n = n };
				if (p->recheck && arena != MAP_FAILED) {
					job.check = p->check;
					job.check_arg = p->check_arg;
					job.arena = arena;
				}
				pthread_t tid[16];
				unsigned started = 0;
				for (unsigned i = 1; i < threads; i++)
					if (!pthread_create(&tid[started], NULL, adopt_worker, &job))
						started++;
				adopt_worker(&job);
				for (unsigned i = 0; i < started; i++)
					pthread_join(tid[i], NULL);
				/* The new table: the adopted records, rebuilt from the old ones. */
				for (size_t i = 0; i < n; i++)
					if (v[i].state == 1)
						recs_len += rec_size(v[i].path_len);
				recs = recs_len ? malloc(recs_len) : NULL;
				size_t at = 0;
				uint64_t hole = 0;      /* the end of the last byte held */
				for (size_t i = 0; i < n; i++) {
					struct cand *d = &v[i];
					if (d->state != 1) {
						if (d->state == DROP_CHANGED)
							p->st.dropped_changed++;
						else if (d->state == DROP_CORRUPT)
							p->st.dropped_corrupt++;
						else if (d->state == DROP_UNVERIFIED)
							p->st.dropped_unverified++;
						else
							p->st.dropped_other++;
						p->st.dropped_bytes += d->len;
						continue;
					}
					p->st.adopted++;
					p->st.adopted_bytes += d->len;
					if (recs)
						at += rec_build(recs + at, REC_ITEM, d->path, d->path_len, d->chunk,
								d->off, d->len, &d->v, d->xxh);
					/* Pages between the items held go back. */
					uint64_t a = (hole + PAGE - 1) & ~(PAGE - 1), b = d->off & ~(PAGE - 1);
					if (b > a)
						fallocate(p->arenafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
							  (off_t)a, (off_t)(b - a));
					hole = d->off + d->len;
				}
				used = (hole + GRAIN - 1) & ~(GRAIN - 1);
				munmap(t, len);
			} else {
				err = -errno;
			}
		}
		if (fd >= 0)
			close(fd);
		if (arena != MAP_FAILED)
			munmap(arena, len_arena);
		if (recs_len && !recs)
			err = -ENOMEM;
	}
	if (p->keep_held && used > p->capacity)
		p->capacity = used;
	if (ftruncate(p->arenafd, (off_t)p->capacity) < 0 && !err)
		err = -errno;
	/* Whatever lies past the last item held goes back; the prefaulter
	 * makes it resident again as the fill needs. */
	uint64_t tail = (used + PAGE - 1) & ~(PAGE - 1);
	if (tail < p->capacity)
		fallocate(p->arenafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)tail,
			  (off_t)(p->capacity - tail));
	*used_out = used;
	if (!err)
		err = table_replace(p, recs, recs ? recs_len : 0);
	if (err < 0) {
		log_warn("cache state %s: cannot rewrite the table (%s): its items stay cached but are "
			 "not recorded, the next daemon will not adopt them", p->dir, strerror(-err));
		snprintf(p->st.discarded, sizeof(p->st.discarded), "the table could not be rewritten: %s",
			 strerror(-err));
	}
	free(recs);
	free(v);
	p->recording = err >= 0 || p->tablefd >= 0;
	p->st.adopt_seconds = clock_now() - t0;
	if (p->st.records)
		log_info("cache state %s: adopted %llu of %llu items (%.1f MB) in %.2f s; dropped %llu changed "
			 "in SOURCE, %llu corrupt, %llu not matching --manifest, %llu other; %llu moved over the "
			 "space of dropped ones", p->dir,
			 (unsigned long long)p->st.adopted, (unsigned long long)p->st.records,
			 (double)p->st.adopted_bytes / 1e6, p->st.adopt_seconds,
			 (unsigned long long)p->st.dropped_changed, (unsigned long long)p->st.dropped_corrupt,
			 (unsigned long long)p->st.dropped_unverified, (unsigned long long)p->st.dropped_other,
			 (unsigned long long)p->st.moved);
	if (p->st.torn_bytes)
		log_info("cache state %s: the table's last %llu bytes did not parse (a record cut short or "
			 "corrupt); the items they named were not adopted", p->dir,
			 (unsigned long long)p->st.torn_bytes);
	return err;
}

void persist_get_stats(struct persist *p, struct persist_stats *s)
{
	*s = p->st;
	s->record_errors = __atomic_load_n(&p->st.record_errors, __ATOMIC_RELAXED);
}

void persist_mark_kept(struct persist *p)
{
	char why[300];
	int fd = trust_openat(p->dirfd, "owner", O_WRONLY | O_APPEND, 0600, why, sizeof(why));

	if (fd < 0 || write(fd, "kept=1\n", 7) != 7)
		log_warn("cache state %s: cannot mark it kept: %s", p->dir, fd < 0 ? why : strerror(errno));
	if (fd >= 0)
		close(fd);
}

void persist_close(struct persist *p)
{
	if (!p)
		return;
	if (p->tablefd >= 0)
		close(p->tablefd);
	if (p->arenafd >= 0)
		close(p->arenafd);
	if (p->lockfd >= 0)
		close(p->lockfd);       /* the lock goes with it */
	if (p->dirfd >= 0)
		close(p->dirfd);
	pthread_mutex_destroy(&p->wlock);
	free(p->dir);
	free(p);
}

void persist_default_dir(const char *root, const char *mountpoint, char *buf, size_t len)
{
	char tail[48];
	size_t ml = strlen(mountpoint), from = ml > 40 ? ml - 40 : 0, k = 0;

	for (size_t i = from; i < ml && k < sizeof(tail) - 1; i++) {
		char ch = mountpoint[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			 ch == '.' || ch == '_';
		if (!k && !ok)
			continue;           /* no leading dash */
		tail[k++] = ok ? ch : '-';
	}
	tail[k] = 0;
	snprintf(buf, len, "%s/%s%s%08llx", root, tail, k ? "-" : "",
		 (unsigned long long)(XXH3_64bits(mountpoint, ml) & 0xffffffffu));
}

/* Whether the orphaned state in DIRFD (its lock held by us) is to go:
 * its OWNER file's mount point is gone, or no longer an epochfs mount
 * (unmounted cleanly or by hand: no restart will come for it), unless it
 * was kept on purpose (--persist always). A dead epochfs mount (a crash, a
 * kill -9) keeps its state for the restart. */
static int orphan_goes(int dirfd, char *mnt, size_t mlen)
{
	char line[4200], type[64];
	int kept = 0, ofd = openat(dirfd, "owner", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *f;
	struct stat sb;

	*mnt = 0;
	if (ofd < 0 || !(f = fdopen(ofd, "r"))) {
		if (ofd >= 0)
			close(ofd);
		return 0;                   /* not a state we can read: left alone */
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "mountpoint=", 11))
			snprintf(mnt, mlen, "%s", line + 11);
		else if (!strcmp(line, "kept=1"))
			kept = 1;
	}
	fclose(f);
	if (!*mnt)
		return 0;
	if (stat(mnt, &sb) < 0 && errno == ENOENT)
		return 1;
	if (kept)
		return 0;
	return path_mount_type("/proc/self/mountinfo", mnt, type, sizeof(type)) != 1 ||
	       strcmp(type, "fuse.epochfs") != 0;
}

int persist_sweep(const char *root, const char *except)
{
	char why[300], mnt[4200];
	int rootfd = trust_dir(root, TRUST_OWN, NULL, why, sizeof(why)), removed = 0;
	DIR *d;
	struct dirent *e;

	if (rootfd < 0)
		return 0;
	d = fdopendir(rootfd);
	if (!d) {
		close(rootfd);
		return 0;
	}
	while ((e = readdir(d))) {
		struct stat sb;
		int fd, lock;

		if (e->d_name[0] == '.')
			continue;
		if (except && !strcmp(except, e->d_name))
			continue;
		fd = openat(rootfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &sb) < 0 || sb.st_uid != geteuid() || (sb.st_mode & 077)) {
			close(fd);
			continue;                   /* not one of ours */
		}
		lock = trust_openat(fd, "lock", O_RDWR, 0, why, sizeof(why));
		if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0) {
			if (lock >= 0)
				close(lock);
			close(fd);
			continue;                   /* held, or not a state */
		}
		if (orphan_goes(fd, mnt, sizeof(mnt))) {
			trust_empty_dir(fd);
			if (unlinkat(rootfd, e->d_name, AT_REMOVEDIR) == 0) {
				removed++;
				log_info("freed the cache state %s/%s: its daemon is gone and %s is no longer an "
					 "epochfs mount", root, e->d_name, mnt);
			}
		}
		close(lock);
		close(fd);
	}
	closedir(d);
	return removed;
}

void persist_default_root(char *buf, size_t len)
{
	snprintf(buf, len, "%s-%u", PERSIST_ROOT_PREFIX, (unsigned)geteuid());
}

static int adopt_into_cache(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v,
			    uint64_t off, size_t len, uint64_t xxh)
{
	return cache_adopt(arg, id, chunk, v, off, len, xxh);
}

int persist_adopt(struct persist *p, struct cache *c, persist_resolve_fn resolve, persist_path_fn path,
		  void *arg, unsigned threads)
{
	uint64_t used = 0;
	int err = persist_adopt_items(p, adopt_into_cache, c, resolve, path, arg, threads, &used);
	struct cache_persist_hooks h = { .ready = hook_ready, .cut = hook_cut, .arg = p };

	cache_adopt_done(c, used);
	if (p->recording)
		cache_set_persist_hooks(c, &h);
	return err;
}
