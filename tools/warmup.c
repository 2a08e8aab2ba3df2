/* warmup.c - epochfs-warmup: load files into a mount's cache tiers before
 * training, in parallel, with progress, and say what did not fit.
 *
 * Epoch 0 of a job fills epochfs's caches at the speed of storage, with the
 * GPU waiting. epochfs-warmup reads the files once beforehand (a whole
 * dataset, some directories, or a list of files), through the mount, so
 * the daemon admits them into its RAM cache and SSD tier as it would in
 * epoch 0; the kernel's own copy above the mount is dropped after each file
 * (POSIX_FADV_DONTNEED), so the warm-up leaves the page cache as it found
 * it. Progress goes to stderr once a second; at the end, one summary: files
 * and bytes read, how many the RAM cache and the tier took, and the bytes
 * that fit in neither (they will come from storage, or a peer, every epoch).
 *
 * The mount's counters (mstats.h) measure what was admitted: the RAM
 * cache's used bytes and the tier's admitted bytes, after the tier's writes
 * have landed. Exit status: 0, 1 when files could not be read (each named
 * once), 2 on a usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mstats.h"
#include "util/clock.h"
#include "util/version.h"


struct list {
	char **v;
	size_t n, cap;
};

static struct {
	struct list files;
	size_t next;                /* atomic: the next file to read */
	uint64_t done_files, done_bytes, errors;    /* atomic */
	int quiet;
} W;

static int push(struct list *l, const char *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!(l->v[l->n] = strdup(s)))
		return -ENOMEM;
	l->n++;
	return 0;
}

static void free_files(void)
{
	for (size_t i = 0; i < W.files.n; i++)
		free(W.files.v[i]);
	free(W.files.v);
	W.files = (struct list){ 0 };
}

/* Adds PATH: a file, or every file below a directory (the mount's
 * .epochfs/ and .prep/ are not data and are skipped). */
