/* test_consumer.c - the GPU consumer over its host backend (no GPU needed):
 * a uint8 batch normalized by the consumer is the float32 batch prep makes
 * from the same pixels, byte for byte; the DLPack tensor describes its
 * memory; the ring refuses a submit too many and a take too many; bad files
 * fail with their path and queue nothing; output buffers are pooled and
 * reused; tensors outlive the consumer. The CUDA backend runs the same
 * consumer (tests/cuda/run.sh compares the two on a GPU). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "gpu/consumer.h"
#include "helpers.h"

static const float MEAN[3] = { 0.485f, 0.456f, 0.406f }, STD[3] = { 0.229f, 0.224f, 0.225f };
static char *dir;

static void setup(void)
{
	dir = th_tmpdir();
	cr_assert(dir);
}

static void teardown(void)
{
	th_rmrf(dir);
	free(dir);
}

/* Writes batch INDEX of N samples of SIZE x SIZE in DTYPE/LAYOUT as prep
 * does (batch_layout, aug_store_*), pixels from (INDEX, sample); returns
 * its path (static buffer, one per call site is enough). */
static const char *write_batch(const char *name, uint32_t n, uint32_t size, uint32_t dtype, uint32_t layout,
			       uint64_t index)
{
	static char path[8][4200];
	static int next;
	struct batch_params p = { .size = size, .dtype = dtype, .layout = layout, .seed = 3 };
	struct batch_header h;
	size_t total, sample;
	uint8_t *file, *rgb = malloc((size_t)size * size * 3);
	char *out = path[next++ % 8];

	memcpy(p.mean, MEAN, sizeof(MEAN));
	memcpy(p.std, STD, sizeof(STD));
	total = batch_layout(&p, n, 2, index, index * n, &h);
	sample = batch_sample_bytes(&p);
	file = calloc(1, total);
	memcpy(file, &h, sizeof(h));                /* little-endian host, as the daemon */
	for (uint32_t i = 0; i < n; i++) {
		int32_t label = (int32_t)((index * 7 + i) % 10);
		memcpy(file + h.labels_offset + 4 * i, &label, 4);
		for (size_t k = 0; k < (size_t)size * size * 3; k++)
			rgb[k] = (uint8_t)(k * 13 + i * 101 + index * 7);
		if (dtype == BATCH_F32)
			aug_store_f32(rgb, size, size, layout == BATCH_NCHW, MEAN, STD,
				      (float *)(file + h.pixels_offset + i * sample));
		else
			aug_store_u8(rgb, size, size, layout == BATCH_NCHW, file + h.pixels_offset + i * sample);
	}
	snprintf(out, 4200, "%s/%s", dir, name);
	FILE *f = fopen(out, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(file, 1, total, f), total);
	fclose(f);
	free(file);
	free(rgb);
	return out;
}

/* The pixels of the batch file at PATH (malloc'd), and their size. */
static void *pixels_of(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	struct batch_header h;
	void *px;

	cr_assert(f);
	cr_assert_eq(fread(&h, sizeof(h), 1, f), 1);
	px = malloc(h.pixels_bytes);
	fseek(f, (long)h.pixels_offset, SEEK_SET);
	cr_assert_eq(fread(px, 1, h.pixels_bytes, f), h.pixels_bytes);
	fclose(f);
	*len = h.pixels_bytes;
	return px;
}

static struct gpucons *open_host(uint32_t depth, uint32_t mode, uint32_t out_layout)
{
	struct gpucons_opts o = { .depth = depth, .mode = mode, .out_layout = out_layout };
	struct gpu_backend *b;
	struct gpucons *c;
	char why[256] = "";

	memcpy(o.mean, MEAN, sizeof(MEAN));
	memcpy(o.std, STD, sizeof(STD));
	cr_assert_eq(backend_host_new(&b), 0);
	cr_assert_eq(gpucons_new(&o, b, &c, why, sizeof(why)), 0, "%s", why);
	return c;
}

static size_t tensor_bytes(const DLTensor *t)
{
	size_t n = t->dtype.bits / 8;

	for (int i = 0; i < t->ndim; i++)
		n *= (size_t)t->shape[i];
	return n;
}

TestSuite(consumer, .init = setup, .fini = teardown);

