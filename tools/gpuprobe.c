/* gpuprobe.c - epochfs-gpuprobe: how fast this machine's GPU takes in a
 * job's batches (prep/gpu/probe.h), as text or one JSON object.
 *
 * Built with `make CUDA=1` only, over libepochfs_gpu.so. Without a usable
 * GPU it prints one line, "epochfs-gpuprobe: no CUDA device: <CUDA's
 * reason>", and exits 77 (the test suites' "skipped"); a bad option exits 2,
 * any other failure 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "gpu/probe.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-gpuprobe [OPTIONS]\n"
		"\n"
		"Measures what bounds a GPU consumer of a job's batches: host-to-device\n"
		"copies of one batch from pinned and from pageable memory, and the uint8\n"
		"NHWC -> normalized float32 NCHW kernel (medians of --reps after 2 warm-ups).\n"
		"  --batch N         samples per batch (default 64)\n"
		"  --height H        image height (default 224)\n"
		"  --width W         image width (default 224)\n"
		"  --channels C      channels, 1 to 4 (default 3)\n"
		"  --dtype T         what a batch stores: uint8 (default) or float32\n"
		"  --device D        CUDA device (default 0)\n"
		"  --reps R          timed repetitions, 1 to 1000 (default 7)\n"
		"  --json            one JSON object instead of text\n"
		"Exit status: 0, 77 when there is no usable CUDA device, 2 for a bad option.\n");
}

static int number(const char *opt, const char *s, unsigned long max, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max) {
		fprintf(stderr, "epochfs-gpuprobe: error: --%s %s: expected a whole number up to %lu\n", opt, s, max);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "batch", required_argument, NULL, 'n' },   { "height", required_argument, NULL, 'H' },
		{ "width", required_argument, NULL, 'W' },   { "channels", required_argument, NULL, 'C' },
		{ "dtype", required_argument, NULL, 't' },   { "device", required_argument, NULL, 'd' },
		{ "reps", required_argument, NULL, 'r' },    { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },          { NULL, 0, NULL, 0 },
	};
	struct gpuprobe_opts o = { .n = 64, .h = 224, .w = 224, .c = 3, .dtype = BATCH_U8, .device = 0,
				  .reps = GPUPROBE_REPS_DEFAULT };
	struct gpuprobe_result r;
	uint32_t dev = 0;
	char why[512];
	int c, json = 0, err, bad = 0;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		const char *name = "";
		for (const struct option *p = lo; p->name; p++)
			if (p->val == c)
				name = p->name;
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'j':
			json = 1;
			break;
		case 'n':
			bad |= number(name, optarg, 1u << 20, &o.n);
			break;
		case 'H':
			bad |= number(name, optarg, 1u << 16, &o.h);
			break;
		case 'W':
			bad |= number(name, optarg, 1u << 16, &o.w);
			break;
		case 'C':
			bad |= number(name, optarg, 4, &o.c);
			break;
		case 'r':
			bad |= number(name, optarg, 1000, &o.reps);
			break;
		case 'd':
			bad |= number(name, optarg, 1023, &dev);
			o.device = (int32_t)dev;
			break;
		case 't':
			if (!strcmp(optarg, "uint8")) {
				o.dtype = BATCH_U8;
			} else if (!strcmp(optarg, "float32")) {
				o.dtype = BATCH_F32;
			} else {
				fprintf(stderr, "epochfs-gpuprobe: error: --dtype %s: expected uint8 or float32\n", optarg);
				bad = 1;
			}
			break;
		default:
			fprintf(stderr, "epochfs-gpuprobe: error: %s: unknown option or missing value (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
		if (bad)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "epochfs-gpuprobe: error: %s: unexpected argument (see --help)\n", argv[optind]);
		return 2;
	}
	if (!o.n || !o.h || !o.w || !o.c || !o.reps) {
		fprintf(stderr, "epochfs-gpuprobe: error: --batch, --height, --width, --channels and --reps must be at least 1\n");
		return 2;
	}
	err = gpuprobe_run(&o, &r, why, sizeof(why));
	if (err == -ENODEV) {
		fprintf(stderr, "epochfs-gpuprobe: %s\n", why);
		return 77;
	}
	if (err) {
		fprintf(stderr, "epochfs-gpuprobe: error: %s\n", why);
		return err == -EINVAL ? 2 : 1;
	}
	const char *dtype = o.dtype == BATCH_F32 ? "float32" : "uint8";
	if (json) {
		printf("{\"device\": %d, \"device_name\": ", r.device);
		json_string(r.device_name);
		printf(", \"batch\": %u, \"height\": %u, \"width\": %u, \"channels\": %u, \"dtype\": \"%s\", "
		       "\"bytes\": %llu, \"reps\": %u, \"warmup\": %u, "
		       "\"h2d_pinned_s\": %.6g, \"h2d_pageable_s\": %.6g, "
		       "\"h2d_pinned_gbps\": %.4g, \"h2d_pageable_gbps\": %.4g, "
		       "\"kernel_s\": %.6g, \"kernel_bytes\": %llu, \"kernel_gbps\": %.4g, "
		       "\"kernel_batches_per_s\": %.4g}\n",
		       o.n, o.h, o.w, o.c, dtype, (unsigned long long)r.copy_bytes, r.reps, r.warmup, r.pinned_s,
		       r.pageable_s, r.pinned_gbps, r.pageable_gbps, r.kernel_s, (unsigned long long)r.kernel_bytes,
		       r.kernel_gbps, r.kernel_batches_per_s);
		return 0;
	}
	printf("device %d: %s\n", r.device, r.device_name);
	printf("batch %u x %u x %u x %u %s: %.1f MB\n", o.n, o.h, o.w, o.c, dtype, (double)r.copy_bytes * 1e-6);
	printf("  copy to the device, pinned     %8.3f ms/batch  %7.2f GB/s\n", r.pinned_s * 1e3, r.pinned_gbps);
	printf("  copy to the device, pageable   %8.3f ms/batch  %7.2f GB/s\n", r.pageable_s * 1e3, r.pageable_gbps);
	printf("  uint8 NHWC -> float32 NCHW     %8.3f ms/batch  %7.2f GB/s  %.0f batches/s\n", r.kernel_s * 1e3,
	       r.kernel_gbps, r.kernel_batches_per_s);
	printf("medians of %u runs after %u warm-ups; GB = 1e9 bytes; the kernel's bytes are read + written\n",
	       r.reps, r.warmup);
	return 0;
}
