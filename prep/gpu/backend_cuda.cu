/* backend_cuda.cu - the CUDA backend of backend.h (`make CUDA=1` only):
 * batch files in pinned host memory, copied on one stream of the backend's
 * own, converted there by norm_launch() into device memory.
 *
 * DESIGN: one non-blocking stream carries every copy and kernel in order,
 * so one device staging buffer for the raw pixels is enough: a copy queued
 * after a kernel cannot overwrite what that kernel still reads. Copies go
 * from pinned memory (the only kind cudaMemcpyAsync copies asynchronously,
 * by DMA, without a CPU bounce through a staging buffer of the driver's).
 * Fences are events without timing. A batch that needs no conversion (a
 * float32 group in the layout asked for) is copied straight into its
 * output. The stream is not the training job's: consumer.c makes the job's
 * stream wait on the batch's event instead of blocking the host.
 *
 * Every operation starts with cudaSetDevice(): deleters run on whatever
 * thread drops the last reference, and the current device is per thread.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/backend.h"
#include "gpu/dlpack.h"

struct cuda_backend {
	struct gpu_backend base;    /* first: the ops get &base */
	cudaStream_t stream;
	void *stage;                /* the raw pixels on the device */
	size_t stage_cap;
};

static struct cuda_backend *cuda_of(struct gpu_backend *b)
{
	return (struct cuda_backend *)b;
}

static int fail(struct gpu_backend *b, cudaError_t e, const char *what)
{
	snprintf(b->why, sizeof(b->why), "%s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int backend_cuda_device(int device, char *why, size_t len)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	/* Said plainly: CUDA names a missing driver "driver version is
	 * insufficient", which reads like an upgrade to do on a machine that
	 * simply has no GPU. */
	if (e == cudaErrorInsufficientDriver) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
		if (!h) {
			snprintf(why, len, "no CUDA device: no GPU here (no NVIDIA driver: libcuda.so.1 is not "
				 "installed)");
			return -ENODEV;
		}
		dlclose(h);
		snprintf(why, len, "no CUDA device: the NVIDIA driver is older than this CUDA runtime needs (%s)",
			 cudaGetErrorString(e));
		return -ENODEV;
	}
	if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
		snprintf(why, len, "no CUDA device: no GPU here (the NVIDIA driver sees none)");
		return -ENODEV;
	}
	if (e != cudaSuccess) {
		snprintf(why, len, "no CUDA device: %s", cudaGetErrorString(e));
		return -ENODEV;
	}
	if (device < 0 || device >= n) {
		snprintf(why, len, "no CUDA device: device %d asked for, %d present", device, n);
		return -ENODEV;
	}
	e = cudaSetDevice(device);
	if (e != cudaSuccess) {
		snprintf(why, len, "no CUDA device: device %d: %s", device, cudaGetErrorString(e));
		return -ENODEV;
	}
	return 0;
}

static void cuda_destroy(struct gpu_backend *b)
{
	struct cuda_backend *cb = cuda_of(b);

	cudaSetDevice(b->device);
	cudaStreamSynchronize(cb->stream);
	cudaFree(cb->stage);
	cudaStreamDestroy(cb->stream);
	free(cb);
}

static int host_alloc(struct gpu_backend *b, size_t len, void **p)
{
	cudaError_t e;

	cudaSetDevice(b->device);
	e = cudaMallocHost(p, len ? len : 1);
	return e == cudaSuccess ? 0 : fail(b, e, "pinned host memory for a batch file");
}

static void host_free(struct gpu_backend *b, void *p)
{
	cudaSetDevice(b->device);
	cudaFreeHost(p);
}

static int out_alloc(struct gpu_backend *b, size_t len, void **p)
{
	cudaError_t e;

	cudaSetDevice(b->device);
	e = cudaMalloc(p, len ? len : 1);
	return e == cudaSuccess ? 0 : fail(b, e, "device memory for a batch");
}

static void out_free(struct gpu_backend *b, void *p)
{
	cudaSetDevice(b->device);
	cudaFree(p);
}

static int fence_new(struct gpu_backend *b, void **f)
{
	cudaError_t e;

	cudaSetDevice(b->device);
	e = cudaEventCreateWithFlags((cudaEvent_t *)f, cudaEventDisableTiming);
	return e == cudaSuccess ? 0 : fail(b, e, "cudaEventCreate");
}

