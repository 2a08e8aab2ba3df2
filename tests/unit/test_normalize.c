/* test_normalize.c - the CPU reference of the GPU conversion: NORM_AFFINE
 * is prep's float32 path (aug_store_f32) bit for bit over every input value
 * of every channel, NORM_SCALE is the correctly rounded x / 255, layouts
 * move every element where it belongs, and bad jobs are refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "gpu/normalize.h"

/* A 256 x 1 RGB image in which each channel takes all 256 values. */
static void every_value(uint8_t rgb[256 * 3])
{
	for (int i = 0; i < 256; i++) {
		rgb[i * 3] = (uint8_t)i;
		rgb[i * 3 + 1] = (uint8_t)(255 - i);
		rgb[i * 3 + 2] = (uint8_t)(i * 7);      /* 7 is odd: a permutation */
	}
}

static struct norm_job job(uint32_t n, uint32_t h, uint32_t w, uint32_t in_dtype, uint32_t in_layout,
			   uint32_t mode, uint32_t out_layout)
{
	struct norm_job j = { .n = n, .h = h, .w = w, .c = 3, .in_dtype = in_dtype, .in_layout = in_layout,
			      .mode = mode, .out_layout = out_layout };
	return j;
}

Test(normalize, affine_is_prep_float32_bit_for_bit)
{
	static const float sets[][2][3] = {
		{ { 0.485f, 0.456f, 0.406f }, { 0.229f, 0.224f, 0.225f } },     /* ImageNet */
		{ { 0.5f, 0.5f, 0.5f }, { 0.5f, 0.5f, 0.5f } },
		{ { 0.1234f, -3.0f, 100.0f }, { 0.0371f, 7.0f, 1e-3f } },
	};
	uint8_t rgb[256 * 3];
	float want[256 * 3], got[256 * 3];
	const char *why;

	every_value(rgb);
	for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
		for (int chw = 0; chw < 2; chw++) {
			struct norm_job j = job(1, 1, 256, BATCH_U8, BATCH_NHWC, NORM_AFFINE, chw ? BATCH_NCHW : BATCH_NHWC);
			cr_assert_eq(norm_prepare(&j, sets[k][0], sets[k][1], &why), 0, "%s", why);
			aug_store_f32(rgb, 256, 1, chw, sets[k][0], sets[k][1], want);
			norm_host(&j, rgb, got);
			cr_expect(!memcmp(want, got, sizeof(want)), "set %zu, chw %d: not prep's bytes", k, chw);
		}
}

Test(normalize, scale_is_the_correctly_rounded_division)
{
	uint8_t rgb[256 * 3];
	float got[256 * 3];
	struct norm_job j = job(1, 1, 256, BATCH_U8, BATCH_NHWC, NORM_SCALE, BATCH_NHWC);
	const char *why;
	int differs_from_reciprocal = 0;

	every_value(rgb);
	cr_assert_eq(norm_prepare(&j, NULL, NULL, &why), 0);
	cr_expect_eq(j.out_dtype, BATCH_F32);
	norm_host(&j, rgb, got);
	for (int i = 0; i < 256 * 3; i++) {
		/* A double quotient rounded once to float is the correctly rounded
		 * float quotient (53 >= 2 x 24 + 2 bits). */
		float want = (float)((double)rgb[i] / 255.0);
		cr_expect(got[i] == want, "%d/255: %.9g, want %.9g", rgb[i], got[i], want);
		differs_from_reciprocal |= got[i] != rgb[i] * (1.0f / 255.0f);
	}
	cr_expect(differs_from_reciprocal, "x * (1/255) would do: the test proves nothing");
}

