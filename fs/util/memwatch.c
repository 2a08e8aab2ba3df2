/* memwatch.c - see memwatch.h.
 *
 * Where the numbers come from:
 * - cgroup v1 (/sys/fs/cgroup/memory/PATH): the limit is the smaller of
 *   memory.limit_in_bytes and memory.stat's hierarchical_memory_limit (a
 *   parent's limit binds too); pinned = memory.usage_in_bytes minus the
 *   file LRU (total_inactive_file + total_active_file), which leaves anon,
 *   shmem and kernel memory; mapped = total_mapped_file; majfaults =
 *   total_pgmajfault; refaults = total_workingset_refault_file.
 * - cgroup v2 (/sys/fs/cgroup/PATH): the limit is the smallest memory.max
 *   from PATH up to the root; pinned = memory.current minus inactive_file
 *   and active_file; mapped = file_mapped; majfaults = pgmajfault;
 *   refaults = workingset_refault_file.
 * - the machine (/proc/meminfo, /proc/vmstat): limit = MemTotal, pinned =
 *   MemTotal - MemAvailable (the kernel's own estimate of what cannot be
 *   had back), mapped = Mapped; /proc/vmstat's pgmajfault and
 *   workingset_refault_file.
 * A cgroup whose limit is no smaller than the machine's RAM is no limit:
 * the machine's figures are used.
 * own: the calling process's RssAnon + RssShmem (/proc/self/status), what
 * of pinned is the daemon's; the rest is the job beside it (and the
 * kernel's own memory in the cgroup).
 * Shared memory (tmpfs, /dev/shm: the cache's persistent arena, a
 * DataLoader's shared tensors) is on the anon LRU, so it is in pinned, and
 * its mapped pages are in the mapped-file figure too. mapped is therefore
 * taken less the shared memory (total_shmem, shmem, Shmem): without that, a
 * 1 GiB arena counted twice and the room looked 1 GiB smaller than it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/memwatch.h"

#define PATH_BYTES 4096

struct memwatch {
	char root[PATH_BYTES];      /* "" or a test tree */
	enum mem_scope scope;
	char dir[PATH_BYTES];       /* the cgroup's directory (v1, v2) */
	int depth;                  /* v2: directories from dir up to the root */
};

/* Reads file PATH whole into BUF (LEN bytes, NUL-terminated): bytes, or -errno. */
static ssize_t slurp(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, got = 0;

	if (fd < 0)
		return -errno;
	while ((size_t)got < len - 1 && (n = read(fd, buf + got, len - 1 - (size_t)got)) > 0)
		got += n;
	n = n < 0 ? -errno : got;
	close(fd);
	buf[got] = '\0';
	return n;
}

/* A number alone in file PATH; "max" is UINT64_MAX. 0 or -errno. */
static int read_u64(const char *path, uint64_t *v)
{
	char buf[64], *end;
	ssize_t n = slurp(path, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	if (!strncmp(buf, "max", 3)) {
		*v = UINT64_MAX;
		return 0;
	}
	errno = 0;
	*v = strtoull(buf, &end, 10);
	return end == buf || errno ? -EINVAL : 0;
}

/* The value of KEY in a "key value" file's text (kB units when KB), or -1. */
static int64_t field(const char *text, const char *key, int kb)
{
	size_t k = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, k) || (p[k] != ' ' && p[k] != ':'))
			continue;
		const char *v = p + k + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		char *end;
		long long n = strtoll(v, &end, 10);
		if (end == v)
			return -1;
		return kb ? n * 1024 : n;
	}
	return -1;
}

/* OUT = A B C (PATH_BYTES at most), or -ENAMETOOLONG. */
static int join(char *out, const char *a, const char *b, const char *c)
{
	size_t na = strlen(a), nb = strlen(b), nc = strlen(c);

	if (na + nb + nc >= PATH_BYTES)
		return -ENAMETOOLONG;
	memcpy(out, a, na);
	memcpy(out + na, b, nb);
	memcpy(out + na + nb, c, nc + 1);
	return 0;
}

static uint64_t machine_total(const char *root)
{
	char path[PATH_BYTES], text[8192];
	int64_t v;

	if (join(path, root, "/proc/meminfo", "") < 0 || slurp(path, text, sizeof(text)) < 0)
		return 0;
	v = field(text, "MemTotal", 1);
	return v > 0 ? (uint64_t)v : 0;
}

/* The memory cgroup paths in a /proc/PID/cgroup text (TEXT, changed):
 * v1's "N:...memory...:/path" line into V1, v2's "0::/path" into V2
 * (PATH_BYTES each; "" where there is none). */
static void cgroup_paths(char *text, char *v1, char *v2)
{
	char *save = NULL;

	v1[0] = v2[0] = '\0';
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		const char *ctl = c1 + 1, *cg = c2 + 1;
		if (!strcmp(line, "0") && !*ctl) {
			snprintf(v2, PATH_BYTES, "%s", cg);
			continue;
		}
		/* v1: the controller list is comma-separated. */
		for (const char *p = ctl; *p;) {
			size_t n = strcspn(p, ",");
			if (n == 6 && !strncmp(p, "memory", 6))
				snprintf(v1, PATH_BYTES, "%s", cg);
			p += n + (p[n] == ',');
		}
	}
}

