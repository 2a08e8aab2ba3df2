/* consumer.h - the GPU consumer of `.prep/` batches: batch files in, DLPack
 * tensors on the device out, normalized there.
 *
 * A job that reads a shared prep group (docs/prep.md) still turns every
 * uint8 batch into float32 on its CPU (python/epochfs/prep.py's
 * torch_batches: 4 ms for 64 images of 224 x 224) and copies it to the GPU
 * from pageable memory. The consumer instead reads each batch file into a
 * pinned host buffer, copies it to the device asynchronously (a quarter of
 * the bytes of float32), converts and lays it out there (normalize.h), and
 * hands the result over as a DLManagedTensor (dlpack.h) that PyTorch wraps
 * without a copy. What is left on the CPU per batch is the read() of the
 * file and a few calls.
 *
 *   struct gpucons *c;
 *   gpucons_new(&opts, backend, &c, why, sizeof(why));
 *   gpucons_submit(c, "epoch-0000/batch-000000");   up to opts.depth ahead
 *   gpucons_next(c, stream, 0, &b);                 the oldest submitted
 *   ...                                             b.images is the caller's:
 *   b.images->deleter(b.images);                    (torch calls it)
 *   gpucons_free(c);
 *
 * Ring: DEPTH slots, each a host buffer (pinned; grown to the largest
 * batch, then reused) and two fences. A submit reads the file into the next
 * free slot, on the calling thread, and queues the copy and the conversion;
 * a next takes the oldest. Output buffers come from a small pool: a
 * tensor's deleter gives its buffer back, fenced on the stream that used
 * it, so a later batch never overwrites memory a kernel of the job may
 * still read, and steady state allocates nothing on the device.
 *
 * Errors: 0 or -errno, and gpucons_why() says what happened, naming the
 * file (e.g. "PATH: shorter than its header says (truncated)").
 *
 * Threads: one thread drives a consumer (new, submit, next, free). A
 * tensor's deleter may run on any thread, before or after gpucons_free():
 * the consumer's memory lives until its last tensor is deleted.
 */
#ifndef EPOCHFS_CONSUMER_H
#define EPOCHFS_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/dlpack.h"
#include "gpu/normalize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gpucons_opts.mode: NORM_SCALE for a uint8 batch, NORM_NONE for a float32
 * one (normalized when it was made): what epochfs.prep.torch_batches gives. */
#define GPUCONS_AUTO 3u

#define GPUCONS_DEPTH_DEFAULT 3u
#define GPUCONS_DEPTH_MAX 64u

struct gpucons;

struct gpucons_opts {
	uint32_t depth;             /* batches submitted and not taken, at most; 0: 3 */
	uint32_t mode;              /* enum norm_mode, or GPUCONS_AUTO */
	uint32_t out_layout;        /* BATCH_NCHW (PyTorch's) or BATCH_NHWC */
	uint32_t reserved;          /* 0 */
	float mean[NORM_MAX_C];     /* NORM_AFFINE: per channel, as a prep spec's */
	float std[NORM_MAX_C];
};

struct gpucons_batch {
	/* The caller's: call images->deleter(images) exactly once. float32
	 * (uint8 for NORM_NONE of a uint8 group), [n, c, h, w] or [n, h, w, c],
	 * contiguous, on the backend's device. */
	DLManagedTensor *images;
	/* n labels, host memory; valid until the next gpucons_submit() or
	 * gpucons_free(). */
	const int32_t *labels;
	uint32_t n, epoch, bad_samples, reserved;
	uint64_t index;
};

struct gpucons_stats {
	uint32_t queued;            /* submitted, not yet taken */
	uint32_t buffers;           /* output buffers allocated now */
	uint32_t pooled;            /* of those, free for the next batch */
	uint32_t tensors;           /* handed out, not yet deleted */
};

/* The host waits for the batch in gpucons_next() (default: only STREAM does). */
#define GPUCONS_SYNC 1u

/* A consumer converting on backend B, which it takes over (freed with it,
 * or at once on failure). 0 and *OUT; -EINVAL (an option out of range: a
 * depth over GPUCONS_DEPTH_MAX, an unknown mode or layout, a std of 0) or
 * -ENOMEM, with WHY (LEN bytes) saying which. */
int gpucons_new(const struct gpucons_opts *o, struct gpu_backend *b, struct gpucons **out, char *why,
		size_t len);

/* Reads the batch file PATH whole, checks it (batchfile.h), and queues its
 * copy and conversion. 0; -EBUSY (depth batches are queued already), -errno
 * from open/read, batchfile.h's errors for a bad file, -EINVAL (a float32
 * group asked to be normalized again), -ENOMEM or -EIO from the device. A
 * failed submit queues nothing and may be retried. */
int gpucons_submit(struct gpucons *c, const char *path);

/* Takes the oldest batch submitted. Work the caller then queues on STREAM
 * (a cudaStream_t; 0 the legacy default stream; ignored by the host
 * backend) runs after the batch is complete; with GPUCONS_SYNC the host
 * waits too. The tensor's deleter fences its buffer on the same STREAM.
 * 0; -ENOENT (nothing submitted), -ENOMEM, or -EIO. */
int gpucons_next(struct gpucons *c, uint64_t stream, unsigned flags, struct gpucons_batch *out);

/* The reason for the last error (a NUL-terminated line, "" at first). */
const char *gpucons_why(const struct gpucons *c);

void gpucons_get_stats(struct gpucons *c, struct gpucons_stats *s);

/* Drops what is queued (waiting for its work to finish) and the consumer;
 * tensors handed out stay valid until deleted. NULL is fine. */
void gpucons_free(struct gpucons *c);

#ifdef __cplusplus
}
#endif

#endif
