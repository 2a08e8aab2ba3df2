/* libgpu.h - what libepochfs_gpu.so adds for its users beyond the modules
 * it is made of (consumer.h, probe.h): choosing a backend by device number,
 * and an ABI number, for python/epochfs/gpu.py's ctypes calls.
 *
 * `make CUDA=1` only. python/epochfs/gpu.py mirrors the structs of
 * consumer.h and probe.h; EPGPU_ABI changes whenever one of them, or a
 * signature it calls, does, and gpu.py refuses a library of another ABI.
 */
#ifndef EPOCHFS_LIBGPU_H
#define EPOCHFS_LIBGPU_H

#include <stddef.h>

#include "gpu/consumer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EPGPU_ABI 1

int epgpu_abi(void);

/* Whether CUDA DEVICE can be used: 0, or -ENODEV with WHY "no CUDA device:
 * <CUDA's reason>" (backend_cuda_device). */
int epgpu_device_check(int device, char *why, size_t len);

/* A consumer (consumer.h) on CUDA DEVICE, or on the host backend (the CPU
 * reference) when DEVICE is negative (-1). Errors: gpucons_new's and
 * backend_cuda_new's, WHY filled. */
int epgpu_open(int device, const struct gpucons_opts *o, struct gpucons **out, char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
