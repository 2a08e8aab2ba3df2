/* augment.c - see augment.h.
 *
 * DESIGN: the resampler is PIL's ImagingResample in float: per output
 * coordinate, the centre of its footprint in the source, a support of 1
 * source pixel (bilinear) times the shrink factor when shrinking, triangle
 * weights normalized to 1. Horizontal pass first, over only the source rows
 * the vertical pass will touch, into a float buffer (PIL rounds to 8 bits
 * in between; float is closer to the ideal and costs nothing here), then
 * the vertical pass rounds once. Weights are recomputed per call: a few
 * hundred floats, noise next to the pixels.
 *
 * Speed (bench part 5: the resampler was a quarter of a worker's CPU): the
 * horizontal pass works on 4-lane vectors, one per pixel, and the final
 * round-and-clamp is written so gcc vectorizes it; -O3 for this file
 * (Makefile). Same bytes as the scalar loops: the same float operations in
 * the same order. 0.52-0.72 -> 0.34-0.43 ms per 224x224 output.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "rng.h"

/* Four float lanes (GCC and clang vector extension: SSE on x86-64, NEON on
 * arm64, plain code elsewhere); malloc's 16-byte alignment suffices. */
typedef float v4f __attribute__((vector_size(16)));

double aug_uniform(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* A uniform integer in [0, n). */
static uint32_t below(uint64_t *s, uint32_t n)
{
	return n ? (uint32_t)(rng_next(s) % n) : 0;
}

void aug_random_crop(uint32_t width, uint32_t height, const double scale[2], const double ratio[2],
		     double flip_p, uint64_t *s, struct aug_box *b)
{
	double area = (double)width * height;
	double lr0 = log(ratio[0]), lr1 = log(ratio[1]);

	for (int attempt = 0; attempt < 10; attempt++) {
		double target = area * (scale[0] + (scale[1] - scale[0]) * aug_uniform(s));
		double ar = exp(lr0 + (lr1 - lr0) * aug_uniform(s));
		long w = lround(sqrt(target * ar)), h = lround(sqrt(target / ar));
		if (w > 0 && w <= (long)width && h > 0 && h <= (long)height) {
			b->w = (uint32_t)w;
			b->h = (uint32_t)h;
			b->y = below(s, height - b->h + 1);
			b->x = below(s, width - b->w + 1);
			goto flip;
		}
	}
	/* Fallback: the centre crop closest to the allowed ratios. */
	double in_ratio = (double)width / height;
	if (in_ratio < ratio[0]) {
		b->w = width;
		b->h = (uint32_t)lround(width / ratio[0]);
	} else if (in_ratio > ratio[1]) {
		b->h = height;
		b->w = (uint32_t)lround(height * ratio[1]);
	} else {
		b->w = width;
		b->h = height;
	}
	if (!b->w)
		b->w = 1;
	if (!b->h)
		b->h = 1;
	if (b->w > width)
		b->w = width;
	if (b->h > height)
		b->h = height;
	b->y = (height - b->h) / 2;
	b->x = (width - b->w) / 2;
flip:
	b->flip = aug_uniform(s) < flip_p;
}

static int grow(void **p, size_t *cap, size_t need)
{
	void *q;

	if (need <= *cap)
		return 0;
	q = realloc(*p, need);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = need;
	return 0;
}

/* Triangle-filter taps for OUT output pixels over the source span [B0,
 * B0+BLEN) of a line of IN pixels: IX[2o] first tap, IX[2o+1] tap count,
 * W[o * taps ...] the weights. Returns the tap stride. */
static int coeffs(double b0, double blen, uint32_t in, uint32_t out, float **w, size_t *wcap,
		  int **ix, size_t *ixcap)
{
	double scale = blen / out, fs = scale > 1 ? scale : 1;
	double support = fs;        /* bilinear: 1 source pixel, widened when shrinking */
	int taps = (int)ceil(support) * 2 + 1;

	if (grow((void **)w, wcap, (size_t)out * (size_t)taps * sizeof(float)) ||
	    grow((void **)ix, ixcap, (size_t)out * 2 * sizeof(int)))
		return -ENOMEM;
	for (uint32_t o = 0; o < out; o++) {
		double centre = b0 + (o + 0.5) * scale;
		long lo = (long)floor(centre - support + 0.5), hi = (long)floor(centre + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > (long)in)
			hi = (long)in;
		if (hi - lo > taps)
			hi = lo + taps;
		if (hi <= lo) {         /* a footprint outside the image: nearest edge pixel */
			lo = centre < 0 ? 0 : (long)in - 1;
			hi = lo + 1;
		}
		float *wo = *w + (size_t)o * (size_t)taps;
		double sum = 0;
		for (long k = lo; k < hi; k++) {
			double d = fabs((k + 0.5 - centre) / fs);
			double v = d < 1 ? 1 - d : 0;
			wo[k - lo] = (float)v;
			sum += v;
		}
		if (sum <= 0) {         /* degenerate: take the nearest pixel */
			for (long k = lo; k < hi; k++)
				wo[k - lo] = 0;
			wo[0] = 1;
			sum = 1;
		}
		for (long k = lo; k < hi; k++)
			wo[k - lo] = (float)(wo[k - lo] / sum);
		(*ix)[2 * o] = (int)lo;
		(*ix)[2 * o + 1] = (int)(hi - lo);
	}
	return taps;
}

/* The source pixels OUT outputs' taps IX (coeffs) cover: *FIRST and the
 * count. */
static size_t span(const int *ix, uint32_t out, int *first)
{
	int lo = ix[0], hi = ix[0] + ix[1];

	for (uint32_t o = 1; o < out; o++) {
		if (ix[2 * o] < lo)
			lo = ix[2 * o];
		if (ix[2 * o] + ix[2 * o + 1] > hi)
			hi = ix[2 * o] + ix[2 * o + 1];
	}
	*first = lo;
	return (size_t)(hi - lo);
}

int aug_resize(const uint8_t *src, uint32_t sw, uint32_t sh, double x0, double y0, double bw,
	       double bh, uint8_t *dst, uint32_t dw, uint32_t dh, int flip, struct aug_scratch *s)
{
	int tx = coeffs(x0, bw, sw, dw, &s->wx, &s->wx_cap, &s->ix, &s->ix_cap);
	int ty = coeffs(y0, bh, sh, dh, &s->wy, &s->wy_cap, &s->iy, &s->iy_cap);

	if (tx < 0 || ty < 0)
		return -ENOMEM;
	int r0, c0;
	size_t rows = span(s->iy, dh, &r0);     /* source rows the vertical pass reads */
	size_t cols = span(s->ix, dw, &c0);     /* source columns the horizontal pass reads */
	/* + a row of sums for the vertical pass, + one float: the horizontal
	 * pass stores 4 lanes for a 3-channel pixel. */
	if (grow((void **)&s->tmp, &s->tmp_cap, ((rows + 1) * dw * 3 + 1) * sizeof(float)) ||
	    grow((void **)&s->px, &s->px_cap, (cols * 3 + 1) * sizeof(float)))
		return -ENOMEM;
	/* Horizontal pass. The row's bytes are widened to floats in one loop
	 * that vectorizes; a tap then loads 4 lanes at a pixel (R, G, B and the
	 * next pixel's R, unused) and is one vector multiply-add for all three
	 * channels instead of three scalar ones. Outputs go left to right in
	 * memory (right to left in the source when flipping), so each 4-lane
	 * store's spare lane is overwritten by the next pixel. */
	float *row = s->px;
	row[cols * 3] = 0;
	for (size_t r = 0; r < rows; r++) {
		const uint8_t *in = src + (((size_t)r0 + r) * sw + (size_t)c0) * 3;
		float *t = s->tmp + r * dw * 3;
		for (size_t i = 0; i < cols * 3; i++)
			row[i] = in[i];
		for (uint32_t oo = 0; oo < dw; oo++) {
			uint32_t o = flip ? dw - 1 - oo : oo;
			const float *w = s->wx + (size_t)o * (size_t)tx;
			const float *p = row + (size_t)(s->ix[2 * o] - c0) * 3;
			v4f acc = { 0, 0, 0, 0 }, v;
			for (int k = 0; k < s->ix[2 * o + 1]; k++) {
				memcpy(&v, p + 3 * k, sizeof(v));
				acc += v * w[k];
			}
			memcpy(t + oo * 3, &acc, sizeof(acc));
		}
	}
	/* Vertical pass: whole source rows scaled into one float row, so the
	 * innermost loop runs over contiguous memory and vectorizes. */
	size_t rowlen = (size_t)dw * 3;
	float *acc = s->tmp + rows * rowlen;
	for (uint32_t o = 0; o < dh; o++) {
		const float *w = s->wy + (size_t)o * (size_t)ty;
		const float *base = s->tmp + (size_t)(s->iy[2 * o] - r0) * rowlen;
		uint8_t *out = dst + (size_t)o * rowlen;
		for (size_t i = 0; i < rowlen; i++)
			acc[i] = w[0] * base[i];
		for (int k = 1; k < s->iy[2 * o + 1]; k++) {
			const float *src_row = base + (size_t)k * rowlen, wk = w[k];
			for (size_t i = 0; i < rowlen; i++)
				acc[i] += wk * src_row[i];
		}
		/* Round, then clamp as integers: the same bytes as clamping the
		 * float first, and a loop gcc vectorizes (the float compares
		 * kept it scalar: a quarter of the resampler's time). */
		for (size_t i = 0; i < rowlen; i++) {
			int v = (int)(acc[i] + 0.5f);
			out[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
		}
	}
	return 0;
}

void aug_scratch_free(struct aug_scratch *s)
{
	free(s->tmp);
	free(s->wx);
	free(s->wy);
	free(s->ix);
	free(s->iy);
	free(s->px);
	memset(s, 0, sizeof(*s));
}

void aug_store_u8(const uint8_t *rgb, uint32_t w, uint32_t h, int chw, uint8_t *out)
{
	size_t n = (size_t)w * h;

	if (!chw) {
		memcpy(out, rgb, n * 3);
		return;
	}
	for (size_t i = 0; i < n; i++)
		for (int c = 0; c < 3; c++)
			out[(size_t)c * n + i] = rgb[i * 3 + (size_t)c];
}

void aug_store_f32(const uint8_t *rgb, uint32_t w, uint32_t h, int chw, const float mean[3],
		   const float std[3], float *out)
{
	size_t n = (size_t)w * h;
	float mul[3], add[3];

	for (int c = 0; c < 3; c++) {
		mul[c] = 1.0f / (255.0f * std[c]);
		add[c] = -mean[c] / std[c];
	}
	for (size_t i = 0; i < n; i++)
		for (int c = 0; c < 3; c++) {
			float v = rgb[i * 3 + (size_t)c] * mul[c] + add[c];
			out[chw ? (size_t)c * n + i : i * 3 + (size_t)c] = v;
		}
}
