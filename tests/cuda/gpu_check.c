/* gpu_check.c - the GPU consumer against the CPU path, byte for byte, on
 * real batches; then what it costs per batch. Run by tests/cuda/run.sh.
 *
 *   gpu_check DIR [BENCH_BATCHES]
 *
 * 1. Makes real batches in DIR with prep's own code (JPEGs decoded,
 *    cropped, resized and flipped by batch_make_sample, headers by
 *    batch_layout): a full batch and a short last one, each as uint8 and as
 *    float32 (ImageNet mean/std), in NHWC and in NCHW. Same spec, epoch and
 *    positions, so the uint8 and float32 files hold the same samples.
 * 2. Reads them through libepochfs_gpu.so's consumer on the host backend
 *    (the CPU reference) and checks every mode and layout against what the
 *    CPU path wrote: a uint8 batch normalized must be the float32 file, a
 *    scaled one x / 255 correctly rounded, a raw one the other layout's file.
 * 3. Without a usable GPU: says how many checks passed and exits 77 with
 *    the reason. With one: the same checks on CUDA device 0, pipelined
 *    (3 batches in flight), half of them handed over to the stream without
 *    a host wait; then, unless BENCH_BATCHES is 0, times the consumer
 *    against the CPU path (read, x / 255 on the CPU, copy from pageable
 *    memory) on 64 x 224 x 224 uint8 batches: wall and process CPU time
 *    per batch, from files in the page cache.
 *
 * Exit: 0, 1 on a mismatch or error, 77 when there is no GPU.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "augment.h"
#include "batch.h"
#include "gpu/libgpu.h"

static const float MEAN[3] = { 0.485f, 0.456f, 0.406f }, STD[3] = { 0.229f, 0.224f, 0.225f };
static const char *const NAMES[2][2] = { { "u8-nhwc", "u8-nchw" }, { "f32-nhwc", "f32-nchw" } };
static unsigned passed, failed;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (cond) {                                               \
			passed++;                                         \
		} else {                                                  \
			failed++;                                         \
			fprintf(stderr, "gpu_check: FAIL: " __VA_ARGS__); \
			fputc('\n', stderr);                              \
		}                                                         \
	} while (0)

static void die(const char *what, const char *why)
{
	fprintf(stderr, "gpu_check: %s: %s\n", what, why);
	exit(1);
}

static unsigned char *jpeg(int w, int h, int seed, unsigned long *len)
{
	unsigned char *px = malloc((size_t)w * h * 3), *j = NULL;
	tjhandle tj = tjInitCompress();

	if (!px || !tj)
		die("jpeg", "out of memory");
	for (int i = 0; i < w * h * 3; i++)
		px[i] = (unsigned char)((i % (w * 3)) * (seed + 1) / 3 + i / (w * 3) * 2 + seed * 17);
	if (tjCompress2(tj, px, w, 0, h, TJPF_RGB, &j, len, TJSAMP_420, 90, 0))
		die("tjCompress2", tjGetErrorStr());
	tjDestroy(tj);
	free(px);
	return j;
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");

	if (!f || fwrite(data, 1, len, f) != len || fclose(f))
		die(path, strerror(errno));
}

/* Batch INDEX (N samples of SIZE) as all four files DIR/NAME-INDEX, the
 * samples made from the JPEGS like a group makes them. */
