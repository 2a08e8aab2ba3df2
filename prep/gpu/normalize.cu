/* normalize.cu - see normalize.h: the conversion as a CUDA kernel
 * (`make CUDA=1` only), checked bit for bit against norm_host().
 *
 * DESIGN: one thread per pixel (sample, y, x), looping over the channels.
 * With NCHW output, neighbouring threads write neighbouring floats of each
 * plane (coalesced); with NHWC input they read neighbouring 3-byte groups.
 * The work is a few operations per byte moved, so the kernel runs at
 * memory speed and a simpler or cleverer layout would not change much; a
 * GPU measurement (epochfs-gpuprobe) is what would say otherwise. Indices
 * are 32-bit when the batch allows it (64-bit division is slow on a GPU).
 * Arithmetic goes through __fmul_rn/__fadd_rn/__fdiv_rn: IEEE round-to-
 * nearest, never contracted into an FMA, whatever -fmad says.
 */
#include <cuda_runtime.h>
#include <errno.h>

#include "gpu/normalize.h"

template <int Mode, typename In, typename Out>
__device__ __forceinline__ Out convert_one(In x, float mul, float add)
{
	if constexpr (Mode == NORM_SCALE)
		return __fdiv_rn((float)x, 255.0f);
	else if constexpr (Mode == NORM_AFFINE)
		return __fadd_rn(__fmul_rn((float)x, mul), add);
	else
		return x;
}

template <typename In, typename Out, int Mode, typename Index>
__global__ void convert(const In *__restrict__ src, Out *__restrict__ dst, struct norm_job j, Index pixels,
			Index hw)
{
	const Index c = j.c, stride = (Index)gridDim.x * blockDim.x;

	for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < pixels; i += stride) {
		Index b = i / hw, p = i - b * hw;
		for (Index ch = 0; ch < c; ch++) {
			Index si = j.in_layout == BATCH_NCHW ? (b * c + ch) * hw + p : i * c + ch;
			Index di = j.out_layout == BATCH_NCHW ? (b * c + ch) * hw + p : i * c + ch;
			dst[di] = convert_one<Mode, In, Out>(src[si], j.mul[ch], j.add[ch]);
		}
	}
}

template <typename In, typename Out, int Mode>
static void launch(const struct norm_job *j, const void *src, void *dst, cudaStream_t s)
{
	const unsigned threads = 256;
	size_t hw = (size_t)j->h * j->w, pixels = (size_t)j->n * hw;
	size_t blocks = (pixels + threads - 1) / threads;

	if (blocks > 65535)
		blocks = 65535;             /* the grid strides over the rest */
	if (pixels * j->c <= (size_t)1 << 31)
		convert<In, Out, Mode, uint32_t><<<(unsigned)blocks, threads, 0, s>>>(
			(const In *)src, (Out *)dst, *j, (uint32_t)pixels, (uint32_t)hw);
	else
		convert<In, Out, Mode, uint64_t><<<(unsigned)blocks, threads, 0, s>>>(
			(const In *)src, (Out *)dst, *j, (uint64_t)pixels, (uint64_t)hw);
}

int norm_launch(const struct norm_job *j, const void *src, void *dst, void *stream, const char **why)
{
	cudaStream_t s = (cudaStream_t)stream;
	cudaError_t e;

	switch (j->mode) {
	case NORM_SCALE:
		launch<uint8_t, float, NORM_SCALE>(j, src, dst, s);
		break;
	case NORM_AFFINE:
		launch<uint8_t, float, NORM_AFFINE>(j, src, dst, s);
		break;
	default:
		if (j->in_dtype == BATCH_F32)
			launch<uint32_t, uint32_t, NORM_NONE>(j, src, dst, s);      /* float bits */
		else
			launch<uint8_t, uint8_t, NORM_NONE>(j, src, dst, s);
		break;
	}
	e = cudaGetLastError();
	if (e != cudaSuccess) {
		*why = cudaGetErrorString(e);
		return -EIO;
	}
	return 0;
}
