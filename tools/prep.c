/* prep.c - epochfs-prep: declares (or ends) a prep group on a mount.
 *
 * Builds the spec from options, checks it here with the daemon's own parser
 * (prep/spec.c) so mistakes are caught before the mount is touched, writes
 * it to MOUNTPOINT/.prep/NAME.spec in one write(), and then makes sure the
 * group runs with exactly that spec: it looks up .prep/NAME (which commits
 * the spec) and reads the canonical spec back. If the group cannot start,
 * or already runs with another spec, .prep/NAME.error says why and so does
 * this tool. Each of the k jobs of a search can run the same command.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec.h"
#include "util/version.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-prep MOUNTPOINT NAME [OPTIONS]     declare group NAME\n"
		"       epochfs-prep MOUNTPOINT NAME --remove      end it\n"
		"\n"
		"Declares a group of pre-augmented minibatches, made once and read by every\n"
		"job of a hyperparameter search: MOUNTPOINT/.prep/NAME/epoch-EEEE/batch-BBBBBB\n"
		"(format: docs/prep-format.md). Each job may run the same command.\n"
		"  --root DIR        ImageFolder root inside the dataset (default: the dataset)\n"
		"  --batch N         samples per batch (default 64)\n"
		"  --size PX         output side (default 224)\n"
		"  --jobs K          consumers that read every batch (default 1)\n"
		"  --seed S          order, crops and flips follow from it (default 0)\n"
		"  --epochs E        epochs to prepare (default 1)\n"
		"  --scale MIN,MAX   RandomResizedCrop area range (default 0.08,1.0)\n"
		"  --ratio MIN,MAX   aspect range, fractions allowed (default 3/4,4/3)\n"
		"  --flip P          horizontal flip probability (default 0.5)\n"
		"  --drop-last       drop a last, short batch\n"
		"  --layout L        nchw (default) or nhwc\n"
		"  --dtype T         uint8 (default) or float32 (normalized with --mean/--std)\n"
		"  --mean R,G,B      float32 only (default 0.485,0.456,0.406)\n"
		"  --std R,G,B       float32 only (default 0.229,0.224,0.225)\n"
		"  -V, --version     print the version\n");
}

static int slurp(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return (int)n;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "root", required_argument, NULL, 'r' },  { "batch", required_argument, NULL, 'b' },
		{ "size", required_argument, NULL, 's' },  { "jobs", required_argument, NULL, 'j' },
		{ "seed", required_argument, NULL, 'S' },  { "epochs", required_argument, NULL, 'e' },
		{ "scale", required_argument, NULL, 'c' }, { "ratio", required_argument, NULL, 'a' },
		{ "flip", required_argument, NULL, 'f' },  { "drop-last", no_argument, NULL, 'd' },
		{ "layout", required_argument, NULL, 'l' }, { "dtype", required_argument, NULL, 't' },
		{ "mean", required_argument, NULL, 'm' },  { "std", required_argument, NULL, 'D' },
		{ "remove", no_argument, NULL, 'R' },      { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },  { NULL, 0, NULL, 0 },
	};
	char text[SPEC_MAX_BYTES], err[300], path[PATH_MAX], back[SPEC_MAX_BYTES + 1];
	size_t used = 0;
	int c, remove = 0;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		const char *key = NULL;
		for (const struct option *o = lo; o->name; o++)
			if (o->val == c)
				key = o->name;
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("epochfs-prep %s\n", EPOCHFS_VERSION);
			return 0;
		case 'R':
			remove = 1;
			continue;
		case 'd':
			used += (size_t)snprintf(text + used, sizeof(text) - used, "drop_last=1\n");
			continue;
		case '?':
		case ':':
			fprintf(stderr, "epochfs-prep: error: %s: unknown option or missing value (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
		/* --name VALUE becomes name=VALUE ('-' in the option is '_' in the spec). */
		char k[32];
		snprintf(k, sizeof(k), "%s", key);
		for (char *p = k; *p; p++)
			if (*p == '-')
				*p = '_';
		used += (size_t)snprintf(text + used, sizeof(text) - used, "%s=%s\n", k, optarg);
		if (used >= sizeof(text)) {
			fprintf(stderr, "epochfs-prep: error: options too long for a spec\n");
			return 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "epochfs-prep: error: expected MOUNTPOINT and NAME (see --help)\n");
		return 2;
	}
	const char *mnt = argv[optind], *name = argv[optind + 1];
	struct prep_spec want, got;
	struct stat st;

	if (spec_parse(text, used, &want, err, sizeof(err)) < 0) {
		fprintf(stderr, "epochfs-prep: error: %s\n", err);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/.prep", mnt);
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "epochfs-prep: error: %s: no .prep/ here (not an epochfs mount, or "
			"mounted with --no-prep)\n", mnt);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.prep/%s.spec", mnt, name);
	if (remove) {
		if (unlink(path) < 0) {
			fprintf(stderr, "epochfs-prep: error: %s: %s\n", path,
				errno == EBUSY ? "a batch read is in flight; try again" : strerror(errno));
			return 1;
		}
		printf("group %s ended\n", name);
		return 0;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "epochfs-prep: error: %s: %s\n", path, strerror(errno));
		return 1;
	}
	ssize_t n = write(fd, text, used);
	int werr = n < 0 ? errno : 0;
	close(fd);
	/* Looking the group up commits the spec; NAME.error says why not. */
	snprintf(path, sizeof(path), "%s/.prep/%s", mnt, name);
	int up = stat(path, &st) == 0;
	snprintf(path, sizeof(path), "%s/.prep/%s.error", mnt, name);
	int elen = slurp(path, back, sizeof(back));
	if (werr || !up) {
		fprintf(stderr, "epochfs-prep: error: group %s: %s", name,
			elen > 0 ? back : werr ? strerror(werr) : "did not start\n");
		if (elen <= 0 && werr)
			fputc('\n', stderr);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.prep/%s.spec", mnt, name);
	int blen = slurp(path, back, sizeof(back));
	if (blen < 0 || spec_parse(back, (size_t)blen, &got, err, sizeof(err)) < 0) {
		fprintf(stderr, "epochfs-prep: error: %s: cannot read the running spec back\n", path);
		return 1;
	}
	if (memcmp(&want, &got, sizeof(want))) {
		fprintf(stderr, "epochfs-prep: error: group %s already runs with another spec:\n%s"
			"end it first: epochfs-prep %s %s --remove\n", name, back, mnt, name);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.prep/%s/epoch-0000", mnt, name);
	unsigned long batches = 0;
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));)
		batches += e->d_name[0] != '.';
	if (d)
		closedir(d);
	printf("group %s: %u epochs of %lu batches of %u, %ux%u %s %s, for %u consumers\n"
	       "  %s/.prep/%s/epoch-EEEE/batch-BBBBBB\n",
	       name, want.epochs, batches, want.batch, want.p.size, want.p.size,
	       want.p.dtype == BATCH_F32 ? "float32" : "uint8", want.p.layout == BATCH_NCHW ? "NCHW" : "NHWC",
	       want.jobs, mnt, name);
	return 0;
}
