/* order.c - the order channel (.epochfs/order/) and following its streams;
 * see order.h (and docs/prefetch.md).
 *
 * DESIGN
 * - A stream is the order a job wrote: index ids, in order (4 bytes a
 *   file), a bit per place set once a read of it was seen, a head (one past
 *   the furthest place seen read) and an issue point (the next place to
 *   fetch).
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
 * - "#wait W R" reports add what is new since the stream's last one, but
 *   a stream never more run time than its age (plus a minute), all streams
 *   never more than that for each of the 64 slots since the mount, and
 *   never more wait than run: a writer that keeps resetting its numbers
 *   (4,000 writes took job_wait_us to 2e18) adds at most real time.
 * - "#batches BYTES" says how many bytes of batches the stream's loader
 *   may hold at once (workers x prefetch_factor x a batch); the memory
 *   thread counts it in the job's peak. Taken from the daemon's user and
 *   root only (another user's word would shrink the cache for everyone),
 *   and only from a process whose memory is in the daemon's cgroup (a job
 *   in a cgroup of its own takes nothing from the daemon's room: counted,
 *   its batches would empty the cache for nothing), at most BATCHES_MAX a
 *   stream, and dropped when the stream ends.
 * - "#range OFFSET LENGTH PATH" is a place for bytes OFFSET to
 *   OFFSET + LENGTH of PATH alone (a record reader's slice of a shard):
 *   kept beside the ids, by place, only for such lines (20 bytes each, at
 *   most ORDER_MAX_RANGES in all). A read is matched to a ranged place
 *   only when its offset falls in the range, so consecutive ranges of one
 *   file move the head one by one.
 * - Node numbers (ns.h): the order bit over the control bit; the slot in
 *   bits 40-47, the slot's generation in 24-39, a lookup counter in 0-23
 *   (each lookup a new node, so the kernel never serves a stale status).
 *   A stream's group (order.h) is its slot and generation.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ns/ns.h"
#include "core/ns/order.h"
#include "core/ns/order_int.h"
#include "util/clock.h"
#include "util/log.h"

#define REPORT_SLACK_S 60.0         /* run time a report may claim beyond its stream's age */
#define STATUS_BYTES 1024
#define BATCHES_MAX (1ull << 40)    /* "#batches": more than any machine here holds */

static uint64_t stream_node(const struct order *o, const struct stream *s)
{
	return ORDER_DIR_NODE | (uint64_t)(s - o->streams + 1) << 40 | (uint64_t)s->gen << 24 |
	       (o->lookups & 0xffffff);
}

/* The stream a node names, if its slot still holds that generation. Lock held. */
static struct stream *stream_of(struct order *o, uint64_t node)
{
	unsigned slot = (unsigned)(node >> 40 & 0xff);
	struct stream *s;

	if (!slot || slot > ORDER_MAX_STREAMS)
		return NULL;
	s = &o->streams[slot - 1];
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

static struct stream *find_stream(struct order *o, const char *name)
{
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++)
		if (o->streams[i].used && !strcmp(o->streams[i].name, name))
			return &o->streams[i];
	return NULL;
}

/* ---- streams (lock held) ---- */

/* A new order for S: what was fetched for the old one goes, and so does
 * its room (a long order's arrays are not kept for a short one). */
static void stream_reset(struct order *o, struct stream *s)
{
	if (o->o.reset)
		o->o.reset(o->o.arg, group_of(o, s));
	o->places -= s->n;
	o->ranges -= s->nranges;
	free(s->ids);
	free(s->seen);
	free(s->ranges);
	s->ids = NULL;
	s->seen = NULL;
	s->ranges = NULL;
	s->n = s->cap = 0;
	s->nranges = s->rcap = 0;
	s->head = s->issue = s->last = 0;
	s->unknown = 0;
	s->part_len = 0;
	s->text_len = 0;
	s->epoch++;
	s->active = clock_now_coarse();
}

/* Tells the owner how many streams there are now. Lock held. */
static void streams_changed(struct order *o)
{
	unsigned n = 0;

	if (!o->o.streams)
		return;
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++)
		n += o->streams[i].used != 0;
	o->o.streams(o->o.arg, n);
}

void order_stream_end(struct order *o, struct stream *s)
{
	stream_reset(o, s);
	s->used = 0;
	s->epoch = 0;
	s->wait_s = s->run_s = 0;
	s->batches = 0;
	s->gen++;
	streams_changed(o);
}

/* A job's report "#wait WAIT RUN" (seconds its loader waited for data,
 * seconds it ran, both since the stream began): adds what is new since the
 * stream's last report, within what the clock allows: a stream's reports
 * add at most its age (plus REPORT_SLACK_S: a loader may start counting
 * before its stream exists) and all of them together at most that for
 * every stream slot since the mount, so a writer that keeps starting its
 * numbers again, or streams over, cannot run the counters up. A report
 * lower than the last starts again (a new loader on a reused name);
 * anything malformed is ignored. Lock held. */