/* The directory of cgroup path CG below ROOT in hierarchy SCOPE into OUT. */
static int cgroup_dir(char *out, const char *root, enum mem_scope scope, const char *cg)
{
	return join(out, root, scope == MEM_CGROUP_V1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup",
		    strcmp(cg, "/") ? cg : "");
}

/* The memory controller's cgroup in /proc/self/cgroup: v1's when its
 * files are there, else v2's. */
static int find_cgroup(struct memwatch *m)
{
	char path[PATH_BYTES], text[8192], v1[PATH_BYTES], v2[PATH_BYTES];

	if (join(path, m->root, "/proc/self/cgroup", "") < 0 || slurp(path, text, sizeof(text)) < 0)
		return -ENOENT;
	cgroup_paths(text, v1, v2);
	if (v1[0]) {
		if (cgroup_dir(m->dir, m->root, MEM_CGROUP_V1, v1) < 0)
			return -ENAMETOOLONG;
		join(path, m->dir, "/memory.limit_in_bytes", "");
		if (access(path, R_OK) == 0) {
			m->scope = MEM_CGROUP_V1;
			return 0;
		}
	}
	if (v2[0]) {
		if (cgroup_dir(m->dir, m->root, MEM_CGROUP_V2, v2) < 0)
			return -ENAMETOOLONG;
		join(path, m->dir, "/memory.current", "");
		if (access(path, R_OK) == 0) {
			m->scope = MEM_CGROUP_V2;
			m->depth = 0;
			for (const char *p = v2; *p; p++)
				m->depth += *p == '/' && p[1];
			return 0;
		}
	}
	return -ENOENT;
}

int memwatch_holds(const struct memwatch *m, int pid)
{
	char path[PATH_BYTES], text[8192], v1[PATH_BYTES], v2[PATH_BYTES], dir[PATH_BYTES], num[24];

	if (m->scope == MEM_SYSTEM)
		return 1;           /* the machine holds every process */
	if (pid <= 0)
		return 0;
	snprintf(num, sizeof(num), "/proc/%d", pid);
	if (join(path, m->root, num, "/cgroup") < 0 || slurp(path, text, sizeof(text)) < 0)
		return 0;
	cgroup_paths(text, v1, v2);
	const char *cg = m->scope == MEM_CGROUP_V1 ? v1 : v2;
	if (!cg[0] || cgroup_dir(dir, m->root, m->scope, cg) < 0)
		return 0;
	/* Its cgroup, or one below it: the limit and the usage are the
	 * hierarchy's. */
	size_t n = strlen(m->dir);
	return !strncmp(dir, m->dir, n) && (dir[n] == '\0' || dir[n] == '/');
}

static int sample_system(struct memwatch *m, struct mem_sample *s)
{
	char path[PATH_BYTES], text[8192];
	int64_t total, avail, mapped, cached, maj, ref;

	if (join(path, m->root, "/proc/meminfo", "") < 0 || slurp(path, text, sizeof(text)) < 0)
		return -EIO;
	total = field(text, "MemTotal", 1);
	avail = field(text, "MemAvailable", 1);
	mapped = field(text, "Mapped", 1);
	cached = field(text, "Cached", 1);
	int64_t shmem = field(text, "Shmem", 1);
	if (shmem > 0)
		mapped = mapped > shmem ? mapped - shmem : 0;
	if (total <= 0 || avail < 0 || mapped < 0 || cached < 0)
		return -EINVAL;
	if (join(path, m->root, "/proc/vmstat", "") < 0 || slurp(path, text, sizeof(text)) < 0)
		return -EIO;
	maj = field(text, "pgmajfault", 0);
	ref = field(text, "workingset_refault_file", 0);
	*s = (struct mem_sample){ .scope = MEM_SYSTEM, .limit = (uint64_t)total,
				  .pinned = total > avail ? (uint64_t)(total - avail) : 0,
				  .mapped = (uint64_t)mapped, .file = (uint64_t)cached,
				  .shmem = shmem > 0 ? (uint64_t)shmem : 0,
				  .majfaults = maj > 0 ? (uint64_t)maj : 0,
				  .refaults = ref > 0 ? (uint64_t)ref : 0 };
	return 0;
}

