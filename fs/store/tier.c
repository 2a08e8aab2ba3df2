/* tier.c - the SSD tier; see tier.h for the contract.
 *
 * DESIGN
 * - Table: open addressing over struct titem (by value), sized for twice
 *   max_items, under one mutex. An entry is never removed: a dropped or
 *   stale one is DEAD and a new claim of its key takes the slot again.
 * - Space: per directory, a bump pointer on 4 KiB boundaries up to its
 *   budget. Every 64 MiB the pointer crosses, the filesystem's free space
 *   is checked against the floor. Space of a dead item is not reused (the
 *   next mount does not move items on disk either; it shows in `used`).
 * - Reads: one io_uring (depth 64) and its completion thread (util/uring.h).
 *   The buffer is the item rounded up to 4 KiB, aligned, read whole so its
 *   xxh3 can be checked (the ring's MIN is the item: its padding may be past
 *   the arena's end); the request's bytes are then copied out or handed over.
 * - Writes: claims filled by readers queue to the writer thread, bounded
 *   (WRITE_QUEUE_MAX bytes: past it a claim is refused, so a slow disk
 *   never holds readers up or memory unbounded). The writer hashes, writes
 *   (pwrite, O_DIRECT where taken), then publishes READY and records.
 * - Health: once a second the writer stats each directory; one that is
 *   gone or replaced, or whose write failed, admits nothing more.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "clock.h"
#include "log.h"
#include "tier.h"
#include "trust.h"
#include "uring.h"
#include "worker.h"

#define ALIGN 4096ull
#define FLOOR_STEP (64ull << 20)        /* space checked against the floor this often */
#define WRITE_QUEUE_MAX (64ull << 20)   /* bytes claimed and not written yet, at most */
#define RING_DEPTH 64u
#define RECENT 8                        /* items kept after their read, for the rest of a file */

enum { T_FREE = 0, T_WRITING, T_READY, T_DEAD };

struct titem {
	uint64_t key;
	struct index_version v;
	uint64_t off;
	uint64_t xxh;
	uint32_t len;
	uint8_t dir;
	uint8_t state;
};

struct tdir {
	char *path;
	struct persist *p;
	int fd;
	int direct;
	dev_t dev;
	ino_t ino;
	uint64_t size;              /* budget */
	uint64_t used;              /* bump pointer (table lock) */
	uint64_t checked;           /* used at the last floor check */
	uint64_t floor;             /* bytes its filesystem keeps free */
	int down;                   /* atomic: admits nothing (vanished, failed write, floor) */
};

struct tier_claim {
	struct tier *t;
	uint64_t slot;
	struct tdir *d;
	uint64_t off;
	size_t len;
	void *buf;
	struct tier_claim *next;    /* the write queue */
};

struct tread {
	struct uring_req u;         /* first (the ring hands it back): the item, read whole into u.buf */
	struct tier *t;
	uint64_t slot;
	struct titem it;            /* what was looked up */
	off_t item_off;             /* file offset of the item */
	off_t off;                  /* the request */
	size_t len;
	void *buf;                  /* the caller's, or NULL */
	source_done_fn done;
	void *arg;
};

/* An item just read and checked, kept for the next requests of the same
 * file: the kernel asks for a file larger than its request size (128 KiB
 * here) in several requests, and each would read the whole item again. */
struct recent {
	uint64_t key, off;
	uint8_t dir;
	uint32_t len;
	void *buf;                  /* NULL: empty */
	uint64_t used;              /* the clock of its last use */
};

struct tier {
	struct tdir dirs[TIER_MAX_DIRS];
	pthread_mutex_t recent_lock;
	struct recent recent[RECENT];
	uint64_t clock;
	unsigned ndirs;
	uint32_t chunk;
	pthread_mutex_t lock;       /* the table, the bump pointers */
	struct titem *slots;
	uint64_t mask;
	unsigned next_dir;          /* round-robin over directories with room */
	struct uring *ring;         /* the reads */
	struct worker w;            /* the writer; w.lock guards the write queue */
	pthread_cond_t wq_idle;     /* on w.lock: the queue ran empty */
	struct tier_claim *wq_head, *wq_tail;       /* w.lock */
	uint64_t wq_bytes;          /* w.lock */
	int writing;                /* w.lock: the writer holds a claim */
	struct tier_stats st;       /* atomic counters */
};

