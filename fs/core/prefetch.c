/* prefetch.c - order-aware prefetch; see prefetch.h (and docs/prefetch.md).
 *
 * DESIGN
 * - A stream is the order a job wrote: index ids, in order (4 bytes a file),
 *   a bit per place set once a read of it was seen, a head (one past the
 *   furthest place seen read) and an issue point (the next place to fetch).
 * - Progress comes from the reads that reach the daemon, not from the job:
 *   only reads the RAM cache does not answer are looked at (the hit path
 *   stays free of locks), which is all the prefetcher needs, since it
 *   fetches exactly those files. A read is matched near the stream's last
 *   match first, then from LAG places behind its head to SEARCH past it:
 *   DataLoader workers read a little out of order, and a stray reader
 *   costs a bounded scan.
 * - The issue point walks the order place by place and does not jump to
 *   the head: with several workers, the head is the fastest one's, and the
 *   places behind it that the others have not read yet are the next ones
 *   needed. Places seen read are skipped; places more than LAG behind the
 *   head are given up (their readers went past them).
 * - The thread sleeps until a batch of work is possible (room for
 *   WAKE_FILES files in the window, the budget and the in-flight bound),
 *   not at every read: a wake-up costs tens of microseconds here, and the
 *   daemon's CPU is the job's (2 cores, docs/prefetch.md).
 * - The kernel probe (is the file cached above the mount?) costs a FUSE
 *   message per file; when the last PROBE_SPAN probes found nothing cached,
 *   only one file in PROBE_SAMPLE is probed until one is found again.
 * - Where fetched bytes go: the read path decides, as for a miss: the RAM
 *   cache when it admits the item (budget left, our item), else staging.
 *   Staging is a hash table of (id, chunk) entries, each a malloc'd copy of
 *   one item at one version, freed when every byte was served (a training
 *   read takes a file whole), or when its stream's head passed it by LAG
 *   places (wasted), or with its stream.
 * - One mutex for streams and staging: it is taken per miss (a few
 *   thousand a second), per fetch issued and landed, never on a hit and
 *   never while reading.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core_int.h"
#include "log.h"
#include "prefetch.h"

#define SEARCH 4096u                /* places past the head a read is looked for */
#define NEAR 64u                    /* places around the last match looked at first */
#define LAG 4096u                   /* places behind the head a read is looked for, and a
				     * staged item waits (a loader's spread: workers x
				     * batches in flight x batch size) */
#define WAKE_FILES 8u               /* the thread wakes for this much work at once */
#define PROBE_SPAN 128u             /* probes without a cached file before sampling */
#define PROBE_SAMPLE 16u            /* then one file in this many is probed */
#define STAGE_SLOTS 16384u          /* hash table of staged items (power of two) */
#define LINE_MAX_BYTES 4096u
#define STATUS_BYTES 1024

struct stream {
	int used;
	uint16_t gen;               /* bumped when the slot is reused: old nodes go stale */
	char name[65];
	uint32_t *ids;              /* the order */
	uint8_t *seen;              /* a bit per place: a read of it was seen */
	uint32_t n, cap;
	uint32_t head;              /* one past the furthest place seen read */
	uint32_t last;              /* the place of the last read matched */
	uint32_t issue;             /* next place to fetch */
	uint64_t unknown;           /* paths of this order no indexed file has */
	char part[LINE_MAX_BYTES];  /* a line cut by the end of a write */
	size_t part_len;
	size_t text_len;            /* bytes written to this order */
	double active;              /* last write or matched read */
	uint64_t epoch;             /* orders written (a new one each truncate / offset 0) */
	double wait_s, run_s;       /* the stream's last "#wait" report (cumulative) */
};

enum { ST_LOADING = 1, ST_READY, ST_DEAD };

struct staged {
	struct staged *next;        /* hash chain */
	uint32_t id, chunk;
	struct index_version v;
	int state;
	unsigned pins;              /* reads copying out of it */
	size_t len, served;
	struct stream *s;           /* the stream it was fetched for (NULL once that ended) */
	uint16_t s_gen;
	uint32_t place;             /* its place in that stream's order */
	struct pwaiter *waiters;
	char *data;
};

struct pwaiter {
	struct pwaiter *next;
	prefetch_wait_fn fn;
	void *arg;
};