static void make_batch(const char *dir, uint32_t n, uint32_t size, uint64_t index, unsigned char **jpegs,
		       unsigned long *lens, int njpegs)
{
	for (int dt = 0; dt < 2; dt++)
		for (int lay = 0; lay < 2; lay++) {
			struct batch_params p = { .size = size, .scale = { 0.08, 1.0 }, .ratio = { 0.75, 4.0 / 3.0 },
						  .flip = 0.5, .dtype = dt ? BATCH_F32 : BATCH_U8,
						  .layout = lay ? BATCH_NCHW : BATCH_NHWC, .seed = 7,
						  .max_pixels = JPEG_MAX_PIXELS_DEFAULT };
			struct batch_worker w = { 0 };
			struct batch_header h;
			size_t total, sample = batch_sample_bytes(&p);
			uint8_t *file;
			char path[4200];

			memcpy(p.mean, MEAN, sizeof(MEAN));
			memcpy(p.std, STD, sizeof(STD));
			total = batch_layout(&p, n, 1, index, index * 16, &h);
			file = calloc(1, total);
			if (!file)
				die("batch", "out of memory");
			for (uint32_t i = 0; i < n; i++) {
				uint64_t pos = index * 16 + i;
				int k = (int)(pos % (uint64_t)njpegs), err;
				int32_t label = k % 5;
				err = batch_make_sample(&p, &w, 1, pos, jpegs[k], lens[k], file + h.pixels_offset + i * sample);
				if (err)
					die("batch_make_sample", strerror(-err));
				memcpy(file + h.labels_offset + 4 * i, &label, 4);
			}
			memcpy(file, &h, sizeof(h));            /* little-endian host, as the daemon */
			snprintf(path, sizeof(path), "%s/%s-%llu", dir, NAMES[dt][lay], (unsigned long long)index);
			write_file(path, file, total);
			free(file);
			batch_worker_free(&w);
		}
}

static void *slurp_pixels(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct batch_header h;
	void *px;

	if (fd < 0 || pread(fd, &h, sizeof(h), 0) != sizeof(h))
		die(path, "cannot read");
	px = malloc(h.pixels_bytes);
	if (!px || pread(fd, px, h.pixels_bytes, (off_t)h.pixels_offset) != (ssize_t)h.pixels_bytes)
		die(path, "cannot read its pixels");
	close(fd);
	*len = h.pixels_bytes;
	return px;
}

/* What the CPU path says MODE/OUT must give for input file DIR/IN-INDEX. */
static void *expected(const char *dir, int in_dt, int in_lay, uint32_t mode, int out_lay, uint64_t index,
		      size_t *len)
{
	char p[4200];
	uint8_t *u8;
	float *f;

	switch (mode) {
	case NORM_AFFINE:
		snprintf(p, sizeof(p), "%s/%s-%llu", dir, NAMES[1][out_lay], (unsigned long long)index);
		return slurp_pixels(p, len);
	case NORM_SCALE:
		snprintf(p, sizeof(p), "%s/%s-%llu", dir, NAMES[0][out_lay], (unsigned long long)index);
		u8 = slurp_pixels(p, len);
		f = malloc(*len * 4);
		for (size_t i = 0; i < *len; i++)
			f[i] = (float)((double)u8[i] / 255.0);      /* correctly rounded x / 255 */
		free(u8);
		*len *= 4;
		return f;
	default:
		(void)in_lay;
		snprintf(p, sizeof(p), "%s/%s-%llu", dir, NAMES[in_dt][out_lay], (unsigned long long)index);
		return slurp_pixels(p, len);
	}
}

static size_t tensor_bytes(const DLTensor *t)
{
	size_t n = t->dtype.bits / 8;

	for (int i = 0; i < t->ndim; i++)
		n *= (size_t)t->shape[i];
	return n;
}

/* Every input that MODE applies to, through a consumer on DEVICE with
 * OUT_LAY, three in flight; each result compared with the CPU path. */