Test(normalize, layouts_move_every_element)
{
	enum { N = 2, H = 3, W = 5, C = 3, E = N * H * W * C };
	uint8_t nhwc[E], nchw[E], back[E];
	const char *why;

	for (int i = 0; i < E; i++)
		nhwc[i] = (uint8_t)i;
	struct norm_job a = job(N, H, W, BATCH_U8, BATCH_NHWC, NORM_NONE, BATCH_NCHW);
	cr_assert_eq(norm_prepare(&a, NULL, NULL, &why), 0);
	cr_expect_eq(a.out_dtype, BATCH_U8);
	cr_expect_eq(norm_in_bytes(&a), E);
	cr_expect_eq(norm_out_bytes(&a), E);
	norm_host(&a, nhwc, nchw);
	for (int b = 0; b < N; b++)
		for (int y = 0; y < H; y++)
			for (int x = 0; x < W; x++)
				for (int c = 0; c < C; c++)
					cr_expect_eq(nchw[((b * C + c) * H + y) * W + x], nhwc[((b * H + y) * W + x) * C + c]);
	struct norm_job r = job(N, H, W, BATCH_U8, BATCH_NCHW, NORM_NONE, BATCH_NHWC);
	cr_assert_eq(norm_prepare(&r, NULL, NULL, &why), 0);
	norm_host(&r, nchw, back);
	cr_expect(!memcmp(back, nhwc, E), "NCHW -> NHWC does not undo NHWC -> NCHW");
	/* The NCHW input of a scaled batch gives the same floats in NCHW. */
	float f1[E], f2[E];
	struct norm_job s1 = job(N, H, W, BATCH_U8, BATCH_NHWC, NORM_SCALE, BATCH_NCHW);
	struct norm_job s2 = job(N, H, W, BATCH_U8, BATCH_NCHW, NORM_SCALE, BATCH_NCHW);
	cr_assert_eq(norm_prepare(&s1, NULL, NULL, &why) | norm_prepare(&s2, NULL, NULL, &why), 0);
	cr_expect_eq(norm_out_bytes(&s1), E * 4);
	norm_host(&s1, nhwc, f1);
	norm_host(&s2, nchw, f2);
	cr_expect(!memcmp(f1, f2, sizeof(f1)));
}

Test(normalize, float32_moves_as_bits)
{
	enum { E = 1 * 2 * 2 * 3 };
	uint32_t in[E], out[E];
	const char *why;

	for (int i = 0; i < E; i++)
		in[i] = 0x7fc00001u + (uint32_t)i;      /* NaNs with payloads */
	in[0] = 0x80000000u;                        /* -0.0f */
	struct norm_job j = job(1, 2, 2, BATCH_F32, BATCH_NCHW, NORM_NONE, BATCH_NCHW);
	cr_assert_eq(norm_prepare(&j, NULL, NULL, &why), 0);
	cr_expect_eq(j.out_dtype, BATCH_F32);
	norm_host(&j, in, out);
	cr_expect(!memcmp(in, out, sizeof(in)));
}

Test(normalize, bad_jobs_are_refused_with_a_reason)
{
	static const float mean[3] = { 0.5f, 0.5f, 0.5f }, std[3] = { 0.5f, 0.5f, 0.5f };
	static const float zero[3] = { 0.5f, 0.0f, 0.5f }, nan[3] = { 0.5f, NAN, 0.5f };
	const char *why = NULL;
	struct norm_job j;

	j = job(1, 2, 2, BATCH_F32, BATCH_NCHW, NORM_SCALE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	cr_expect(why && strstr(why, "float32"), "%s", why);
	j = job(1, 2, 2, BATCH_F32, BATCH_NCHW, NORM_AFFINE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, mean, std, &why), -EINVAL);
	j = job(1, 2, 2, BATCH_U8, BATCH_NCHW, NORM_AFFINE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	cr_expect_eq(norm_prepare(&j, mean, zero, &why), -EINVAL);
	cr_expect_eq(norm_prepare(&j, nan, std, &why), -EINVAL);
	cr_expect_eq(norm_prepare(&j, mean, std, &why), 0);
	j = job(0, 2, 2, BATCH_U8, BATCH_NCHW, NORM_NONE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	j = job(1, 2, 2, BATCH_U8, BATCH_NCHW, NORM_NONE, BATCH_NCHW);
	j.c = 5;
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	j = job(1, 2, 2, 2, BATCH_NCHW, NORM_NONE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	j = job(1, 2, 2, BATCH_U8, BATCH_NCHW, 3, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	j = job(1, 2, 2, BATCH_U8, BATCH_NCHW, NORM_NONE, 2);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EINVAL);
	j = job(UINT32_MAX, UINT32_MAX, UINT32_MAX, BATCH_U8, BATCH_NCHW, NORM_SCALE, BATCH_NCHW);
	cr_expect_eq(norm_prepare(&j, NULL, NULL, &why), -EFBIG);
}
