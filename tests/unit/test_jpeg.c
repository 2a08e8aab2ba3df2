/* test_jpeg.c - the decoder on good, odd and hostile files, made here with
 * TurboJPEG: crops equal the same pixels of a full decode; scaling picks the
 * smallest DCT scale that covers the output; bad input is an error code. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "jpeg.h"

#define W 320
#define H 240

static unsigned char *encode(int pf, int samp, int flags, unsigned long *len)
{
	int ps = tjPixelSize[pf];
	unsigned char *px = malloc((size_t)W * H * (size_t)ps), *jpg = NULL;
	tjhandle tj = tjInitCompress();

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			for (int c = 0; c < ps; c++)
				px[((size_t)y * W + x) * (size_t)ps + (size_t)c] =
					(unsigned char)(c == 3 ? 255 - x / 2 : (x * (c + 1) + y * (3 - c)) / 3);
	cr_assert_eq(tjCompress2(tj, px, W, 0, H, pf, &jpg, len, samp, 92, flags), 0, "%s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	free(px);
	return jpg;
}

/* Full-size RGB decode with TurboJPEG, the reference. */
static unsigned char *full(const unsigned char *jpg, unsigned long len)
{
	unsigned char *rgb = malloc((size_t)W * H * 3);
	tjhandle tj = tjInitDecompress();

	cr_assert_eq(tjDecompress2(tj, jpg, len, rgb, W, 0, H, TJPF_RGB, 0), 0);
	tjDestroy(tj);
	return rgb;
}

Test(jpeg, probe_reads_the_header)
{
	unsigned long len;
	unsigned char *j = encode(TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE, &len);
	struct jpeg_info i;

	cr_assert_eq(jpeg_probe(j, len, JPEG_MAX_PIXELS_DEFAULT, &i), 0);
	cr_expect(i.width == W && i.height == H && i.components == 3 && i.progressive);
	cr_expect_eq(jpeg_probe(j, len, W * H - 1, &i), -EFBIG);
	tjFree(j);
}

static void crop_matches(int pf, int samp, int flags)
{
	unsigned long len;
	unsigned char *j = encode(pf, samp, flags, &len);
	unsigned char *ref = full(j, len);
	struct jpeg_out o = { 0 };
	static const uint32_t boxes[][4] = { { 0, 0, W, H }, { 37, 21, 100, 80 }, { 250, 200, 70, 40 }, { 1, 1, 1, 1 } };

	for (size_t b = 0; b < sizeof(boxes) / sizeof(boxes[0]); b++) {
		const uint32_t *bx = boxes[b];
		cr_assert_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, bx[0], bx[1], bx[2], bx[3],
					     bx[2], bx[3], &o), 0);
		cr_expect_eq(o.scale, 1.0);
		cr_expect(o.bw == bx[2] && o.bh == bx[3]);
		int diff = 0;
		for (uint32_t y = 0; y < bx[3]; y++)
			diff |= memcmp(o.rgb + ((size_t)(y + (uint32_t)o.y0) * o.w + (size_t)o.x0) * 3,
				       ref + ((size_t)(bx[1] + y) * W + bx[0]) * 3, (size_t)bx[2] * 3);
		cr_expect(!diff, "box %zu differs from the full decode (pf %d)", b, pf);
	}
	jpeg_out_free(&o);
	free(ref);
	tjFree(j);
}

Test(jpeg, crops_equal_a_full_decode)
{
	crop_matches(TJPF_RGB, TJSAMP_420, 0);
	crop_matches(TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE);
	crop_matches(TJPF_GRAY, TJSAMP_GRAY, 0);
}

Test(jpeg, smallest_dct_scale_that_covers_the_output)
{
	unsigned long len;
	unsigned char *j = encode(TJPF_RGB, TJSAMP_420, 0, &len);
	struct jpeg_out o = { 0 };

	cr_assert_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, 0, 0, W, H, 80, 60, &o), 0);
	cr_expect_eq(o.scale, 0.25);
	cr_expect(o.w == 80 && o.h == 60, "%ux%u", o.w, o.h);
	cr_assert_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, 0, 0, W, H, 81, 60, &o), 0);
	cr_expect_eq(o.scale, 0.375);
	cr_assert_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, 40, 40, 200, 100, 224, 224, &o), 0);
	cr_expect_eq(o.scale, 1.0);         /* upscaling: full resolution */
	cr_expect(o.bw >= 224 / 8.0 && o.x0 >= 0 && o.x0 + o.bw <= o.w && o.y0 + o.bh <= o.h);
	jpeg_out_free(&o);
	tjFree(j);
}

