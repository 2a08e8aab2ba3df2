/* helpers.h - small fixtures shared by the unit tests: a temp tree. */
#ifndef EPOCHFS_TEST_HELPERS_H
#define EPOCHFS_TEST_HELPERS_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void th_write(const char *dir, const char *rel, const char *data)
{
	char p[4096];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	if (f) {
		fputs(data, f);
		fclose(f);
	}
}

static inline void th_mkdir(const char *dir, const char *rel)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	mkdir(p, 0755);
}

static inline char *th_tmpdir(void)
{
	char *t = strdup("/tmp/epochfs-unit.XXXXXX");
	return mkdtemp(t);
}

static inline void th_rmrf(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		/* best effort */
	}
}

#endif
