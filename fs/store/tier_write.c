/* tier_write.c - the SSD tier's admission and writes; see tier.h for the
 * contract, tier_int.h for what it shares with tier.c.
 *
 * A reader that brought an item the RAM cache refused claims room for it
 * here (tier_claim), fills the buffer it is given and hands it back
 * (tier_fill); the writer thread writes it, then publishes and records it.
 *
 * DESIGN
 * - Space: per directory, a bump pointer on 4 KiB boundaries up to its
 *   budget. Every 64 MiB the pointer crosses, the filesystem's free space
 *   is checked against the floor. Space of a dead item is not reused (the
 *   next mount does not move items on disk either; it shows in `used`).
 * - Writes: claims filled by readers queue to the writer thread, bounded
 *   (WRITE_QUEUE_MAX bytes: past it a claim is refused, so a slow disk
 *   never holds readers up or memory unbounded). The writer hashes, writes
 *   (pwrite, O_DIRECT where taken), then publishes READY and records.
 * - Health: once a second the writer stats each directory; one that is
 *   gone or replaced, or whose write failed, admits nothing more.
 * - The writer is a struct worker (util/worker.h) whose lock guards the
 *   queue; a stop lets it write what is queued first.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/tier_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/worker.h"

#define FLOOR_STEP (64ull << 20)        /* space checked against the floor this often */
#define WRITE_QUEUE_MAX (64ull << 20)   /* bytes claimed and not written yet, at most */

struct tier_claim {
	struct tier *t;
	uint64_t slot;
	struct tdir *d;
	uint64_t off;
	size_t len;
	void *buf;
	struct tier_claim *next;    /* the write queue */
};

static void dir_down(struct tier *t, struct tdir *d, const char *why)
{
	if (!__atomic_exchange_n(&d->down, 1, __ATOMIC_RELAXED)) {
		INC(t->st.dirs_down, 1);
		log_warn("SSD tier %s: %s; it admits nothing more (its items are still read while their "
			 "reads succeed)", d->path, why);
	}
}

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
	uint64_t key = tier_key(id, chunk), need = tier_round_up(len);
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
	uint64_t i = tier_slot(t, key);
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
	t->wq_bytes -= tier_round_up(cl->len);
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
	size_t want = tier_round_up(cl->len), done = 0;
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

int tier_writer_init(struct tier *t)
{
	int e;

	if ((e = worker_init(&t->w)) < 0)
		return e;
	if ((e = -pthread_cond_init(&t->wq_idle, NULL)) < 0) {
		worker_destroy(&t->w);
		return e;
	}
	return 0;
}

int tier_writer_start(struct tier *t)
{
	return worker_start(&t->w, 1, writer_main, t);
}

void tier_writer_stop(struct tier *t)
{
	worker_stop(&t->w);         /* the writer drains the queue first */
	worker_destroy(&t->w);
	pthread_cond_destroy(&t->wq_idle);
}

int tier_is_full(struct tier *t)
{
	int full = 1;

	pthread_mutex_lock(&t->lock);
	for (unsigned k = 0; k < t->ndirs; k++) {
		struct tdir *d = &t->dirs[k];
		if (!__atomic_load_n(&d->down, __ATOMIC_RELAXED) && d->used + tier_round_up(t->chunk) <= d->size)
			full = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return full;
}
