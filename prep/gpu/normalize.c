/* normalize.c - see normalize.h: the plain C reference of the conversion.
 *
 * DESIGN: one loop nest for every mode and layout, written for clarity
 * rather than speed: it is what the kernel is checked against, and the
 * host backend's fallback. This file is compiled with -ffp-contract=off
 * (Makefile) so that x * mul + add stays a multiply and an add whatever
 * -march says; prep/augment.c, whose bytes AFFINE must equal, gets no FMA
 * either in the default x86-64 build (the baseline has none).
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "gpu/normalize.h"

_Static_assert(BATCH_U8 == 0 && BATCH_F32 == 1 && BATCH_NHWC == 0 && BATCH_NCHW == 1,
	       "normalize.cu hard-codes batch.h's dtype and layout codes");

void norm_coeffs(const float *mean, const float *std, uint32_t c, float *mul, float *add)
{
	for (uint32_t k = 0; k < c; k++) {
		mul[k] = 1.0f / (255.0f * std[k]);
		add[k] = -mean[k] / std[k];
	}
}

static int fail(const char **why, const char *msg, int err)
{
	*why = msg;
	return err;
}

static size_t elem_bytes(uint32_t dtype)
{
	return dtype == BATCH_F32 ? 4 : 1;
}

int norm_prepare(struct norm_job *j, const float *mean, const float *std, const char **why)
{
	size_t e;

	if (!j->n || !j->h || !j->w || !j->c)
		return fail(why, "empty shape (n, h, w or c is 0)", -EINVAL);
	if (j->c > NORM_MAX_C)
		return fail(why, "more than 4 channels", -EINVAL);
	if (j->in_dtype > BATCH_F32 || j->in_layout > BATCH_NCHW || j->out_layout > BATCH_NCHW ||
	    j->mode > NORM_AFFINE)
		return fail(why, "unknown dtype, layout or mode", -EINVAL);
	if (j->in_dtype == BATCH_F32 && j->mode != NORM_NONE)
		return fail(why, "the batch is float32, normalized when it was made: it takes no mean and std", -EINVAL);
	memset(j->mul, 0, sizeof(j->mul));
	memset(j->add, 0, sizeof(j->add));
	if (j->mode == NORM_AFFINE) {
		if (!mean || !std)
			return fail(why, "normalization needs a mean and a std per channel", -EINVAL);
		for (uint32_t k = 0; k < j->c; k++) {
			if (!isfinite(mean[k]) || !isfinite(std[k]) || std[k] == 0.0f)
				return fail(why, "mean and std must be finite, std not 0", -EINVAL);
		}
		norm_coeffs(mean, std, j->c, j->mul, j->add);
	}
	j->out_dtype = j->mode == NORM_NONE ? j->in_dtype : BATCH_F32;
	if (__builtin_mul_overflow((size_t)j->n, (size_t)j->h, &e) || __builtin_mul_overflow(e, (size_t)j->w, &e) ||
	    __builtin_mul_overflow(e, (size_t)j->c, &e) || __builtin_mul_overflow(e, (size_t)4, &e))
		return fail(why, "batch too large for this machine's address space", -EFBIG);
	return 0;
}

size_t norm_in_bytes(const struct norm_job *j)
{
	return (size_t)j->n * j->h * j->w * j->c * elem_bytes(j->in_dtype);
}

size_t norm_out_bytes(const struct norm_job *j)
{
	return (size_t)j->n * j->h * j->w * j->c * elem_bytes(j->out_dtype);
}

/* Element (sample B, channel CH, pixel P) of a batch of C channels of HW pixels. */
static inline size_t at(uint32_t layout, size_t b, size_t ch, size_t p, size_t c, size_t hw)
{
	return layout == BATCH_NCHW ? (b * c + ch) * hw + p : (b * hw + p) * c + ch;
}

void norm_host(const struct norm_job *j, const void *src, void *dst)
{
	const uint8_t *s8 = src;
	const uint32_t *s32 = src;  /* float32 moved as bits: NaN payloads too */
	uint8_t *d8 = dst;
	uint32_t *d32 = dst;
	float *df = dst;
	size_t c = j->c, hw = (size_t)j->h * j->w;

	for (size_t b = 0; b < j->n; b++)
		for (size_t ch = 0; ch < c; ch++) {
			float mul = j->mul[ch], add = j->add[ch];
			for (size_t p = 0; p < hw; p++) {
				size_t si = at(j->in_layout, b, ch, p, c, hw), di = at(j->out_layout, b, ch, p, c, hw);
				switch (j->mode) {
				case NORM_NONE:
					if (j->in_dtype == BATCH_F32)
						d32[di] = s32[si];
					else
						d8[di] = s8[si];
					break;
				case NORM_SCALE:
					df[di] = (float)s8[si] / 255.0f;
					break;
				default:
					df[di] = (float)s8[si] * mul + add;
					break;
				}
			}
		}
}
