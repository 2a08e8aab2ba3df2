/* backend.h - where the GPU consumer's batches are converted: the few
 * operations consumer.c needs from a device, and their two implementations.
 *
 *   host  (backend_host.c, every build): plain memory, the conversion done
 *         at once on the calling thread by norm_host(); fences are no-ops.
 *         It is the CPU reference the device is checked against, and it lets
 *         the consumer's logic (ring, pool, DLPack, deleters) be tested on a
 *         machine without a GPU.
 *   cuda  (backend_cuda.cu, `make CUDA=1`): pinned host memory, device
 *         memory, one stream for copies and kernels, events as fences.
 *
 * A fence marks a point in a stream's work: recorded once the work queued
 * so far is done. "stream" arguments are a cudaStream_t as an integer (0:
 * the legacy default stream); the host backend ignores them.
 *
 * Threads: every operation is called from the consumer's thread, except
 * out_free, fence_record and fence_free, which a DLPack deleter may call
 * from any thread at any time (the backend lives until the last one ran).
 * Errors: 0 or -errno; the operations called from the consumer's thread
 * leave a reason in b->why.
 */
#ifndef EPOCHFS_BACKEND_H
#define EPOCHFS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/normalize.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_backend;

struct gpu_backend_ops {
	void (*destroy)(struct gpu_backend *b);
	/* Memory a batch file is read into (pinned for CUDA: an async copy needs it). */
	int (*host_alloc)(struct gpu_backend *b, size_t len, void **p);
	void (*host_free)(struct gpu_backend *b, void *p);
	/* Memory a converted batch lives in (the device's); 256-byte aligned. */
	int (*out_alloc)(struct gpu_backend *b, size_t len, void **p);
	void (*out_free)(struct gpu_backend *b, void *p);
	int (*fence_new)(struct gpu_backend *b, void **f);
	void (*fence_free)(struct gpu_backend *b, void *f);
	/* F marks the work queued so far on STREAM (a foreign stream). */
	int (*fence_record)(struct gpu_backend *b, void *f, uint64_t stream);
	/* The host waits for F. */
	int (*fence_sync)(struct gpu_backend *b, void *f);
	/* Work queued on STREAM from now on waits for F; the host does not. */
	int (*fence_wait)(struct gpu_backend *b, void *f, uint64_t stream);
	/* Queues on the backend's stream, in order: a wait for AFTER (a fence,
	 * or NULL), the copy of J's input from SRC (host memory from
	 * host_alloc) to the device, COPIED (SRC may be written again once it
	 * passed), the conversion into DST (from out_alloc), DONE. */
	int (*convert)(struct gpu_backend *b, const struct norm_job *j, const void *src, void *dst, void *after,
		       void *copied, void *done);
};

struct gpu_backend {
	const struct gpu_backend_ops *ops;
	int32_t dl_device_type;     /* DLPack: kDLCPU or kDLCUDA */
	int32_t device;             /* DLPack device_id */
	char why[256];              /* the last error's reason (consumer's thread) */
};

/* The host backend. 0 or -ENOMEM. */
int backend_host_new(struct gpu_backend **out);

/* The CUDA backend on DEVICE, CUDA builds only. 0; -ENODEV when there is
 * no such device (no GPU, no driver), -ENOMEM, or -EIO; WHY (LEN bytes)
 * then says why, with CUDA's own words. */
int backend_cuda_new(int device, struct gpu_backend **out, char *why, size_t len);

/* Whether DEVICE can be used, CUDA builds only: 0, or -ENODEV/-EIO with
 * WHY "no CUDA device: <CUDA's reason>". Makes DEVICE current. */
int backend_cuda_device(int device, char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
