/* test_batch.c - the batch header and layout, the epoch order, and samples:
 * deterministic, different per position, substitutes for bad images. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "batch.h"

static const struct batch_params U8 = {
	.size = 32, .scale = { 0.08, 1.0 }, .ratio = { 0.75, 4.0 / 3.0 }, .flip = 0.5,
	.dtype = BATCH_U8, .layout = BATCH_NHWC, .seed = 7, .max_pixels = JPEG_MAX_PIXELS_DEFAULT,
	.mean = { 0.485f, 0.456f, 0.406f }, .std = { 0.229f, 0.224f, 0.225f },
};

static unsigned char *image(unsigned long *len)
{
	enum { W = 120, H = 90 };
	static unsigned char px[W * H * 3];
	unsigned char *jpg = NULL;
	tjhandle tj = tjInitCompress();

	for (int i = 0; i < W * H * 3; i++)
		px[i] = (unsigned char)((i % (W * 3)) * 2 + i / (W * 3));
	cr_assert_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &jpg, len, TJSAMP_420, 90, 0), 0);
	tjDestroy(tj);
	return jpg;
}

Test(batch, header_and_layout)
{
	struct batch_header h;
	struct batch_params f = U8;

	f.dtype = BATCH_F32;
	size_t total = batch_layout(&f, 5, 3, 17, 85, &h);
	cr_expect(!memcmp(h.magic, "EPBATCH1", 8) && h.version == 1 && h.header_bytes == 128);
	cr_expect(h.n == 5 && h.h == 32 && h.w == 32 && h.c == 3 && h.dtype == 1 && h.layout == 0);
	cr_expect(h.epoch == 3 && h.index == 17 && h.first == 85 && h.seed == 7);
	cr_expect_eq(h.labels_offset, 128);
	cr_expect_eq(h.pixels_offset, 192);                 /* 128 + 20, aligned to 64 */
	cr_expect_eq(h.pixels_bytes, 5ull * 32 * 32 * 3 * 4);
	cr_expect_eq(total, h.pixels_offset + h.pixels_bytes);
	cr_expect_eq(h.total_bytes, total);
}

Test(batch, order_is_a_permutation_per_epoch)
{
	enum { N = 1000 };
	static uint32_t a[N], b[N], c[N];
	static char seen[N];

	batch_order(7, 0, N, a);
	batch_order(7, 0, N, b);
	batch_order(7, 1, N, c);
	cr_expect(!memcmp(a, b, sizeof(a)), "same seed and epoch, different order");
	cr_expect(memcmp(a, c, sizeof(a)), "epochs 0 and 1 share an order");
	for (int i = 0; i < N; i++) {
		cr_assert(a[i] < N && !seen[a[i]]);
		seen[a[i]] = 1;
	}
	batch_order(7, 0, 1, a);
	cr_expect_eq(a[0], 0);
	batch_order(7, 0, 0, a);            /* nothing to do, nothing touched */
}

Test(batch, samples_are_deterministic_and_bad_ones_substituted)
{
	unsigned long len;
	unsigned char *j = image(&len);
	struct batch_worker w = { 0 };
	size_t n = batch_sample_bytes(&U8);
	uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);

	cr_assert_eq(n, 32 * 32 * 3);
	cr_assert_eq(batch_make_sample(&U8, &w, 2, 40, j, len, a), 0);
	cr_assert_eq(batch_make_sample(&U8, &w, 2, 41, j, len, c), 0);
	cr_assert_eq(batch_make_sample(&U8, &w, 2, 40, j, len, b), 0);
	cr_expect(!memcmp(a, b, n), "same position, different pixels");
	cr_expect(memcmp(a, c, n), "positions 40 and 41 got the same crop");
	/* NCHW is NHWC transposed. */
	struct batch_params chw = U8;
	chw.layout = BATCH_NCHW;
	cr_assert_eq(batch_make_sample(&chw, &w, 2, 40, j, len, b), 0);
	cr_expect(b[0] == a[0] && b[32 * 32] == a[1] && b[2 * 32 * 32 + 5] == a[5 * 3 + 2]);
	/* Bad input: the substitute, and an error code to count. */
	cr_expect_eq(batch_make_sample(&U8, &w, 2, 40, j, len / 3, b), -EBADMSG);
	uint8_t gray[32 * 32 * 3];
	memset(gray, 128, sizeof(gray));
	cr_expect(!memcmp(b, gray, n));
	cr_expect_eq(batch_make_sample(&U8, &w, 2, 40, "\x89PNG\r\n\x1a\n", 8, b), -EBADMSG);
	struct batch_params f = U8;
	f.dtype = BATCH_F32;
	float *fl = malloc(batch_sample_bytes(&f));
	cr_expect_eq(batch_make_sample(&f, &w, 0, 0, "junk", 4, fl), -EBADMSG);
	cr_expect(fabsf(fl[0] - (128 / 255.0f - 0.485f) / 0.229f) < 1e-5f);
	free(fl);
	free(a), free(b), free(c);
	batch_worker_free(&w);
	tjFree(j);
}
