/* prepdir.c - see prepdir.h.
 *
 * DESIGN
 * - Node layout: bits 63 and 62 set; kind in bits 58-61; group slot in
 *   52-57; the slot's generation in 36-51; a payload in 0-35 (an epoch, a
 *   text version, or a batch reader's id).
 * - Groups live in PREPDIR_MAX_GROUPS slots. Declaring one (the first valid
 *   write of its spec) scans its root and starts its workers while holding
 *   the prepdir lock: rare, and it makes k jobs declaring the same group at
 *   once simple (the second sees the first's group).
 * - Batch reads never block the FUSE thread: a read of a batch not made yet
 *   is queued in the group and answered by the worker that makes it. A
 *   node's reader is closed when the kernel forgets the node; the batch's
 *   pixels are freed long before, once its consumers have read it.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "prepdir.h"

enum { K_DIR, K_GROUP, K_EPOCH, K_BATCH, K_SPEC, K_ERROR };

#define KIND(n) ((unsigned)((n) >> 58) & 15u)
#define SLOT(n) ((unsigned)((n) >> 52) & 63u)
#define GEN(n) ((uint16_t)((n) >> 36))
#define PAYLOAD(n) ((n) & ((1ull << 36) - 1))
#define READER_BUCKETS 1024

struct slot {
	struct prepdir *pd;
	int used;
	uint16_t gen;
	char name[NAME_MAX + 1];
	struct group *g;
	char spec[SPEC_MAX_BYTES + 1];      /* canonical text of the group's spec */
	size_t spec_len;
	char wbuf[SPEC_MAX_BYTES];          /* text written so far */
	size_t wlen;
	int pending;                        /* written since the last commit */
	uint32_t ver;                       /* bumped whenever the spec text changes */
	uint64_t stamp;                     /* when it was created: the oldest unused goes first */
};

/* Why a spec was refused: NAME.error. Kept apart from the slots, in a
 * table of its own whose oldest entry makes room, so refusals never hold a
 * group's slot (500 refused specs in a row leave every slot free). */
struct perr {
	int used;
	uint16_t gen;                       /* bumped when the entry is reused or cleared */
	uint32_t ver;                       /* bumped whenever the text changes */
	uint64_t stamp;                     /* when it was last set: the oldest goes first */
	char name[NAME_MAX + 1];
	char text[600];
};

struct rnode {
	uint64_t node;
	uint64_t nlookup;
	unsigned slot;
	uint16_t gen;
	uint32_t epoch;
	uint64_t index;
	size_t size;
	struct group_reader *r;             /* NULL once its group ended */
	unsigned inflight;                  /* reads not answered yet */
	int forgotten;                      /* free when the last read ends */
	struct rnode *next;
};

struct prepdir {
	struct prepdir_io io;
	struct group_opts o;
	pthread_mutex_t lock;               /* slots, readers, next_reader */
	struct slot slots[PREPDIR_MAX_GROUPS];
	struct perr errs[PREPDIR_MAX_ERRORS];
	uint64_t err_clock;                 /* stamps of errors and slots */
	struct rnode *readers[READER_BUCKETS];
	uint64_t next_reader;
	char names[PREPDIR_MAX_GROUPS * 3][NAME_MAX + 8];   /* dirent scratch */
};

static uint64_t mknode(unsigned kind, unsigned slot, uint16_t gen, uint64_t payload)
{
	return CONTROL_NODE_BIT | PREPDIR_NODE_BIT | (uint64_t)kind << 58 | (uint64_t)slot << 52 |
	       (uint64_t)gen << 36 | (payload & ((1ull << 36) - 1));
}

int prepdir_new(const struct prepdir_io *io, const struct group_opts *o, struct prepdir **out)
{
	struct prepdir *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return -ENOMEM;
	pd->io = *io;
	pd->o = *o;
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++)
		pd->slots[i].pd = pd;
	pthread_mutex_init(&pd->lock, NULL);
	*out = pd;
	return 0;
}