Test(jpeg, cmyk_comes_out_as_rgb)
{
	unsigned long len;
	unsigned char *j = encode(TJPF_CMYK, TJSAMP_444, 0, &len);
	struct jpeg_out o = { 0 };
	struct jpeg_info i;

	cr_assert_eq(jpeg_probe(j, len, JPEG_MAX_PIXELS_DEFAULT, &i), 0);
	cr_expect_eq(i.components, 4);
	cr_assert_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, 10, 10, 50, 50, 50, 50, &o), 0);
	/* Pixel (x, y) was C,M,Y = (x, 2x+y, 3x)/3-ish with K = 255 - x/2 in
	 * Adobe's inverted convention: R = C * K / 255. */
	uint32_t x = 30, y = 30;
	const uint8_t *p = o.rgb + ((size_t)(y + (uint32_t)o.y0 - 10) * o.w + x + (uint32_t)o.x0 - 10) * 3;
	int c = (int)(x * 1 + y * 3) / 3, k = 255 - (int)x / 2;
	cr_expect(abs(p[0] - c * k / 255) <= 6, "R %d want %d", p[0], c * k / 255);
	jpeg_out_free(&o);
	tjFree(j);
}

Test(jpeg, bad_files_are_errors_not_crashes)
{
	unsigned long len;
	unsigned char *j = encode(TJPF_RGB, TJSAMP_420, 0, &len);
	struct jpeg_out o = { 0 };
	struct jpeg_info i;
	static const unsigned char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
	unsigned char junk[4096];

	cr_expect_eq(jpeg_probe(png, sizeof(png), JPEG_MAX_PIXELS_DEFAULT, &i), -EBADMSG);
	cr_expect_eq(jpeg_decode_box(png, sizeof(png), JPEG_MAX_PIXELS_DEFAULT, 0, 0, 1, 1, 1, 1, &o), -EBADMSG);
	cr_expect_eq(jpeg_probe(j, 0, JPEG_MAX_PIXELS_DEFAULT, &i), -EBADMSG);
	for (size_t k = 0; k < sizeof(junk); k++)
		junk[k] = (unsigned char)(k * 2654435761u >> 13);
	junk[0] = 0xFF, junk[1] = 0xD8;
	cr_expect_eq(jpeg_decode_box(junk, sizeof(junk), JPEG_MAX_PIXELS_DEFAULT, 0, 0, 1, 1, 1, 1, &o), -EBADMSG);
	/* Truncated: the bottom rows are missing. */
	cr_expect_eq(jpeg_decode_box(j, len * 6 / 10, JPEG_MAX_PIXELS_DEFAULT, 0, H - 20, W, 20, W, 20, &o),
		     -EBADMSG);
	cr_expect_eq(jpeg_decode_box(j, 300, JPEG_MAX_PIXELS_DEFAULT, 0, 0, W, H, W, H, &o), -EBADMSG);
	/* A box outside the image. */
	cr_expect_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, W - 10, 0, 11, 1, 1, 1, &o), -EINVAL);
	/* Flipped bits anywhere: an answer every time, never a crash. */
	unsigned char *f = malloc(len);
	for (int t = 0; t < 300; t++) {
		memcpy(f, j, len);
		for (int b = 0; b < 1 + t % 8; b++)
			f[(size_t)(t * 7919 + b * 104729) % len] ^= (unsigned char)(1 << (t + b) % 8);
		int r = jpeg_decode_box(f, len, JPEG_MAX_PIXELS_DEFAULT, 0, 0, W, H, 64, 64, &o);
		cr_expect(r == 0 || r == -EBADMSG || r == -EFBIG || r == -EINVAL, "flip %d: %d", t, r);
	}
	free(f);
	/* A header that claims 60000 x 60000: refused before any allocation. */
	for (unsigned long k = 2; k + 9 < len; k++)
		if (j[k] == 0xFF && j[k + 1] == 0xC0) {
			j[k + 5] = 0xEA, j[k + 6] = 0x60;      /* height 60000 */
			j[k + 7] = 0xEA, j[k + 8] = 0x60;      /* width 60000 */
			break;
		}
	cr_expect_eq(jpeg_probe(j, len, JPEG_MAX_PIXELS_DEFAULT, &i), -EFBIG);
	cr_expect_eq(jpeg_decode_box(j, len, JPEG_MAX_PIXELS_DEFAULT, 0, 0, 10, 10, 10, 10, &o), -EFBIG);
	jpeg_out_free(&o);
	tjFree(j);
}