static void check_mode(const char *dir, int device, uint32_t mode, int out_lay)
{
	struct gpucons_opts o = { .depth = 3, .mode = mode, .out_layout = out_lay ? BATCH_NCHW : BATCH_NHWC };
	struct { int dt, lay; uint64_t index; } in[8];
	int nin = 0, sent = 0;
	struct gpucons *c;
	char why[512], p[4200];
	int err;

	memcpy(o.mean, MEAN, sizeof(MEAN));
	memcpy(o.std, STD, sizeof(STD));
	for (uint64_t index = 0; index < 2; index++)
		for (int dt = 0; dt < 2; dt++)
			for (int lay = 0; lay < 2; lay++)
				if (dt == 0 || mode == NORM_NONE)
					in[nin].dt = dt, in[nin].lay = lay, in[nin++].index = index;
	err = epgpu_open(device, &o, &c, why, sizeof(why));
	if (err)
		die("epgpu_open", why);
	for (int k = 0; k < nin; k++) {
		struct gpucons_batch b;
		size_t len;
		void *want, *got;
		for (; sent < nin && sent < k + 3; sent++) {
			snprintf(p, sizeof(p), "%s/%s-%llu", dir, NAMES[in[sent].dt][in[sent].lay],
				 (unsigned long long)in[sent].index);
			if (gpucons_submit(c, p))
				die("gpucons_submit", gpucons_why(c));
		}
		if (gpucons_next(c, 0, k % 2 ? 0 : GPUCONS_SYNC, &b))
			die("gpucons_next", gpucons_why(c));
		want = expected(dir, in[k].dt, in[k].lay, mode, out_lay, in[k].index, &len);
		got = malloc(len);
		CHECK(tensor_bytes(&b.images->dl_tensor) == len, "device %d mode %u: %zu bytes, want %zu", device, mode,
		      tensor_bytes(&b.images->dl_tensor), len);
		if (device < 0) {
			memcpy(got, b.images->dl_tensor.data, len);
		} else {
			/* The legacy stream was made to wait for the batch (or the host did). */
			cudaError_t e = cudaMemcpy(got, b.images->dl_tensor.data, len, cudaMemcpyDeviceToHost);
			if (e != cudaSuccess)
				die("cudaMemcpy", cudaGetErrorString(e));
		}
		CHECK(!memcmp(got, want, len), "device %d: %s-%llu, mode %u, out %s: not the CPU path's bytes", device,
		      NAMES[in[k].dt][in[k].lay], (unsigned long long)in[k].index, mode, out_lay ? "nchw" : "nhwc");
		for (uint32_t i = 0; i < b.n; i++)
			CHECK(b.labels[i] == (int32_t)((in[k].index * 16 + i) % 12 % 5), "label %u", i);
		CHECK(b.n == (in[k].index ? 5u : 16u) && b.index == in[k].index && b.epoch == 1, "header fields");
		b.images->deleter(b.images);
		free(want);
		free(got);
	}
	gpucons_free(c);
}