struct prefetch {
	struct core *c;
	struct prefetch_opts o;
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct stream streams[PREFETCH_MAX_STREAMS];
	struct staged *slots[STAGE_SLOTS];
	uint64_t staged_bytes;      /* lock: LOADING and READY entries */
	uint64_t reserved_bytes;    /* lock: chosen files' bytes not staged yet (probe, issue) */
	unsigned inflight;          /* lock: fetches issued, not landed, and probes */
	unsigned probes;            /* lock: of inflight, probes the kernel has not answered */
	struct want *probing;       /* lock: their wants (freed at the end if never answered) */
	uint64_t places;            /* lock: paths in all orders (PREFETCH_MAX_ORDER at most) */
	uint64_t lookups;           /* lock: node numbers of stream lookups */
	int sleeping;               /* lock: the thread waits for work */
	unsigned probe_dry;         /* lock: probes in a row that found nothing cached */
	unsigned probe_skip;        /* lock: files not probed since the last probe */
	int stop, started;
	pthread_t th;
	struct prefetch_stats st;   /* lock, but for the gauges filled at read time */
};

/* A file the thread chose, on its way through the kernel probe. */
struct want {
	struct prefetch *pf;
	struct stream *s;
	uint16_t s_gen;
	uint32_t place, id;
	uint64_t reserved;          /* of pf->reserved_bytes, for this file */
	struct want *pnext, *pprev; /* lock: on pf->probing while the kernel has it */
};

/* One fetch of one item, issued by the thread. */
struct fetch {
	struct prefetch *pf;
	struct staged *e;           /* staging entry (NULL when the cache took it) */
	uint32_t id, chunk;
	struct stream *s;           /* fetched for this stream, at this place */
	uint16_t s_gen;
	uint32_t place;
	struct want *w;             /* whose reservation staging takes (valid while staging) */
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* ---- node numbers: bit 61 over the control bit; slot in 40-47, the
 * slot's generation in 24-39, a lookup counter in 0-23 (each lookup a new
 * node, so the kernel never serves a stale status page) ---- */

static uint64_t stream_node(const struct prefetch *pf, unsigned slot)
{
	return ORDER_DIR_NODE | (uint64_t)(slot + 1) << 40 | (uint64_t)pf->streams[slot].gen << 24 |
	       (pf->lookups & 0xffffff);
}

/* The stream a node names, if its slot still holds that generation. Lock held. */
static struct stream *stream_of(struct prefetch *pf, uint64_t node)
{
	unsigned slot = (unsigned)(node >> 40 & 0xff);
	struct stream *s;

	if (!slot || slot > PREFETCH_MAX_STREAMS)
		return NULL;
	s = &pf->streams[slot - 1];
	return s->used && s->gen == (uint16_t)(node >> 24) ? s : NULL;
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);

	if (!n || n > 64 || name[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return 1;
}

static struct stream *find_stream(struct prefetch *pf, const char *name)
{
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++)
		if (pf->streams[i].used && !strcmp(pf->streams[i].name, name))
			return &pf->streams[i];
	return NULL;
}

/* ---- staging (lock held) ---- */

static unsigned slot_of(uint32_t id, uint32_t chunk)
{
	uint64_t k = ((uint64_t)id << 32 | chunk) * 0x9e3779b97f4a7c15ull;

	return (unsigned)(k >> 40) & (STAGE_SLOTS - 1);
}

static struct staged *stage_find(struct prefetch *pf, uint32_t id, uint32_t chunk)
{
	for (struct staged *e = pf->slots[slot_of(id, chunk)]; e; e = e->next)
		if (e->id == id && e->chunk == chunk)
			return e;
	return NULL;
}