static int sample_v1(struct memwatch *m, struct mem_sample *s)
{
	char path[PATH_BYTES], text[16384];
	uint64_t limit, usage;
	int64_t hier, inact, act, mapped, maj, ref;

	join(path, m->dir, "/memory.limit_in_bytes", "");
	if (read_u64(path, &limit) < 0)
		return -EIO;
	join(path, m->dir, "/memory.usage_in_bytes", "");
	if (read_u64(path, &usage) < 0)
		return -EIO;
	join(path, m->dir, "/memory.stat", "");
	if (slurp(path, text, sizeof(text)) < 0)
		return -EIO;
	hier = field(text, "hierarchical_memory_limit", 0);
	inact = field(text, "total_inactive_file", 0);
	act = field(text, "total_active_file", 0);
	mapped = field(text, "total_mapped_file", 0);
	int64_t shmem = field(text, "total_shmem", 0);
	if (shmem > 0 && mapped >= 0)
		mapped = mapped > shmem ? mapped - shmem : 0;
	maj = field(text, "total_pgmajfault", 0);
	ref = field(text, "total_workingset_refault_file", 0);
	if (inact < 0 || act < 0 || mapped < 0)
		return -EINVAL;
	if (hier > 0 && (uint64_t)hier < limit)
		limit = (uint64_t)hier;
	uint64_t file = (uint64_t)(inact + act);
	*s = (struct mem_sample){ .scope = MEM_CGROUP_V1, .limit = limit,
				  .pinned = usage > file ? usage - file : 0, .mapped = (uint64_t)mapped,
				  .file = file, .shmem = shmem > 0 ? (uint64_t)shmem : 0,
				  .majfaults = maj > 0 ? (uint64_t)maj : 0,
				  .refaults = ref > 0 ? (uint64_t)ref : 0 };
	return 0;
}

static int sample_v2(struct memwatch *m, struct mem_sample *s)
{
	char path[PATH_BYTES], dir[PATH_BYTES], text[16384];
	uint64_t limit = UINT64_MAX, usage, v;
	int64_t inact, act, mapped, maj, ref;

	/* The tightest memory.max from our cgroup up to (not including) the root. */
	snprintf(dir, sizeof(dir), "%s", m->dir);
	for (int up = 0; up < m->depth; up++) {
		join(path, dir, "/memory.max", "");
		if (read_u64(path, &v) == 0 && v < limit)
			limit = v;
		char *slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
	join(path, m->dir, "/memory.current", "");
	if (read_u64(path, &usage) < 0)
		return -EIO;
	join(path, m->dir, "/memory.stat", "");
	if (slurp(path, text, sizeof(text)) < 0)
		return -EIO;
	inact = field(text, "inactive_file", 0);
	act = field(text, "active_file", 0);
	mapped = field(text, "file_mapped", 0);
	int64_t shmem = field(text, "shmem", 0);
	if (shmem > 0 && mapped >= 0)
		mapped = mapped > shmem ? mapped - shmem : 0;
	maj = field(text, "pgmajfault", 0);
	ref = field(text, "workingset_refault_file", 0);
	if (inact < 0 || act < 0 || mapped < 0)
		return -EINVAL;
	uint64_t file = (uint64_t)(inact + act);
	*s = (struct mem_sample){ .scope = MEM_CGROUP_V2, .limit = limit,
				  .pinned = usage > file ? usage - file : 0, .mapped = (uint64_t)mapped,
				  .file = file, .shmem = shmem > 0 ? (uint64_t)shmem : 0,
				  .majfaults = maj > 0 ? (uint64_t)maj : 0,
				  .refaults = ref > 0 ? (uint64_t)ref : 0 };
	return 0;
}

/* The caller's own anonymous and shared resident bytes into S (own, and
 * own_shmem of it); both 0 if unknown. */
static void sample_own(const struct memwatch *m, struct mem_sample *s)
{
	char path[PATH_BYTES], text[4096];
	int64_t anon, shm;

	s->own = s->own_shmem = 0;
	if (join(path, m->root, "/proc/self/status", "") < 0 || slurp(path, text, sizeof(text)) < 0)
		return;
	anon = field(text, "RssAnon", 1);
	shm = field(text, "RssShmem", 1);
	if (anon < 0)
		return;
	s->own_shmem = shm > 0 ? (uint64_t)shm : 0;
	s->own = (uint64_t)anon + s->own_shmem;
}

int memwatch_sample(struct memwatch *m, struct mem_sample *s)
{
	int err;

	switch (m->scope) {
	case MEM_CGROUP_V1:
		err = sample_v1(m, s);
		break;
	case MEM_CGROUP_V2:
		err = sample_v2(m, s);
		break;
	default:
		err = sample_system(m, s);
		break;
	}
	if (err == 0)
		sample_own(m, s);
	return err;
}

int memwatch_open(const char *root, struct memwatch **out)
{
	struct memwatch *m = calloc(1, sizeof(*m));
	struct mem_sample s;

	if (!m)
		return -ENOMEM;
	snprintf(m->root, sizeof(m->root), "%s", root ? root : "");
	m->scope = MEM_SYSTEM;
	if (find_cgroup(m) == 0) {
		/* A cgroup with no limit below the machine's RAM limits nothing. */
		uint64_t total = machine_total(m->root);
		if (memwatch_sample(m, &s) < 0 || (total && s.limit >= total))
			m->scope = MEM_SYSTEM;
	}
	*out = m;
	return 0;
}

void memwatch_close(struct memwatch *m)
{
	free(m);
}

enum mem_scope memwatch_scope(const struct memwatch *m)
{
	return m->scope;
}

uint64_t memwatch_limit_bytes(void)
{
	struct memwatch *m;
	struct mem_sample s;
	uint64_t v = 0;

	if (memwatch_open("", &m) < 0)
		return 0;
	if (memwatch_sample(m, &s) == 0)
		v = s.limit;
	memwatch_close(m);
	return v;
}
