/* consumer.c - see consumer.h.
 *
 * DESIGN: the file is read on the caller's thread, into the slot's host
 * buffer, with pread() of the whole file: one system call per batch in the
 * common case, and the read of a `.prep/` file to its end is what counts it
 * as consumed. A reader thread would hide that read's latency too, but it
 * costs the same CPU, and ctypes releases the GIL around the call anyway;
 * it can come when a GPU measurement says the read is on the critical path.
 *
 * Lifetime: the consumer holds one reference for its owner and one per
 * tensor handed out. gpucons_free() waits for queued work, frees the ring
 * and the idle buffers, and drops the owner's reference; the last deleter
 * frees the rest (the backend, the lock). Buffers whose tensor is deleted
 * after that are freed, not pooled.
 *
 * Lock order: only c->lock, never held across a backend call that may block
 * (out_free, fence_sync); fence_record (non-blocking) is called outside it
 * too, before the buffer is published in the pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/batchfile.h"
#include "gpu/consumer.h"

struct outbuf {
	void *p;
	size_t cap;
	void *released;             /* fence: the job's stream is done with p */
	int fenced;                 /* released was recorded since p came back */
	struct outbuf *next;        /* in the pool */
};

struct slot {
	void *host;                 /* the batch file, whole */
	size_t host_cap;
	void *copied, *done;        /* fences: host may be reused; out is written */
	struct batch_header h;
	struct norm_job job;
	struct outbuf *out;         /* while queued */
	int32_t *labels;
	size_t labels_cap;
};

struct gpucons {
	struct gpu_backend *b;
	struct gpucons_opts o;
	struct slot *slots;         /* the owner's thread only, like head and queued */
	uint32_t depth, head, queued;
	pthread_mutex_t lock;
	struct outbuf *pool;        /* protected by lock */
	uint32_t pooled, buffers;   /* protected by lock */
	uint32_t refs;              /* protected by lock: the owner's + one per tensor */
	int closed;                 /* protected by lock */
	char why[512];              /* the owner's thread */
};

/* What a DLManagedTensor's manager_ctx points to. */
struct tensor {
	DLManagedTensor dl;
	int64_t shape[4], strides[4];
	struct gpucons *c;
	struct outbuf *buf;
	uint64_t stream;            /* the job's, where the buffer is used */
};

__attribute__((format(printf, 3, 4)))
static int fail(struct gpucons *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	return err;
}

static void outbuf_destroy(struct gpucons *c, struct outbuf *ob)
{
	const struct gpu_backend_ops *ops = c->b->ops;

	if (ob->fenced)
		ops->fence_sync(c->b, ob->released);
	ops->out_free(c->b, ob->p);
	ops->fence_free(c->b, ob->released);
	free(ob);
}

