/* backend_host.c - the host backend of backend.h: the consumer's device is
 * this CPU and its memory, the conversion is norm_host() at once.
 *
 * DESIGN: nothing is asynchronous, so a fence has nothing to mark (NULL)
 * and every wait is already over. What is left is exactly the work a GPU
 * takes over (the conversion), which makes this backend the reference the
 * CUDA one is compared with, byte for byte, through the same consumer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/backend.h"
#include "gpu/dlpack.h"

static void host_destroy(struct gpu_backend *b)
{
	free(b);
}

static int host_alloc(struct gpu_backend *b, size_t len, void **p)
{
	*p = malloc(len ? len : 1);
	if (!*p) {
		snprintf(b->why, sizeof(b->why), "out of memory for %zu bytes", len);
		return -ENOMEM;
	}
	return 0;
}

static void host_free(struct gpu_backend *b, void *p)
{
	(void)b;
	free(p);
}

static int out_alloc(struct gpu_backend *b, size_t len, void **p)
{
	if (posix_memalign(p, 256, len ? len : 1)) {
		snprintf(b->why, sizeof(b->why), "out of memory for %zu bytes", len);
		return -ENOMEM;
	}
	return 0;
}

static int fence_new(struct gpu_backend *b, void **f)
{
	(void)b;
	*f = NULL;
	return 0;
}

static void fence_free(struct gpu_backend *b, void *f)
{
	(void)b, (void)f;
}

static int fence_record(struct gpu_backend *b, void *f, uint64_t stream)
{
	(void)b, (void)f, (void)stream;
	return 0;
}

static int fence_sync(struct gpu_backend *b, void *f)
{
	(void)b, (void)f;
	return 0;
}

static int fence_wait(struct gpu_backend *b, void *f, uint64_t stream)
{
	(void)b, (void)f, (void)stream;
	return 0;
}

static int convert(struct gpu_backend *b, const struct norm_job *j, const void *src, void *dst, void *after,
		   void *copied, void *done)
{
	(void)b, (void)after, (void)copied, (void)done;
	norm_host(j, src, dst);
	return 0;
}

static const struct gpu_backend_ops host_ops = {
	.destroy = host_destroy,
	.host_alloc = host_alloc,
	.host_free = host_free,
	.out_alloc = out_alloc,
	.out_free = host_free,
	.fence_new = fence_new,
	.fence_free = fence_free,
	.fence_record = fence_record,
	.fence_sync = fence_sync,
	.fence_wait = fence_wait,
	.convert = convert,
};

int backend_host_new(struct gpu_backend **out)
{
	struct gpu_backend *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->ops = &host_ops;
	b->dl_device_type = kDLCPU;
	b->device = 0;
	*out = b;
	return 0;
}
