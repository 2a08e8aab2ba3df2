/* libgpu.c - see libgpu.h: libepochfs_gpu.so's own entry points. */
#include <errno.h>
#include <stdio.h>

#include "gpu/libgpu.h"

int epgpu_abi(void)
{
	return EPGPU_ABI;
}

int epgpu_device_check(int device, char *why, size_t len)
{
	return backend_cuda_device(device, why, len);
}

int epgpu_open(int device, const struct gpucons_opts *o, struct gpucons **out, char *why, size_t len)
{
	struct gpu_backend *b;
	int err;

	if (device < 0) {
		err = backend_host_new(&b);
		if (err)
			snprintf(why, len, "out of memory");
	} else {
		err = backend_cuda_new(device, &b, why, len);
	}
	if (err)
		return err;
	return gpucons_new(o, b, out, why, len);
}
