/* path.c - see path.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "path.h"

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
