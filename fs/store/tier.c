/* tier.c - the SSD tier: its table, adoption, reads and set-up; see tier.h
 * for the contract. Admission, space and the writer are tier_write.c's
 * (tier_int.h holds what the two share).
 *
 * DESIGN
 * - Table: open addressing over struct titem (by value), sized for twice
 *   max_items, under one mutex. An entry is never removed: a dropped or
 *   stale one is DEAD and a new claim of its key takes the slot again.
 * - Reads: one io_uring (depth 64) and its completion thread (util/uring.h).
 *   The buffer is the item rounded up to 4 KiB, aligned, read whole so its
 *   xxh3 can be checked (the ring's MIN is the item: its padding may be past
 *   the arena's end); the request's bytes are then copied out or handed over.
 * - Recent items: the last RECENT items read stay in memory, so the rest of
 *   a file the kernel asks for in several requests is not read again.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/tier_int.h"
#include "util/log.h"
#include "util/trust.h"
#include "util/uring.h"

#define RING_DEPTH 64u

/* A read of one item on the ring, for one request. */
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

/* ---- the table ---- */

uint64_t tier_slot(struct tier *t, uint64_t key)
{
	uint64_t i = XXH3_64bits(&key, sizeof(key)) & t->mask;

	while (t->slots[i].state != T_FREE && t->slots[i].key != key)
		i = (i + 1) & t->mask;
	return i;
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
	uint64_t key = tier_key(id, chunk);
	int ret = 0;

	if (off % ALIGN || len > UINT32_MAX)
		return -ERANGE;
	pthread_mutex_lock(&t->lock);
	uint64_t i = tier_slot(t, key);
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
	uint64_t key = tier_key(it->id, it->chunk);
	struct tread *r;

	pthread_mutex_lock(&t->lock);
	uint64_t i = tier_slot(t, key);
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
	r->u = (struct uring_req){ .fd = t->dirs[s.dir].fd, .len = tier_round_up(s.len), .min = s.len,
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
	struct titem *s = &t->slots[tier_slot(t, tier_key(id, chunk))];
	int yes = s->state == T_READY && index_version_eq(&s->v, v);
	pthread_mutex_unlock(&t->lock);
	return yes;
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
	d->used = tier_round_up(used);
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
	if (!t->slots) {
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->recent_lock, NULL);
	for (unsigned k = 0; k < o->ndirs; k++) {
		t->ndirs = k + 1;
		if ((e = open_dir(t, o, k, resolve, path, arg, err, errlen)) < 0)
			goto fail;
	}
	if ((e = tier_writer_init(t)) < 0)
		goto fail;
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
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->recent_lock);
	free(t->slots);
	free(t);
	return e;
}

int tier_start(struct tier *t, char *err, size_t errlen)
{
	int e;

	if ((e = uring_new(RING_DEPTH, &t->ring)) < 0) {
		snprintf(err, errlen, "SSD tier: io_uring: %s", strerror(-e));
		return e;
	}
	if ((e = tier_writer_start(t)) < 0) {
		snprintf(err, errlen, "SSD tier: cannot start its writer: %s", strerror(-e));
		uring_free(t->ring);
		t->ring = NULL;
		return e;
	}
	return 0;
}

void tier_free(struct tier *t)
{
	if (!t)
		return;
	tier_writer_stop(t);        /* it writes what is queued first */
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
	free(t->slots);
	free(t);
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
