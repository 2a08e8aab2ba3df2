/* probe.cu - see probe.h: the ingestion probe (`make CUDA=1` only).
 *
 * DESIGN: copies are timed on the host clock around a copy and a stream
 * synchronize, because that is what a consumer waits for: a pageable copy
 * is staged by the driver through its own pinned buffers on the CPU, which
 * device-side events would not see. The kernel is timed with events, on
 * device memory only, so the figure is the conversion and nothing else.
 * Medians, not means: the first copies after an allocation pay for page
 * faults and the driver's set-up, which the warm-up also absorbs. Pixel
 * values do not change the kernel's speed; they are filled anyway so the
 * pageable buffer is faulted in before it is timed.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/backend.h"
#include "gpu/normalize.h"
#include "gpu/probe.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int cuda_fail(cudaError_t e, const char *what, char *why, size_t len)
{
	snprintf(why, len, "%s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* Median seconds of a host-to-device copy of LEN bytes from SRC. */
static int time_copy(void *dst, const void *src, size_t len, cudaStream_t s, unsigned reps, double *t,
		     double *out, char *why, size_t whylen)
{
	cudaError_t e;

	for (unsigned k = 0; k < GPUPROBE_WARMUP + reps; k++) {
		double t0 = now();
		e = cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, s);
		if (e == cudaSuccess)
			e = cudaStreamSynchronize(s);
		if (e != cudaSuccess)
			return cuda_fail(e, "host-to-device copy", why, whylen);
		if (k >= GPUPROBE_WARMUP)
			t[k - GPUPROBE_WARMUP] = now() - t0;
	}
	*out = median(t, reps);
	return 0;
}

int gpuprobe_run(const struct gpuprobe_opts *o, struct gpuprobe_result *r, char *why, size_t len)
{
	static const float mean[NORM_MAX_C] = { 0.485f, 0.456f, 0.406f, 0.5f };
	static const float std[NORM_MAX_C] = { 0.229f, 0.224f, 0.225f, 0.25f };
	unsigned reps = o->reps ? o->reps : GPUPROBE_REPS_DEFAULT;
	uint8_t *pinned = NULL, *pageable = NULL;
	void *dev = NULL, *din = NULL, *dout = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	cudaStream_t s = NULL;
	struct norm_job j;
	struct cudaDeviceProp prop;
	size_t u8_bytes, bytes;
	double *t = NULL;
	const char *w;
	cudaError_t e;
	int err;

	memset(r, 0, sizeof(*r));
	memset(&j, 0, sizeof(j));
	j.n = o->n, j.h = o->h, j.w = o->w, j.c = o->c;
	j.in_dtype = BATCH_U8, j.in_layout = BATCH_NHWC;
	j.mode = NORM_AFFINE, j.out_layout = BATCH_NCHW;
	err = norm_prepare(&j, mean, std, &w);
	if (!err && (o->dtype > BATCH_F32 || reps > 1000)) {
		w = "dtype must be uint8 or float32, reps at most 1000";
		err = -EINVAL;
	}
	if (err) {
		snprintf(why, len, "%s", w);
		return err;
	}
	u8_bytes = norm_in_bytes(&j);
	bytes = o->dtype == BATCH_F32 ? norm_out_bytes(&j) : u8_bytes;
	err = backend_cuda_device(o->device, why, len);
	if (err)
		return err;
	e = cudaGetDeviceProperties(&prop, o->device);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaGetDeviceProperties", why, len);
	snprintf(r->device_name, sizeof(r->device_name), "%s", prop.name);
	r->device = o->device;
	r->reps = reps;
	r->warmup = GPUPROBE_WARMUP;
	r->copy_bytes = bytes;
	r->kernel_bytes = u8_bytes + norm_out_bytes(&j);

	t = (double *)calloc(reps, sizeof(*t));
	pageable = (uint8_t *)malloc(bytes);
	if (!t || !pageable) {
		snprintf(why, len, "out of memory for a batch of %zu bytes", bytes);
		err = -ENOMEM;
		goto out;
	}
	if ((e = cudaMallocHost((void **)&pinned, bytes)) != cudaSuccess) {
		err = cuda_fail(e, "pinned host memory for a batch", why, len);
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		pinned[i] = pageable[i] = (uint8_t)(i * 7);
	if ((e = cudaMalloc(&dev, bytes)) != cudaSuccess || (e = cudaMalloc(&dout, norm_out_bytes(&j))) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaEventCreate(&e0)) != cudaSuccess || (e = cudaEventCreate(&e1)) != cudaSuccess) {
		err = cuda_fail(e, "device memory, a stream and events for the probe", why, len);
		goto out;
	}
	err = time_copy(dev, pinned, bytes, s, reps, t, &r->pinned_s, why, len);
	if (!err)
		err = time_copy(dev, pageable, bytes, s, reps, t, &r->pageable_s, why, len);
	if (err)
		goto out;

	din = dev;                  /* the pinned pixels, copied above: uint8 by the first u8_bytes */
	for (unsigned k = 0; k < GPUPROBE_WARMUP + reps; k++) {
		float ms = 0;
		if ((e = cudaEventRecord(e0, s)) != cudaSuccess) {
			err = cuda_fail(e, "cudaEventRecord", why, len);
			goto out;
		}
		err = norm_launch(&j, din, dout, s, &w);
		if (err) {
			snprintf(why, len, "the conversion kernel: %s", w);
			goto out;
		}
		if ((e = cudaEventRecord(e1, s)) != cudaSuccess || (e = cudaEventSynchronize(e1)) != cudaSuccess ||
		    (e = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess) {
			err = cuda_fail(e, "timing the conversion kernel", why, len);
			goto out;
		}
		if (k >= GPUPROBE_WARMUP)
			t[k - GPUPROBE_WARMUP] = ms * 1e-3;
	}
	r->kernel_s = median(t, reps);
	r->pinned_gbps = r->pinned_s > 0 ? (double)bytes / r->pinned_s * 1e-9 : 0;
	r->pageable_gbps = r->pageable_s > 0 ? (double)bytes / r->pageable_s * 1e-9 : 0;
	r->kernel_gbps = r->kernel_s > 0 ? (double)r->kernel_bytes / r->kernel_s * 1e-9 : 0;
	r->kernel_batches_per_s = r->kernel_s > 0 ? 1 / r->kernel_s : 0;
out:
	if (e1)
		cudaEventDestroy(e1);
	if (e0)
		cudaEventDestroy(e0);
	if (s)
		cudaStreamDestroy(s);
	cudaFree(dout);
	cudaFree(dev);
	cudaFreeHost(pinned);
	free(pageable);
	free(t);
	return err;
}