static void fence_free(struct gpu_backend *b, void *f)
{
	cudaSetDevice(b->device);
	cudaEventDestroy((cudaEvent_t)f);
}

static int fence_record(struct gpu_backend *b, void *f, uint64_t stream)
{
	cudaSetDevice(b->device);
	return cudaEventRecord((cudaEvent_t)f, (cudaStream_t)(uintptr_t)stream) == cudaSuccess ? 0 : -EIO;
}

static int fence_sync(struct gpu_backend *b, void *f)
{
	cudaError_t e;

	cudaSetDevice(b->device);
	e = cudaEventSynchronize((cudaEvent_t)f);
	return e == cudaSuccess ? 0 : fail(b, e, "waiting for a batch");
}

static int fence_wait(struct gpu_backend *b, void *f, uint64_t stream)
{
	cudaError_t e;

	cudaSetDevice(b->device);
	e = cudaStreamWaitEvent((cudaStream_t)(uintptr_t)stream, (cudaEvent_t)f, 0);
	return e == cudaSuccess ? 0 : fail(b, e, "making the consumer's stream wait for a batch");
}

static int convert(struct gpu_backend *b, const struct norm_job *j, const void *src, void *dst, void *after,
		   void *copied, void *done)
{
	struct cuda_backend *cb = cuda_of(b);
	size_t in = norm_in_bytes(j);
	const char *w;
	cudaError_t e;
	int err;

	cudaSetDevice(b->device);
	if (after && (e = cudaStreamWaitEvent(cb->stream, (cudaEvent_t)after, 0)) != cudaSuccess)
		return fail(b, e, "waiting for a batch's buffer to be released");
	if (j->mode == NORM_NONE && j->in_layout == j->out_layout) {
		if ((e = cudaMemcpyAsync(dst, src, in, cudaMemcpyHostToDevice, cb->stream)) != cudaSuccess)
			return fail(b, e, "cudaMemcpyAsync");
		if ((e = cudaEventRecord((cudaEvent_t)copied, cb->stream)) != cudaSuccess ||
		    (e = cudaEventRecord((cudaEvent_t)done, cb->stream)) != cudaSuccess)
			return fail(b, e, "cudaEventRecord");
		return 0;
	}
	if (cb->stage_cap < in) {
		cudaStreamSynchronize(cb->stream);  /* the old buffer may still be read */
		cudaFree(cb->stage);
		cb->stage = NULL;
		cb->stage_cap = 0;
		if ((e = cudaMalloc(&cb->stage, in)) != cudaSuccess)
			return fail(b, e, "device memory for a batch's raw pixels");
		cb->stage_cap = in;
	}
	if ((e = cudaMemcpyAsync(cb->stage, src, in, cudaMemcpyHostToDevice, cb->stream)) != cudaSuccess)
		return fail(b, e, "cudaMemcpyAsync");
	if ((e = cudaEventRecord((cudaEvent_t)copied, cb->stream)) != cudaSuccess)
		return fail(b, e, "cudaEventRecord");
	err = norm_launch(j, cb->stage, dst, cb->stream, &w);
	if (err) {
		snprintf(b->why, sizeof(b->why), "the conversion kernel: %s", w);
		return err;
	}
	if ((e = cudaEventRecord((cudaEvent_t)done, cb->stream)) != cudaSuccess)
		return fail(b, e, "cudaEventRecord");
	return 0;
}

static const struct gpu_backend_ops cuda_ops = {
	cuda_destroy, host_alloc, host_free, out_alloc, out_free, fence_new, fence_free,
	fence_record, fence_sync, fence_wait, convert,
};

int backend_cuda_new(int device, struct gpu_backend **out, char *why, size_t len)
{
	struct cuda_backend *cb;
	cudaError_t e;
	int err;

	err = backend_cuda_device(device, why, len);
	if (err)
		return err;
	cb = (struct cuda_backend *)calloc(1, sizeof(*cb));
	if (!cb) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		snprintf(why, len, "cudaStreamCreate: %s", cudaGetErrorString(e));
		free(cb);
		return -EIO;
	}
	cb->base.ops = &cuda_ops;
	cb->base.dl_device_type = kDLCUDA;
	cb->base.device = device;
	*out = &cb->base;
	return 0;
}
