/* jpeg.h - decoding one training image: only the crop, at the smallest
 * DCT scale that still covers the output, never trusting the file.
 *
 * A training step needs a crop of each image resized to, say, 224x224. The
 * decoder therefore asks libjpeg-turbo for just that: DCT-domain scaling
 * (1/8 .. 8/8) picks the smallest decoded size whose crop is still at least
 * the output size, jpeg_crop_scanline() decodes only the crop's columns (to
 * the next iMCU edge), and jpeg_skip_scanlines() skips the rows above it;
 * rows below are never decoded.
 *
 * Bad input is an answer, not a crash: a file that is not a JPEG, is
 * truncated inside the crop, or has any decoding error gives -EBADMSG; a
 * header announcing more than MAX_PIXELS gives -EFBIG before anything large
 * is allocated. libjpeg never prints and never exits the process here.
 * Grayscale, CMYK and YCCK images come out as RGB; progressive ones decode.
 *
 * Thread safety: none needed; every call uses its own decoder and OUT.
 */
#ifndef EPOCHFS_JPEG_H
#define EPOCHFS_JPEG_H

#include <stddef.h>
#include <stdint.h>

#define JPEG_MAX_PIXELS_DEFAULT (100u * 1000u * 1000u)   /* 100 MP */

struct jpeg_info {
	uint32_t width, height;
	int components;             /* in the file: 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK */
	int progressive;
};

/* Reads the header of DATA (LEN bytes). 0; -EBADMSG (not a JPEG, or a
 * corrupt header); -EFBIG (more than MAX_PIXELS pixels). */
int jpeg_probe(const void *data, size_t len, uint64_t max_pixels, struct jpeg_info *info);

/* A decoded region. RGB is owned by the struct and grown as needed, so one
 * jpeg_out per worker thread allocates only while images grow. */
struct jpeg_out {
	uint8_t *rgb;               /* W x H x 3, rows packed */
	size_t cap;
	uint32_t w, h;              /* the decoded region, in decoded pixels */
	double x0, y0, bw, bh;      /* the requested box inside it, in decoded pixels */
	double scale;               /* decoded pixels per image pixel */
};

/* Decodes box (X, Y, W, H) (image pixels; must lie inside the image) to
 * RGB at the smallest DCT scale whose box still measures at least MIN_W x
 * MIN_H (full scale if none does), with a pixel of margin around it for the
 * resampler where the image has one. Returns 0; -EBADMSG, -EFBIG, -EINVAL
 * (a box outside the image), -ENOMEM. */
int jpeg_decode_box(const void *data, size_t len, uint64_t max_pixels, uint32_t x, uint32_t y,
		    uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h, struct jpeg_out *out);

void jpeg_out_free(struct jpeg_out *out);

#endif
