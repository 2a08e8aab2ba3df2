/* test_augment.c - crop boxes follow torchvision's distribution; the
 * resampler is exact at scale 1; decode + crop + resize of a known smooth
 * image lands within 30 dB PSNR of the image's true values, with and
 * without DCT scaling and flips. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "augment.h"
#include "jpeg.h"

static const double SCALE[2] = { 0.08, 1.0 }, RATIO[2] = { 3.0 / 4.0, 4.0 / 3.0 };

Test(augment, crops_follow_torchvision)
{
	uint64_t s = 42, s2 = 42;
	int flips = 0, n = 20000;

	for (int i = 0; i < n; i++) {
		struct aug_box b, b2;
		aug_random_crop(500, 375, SCALE, RATIO, 0.5, &s, &b);
		aug_random_crop(500, 375, SCALE, RATIO, 0.5, &s2, &b2);
		cr_assert(!memcmp(&b, &b2, sizeof(b)), "not deterministic");
		cr_assert(b.w >= 1 && b.h >= 1 && b.x + b.w <= 500 && b.y + b.h <= 375);
		double area = (double)b.w * b.h / (500.0 * 375), r = (double)b.w / b.h;
		cr_assert(area >= 0.079 && area <= 1.0, "area %f", area);
		cr_assert(r >= 0.70 && r <= 1.40, "ratio %f (%ux%u)", r, b.w, b.h);
		flips += b.flip;
	}
	cr_expect(fabs((double)flips / n - 0.5) < 0.02, "flip rate %f", (double)flips / n);
	/* flip_p 0 and 1. */
	struct aug_box b;
	aug_random_crop(500, 375, SCALE, RATIO, 0, &s, &b);
	cr_expect(!b.flip);
	aug_random_crop(500, 375, SCALE, RATIO, 1, &s, &b);
	cr_expect(b.flip);
}

Test(augment, fallback_is_torchvisions_centre_crop)
{
	uint64_t s = 7;
	struct aug_box b;

	aug_random_crop(1000, 10, SCALE, RATIO, 0, &s, &b);    /* no try fits */
	cr_expect(b.w == 13 && b.h == 10 && b.x == 493 && b.y == 0, "%u,%u %ux%u", b.x, b.y, b.w, b.h);
	aug_random_crop(10, 1000, SCALE, RATIO, 0, &s, &b);
	cr_expect(b.w == 10 && b.h == 13 && b.x == 0 && b.y == 493, "%u,%u %ux%u", b.x, b.y, b.w, b.h);
	aug_random_crop(1, 1, SCALE, RATIO, 0, &s, &b);
	cr_expect(b.w == 1 && b.h == 1 && b.x == 0 && b.y == 0);
}

Test(augment, scale_one_is_a_copy_and_flip_mirrors)
{
	enum { W = 50, H = 40 };
	static uint8_t img[W * H * 3], out[W * H * 3], fl[W * H * 3];
	struct aug_scratch s = { 0 };

	for (size_t i = 0; i < sizeof(img); i++)
		img[i] = (uint8_t)(i * 2654435761u >> 24);
	cr_assert_eq(aug_resize(img, W, H, 0, 0, W, H, out, W, H, 0, &s), 0);
	cr_expect(!memcmp(img, out, sizeof(img)));
	cr_assert_eq(aug_resize(img, W, H, 0, 0, W, H, fl, W, H, 1, &s), 0);
	int same = 1;
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			same &= !memcmp(fl + (y * W + x) * 3, img + (y * W + (W - 1 - x)) * 3, 3);
	cr_expect(same);
	aug_scratch_free(&s);
}

/* A smooth image with known values at every real coordinate. */
static double truth(double x, double y, int c)
{
	return 128 + 60 * sin(2 * M_PI * x / 53 + c) + 50 * cos(2 * M_PI * y / 41 - c);
}

