/* prepdir.c - .prep/: group names, node numbers, lookups and batch readers;
 * declaring (spec writes, commits, NAME.error) is fs/core/prepspec.c. See prepdir.h.
 *
 * DESIGN
 * - Node layout: bits 63 and 62 set; kind in bits 58-61; group slot in
 *   52-57; the slot's generation in 36-51; a payload in 0-35 (an epoch, a
 *   text version, or a batch reader's id).
 * - Groups live in PREPDIR_MAX_GROUPS slots. Declaring one (the first valid
 *   write of its spec) scans its root and starts its workers while holding
 *   the prepdir lock: rare, and it makes k jobs declaring the same group at
 *   once simple (the second sees the first's group).
 * - Memory: one pool (prep/group.h) for all groups, of --prep-mem bytes;
 *   the groups share it, so 64 groups hold what one may.
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
#include <sys/mount.h>
#include <unistd.h>

#include "core/ns/prepdir_int.h"
#include "util/log.h"

/* Adds the counters of S (what only grows) to SUM. */
static void add_counters(struct group_stats *sum, const struct group_stats *s)
{
	sum->produced += s->produced;
	sum->regenerated += s->regenerated;
	sum->freed += s->freed;
	sum->served_bytes += s->served_bytes;
	sum->handed += s->handed;
	sum->handed_bytes += s->handed_bytes;
	sum->hand_refused += s->hand_refused;
	sum->images += s->images;
	sum->bad_samples += s->bad_samples;
	sum->cpu_ns += s->cpu_ns;
	sum->dropped += s->dropped;
}


int prepdir_new(const struct prepdir_io *io, const struct group_opts *o, struct prepdir **out)
{
	struct prepdir *pd = calloc(1, sizeof(*pd));

	int err;

	if (!pd)
		return -ENOMEM;
	pd->io = *io;
	pd->o = *o;
	/* One pool for every group: o->mem is the total (--prep-mem). */
	if ((err = group_pool_new(o->mem, &pd->o.pool)) < 0) {
		free(pd);
		return err;
	}
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
	/* Reads and opens still waiting are failed first, while their nodes
	 * are alive (pread_done touches them); then no callback runs. */
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++)
		if (pd->slots[i].g)
			group_stop(pd->slots[i].g);
	for (unsigned b = 0; b < READER_BUCKETS; b++)
		for (struct rnode *r = pd->readers[b], *next; r; r = next) {
			next = r->next;
			group_close(r->r);
			free(r);
		}
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++)
		group_free(pd->slots[i].g);
	group_pool_free(pd->o.pool);
	if (pd->o.bufs == GROUP_BUF_DIR)
		close(pd->o.files_dir);
	pthread_mutex_destroy(&pd->lock);
	free(pd);
}


/* The error entry an error node names, if it still holds that name. */
struct perr *pd_error_of(struct prepdir *pd, uint64_t node)
{
	struct perr *e = &pd->errs[SLOT(node)];

	return e->used && e->gen == GEN(node) ? e : NULL;
}


/* The slot a node names, if that slot still holds the same generation. */
struct slot *pd_slot_of(struct prepdir *pd, uint64_t node)
{
	struct slot *s = &pd->slots[SLOT(node)];

	return s->used && s->gen == GEN(node) ? s : NULL;
}


struct slot *pd_find_name(struct prepdir *pd, const char *name, size_t len)
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
size_t pd_split(const char *name, const char *ext)
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


