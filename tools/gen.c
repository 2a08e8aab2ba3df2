/* gen.c - epochfs-gen: writes a synthetic ImageNet-like dataset.
 *
 * DIR/class_XXXX/NNNNNNN.jpg, real baseline JPEGs (libjpeg-turbo) with sides
 * of 300-500 px and a mean size near 110 KB, so decoders, page caches and
 * the daemon see what they would see with ImageNet. Everything follows from
 * --seed: file i's picture comes from a generator seeded with (seed, i), so
 * two runs (with any thread count) write byte-identical trees.
 *
 * The picture is a few smooth colour gradients plus blocky texture and fine
 * noise: the noise level sets the compressed size, and was tuned so that the
 * mean lands near 110 KB at quality 94.
 *
 * --shards K adds DIR/shards/shard-NNNN.bin, K files of 64-512 MB of
 * pseudo-random bytes, to exercise streaming of large files.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "options.h"
#include "rng.h"
#include "util/clock.h"
#include "util/version.h"

struct gen {
	const char *dir;
	unsigned files, classes, shards;
	uint64_t seed;
	unsigned next;              /* atomic: next file to write */
	unsigned done;              /* atomic */
	uint64_t bytes;             /* atomic */
	int failed;                 /* atomic */
};

static int write_file(const char *path, const void *buf, size_t len)
{
	char tmp[4200];
	int fd;

	/* Write then rename, so an interrupted run never leaves a torn file. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	for (size_t off = 0; off < len;) {
		ssize_t n = write(fd, (const char *)buf + off, len - off);
		if (n < 0) {
			int err = -errno;
			close(fd);
			unlink(tmp);
			return err;
		}
		off += (size_t)n;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0)
		return -errno;
	return 0;
}

static void paint(unsigned char *px, int w, int h, uint64_t *rng)
{
	int base[3], dx[3], dy[3];
	int noise = 100;

	for (int c = 0; c < 3; c++) {
		base[c] = (int)(rng_next(rng) % 256);
		dx[c] = (int)(rng_next(rng) % 200) - 100;
		dy[c] = (int)(rng_next(rng) % 200) - 100;
	}
	for (int y = 0; y < h; y++) {
		uint64_t row = rng_next(rng);
		for (int x = 0; x < w; x++) {
			/* 8x8 block texture so the DCT has something to keep. */
			uint64_t blk = ((uint64_t)(x / 8) * 2654435761u) ^ ((uint64_t)(y / 8) * 40503u);
			for (int c = 0; c < 3; c++) {
				row = row * 6364136223846793005ull + 1442695040888963407ull;
				int v = base[c] + dx[c] * x / w + dy[c] * y / h +
					(int)((blk >> (c * 5)) & 31) - 16 +
					(int)((row >> 33) % (unsigned)noise) - noise / 2;
				px[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
		}
	}
}

static void *gen_worker(void *arg)
{
	struct gen *g = arg;
	tjhandle tj = tjInitCompress();
	unsigned char *px = malloc(500 * 500 * 3);
	char path[4096];

	if (!tj || !px) {
		__atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	for (;;) {
		unsigned i = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED);
		unsigned char *jpg = NULL;
		unsigned long jlen = 0;
		uint64_t rng;
		int w, h, err;

		if (i >= g->files || __atomic_load_n(&g->failed, __ATOMIC_RELAXED))
			break;
		rng = g->seed * 0x100000001b3ull + i;
		rng_next(&rng);
		w = 300 + (int)(rng_next(&rng) % 201);
		h = 300 + (int)(rng_next(&rng) % 201);
		paint(px, w, h, &rng);
		if (tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpg, &jlen, TJSAMP_420, 94,
				TJFLAG_FASTDCT) < 0) {
			fprintf(stderr, "epochfs-gen: error: JPEG compression failed: %s\n",
				tjGetErrorStr2(tj));
			__atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
			break;
		}
		snprintf(path, sizeof(path), "%s/class_%04u/%07u.jpg", g->dir, i % g->classes, i);
		err = write_file(path, jpg, jlen);
		tjFree(jpg);
		if (err) {
			fprintf(stderr, "epochfs-gen: error: %s: %s\n", path, strerror(-err));
			__atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
			break;
		}
		__atomic_add_fetch(&g->bytes, jlen, __ATOMIC_RELAXED);
		__atomic_add_fetch(&g->done, 1, __ATOMIC_RELAXED);
	}
out:
	free(px);
	if (tj)
		tjDestroy(tj);
	return NULL;
}

