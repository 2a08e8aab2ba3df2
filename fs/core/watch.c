/* watch.c - inotify-driven revalidation; see watch.h.
 *
 * DESIGN: inotify over fanotify because it needs no privilege and works on
 * any local filesystem; a dataset tree has few directories (ImageNet: 1000),
 * far below the default limit of watches. Events are deduplicated per read()
 * batch, so a writer streaming a large file costs one refresh per batch, not
 * one per write(2).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/watch.h"
#include "util/log.h"
#include "util/worker.h"

#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | \
		    IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR |      \
		    IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct watch {
	struct index *ix;
	int ifd, stopfd;
	uint32_t *wd_dir;           /* inotify wd -> directory id */
	size_t nwd;
	unsigned count;
	struct worker w;            /* the thread: it sleeps in poll(), the stop kicks STOPFD */
};

static int add_dir(struct watch *w, const char *source, uint32_t id)
{
	char rel[PATH_MAX], abs[PATH_MAX + 1];
	int wd;

	if (index_path(w->ix, id, rel, sizeof(rel)) < 0)
		return 0;
	if (snprintf(abs, sizeof(abs), "%s/%s", source, rel) >= (int)sizeof(abs))
		return 0;
	wd = inotify_add_watch(w->ifd, abs, WATCH_MASK);
	if (wd < 0)
		return -errno;
	if ((size_t)wd >= w->nwd) {
		size_t n = (size_t)wd * 2 + 64;
		uint32_t *p = realloc(w->wd_dir, n * sizeof(*p));
		if (!p)
			return -ENOMEM;
		memset(p + w->nwd, 0, (n - w->nwd) * sizeof(*p));
		w->wd_dir = p;
		w->nwd = n;
	}
	w->wd_dir[wd] = id;
	w->count++;
	return 0;
}

static void refresh_all(struct watch *w)
{
	for (uint32_t id = INDEX_ROOT + 1; id <= index_count(w->ix); id++)
		index_refresh(w->ix, id, 0);
}

static void handle_batch(struct watch *w, const char *buf, ssize_t len)
{
	struct {
		uint32_t id;
		int force;
	} todo[256];
	int n = 0, overflow = 0;

	for (const char *p = buf; p < buf + len;) {
		const struct inotify_event *ev = (const void *)p;
		uint32_t id = 0;

		p += sizeof(*ev) + ev->len;
		if (ev->mask & IN_Q_OVERFLOW) {
			overflow = 1;
			continue;
		}
		if (ev->wd < 0 || (size_t)ev->wd >= w->nwd || !w->wd_dir[ev->wd])
			continue;
		if (ev->len && ev->name[0])
			id = index_find(w->ix, w->wd_dir[ev->wd], ev->name);
		else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))
			id = w->wd_dir[ev->wd];
		if (!id)
			continue;           /* a name created after the scan: not shown */
		int force = (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE)) != 0;
		int i;
		for (i = 0; i < n; i++)
			if (todo[i].id == id) {
				todo[i].force |= force;
				break;
			}
		if (i == n) {
			if (n == (int)(sizeof(todo) / sizeof(todo[0]))) {
				overflow = 1;
				continue;
			}
			todo[n].id = id;
			todo[n].force = force;
			n++;
		}
	}
	if (overflow) {
		refresh_all(w);
		return;
	}
	for (int i = 0; i < n; i++)
		index_refresh(w->ix, todo[i].id, todo[i].force);
}

static void kick(void *arg)
{
	struct watch *w = arg;
	uint64_t one = 1;

	if (write(w->stopfd, &one, sizeof(one)) != sizeof(one)) {
		/* an eventfd write fails only on overflow: it is readable then */
	}
}

static void *watch_main(void *arg)
{
	struct watch *w = arg;
	char buf[64 * 1024] __attribute__((aligned(8)));

	while (worker_running(&w->w)) {
		struct pollfd pf[2] = { { w->ifd, POLLIN, 0 }, { w->stopfd, POLLIN, 0 } };
		ssize_t len;

		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents)
			break;
		len = read(w->ifd, buf, sizeof(buf));
		if (len <= 0)
			continue;
		handle_batch(w, buf, len);
	}
	return NULL;
}

int watch_start(struct index *ix, const char *source, struct watch **out)
{
	struct watch *w = calloc(1, sizeof(*w));
	int err = 0;

	if (!w)
		return -ENOMEM;
	w->ix = ix;
	w->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	w->stopfd = eventfd(0, EFD_CLOEXEC);
	if (w->ifd < 0 || w->stopfd < 0) {
		err = -errno;
		goto fail;
	}
	for (uint32_t id = INDEX_ROOT; id <= index_count(ix); id++) {
		struct index_attr a;

		if (index_get(ix, id, &a) < 0 || !S_ISDIR(a.mode))
			continue;
		err = add_dir(w, source, id);
		if (err == -ENOSPC) {
			log_warn("inotify watch limit reached after %u directories; changes in the "
				 "others are seen only through the entry timeout "
				 "(raise fs.inotify.max_user_watches)", w->count);
			err = 0;
			break;
		}
		if (err == -ENOMEM)
			goto fail;
		err = 0;            /* a directory that vanished meanwhile */
	}
	if ((err = worker_init(&w->w)) < 0)
		goto fail;
	worker_set_kick(&w->w, kick, w);
	if ((err = worker_start(&w->w, 1, watch_main, w)) < 0) {
		worker_destroy(&w->w);
		goto fail;
	}
	*out = w;
	return 0;
fail:
	if (w->ifd >= 0)
		close(w->ifd);
	if (w->stopfd >= 0)
		close(w->stopfd);
	free(w->wd_dir);
	free(w);
	return err;
}

void watch_stop(struct watch *w)
{
	if (!w)
		return;
	worker_stop(&w->w);
	worker_destroy(&w->w);
	close(w->ifd);
	close(w->stopfd);
	free(w->wd_dir);
	free(w);
}

unsigned watch_count(const struct watch *w)
{
	return w ? w->count : 0;
}
