/* read.c - the read path's entry points: a reader's request (revalidated,
 * clamped to the file, split per cache item), and reads by path for prep
 * workers and peers. Each item goes its way through plan.c.
 *
 *   core_read_data(id, gen, off, len)
 *    ├─ one item?  plan_read: RAM hit, load, wait, staged, tier, sources (plan.h)
 *    └─ several?   read_multi: one part per item, assembled, answered once
 *
 * DESIGN: a request is counted (reads, read_bytes, errors) once, when it
 * is answered (read_reply), however many items it spanned; a stale read
 * refreshes its index entry after the reply, so the kernel's notice of the
 * change never waits on a request in flight.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core_int.h"
#include "core/plan.h"
#include "store/cache.h"
#include "store/index.h"
#include "util/syncwait.h"

void read_reply(struct core *c, uint32_t id, ssize_t res, const void *buf, core_read_fn done, void *arg)
{
	if (res >= 0) {
		stats_add(&c->stats, STAT_READS, 1);
		stats_add(&c->stats, STAT_READ_BYTES, (uint64_t)res);
	} else {
		stats_add(&c->stats, res == -ESTALE ? STAT_STALE_READS : STAT_READ_ERRORS, 1);
	}
	done(arg, res, buf);
	/* After the reply: the refresh makes the kernel drop this file's
	 * caches (through the adapter's notifier). */
	if (res == -ESTALE)
		index_refresh(c->ix, id, 0);
}

/* ---- several items ---- */

/* A request that spans several cache items (a read larger than a chunk, or
 * one that crosses a chunk boundary): one part per item, each going the
 * single-item way, assembled in BUF and answered once. One copy more than a
 * single-item hit, and only on this path. */
struct multi {
	struct core *c;
	uint32_t id;
	size_t len;
	int pending;                /* atomic: parts not done, +1 while submitting */
	int err;                    /* atomic: the first part's error, or 0 */
	core_read_fn done;
	void *arg;
	char *buf;
};

struct part {
	struct multi *m;
	size_t at;                  /* offset in m->buf */
	size_t want;
};

static void multi_put(struct multi *m)
{
	if (__atomic_sub_fetch(&m->pending, 1, __ATOMIC_ACQ_REL))
		return;
	read_reply(m->c, m->id, m->err ? m->err : (ssize_t)m->len, m->buf, m->done, m->arg);
	free(m);
}

