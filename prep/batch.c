/* batch.c - see batch.h. */
#include <errno.h>
#include <string.h>
#include <stdlib.h>

#include "batch.h"
#include "rng.h"

_Static_assert(sizeof(struct batch_header) == BATCH_HEADER_BYTES, "batch header is 128 bytes");

size_t batch_sample_bytes(const struct batch_params *p)
{
	return (size_t)p->size * p->size * 3 * (p->dtype == BATCH_F32 ? 4 : 1);
}

size_t batch_layout(const struct batch_params *p, uint32_t n, uint32_t epoch, uint64_t index,
		    uint64_t first, struct batch_header *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, BATCH_MAGIC, 8);
	h->version = BATCH_VERSION;
	h->header_bytes = BATCH_HEADER_BYTES;
	h->n = n;
	h->h = h->w = p->size;
	h->c = 3;
	h->dtype = p->dtype;
	h->layout = p->layout;
	h->epoch = epoch;
	h->index = index;
	h->first = first;
	h->seed = p->seed;
	h->labels_offset = BATCH_HEADER_BYTES;
	h->pixels_offset = (BATCH_HEADER_BYTES + 4ull * n + 63) & ~63ull;
	h->pixels_bytes = (uint64_t)n * batch_sample_bytes(p);
	h->total_bytes = h->pixels_offset + h->pixels_bytes;
	return (size_t)h->total_bytes;
}

/* A generator state for (seed, a, b): distinct streams for distinct keys. */
static uint64_t stream(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t s = seed ^ 0x6a09e667f3bcc909ull;

	s = rng_next(&s) ^ (a * 0x9e3779b97f4a7c15ull);
	s = rng_next(&s) ^ (b * 0xc2b2ae3d27d4eb4full);
	return rng_next(&s);
}

void batch_order(uint64_t seed, uint32_t epoch, uint32_t n, uint32_t *order)
{
	uint64_t s = stream(seed, epoch, ~0ull);

	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(rng_next(&s) % i), t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

void batch_worker_free(struct batch_worker *w)
{
	jpeg_out_free(&w->dec);
	aug_scratch_free(&w->aug);
	free(w->rgb);
	memset(w, 0, sizeof(*w));
}

static void store(const struct batch_params *p, const uint8_t *rgb, void *out)
{
	if (p->dtype == BATCH_F32)
		aug_store_f32(rgb, p->size, p->size, p->layout == BATCH_NCHW, p->mean, p->std, out);
	else
		aug_store_u8(rgb, p->size, p->size, p->layout == BATCH_NCHW, out);
}

int batch_make_sample(const struct batch_params *p, struct batch_worker *w, uint32_t epoch,
		      uint64_t position, const void *data, size_t len, void *out)
{
	size_t need = (size_t)p->size * p->size * 3;
	uint64_t s = stream(p->seed, epoch, position);
	struct jpeg_info info;
	struct aug_box b;
	int err;

	if (need > w->rgb_cap) {
		uint8_t *q = realloc(w->rgb, need);
		if (!q)
			return -ENOMEM;
		w->rgb = q;
		w->rgb_cap = need;
	}
	err = jpeg_probe(data, len, p->max_pixels, &info);
	if (!err) {
		aug_random_crop(info.width, info.height, p->scale, p->ratio, p->flip, &s, &b);
		err = jpeg_decode_box(data, len, p->max_pixels, b.x, b.y, b.w, b.h, p->size, p->size, &w->dec);
	}
	if (!err)
		err = aug_resize(w->dec.rgb, w->dec.w, w->dec.h, w->dec.x0, w->dec.y0, w->dec.bw, w->dec.bh,
				 w->rgb, p->size, p->size, b.flip, &w->aug);
	if (err == -ENOMEM)
		return err;
	if (err)
		memset(w->rgb, 128, need);      /* the substitute: deterministic, label kept */
	store(p, w->rgb, out);
	return err ? (err == -EFBIG ? -EFBIG : -EBADMSG) : 0;
}