static double seconds(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The consumer against the CPU path on NB batches of 64 x 224 x 224 uint8. */
static void bench(const char *dir, int nb)
{
	struct batch_params p = { .size = 224, .dtype = BATCH_U8, .layout = BATCH_NCHW };
	struct gpucons_opts o = { .depth = 3, .mode = NORM_SCALE, .out_layout = BATCH_NCHW };
	struct batch_header h;
	struct gpucons *c;
	size_t total = batch_layout(&p, 64, 0, 0, 0, &h), out_bytes = h.pixels_bytes * 4;
	uint8_t *file = calloc(1, total), *buf = malloc(total);
	float *f = malloc(out_bytes);
	void *dev = NULL;
	char path[4200], why[512];
	double w0, c0, gw, gc, cw, cc;
	int fd;

	if (!file || !buf || !f || cudaMalloc(&dev, out_bytes) != cudaSuccess)
		die("bench", "out of memory");
	memcpy(file, &h, sizeof(h));
	for (size_t i = h.pixels_offset; i < total; i++)
		file[i] = (uint8_t)(i * 2654435761u >> 24);
	snprintf(path, sizeof(path), "%s/bench", dir);
	write_file(path, file, total);
	if (epgpu_open(0, &o, &c, why, sizeof(why)))
		die("epgpu_open", why);
	for (int pass = 0; pass < 2; pass++) {          /* the first one warms up */
		int sent = 0;
		w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
		for (int k = 0; k < nb; k++) {
			struct gpucons_batch b;
			for (; sent < nb && sent < k + 3; sent++)
				if (gpucons_submit(c, path))
					die("gpucons_submit", gpucons_why(c));
			if (gpucons_next(c, 0, GPUCONS_SYNC, &b))
				die("gpucons_next", gpucons_why(c));
			b.images->deleter(b.images);
		}
		gw = (seconds(CLOCK_MONOTONIC) - w0) / nb, gc = (seconds(CLOCK_PROCESS_CPUTIME_ID) - c0) / nb;
	}
	gpucons_free(c);
	for (int pass = 0; pass < 2; pass++) {
		w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
		for (int k = 0; k < nb; k++) {
			fd = open(path, O_RDONLY);
			if (fd < 0 || pread(fd, buf, total, 0) != (ssize_t)total)
				die(path, "cannot read");
			close(fd);
			for (size_t i = 0; i < h.pixels_bytes; i++)
				f[i] = (float)buf[h.pixels_offset + i] / 255.0f;
			if (cudaMemcpy(dev, f, out_bytes, cudaMemcpyHostToDevice) != cudaSuccess)
				die("cudaMemcpy", "failed");
		}
		cw = (seconds(CLOCK_MONOTONIC) - w0) / nb, cc = (seconds(CLOCK_PROCESS_CPUTIME_ID) - c0) / nb;
	}
	printf("gpu_check: bench, %d batches of 64x3x224x224 uint8 from the page cache, to float32 on the GPU:\n"
	       "  GPU consumer: %.2f ms/batch wall, %.2f ms/batch CPU\n"
	       "  CPU path (read, x/255 on the CPU, copy from pageable memory): %.2f ms/batch wall, %.2f ms/batch CPU\n",
	       nb, gw * 1e3, gc * 1e3, cw * 1e3, cc * 1e3);
	cudaFree(dev);
	free(file), free(buf), free(f);
}

int main(int argc, char **argv)
{
	unsigned char *jpegs[12];
	unsigned long lens[12];
	int nbench = argc > 2 ? atoi(argv[2]) : 50;
	char why[512];
	const char *dir;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: gpu_check DIR [BENCH_BATCHES]\n");
		return 2;
	}
	if (epgpu_abi() != EPGPU_ABI)
		die("libepochfs_gpu.so", "another ABI: rebuild");
	dir = argv[1];
	for (int k = 0; k < 12; k++)
		jpegs[k] = jpeg(60 + 13 * k, 45 + 7 * (k % 5), k, &lens[k]);
	make_batch(dir, 16, 40, 0, jpegs, lens, 12);
	make_batch(dir, 5, 40, 1, jpegs, lens, 12);
	for (int k = 0; k < 12; k++)
		tjFree(jpegs[k]);

	for (int out = 0; out < 2; out++)
		for (uint32_t mode = NORM_NONE; mode <= NORM_AFFINE; mode++)
			check_mode(dir, -1, mode, out);
	if (failed) {
		fprintf(stderr, "gpu_check: host path: %u of %u checks failed\n", failed, passed + failed);
		return 1;
	}
	printf("gpu_check: host path (the CPU reference): %u checks passed\n", passed);
	if (epgpu_device_check(0, why, sizeof(why))) {
		printf("gpu_check: SKIP: %s\n", why);
		return 77;
	}
	passed = 0;
	for (int out = 0; out < 2; out++)
		for (uint32_t mode = NORM_NONE; mode <= NORM_AFFINE; mode++)
			check_mode(dir, 0, mode, out);
	if (failed) {
		fprintf(stderr, "gpu_check: device 0: %u of %u checks failed\n", failed, passed + failed);
		return 1;
	}
	printf("gpu_check: CUDA device 0: %u checks passed, bit-exact with the CPU path\n", passed);
	if (nbench > 0)
		bench(dir, nbench);
	return 0;
}
