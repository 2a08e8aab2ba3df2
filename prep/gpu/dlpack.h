/* dlpack.h - the DLPack ABI, as far as a batch handed to PyTorch needs it.
 *
 * DLPack (github.com/dmlc/dlpack) is how array libraries pass a tensor to
 * each other without a copy: the producer fills a DLManagedTensor, the
 * consumer (torch.utils.dlpack.from_dlpack) wraps the memory and calls
 * `deleter` once, when it no longer needs it. The structs below are the
 * public ABI of DLPack v0.8, written out here (field for field, the same
 * sizes and offsets) so that the build needs no DLPack headers; the static
 * assertions pin the layout on LP64. Enumerations are plain int32/uint8
 * fields with the ABI's numbers, which is what the ABI passes.
 *
 * Python reaches a DLManagedTensor through a PyCapsule named "dltensor"
 * (python/epochfs/gpu.py makes one with ctypes).
 */
#ifndef EPOCHFS_DLPACK_H
#define EPOCHFS_DLPACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DLDevice.device_type */
enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
/* DLDataType.code */
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2 };

typedef struct {
	int32_t device_type;        /* kDLCPU, kDLCUDA, ... */
	int32_t device_id;          /* the CUDA ordinal; 0 for the CPU */
} DLDevice;

typedef struct {
	uint8_t code;               /* kDLUInt, kDLFloat, ... */
	uint8_t bits;               /* 8, 32, ... */
	uint16_t lanes;             /* 1: not a vector type */
} DLDataType;

typedef struct {
	void *data;                 /* device memory for kDLCUDA */
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;             /* ndim entries */
	int64_t *strides;           /* in elements; NULL means compact row-major */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;          /* the producer's */
	/* Called once by the consumer when it is done; frees everything. */
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#ifdef __cplusplus
}
#define DLPACK_ASSERT static_assert
#else
#define DLPACK_ASSERT _Static_assert
#endif

#if UINTPTR_MAX == UINT64_MAX
DLPACK_ASSERT(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4, "DLPack ABI: DLDevice, DLDataType");
DLPACK_ASSERT(sizeof(DLTensor) == 48, "DLPack ABI: DLTensor is 48 bytes on LP64");
DLPACK_ASSERT(sizeof(DLManagedTensor) == 64, "DLPack ABI: DLManagedTensor is 64 bytes on LP64");
#endif
#undef DLPACK_ASSERT

#endif