static int add(const char *path, int top)
{
	struct stat sb;

	if (lstat(path, &sb) < 0) {
		fprintf(stderr, "epochfs-warmup: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (S_ISREG(sb.st_mode))
		return push(&W.files, path) ? -1 : 0;
	if (!S_ISDIR(sb.st_mode))
		return 0;                   /* symlinks and others: not followed */
	DIR *d = opendir(path);
	struct dirent *e;
	int ret = 0;

	if (!d) {
		fprintf(stderr, "epochfs-warmup: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char sub[PATH_MAX];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (top && (!strcmp(e->d_name, ".epochfs") || !strcmp(e->d_name, ".prep")))
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name) >= sizeof(sub))
			continue;
		if (add(sub, 0) < 0)
			ret = -1;
	}
	closedir(d);
	return ret;
}

static void *reader(void *arg)
{
	char *buf = malloc(1 << 20);

	(void)arg;
	if (!buf)
		return NULL;
	for (;;) {
		size_t i = __atomic_fetch_add(&W.next, 1, __ATOMIC_RELAXED);
		if (i >= W.files.n)
			break;
		int fd = open(W.files.v[i], O_RDONLY | O_CLOEXEC);
		ssize_t n = 0;
		uint64_t got = 0;
		if (fd >= 0) {
			while ((n = read(fd, buf, 1 << 20)) > 0)
				got += (uint64_t)n;
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
		if (fd < 0 || n < 0) {
			fprintf(stderr, "epochfs-warmup: %s: %s\n", W.files.v[i], strerror(errno));
			__atomic_add_fetch(&W.errors, 1, __ATOMIC_RELAXED);
		}
		__atomic_add_fetch(&W.done_files, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&W.done_bytes, got, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-warmup [OPTIONS] MOUNTPOINT [PATH...]\n"
		"\n"
		"Reads files through an epochfs mount once, so the daemon caches them in\n"
		"its RAM cache and SSD tier before training starts (epoch 0 then runs at\n"
		"cache speed). PATHs are files or directories inside MOUNTPOINT (default:\n"
		"all of it). Prints progress once a second and, at the end, what the\n"
		"caches took and what did not fit.\n"
		"\n"
		"  -l, --list FILE   read the paths from FILE, one a line (- for stdin);\n"
		"                    relative ones are below MOUNTPOINT\n"
		"  -j, --jobs N      files read at once (default 8)\n"
		"  -q, --quiet       only the summary\n"
		"  -h, --help, -V, --version\n");
}

static int load_list(const char *file, const char *mnt)
{
	FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	char line[PATH_MAX], path[PATH_MAX * 2];
	int ret = 0;

	if (!f) {
		fprintf(stderr, "epochfs-warmup: --list %s: %s\n", file, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!*line || *line == '#')
			continue;
		if (*line == '/')
			snprintf(path, sizeof(path), "%s", line);
		else
			snprintf(path, sizeof(path), "%s/%s", mnt, line);
		if (add(path, 0) < 0)
			ret = -1;
	}
	if (f != stdin)
		fclose(f);
	return ret;
}

/* Whether PATH (made absolute) lies inside MNT. */
static int inside(const char *path, const char *mnt)
{
	char *r = realpath(path, NULL);
	size_t n = strlen(mnt);
	int ok = r && !strncmp(r, mnt, n) && (r[n] == '/' || !r[n]);

	free(r);
	return ok;
}

/* BYTES as "12.3 MB" or "4.56 GB" into BUF (32 bytes). */
static const char *human(double bytes, char *buf)
{
	if (bytes < 0)
		bytes = 0;
	if (bytes >= 1e9)
		snprintf(buf, 32, "%.2f GB", bytes / 1e9);
	else
		snprintf(buf, 32, "%.1f MB", bytes / 1e6);
	return buf;
}

static double get(const char *file, const char *key)
{
	struct mstats m;

	return mstats_read(file, &m) < 0 ? 0 : mstats_get(&m, key, 0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "list", required_argument, NULL, 'l' }, { "jobs", required_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	const char *list = NULL;
	unsigned jobs = 8;
	int c, bad = 0;

	while ((c = getopt_long(argc, argv, "l:j:qhV", opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'l':
			list = optarg;
			break;
		case 'j':
			jobs = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg || jobs < 1 || jobs > 256) {
				fprintf(stderr, "epochfs-warmup: --jobs %s: expected 1 to 256\n", optarg);
				return 2;
			}
			break;
		case 'q':
			W.quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("epochfs-warmup %s\n", EPOCHFS_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "epochfs-warmup: missing MOUNTPOINT (see --help)\n");
		return 2;
	}
	char *mnt = realpath(argv[optind], NULL), stats[PATH_MAX];
	if (!mnt) {
		fprintf(stderr, "epochfs-warmup: %s: %s\n", argv[optind], strerror(errno));
		return 2;
	}
	snprintf(stats, sizeof(stats), "%s/.epochfs/stats.json", mnt);
	if (access(stats, R_OK) < 0) {
		fprintf(stderr, "epochfs-warmup: %s is not an epochfs mount (no .epochfs/stats.json)\n", mnt);
		free(mnt);
		return 2;
	}
	if (list && load_list(list, mnt) < 0)
		bad = 1;
	for (int i = optind + 1; i < argc; i++) {
		if (!inside(argv[i], mnt)) {
			fprintf(stderr, "epochfs-warmup: %s is not inside %s\n", argv[i], mnt);
			free_files();
			free(mnt);
			return 2;
		}
		if (add(argv[i], 0) < 0)
			bad = 1;
	}
	if (!list && optind + 1 >= argc && add(mnt, 1) < 0)
		bad = 1;
	uint64_t total = 0;
	for (size_t i = 0; i < W.files.n; i++) {
		struct stat sb;
		if (stat(W.files.v[i], &sb) == 0)
			total += (uint64_t)sb.st_size;
	}
	double used0 = get(stats, "cache_used_bytes"), tier0 = get(stats, "tier_admitted_bytes");
	double st0 = get(stats, "storage_read_bytes"), t0 = clock_now(), last = t0;
	pthread_t tid[256];
	unsigned started = 0;

	for (size_t i = 0; i < jobs && i < W.files.n; i++)
		if (!pthread_create(&tid[started], NULL, reader, NULL))
			started++;
	while (__atomic_load_n(&W.done_files, __ATOMIC_RELAXED) < W.files.n && started) {
		struct timespec ts = { 0, 100000000 };
		nanosleep(&ts, NULL);
		double t = clock_now();
		if (!W.quiet && t - last >= 1.0) {
			uint64_t f = __atomic_load_n(&W.done_files, __ATOMIC_RELAXED);
			uint64_t b = __atomic_load_n(&W.done_bytes, __ATOMIC_RELAXED);
			fprintf(stderr, "epochfs-warmup: %llu of %zu files, %.1f of %.1f GB, %.0f MB/s; RAM cache %.1f GB,"
				" tier %.1f GB\n", (unsigned long long)f, W.files.n, b / 1e9, total / 1e9,
				b / 1e6 / (t - t0), get(stats, "cache_used_bytes") / 1e9,
				get(stats, "tier_used_bytes") / 1e9);
			last = t;
		}
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	/* The tier writes behind its readers: wait for its writes to land. */
	for (int i = 0; i < 600; i++) {
		double a = get(stats, "tier_admitted") + get(stats, "tier_write_errors");
		struct timespec ts = { 0, 100000000 };
		nanosleep(&ts, NULL);
		if (a == get(stats, "tier_admitted") + get(stats, "tier_write_errors"))
			break;
	}
	double secs = clock_now() - t0;
	uint64_t bytes = W.done_bytes;
	double ram_now = get(stats, "cache_used_bytes"), tier_now = get(stats, "tier_admitted_bytes")
		+ get(stats, "tier_adopted_bytes");
	double from_storage = get(stats, "storage_read_bytes") - st0, cap = get(stats, "cache_capacity_bytes");
	/* What the caches hold against what was read: exact for a warm-up of
	 * the whole mount (the usual case), a lower bound for a part of it. */
	double left = (double)bytes - ram_now - tier_now;
	if (left < 0)
		left = 0;
	char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32];
	printf("epochfs-warmup: %llu files, %s in %.1f s (%.0f MB/s, %s from storage); the RAM cache holds %s "
	       "(%.0f%% of its budget; +%s), the SSD tier %s (+%s); %s%s fit in neither%s\n",
	       (unsigned long long)W.done_files, human((double)bytes, b1), secs, bytes / 1e6 / (secs > 0 ? secs : 1),
	       human(from_storage, b2), human(ram_now, b3), 100.0 * ram_now / (cap > 0 ? cap : 1),
	       human(ram_now - used0, b4), human(tier_now, b5),
	       human(get(stats, "tier_admitted_bytes") - tier0, b6), list || optind + 1 < argc ? "at least " : "",
	       human(left, b7), left > 0.01 * (double)bytes ? ": every epoch reads them from storage (or their "
	       "owner peer)" : "");
	if (W.errors)
		fprintf(stderr, "epochfs-warmup: %llu files could not be read\n", (unsigned long long)W.errors);
	free_files();
	free(mnt);
	return W.errors || bad ? 1 : 0;
}
