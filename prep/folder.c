/* folder.c - see folder.h.
 *
 * DESIGN: one recursive walk per class collects (directory path, sorted
 * file names); the directories are then sorted by full path, which is what
 * sorted(os.walk()) does, and their files appended in order. Paths live in
 * one growing pool and samples refer to offsets in it: two allocations for a
 * million images, not a million.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folder.h"
#include "store/path.h"

struct pool {
	char *p;
	size_t len, cap;
};

struct folder {
	struct pool names;          /* class names and sample paths, NUL-separated */
	uint64_t *cls;              /* offsets of class names */
	uint32_t ncls;
	struct { uint64_t off; int32_t label; } *s;
	uint32_t ns, scap;
};

static int64_t pool_add(struct pool *p, const char *s, size_t n)
{
	if (p->len + n + 1 > p->cap) {
		size_t cap = p->cap ? p->cap : 4096;
		while (cap < p->len + n + 1)
			cap *= 2;
		char *q = realloc(p->p, cap);
		if (!q)
			return -ENOMEM;
		p->p = q;
		p->cap = cap;
	}
	memcpy(p->p + p->len, s, n);
	p->p[p->len + n] = '\0';
	p->len += n + 1;
	return (int64_t)(p->len - n - 1);
}

static int is_image(const char *name)
{
	static const char *const ext[] = { ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp" };
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		size_t e = strlen(ext[i]);
		if (n >= e && !strcasecmp(name + n - e, ext[i]))
			return 1;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in directory fd D (consumed): subdirectories into *DIRS, image
 * files into *FILES, both malloc'ed arrays of strdup'ed names, sorted. */
static int list_dir(int d, char ***dirs, size_t *nd, char ***files, size_t *nf)
{
	DIR *dir = fdopendir(d);
	struct dirent *e;
	size_t cd = 0, cf = 0;
	int err = 0;

	*dirs = *files = NULL;
	*nd = *nf = 0;
	if (!dir) {
		err = -errno;
		close(d);
		return err;
	}
	while ((errno = 0, e = readdir(dir))) {
		struct stat st;
		int isdir;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (e->d_type == DT_UNKNOWN) {
			if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
			isdir = S_ISDIR(st.st_mode);
			if (!isdir && !S_ISREG(st.st_mode))
				continue;
		} else if (e->d_type == DT_DIR) {
			isdir = 1;
		} else if (e->d_type == DT_REG) {
			isdir = 0;
		} else {
			continue;           /* links, devices, sockets: never samples */
		}
		if (!isdir && !is_image(e->d_name))
			continue;
		char ***arr = isdir ? dirs : files;
		size_t *n = isdir ? nd : nf, *cap = isdir ? &cd : &cf;
		if (*n == *cap) {
			*cap = *cap ? *cap * 2 : 64;
			char **q = realloc(*arr, *cap * sizeof(char *));
			if (!q) {
				err = -ENOMEM;
				break;
			}
			*arr = q;
		}
		if (!((*arr)[*n] = strdup(e->d_name))) {
			err = -ENOMEM;
			break;
		}
		(*n)++;
	}
	if (!err && errno)
		err = -errno;
	closedir(dir);
	if (*dirs)
		qsort(*dirs, *nd, sizeof(char *), cmp_str);
	if (*files)
		qsort(*files, *nf, sizeof(char *), cmp_str);
	return err;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* A directory of one class's tree and its image files. */
struct wdir {
	char *path;                 /* relative to BASE */
	char **files;
	size_t nf;
};

static int cmp_wdir(const void *a, const void *b)
{
	return strcmp(((const struct wdir *)a)->path, ((const struct wdir *)b)->path);
}

/* Walks directory PATH (relative to BASE) and below, appending to *W. */
static int walk(int base, const char *path, struct wdir **w, size_t *nw, size_t *cw, int depth)
{
	char **dirs, **files;
	size_t nd, nf;
	int err, d;

	if (depth > 64)
		return 0;               /* deeper trees are not datasets; stop quietly */
	d = path_open_beneath(base, path, O_RDONLY | O_DIRECTORY);
	if (d < 0)
		return d;
	err = list_dir(d, &dirs, &nd, &files, &nf);
	if (err) {
		free_names(dirs, nd);
		free_names(files, nf);
		return err;
	}
	if (*nw == *cw) {
		*cw = *cw ? *cw * 2 : 16;
		struct wdir *q = realloc(*w, *cw * sizeof(**w));
		if (!q) {
			free_names(dirs, nd);
			free_names(files, nf);
			return -ENOMEM;
		}
		*w = q;
	}
	(*w)[*nw] = (struct wdir){ .path = strdup(path), .files = files, .nf = nf };
	if (!(*w)[(*nw)++].path)
		err = -ENOMEM;
	for (size_t i = 0; i < nd && !err; i++) {
		char sub[4096];
		if (snprintf(sub, sizeof(sub), "%s/%s", path, dirs[i]) >= (int)sizeof(sub))
			continue;
		err = walk(base, sub, w, nw, cw, depth + 1);
	}
	free_names(dirs, nd);
	return err;
}

static int add_sample(struct folder *f, const char *dir, const char *name, int32_t label)
{
	char p[4096];
	int n = snprintf(p, sizeof(p), "%s/%s", dir, name);
	int64_t off;

	if (n < 0 || n >= (int)sizeof(p))
		return 0;               /* a path longer than PATH_MAX cannot be opened anyway */
	if (f->ns == UINT32_MAX)
		return -EOVERFLOW;
	if (f->ns == f->scap) {
		uint32_t cap = f->scap ? f->scap * 2 : 1024;
		void *q = realloc(f->s, cap * sizeof(*f->s));
		if (!q)
			return -ENOMEM;
		f->s = q;
		f->scap = cap;
	}
	off = pool_add(&f->names, p[0] == '.' && p[1] == '/' ? p + 2 : p,
		       (size_t)n - (p[0] == '.' && p[1] == '/' ? 2 : 0));
	if (off < 0)
		return (int)off;
	f->s[f->ns].off = (uint64_t)off;
	f->s[f->ns++].label = label;
	return 0;
}

int folder_scan(int base, const char *rel, struct folder **out, char *err, size_t errlen)
{
	struct folder *f = calloc(1, sizeof(*f));
	const char *root = rel && *rel ? rel : ".";
	char **classes = NULL, **files = NULL;
	size_t ncls = 0, nf = 0;
	int ret, d;

	err[0] = '\0';
	if (!f)
		return -ENOMEM;
	d = path_open_beneath(base, root, O_RDONLY | O_DIRECTORY);
	if (d < 0) {
		ret = d;
		snprintf(err, errlen, "root %s: %s", root, strerror(-ret));
		goto fail;
	}
	ret = list_dir(d, &classes, &ncls, &files, &nf);
	free_names(files, nf);
	if (ret)
		goto fail;
	if (!ncls) {
		snprintf(err, errlen, "root %s has no class directories (ImageFolder layout: ROOT/CLASS/IMAGE)", root);
		ret = -ENODATA;
		goto fail;
	}
	f->cls = calloc(ncls, sizeof(*f->cls));
	if (!f->cls) {
		ret = -ENOMEM;
		goto fail;
	}
	char empty[256] = "";
	for (size_t c = 0; c < ncls; c++) {
		struct wdir *w = NULL;
		size_t nw = 0, cw = 0;
		char top[4096];
		uint32_t before = f->ns;
		int64_t off = pool_add(&f->names, classes[c], strlen(classes[c]));

		if (off < 0) {
			ret = (int)off;
			goto fail;
		}
		f->cls[c] = (uint64_t)off;
		f->ncls++;
		snprintf(top, sizeof(top), "%s/%s", root, classes[c]);
		ret = walk(base, top, &w, &nw, &cw, 0);
		if (!ret)
			qsort(w, nw, sizeof(*w), cmp_wdir);
		for (size_t i = 0; i < nw; i++) {
			for (size_t k = 0; k < w[i].nf && !ret; k++)
				ret = add_sample(f, w[i].path, w[i].files[k], (int32_t)c);
			free(w[i].path);
			free_names(w[i].files, w[i].nf);
		}
		free(w);
		if (ret) {
			snprintf(err, errlen, "class %s: %s", classes[c], strerror(-ret));
			goto fail;
		}
		if (f->ns == before && strlen(empty) + strlen(classes[c]) + 2 < sizeof(empty))
			snprintf(empty + strlen(empty), sizeof(empty) - strlen(empty), "%s%s",
				 empty[0] ? ", " : "", classes[c]);
	}
	if (empty[0]) {
		snprintf(err, errlen, "no image file (.jpg .jpeg .png ...) for the classes %s", empty);
		ret = -ENODATA;
		goto fail;
	}
	free_names(classes, ncls);
	*out = f;
	return 0;
fail:
	free_names(classes, ncls);
	folder_free(f);
	return ret;
}

void folder_free(struct folder *f)
{
	if (!f)
		return;
	free(f->names.p);
	free(f->cls);
	free(f->s);
	free(f);
}

uint32_t folder_samples(const struct folder *f)
{
	return f->ns;
}

uint32_t folder_classes(const struct folder *f)
{
	return f->ncls;
}

const char *folder_class(const struct folder *f, uint32_t label)
{
	return label < f->ncls ? f->names.p + f->cls[label] : NULL;
}

const char *folder_path(const struct folder *f, uint32_t i)
{
	return i < f->ns ? f->names.p + f->s[i].off : NULL;
}

int32_t folder_label(const struct folder *f, uint32_t i)
{
	return i < f->ns ? f->s[i].label : -1;
}