void pd_spec_attr(struct slot *s, unsigned i, struct prepdir_attr *a)
{
	*a = (struct prepdir_attr){ .node = pd_mknode(K_SPEC, i, s->gen, s->ver), .writable = 1,
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
		if ((n = pd_split(name, "spec")) && (s = pd_find_name(pd, name, n)) && (s->g || s->wlen)) {
			pd_spec_attr(s, (unsigned)(s - pd->slots), a);
			ret = 0;
		} else if ((n = pd_split(name, "error")) && (e = pd_find_error(pd, name, n))) {
			*a = (struct prepdir_attr){ .node = pd_mknode(K_ERROR, (unsigned)(e - pd->errs), e->gen, e->ver),
						    .size = strlen(e->text) };
			ret = 0;
		} else if ((s = pd_find_name(pd, name, strlen(name))) && !pd_commit(pd, s) && s->g) {
			*a = (struct prepdir_attr){ .node = pd_mknode(K_GROUP, (unsigned)(s - pd->slots), s->gen, 0),
						    .is_dir = 1 };
			ret = 0;
		}
	} else if (KIND(parent) == K_GROUP || KIND(parent) == K_EPOCH) {
		struct slot *s = pd_slot_of(pd, parent);
		if (!s || !s->g) {
			ret = -ENOENT;
		} else if (KIND(parent) == K_GROUP) {
			if (!parse_num(name, "epoch-", 4, &v) && v < group_spec(s->g)->epochs) {
				*a = (struct prepdir_attr){ .node = pd_mknode(K_EPOCH, SLOT(parent), s->gen, v), .is_dir = 1 };
				ret = 0;
			}
		} else if (!parse_num(name, "batch-", 6, &v) && v < group_batches(s->g)) {
			struct rnode *r = calloc(1, sizeof(*r));
			uint32_t epoch = (uint32_t)PAYLOAD(parent);
			ret = r ? group_open(s->g, epoch, v, &r->r) : -ENOMEM;
			if (!ret) {
				r->node = pd_mknode(K_BATCH, SLOT(parent), s->gen, ++pd->next_reader);
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
	struct slot *s = pd_slot_of(pd, node);
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
			pd_spec_attr(s, SLOT(node), a);
			a->node = node;
		}
		break;
	case K_ERROR: {
		struct perr *e = pd_error_of(pd, node);
		if (!e)
			ret = -ENOENT;
		else
			*a = (struct prepdir_attr){ .node = node, .size = strlen(e->text) };
		break;
	}
	case K_BATCH: {
		struct rnode *r = reader_find(pd, node);
		if (!r || !r->r)        /* its group ended: the node waits for its forget */
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
	struct slot *s = pd_slot_of(pd, node);
	if (KIND(node) == K_SPEC || KIND(node) == K_ERROR) {
		char text[SPEC_MAX_BYTES + 1];
		ssize_t n = -ENOENT;
		size_t max = len < sizeof(text) ? len : sizeof(text);
		struct perr *e = KIND(node) == K_ERROR ? pd_error_of(pd, node) : NULL;
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


int prepdir_unlink(struct prepdir *pd, uint64_t parent, const char *name)
{
	size_t n;
	int ret = 0;

	if (parent != PREPDIR_DIR_NODE)
		return -EROFS;
	pthread_mutex_lock(&pd->lock);
	if ((n = pd_split(name, "error"))) {
		char nm[NAME_MAX + 1];
		snprintf(nm, sizeof(nm), "%.*s", (int)n, name);
		if (pd_find_error(pd, nm, n))
			pd_clear_error(pd, nm);
		else
			ret = -ENOENT;
		goto out;
	}
	struct slot *s = (n = pd_split(name, "spec")) ? pd_find_name(pd, name, n) : NULL;
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
		struct group_stats gs;
		group_get_stats(s->g, &gs);
		add_counters(&pd->ended, &gs);  /* counters never go back */
		group_free(s->g);
		s->g = NULL;
		pd_clear_error(pd, s->name);   /* its complaints end with it */
		log_info("prep: group %s ended", s->name);
	}
	pd_release_slot(s);                    /* a group, or text not committed yet */
out:
	pthread_mutex_unlock(&pd->lock);
	return ret;
}


void prepdir_pt_open_async(struct prepdir *pd, uint64_t node, group_read_fn fn, void *arg)
{
	if (KIND(node) != K_BATCH) {
		fn(arg, -EAGAIN, NULL);
		return;
	}
	pthread_mutex_lock(&pd->lock);
	struct rnode *r = reader_find(pd, node);
	struct pread *p = r && r->r ? malloc(sizeof(*p)) : NULL;
	if (!p) {
		pthread_mutex_unlock(&pd->lock);
		fn(arg, r && r->r ? -ENOMEM : -ENOENT, NULL);
		return;
	}
	/* In flight as a read is: the node and its reader stay until the
	 * open is answered (pread_done). */
	*p = (struct pread){ .pd = pd, .r = r, .fn = fn, .arg = arg };
	r->inflight++;
	struct group_reader *gr = r->r;
	pthread_mutex_unlock(&pd->lock);
	group_pt_open_async(gr, pread_done, p);
}

void prepdir_pt_close(struct prepdir *pd, uint64_t node, int read)
{
	if (KIND(node) != K_BATCH)
		return;
	pthread_mutex_lock(&pd->lock);
	struct rnode *r = reader_find(pd, node);
	if (r && r->r)              /* NULL: its group ended and took the pin back */
		group_pt_close(r->r, read);
	pthread_mutex_unlock(&pd->lock);
}

int prepdir_is_batch(uint64_t node)
{
	return KIND(node) == K_BATCH;
}

/* A tmpfs of the daemon's own, in no directory (a detached mount: nothing
 * to see or clean up, gone with its last file), with huge pages, for the
 * batch files the kernel reads by passthrough. -errno where the kernel
 * or the caller's rights refuse (batches then go to memfds). */
static int huge_tmpfs(void)
{
	int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt = -errno;

	if (fs < 0)
		return mnt;
	if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "within_size", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "size", "100%", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
	    (mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSUID)) < 0)
		mnt = -errno;
	close(fs);
	return mnt;
}

void prepdir_set_memfd(struct prepdir *pd, int on)
{
	int dir = on ? huge_tmpfs() : -EINVAL;

	pthread_mutex_lock(&pd->lock);
	if (pd->o.bufs == GROUP_BUF_DIR)
		close(pd->o.files_dir);
	pd->o.bufs = !on ? GROUP_BUF_MALLOC : dir >= 0 ? GROUP_BUF_DIR : GROUP_BUF_MEMFD;
	pd->o.files_dir = dir;
	if (on && dir >= 0)
		snprintf(pd->files_text, sizeof(pd->files_text), "tmpfs: files in a tmpfs of the daemon's own with "
			 "huge pages, read by the kernel (passthrough)");
	else if (on)
		snprintf(pd->files_text, sizeof(pd->files_text), "memfd: read by the kernel (passthrough); no tmpfs "
			 "of our own (%s), so 4 KiB pages", strerror(-dir));
	else
		snprintf(pd->files_text, sizeof(pd->files_text), "memory: copied to each consumer by the daemon");
	pthread_mutex_unlock(&pd->lock);
}

const char *prepdir_batch_files(struct prepdir *pd)
{
	/* Set once, at INIT, before any group can start. */
	return pd->files_text[0] ? pd->files_text : "memory: copied to each consumer by the daemon";
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
		struct slot *s = pd_slot_of(pd, dir);
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
	struct group_pool_stats ps;

	memset(sum, 0, sizeof(*sum));
	*groups = 0;
	pthread_mutex_lock(&pd->lock);
	add_counters(sum, &pd->ended);
	for (unsigned i = 0; i < PREPDIR_MAX_GROUPS; i++) {
		struct group_stats s;
		if (!pd->slots[i].g)
			continue;
		group_get_stats(pd->slots[i].g, &s);
		(*groups)++;
		add_counters(sum, &s);
		sum->batches += s.batches;
		sum->readers += s.readers;
		sum->jobs += s.jobs;
	}
	pthread_mutex_unlock(&pd->lock);
	/* The pool's own figures: the peak of the sum over groups, not the
	 * sum of each group's peak (groups peak at different times). */
	group_pool_get_stats(pd->o.pool, &ps);
	sum->staged_bytes = ps.staged;
	sum->staged_peak = ps.peak;
	sum->consumer_bytes = ps.orphaned;
	sum->consumer_peak = ps.orphaned_peak;
	sum->mem_limit = ps.limit;
}