static void take_wait(struct order *o, struct stream *s, const char *p, size_t len)
{
	char buf[64], *end;
	double w, r, now = clock_now();

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
	double dr = r - s->run_s, dw = w - s->wait_s;
	double most = now - s->born + REPORT_SLACK_S - s->added;
	double all = ORDER_MAX_STREAMS * (now - o->born + REPORT_SLACK_S) - o->added;
	if (dr > most)
		dr = most;
	if (dr > all)
		dr = all;
	if (dr < 0)
		dr = 0;
	if (dw > dr)
		dw = dr;
	o->st.job_wait_us += (uint64_t)(dw * 1e6);
	o->st.job_run_us += (uint64_t)(dr * 1e6);
	s->added += dr;
	o->added += dr;
	s->wait_s = w;
	s->run_s = r;
}

/* Appends one line (LEN bytes, no newline) to S's order. 0, -EINVAL (not a
 * relative path inside the mount), -EFBIG, -ENOMEM. Lock held. */
/* The daemon's user and root are held to no per-user limit. */
static int privileged(uint32_t uid)
{
	return uid == 0 || uid == (uint32_t)geteuid();
}

/* Places UID's streams other than EXCEPT hold. Lock held. */
static uint64_t user_places(const struct order *o, uint32_t uid, const struct stream *except)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++)
		if (o->streams[i].used && o->streams[i].uid == uid && &o->streams[i] != except)
			n += o->streams[i].n;
	return n;
}

/* "#batches BYTES": what S's loader may hold in batches at once, from
 * the daemon's user or root in the daemon's memory cgroup; anything
 * else, or malformed, is ignored. Lock held. */
static void take_batches(struct stream *s, const char *p, size_t len)
{
	char buf[32], *end;

	if (len >= sizeof(buf) || !privileged(s->uid) || !s->same_memory)
		return;
	memcpy(buf, p, len);
	buf[len] = '\0';
	if (buf[0] < '0' || buf[0] > '9')
		return;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (*end || errno)
		return;
	s->batches = v < BATCHES_MAX ? v : BATCHES_MAX;
}

/* Appends path LINE (LEN bytes) to S's order: 0 and *ADDED (0: no file
 * has it, counted and skipped), -EINVAL (not a relative path inside the
 * mount), -EFBIG, -EDQUOT, -ENOMEM. Lock held. */
static int add_path(struct order *o, struct stream *s, const char *line, size_t len, int *added)
{
	uint32_t id;

	*added = 0;
	if (!len || line[0] == '/' || memchr(line, '\0', len))
		return -EINVAL;
	for (size_t i = 0, start = 0; i <= len; i++) {
		if (i < len && line[i] != '/')
			continue;
		size_t n = i - start;
		if (!n || (n == 2 && line[start] == '.' && line[start + 1] == '.'))
			return -EINVAL;
		start = i + 1;
	}
	if (o->o.resolve(o->o.arg, line, len, &id) < 0) {
		s->unknown++;
		o->st.unknown++;
		return 0;
	}
	if (o->places >= ORDER_MAX_PATHS)
		return -EFBIG;
	if (!s->room)
		return -EDQUOT;
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 1024;
		if (cap > s->n + (ORDER_MAX_PATHS - o->places))
			cap = (uint32_t)(s->n + (ORDER_MAX_PATHS - o->places));
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
	s->ids[s->n++] = id;
	s->room--;
	o->places++;
	o->st.paths++;
	*added = 1;
	return 0;
}

/* "#range OFFSET LENGTH PATH": PATH's bytes OFFSET to OFFSET + LENGTH
 * (decimal, LENGTH > 0) as one place. 0, or add_path's errors; -EINVAL
 * when the numbers are malformed, -EFBIG past ORDER_MAX_RANGES. Lock held. */