void prepdir_free(struct prepdir *pd)
{
	if (!pd)
		return;
	for (unsigned b = 0; b < READER_BUCKETS; b++)
		for (struct rnode *r = pd->readers[b], *next; r; r = next) {
			next = r->next;
			group_close(r->r);
			free(r);
		}
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++)
		group_free(pd->slots[i].g);
	pthread_mutex_destroy(&pd->lock);
	free(pd);
}

/* The error entry an error node names, if it still holds that name. */
static struct perr *error_of(struct prepdir *pd, uint64_t node)
{
	struct perr *e = &pd->errs[SLOT(node)];

	return e->used && e->gen == GEN(node) ? e : NULL;
}

/* The slot a node names, if that slot still holds the same generation. */
static struct slot *slot_of(struct prepdir *pd, uint64_t node)
{
	struct slot *s = &pd->slots[SLOT(node)];

	return s->used && s->gen == GEN(node) ? s : NULL;
}

static struct perr *find_error(struct prepdir *pd, const char *name, size_t len)
{
	for (unsigned i = 0; i < PREPDIR_MAX_ERRORS; i++) {
		struct perr *e = &pd->errs[i];
		if (e->used && strlen(e->name) == len && !memcmp(e->name, name, len))
			return e;
	}
	return NULL;
}

/* The refusal of NAME's spec, for NAME.error and the log. Lock held. */
static void set_error(struct prepdir *pd, const char *name, const char *text)
{
	struct perr *e = find_error(pd, name, strlen(name)), *oldest = &pd->errs[0];

	for (unsigned i = 0; i < PREPDIR_MAX_ERRORS && !e; i++) {
		if (!pd->errs[i].used)
			e = &pd->errs[i];
		else if (pd->errs[i].stamp < oldest->stamp)
			oldest = &pd->errs[i];
	}
	if (!e)
		e = oldest;
	if (!e->used || strcmp(e->name, name)) {
		e->gen++;               /* nodes of the entry's last name go stale */
		e->used = 1;
		snprintf(e->name, sizeof(e->name), "%s", name);
	}
	size_t n = strnlen(text, sizeof(e->text) - 2);
	memcpy(e->text, text, n);
	memcpy(e->text + n, "\n", 2);
	e->ver++;
	e->stamp = ++pd->err_clock;
	log_warn("prep: %s", text);
}

static void clear_error(struct prepdir *pd, const char *name)
{
	struct perr *e = find_error(pd, name, strlen(name));

	if (e) {
		e->used = 0;
		e->gen++;
	}
}

/* Gives slot S back once it holds neither a group nor text being written. */
static void release_slot(struct slot *s)
{
	s->used = 0;
	s->gen++;                           /* old nodes of this slot are stale now */
	s->wlen = 0;
	s->pending = 0;
}

static struct slot *find_name(struct prepdir *pd, const char *name, size_t len)
{
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++) {
		struct slot *s = &pd->slots[i];
		if (s->used && strlen(s->name) == len && !memcmp(s->name, name, len))
			return s;
	}
	return NULL;
}

/* Group names: letters, digits, '.', '_', '-', not starting with '.'. */
static int valid_name(const char *name, size_t len)
{
	if (!len || len > 200 || name[0] == '.')
		return 0;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return 1;
}

/* "NAME.EXT" with EXT one of spec/error: the name's length, or 0. */
static size_t split(const char *name, const char *ext)
{
	size_t n = strlen(name), e = strlen(ext);

	if (n <= e + 1 || name[n - e - 1] != '.' || strcmp(name + n - e, ext))
		return 0;
	return valid_name(name, n - e - 1) ? n - e - 1 : 0;
}

/* Parses NAME as PREFIX followed by the number printed with WIDTH digits. */
static int parse_num(const char *name, const char *prefix, int width, uint64_t *out)
{
	size_t p = strlen(prefix);
	char back[64];
	char *end;

	if (strncmp(name, prefix, p) || name[p] < '0' || name[p] > '9')
		return -1;
	errno = 0;
	*out = strtoull(name + p, &end, 10);
	if (errno || *end)
		return -1;
	snprintf(back, sizeof(back), "%s%0*llu", prefix, width, (unsigned long long)*out);
	return strcmp(back, name) ? -1 : 0;
}