/* Takes E out of the table and frees it (no pins, no waiters). */
static void stage_free(struct prefetch *pf, struct staged *e)
{
	for (struct staged **pp = &pf->slots[slot_of(e->id, e->chunk)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	pf->staged_bytes -= e->len;
	free(e->data);
	free(e);
}

/* E is of no more use: freed now, or by its last reader. WASTED: unread. */
static void stage_drop(struct prefetch *pf, struct staged *e, int wasted)
{
	if (wasted && e->served < e->len)
		pf->st.wasted_bytes += e->len - e->served;
	e->served = e->len;
	if (e->state == ST_LOADING)
		return;             /* its fetch lands on a served entry and frees it */
	if (!e->pins)
		stage_free(pf, e);
}

/* ---- streams (lock held) ---- */

static void stream_reset(struct prefetch *pf, struct stream *s)
{
	for (unsigned b = 0; b < STAGE_SLOTS; b++)
		for (struct staged *e = pf->slots[b], *next; e; e = next) {
			next = e->next;
			if (e->s == s && e->s_gen == s->gen) {
				e->s = NULL;
				stage_drop(pf, e, 1);
			}
		}
	pf->places -= s->n;
	s->n = 0;
	s->head = s->issue = s->last = 0;
	s->unknown = 0;
	s->part_len = 0;
	s->text_len = 0;
	s->epoch++;
	s->active = now_s();
}

static void stream_end(struct prefetch *pf, struct stream *s)
{
	stream_reset(pf, s);
	free(s->ids);
	free(s->seen);
	s->ids = NULL;
	s->seen = NULL;
	s->cap = 0;
	s->used = 0;
	s->epoch = 0;
	s->wait_s = s->run_s = 0;
	s->gen++;
}

/* A job's report "#wait WAIT RUN" (seconds its loader waited for data,
 * seconds it ran, both since the stream began; epochfs-run writes one a
 * second): adds what is new since the stream's last report to the mount's
 * job_wait_us / job_run_us. A report lower than the last starts again
 * (a new loader on a reused name); anything malformed is ignored. Lock
 * held. */
static void take_wait(struct prefetch *pf, struct stream *s, const char *p, size_t len)
{
	char buf[64], *end;
	double w, r;

	if (len >= sizeof(buf))
		return;
	memcpy(buf, p, len);
	buf[len] = '\0';
	w = strtod(buf, &end);
	if (end == buf || *end != ' ')
		return;
	r = strtod(end + 1, &end);
	if (*end || !(w >= 0) || !(r >= w) || r > 1e9)
		return;
	if (r < s->run_s || w < s->wait_s)
		s->wait_s = s->run_s = 0;
	pf->st.job_wait_us += (uint64_t)((w - s->wait_s) * 1e6);
	pf->st.job_run_us += (uint64_t)((r - s->run_s) * 1e6);
	s->wait_s = w;
	s->run_s = r;
}

/* Appends one line (LEN bytes, no newline) to S's order. 0, -EINVAL (not a
 * relative path inside the mount), -EFBIG, -ENOMEM. */
static int take_line(struct prefetch *pf, struct stream *s, const char *line, size_t len)
{
	struct index_attr a;

	while (len && line[len - 1] == '\r')
		len--;
	if (len > 6 && !memcmp(line, "#wait ", 6)) {
		take_wait(pf, s, line + 6, len - 6);
		return 0;
	}
	if (!len || line[0] == '#')
		return 0;
	if (line[0] == '/' || memchr(line, '\0', len))
		return -EINVAL;
	for (size_t i = 0, start = 0; i <= len; i++) {
		if (i < len && line[i] != '/')
			continue;
		size_t n = i - start;
		if (!n || (n == 2 && line[start] == '.' && line[start + 1] == '.'))
			return -EINVAL;
		start = i + 1;
	}
	if (core_lookup_rel(pf->c, line, len, &a) < 0 || !S_ISREG(a.mode)) {
		s->unknown++;
		pf->st.order_unknown++;
		return 0;
	}
	if (pf->places >= PREFETCH_MAX_ORDER)
		return -EFBIG;
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 1024;
		if (cap > s->n + (PREFETCH_MAX_ORDER - pf->places))
			cap = (uint32_t)(s->n + (PREFETCH_MAX_ORDER - pf->places));
		uint32_t *ids = realloc(s->ids, cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		s->ids = ids;
		uint8_t *seen = realloc(s->seen, (cap + 7) / 8);
		if (!seen)
			return -ENOMEM;
		s->seen = seen;
		s->cap = cap;
	}
	s->seen[s->n / 8] &= (uint8_t)~(1u << (s->n % 8));
	s->ids[s->n++] = a.id;
	pf->places++;
	pf->st.order_paths++;
	return 0;
}

/* ---- the order channel ---- */

int prefetch_lookup(struct prefetch *pf, uint64_t parent, const char *name, struct prefetch_attr *a)
{
	int ret = -ENOENT;

	if (parent != ORDER_DIR_NODE)
		return -ENOTDIR;
	pthread_mutex_lock(&pf->lock);
	struct stream *s = find_stream(pf, name);
	if (s) {
		pf->lookups++;
		*a = (struct prefetch_attr){ .node = stream_node(pf, (unsigned)(s - pf->streams)) };
		ret = 0;
	}
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

/* The status text of S into BUF (STATUS_BYTES). Lock held. */
static int status_text(struct prefetch *pf, struct stream *s, char *buf)
{
	(void)pf;
	return snprintf(buf, STATUS_BYTES,
			"stream %s\norder %llu: %u files (%llu paths no file has)\nread up to %u, fetched up to %u\n"
			"waited for data %.1f s of %.1f s\n",
			s->name, (unsigned long long)s->epoch, s->n, (unsigned long long)s->unknown,
			s->head, s->issue, s->wait_s, s->run_s);
}

int prefetch_getattr(struct prefetch *pf, uint64_t node, struct prefetch_attr *a)
{
	char text[STATUS_BYTES];
	int ret = 0;

	if (node == ORDER_DIR_NODE) {
		*a = (struct prefetch_attr){ .node = node, .is_dir = 1 };
		return 0;
	}
	pthread_mutex_lock(&pf->lock);
	struct stream *s = stream_of(pf, node);
	if (!s)
		ret = -ENOENT;
	else
		*a = (struct prefetch_attr){ .node = node, .size = (size_t)status_text(pf, s, text) };
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

int prefetch_create(struct prefetch *pf, uint64_t parent, const char *name, struct prefetch_attr *a)
{
	int ret = 0;

	if (parent != ORDER_DIR_NODE)
		return -EROFS;
	if (!valid_name(name))
		return -EINVAL;
	pthread_mutex_lock(&pf->lock);
	struct stream *s = find_stream(pf, name);
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS && !s; i++)
		if (!pf->streams[i].used) {
			s = &pf->streams[i];
			s->used = 1;
			snprintf(s->name, sizeof(s->name), "%s", name);
			stream_reset(pf, s);
		}
	if (!s) {
		ret = -ENOSPC;
	} else {
		pf->lookups++;
		*a = (struct prefetch_attr){ .node = stream_node(pf, (unsigned)(s - pf->streams)) };
	}
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

ssize_t prefetch_write(struct prefetch *pf, uint64_t node, const void *buf, size_t len, off_t off)
{
	const char *p = buf, *end = p + len;
	ssize_t ret = (ssize_t)len;
	int err = 0;

	pthread_mutex_lock(&pf->lock);
	struct stream *s = stream_of(pf, node);
	if (!s) {
		ret = -ENOENT;
		goto out;
	}
	if (off == 0 && s->text_len)
		stream_reset(pf, s);        /* written from the start: a new order */
	s->text_len += len;
	s->active = now_s();
	while (p < end && !err) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		if (s->part_len + n > LINE_MAX_BYTES) {
			err = -EINVAL;
			break;
		}
		memcpy(s->part + s->part_len, p, n);
		s->part_len += n;
		if (!nl)
			break;              /* the rest of this line comes with the next write */
		err = take_line(pf, s, s->part, s->part_len);
		s->part_len = 0;
		p = nl + 1;
	}
	if (err) {
		log_warn("order %s: %s after %u files; the order keeps them", s->name,
			 err == -EFBIG ? "more paths than the orders of all streams take (16M)" :
			 err == -ENOMEM ? "out of memory" :
			 "a line is not a path inside the mount (relative, no '..', under 4096 bytes)", s->n);
		s->part_len = 0;
		ret = err;
	}
	pthread_cond_signal(&pf->work);
out:
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

int prefetch_truncate(struct prefetch *pf, uint64_t node, off_t size)
{
	int ret = 0;

	if (size != 0)
		return -EINVAL;
	pthread_mutex_lock(&pf->lock);
	struct stream *s = stream_of(pf, node);
	if (s)
		stream_reset(pf, s);
	else
		ret = -ENOENT;
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

int prefetch_unlink(struct prefetch *pf, uint64_t parent, const char *name)
{
	int ret = 0;

	if (parent != ORDER_DIR_NODE)
		return -EROFS;
	pthread_mutex_lock(&pf->lock);
	struct stream *s = find_stream(pf, name);
	if (s)
		stream_end(pf, s);
	else
		ret = -ENOENT;
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

ssize_t prefetch_read(struct prefetch *pf, uint64_t node, void *buf, size_t len, off_t off)
{
	char text[STATUS_BYTES];
	ssize_t n = -ENOENT;

	if (node == ORDER_DIR_NODE)
		return -EISDIR;
	pthread_mutex_lock(&pf->lock);
	struct stream *s = stream_of(pf, node);
	if (s) {
		size_t t = (size_t)status_text(pf, s, text);
		n = off < 0 ? -EINVAL : (size_t)off >= t ? 0 : (ssize_t)(t - (size_t)off < len ? t - (size_t)off : len);
		if (n > 0)
			memcpy(buf, text + off, (size_t)n);
	}
	pthread_mutex_unlock(&pf->lock);
	return n;
}

const char *prefetch_dirent(struct prefetch *pf, uint64_t pos, char *name, size_t len)
{
	const char *ret = NULL;
	uint64_t k = 0;

	pthread_mutex_lock(&pf->lock);
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS && !ret; i++)
		if (pf->streams[i].used && k++ == pos) {
			snprintf(name, len, "%s", pf->streams[i].name);
			ret = name;
		}
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

/* ---- the read path ---- */

/* Could the thread issue a batch now? Lock held. */
static int work_ready(struct prefetch *pf)
{
	uint64_t room = pf->o.mem > pf->staged_bytes + pf->reserved_bytes ?
			pf->o.mem - pf->staged_bytes - pf->reserved_bytes : 0;

	if (pf->stop)
		return 1;
	if (pf->inflight + WAKE_FILES > pf->o.inflight || room < pf->o.mem / 16)
		return 0;
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++) {
		const struct stream *s = &pf->streams[i];
		uint64_t to = (uint64_t)s->head + pf->o.window;
		if (!s->used || s->issue >= s->n)
			continue;
		if (to > s->n)
			to = s->n;
		if (to >= (uint64_t)s->issue + WAKE_FILES || to == s->n)
			return 1;
	}
	return 0;
}

/* Wakes the thread if it sleeps and a batch of work is there. Lock held. */
static void maybe_wake(struct prefetch *pf)
{
	if (pf->sleeping && work_ready(pf)) {
		pf->sleeping = 0;
		pthread_cond_signal(&pf->work);
	}
}

static int is_seen(const struct stream *s, uint32_t q)
{
	return s->seen[q / 8] >> (q % 8) & 1;
}

/* The place of ID in S at or near its readers, or -1. Lock held. */
static int64_t match(const struct stream *s, uint32_t id)
{
	uint32_t from = s->last > NEAR ? s->last - NEAR : 0, to = s->last + NEAR;

	/* Near the last match first: consecutive reads are near neighbours,
	 * and the rest of a file read in several requests is seen already. */
	if (to > s->n)
		to = s->n;
	for (uint32_t q = from; q < to; q++)
		if (s->ids[q] == id)
			return q;
	from = s->head > LAG ? s->head - LAG : 0;
	to = s->head + SEARCH < s->n ? s->head + SEARCH : s->n;
	for (uint32_t q = from; q < to; q++)
		if (s->ids[q] == id && !is_seen(s, q))
			return q;
	return -1;
}

void prefetch_seen(struct prefetch *pf, uint32_t id)
{
	pthread_mutex_lock(&pf->lock);
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++) {
		struct stream *s = &pf->streams[i];
		if (!s->used || !s->n)
			continue;
		int64_t q = match(s, id);
		if (q < 0)
			continue;
		s->seen[q / 8] |= (uint8_t)(1u << (q % 8));
		if (q >= s->issue)
			pf->st.late++;      /* the reader came first */
		if (q + 1 > s->head)
			s->head = (uint32_t)q + 1;
		s->last = (uint32_t)q;
		s->active = now_s();
	}
	maybe_wake(pf);
	pthread_mutex_unlock(&pf->lock);
}

enum prefetch_take prefetch_take(struct prefetch *pf, uint32_t id, uint32_t chunk,
				 const struct index_version *v, const void **data, size_t *len,
				 prefetch_wait_fn fn, void *arg)
{
	enum prefetch_take r = PREFETCH_NONE;

	pthread_mutex_lock(&pf->lock);
	struct staged *e = stage_find(pf, id, chunk);
	if (e && !index_version_eq(&e->v, v)) {
		stage_drop(pf, e, 1);       /* another version: never served */
		e = NULL;
	}
	if (e && e->state == ST_READY && e->served < e->len) {
		e->pins++;
		*data = e->data;
		*len = e->len;
		pf->st.hits++;
		r = PREFETCH_HIT;
	} else if (fn && e && e->state == ST_LOADING && e->served < e->len) {
		struct pwaiter *w = malloc(sizeof(*w));
		if (w) {
			*w = (struct pwaiter){ .next = e->waiters, .fn = fn, .arg = arg };
			e->waiters = w;
			e->pins++;          /* released by the waiter's prefetch_done_with */
			pf->st.late++;
			r = PREFETCH_WAIT;
		}
	}
	pthread_mutex_unlock(&pf->lock);
	return r;
}

void prefetch_done_with(struct prefetch *pf, uint32_t id, uint32_t chunk, size_t served)
{
	pthread_mutex_lock(&pf->lock);
	struct staged *e = stage_find(pf, id, chunk);
	if (e) {
		e->pins--;
		e->served += served;
		if (e->served >= e->len && !e->pins && e->state != ST_LOADING)
			stage_free(pf, e);
	}
	maybe_wake(pf);                     /* room for more */
	pthread_mutex_unlock(&pf->lock);
}

/* ---- the thread ---- */

static void *stage_buf(void *arg, size_t len)
{
	struct fetch *f = arg;
	struct prefetch *pf = f->pf;
	struct staged *e = NULL;

	/* The bytes were reserved when the file was chosen (issue_file). */
	pthread_mutex_lock(&pf->lock);
	if (!stage_find(pf, f->id, f->chunk) && (e = calloc(1, sizeof(*e))) &&
	    !(e->data = malloc(len ? len : 1))) {
		free(e);
		e = NULL;
	}
	if (e) {
		struct index_attr a;
		index_get(pf->c->ix, f->id, &a);
		e->id = f->id;
		e->chunk = f->chunk;
		e->v = a.v;
		e->len = len;
		e->state = ST_LOADING;
		e->s = f->s;
		e->s_gen = f->s_gen;
		e->place = f->place;
		unsigned b = slot_of(f->id, f->chunk);
		e->next = pf->slots[b];
		pf->slots[b] = e;
		pf->staged_bytes += len;
		if (f->w) {                 /* the reservation becomes staged bytes */
			uint64_t t = len < f->w->reserved ? len : f->w->reserved;
			f->w->reserved -= t;
			pf->reserved_bytes -= t;
		}
		if (pf->staged_bytes > pf->st.staged_peak)
			pf->st.staged_peak = pf->staged_bytes;
		f->e = e;
	}
	pthread_mutex_unlock(&pf->lock);
	return e ? e->data : NULL;
}

static void fetch_done(void *arg, ssize_t res, int cached)
{
	struct fetch *f = arg;
	struct prefetch *pf = f->pf;
	struct staged *e = f->e;
	struct pwaiter *w = NULL;

	pthread_mutex_lock(&pf->lock);
	pf->inflight--;
	if (res > 0)
		pf->st.fetched_bytes += (uint64_t)res;
	if (res > 0 && cached)
		pf->st.cached_bytes += (uint64_t)res;
	if (e) {
		w = e->waiters;
		e->waiters = NULL;
		e->state = res == (ssize_t)e->len ? ST_READY : ST_DEAD;
		if (e->state == ST_DEAD)
			e->served = e->len;
		/* Pinned by its waiters, which let go through done_with. */
		if (e->served >= e->len && !e->pins)
			stage_free(pf, e);
	}
	maybe_wake(pf);
	pthread_mutex_unlock(&pf->lock);
	/* Waiters run unlocked; a failed fetch sends them to the sources. */
	while (w) {
		struct pwaiter *next = w->next;
		if (e && res == (ssize_t)e->len)
			w->fn(w->arg, e->data, e->len);
		else
			w->fn(w->arg, NULL, 0);
		free(w);
		w = next;
	}
	free(f);
}


static void link_probe(struct prefetch *pf, struct want *w)
{
	w->pprev = NULL;
	w->pnext = pf->probing;
	if (pf->probing)
		pf->probing->pprev = w;
	pf->probing = w;
	pf->probes++;
	pf->inflight++;
}

static void unlink_probe(struct prefetch *pf, struct want *w)
{
	if (w->pprev)
		w->pprev->pnext = w->pnext;
	else
		pf->probing = w->pnext;
	if (w->pnext)
		w->pnext->pprev = w->pprev;
}

/* Gives back what of W's reservation staging did not take. */
static void unreserve(struct prefetch *pf, struct want *w)
{
	pthread_mutex_lock(&pf->lock);
	pf->reserved_bytes -= w->reserved;
	w->reserved = 0;
	maybe_wake(pf);
	pthread_mutex_unlock(&pf->lock);
}

/* Fetches every item of W's file not staged or on its way; takes W. Lock
 * not held. */
static void fetch_items(struct want *w)
{
	struct prefetch *pf = w->pf;
	static const struct core_prefetch_cb cb_proto = { .stage = stage_buf, .done = fetch_done };
	struct index_attr a;

	if (index_get(pf->c->ix, w->id, &a) == 0 && !a.gone && S_ISREG(a.mode)) {
		uint32_t items = cache_chunks(a.v.size, pf->c->chunk);
		pthread_mutex_lock(&pf->lock);
		for (uint32_t k = 0; k < items && !pf->stop; k++) {
			if (stage_find(pf, w->id, k))
				continue;
			struct fetch *f = malloc(sizeof(*f));
			if (!f)
				break;
			*f = (struct fetch){ .pf = pf, .id = w->id, .chunk = k, .s = w->s, .s_gen = w->s_gen,
					     .place = w->place, .w = w };
			pf->inflight++;
			pthread_mutex_unlock(&pf->lock);
			struct core_prefetch_cb cb = cb_proto;
			cb.arg = f;
			/* Stages (stage_buf) before it returns, if it stages at all. */
			core_prefetch_item(pf->c, w->id, &a, k, &cb);
			pthread_mutex_lock(&pf->lock);
		}
		pthread_mutex_unlock(&pf->lock);
	}
	unreserve(w->pf, w);
	free(w);
}

void prefetch_probed(struct prefetch *pf, void *cookie, int resident)
{
	struct want *w = cookie;

	pthread_mutex_lock(&pf->lock);
	pf->inflight--;                 /* the probe's */
	pf->probes--;
	unlink_probe(pf, w);
	if (resident) {
		pf->st.resident++;
		pf->probe_dry = 0;
	} else if (pf->probe_dry < PROBE_SPAN) {
		pf->probe_dry++;
	}
	maybe_wake(pf);
	pthread_mutex_unlock(&pf->lock);
	if (resident) {
		unreserve(pf, w);
		free(w);
	} else {
		fetch_items(w);
	}
}

/* Chooses file ID (place PLACE of S) to fetch, unless its first item is
 * staged or on its way: asks the kernel first whether it caches the file
 * (the answer comes back through prefetch_probed), else fetches it now.
 * Lock held; dropped meanwhile. */
static void issue_file(struct prefetch *pf, struct stream *s, uint32_t place, uint32_t id)
{
	struct index_attr a;
	struct core *c = pf->c;

	if (index_get(c->ix, id, &a) < 0 || a.gone || !S_ISREG(a.mode) || !a.v.size ||
	    stage_find(pf, id, 0))
		return;
	struct want *w = malloc(sizeof(*w));
	if (!w)
		return;
	*w = (struct want){ .pf = pf, .s = s, .s_gen = s->gen, .place = place, .id = id,
			    .reserved = a.v.size };
	pf->reserved_bytes += a.v.size;     /* held while it is probed and staged */
	pthread_mutex_unlock(&pf->lock);
	if (c->cache) {
		/* In the RAM cache (or loading into it): nothing to fetch, no
		 * probe to send. */
		struct cache_ref ref;
		enum cache_result r = cache_get_ex(c->cache, id, 0, &a.v,
						   cache_chunk_len(a.v.size, c->chunk, 0), NULL, &ref, 0);
		cache_put(c->cache, &ref);
		if (r == CACHE_HIT || r == CACHE_WAIT) {
			unreserve(pf, w);
			free(w);
			pthread_mutex_lock(&pf->lock);
			return;
		}
	}
	pthread_mutex_lock(&pf->lock);
	/* Probes that keep finding nothing cached are sampled. */
	int probe = c->probe && (pf->probe_dry < PROBE_SPAN || ++pf->probe_skip >= PROBE_SAMPLE);
	if (probe) {
		pf->probe_skip = 0;
		link_probe(pf, w);          /* until answered */
	}
	pthread_mutex_unlock(&pf->lock);
	if (probe && c->probe(c->probe_arg, core_data_node(id, a.gen), w) < 0) {
		pthread_mutex_lock(&pf->lock);
		pf->inflight--;
		pf->probes--;
		unlink_probe(pf, w);
		pthread_mutex_unlock(&pf->lock);
		probe = 0;
	}
	if (!probe)
		fetch_items(w);
	pthread_mutex_lock(&pf->lock);
}

/* Frees staged items their stream's readers have passed, and drops streams
 * idle past expire_s. Lock held. */
static void sweep(struct prefetch *pf)
{
	double t = now_s();

	for (unsigned b = 0; b < STAGE_SLOTS; b++)
		for (struct staged *e = pf->slots[b], *next; e; e = next) {
			next = e->next;
			if (e->state == ST_LOADING || e->pins)
				continue;
			if (!e->s || e->s->gen != e->s_gen || !e->s->used ||
			    (e->s->head > LAG && e->place < e->s->head - LAG))
				stage_drop(pf, e, 1);
		}
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++) {
		struct stream *s = &pf->streams[i];
		if (s->used && t - s->active > pf->o.expire_s) {
			log_info("order %s: no read seen for %.0f s; the stream is dropped", s->name,
				 pf->o.expire_s);
			stream_end(pf, s);
		}
	}
}

static void *prefetch_main(void *arg)
{
	struct prefetch *pf = arg;
	unsigned turn = 0;
	double last_sweep = now_s();

	pthread_mutex_lock(&pf->lock);
	while (!pf->stop) {
		int issued = 0;
		/* Round robin over the streams, one file a turn each, while the
		 * budget and the in-flight bound allow. */
		for (unsigned k = 0; k < PREFETCH_MAX_STREAMS && !pf->stop; k++) {
			struct stream *s = &pf->streams[(turn + k) % PREFETCH_MAX_STREAMS];
			if (!s->used || !pf->o.mem)
				continue;
			if (s->head > LAG && s->issue < s->head - LAG)
				s->issue = s->head - LAG;   /* its readers went past */
			while (s->issue < s->n && (uint64_t)s->issue < (uint64_t)s->head + pf->o.window &&
			       pf->staged_bytes + pf->reserved_bytes < pf->o.mem &&
			       pf->inflight < pf->o.inflight) {
				uint32_t place = s->issue++;
				if (is_seen(s, place))
					continue;
				uint16_t gen = s->gen;
				issue_file(pf, s, place, s->ids[place]);
				issued = 1;
				if (!s->used || s->gen != gen)
					break;      /* ended while unlocked */
			}
		}
		turn++;
		if (now_s() - last_sweep > 0.5) {
			sweep(pf);
			last_sweep = now_s();
		}
		if (!issued && !work_ready(pf)) {
			struct timespec dl;
			clock_gettime(CLOCK_MONOTONIC, &dl);
			dl.tv_nsec += 100 * 1000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			pf->sleeping = 1;
			pthread_cond_timedwait(&pf->work, &pf->lock, &dl);
			pf->sleeping = 0;
		}
	}
	pthread_mutex_unlock(&pf->lock);
	return NULL;
}

int prefetch_new(struct core *c, const struct prefetch_opts *o, struct prefetch **out)
{
	struct prefetch *pf = calloc(1, sizeof(*pf));
	pthread_condattr_t ca;

	if (!pf)
		return -ENOMEM;
	pf->c = c;
	pf->o = *o;
	if (!pf->o.window)
		pf->o.window = PREFETCH_DEFAULT_WINDOW;
	if (pf->o.expire_s <= 0)
		pf->o.expire_s = 300;
	if (!pf->o.inflight)
		pf->o.inflight = 64;
	pthread_mutex_init(&pf->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pf->work, &ca);
	pthread_condattr_destroy(&ca);
	*out = pf;
	return 0;
}

int prefetch_start(struct prefetch *pf)
{
	int e = pthread_create(&pf->th, NULL, prefetch_main, pf);

	if (e)
		return -e;
	pf->started = 1;
	return 0;
}

void prefetch_free(struct prefetch *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->lock);
	pf->stop = 1;
	pthread_cond_broadcast(&pf->work);
	pthread_mutex_unlock(&pf->lock);
	if (pf->started)
		pthread_join(pf->th, NULL);
	/* Fetches in flight land in the core (a dead peer within its
	 * --peer-timeout): wait for them all, or they would land on freed
	 * memory. Probes the kernel never answered (the session ended first)
	 * are not waited for: their wants are freed below. */
	for (long i = 1;; i++) {
		pthread_mutex_lock(&pf->lock);
		unsigned n = pf->inflight - pf->probes;
		pthread_mutex_unlock(&pf->lock);
		if (!n)
			break;
		if (i % 5000 == 0)
			log_warn("prefetch: still waiting for %u fetches to land (%ld s)", n, i / 1000);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	for (struct want *w = pf->probing, *next; w; w = next) {
		next = w->pnext;
		free(w);
	}
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++) {
		free(pf->streams[i].ids);
		free(pf->streams[i].seen);
	}
	for (unsigned b = 0; b < STAGE_SLOTS; b++)
		for (struct staged *e = pf->slots[b], *next; e; e = next) {
			next = e->next;
			free(e->data);
			free(e);
		}
	pthread_mutex_destroy(&pf->lock);
	pthread_cond_destroy(&pf->work);
	free(pf);
}

void prefetch_get_stats(struct prefetch *pf, struct prefetch_stats *s)
{
	pthread_mutex_lock(&pf->lock);
	*s = pf->st;
	s->staged_bytes = pf->staged_bytes;
	s->streams = 0;
	for (unsigned i = 0; i < PREFETCH_MAX_STREAMS; i++)
		s->streams += pf->streams[i].used;
	pthread_mutex_unlock(&pf->lock);
}