static int take_range(struct order *o, struct stream *s, const char *p, size_t len)
{
	uint64_t v[2];
	size_t i = 0;
	int added, err;

	for (int k = 0; k < 2; k++) {
		size_t start = i;
		v[k] = 0;
		for (; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
			if (v[k] > (UINT64_MAX - 9) / 10)
				return -EINVAL;
			v[k] = v[k] * 10 + (uint64_t)(p[i] - '0');
		}
		if (i == start || i >= len || p[i] != ' ')
			return -EINVAL;
		i++;
	}
	if (!v[1] || v[0] > UINT64_MAX - v[1])
		return -EINVAL;
	if (o->ranges >= ORDER_MAX_RANGES)
		return -EFBIG;
	if (s->nranges == s->rcap) {
		uint32_t cap = s->rcap ? s->rcap * 2 : 256;
		struct order_range *r = realloc(s->ranges, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		s->ranges = r;
		s->rcap = cap;
	}
	if ((err = add_path(o, s, p + i, len - i, &added)) < 0 || !added)
		return err;
	s->ranges[s->nranges++] = (struct order_range){ .place = s->n - 1, .off = v[0], .len = v[1] };
	o->ranges++;
	return 0;
}

int order_range_of(const struct stream *s, uint32_t place, const struct order_range **r)
{
	uint32_t lo = 0, hi = s->nranges;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (s->ranges[mid].place < place)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->nranges && s->ranges[lo].place == place) {
		*r = &s->ranges[lo];
		return 1;
	}
	return 0;
}

static int take_line(struct order *o, struct stream *s, const char *line, size_t len)
{
	int added;

	while (len && line[len - 1] == '\r')
		len--;
	if (len > 6 && !memcmp(line, "#wait ", 6)) {
		take_wait(o, s, line + 6, len - 6);
		return 0;
	}
	if (len > 9 && !memcmp(line, "#batches ", 9)) {
		take_batches(s, line + 9, len - 9);
		return 0;
	}
	if (len >= 7 && !memcmp(line, "#range ", 7))
		return take_range(o, s, line + 7, len - 7);
	if (!len || line[0] == '#')
		return 0;
	return add_path(o, s, line, len, &added);
}

int order_new(const struct order_opts *opts, struct order **out)
{
	struct order *o = calloc(1, sizeof(*o));

	if (!o)
		return -ENOMEM;
	o->o = *opts;
	o->born = clock_now();
	if (o->o.expire_s <= 0)
		o->o.expire_s = 300;
	pthread_mutex_init(&o->lock, NULL);
	*out = o;
	return 0;
}

void order_free(struct order *o)
{
	if (!o)
		return;
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++) {
		free(o->streams[i].ids);
		free(o->streams[i].seen);
		free(o->streams[i].ranges);
	}
	pthread_mutex_destroy(&o->lock);
	free(o);
}

void order_get_stats(struct order *o, struct order_stats *s)
{
	pthread_mutex_lock(&o->lock);
	*s = o->st;
	s->places = o->places;
	s->streams = 0;
	s->job_batches = 0;
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++) {
		s->streams += o->streams[i].used;
		if (o->streams[i].used)
			s->job_batches += o->streams[i].batches;
	}
	pthread_mutex_unlock(&o->lock);
}

/* ---- the namespace ---- */

int order_lookup(struct order *o, uint64_t parent, const char *name, struct order_attr *a)
{
	int ret = -ENOENT;

	if (parent != ORDER_DIR_NODE)
		return -ENOTDIR;
	pthread_mutex_lock(&o->lock);
	struct stream *s = find_stream(o, name);
	if (s) {
		o->lookups++;
		*a = (struct order_attr){ .node = stream_node(o, s), .uid = s->uid, .gid = s->gid };
		ret = 0;
	}
	pthread_mutex_unlock(&o->lock);
	return ret;
}

/* The status text of S into BUF (STATUS_BYTES). Lock held. */
static int status_text(const struct stream *s, char *buf)
{
	return snprintf(buf, STATUS_BYTES,
			"stream %s\norder %llu: %u files (%llu paths no file has)\nread up to %u, fetched up to %u\n"
			"waited for data %.1f s of %.1f s\n",
			s->name, (unsigned long long)s->epoch, s->n, (unsigned long long)s->unknown,
			s->head, s->issue, s->wait_s, s->run_s);
}

int order_getattr(struct order *o, uint64_t node, struct order_attr *a)
{
	char text[STATUS_BYTES];
	int ret = 0;

	if (node == ORDER_DIR_NODE) {
		*a = (struct order_attr){ .node = node, .is_dir = 1, .uid = (uint32_t)geteuid(),
					  .gid = (uint32_t)getegid() };
		return 0;
	}
	pthread_mutex_lock(&o->lock);
	struct stream *s = stream_of(o, node);
	if (!s)
		ret = -ENOENT;
	else
		*a = (struct order_attr){ .node = node, .size = (size_t)status_text(s, text), .uid = s->uid,
					  .gid = s->gid };
	pthread_mutex_unlock(&o->lock);
	return ret;
}