static struct rnode *reader_find(struct prepdir *pd, uint64_t node)
{
	for (struct rnode *r = pd->readers[PAYLOAD(node) % READER_BUCKETS]; r; r = r->next)
		if (r->node == node)
			return r;
	return NULL;
}

static int commit(struct prepdir *pd, struct slot *s);

static void spec_attr(struct slot *s, unsigned i, struct prepdir_attr *a)
{
	*a = (struct prepdir_attr){ .node = mknode(K_SPEC, i, s->gen, s->ver), .writable = 1,
				    .size = s->g ? s->spec_len : s->wlen };
}

int prepdir_lookup(struct prepdir *pd, uint64_t parent, const char *name, struct prepdir_attr *a)
{
	int ret = -ENOENT;
	uint64_t v;

	pthread_mutex_lock(&pd->lock);
	if (parent == PREPDIR_DIR_NODE) {
		size_t n;
		struct slot *s;
		struct perr *e;
		if ((n = split(name, "spec")) && (s = find_name(pd, name, n)) && (s->g || s->wlen)) {
			spec_attr(s, (unsigned)(s - pd->slots), a);
			ret = 0;
		} else if ((n = split(name, "error")) && (e = find_error(pd, name, n))) {
			*a = (struct prepdir_attr){ .node = mknode(K_ERROR, (unsigned)(e - pd->errs), e->gen, e->ver),
						    .size = strlen(e->text) };
			ret = 0;
		} else if ((s = find_name(pd, name, strlen(name))) && !commit(pd, s) && s->g) {
			*a = (struct prepdir_attr){ .node = mknode(K_GROUP, (unsigned)(s - pd->slots), s->gen, 0),
						    .is_dir = 1 };
			ret = 0;
		}
	} else if (KIND(parent) == K_GROUP || KIND(parent) == K_EPOCH) {
		struct slot *s = slot_of(pd, parent);
		if (!s || !s->g) {
			ret = -ENOENT;
		} else if (KIND(parent) == K_GROUP) {
			if (!parse_num(name, "epoch-", 4, &v) && v < group_spec(s->g)->epochs) {
				*a = (struct prepdir_attr){ .node = mknode(K_EPOCH, SLOT(parent), s->gen, v), .is_dir = 1 };
				ret = 0;
			}
		} else if (!parse_num(name, "batch-", 6, &v) && v < group_batches(s->g)) {
			struct rnode *r = calloc(1, sizeof(*r));
			uint32_t epoch = (uint32_t)PAYLOAD(parent);
			ret = r ? group_open(s->g, epoch, v, &r->r) : -ENOMEM;
			if (!ret) {
				r->node = mknode(K_BATCH, SLOT(parent), s->gen, ++pd->next_reader);
				r->nlookup = 1;
				r->slot = SLOT(parent);
				r->gen = s->gen;
				r->epoch = epoch;
				r->index = v;
				r->size = group_batch_bytes(s->g, v);
				r->next = pd->readers[PAYLOAD(r->node) % READER_BUCKETS];
				pd->readers[PAYLOAD(r->node) % READER_BUCKETS] = r;
				*a = (struct prepdir_attr){ .node = r->node, .size = r->size };
			} else {
				free(r);
			}
		}
	} else {
		ret = -ENOTDIR;
	}
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

int prepdir_getattr(struct prepdir *pd, uint64_t node, struct prepdir_attr *a)
{
	int ret = 0;

	pthread_mutex_lock(&pd->lock);
	struct slot *s = slot_of(pd, node);
	switch (KIND(node)) {
	case K_DIR:
		*a = (struct prepdir_attr){ .node = node, .is_dir = 1, .writable = 1 };
		break;
	case K_GROUP:
	case K_EPOCH:
		if (!s || !s->g)
			ret = -ENOENT;
		else
			*a = (struct prepdir_attr){ .node = node, .is_dir = 1 };
		break;
	case K_SPEC:
		if (!s)
			ret = -ENOENT;
		else {
			spec_attr(s, SLOT(node), a);
			a->node = node;
		}
		break;
	case K_ERROR: {
		struct perr *e = error_of(pd, node);
		if (!e)
			ret = -ENOENT;
		else
			*a = (struct prepdir_attr){ .node = node, .size = strlen(e->text) };
		break;
	}
	case K_BATCH: {
		struct rnode *r = reader_find(pd, node);
		if (!r)
			ret = -ENOENT;
		else
			*a = (struct prepdir_attr){ .node = node, .size = r->size };
		break;
	}
	default:
		ret = -ENOENT;
	}
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

static ssize_t copy_text(const char *text, size_t n, void *buf, size_t len, off_t off)
{
	if (off < 0)
		return -EINVAL;
	if ((size_t)off >= n)
		return 0;
	if (len > n - (size_t)off)
		len = n - (size_t)off;
	memcpy(buf, text + off, len);
	return (ssize_t)len;
}

/* One batch read in flight: counted on its node, so a group is not ended
 * under it and a forgotten node is not freed under it. */
struct pread {
	struct prepdir *pd;
	struct rnode *r;
	group_read_fn fn;
	void *arg;
};

static void unlink_rnode(struct prepdir *pd, struct rnode *r)
{
	for (struct rnode **p = &pd->readers[PAYLOAD(r->node) % READER_BUCKETS]; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	group_close(r->r);
	free(r);
}

static void pread_done(void *arg, ssize_t res, const void *buf)
{
	struct pread *p = arg;
	struct prepdir *pd = p->pd;
	struct rnode *r = p->r;

	p->fn(p->arg, res, buf);
	pthread_mutex_lock(&pd->lock);
	if (--r->inflight == 0 && r->forgotten)
		unlink_rnode(pd, r);
	pthread_mutex_unlock(&pd->lock);
	free(p);
}

void prepdir_read(struct prepdir *pd, uint64_t node, size_t len, off_t off, group_read_fn fn, void *arg)
{
	pthread_mutex_lock(&pd->lock);
	struct slot *s = slot_of(pd, node);
	if (KIND(node) == K_SPEC || KIND(node) == K_ERROR) {
		char text[SPEC_MAX_BYTES + 1];
		ssize_t n = -ENOENT;
		size_t max = len < sizeof(text) ? len : sizeof(text);
		struct perr *e = KIND(node) == K_ERROR ? error_of(pd, node) : NULL;
		if (e)
			n = copy_text(e->text, strlen(e->text), text, max, off);
		else if (s && KIND(node) == K_SPEC)
			n = s->g ? copy_text(s->spec, s->spec_len, text, max, off)
				 : copy_text(s->wbuf, s->wlen, text, max, off);
		pthread_mutex_unlock(&pd->lock);
		fn(arg, n, text);
		return;
	}
	struct rnode *r = KIND(node) == K_BATCH ? reader_find(pd, node) : NULL;
	struct pread *p = r && r->r ? malloc(sizeof(*p)) : NULL;
	if (!p) {
		pthread_mutex_unlock(&pd->lock);
		fn(arg, KIND(node) != K_BATCH ? -EISDIR : r && r->r ? -ENOMEM : -ENOENT, NULL);
		return;
	}
	*p = (struct pread){ .pd = pd, .r = r, .fn = fn, .arg = arg };
	r->inflight++;
	struct group_reader *gr = r->r;
	pthread_mutex_unlock(&pd->lock);
	group_read_async(gr, off, len, pread_done, p);
}

/* The slot to give up when all are taken: one running no group, empty
 * ones first, then the oldest. NULL when every slot runs a group. */
static struct slot *reclaimable(struct prepdir *pd)
{
	struct slot *best = NULL;

	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++) {
		struct slot *s = &pd->slots[i];
		if (!s->used || s->g)
			continue;
		if (!best || (!s->wlen && best->wlen) || (!s->wlen == !best->wlen && s->stamp < best->stamp))
			best = s;
	}
	return best;
}

int prepdir_create(struct prepdir *pd, uint64_t parent, const char *name, struct prepdir_attr *a)
{
	size_t n = split(name, "spec");
	int ret = 0;

	if (parent != PREPDIR_DIR_NODE || !n)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = find_name(pd, name, n);
	if (!s) {
		for (unsigned i = 0; i < PREPDIR_MAX_GROUPS && !s; i++)
			if (!pd->slots[i].used)
				s = &pd->slots[i];
		if (!s && (s = reclaimable(pd))) {
			/* Every slot taken, some by specs that run no group: created
			 * and not yet closed (the kernel sends RELEASE late, in the
			 * background) or written and never committed. The oldest
			 * makes room; only running groups hold a slot for good. */
			log_warn("prep: %s.spec: dropped uncommitted to make room for %.*s.spec", s->name,
				 (int)n, name);
			release_slot(s);
		}
		if (!s) {
			ret = -ENOSPC;
			goto out;
		}
		uint16_t gen = (uint16_t)(s->gen + 1);
		memset(s, 0, sizeof(*s));
		s->pd = pd;
		s->used = 1;
		s->gen = gen;
		memcpy(s->name, name, n);
		s->stamp = ++pd->err_clock;
	}
	spec_attr(s, (unsigned)(s - pd->slots), a);
out:
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

/* The group's I/O, with its slot as context: reads go to the dataset,
 * bad samples to the log, once each, with their path. */
static ssize_t slot_read_file(void *ctx, const char *rel, void **buf, size_t *cap)
{
	struct slot *s = ctx;

	return s->pd->io.read_file(s->pd->io.ctx, rel, buf, cap);
}

static void slot_bad(void *ctx, const char *rel, int err)
{
	struct slot *s = ctx;

	/* One call site per kind of trouble: the log's rate limit is per call
	 * site, and a thousand corrupt JPEGs must not hide a vanished file. */
	if (err == -EFBIG)
		log_warn("prep: %s: %s: image too large; a gray substitute takes its place", s->name, rel);
	else if (err == -EBADMSG)
		log_warn("prep: %s: %s: not a readable JPEG; a gray substitute takes its place", s->name, rel);
	else
		log_warn("prep: %s: %s: %s; a gray substitute takes its place", s->name, rel, strerror(-err));
}

/* Records a refusal of slot S's spec (FMT takes the group's name, then
 * WHAT) in NAME.error and the log. A slot with no group running is given
 * back: the refused text is gone with it. Lock held. */
static void refuse(struct prepdir *pd, struct slot *s, const char *fmt, const char *what)
{
	char text[600];

	snprintf(text, sizeof(text), fmt, s->name, what);
	set_error(pd, s->name, text);
	s->ver++;                           /* what NAME.spec shows may differ now */
	if (!s->g)
		release_slot(s);
}

/* Applies the text written to slot S: parses it whole and starts the group,
 * or, if the group runs already, checks it asks for the same one. Errors go
 * to NAME.error and the log. Lock held. */
static int commit(struct prepdir *pd, struct slot *s)
{
	struct prep_spec sp;
	char err[300];

	if (!s->pending)
		return s->g ? 0 : -ENOENT;
	s->pending = 0;
	if (spec_parse(s->wbuf, s->wlen, &sp, err, sizeof(err)) < 0) {
		int running = s->g != NULL;
		refuse(pd, s, "%s.spec: %s", err);
		return running ? 0 : -EINVAL;
	}
	if (s->g) {
		if (memcmp(&sp, group_spec(s->g), sizeof(sp)))
			refuse(pd, s, "%s.spec: a different spec was written for a running group; it keeps its "
			       "spec (unlink .prep/%s.spec to end the group first)", s->name);
		return 0;
	}
	struct folder *f;
	if (pd->io.scan(pd->io.ctx, sp.root, &f, err, sizeof(err)) < 0) {
		refuse(pd, s, "%s.spec: %s", err);
		return -EINVAL;
	}
	uint32_t nsamples = folder_samples(f), nclasses = folder_classes(f);
	struct group_io gio = { .ctx = s, .read_file = slot_read_file, .bad = slot_bad };
	int e = group_new(&sp, f, &gio, &pd->o, &s->g, err, sizeof(err));
	if (e < 0) {
		s->g = NULL;
		refuse(pd, s, "%s.spec: %s", err[0] ? err : strerror(-e));
		return e == -EFBIG ? -EINVAL : e;
	}
	int l = spec_render(&sp, s->spec, sizeof(s->spec));
	s->spec_len = l > 0 ? (size_t)l : 0;
	clear_error(pd, s->name);
	s->ver++;
	log_info("prep: group %s: %u images in %u classes, %llu batches of %u an epoch, %u epochs, %u consumers",
		 s->name, nsamples, nclasses, (unsigned long long)group_batches(s->g), sp.batch, sp.epochs, sp.jobs);
	return 0;
}

ssize_t prepdir_write(struct prepdir *pd, uint64_t node, const void *buf, size_t len, off_t off)
{
	struct prep_spec sp;
	char err[300];
	ssize_t ret = (ssize_t)len;

	if (KIND(node) != K_SPEC)
		return -EROFS;
	if (off < 0 || (uint64_t)off + len > SPEC_MAX_BYTES)
		return -EFBIG;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = slot_of(pd, node);
	if (!s) {
		ret = -ENOENT;
		goto out;
	}
	memcpy(s->wbuf + off, buf, len);
	s->wlen = off ? ((size_t)off + len > s->wlen ? (size_t)off + len : s->wlen) : len;
	s->pending = 1;
	/* Each write must end a line, so the text is judged whole when the
	 * write returns and the writer sees EINVAL there: close() cannot say
	 * it (no FLUSH in no-open mode: answering FLUSH would cost every
	 * close of every file a round trip, 90k -> 22k files/s in a warm
	 * epoch, docs/design.md). Shells, printf, Python's and C's buffered
	 * files all write whole lines. */
	if (len && ((const char *)buf)[len - 1] != '\n') {
		unsigned line = 1;
		for (size_t i = 0; i + 1 < (size_t)off + len; i++)
			line += s->wbuf[i] == '\n';
		snprintf(err, sizeof(err), "line %u does not end with a newline: every write to a spec "
			 "must end a line (printf 'batch=64\\n', echo)", line);
		refuse(pd, s, "%s.spec: %s", err);
		ret = -EINVAL;
	} else if (spec_parse(s->wbuf, s->wlen, &sp, err, sizeof(err)) < 0) {
		refuse(pd, s, "%s.spec: %s", err);
		ret = -EINVAL;
	}
out:
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

void prepdir_release(struct prepdir *pd, uint64_t node)
{
	if (KIND(node) != K_SPEC)
		return;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = slot_of(pd, node);
	if (s)
		commit(pd, s);
	if (s && s->used && !s->g && !s->wlen)
		release_slot(s);            /* created and closed empty (touch): nothing declared */
	pthread_mutex_unlock(&pd->lock);
}

int prepdir_truncate(struct prepdir *pd, uint64_t node, off_t size)
{
	int ret = 0;

	if (KIND(node) != K_SPEC)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = slot_of(pd, node);
	if (!s)
		ret = -ENOENT;
	else if (size < 0 || (size_t)size > s->wlen)
		ret = -EINVAL;
	else {
		s->wlen = (size_t)size;
		s->pending = 1;
	}
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

int prepdir_unlink(struct prepdir *pd, uint64_t parent, const char *name)
{
	size_t n;
	int ret = 0;

	if (parent != PREPDIR_DIR_NODE)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	if ((n = split(name, "error"))) {
		char nm[NAME_MAX + 1];
		snprintf(nm, sizeof(nm), "%.*s", (int)n, name);
		if (find_error(pd, nm, n))
			clear_error(pd, nm);
		else
			ret = -ENOENT;
		goto out;
	}
	struct slot *s = (n = split(name, "spec")) ? find_name(pd, name, n) : NULL;
	if (!s) {
		ret = -ENOENT;
		goto out;
	}
	if (s->g) {
		/* Readers the kernel has not forgotten yet are closed here (their
		 * nodes answer ENOENT from now on); a read still in flight is the
		 * one reason to refuse. */
		unsigned idx = (unsigned)(s - pd->slots);
		for (unsigned bk = 0; bk < READER_BUCKETS && !ret; bk++)
			for (struct rnode *r = pd->readers[bk]; r; r = r->next)
				if (r->slot == idx && r->gen == s->gen && r->inflight)
					ret = -EBUSY;
		if (ret)
			goto out;
		for (unsigned bk = 0; bk < READER_BUCKETS; bk++)
			for (struct rnode *r = pd->readers[bk]; r; r = r->next)
				if (r->slot == idx && r->gen == s->gen) {
					group_close(r->r);
					r->r = NULL;
				}
		group_free(s->g);
		s->g = NULL;
		clear_error(pd, s->name);   /* its complaints end with it */
		log_info("prep: group %s ended", s->name);
	}
	release_slot(s);                    /* a group, or text not committed yet */
out:
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

void prepdir_forget(struct prepdir *pd, uint64_t node, uint64_t nlookup)
{
	if (KIND(node) != K_BATCH)
		return;
	pthread_mutex_lock(&pd->lock);
	struct rnode *r = reader_find(pd, node);
	if (r && r->nlookup > nlookup) {
		r->nlookup -= nlookup;
	} else if (r) {
		/* A reply can reach the kernel, and the kernel forget the node,
		 * before the read that sent it has unwound here. */
		r->forgotten = 1;
		if (!r->inflight)
			unlink_rnode(pd, r);
	}
	pthread_mutex_unlock(&pd->lock);
}

const char *prepdir_dirent(struct prepdir *pd, uint64_t dir, uint64_t pos, int *is_dir, char *name,
			   size_t len)
{
	const char *ret = NULL;

	pthread_mutex_lock(&pd->lock);
	if (dir == PREPDIR_DIR_NODE) {
		uint64_t k = 0;
		for (unsigned i = 0; i < PREPDIR_MAX_GROUPS && !ret; i++) {
			struct slot *s = &pd->slots[i];
			if (!s->used)
				continue;
			for (int e = 0; e < 2 && !ret; e++) {
				if ((e == 0 && !s->g) || (e == 1 && !s->g && !s->wlen))
					continue;
				if (k++ == pos) {
					snprintf(name, len, "%s%s", s->name, e == 0 ? "" : ".spec");
					*is_dir = e == 0;
					ret = name;
				}
			}
		}
		for (unsigned i = 0; i < PREPDIR_MAX_ERRORS && !ret; i++)
			if (pd->errs[i].used && k++ == pos) {
				snprintf(name, len, "%s.error", pd->errs[i].name);
				*is_dir = 0;
				ret = name;
			}
	} else if (KIND(dir) == K_GROUP || KIND(dir) == K_EPOCH) {
		struct slot *s = slot_of(pd, dir);
		if (s && s->g && KIND(dir) == K_GROUP && pos < group_spec(s->g)->epochs) {
			snprintf(name, len, "epoch-%04llu", (unsigned long long)pos);
			*is_dir = 1;
			ret = name;
		} else if (s && s->g && KIND(dir) == K_EPOCH && pos < group_batches(s->g)) {
			snprintf(name, len, "batch-%06llu", (unsigned long long)pos);
			*is_dir = 0;
			ret = name;
		}
	}
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

void prepdir_stats(struct prepdir *pd, struct group_stats *sum, uint64_t *groups)
{
	memset(sum, 0, sizeof(*sum));
	*groups = 0;
	pthread_mutex_lock(&pd->lock);
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++) {
		struct group_stats s;
		if (!pd->slots[i].g)
			continue;
		group_get_stats(pd->slots[i].g, &s);
		(*groups)++;
		sum->batches += s.batches;
		sum->produced += s.produced;
		sum->regenerated += s.regenerated;
		sum->freed += s.freed;
		sum->served_bytes += s.served_bytes;
		sum->images += s.images;
		sum->bad_samples += s.bad_samples;
		sum->cpu_ns += s.cpu_ns;
		sum->staged_bytes += s.staged_bytes;
		sum->staged_peak += s.staged_peak;
		sum->readers += s.readers;
		sum->dropped += s.dropped;
		sum->jobs += s.jobs;
	}
	pthread_mutex_unlock(&pd->lock);
}