#define INC(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)

static uint64_t key_of(uint32_t id, uint32_t chunk)
{
	return (uint64_t)id << 32 | chunk;
}

/* The slot of KEY, or the free slot where it would go. Table lock held. */
static uint64_t find(struct tier *t, uint64_t key)
{
	uint64_t i = XXH3_64bits(&key, sizeof(key)) & t->mask;

	while (t->slots[i].state != T_FREE && t->slots[i].key != key)
		i = (i + 1) & t->mask;
	return i;
}

static uint64_t round_up(uint64_t n)
{
	return (n + ALIGN - 1) & ~(ALIGN - 1);
}

static void dir_down(struct tier *t, struct tdir *d, const char *why)
{
	if (!__atomic_exchange_n(&d->down, 1, __ATOMIC_RELAXED)) {
		INC(t->st.dirs_down, 1);
		log_warn("SSD tier %s: %s; it admits nothing more (its items are still read while their "
			 "reads succeed)", d->path, why);
	}
}

/* ---- adoption ---- */

struct adopt_arg {
	struct tier *t;
	unsigned dir;
};

static int adopt_item(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v, uint64_t off,
		      size_t len, uint64_t xxh)
{
	struct adopt_arg *a = arg;
	struct tier *t = a->t;
	uint64_t key = key_of(id, chunk);
	int ret = 0;

	if (off % ALIGN || len > UINT32_MAX)
		return -ERANGE;
	pthread_mutex_lock(&t->lock);
	uint64_t i = find(t, key);
	if (t->slots[i].state == T_READY) {
		ret = -EEXIST;      /* another directory has it */
	} else {
		t->slots[i] = (struct titem){ .key = key, .v = *v, .off = off, .xxh = xxh, .len = (uint32_t)len,
					      .dir = (uint8_t)a->dir, .state = T_READY };
		INC(t->st.items, 1);
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* ---- reads ---- */

/* Keeps R's checked item among the recent ones (taking its buffer). */
static void keep_recent(struct tier *t, struct tread *r)
{
	struct recent *victim = &t->recent[0];

	pthread_mutex_lock(&t->recent_lock);
	for (int i = 0; i < RECENT; i++) {
		struct recent *e = &t->recent[i];
		if (e->buf && e->key == r->it.key && e->off == r->it.off && e->dir == r->it.dir) {
			victim = e;         /* the same item, read twice at once */
			break;
		}
		if (!e->buf || e->used < victim->used)
			victim = e;
		if (!e->buf)
			break;
	}
	free(victim->buf);
	*victim = (struct recent){ .key = r->it.key, .off = r->it.off, .dir = r->it.dir, .len = r->it.len,
				   .buf = r->u.buf, .used = ++t->clock };
	r->u.buf = NULL;
	pthread_mutex_unlock(&t->recent_lock);
}

/* Copies [SKIP, SKIP+N) of item S from the recent ones into DST: 1, or 0
 * when it is not there. */
static int from_recent(struct tier *t, const struct titem *s, size_t skip, size_t n, void *dst)
{
	int found = 0;

	pthread_mutex_lock(&t->recent_lock);
	for (int i = 0; i < RECENT; i++) {
		struct recent *e = &t->recent[i];
		if (e->buf && e->key == s->key && e->off == s->off && e->dir == s->dir && e->len == s->len) {
			memcpy(dst, (char *)e->buf + skip, n);
			e->used = ++t->clock;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&t->recent_lock);
	return found;
}

/* Forgets the recent copy of an item that was dropped. */
static void forget_recent(struct tier *t, uint64_t key)
{
	pthread_mutex_lock(&t->recent_lock);
	for (int i = 0; i < RECENT; i++)
		if (t->recent[i].buf && t->recent[i].key == key) {
			free(t->recent[i].buf);
			t->recent[i].buf = NULL;
		}
	pthread_mutex_unlock(&t->recent_lock);
}

static void tread_end(struct tread *r, ssize_t res)
{
	struct tier *t = r->t;

	if (res < 0) {
		r->done(r->arg, -EAGAIN, NULL);     /* the next source answers */
	} else {
		size_t skip = (size_t)(r->off - r->item_off);
		size_t n = skip >= r->it.len ? 0 : r->it.len - skip < r->len ? r->it.len - skip : r->len;
		INC(t->st.hits, 1);
		INC(t->st.hit_bytes, n);
		if (r->buf) {
			memcpy(r->buf, (char *)r->u.buf + skip, n);
			r->done(r->arg, (ssize_t)n, r->buf);
		} else {
			r->done(r->arg, (ssize_t)n, (char *)r->u.buf + skip);
		}
		if (r->it.len > r->len)
			keep_recent(t, r);  /* the rest of the item is likely asked next */
	}
	free(r->u.buf);
	free(r);
}

/* Drops the item R read (unless it changed meanwhile). */
static void drop_read(struct tread *r)
{
	struct tier *t = r->t;

	pthread_mutex_lock(&t->lock);
	struct titem *s = &t->slots[r->slot];
	if (s->key == r->it.key && s->state == T_READY && s->off == r->it.off && s->dir == r->it.dir) {
		s->state = T_DEAD;
		__atomic_sub_fetch(&t->st.items, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&t->lock);
	forget_recent(t, r->it.key);
}

/* The end of a ring read (RES: the bytes read, or -errno), on the ring's
 * completion thread: checks the item and answers. */
static int ring_done(struct uring_req *u, ssize_t res)
{
	struct tread *r = (struct tread *)u;
	struct tier *t = r->t;

	if (res < 0 || (size_t)res < r->it.len) {
		INC(t->st.read_errors, 1);
		log_warn("SSD tier %s: a read failed (%s); the item is dropped, read from the next source",
			 t->dirs[r->it.dir].path, res < 0 ? strerror((int)-res) : "short");
		drop_read(r);
		tread_end(r, -EIO);
	} else if (XXH3_64bits(r->u.buf, r->it.len) != r->it.xxh) {
		INC(t->st.corrupt, 1);
		log_warn("SSD tier %s: an item failed its checksum; dropped, read from the next source",
			 t->dirs[r->it.dir].path);
		drop_read(r);
		tread_end(r, -EBADMSG);
	} else {
		tread_end(r, 0);
	}
	return 0;
}

void tier_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf, source_done_fn done,
	       void *arg)
{
	struct tier *t = ctx;
	uint64_t key = key_of(it->id, it->chunk);
	struct tread *r;

	pthread_mutex_lock(&t->lock);
	uint64_t i = find(t, key);
	struct titem s = t->slots[i];
	if (s.state == T_READY && !index_version_eq(&s.v, &it->v)) {
		t->slots[i].state = T_DEAD;         /* the file changed: never served */
		__atomic_sub_fetch(&t->st.items, 1, __ATOMIC_RELAXED);
		INC(t->st.stale, 1);
		s.state = T_DEAD;
	}
	pthread_mutex_unlock(&t->lock);
	if (s.state != T_READY) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	size_t skip = (size_t)(off - (off_t)it->chunk * t->chunk);
	if (skip < s.len) {
		size_t n = s.len - skip < len ? s.len - skip : len;
		void *dst = buf ? buf : malloc(n ? n : 1);
		if (dst && from_recent(t, &s, skip, n, dst)) {
			INC(t->st.hits, 1);
			INC(t->st.hit_bytes, n);
			done(arg, (ssize_t)n, dst);
			if (!buf)
				free(dst);
			return;
		}
		if (!buf)
			free(dst);
	}
	if (!(r = calloc(1, sizeof(*r)))) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	*r = (struct tread){ .t = t, .slot = i, .it = s, .item_off = (off_t)it->chunk * t->chunk, .off = off,
			     .len = len, .buf = buf, .done = done, .arg = arg };
	r->u = (struct uring_req){ .fd = t->dirs[s.dir].fd, .len = round_up(s.len), .min = s.len,
				   .off = (off_t)s.off, .done = ring_done };
	if (posix_memalign(&r->u.buf, ALIGN, r->u.len)) {
		free(r);
		done(arg, -EAGAIN, NULL);
		return;
	}
	uring_read(t->ring, &r->u);
}

int tier_holds(struct tier *t, uint32_t id, uint32_t chunk, const struct index_version *v)
{
	pthread_mutex_lock(&t->lock);
	struct titem *s = &t->slots[find(t, key_of(id, chunk))];
	int yes = s->state == T_READY && index_version_eq(&s->v, v);
	pthread_mutex_unlock(&t->lock);
	return yes;
}

/* ---- admission and writes ---- */

/* Whether D's filesystem keeps its floor with STEP more bytes. */
static int above_floor(struct tdir *d, uint64_t step)
{
	struct statvfs sv;

	if (fstatvfs(d->fd, &sv) < 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize >= d->floor + step;
}

struct tier_claim *tier_claim(struct tier *t, uint32_t id, uint32_t chunk, const struct index_version *v,
			      size_t len, void **buf, int *held_out)
{
	uint64_t key = key_of(id, chunk), need = round_up(len);
	struct tier_claim *cl = NULL;
	struct tdir *d = NULL;
	int held = 0;

	if (!len || len > UINT32_MAX)
		return NULL;
	pthread_mutex_lock(&t->w.lock);
	int busy = t->wq_bytes + need > WRITE_QUEUE_MAX;
	if (!busy)
		t->wq_bytes += need;        /* given back if no claim is made */
	pthread_mutex_unlock(&t->w.lock);
	if (busy) {
		INC(t->st.full, 1);
		return NULL;
	}
	pthread_mutex_lock(&t->lock);
	uint64_t i = find(t, key);
	struct titem *s = &t->slots[i];
	if (s->state == T_WRITING || (s->state == T_READY && index_version_eq(&s->v, v))) {
		held = 1;
		goto out;
	}
	for (unsigned k = 0; k < t->ndirs; k++) {
		struct tdir *c = &t->dirs[(t->next_dir + k) % t->ndirs];
		if (__atomic_load_n(&c->down, __ATOMIC_RELAXED) || c->used + need > c->size)
			continue;
		if (c->used + need > c->checked + FLOOR_STEP || c->used == 0) {
			uint64_t step = c->size - c->used < FLOOR_STEP ? c->size - c->used : FLOOR_STEP;
			if (!above_floor(c, step)) {
				dir_down(t, c, "its filesystem reached the free-space floor");
				continue;
			}
			c->checked = c->used;
		}
		d = c;
		t->next_dir = (t->next_dir + k + 1) % t->ndirs;
		break;
	}
	if (!d)
		goto out;
	cl = calloc(1, sizeof(*cl));
	if (!cl || posix_memalign(&cl->buf, ALIGN, need)) {
		free(cl);
		cl = NULL;
		goto out;
	}
	if (s->state == T_READY)
		__atomic_sub_fetch(&t->st.items, 1, __ATOMIC_RELAXED);      /* a stale one replaced */
	*s = (struct titem){ .key = key, .v = *v, .off = d->used, .len = (uint32_t)len,
			     .dir = (uint8_t)(d - t->dirs), .state = T_WRITING };
	cl->t = t;
	cl->slot = i;
	cl->d = d;
	cl->off = d->used;
	cl->len = len;
	d->used += need;
	*buf = cl->buf;
out:
	pthread_mutex_unlock(&t->lock);
	if (!cl) {
		pthread_mutex_lock(&t->w.lock);
		t->wq_bytes -= need;
		pthread_mutex_unlock(&t->w.lock);
		if (!d && !held)
			INC(t->st.full, 1);
	}
	if (held_out)
		*held_out = held;
	return cl;
}

static void claim_end(struct tier *t, struct tier_claim *cl, int state)
{
	pthread_mutex_lock(&t->lock);
	t->slots[cl->slot].state = (uint8_t)state;
	if (state == T_READY)
		INC(t->st.items, 1);
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_lock(&t->w.lock);
	t->wq_bytes -= round_up(cl->len);
	pthread_mutex_unlock(&t->w.lock);
	free(cl->buf);
	free(cl);
}

void tier_fill(struct tier *t, struct tier_claim *cl, int ok)
{
	if (!ok) {
		claim_end(t, cl, T_DEAD);
		return;
	}
	pthread_mutex_lock(&t->w.lock);
	if (t->wq_tail)
		t->wq_tail->next = cl;
	else
		t->wq_head = cl;
	t->wq_tail = cl;
	worker_wake(&t->w);
	pthread_mutex_unlock(&t->w.lock);
}

static void write_one(struct tier *t, struct tier_claim *cl)
{
	struct tdir *d = cl->d;
	size_t want = round_up(cl->len), done = 0;
	uint64_t xxh = XXH3_64bits(cl->buf, cl->len);

	memset((char *)cl->buf + cl->len, 0, want - cl->len);
	while (done < want) {
		ssize_t n = pwrite(d->fd, (char *)cl->buf + done, want - done, (off_t)(cl->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			INC(t->st.write_errors, 1);
			dir_down(t, d, e == EROFS ? "its filesystem turned read-only" : e == ENOSPC ? "its disk is full"
				 : "a write failed");
			claim_end(t, cl, T_DEAD);
			return;
		}
		done += (size_t)n;
	}
	pthread_mutex_lock(&t->lock);
	t->slots[cl->slot].xxh = xxh;
	pthread_mutex_unlock(&t->lock);
	INC(t->st.admitted, 1);
	INC(t->st.admitted_bytes, cl->len);
	if (d->p) {
		struct titem s;
		pthread_mutex_lock(&t->lock);
		s = t->slots[cl->slot];
		pthread_mutex_unlock(&t->lock);
		persist_record(d->p, (uint32_t)(s.key >> 32), (uint32_t)s.key, &s.v, cl->off, cl->len, xxh);
	}
	claim_end(t, cl, T_READY);
}

/* Whether D's directory is still the one opened. */
static void check_dir(struct tier *t, struct tdir *d)
{
	struct stat sb;

	if (__atomic_load_n(&d->down, __ATOMIC_RELAXED))
		return;
	if (stat(d->path, &sb) < 0 || sb.st_dev != d->dev || sb.st_ino != d->ino)
		dir_down(t, d, "its directory vanished or was replaced");
}

/* Writes the queue out and checks the directories once a second; a stop
 * ends it once the queue is empty. */
static void *writer_main(void *arg)
{
	struct tier *t = arg;
	double checked = -1;        /* when the directories were checked: never */

	pthread_mutex_lock(&t->w.lock);
	for (;;) {
		while (!t->wq_head && worker_wait(&t->w, 1.0))
			if (clock_now() - checked >= 1.0)
				break;
		if (clock_now() - checked >= 1.0) {
			checked = clock_now();
			pthread_mutex_unlock(&t->w.lock);
			for (unsigned k = 0; k < t->ndirs; k++)
				check_dir(t, &t->dirs[k]);
			pthread_mutex_lock(&t->w.lock);
		}
		if (!t->wq_head) {
			if (!worker_running(&t->w))
				break;
			continue;
		}
		struct tier_claim *cl = t->wq_head;
		t->wq_head = cl->next;
		if (!t->wq_head)
			t->wq_tail = NULL;
		t->writing = 1;
		pthread_mutex_unlock(&t->w.lock);
		write_one(t, cl);
		pthread_mutex_lock(&t->w.lock);
		t->writing = 0;
		if (!t->wq_head)
			pthread_cond_broadcast(&t->wq_idle);
	}
	pthread_mutex_unlock(&t->w.lock);
	return NULL;
}

void tier_sync(struct tier *t)
{
	pthread_mutex_lock(&t->w.lock);
	while (t->wq_head || t->writing)
		pthread_cond_wait(&t->wq_idle, &t->w.lock);
	pthread_mutex_unlock(&t->w.lock);
}

/* ---- set-up ---- */

static int open_dir(struct tier *t, const struct tier_opts *o, unsigned k, persist_resolve_fn resolve,
		    persist_path_fn path, void *arg, char *err, size_t errlen)
{
	struct tdir *d = &t->dirs[k];
	char sub[4200], why[400];
	struct statvfs sv;
	struct stat sb;
	int e, fd;

	d->fd = -1;
	d->path = strdup(o->dirs[k]);
	if (!d->path)
		return -ENOMEM;
	/* DIR itself may be shared (/tmp, a sticky scratch disk): only what
	 * leads to it and our own subdirectory must be out of others' reach. */
	fd = trust_dir(d->path, TRUST_CREATE, NULL, why, sizeof(why));
	if (fd < 0) {
		snprintf(err, errlen, "--cache-dir %s: not trusted: %s", d->path, why);
		return fd;
	}
	if (fstat(fd, &sb) < 0 || fstatvfs(fd, &sv) < 0) {
		e = -errno;
		close(fd);
		snprintf(err, errlen, "--cache-dir %s: %s", d->path, strerror(-e));
		return e;
	}
	d->dev = sb.st_dev;
	d->ino = sb.st_ino;
	/* The tier's own data is room it has, not room taken: sized from the
	 * free space alone, a restart's tier came out smaller than what it
	 * held and adoption cut it (67 of 351 items kept). */
	uint64_t own = 0;
	struct stat ab;
	if (fstatat(fd, "epochfs-tier/arena", &ab, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(ab.st_mode) &&
	    ab.st_uid == geteuid())
		own = (uint64_t)ab.st_blocks * 512;
	close(fd);
	uint64_t fs_size = (uint64_t)sv.f_blocks * sv.f_frsize, avail = (uint64_t)sv.f_bavail * sv.f_frsize + own;
	d->floor = fs_size / 100 * TIER_FLOOR_PERCENT;
	d->size = o->sizes[k];
	int dflt = !d->size;
	if (dflt) {
		/* What the data needs, within what the disk has above its floor. */
		d->size = avail > d->floor ? avail - d->floor : 0;
		if (o->need && d->size > o->need)
			d->size = o->need;
		d->size &= ~(ALIGN - 1);
		if (!d->size) {
			snprintf(err, errlen, "--cache-dir %s: its filesystem has no room above the %d%% floor",
				 d->path, TIER_FLOOR_PERCENT);
			return -ENOSPC;
		}
	} else if (d->size > fs_size - d->floor) {
		snprintf(err, errlen, "--cache-dir %s: --cache-dir-size %llu is more than its filesystem can "
			 "hold above the %d%% floor (%llu)", d->path, (unsigned long long)d->size, TIER_FLOOR_PERCENT,
			 (unsigned long long)(fs_size - d->floor));
		return -ENOSPC;
	}
	snprintf(sub, sizeof(sub), "%s/epochfs-tier", d->path);
	struct persist_opts po = { .dir = sub, .source = o->source, .mountpoint = o->mountpoint,
				   .chunk = o->chunk, .capacity = d->size, .what = "--cache-dir",
				   .keep_held = dflt, .manifest_id = o->manifest_id };
	if ((e = persist_open(&po, &d->p, err, errlen)) < 0)
		return e;
	d->fd = o->buffered ? -1 : persist_reopen_arena(d->p, O_RDWR | O_DIRECT);
	d->direct = d->fd >= 0;
	if (d->fd < 0 && (o->buffered || d->fd == -EINVAL))
		d->fd = persist_reopen_arena(d->p, O_RDWR);     /* tmpfs and others: no O_DIRECT */
	if (d->fd < 0) {
		e = d->fd;
		snprintf(err, errlen, "--cache-dir %s: %s/arena: %s", d->path, sub, strerror(-e));
		return e;
	}
	struct adopt_arg aa = { .t = t, .dir = k };
	uint64_t used = 0;
	if (o->persist)
		persist_adopt_items(d->p, adopt_item, &aa, resolve, path, arg, 1, &used);
	else if ((e = persist_clear(d->p)) < 0) {      /* the lock stays held */
		snprintf(err, errlen, "--cache-dir %s: cannot empty it: %s", d->path, strerror(-e));
		return e;
	}
	if (persist_capacity(d->p) > d->size)
		d->size = persist_capacity(d->p);
	d->used = round_up(used);
	d->checked = d->used;
	return 0;
}

int tier_open(const struct tier_opts *o, persist_resolve_fn resolve, persist_path_fn path, void *arg,
	      struct tier **out, char *err, size_t errlen)
{
	struct tier *t = calloc(1, sizeof(*t));
	uint64_t nslots = 16;
	int e;

	if (!t)
		return -ENOMEM;
	if (!o->ndirs || o->ndirs > TIER_MAX_DIRS) {
		free(t);
		snprintf(err, errlen, "--cache-dir: 1 to %d directories", TIER_MAX_DIRS);
		return -EINVAL;
	}
	while (nslots < o->max_items * 2)
		nslots <<= 1;
	t->mask = nslots - 1;
	t->chunk = o->chunk;
	t->slots = calloc(nslots, sizeof(*t->slots));
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->recent_lock, NULL);
	worker_init(&t->w);
	pthread_cond_init(&t->wq_idle, NULL);
	if (!t->slots) {
		free(t);
		return -ENOMEM;
	}
	for (unsigned k = 0; k < o->ndirs; k++) {
		t->ndirs = k + 1;
		if ((e = open_dir(t, o, k, resolve, path, arg, err, errlen)) < 0)
			goto fail;
	}
	if ((e = uring_new(RING_DEPTH, &t->ring)) < 0) {
		snprintf(err, errlen, "SSD tier: io_uring: %s", strerror(-e));
		goto fail;
	}
	if ((e = worker_start(&t->w, 1, writer_main, t)) < 0) {
		uring_free(t->ring);
		goto fail;
	}
	t->st.dirs = t->ndirs;
	for (unsigned k = 0; k < t->ndirs; k++) {
		struct persist_stats ps = { 0 };
		if (t->dirs[k].p)
			persist_get_stats(t->dirs[k].p, &ps);
		t->st.adopted += ps.adopted;
		t->st.adopted_bytes += ps.adopted_bytes;
		t->st.dropped += ps.records - ps.adopted;
		if (!t->dirs[k].direct && !o->buffered)
			log_info("SSD tier %s: no O_DIRECT on its filesystem; reads go through its page cache",
				 t->dirs[k].path);
	}
	*out = t;
	return 0;
fail:
	for (unsigned k = 0; k < t->ndirs; k++) {
		if (t->dirs[k].fd >= 0)
			close(t->dirs[k].fd);
		persist_close(t->dirs[k].p);
		free(t->dirs[k].path);
	}
	worker_destroy(&t->w);
	pthread_cond_destroy(&t->wq_idle);
	free(t->slots);
	free(t);
	return e;
}

void tier_free(struct tier *t)
{
	if (!t)
		return;
	worker_stop(&t->w);         /* the writer drains the queue first */
	uring_free(t->ring);        /* and the reads in flight end */
	for (unsigned k = 0; k < t->ndirs; k++) {
		close(t->dirs[k].fd);
		persist_close(t->dirs[k].p);
		free(t->dirs[k].path);
	}
	for (int i = 0; i < RECENT; i++)
		free(t->recent[i].buf);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->recent_lock);
	worker_destroy(&t->w);
	pthread_cond_destroy(&t->wq_idle);
	free(t->slots);
	free(t);
}

int tier_is_full(struct tier *t)
{
	int full = 1;

	pthread_mutex_lock(&t->lock);
	for (unsigned k = 0; k < t->ndirs; k++) {
		struct tdir *d = &t->dirs[k];
		if (!__atomic_load_n(&d->down, __ATOMIC_RELAXED) && d->used + round_up(t->chunk) <= d->size)
			full = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return full;
}

void tier_get_stats(struct tier *t, struct tier_stats *s)
{
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
	memset(s, 0, sizeof(*s));
	s->dirs = t->ndirs;
	s->direct = 1;
	pthread_mutex_lock(&t->lock);
	for (unsigned k = 0; k < t->ndirs; k++) {
		s->capacity += t->dirs[k].size;
		s->used += t->dirs[k].used;
		s->direct &= t->dirs[k].direct;
	}
	pthread_mutex_unlock(&t->lock);
	s->items = LD(t->st.items);
	s->hits = LD(t->st.hits);
	s->hit_bytes = LD(t->st.hit_bytes);
	s->admitted = LD(t->st.admitted);
	s->admitted_bytes = LD(t->st.admitted_bytes);
	s->full = LD(t->st.full);
	s->read_errors = LD(t->st.read_errors);
	s->write_errors = LD(t->st.write_errors);
	s->corrupt = LD(t->st.corrupt);
	s->stale = LD(t->st.stale);
	s->adopted = t->st.adopted;
	s->adopted_bytes = t->st.adopted_bytes;
	s->dropped = t->st.dropped;
	s->dirs_down = LD(t->st.dirs_down);
#undef LD
}
