/* prepspec.c - declaring groups in .prep/: spec writes, the commit that
 * starts a group, refusals and NAME.error; see prepdir.h.
 *
 * DESIGN
 * - Each write must end a line, and the whole text written so far is
 *   judged at each write, so the writer sees EINVAL where it can (close()
 *   cannot report in no-open mode). The group starts at commit: the close
 *   of the file created, or the first lookup of .prep/NAME.
 * - Refusals live in a table of their own (the last PREPDIR_MAX_ERRORS), so
 *   a refused spec gives its slot back at once; only running groups hold a
 *   slot for good, and when every slot is taken a spec that runs no group
 *   yet makes room.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ns/prepdir_int.h"
#include "util/log.h"

struct perr *pd_find_error(struct prepdir *pd, const char *name, size_t len)
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
	struct perr *e = pd_find_error(pd, name, strlen(name)), *oldest = &pd->errs[0];

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


void pd_clear_error(struct prepdir *pd, const char *name)
{
	struct perr *e = pd_find_error(pd, name, strlen(name));

	if (e) {
		e->used = 0;
		e->gen++;
	}
}


/* Gives slot S back once it holds neither a group nor text being written. */
void pd_release_slot(struct slot *s)
{
	s->used = 0;
	s->gen++;                           /* old nodes of this slot are stale now */
	s->wlen = 0;
	s->pending = 0;
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
	size_t n = pd_split(name, "spec");
	int ret = 0;

	if (parent != PREPDIR_DIR_NODE || !n)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = pd_find_name(pd, name, n);
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
			pd_release_slot(s);
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
	pd_spec_attr(s, (unsigned)(s - pd->slots), a);
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
	char text[700];             /* a name of NAME_MAX bytes, twice, and the reason */

	snprintf(text, sizeof(text), fmt, s->name, what);
	set_error(pd, s->name, text);
	s->ver++;                           /* what NAME.spec shows may differ now */
	if (!s->g)
		pd_release_slot(s);
}


/* Applies the text written to slot S: parses it whole and starts the group,
 * or, if the group runs already, checks it asks for the same one. Errors go
 * to NAME.error and the log. Lock held. */
int pd_commit(struct prepdir *pd, struct slot *s)
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
		/* Compared as canonical text: a struct's padding is no part of a spec. */
		char mine[SPEC_MAX_BYTES + 1];
		if (spec_render(&sp, mine, sizeof(mine)) < 0 || strcmp(mine, s->spec))
			refuse(pd, s, "%s.spec: a different spec was written for a running group; it keeps its "
			       "spec (unlink .prep/%s.spec to end the group first)", s->name);
		else
			pd_clear_error(pd, s->name);    /* the spec it runs: nothing to complain of */
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
	pd_clear_error(pd, s->name);
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
	struct slot *s = pd_slot_of(pd, node);
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
	struct slot *s = pd_slot_of(pd, node);
	if (s)
		pd_commit(pd, s);
	if (s && s->used && !s->g && !s->wlen)
		pd_release_slot(s);            /* created and closed empty (touch): nothing declared */
	pthread_mutex_unlock(&pd->lock);
}


int prepdir_truncate(struct prepdir *pd, uint64_t node, off_t size)
{
	int ret = 0;

	if (KIND(node) != K_SPEC)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	struct slot *s = pd_slot_of(pd, node);
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

