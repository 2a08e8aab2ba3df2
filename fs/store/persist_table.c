/* persist_table.c - the cache state's table: its format, the records
 * written as items are made ready or memory is cut, and adoption after a
 * restart; see persist.h for the contract, persist_int.h for what it
 * shares with persist.c (the directory around it).
 *
 * DESIGN
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
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/persist_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/trust.h"

#define HDR_MAGIC "EPFSSTAT"
#define REC_MAGIC 0x52534645u          /* "EFSR" */
#define REC_ITEM 1u
#define REC_CUT 2u
#define PAGE 4096ull
#define GRAIN 64ull                     /* the cache's arena alignment */

struct rec {
	uint32_t magic;
	uint16_t kind, path_len;
	uint32_t chunk, pad;
	uint64_t off, len;
	struct index_version v;
	uint64_t xxh;                   /* of the item's bytes */
};

static uint64_t hdr_sum(const struct persist_hdr *h)
{
	return XXH3_64bits(h, offsetof(struct persist_hdr, xxh));
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
		if (p->tablefd >= 0 && ftruncate(p->tablefd, (off_t)sizeof(struct persist_hdr)) < 0)
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
	struct persist_hdr h;
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

int persist_table_open(struct persist *p, const struct stat *src, const char *source, uint64_t capacity,
		       uint64_t manifest_id)
{
	memcpy(p->hdr.magic, HDR_MAGIC, 8);
	p->hdr.format = PERSIST_FORMAT;
	p->hdr.chunk = p->chunk;
	p->hdr.capacity = capacity;
	p->hdr.src_dev = (uint64_t)src->st_dev;
	p->hdr.src_ino = (uint64_t)src->st_ino;
	p->hdr.src_hash = XXH3_64bits(source, strlen(source));
	p->hdr.created = (uint64_t)time(NULL);
	p->hdr.manifest = manifest_id;
	p->hdr.xxh = hdr_sum(&p->hdr);
	return check_table(p);
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
	size_t pos = sizeof(struct persist_hdr), n = 0, cap = 0;
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
		if (len_arena && fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size > sizeof(struct persist_hdr)) {
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
