/* augment.h - torchvision's training transforms, in C.
 *
 * The standard ImageNet train pipeline is RandomResizedCrop(size) +
 * RandomHorizontalFlip() + ToTensor() (+ Normalize). This module draws the
 * same distribution of crop boxes as torchvision 0.14's
 * RandomResizedCrop.get_params (ten tries of scale x log-uniform ratio,
 * then a center-crop fallback), and resamples with the antialiased
 * bilinear filter PIL applies when torchvision resizes a PIL image: a
 * triangle kernel, widened by the shrink factor when shrinking. The source
 * box may be fractional, so a crop decoded at a DCT scale maps onto the
 * output exactly as the full-size crop would.
 *
 * Random draws come from a splitmix64 state the caller seeds (prep derives
 * it from seed, epoch and position), so every sample can be regenerated
 * bit for bit.
 */
#ifndef EPOCHFS_AUGMENT_H
#define EPOCHFS_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

struct aug_box {
	uint32_t x, y, w, h;        /* the crop, in image pixels (torchvision's j, i, w, h) */
	int flip;                   /* mirror left-right */
};

/* A uniform double in [0, 1) from splitmix64 state S. */
double aug_uniform(uint64_t *s);

/* torchvision's RandomResizedCrop.get_params for a WIDTH x HEIGHT image,
 * with SCALE = {min, max} area fractions and RATIO = {min, max} aspect
 * ratios; then a flip with probability FLIP_P. */
void aug_random_crop(uint32_t width, uint32_t height, const double scale[2], const double ratio[2],
		     double flip_p, uint64_t *s, struct aug_box *box);

/* Scratch for aug_resize, reused across calls (grown as needed). */
struct aug_scratch {
	float *tmp;
	size_t tmp_cap;
	float *wx, *wy;             /* filter weights */
	int *ix, *iy;               /* first tap and tap count per output pixel */
	size_t wx_cap, wy_cap, ix_cap, iy_cap;
	float *px;                  /* one source row's span as floats, + 1 */
	size_t px_cap;
};

/* Resamples the box (X0, Y0, BW, BH) (fractional, in pixels of SRC, an SW x
 * SH RGB image, rows packed) to a DW x DH RGB image in DST, mirrored
 * left-right if FLIP. 0 or -ENOMEM (scratch). */
int aug_resize(const uint8_t *src, uint32_t sw, uint32_t sh, double x0, double y0, double bw,
	       double bh, uint8_t *dst, uint32_t dw, uint32_t dh, int flip, struct aug_scratch *s);

void aug_scratch_free(struct aug_scratch *s);

/* Stores an HxW RGB uint8 image (HWC) in a batch's sample slot: as uint8 or
 * as float32 ((v / 255 - mean[c]) / std[c], ToTensor + Normalize), in HWC or
 * CHW order. */
void aug_store_u8(const uint8_t *rgb, uint32_t w, uint32_t h, int chw, uint8_t *out);
void aug_store_f32(const uint8_t *rgb, uint32_t w, uint32_t h, int chw, const float mean[3],
		   const float std[3], float *out);

#endif
