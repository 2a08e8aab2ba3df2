/* path.c - see path.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "store/path.h"

int path_open_beneath(int rootfd, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (unsigned)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd;
	int tries = 0;

	if (!rel[0])
		rel = ".";
	/* EAGAIN: a rename raced with the confined walk; it is safe to retry. */
	do
		fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN && ++tries < 16);
	return fd < 0 ? -errno : (int)fd;
}

int path_check_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 255 || strchr(name, '/'))
		return -EINVAL;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	return 0;
}

int path_overlap(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;

	/* "/" holds everything. */
	if ((la == 1 && a[0] == '/') || (lb == 1 && b[0] == '/'))
		return 1;
	if (memcmp(a, b, n))
		return 0;
	return la == lb || (la < lb ? b[la] : a[lb]) == '/';
}

/* Undoes mountinfo's octal escapes (\040 and the like) in place. */
static void unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

/* LINE's first N space-separated fields, cut in place into F. 0, or -1
 * when it has fewer. */
static int fields(char *line, char **f, int n)
{
	char *save = NULL, *tok = strtok_r(line, " \n", &save);

	for (int i = 0; i < n; i++, tok = strtok_r(NULL, " \n", &save)) {
		if (!tok)
			return -1;
		f[i] = tok;
	}
	return 0;
}

/* One mountinfo entry, cut in place in the line read: its device
 * ("MAJ:MIN"), mount point (unescaped), file system type and source (still
 * escaped). */
struct mount_entry {
	char *dev, *mnt, *type, *src;
};

/* Reads F's next well-formed entry into E, which points into *LINE.
 * 1, or 0 at the end. */
static int next_mount(FILE *f, char **line, size_t *cap, struct mount_entry *e)
{
	while (getline(line, cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE ... */
		char *save = NULL, *dash = strstr(*line, " - "), *fl[5];
		if (!dash)
			continue;
		*dash = '\0';
		if (fields(*line, fl, 5) < 0)
			continue;
		e->dev = fl[2];
		e->mnt = fl[4];
		e->type = strtok_r(dash + 3, " \n", &save);
		e->src = strtok_r(NULL, " \n", &save);
		if (!e->type || !e->src)
			continue;
		unescape(e->mnt);
		return 1;
	}
	return 0;
}

int path_epochfs_origin(const char *mountinfo, const char *p, char *out, size_t len)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL, best_src[4096] = "";
	size_t cap = 0, best = 0, off = 0;
	struct mount_entry e;
	int found = 0;

	if (!f)
		return -errno;
	while (next_mount(f, &line, &cap, &e)) {
		char *mnt = e.mnt, *type = e.type, *src = e.src;
		size_t ml = strlen(mnt);
		int root = !strcmp(mnt, "/");
		if (!(root || (!strncmp(p, mnt, ml) && (p[ml] == '/' || !p[ml]))) || ml < best)
			continue;
		/* The deepest mount wins; of two on one point, the later (on top). */
		best = ml;
		off = root ? 0 : ml;
		found = !strcmp(type, "fuse.epochfs") && src[0] == '/';
		if (found) {
			unescape(src);
			snprintf(best_src, sizeof(best_src), "%s", src);
		}
	}
	free(line);
	fclose(f);
	if (!found)
		return 0;
	/* P minus its mount point, below that mount's SOURCE. */
	if (snprintf(out, len, "%s%s", strcmp(best_src, "/") ? best_src : "", p + off) >= (int)len)
		return -ENAMETOOLONG;
	if (!out[0])
		snprintf(out, len, "/");
	return 1;
}

/* The entry of the mount on top at P (the last listed there): its type
 * into TYPE and its device into DEV, each if not NULL. 1, 0 when P is not
 * a mount point, or -errno. */
static int top_mount(const char *mountinfo, const char *p, char *type, size_t tlen, char *dev,
		     size_t dlen)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL;
	size_t cap = 0;
	struct mount_entry e;
	int found = 0;

	if (!f)
		return -errno;
	while (next_mount(f, &line, &cap, &e)) {
		if (strcmp(e.mnt, p))
			continue;
		if (type)
			snprintf(type, tlen, "%s", e.type);
		if (dev)
			snprintf(dev, dlen, "%s", e.dev);
		found = 1;
	}
	free(line);
	fclose(f);
	return found;
}

int path_mount_type(const char *mountinfo, const char *p, char *type, size_t len)
{
	return top_mount(mountinfo, p, type, len, NULL, 0);
}

int path_mount_dev(const char *mountinfo, const char *p, char *dev, size_t len)
{
	char raw[64];
	unsigned maj, min;
	char end;
	int found = top_mount(mountinfo, p, NULL, 0, raw, sizeof(raw));

	if (found <= 0)
		return found;
	/* A device that is not two numbers is not taken for one. */
	return raw[0] >= '0' && raw[0] <= '9' && strspn(raw, "0123456789:") == strlen(raw) &&
	       sscanf(raw, "%u:%u%c", &maj, &min, &end) == 2 &&
	       snprintf(dev, len, "%u:%u", maj, min) < (int)len;
}

int path_epochfs_mounts(const char *mountinfo, path_mount_fn fn, void *arg)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL;
	size_t cap = 0;
	struct mount_entry e;
	int n = 0;

	if (!f)
		return -errno;
	while (next_mount(f, &line, &cap, &e)) {
		if (strcmp(e.type, "fuse.epochfs"))
			continue;
		unescape(e.src);
		fn(arg, e.mnt, e.src);
		n++;
	}
	free(line);
	fclose(f);
	return n;
}
