/* stat_file.c - epochfs-stat --file: which bytes of a file are where, as
 * `juicefs info` or `vmtouch` say it.
 *
 * Below the kernel, the daemon says for each item of the file where its
 * next read would be answered from (getxattr user.epochfs.where, parsed by
 * mwhere.h): the RAM cache, the prefetch staging, the SSD tier, another
 * node, or storage. Above the daemon, the kernel's page cache may hold the
 * file too, and then reads never reach the daemon at all: that is measured
 * here with mincore(2) over a read-only shared mapping of the file, which
 * reads nothing and faults nothing in.
 *
 * DESIGN
 * - The mapping is made a window at a time (MAP_WINDOW), so a file of any
 *   size costs one window of address space and a small vector.
 * - A path that is not a regular file on an epochfs mount is refused in
 *   one line naming it and why; the other paths are still looked at, and
 *   the exit status says something failed.
 * - Opening the file to map it costs the daemon nothing: by default the
 *   kernel opens files itself (no OPEN request), and with --open the
 *   daemon keeps the kernel's cache at open (keep_cache), so looking does
 *   not drop what is looked at.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/core.h"
#include "mwhere.h"
#include "stat_int.h"
#include "store/path.h"

#define MAP_WINDOW (1ull << 30)

static const char *const place_name[MWHERE__N] = {
	"RAM cache", "prefetch staging", "SSD tier", "on a peer", "from storage",
};

/* The bytes of FD (SIZE long) in the kernel's page cache into *OUT; 0, or
 * -errno with WHY. */
