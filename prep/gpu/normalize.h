/* normalize.h - turning a batch's stored pixels into what a training step
 * takes: float32 (or the stored type), in NCHW or NHWC.
 *
 * One conversion, two implementations that must agree bit for bit: the
 * plain C reference here (normalize.c, in every build; the GPU consumer's
 * host backend and the tests use it) and the CUDA kernel (normalize.cu,
 * `make CUDA=1` only). Per element, by mode:
 *
 *   NORM_NONE    the stored value, bit for bit (uint8 stays uint8, float32
 *                stays float32): a layout change at most.
 *   NORM_SCALE   uint8 x -> (float)x / 255.0f: ToTensor, and what
 *                python/epochfs/prep.py's torch_batches() gives for a uint8
 *                group (numpy's float32 divide), bit for bit.
 *   NORM_AFFINE  uint8 x -> (float)x * mul[c] + add[c], two roundings (a
 *                multiply, then an add; never a fused multiply-add), with
 *                mul[c] = 1.0f / (255.0f * std[c]) and add[c] = -mean[c] /
 *                std[c] in float: exactly prep's float32 path
 *                (aug_store_f32 in prep/augment.c), so a uint8 group
 *                normalized here equals a float32 group with the same
 *                mean/std byte for byte. It is (x / 255 - mean) / std to
 *                within rounding, not bit for bit.
 *
 * Float32 input only takes NORM_NONE: it was normalized when it was made.
 *
 * DESIGN: the job is a plain struct passed by value to the kernel, and the
 * coefficients are computed once, on the host, by norm_prepare(): the
 * kernel and the reference then apply the same two float operations to the
 * same operands. normalize.c is compiled with -ffp-contract=off and the
 * kernel uses __fmul_rn/__fadd_rn/__fdiv_rn, so neither side can fuse.
 */
#ifndef EPOCHFS_NORMALIZE_H
#define EPOCHFS_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NORM_MAX_C 4u

enum norm_mode { NORM_NONE = 0, NORM_SCALE = 1, NORM_AFFINE = 2 };

struct norm_job {
	/* Set by the caller: the input batch's shape and storage (batch.h's
	 * codes: BATCH_U8/BATCH_F32, BATCH_NHWC/BATCH_NCHW), what to do, and
	 * the layout wanted. */
	uint32_t n, h, w, c;
	uint32_t in_dtype, in_layout;
	uint32_t mode;              /* enum norm_mode */
	uint32_t out_layout;
	/* Set by norm_prepare(). */
	uint32_t out_dtype;
	float mul[NORM_MAX_C], add[NORM_MAX_C];
};

/* Checks J's caller fields and fills the rest; MEAN and STD (J->c floats
 * each) are read for NORM_AFFINE only and may be NULL otherwise. 0, or
 * -EINVAL (a shape of 0, more than NORM_MAX_C channels, an unknown code, a
 * float32 input with a mode other than NORM_NONE, a std of 0 or a value
 * that is not finite) or -EFBIG (the output would not fit in size_t); *WHY
 * then names the problem (a static string). */
int norm_prepare(struct norm_job *j, const float *mean, const float *std, const char **why);

/* The coefficients of NORM_AFFINE for C channels, as aug_store_f32 computes
 * them. */
void norm_coeffs(const float *mean, const float *std, uint32_t c, float *mul, float *add);

/* Bytes J reads and writes (after norm_prepare). */
size_t norm_in_bytes(const struct norm_job *j);
size_t norm_out_bytes(const struct norm_job *j);

/* The reference: converts SRC (norm_in_bytes) into DST (norm_out_bytes), on
 * this thread. The buffers must not overlap. */
void norm_host(const struct norm_job *j, const void *src, void *dst);

/* The kernel (normalize.cu, CUDA builds only): queues the same conversion
 * of device memory SRC into device memory DST on STREAM (a cudaStream_t; 0
 * is the legacy default stream). 0, or -EIO with *WHY the CUDA error. */
int norm_launch(const struct norm_job *j, const void *src, void *dst, void *stream, const char **why);

#ifdef __cplusplus
}
#endif

#endif