static int write_shards(struct gen *g)
{
	char path[4096];
	size_t chunk = 8u << 20;
	uint64_t *buf = malloc(chunk);

	if (!buf)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/shards", g->dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	for (unsigned k = 0; k < g->shards; k++) {
		uint64_t rng = g->seed ^ (0xabcdef12345ull + k);
		uint64_t size = (64ull + rng_next(&rng) % 449) << 20;
		int fd;

		snprintf(path, sizeof(path), "%s/shards/shard-%04u.bin", g->dir, k);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			free(buf);
			return -errno;
		}
		for (uint64_t off = 0; off < size; off += chunk) {
			for (size_t j = 0; j < chunk / 8; j++)
				buf[j] = rng_next(&rng);
			if (write(fd, buf, chunk) != (ssize_t)chunk) {
				int err = errno ? -errno : -EIO;
				close(fd);
				free(buf);
				return err;
			}
		}
		close(fd);
		fprintf(stderr, "epochfs-gen: %s (%llu MB)\n", path, (unsigned long long)(size >> 20));
	}
	free(buf);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-gen DIR --files N [--classes C] [--seed S] [--shards K] [--threads T]\n"
		"\n"
		"Writes an ImageNet-like dataset: DIR/class_XXXX/NNNNNNN.jpg, JPEGs of 300-500 px\n"
		"per side, mean size about 110 KB, identical for the same --seed.\n"
		"  --files N     number of images (required)\n"
		"  --classes C   number of class directories (default 100)\n"
		"  --seed S      seed (default 1)\n"
		"  --shards K    also write K large files DIR/shards/shard-NNNN.bin (64-512 MB)\n"
		"  --threads T   worker threads (default: number of CPUs)\n"
		"  -V, --version print the version\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "files", required_argument, NULL, 'n' }, { "classes", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },  { "shards", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	struct gen g = { .classes = 100, .seed = 1 };
	unsigned threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN), seed = 1;
	int c, have_files = 0;
	pthread_t tids[256];
	char path[4096];

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'n': bad = options_parse_uint(optarg, 1, 100000000, &g.files); have_files = 1; break;
		case 'c': bad = options_parse_uint(optarg, 1, 100000, &g.classes); break;
		case 's': bad = options_parse_uint(optarg, 0, 4000000000u, &seed); break;
		case 'k': bad = options_parse_uint(optarg, 0, 1000, &g.shards); break;
		case 't': bad = options_parse_uint(optarg, 1, 256, &threads); break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("epochfs-gen %s\n", EPOCHFS_VERSION); return 0;
		default:
			fprintf(stderr, "epochfs-gen: error: %s: unknown option or missing value (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "epochfs-gen: error: %s %s: not a valid number\n", argv[optind - 2], optarg);
			return 2;
		}
	}
	if (optind != argc - 1 || !have_files) {
		fprintf(stderr, "epochfs-gen: error: %s (see --help)\n",
			!have_files ? "--files N is required" : "expected exactly one DIR");
		return 2;
	}
	g.dir = argv[optind];
	g.seed = seed;
	if (threads > 256)
		threads = 256;
	if (mkdir(g.dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "epochfs-gen: error: %s: %s\n", g.dir, strerror(errno));
		return 1;
	}
	for (unsigned k = 0; k < g.classes && k < g.files; k++) {
		snprintf(path, sizeof(path), "%s/class_%04u", g.dir, k);
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			fprintf(stderr, "epochfs-gen: error: %s: %s\n", path, strerror(errno));
			return 1;
		}
	}
	double t0 = clock_now();
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, gen_worker, &g);
	int tty = isatty(STDERR_FILENO);
	while (__atomic_load_n(&g.done, __ATOMIC_RELAXED) < g.files &&
	       !__atomic_load_n(&g.failed, __ATOMIC_RELAXED)) {
		usleep(200000);
		if (tty)
			fprintf(stderr, "\repochfs-gen: %u/%u images", __atomic_load_n(&g.done, __ATOMIC_RELAXED),
				g.files);
	}
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	if (g.failed)
		return 1;
	double dt = clock_now() - t0;
	fprintf(stderr, "%sepochfs-gen: %u images in %u classes, %.1f MB (mean %.1f KB), %.1f s\n",
		tty ? "\r" : "", g.files, g.classes < g.files ? g.classes : g.files, g.bytes / 1e6,
		g.bytes / 1e3 / g.files, dt);
	if (g.shards) {
		int err = write_shards(&g);
		if (err) {
			fprintf(stderr, "epochfs-gen: error: shards: %s\n", strerror(-err));
			return 1;
		}
	}
	return 0;
}