static void unref(struct gpucons *c)
{
	int last;

	pthread_mutex_lock(&c->lock);
	last = --c->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (!last)
		return;
	c->b->ops->destroy(c->b);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* A buffer of at least LEN bytes: a pooled one, or a new one. */
static int pool_get(struct gpucons *c, size_t len, struct outbuf **out)
{
	const struct gpu_backend_ops *ops = c->b->ops;
	struct outbuf **pp, *ob, *small = NULL;
	int err;

	pthread_mutex_lock(&c->lock);
	for (pp = &c->pool; *pp && (*pp)->cap < len; pp = &(*pp)->next)
		;
	ob = *pp;
	if (ob) {
		*pp = ob->next;
		c->pooled--;
	} else if (c->pool) {               /* all too small (a larger batch): replace one */
		small = c->pool;
		c->pool = small->next;
		c->pooled--;
		c->buffers--;
	}
	pthread_mutex_unlock(&c->lock);
	if (small)
		outbuf_destroy(c, small);
	if (ob) {
		*out = ob;
		return 0;
	}
	ob = calloc(1, sizeof(*ob));
	if (!ob)
		return fail(c, -ENOMEM, "out of memory");
	err = ops->out_alloc(c->b, len, &ob->p);
	if (!err) {
		err = ops->fence_new(c->b, &ob->released);
		if (err)
			ops->out_free(c->b, ob->p);
	}
	if (err) {
		free(ob);
		return fail(c, err, "%s", c->b->why);
	}
	ob->cap = len;
	pthread_mutex_lock(&c->lock);
	c->buffers++;
	pthread_mutex_unlock(&c->lock);
	*out = ob;
	return 0;
}

/* OB is no longer used by the consumer: back to the pool, or freed. With
 * STREAM (a deleter: the job used it there), fenced on it first; without,
 * its fence stays as it is (never handed out since). */
static void pool_put(struct gpucons *c, struct outbuf *ob, const uint64_t *stream)
{
	int keep;

	if (stream)
		ob->fenced = !c->b->ops->fence_record(c->b, ob->released, *stream);
	pthread_mutex_lock(&c->lock);
	keep = (!stream || ob->fenced) && !c->closed && c->pooled < c->depth + 2;
	if (keep) {
		ob->next = c->pool;
		c->pool = ob;
		c->pooled++;
	} else {
		c->buffers--;
	}
	pthread_mutex_unlock(&c->lock);
	if (!keep)
		outbuf_destroy(c, ob);      /* out_free waits for the device */
}

static void tensor_delete(DLManagedTensor *dl)
{
	struct tensor *t = dl->manager_ctx;
	struct gpucons *c = t->c;

	pool_put(c, t->buf, &t->stream);
	free(t);
	unref(c);
}

int gpucons_new(const struct gpucons_opts *o, struct gpu_backend *b, struct gpucons **out, char *why,
		size_t len)
{
	struct norm_job probe = { .n = 1, .h = 1, .w = 1, .c = 3, .in_dtype = BATCH_U8 };
	struct gpucons *c;
	const char *w;
	int err;

	probe.mode = o->mode == GPUCONS_AUTO ? NORM_SCALE : o->mode;
	probe.out_layout = o->out_layout;
	err = norm_prepare(&probe, o->mean, o->std, &w);
	if (!err && o->depth > GPUCONS_DEPTH_MAX) {
		w = "depth over 64";
		err = -EINVAL;
	}
	if (err) {
		snprintf(why, len, "%s", w);
		b->ops->destroy(b);
		return err;
	}
	c = calloc(1, sizeof(*c));
	if (c) {
		c->depth = o->depth ? o->depth : GPUCONS_DEPTH_DEFAULT;
		c->slots = calloc(c->depth, sizeof(*c->slots));
	}
	if (!c || !c->slots) {
		free(c);
		b->ops->destroy(b);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	c->b = b;
	c->o = *o;
	c->refs = 1;
	pthread_mutex_init(&c->lock, NULL);
	for (uint32_t i = 0; i < c->depth; i++) {
		err = b->ops->fence_new(b, &c->slots[i].copied);
		if (!err)
			err = b->ops->fence_new(b, &c->slots[i].done);
		if (err) {
			snprintf(why, len, "%s", b->why);
			gpucons_free(c);
			return err;
		}
	}
	*out = c;
	return 0;
}

static int read_file(struct gpucons *c, struct slot *s, const char *path)
{
	const struct gpu_backend_ops *ops = c->b->ops;
	const char *why;
	size_t len;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(c, -errno, "%s: %s", path, strerror(errno));
	for (;;) {
		err = batchfile_read(fd, s->host, s->host_cap, &s->h, &len, &why);
		if (err != -ENOBUFS)
			break;
		ops->host_free(c->b, s->host);
		s->host = NULL;
		s->host_cap = 0;
		err = ops->host_alloc(c->b, len, &s->host);
		if (err) {
			close(fd);
			return fail(c, err, "%s: %s", path, c->b->why);
		}
		s->host_cap = len;
	}
	close(fd);
	switch (err) {
	case 0:
		return 0;
	case -ENODATA:
	case -EBADMSG:
	case -EPROTONOSUPPORT:
	case -EFBIG:
		return fail(c, err, "%s: %s", path, why);
	default:
		return fail(c, err, "%s: %s: %s", path, why, strerror(-err));
	}
}

int gpucons_submit(struct gpucons *c, const char *path)
{
	const struct gpu_backend_ops *ops = c->b->ops;
	const uint8_t *lab;
	struct outbuf *ob = NULL;
	struct slot *s;
	const char *why;
	int err;

	if (c->queued == c->depth)
		return fail(c, -EBUSY, "%s: %u batches are queued already: take one first", path, c->depth);
	s = &c->slots[(c->head + c->queued) % c->depth];
	err = ops->fence_sync(c->b, s->copied);     /* its last copy may still read s->host */
	if (err)
		return fail(c, err, "%s: %s", path, c->b->why);
	err = read_file(c, s, path);
	if (err)
		return err;
	s->job = (struct norm_job){ .n = s->h.n, .h = s->h.h, .w = s->h.w, .c = s->h.c, .in_dtype = s->h.dtype,
				    .in_layout = s->h.layout, .mode = c->o.mode, .out_layout = c->o.out_layout };
	if (c->o.mode == GPUCONS_AUTO)
		s->job.mode = s->h.dtype == BATCH_F32 ? NORM_NONE : NORM_SCALE;
	err = norm_prepare(&s->job, c->o.mean, c->o.std, &why);
	if (err)
		return fail(c, err, "%s: %s", path, why);
	if (s->labels_cap < s->h.n) {
		int32_t *l = realloc(s->labels, s->h.n * sizeof(*l));
		if (!l)
			return fail(c, -ENOMEM, "%s: out of memory", path);
		s->labels = l;
		s->labels_cap = s->h.n;
	}
	lab = (const uint8_t *)s->host + s->h.labels_offset;
	for (uint32_t i = 0; i < s->h.n; i++, lab += 4)
		s->labels[i] = (int32_t)((uint32_t)lab[0] | (uint32_t)lab[1] << 8 | (uint32_t)lab[2] << 16 |
					 (uint32_t)lab[3] << 24);
	err = pool_get(c, norm_out_bytes(&s->job), &ob);
	if (err)
		return err;
	err = ops->convert(c->b, &s->job, (const char *)s->host + s->h.pixels_offset, ob->p,
			   ob->fenced ? ob->released : NULL, s->copied, s->done);
	if (err) {
		pool_put(c, ob, NULL);         /* its fence, if any, kept */
		return fail(c, err, "%s: %s", path, c->b->why);
	}
	ob->fenced = 0;             /* the wait for it is queued */
	s->out = ob;
	c->queued++;
	return 0;
}

int gpucons_next(struct gpucons *c, uint64_t stream, unsigned flags, struct gpucons_batch *out)
{
	const struct gpu_backend_ops *ops = c->b->ops;
	struct slot *s;
	struct tensor *t;
	DLTensor *d;
	int err;

	if (!c->queued)
		return fail(c, -ENOENT, "no batch submitted");
	s = &c->slots[c->head];
	err = flags & GPUCONS_SYNC ? ops->fence_sync(c->b, s->done) : ops->fence_wait(c->b, s->done, stream);
	if (err)
		return fail(c, err, "%s", c->b->why);
	t = calloc(1, sizeof(*t));
	if (!t)
		return fail(c, -ENOMEM, "out of memory");
	d = &t->dl.dl_tensor;
	d->data = s->out->p;
	d->device.device_type = c->b->dl_device_type;
	d->device.device_id = c->b->device;
	d->ndim = 4;
	d->dtype.code = s->job.out_dtype == BATCH_F32 ? kDLFloat : kDLUInt;
	d->dtype.bits = s->job.out_dtype == BATCH_F32 ? 32 : 8;
	d->dtype.lanes = 1;
	t->shape[0] = s->job.n;
	if (s->job.out_layout == BATCH_NCHW) {
		t->shape[1] = s->job.c, t->shape[2] = s->job.h, t->shape[3] = s->job.w;
	} else {
		t->shape[1] = s->job.h, t->shape[2] = s->job.w, t->shape[3] = s->job.c;
	}
	t->strides[3] = 1;
	for (int i = 2; i >= 0; i--)
		t->strides[i] = t->strides[i + 1] * t->shape[i + 1];
	d->shape = t->shape;
	d->strides = t->strides;
	d->byte_offset = 0;
	t->dl.manager_ctx = t;
	t->dl.deleter = tensor_delete;
	t->c = c;
	t->buf = s->out;
	t->stream = stream;
	pthread_mutex_lock(&c->lock);
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	s->out = NULL;
	c->head = (c->head + 1) % c->depth;
	c->queued--;
	*out = (struct gpucons_batch){ .images = &t->dl, .labels = s->labels, .n = s->h.n, .epoch = s->h.epoch,
				       .bad_samples = s->h.bad_samples, .index = s->h.index };
	return 0;
}

const char *gpucons_why(const struct gpucons *c)
{
	return c->why;
}

void gpucons_get_stats(struct gpucons *c, struct gpucons_stats *s)
{
	pthread_mutex_lock(&c->lock);
	s->queued = c->queued;
	s->buffers = c->buffers;
	s->pooled = c->pooled;
	s->tensors = c->refs - (c->closed ? 0 : 1);
	pthread_mutex_unlock(&c->lock);
}

void gpucons_free(struct gpucons *c)
{
	const struct gpu_backend_ops *ops;
	struct outbuf *pool;

	if (!c)
		return;
	ops = c->b->ops;
	for (; c->queued; c->queued--, c->head = (c->head + 1) % c->depth) {
		struct slot *s = &c->slots[c->head];
		ops->fence_sync(c->b, s->done);
		pool_put(c, s->out, NULL);  /* not closed yet: pooled, freed below */
		s->out = NULL;
	}
	for (uint32_t i = 0; i < c->depth; i++) {
		struct slot *s = &c->slots[i];
		if (s->copied)
			ops->fence_sync(c->b, s->copied);
		ops->host_free(c->b, s->host);
		ops->fence_free(c->b, s->copied);
		ops->fence_free(c->b, s->done);
		free(s->labels);
	}
	free(c->slots);
	c->slots = NULL;
	pthread_mutex_lock(&c->lock);
	c->closed = 1;
	pool = c->pool;
	c->pool = NULL;
	c->buffers -= c->pooled;
	c->pooled = 0;
	pthread_mutex_unlock(&c->lock);
	while (pool) {
		struct outbuf *next = pool->next;
		outbuf_destroy(c, pool);
		pool = next;
	}
	unref(c);
}