static void part_done(void *arg, ssize_t res, const void *buf)
{
	struct part *p = arg;
	struct multi *m = p->m;
	int none = 0;

	/* Every part lies inside the file's size, so a short part means the
	 * file changed under the read. */
	if (res >= 0 && (size_t)res != p->want)
		res = -ESTALE;
	if (res < 0)
		__atomic_compare_exchange_n(&m->err, &none, (int)res, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	else
		memcpy(m->buf + p->at, buf, (size_t)res);
	multi_put(m);
}

static void read_multi(struct core *c, uint32_t id, const struct index_attr *a, off_t off,
		       size_t len, core_read_fn done, void *arg)
{
	uint32_t first, n = cache_span((uint64_t)off, len, c->chunk, &first);
	struct multi *m = malloc(sizeof(*m) + n * sizeof(struct part) + len);
	struct part *parts;

	if (!m) {
		read_reply(c, id, -ENOMEM, NULL, done, arg);
		return;
	}
	parts = (struct part *)(m + 1);
	*m = (struct multi){ .c = c, .id = id, .len = len, .pending = (int)n + 1,
			     .done = done, .arg = arg, .buf = (char *)(parts + n) };
	for (uint32_t i = 0; i < n; i++) {
		off_t lo = i ? (off_t)(first + i) * c->chunk : off;
		off_t hi = (off_t)(first + i + 1) * c->chunk;
		if (hi > off + (off_t)len)
			hi = off + (off_t)len;
		parts[i] = (struct part){ .m = m, .at = (size_t)(lo - off), .want = (size_t)(hi - lo) };
		plan_read(c, id, a, lo, (size_t)(hi - lo), RK_PART, NULL, part_done, &parts[i]);
	}
	multi_put(m);
}

void core_read_data(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len, int kernel,
		    core_read_fn done, void *arg)
{
	struct index_attr a;

	/* A coarse clock read on the hit path; a stat when the check is due. */
	index_revalidate(c->ix, id, NULL);
	if (index_get(c->ix, id, &a) < 0 || !S_ISREG(a.mode)) {
		stats_add(&c->stats, STAT_READ_ERRORS, 1);
		done(arg, -EIO, NULL);
		return;
	}
	if (a.gen != gen || a.gone) {
		stats_add(&c->stats, STAT_STALE_READS, 1);
		done(arg, -ESTALE, NULL);
		return;
	}
	if (off < 0 || (uint64_t)off >= a.v.size) {
		stats_add(&c->stats, STAT_READS, 1);
		done(arg, 0, NULL);
		return;
	}
	if (len > a.v.size - (uint64_t)off)
		len = (size_t)(a.v.size - (uint64_t)off);
	/* Read to its end: the kernel's copy of the file may go (the adapter
	 * drops it a moment later, once its reader is done with it). */
	if (kernel && c->copy_fn && (uint64_t)off + len >= a.v.size &&
	    __atomic_load_n(&c->drop_copies, __ATOMIC_RELAXED)) {
		stats_add(&c->stats, STAT_COPIES_DROPPED, 1);
		c->copy_fn(c->copy_arg, core_data_node(id, a.gen));
	}
	/* Whatever keeps items (RAM, tier, staging) answers a request per item:
	 * one item's bytes cannot answer past its end (a staged or tier item
	 * did, with no RAM cache: a short read, which the kernel takes for the
	 * end of the file; test_readpath found it). */
	if ((c->cache || c->tier || c->staging) && cache_span((uint64_t)off, len, c->chunk, NULL) > 1)
		read_multi(c, id, &a, off, len, done, arg);
	else
		plan_read(c, id, &a, off, len, RK_REQUEST, NULL, done, arg);
}

/* ---- reads by path: prep workers, peers ---- */

ssize_t core_read_file(struct core *c, const char *rel, void **buf, size_t *cap)
{
	struct index_attr a;
	size_t got = 0;
	int err = core_lookup_rel(c, rel, strlen(rel), &a);

	if (err < 0)
		return err;
	if (!S_ISREG(a.mode))
		return S_ISDIR(a.mode) ? -EISDIR : -ENOENT;
	if (a.v.size + 1 > *cap) {
		void *q = realloc(*buf, a.v.size + 1);
		if (!q)
			return -ENOMEM;
		*buf = q;
		*cap = a.v.size + 1;
	}
	while (got < a.v.size) {
		struct sync_wait w = SYNC_WAIT_INIT((char *)*buf + got);
		size_t want = a.v.size - got < (8u << 20) ? a.v.size - got : (8u << 20);
		core_read_data(c, a.id, a.gen, (off_t)got, want, 0, sync_wait_done, &w);
		ssize_t n = sync_wait(&w);
		if (n < 0)
			return n;
		if (n == 0)
			break;              /* shrank under us: the version check says why next time */
		got += (size_t)n;
	}
	return (ssize_t)got;
}

void core_read_peer(struct core *c, const char *rel, uint64_t size, int64_t mtime_ns, off_t off,
		    size_t len, core_read_fn done, void *arg)
{
	struct index_attr a;
	int err = core_lookup_rel(c, rel, strlen(rel), &a);

	if (err < 0 || !S_ISREG(a.mode)) {
		done(arg, err < 0 ? err : -ENOENT, NULL);
		return;
	}
	if (a.v.size != size || a.v.mtime_ns != mtime_ns) {
		/* The asker may have seen a change we have not: look again. */
		index_refresh(c->ix, a.id, 0);
		if (index_get(c->ix, a.id, &a) < 0 || a.gone || a.v.size != size ||
		    a.v.mtime_ns != mtime_ns) {
			done(arg, -ESTALE, NULL);
			return;
		}
	}
	if (off < 0 || (uint64_t)off >= a.v.size) {
		done(arg, 0, NULL);
		return;
	}
	if (len > a.v.size - (uint64_t)off)
		len = (size_t)(a.v.size - (uint64_t)off);
	if (cache_span((uint64_t)off, len, c->chunk, NULL) > 1) {
		done(arg, -EINVAL, NULL);
		return;
	}
	plan_read(c, a.id, &a, off, len, RK_PEER, rel, done, arg);
}
