/* jpeg.c - see jpeg.h.
 *
 * DESIGN: the libjpeg API rather than TurboJPEG's, because TurboJPEG 2.1
 * (Debian 12) cannot decode a crop; libjpeg-turbo's jpeg_crop_scanline and
 * jpeg_skip_scanlines can. Errors leave libjpeg through longjmp to a
 * setjmp in the one function that owns the decoder; everything it
 * allocated is reached from that frame (the decoder itself, and OUT), so
 * nothing leaks on the jump. A "premature end of file" warning inside the
 * rows we keep means libjpeg padded the image with gray: that counts as
 * corrupt. Other warnings (extraneous bytes and the like) are harmless and
 * decoding goes on, as in PIL.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg.h"

struct err {
	struct jpeg_error_mgr mgr;
	jmp_buf jb;
	int eof;                    /* libjpeg ran out of data */
	int oom;
};

static void on_error(j_common_ptr ci)
{
	struct err *e = (struct err *)ci->err;

	e->oom = ci->err->msg_code == JERR_OUT_OF_MEMORY;
	longjmp(e->jb, 1);
}

static void on_message(j_common_ptr ci, int level)
{
	struct err *e = (struct err *)ci->err;

	if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF)
		e->eof = 1;
	if (level < 0)
		ci->err->num_warnings++;
}

static void on_output(j_common_ptr ci)
{
	(void)ci;                   /* never print */
}

static void setup(struct jpeg_decompress_struct *ci, struct err *e)
{
	ci->err = jpeg_std_error(&e->mgr);
	e->mgr.error_exit = on_error;
	e->mgr.emit_message = on_message;
	e->mgr.output_message = on_output;
	e->eof = e->oom = 0;
	jpeg_create_decompress(ci);
}

/* After jpeg_read_header: checks the size, fills INFO. */
static int check_header(struct jpeg_decompress_struct *ci, uint64_t max_pixels, struct jpeg_info *info)
{
	if (!ci->image_width || !ci->image_height)
		return -EBADMSG;
	if ((uint64_t)ci->image_width * ci->image_height > max_pixels)
		return -EFBIG;
	info->width = ci->image_width;
	info->height = ci->image_height;
	info->components = ci->num_components;
	info->progressive = ci->progressive_mode;
	return 0;
}

int jpeg_probe(const void *data, size_t len, uint64_t max_pixels, struct jpeg_info *info)
{
	struct jpeg_decompress_struct ci;
	struct err e;
	int ret;

	if (len < 4 || ((const uint8_t *)data)[0] != 0xFF || ((const uint8_t *)data)[1] != 0xD8)
		return -EBADMSG;
	setup(&ci, &e);
	if (setjmp(e.jb)) {
		jpeg_destroy_decompress(&ci);
		return e.oom ? -ENOMEM : -EBADMSG;
	}
	jpeg_mem_src(&ci, data, (unsigned long)len);
	jpeg_read_header(&ci, TRUE);
	ret = check_header(&ci, max_pixels, info);
	jpeg_destroy_decompress(&ci);
	return ret;
}

/* One CMYK pixel to RGB. Adobe files store the inks inverted. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, int adobe)
{
	unsigned k = adobe ? in[3] : 255u - in[3];

	for (int i = 0; i < 3; i++) {
		unsigned v = adobe ? in[i] : 255u - in[i];
		out[i] = (uint8_t)((v * k + 127) / 255);
	}
}

int jpeg_decode_box(const void *data, size_t len, uint64_t max_pixels, uint32_t x, uint32_t y,
		    uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h, struct jpeg_out *out)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_info info;
	struct err e;
	uint8_t *volatile row = NULL;
	volatile int ret = 0;

	if (len < 4 || ((const uint8_t *)data)[0] != 0xFF || ((const uint8_t *)data)[1] != 0xD8)
		return -EBADMSG;
	setup(&ci, &e);
	if (setjmp(e.jb)) {
		ret = e.oom ? -ENOMEM : -EBADMSG;
		goto out;
	}
	jpeg_mem_src(&ci, data, (unsigned long)len);
	jpeg_read_header(&ci, TRUE);
	if ((ret = check_header(&ci, max_pixels, &info)) < 0)
		goto out;
	if (!w || !h || (uint64_t)x + w > info.width || (uint64_t)y + h > info.height) {
		ret = -EINVAL;
		goto out;
	}
	int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
	ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	ci.dct_method = JDCT_ISLOW;
	/* The smallest scale n/8 whose box still covers the output. */
	unsigned n = 1;
	while (n < 8 && ((uint64_t)w * n < (uint64_t)min_w * 8 || (uint64_t)h * n < (uint64_t)min_h * 8))
		n++;
	ci.scale_num = n;
	ci.scale_denom = 8;
	jpeg_start_decompress(&ci);

	double sx = (double)ci.output_width / info.width, sy = (double)ci.output_height / info.height;
	long c0 = (long)floor(x * sx) - 1, c1 = (long)ceil((x + w) * sx) + 1;
	long r0 = (long)floor(y * sy) - 1, r1 = (long)ceil((y + h) * sy) + 1;
	if (c0 < 0)
		c0 = 0;
	if (r0 < 0)
		r0 = 0;
	if (c1 > (long)ci.output_width)
		c1 = (long)ci.output_width;
	if (r1 > (long)ci.output_height)
		r1 = (long)ci.output_height;
	JDIMENSION xoff = (JDIMENSION)c0, cw = (JDIMENSION)(c1 - c0);
	jpeg_crop_scanline(&ci, &xoff, &cw);        /* widened to iMCU edges */

	size_t ow = (size_t)(c1 - c0), oh = (size_t)(r1 - r0), need = ow * oh * 3;
	if (need > out->cap) {
		uint8_t *p = realloc(out->rgb, need);
		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		out->rgb = p;
		out->cap = need;
	}
	row = malloc((size_t)cw * (size_t)ci.output_components);
	if (!row) {
		ret = -ENOMEM;
		goto out;
	}
	if (r0 > 0 && jpeg_skip_scanlines(&ci, (JDIMENSION)r0) != (JDIMENSION)r0) {
		ret = -EBADMSG;
		goto out;
	}
	for (size_t r = 0; r < oh; r++) {
		JSAMPROW rp = row;
		if (jpeg_read_scanlines(&ci, &rp, 1) != 1 || e.eof) {
			ret = -EBADMSG;     /* truncated inside the box */
			goto out;
		}
		const uint8_t *src = row + (size_t)(c0 - (long)xoff) * (size_t)ci.output_components;
		uint8_t *dst = out->rgb + r * ow * 3;
		if (cmyk) {
			for (size_t i = 0; i < ow; i++)
				cmyk_to_rgb(src + i * 4, dst + i * 3, ci.saw_Adobe_marker);
		} else {
			memcpy(dst, src, ow * 3);
		}
	}
	out->w = (uint32_t)ow;
	out->h = (uint32_t)oh;
	out->scale = sx;
	out->x0 = x * sx - (double)c0;
	out->y0 = y * sy - (double)r0;
	out->bw = w * sx;
	out->bh = h * sy;
out:
	free(row);
	jpeg_destroy_decompress(&ci);   /* also ends a decompression cut short */
	return ret;
}

void jpeg_out_free(struct jpeg_out *out)
{
	free(out->rgb);
	out->rgb = NULL;
	out->cap = 0;
}
