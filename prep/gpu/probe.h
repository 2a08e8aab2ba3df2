/* probe.h - how fast this machine's GPU takes in a job's batches: the
 * ingestion probe epochfs-gpuprobe prints and the analyzer asks for
 * (python/epochfs/gpu.py's probe()).
 *
 * Two figures bound what a GPU consumer of `.prep/` batches can deliver:
 *   - host-to-device copies of one batch: from pinned memory (what the
 *     consumer uses) and from pageable memory (what `tensor.cuda()` of a
 *     numpy-backed tensor does), wall-clock per copy, host to host;
 *   - the conversion kernel (normalize.h): uint8 NHWC -> float32 NCHW,
 *     normalized with ImageNet's mean/std, device memory to device memory,
 *     timed with CUDA events.
 * Each is measured WARMUP times unrecorded, then REPS times; the figure is
 * the median. A batch's bytes are n x h x w x c x (1 for uint8, 4 for
 * float32); the kernel always reads uint8 (a float32 group needs none).
 *
 * `make CUDA=1` only.
 */
#ifndef EPOCHFS_PROBE_H
#define EPOCHFS_PROBE_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUPROBE_REPS_DEFAULT 7u
#define GPUPROBE_WARMUP 2u

struct gpuprobe_opts {
	uint32_t n, h, w, c;        /* the batch's shape; c at most 4 */
	uint32_t dtype;             /* what the copy moves: BATCH_U8 or BATCH_F32 */
	int32_t device;             /* CUDA ordinal */
	uint32_t reps;              /* 0: GPUPROBE_REPS_DEFAULT; at most 1000 */
	uint32_t reserved;          /* 0 */
};

struct gpuprobe_result {
	char device_name[256];
	int32_t device;
	uint32_t reps, warmup, reserved;
	uint64_t copy_bytes;        /* one batch as stored (the copy) */
	uint64_t kernel_bytes;      /* read + written by one conversion */
	double pinned_s, pageable_s, kernel_s;      /* medians, seconds per batch */
	double pinned_gbps, pageable_gbps;          /* copy_bytes / s, in 1e9 bytes/s */
	double kernel_gbps;                         /* kernel_bytes / kernel_s */
	double kernel_batches_per_s;
};

/* Runs the probe. 0 and *R; -EINVAL (a shape of 0, c over 4, reps over
 * 1000), -ENODEV (no usable CUDA device: WHY is "no CUDA device: <CUDA's
 * reason>"), -ENOMEM (host or device memory for the batch), -EIO (another
 * CUDA error); WHY (LEN bytes) says which. */
int gpuprobe_run(const struct gpuprobe_opts *o, struct gpuprobe_result *r, char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