int order_create(struct order *o, uint64_t parent, const char *name, uint32_t uid, uint32_t gid,
		 unsigned flags, struct order_attr *a)
{
	unsigned mine = 0;
	int ret = 0;

	if (parent != ORDER_DIR_NODE)
		return -EROFS;
	if (!valid_name(name))
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	struct stream *s = find_stream(o, name);
	if (s && s->uid != uid && !privileged(uid)) {
		pthread_mutex_unlock(&o->lock);
		return -EACCES;         /* another user's stream */
	}
	for (unsigned i = 0; i < ORDER_MAX_STREAMS; i++)
		mine += o->streams[i].used && o->streams[i].uid == uid;
	for (unsigned i = 0; i < ORDER_MAX_STREAMS && !s && (privileged(uid) || mine < ORDER_USER_STREAMS); i++)
		if (!o->streams[i].used) {
			s = &o->streams[i];
			s->used = 1;
			snprintf(s->name, sizeof(s->name), "%s", name);
			stream_reset(o, s);
			s->born = clock_now();
			s->added = 0;
			s->uid = uid;
			s->gid = gid;
			s->same_memory = !!(flags & ORDER_SAME_MEMORY);
			streams_changed(o);
		}
	if (!s) {
		ret = -ENOSPC;
	} else {
		o->lookups++;
		*a = (struct order_attr){ .node = stream_node(o, s), .uid = s->uid, .gid = s->gid };
	}
	pthread_mutex_unlock(&o->lock);
	return ret;
}

ssize_t order_write(struct order *o, uint64_t node, const void *buf, size_t len, off_t off)
{
	const char *p = buf, *end = p + len;
	ssize_t ret = (ssize_t)len;
	int err = 0;

	pthread_mutex_lock(&o->lock);
	struct stream *s = stream_of(o, node);
	if (!s) {
		pthread_mutex_unlock(&o->lock);
		return -ENOENT;
	}
	if (off == 0 && s->text_len)
		stream_reset(o, s);         /* written from the start: a new order */
	if (privileged(s->uid)) {
		s->room = UINT64_MAX;
	} else {
		uint64_t held = user_places(o, s->uid, s) + s->n;
		s->room = held < ORDER_USER_PATHS ? ORDER_USER_PATHS - held : 0;
	}
	s->text_len += len;
	s->active = clock_now_coarse();
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
		err = take_line(o, s, s->part, s->part_len);
		s->part_len = 0;
		p = nl + 1;
	}
	if (err) {
		log_warn("order %s: %s after %u files; the order keeps them", s->name,
			 err == -EFBIG ? "more paths (16M) or ranges (1M) than the orders of all streams take" :
			 err == -EDQUOT ? "more paths than one user's orders take (4M)" :
			 err == -ENOMEM ? "out of memory" :
			 "a line is not a path inside the mount (relative, no '..', under 4096 bytes), "
			 "or a #range line is not \"#range OFFSET LENGTH PATH\"", s->n);
		s->part_len = 0;
		ret = err;
	}
	pthread_mutex_unlock(&o->lock);
	if (o->o.wake)
		o->o.wake(o->o.arg);
	return ret;
}

int order_truncate(struct order *o, uint64_t node, off_t size)
{
	int ret = 0;

	if (size != 0)
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	struct stream *s = stream_of(o, node);
	if (s)
		stream_reset(o, s);
	else
		ret = -ENOENT;
	pthread_mutex_unlock(&o->lock);
	return ret;
}

int order_unlink(struct order *o, uint64_t parent, const char *name, uint32_t uid)
{
	int ret = 0;

	if (parent != ORDER_DIR_NODE)
		return -EROFS;
	pthread_mutex_lock(&o->lock);
	struct stream *s = find_stream(o, name);
	if (!s)
		ret = -ENOENT;
	else if (s->uid != uid && !privileged(uid))
		ret = -EPERM;
	else
		order_stream_end(o, s);
	pthread_mutex_unlock(&o->lock);
	return ret;
}

ssize_t order_read(struct order *o, uint64_t node, void *buf, size_t len, off_t off)
{
	char text[STATUS_BYTES];
	ssize_t n = -ENOENT;

	if (node == ORDER_DIR_NODE)
		return -EISDIR;
	pthread_mutex_lock(&o->lock);
	struct stream *s = stream_of(o, node);
	if (s) {
		size_t t = (size_t)status_text(s, text);
		n = off < 0 ? -EINVAL : (size_t)off >= t ? 0 : (ssize_t)(t - (size_t)off < len ? t - (size_t)off : len);
		if (n > 0)
			memcpy(buf, text + off, (size_t)n);
	}
	pthread_mutex_unlock(&o->lock);
	return n;
}

const char *order_dirent(struct order *o, uint64_t pos, char *name, size_t len)
{
	const char *ret = NULL;
	uint64_t k = 0;

	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < ORDER_MAX_STREAMS && !ret; i++)
		if (o->streams[i].used && k++ == pos) {
			snprintf(name, len, "%s", o->streams[i].name);
			ret = name;
		}
	pthread_mutex_unlock(&o->lock);
	return ret;
}