Test(consumer, a_normalized_uint8_batch_is_prep_float32_batch)
{
	const uint32_t layouts[] = { BATCH_NHWC, BATCH_NCHW };

	for (int in = 0; in < 2; in++)
		for (int out = 0; out < 2; out++) {
			const char *u8 = write_batch("u8", 4, 16, BATCH_U8, layouts[in], 5);
			const char *f32 = write_batch("f32", 4, 16, BATCH_F32, layouts[out], 5);
			struct gpucons *c = open_host(2, NORM_AFFINE, layouts[out]);
			struct gpucons_batch b;
			size_t len;
			void *want = pixels_of(f32, &len);

			cr_assert_eq(gpucons_submit(c, u8), 0, "%s", gpucons_why(c));
			cr_assert_eq(gpucons_next(c, 0, 0, &b), 0, "%s", gpucons_why(c));
			cr_assert_eq(tensor_bytes(&b.images->dl_tensor), len);
			cr_expect(!memcmp(b.images->dl_tensor.data, want, len), "%s in, %s out: not prep's float32 bytes",
				  in ? "NCHW" : "NHWC", out ? "NCHW" : "NHWC");
			b.images->deleter(b.images);
			free(want);
			gpucons_free(c);
		}
}

Test(consumer, the_tensor_describes_its_memory)
{
	const char *u8 = write_batch("u8", 6, 8, BATCH_U8, BATCH_NHWC, 3);
	struct gpucons *c = open_host(0, NORM_SCALE, BATCH_NCHW);
	struct gpucons_batch b;

	cr_assert_eq(gpucons_submit(c, u8), 0, "%s", gpucons_why(c));
	cr_assert_eq(gpucons_next(c, 0, GPUCONS_SYNC, &b), 0);
	DLTensor *t = &b.images->dl_tensor;
	cr_expect(t->device.device_type == kDLCPU && t->device.device_id == 0);
	cr_expect(t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1);
	cr_expect(t->ndim == 4 && t->byte_offset == 0);
	cr_expect(t->shape[0] == 6 && t->shape[1] == 3 && t->shape[2] == 8 && t->shape[3] == 8);
	cr_expect(t->strides[0] == 192 && t->strides[1] == 64 && t->strides[2] == 8 && t->strides[3] == 1);
	cr_expect(((uintptr_t)t->data & 255) == 0, "not 256-byte aligned");
	cr_expect(b.n == 6 && b.epoch == 2 && b.index == 3 && b.bad_samples == 0);
	for (uint32_t i = 0; i < b.n; i++)
		cr_expect_eq(b.labels[i], (int32_t)((3 * 7 + i) % 10));
	/* Sample 1, channel 2, pixel (y 3, x 4) of NHWC bytes, scaled. */
	uint8_t v = (uint8_t)(((3 * 8 + 4) * 3 + 2) * 13 + 1 * 101 + 3 * 7);
	cr_expect(((float *)t->data)[192 + 2 * 64 + 3 * 8 + 4] == (float)v / 255.0f);
	b.images->deleter(b.images);
	gpucons_free(c);
}

Test(consumer, raw_batches_keep_their_type)
{
	const char *u8 = write_batch("u8", 2, 8, BATCH_U8, BATCH_NCHW, 0);
	const char *f32 = write_batch("f32", 2, 8, BATCH_F32, BATCH_NCHW, 0);
	struct gpucons *c = open_host(2, NORM_NONE, BATCH_NCHW);
	struct gpucons_batch a, b;
	size_t la, lb;
	void *wa = pixels_of(u8, &la), *wb = pixels_of(f32, &lb);

	cr_assert_eq(gpucons_submit(c, u8), 0, "%s", gpucons_why(c));
	cr_assert_eq(gpucons_submit(c, f32), 0, "%s", gpucons_why(c));
	cr_assert_eq(gpucons_next(c, 0, 0, &a), 0);
	cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
	cr_expect(a.images->dl_tensor.dtype.code == kDLUInt && a.images->dl_tensor.dtype.bits == 8);
	cr_expect(b.images->dl_tensor.dtype.code == kDLFloat);
	cr_expect(!memcmp(a.images->dl_tensor.data, wa, la) && !memcmp(b.images->dl_tensor.data, wb, lb));
	a.images->deleter(a.images);
	b.images->deleter(b.images);
	free(wa), free(wb);
	gpucons_free(c);
}

