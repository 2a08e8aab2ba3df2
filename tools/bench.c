/* bench.c - epochfs-bench: reads a dataset the way a training job does.
 *
 * Each epoch reads every regular file under DIR exactly once, whole, in a
 * fresh random permutation drawn from (seed, epoch), with T reader threads.
 * It prints files/s and MB/s per epoch and, when DIR lies inside an epochfs
 * mount, how many bytes the daemon pulled from SOURCE during the epoch (from
 * .epochfs/stats.json). It works on any directory, so the same command
 * measures native, passthrough and epochfs side by side.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mstats.h"
#include "options.h"
#include "rng.h"
#include "util/clock.h"
#include "util/version.h"

static char **files;
static size_t nfiles, capfiles;

static int collect(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (type != FTW_F || !S_ISREG(sb->st_mode))
		return 0;
	if (nfiles == capfiles) {
		capfiles = capfiles ? capfiles * 2 : 4096;
		files = realloc(files, capfiles * sizeof(*files));
		if (!files)
			return -1;
	}
	files[nfiles] = strdup(path);
	return files[nfiles++] ? 0 : -1;
}

struct run {
	size_t *order;
	size_t next;                /* atomic */
	uint64_t bytes;             /* atomic */
	int errors;                 /* atomic */
};

static void *reader(void *arg)
{
	struct run *r = arg;
	size_t cap = 1 << 20;
	char *buf = malloc(cap);

	for (;;) {
		size_t i = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED);
		ssize_t n;
		int fd;

		if (i >= nfiles || !buf)
			break;
		fd = open(files[r->order[i]], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "epochfs-bench: error: %s: %s\n", files[r->order[i]], strerror(errno));
			__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		while ((n = read(fd, buf, cap)) > 0)
			__atomic_add_fetch(&r->bytes, (uint64_t)n, __ATOMIC_RELAXED);
		if (n < 0) {
			fprintf(stderr, "epochfs-bench: error: %s: %s\n", files[r->order[i]], strerror(errno));
			__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
		}
		close(fd);
	}
	free(buf);
	return NULL;
}

/* Bytes this process has pulled from block devices so far (/proc/self/io
 * read_bytes, all threads), or -1 where the kernel does not account I/O. */
