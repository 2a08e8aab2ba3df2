/* libFuzzer harness for one sample of a prep batch made from untrusted
 * bytes: the JPEG header probe, the random crop, the partial DCT-scaled
 * decode and the resampler, as a prep worker runs them on every file of a
 * dataset. The first 4 input bytes choose the output side, dtype, layout
 * and seed; the rest is the "file". Beyond "no crash, no leak", the result
 * is 0 or one of the documented errors, and a bad file leaves the
 * substitute (mid-gray) in the output. The seed corpus (make fuzz-smoke)
 * holds small valid JPEGs of each kind, so mutations start from real
 * headers. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct batch_worker w;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	struct batch_params p = {
		.size = 8 + data[0] % 57, .scale = { 0.08, 1.0 }, .ratio = { 3.0 / 4.0, 4.0 / 3.0 },
		.flip = 0.5, .dtype = data[1] & 1 ? BATCH_F32 : BATCH_U8,
		.layout = data[1] & 2 ? BATCH_NCHW : BATCH_NHWC,
		.mean = { 0.5f, 0.5f, 0.5f }, .std = { 0.25f, 0.25f, 0.25f },
		.seed = (uint64_t)data[2] << 8 | data[3],
		.max_pixels = 4u << 20,     /* a fuzzer's 100 MP header would only be slow */
	};
	size_t n = batch_sample_bytes(&p);
	uint8_t *out = malloc(n);
	int r = batch_make_sample(&p, &w, data[2], data[3], data + 4, size - 4, out);

	if (r != 0 && r != -EBADMSG && r != -EFBIG && r != -ENOMEM)
		__builtin_trap();
	if ((r == -EBADMSG || r == -EFBIG) && p.dtype == BATCH_U8)
		for (size_t i = 0; i < n; i++)
			if (out[i] != 128)
				__builtin_trap();   /* the substitute, whole */
	free(out);
	return 0;
}