Test(consumer, auto_scales_uint8_and_keeps_float32)
{
	const char *u8 = write_batch("u8", 2, 8, BATCH_U8, BATCH_NCHW, 0);
	const char *f32 = write_batch("f32", 2, 8, BATCH_F32, BATCH_NCHW, 0);
	struct gpucons *c = open_host(2, GPUCONS_AUTO, BATCH_NCHW);
	struct gpucons_batch a, b;
	size_t la, lb;
	uint8_t *wa = pixels_of(u8, &la);
	void *wb = pixels_of(f32, &lb);

	cr_assert_eq(gpucons_submit(c, u8), 0, "%s", gpucons_why(c));
	cr_assert_eq(gpucons_submit(c, f32), 0, "%s", gpucons_why(c));
	cr_assert_eq(gpucons_next(c, 0, 0, &a), 0);
	cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
	cr_assert_eq(tensor_bytes(&a.images->dl_tensor), la * 4);
	for (size_t i = 0; i < la; i++)
		cr_assert(((float *)a.images->dl_tensor.data)[i] == (float)wa[i] / 255.0f);
	cr_expect(tensor_bytes(&b.images->dl_tensor) == lb && !memcmp(b.images->dl_tensor.data, wb, lb));
	a.images->deleter(a.images);
	b.images->deleter(b.images);
	free(wa), free(wb);
	gpucons_free(c);
}

Test(consumer, the_ring_refuses_one_too_many)
{
	const char *p = write_batch("u8", 2, 8, BATCH_U8, BATCH_NHWC, 0);
	struct gpucons *c = open_host(2, NORM_SCALE, BATCH_NCHW);
	struct gpucons_batch b;
	struct gpucons_stats s;

	cr_expect_eq(gpucons_next(c, 0, 0, &b), -ENOENT);
	cr_expect(strstr(gpucons_why(c), "no batch"), "%s", gpucons_why(c));
	cr_assert_eq(gpucons_submit(c, p), 0);
	cr_assert_eq(gpucons_submit(c, p), 0);
	cr_expect_eq(gpucons_submit(c, p), -EBUSY);
	gpucons_get_stats(c, &s);
	cr_expect_eq(s.queued, 2);
	cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
	b.images->deleter(b.images);
	cr_expect_eq(gpucons_submit(c, p), 0, "%s", gpucons_why(c));
	gpucons_free(c);            /* with two queued: dropped */
}

Test(consumer, bad_files_name_themselves_and_queue_nothing)
{
	const char *good = write_batch("good", 2, 8, BATCH_U8, BATCH_NHWC, 0);
	const char *f32 = write_batch("f32", 2, 8, BATCH_F32, BATCH_NHWC, 0);
	const char *cut = write_batch("cut", 2, 8, BATCH_U8, BATCH_NHWC, 0);
	struct gpucons *c = open_host(2, NORM_SCALE, BATCH_NCHW);
	struct gpucons_stats s;
	char missing[4200];

	cr_assert_eq(truncate(cut, 500), 0);
	snprintf(missing, sizeof(missing), "%s/nothere", dir);
	cr_expect_eq(gpucons_submit(c, missing), -ENOENT);
	cr_expect(strstr(gpucons_why(c), "nothere: No such file"), "%s", gpucons_why(c));
	cr_expect_eq(gpucons_submit(c, cut), -ENODATA);
	cr_expect(strstr(gpucons_why(c), "cut: shorter than its header says"), "%s", gpucons_why(c));
	cr_expect_eq(gpucons_submit(c, f32), -EINVAL);
	cr_expect(strstr(gpucons_why(c), "float32"), "%s", gpucons_why(c));
	cr_expect_eq(gpucons_submit(c, dir), -EISDIR);
	gpucons_get_stats(c, &s);
	cr_expect_eq(s.queued, 0);
	cr_expect_eq(gpucons_submit(c, good), 0, "%s", gpucons_why(c));
	gpucons_free(c);
}