static double psnr_case(uint32_t bx, uint32_t by, uint32_t bw, uint32_t bh, uint32_t size, int flip,
			double *scale)
{
	enum { W = 480, H = 360 };
	static uint8_t px[W * H * 3];
	uint8_t *dst = malloc((size_t)size * size * 3);
	unsigned char *jpg = NULL;
	unsigned long len = 0;
	struct jpeg_out o = { 0 };
	struct aug_scratch s = { 0 };
	tjhandle tj = tjInitCompress();

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			for (int c = 0; c < 3; c++)
				px[(y * W + x) * 3 + c] = (uint8_t)lround(truth(x + 0.5, y + 0.5, c));
	cr_assert_eq(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &jpg, &len, TJSAMP_444, 95, 0), 0);
	cr_assert_eq(jpeg_decode_box(jpg, len, JPEG_MAX_PIXELS_DEFAULT, bx, by, bw, bh, size, size, &o), 0);
	cr_assert_eq(aug_resize(o.rgb, o.w, o.h, o.x0, o.y0, o.bw, o.bh, dst, size, size, flip, &s), 0);
	*scale = o.scale;
	double se = 0;
	for (uint32_t v = 0; v < size; v++)
		for (uint32_t u = 0; u < size; u++) {
			uint32_t uu = flip ? size - 1 - u : u;
			double X = bx + (uu + 0.5) * bw / size, Y = by + (v + 0.5) * bh / size;
			for (int c = 0; c < 3; c++) {
				double d = dst[(v * size + u) * 3 + (uint32_t)c] - truth(X, Y, c);
				se += d * d;
			}
		}
	tjFree(jpg);
	tjDestroy(tj);
	jpeg_out_free(&o);
	aug_scratch_free(&s);
	free(dst);
	double db = 10 * log10(255.0 * 255.0 / (se / ((double)size * size * 3)));
	/* The requirement is 30 dB; 40 guards the geometry: a one-pixel shift of
	 * this image alone costs it to about 34 dB. */
	cr_expect(db >= 40, "geometry: %.1f dB", db);
	cr_log_info("box %u,%u %ux%u -> %u%s: DCT scale %.3f, PSNR %.1f dB", bx, by, bw, bh, size,
		    flip ? " flipped" : "", o.scale, db);
	return db;
}

Test(augment, crop_and_resize_within_30db_of_the_truth)
{
	double sc, p;

	p = psnr_case(30, 20, 400, 300, 100, 0, &sc);   /* shrink 4x: DCT scale 2/8 */
	cr_expect(sc < 1 && p >= 30, "shrink: scale %.3f, PSNR %.1f dB", sc, p);
	p = psnr_case(30, 20, 400, 300, 100, 1, &sc);
	cr_expect(p >= 30, "shrink + flip: PSNR %.1f dB", p);
	p = psnr_case(100, 50, 60, 50, 224, 0, &sc);    /* enlarge ~4x */
	cr_expect(sc == 1 && p >= 30, "enlarge: scale %.3f, PSNR %.1f dB", sc, p);
	p = psnr_case(0, 0, 480, 360, 224, 1, &sc);     /* whole image, both ratios */
	cr_expect(p >= 30, "whole: PSNR %.1f dB", p);
	p = psnr_case(7, 3, 301, 257, 224, 0, &sc);     /* odd box, mild shrink */
	cr_expect(p >= 30, "odd: PSNR %.1f dB", p);
}

Test(augment, store_layouts_and_normalize)
{
	const uint8_t rgb[2 * 3] = { 0, 128, 255, 10, 20, 30 };      /* 2 pixels */
	uint8_t u[6];
	float f[6];
	const float mean[3] = { 0.485f, 0.456f, 0.406f }, std[3] = { 0.229f, 0.224f, 0.225f };

	aug_store_u8(rgb, 2, 1, 1, u);
	cr_expect(u[0] == 0 && u[1] == 10 && u[2] == 128 && u[3] == 20 && u[4] == 255 && u[5] == 30);
	aug_store_f32(rgb, 2, 1, 0, mean, std, f);
	cr_expect(fabsf(f[2] - (1.0f - 0.406f) / 0.225f) < 1e-5f);
	aug_store_f32(rgb, 2, 1, 1, mean, std, f);
	cr_expect(fabsf(f[1] - (10 / 255.0f - 0.485f) / 0.229f) < 1e-5f);
}
