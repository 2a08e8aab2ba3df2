/* scrub.c - see scrub.h.
 *
 * The thread wakes TICKS_PER_S times a second and hashes rate/TICKS_PER_S
 * bytes of ready items (cache_scrub keeps the cursor). Between ticks it
 * sleeps in poll() on the command pipe, so commands and stop requests are
 * seen at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "scrub.h"

#define TICKS_PER_S 10

struct scrub {
	struct cache *cache;
	uint64_t rate;
	scrub_cmd_fn fn;
	void *arg;
	int pipefd[2];              /* [0] read by the thread, [1] written by anyone */
	pthread_t thread;
};

static void *scrub_main(void *arg)
{
	struct scrub *s = arg;

	for (;;) {
		struct pollfd p = { .fd = s->pipefd[0], .events = POLLIN };
		int n = poll(&p, 1, 1000 / TICKS_PER_S);

		if (n > 0) {
			char buf[64];
			ssize_t got = read(s->pipefd[0], buf, sizeof(buf));
			if (got == 0)
				return NULL;            /* write end closed: stop */
			for (ssize_t i = 0; i < got; i++)
				if (s->fn)
					s->fn(s->arg, buf[i]);
			continue;
		}
		if (n < 0 && errno != EINTR)
			return NULL;
		if (s->rate && s->cache)
			cache_scrub(s->cache, s->rate / TICKS_PER_S ? s->rate / TICKS_PER_S : 1);
	}
}

int scrub_start(struct cache *c, uint64_t rate, scrub_cmd_fn fn, void *arg, struct scrub **out)
{
	struct scrub *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	*s = (struct scrub){ .cache = c, .rate = rate, .fn = fn, .arg = arg };
	if (pipe2(s->pipefd, O_CLOEXEC) < 0) {
		err = -errno;
		free(s);
		return err;
	}
	fcntl(s->pipefd[1], F_SETFL, O_NONBLOCK);   /* a signal handler must never block */
	err = -pthread_create(&s->thread, NULL, scrub_main, s);
	if (err) {
		close(s->pipefd[0]);
		close(s->pipefd[1]);
		free(s);
		return err;
	}
	*out = s;
	return 0;
}

void scrub_stop(struct scrub *s)
{
	if (!s)
		return;
	close(s->pipefd[1]);
	pthread_join(s->thread, NULL);
	close(s->pipefd[0]);
	free(s);
}

int scrub_command_fd(const struct scrub *s)
{
	return s ? s->pipefd[1] : -1;
}