static int resident(int fd, uint64_t size, uint64_t *out, char *why, size_t wl)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *vec = malloc(MAP_WINDOW / (uint64_t)pg);
	uint64_t got = 0;
	int err = 0;

	if (!vec) {
		snprintf(why, wl, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (uint64_t off = 0; off < size; off += MAP_WINDOW) {
		size_t len = (size_t)(size - off < MAP_WINDOW ? size - off : MAP_WINDOW);
		void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
		if (p == MAP_FAILED) {
			err = -errno;
			snprintf(why, wl, "mmap: %s", strerror(-err));
			break;
		}
		if (mincore(p, len, vec) < 0) {
			err = -errno;
			snprintf(why, wl, "mincore: %s", strerror(-err));
			munmap(p, len);
			break;
		}
		for (size_t i = 0; i * (size_t)pg < len; i++)
			if (vec[i] & 1)
				got += len - i * (size_t)pg < (size_t)pg ? len - i * (size_t)pg : (size_t)pg;
		munmap(p, len);
	}
	free(vec);
	*out = got;
	return err;
}

/* Why getxattr of the where attribute failed with ERR, for a person. */
static const char *where_error(int err)
{
	switch (err) {
	case ENODATA: return "the daemon keeps no bytes for it (not a file of the dataset)";
	case ENOTSUP: return "its daemon does not answer " CORE_XATTR_WHERE " (an older epochfs?)";
	case ENOTCONN: return "the mount's daemon is gone";
	default: return strerror(err);
	}
}

static void fail_file(const char *path, const char *why, int json)
{
	if (json) {
		printf("{\"path\": ");
		stat_json_str(stdout, path);
		printf(", \"error\": ");
		stat_json_str(stdout, why);
		printf("}\n");
	} else {
		fflush(stdout);
		fprintf(stderr, "epochfs-stat: %s: %s\n", path, why);
	}
}

static void show_text(const char *path, const char *src, const struct mwhere *w, int pc_err, uint64_t pc,
		      uint64_t size, const char *pc_why)
{
	printf("%s: %llu bytes, %llu item%s of %llu bytes (SOURCE %s)\n", path, (unsigned long long)w->size,
	       (unsigned long long)w->items, w->items == 1 ? "" : "s", (unsigned long long)w->item, src);
	for (int p = 0; p < MWHERE__N; p++) {
		char share[16] = "-";
		if (w->size)
			snprintf(share, sizeof(share), "%.1f%%", 100.0 * (double)w->bytes[p] / (double)w->size);
		printf("  %-17s %14llu bytes %7s", place_name[p], (unsigned long long)w->bytes[p], share);
		if (p == MWHERE_PEER && w->nodes) {
			printf("  (");
			for (int k = 0; k < w->nodes; k++)
				printf("%s%s", k ? ", " : "", w->node[k]);
			printf(")");
		}
		putchar('\n');
	}
	if (pc_err)
		printf("  kernel page cache: unknown (%s)\n", pc_why);
	else
		printf("  kernel page cache: %llu of %llu bytes (%.1f%%)\n", (unsigned long long)pc,
		       (unsigned long long)size, size ? 100.0 * (double)pc / (double)size : 0.0);
	size_t ml = strlen(w->map);
	uint64_t more = w->map_more + (ml > 64 ? ml - 64 : 0);
	printf("  map (R RAM, S staging, T tier, P peer, . storage): %.64s", w->map);
	if (more)
		printf("... (+%llu items)", (unsigned long long)more);
	putchar('\n');
}

static void show_json(const char *path, const char *src, const struct mwhere *w, int pc_err, uint64_t pc,
		      const char *pc_why)
{
	printf("{\"path\": ");
	stat_json_str(stdout, path);
	printf(", \"source\": ");
	stat_json_str(stdout, src);
	printf(", \"size\": %llu, \"item\": %llu, \"items\": %llu", (unsigned long long)w->size,
	       (unsigned long long)w->item, (unsigned long long)w->items);
	for (int p = 0; p < MWHERE__N; p++)
		printf(", \"%s_bytes\": %llu, \"%s_items\": %llu", mwhere_key(p), (unsigned long long)w->bytes[p],
		       mwhere_key(p), (unsigned long long)w->n[p]);
	printf(", \"peers\": [");
	for (int k = 0; k < w->nodes; k++) {
		printf("%s", k ? ", " : "");
		stat_json_str(stdout, w->node[k]);
	}
	printf("], \"map\": ");
	stat_json_str(stdout, w->map);
	printf(", \"map_more\": %llu, \"page_cache_bytes\": ", (unsigned long long)w->map_more);
	if (pc_err)
		printf("null");
	else
		printf("%llu", (unsigned long long)pc);
	printf(", \"page_cache_error\": ");
	stat_json_str(stdout, pc_err ? pc_why : NULL);
	printf(", \"error\": null}\n");
}

/* Looks at one PATH; 0, or -1 when it could not be (said). */
static int one_file(const char *path, int json)
{
	char real[PATH_MAX], src[PATH_MAX + 16], why[300], *buf = NULL;
	struct mwhere *w = NULL;
	struct stat st;
	ssize_t n;
	int fd = -1, rc = -1;

	if (!realpath(path, real) || stat(real, &st) < 0) {
		fail_file(path, strerror(errno), json);
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		fail_file(path, "a directory: --file looks at files (give them, e.g. DIR/*)", json);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fail_file(path, "not a regular file", json);
		return -1;
	}
	int o = path_epochfs_origin("/proc/self/mountinfo", real, src, sizeof(src));
	if (o <= 0) {
		fail_file(path, o < 0 ? strerror(-o) : "not on an epochfs mount", json);
		return -1;
	}
	/* The size first; the answer may grow between the two calls. */
	for (int tries = 0; tries < 4; tries++) {
		n = getxattr(real, CORE_XATTR_WHERE, NULL, 0);
		if (n < 0)
			break;
		free(buf);
		if (!(buf = malloc((size_t)n + 1))) {
			errno = ENOMEM;
			n = -1;
			break;
		}
		n = getxattr(real, CORE_XATTR_WHERE, buf, (size_t)n + 1);
		if (n >= 0 || errno != ERANGE)
			break;
	}
	if (n < 0) {
		fail_file(path, where_error(errno == EOPNOTSUPP ? ENOTSUP : errno), json);
		goto out;
	}
	if (!(w = malloc(sizeof(*w))) || mwhere_parse(buf, (size_t)n, w) < 0) {
		fail_file(path, w ? "its daemon's answer is not the text this tool knows" : strerror(ENOMEM), json);
		goto out;
	}
	/* The page cache above the daemon: a look, nothing read. */
	uint64_t pc = 0;
	int pc_err = 0;
	if ((fd = open(real, O_RDONLY | O_CLOEXEC)) < 0) {
		pc_err = -errno;
		snprintf(why, sizeof(why), "open: %s", strerror(errno));
	} else {
		pc_err = resident(fd, (uint64_t)st.st_size, &pc, why, sizeof(why));
	}
	if (json)
		show_json(path, src, w, pc_err, pc, why);
	else
		show_text(path, src, w, pc_err, pc, (uint64_t)st.st_size, why);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(w);
	free(buf);
	return rc;
}

int stat_files(char *const *paths, int n, int json)
{
	int rc = 0;

	for (int i = 0; i < n; i++)
		if (one_file(paths[i], json) < 0)
			rc = 1;
	fflush(stdout);
	return rc;
}