static long long dev_read_bytes(void)
{
	char line[128];
	long long v = -1;
	FILE *f = fopen("/proc/self/io", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read_bytes: %lld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* From one read of the mount's counters: storage_read_bytes into *STORAGE
 * and the daemon's CPU seconds so far (cpu_seconds) into *CPU; -1 for
 * each outside a mount. */
static void mount_counters(const char *statsfile, long long *storage, double *cpu)
{
	struct mstats m;

	*storage = -1;
	*cpu = -1;
	if (!statsfile || mstats_read(statsfile, &m) < 0)
		return;
	*storage = (long long)mstats_get(&m, "storage_read_bytes", -1);
	*cpu = mstats_get(&m, "cpu_seconds", -1);
}

/* Drops the kernel's clean page cache (root): every epoch then reaches
 * the file system below, as a dataset larger than the page cache would. */
static int drop_page_cache(void)
{
	int fd, err = 0;

	sync();
	errno = 0;
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		err = errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	return -err;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-bench DIR [--epochs E] [--threads T] [--seed S] [--drop-caches] [--json]\n"
		"\n"
		"Reads every file under DIR once per epoch, whole, in a fresh random order,\n"
		"and prints files/s and MB/s per epoch, the bytes this process pulled from\n"
		"block devices (/proc/self/io), and, inside an epochfs mount, the bytes the\n"
		"daemon read from storage during the epoch, and the daemon's CPU per file.\n"
		"  --epochs E    epochs to run (default 3)\n"
		"  --threads T   reader threads (default 2)\n"
		"  --seed S      seed of the permutations (default 1)\n"
		"  --drop-caches drop the kernel's page cache before each epoch (root), so\n"
		"                that every epoch reaches the file system under DIR\n"
		"  --json        one JSON object per epoch instead of text\n"
		"  -V, --version print the version\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "epochs", required_argument, NULL, 'e' }, { "threads", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 's' },   { "json", no_argument, NULL, 'j' },
		{ "drop-caches", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },         { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned epochs = 3, threads = 2, seed = 1;
	int c, json = 0, failed = 0, drop = 0;
	char statsbuf[PATH_MAX + 32];
	const char *statsfile;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'e': bad = options_parse_uint(optarg, 1, 100000, &epochs); break;
		case 't': bad = options_parse_uint(optarg, 1, 1024, &threads); break;
		case 's': bad = options_parse_uint(optarg, 0, 4000000000u, &seed); break;
		case 'j': json = 1; break;
		case 'D': drop = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("epochfs-bench %s\n", EPOCHFS_VERSION); return 0;
		default:
			fprintf(stderr, "epochfs-bench: error: %s: unknown option or missing value (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "epochfs-bench: error: %s %s: not a valid number\n", argv[optind - 2], optarg);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "epochfs-bench: error: expected exactly one DIR (see --help)\n");
		return 2;
	}
	if (nftw(argv[optind], collect, 64, FTW_PHYS) != 0) {
		fprintf(stderr, "epochfs-bench: error: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	if (!nfiles) {
		fprintf(stderr, "epochfs-bench: error: %s: no regular files\n", argv[optind]);
		return 1;
	}
	statsfile = mstats_find(argv[optind], statsbuf, sizeof(statsbuf)) == 0 ? statsbuf : NULL;

	struct run r = { .order = malloc(nfiles * sizeof(size_t)) };
	pthread_t *tids = calloc(threads, sizeof(*tids));
	if (!r.order || !tids)
		return 1;
	for (unsigned e = 0; e < epochs; e++) {
		uint64_t rng = ((uint64_t)seed << 32) ^ (e * 0x9e3779b97f4a7c15ull);
		int err;

		if (drop && (err = drop_page_cache()) < 0) {
			fprintf(stderr, "epochfs-bench: error: --drop-caches: /proc/sys/vm/drop_caches: %s "
				"(needs root)\n", strerror(-err));
			return 1;
		}
		long long s0, s1, d0 = dev_read_bytes(), d1;
		double c0, c1;

		mount_counters(statsfile, &s0, &c0);

		for (size_t i = 0; i < nfiles; i++)
			r.order[i] = i;
		for (size_t i = nfiles - 1; i > 0; i--) {
			size_t j = (size_t)(rng_next(&rng) % (i + 1)), t = r.order[i];
			r.order[i] = r.order[j];
			r.order[j] = t;
		}
		r.next = 0;
		r.bytes = 0;
		double t0 = clock_now();
		for (unsigned i = 0; i < threads; i++)
			pthread_create(&tids[i], NULL, reader, &r);
		for (unsigned i = 0; i < threads; i++)
			pthread_join(tids[i], NULL);
		double t1 = clock_now();
		mount_counters(statsfile, &s1, &c1);
		d1 = dev_read_bytes();
		double dt = t1 - t0;
		long long storage = s0 >= 0 && s1 >= 0 ? s1 - s0 : -1;
		long long dev = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
		/* us of daemon CPU a file, -1 outside a mount (the figure
		 * includes stats.json's own two reads). */
		double cpu_us = c0 >= 0 && c1 >= 0 ? (c1 - c0) * 1e6 / (double)nfiles : -1;
		if (json)
			printf("{\"epoch\": %u, \"files\": %zu, \"bytes\": %llu, \"seconds\": %.4f, "
			       "\"files_per_s\": %.1f, \"mb_per_s\": %.1f, \"storage_read_bytes\": %lld, "
			       "\"dev_read_bytes\": %lld, \"daemon_cpu_us_per_file\": %.1f, \"errors\": %d}\n",
			       e, nfiles, (unsigned long long)r.bytes, dt, nfiles / dt, r.bytes / 1e6 / dt,
			       storage, dev, cpu_us, r.errors);
		else {
			char extra[128] = "";
			if (storage >= 0)
				snprintf(extra, sizeof(extra), ", storage %.1f MB", storage / 1e6);
			if (cpu_us >= 0)
				snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
					 ", daemon %.0f us CPU a file", cpu_us);
			printf("epoch %u: %zu files, %.1f MB in %.2f s: %.0f files/s, %.1f MB/s%s\n", e,
			       nfiles, r.bytes / 1e6, dt, nfiles / dt, r.bytes / 1e6 / dt, extra);
		}
		fflush(stdout);
		failed |= r.errors != 0;
	}
	free(r.order);
	free(tids);
	for (size_t i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	return failed ? 1 : 0;
}