Test(consumer, buffers_are_pooled_and_reused)
{
	const char *p = write_batch("u8", 4, 16, BATCH_U8, BATCH_NHWC, 0);
	struct gpucons *c = open_host(3, NORM_AFFINE, BATCH_NCHW);
	struct gpucons_batch held[6], b;
	struct gpucons_stats s;

	for (int i = 0; i < 3; i++)
		cr_assert_eq(gpucons_submit(c, p), 0);
	for (int i = 0; i < 20; i++) {          /* a training loop: take, use, drop, refill */
		cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
		b.images->deleter(b.images);
		cr_assert_eq(gpucons_submit(c, p), 0);
	}
	gpucons_get_stats(c, &s);
	cr_expect(s.buffers == 3 && s.tensors == 0 && s.queued == 3, "buffers %u tensors %u", s.buffers, s.tensors);
	for (int i = 0; i < 6; i++) {           /* a job keeping its batches */
		cr_assert_eq(gpucons_next(c, 0, 0, &held[i]), 0);
		cr_assert_eq(gpucons_submit(c, p), 0);
	}
	gpucons_get_stats(c, &s);
	cr_expect(s.buffers == 9 && s.tensors == 6 && s.pooled == 0, "buffers %u", s.buffers);
	for (int i = 0; i < 6; i++)
		held[i].images->deleter(held[i].images);
	gpucons_get_stats(c, &s);
	cr_expect(s.pooled == 5 && s.buffers == 8, "pooled %u of %u: at most depth + 2 kept", s.pooled, s.buffers);
	gpucons_free(c);
}

Test(consumer, sizes_change_and_results_follow)
{
	const char *big = write_batch("big", 8, 16, BATCH_U8, BATCH_NHWC, 1);
	const char *small = write_batch("small", 3, 16, BATCH_U8, BATCH_NHWC, 2);
	const char *bigger = write_batch("bigger", 8, 24, BATCH_U8, BATCH_NHWC, 3);
	const char *paths[] = { big, small, bigger, small, big };
	struct gpucons *c = open_host(1, NORM_NONE, BATCH_NHWC);

	for (int i = 0; i < 5; i++) {
		struct gpucons_batch b;
		size_t len;
		void *want = pixels_of(paths[i], &len);
		cr_assert_eq(gpucons_submit(c, paths[i]), 0, "%s", gpucons_why(c));
		cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
		cr_expect(tensor_bytes(&b.images->dl_tensor) == len && !memcmp(b.images->dl_tensor.data, want, len),
			  "batch %d", i);
		b.images->deleter(b.images);
		free(want);
	}
	gpucons_free(c);
}

Test(consumer, tensors_outlive_the_consumer)
{
	const char *p = write_batch("u8", 2, 8, BATCH_U8, BATCH_NHWC, 0);
	struct gpucons *c = open_host(2, NORM_NONE, BATCH_NHWC);
	struct gpucons_batch b;
	size_t len;
	void *want = pixels_of(p, &len);

	cr_assert_eq(gpucons_submit(c, p), 0);
	cr_assert_eq(gpucons_next(c, 0, 0, &b), 0);
	cr_assert_eq(gpucons_submit(c, p), 0);
	gpucons_free(c);
	cr_expect(!memcmp(b.images->dl_tensor.data, want, len));
	b.images->deleter(b.images);        /* frees the consumer's last memory */
	free(want);
}

Test(consumer, bad_options_are_refused)
{
	struct gpucons_opts o = { .mode = NORM_AFFINE, .out_layout = BATCH_NCHW };
	struct gpu_backend *b;
	struct gpucons *c;
	char why[256] = "";

	memcpy(o.mean, MEAN, sizeof(MEAN));
	cr_assert_eq(backend_host_new(&b), 0);
	cr_expect_eq(gpucons_new(&o, b, &c, why, sizeof(why)), -EINVAL);      /* std 0: b is freed */
	cr_expect(strstr(why, "std"), "%s", why);
	memcpy(o.std, STD, sizeof(STD));
	o.depth = GPUCONS_DEPTH_MAX + 1;
	cr_assert_eq(backend_host_new(&b), 0);
	cr_expect_eq(gpucons_new(&o, b, &c, why, sizeof(why)), -EINVAL);
	o.depth = 0;
	o.out_layout = 2;
	cr_assert_eq(backend_host_new(&b), 0);
	cr_expect_eq(gpucons_new(&o, b, &c, why, sizeof(why)), -EINVAL);
}
