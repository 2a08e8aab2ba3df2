/* maint.c - see maint.h.
 *
 * The thread wakes TICKS_PER_S times a second. Each tick it first
 * prefaults up to min(used + window, limit + the budget charged to large
 * files' backings, which the arena skips) (by default all of it on the
 * first tick), then hashes rate/TICKS_PER_S bytes of ready items
 * (cache_scrub keeps the cursor), then frees retired backings
 * (cache_reap). Between ticks it sleeps in poll() on the command pipe, so
 * commands and stop requests are seen at once.
 *
 * DESIGN: the thread is a struct worker (util/worker.h) that never sleeps
 * in worker_wait(): its commands come from a signal handler, which may
 * write to a pipe but not signal a condvar (pthread_cond_signal is not
 * async-signal-safe). So it sleeps in poll() on the pipe, and the
 * worker's stop kicks it by closing the pipe's write end (EOF).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/maint.h"
#include "util/log.h"
#include "util/worker.h"

#define TICKS_PER_S 10

struct maint {
	struct cache *cache;
	struct maint_opts o;
	int pipefd[2];              /* [0] read by the thread, [1] written by anyone until the stop */
	struct worker w;
};

static void tick(struct maint *m)
{
	if (m->o.prefault_window) {
		struct cache_stats s;
		uint64_t upto = __atomic_load_n(&m->o.prefault_limit, __ATOMIC_RELAXED);

		cache_get_stats(m->cache, &s);
		upto += s.backing_space;
		if (s.used < upto && upto - s.used > m->o.prefault_window)
			upto = s.used + m->o.prefault_window;
		int64_t r = cache_prefault(m->cache, upto);
		if (r < 0) {
			log_info("cache prefault off: %s (loads fault the arena in themselves)",
				 strerror((int)-r));
			m->o.prefault_window = 0;
		}
	}
	if (m->o.scrub_rate)
		cache_scrub(m->cache, m->o.scrub_rate / TICKS_PER_S ? m->o.scrub_rate / TICKS_PER_S : 1);
	cache_reap(m->cache);
}

static void *maint_main(void *arg)
{
	struct maint *m = arg;

	tick(m);                    /* the first window is resident right after the mount */
	while (worker_running(&m->w)) {
		struct pollfd p = { .fd = m->pipefd[0], .events = POLLIN };
		int n = poll(&p, 1, 1000 / TICKS_PER_S);

		if (n > 0) {
			char buf[64];
			ssize_t got = read(m->pipefd[0], buf, sizeof(buf));
			if (got == 0)
				return NULL;            /* write end closed: stop */
			for (ssize_t i = 0; i < got; i++)
				if (m->o.cmd)
					m->o.cmd(m->o.arg, buf[i]);
			continue;
		}
		if (n < 0 && errno != EINTR)
			return NULL;
		tick(m);
	}
	return NULL;
}

/* The stop's kick: EOF on the pipe ends the thread's poll(). */
static void close_commands(void *arg)
{
	struct maint *m = arg;

	close(m->pipefd[1]);
}

int maint_start(struct cache *c, const struct maint_opts *o, struct maint **out)
{
	struct maint *m = calloc(1, sizeof(*m));
	int err;

	if (!m)
		return -ENOMEM;
	m->cache = c;
	m->o = *o;
	if (pipe2(m->pipefd, O_CLOEXEC) < 0) {
		err = -errno;
		goto out_free;
	}
	fcntl(m->pipefd[1], F_SETFL, O_NONBLOCK);   /* a signal handler must never block */
	if ((err = worker_init(&m->w)) < 0)
		goto out_close;
	worker_set_kick(&m->w, close_commands, m);
	if ((err = worker_start(&m->w, 1, maint_main, m)) < 0)
		goto out_destroy;
	*out = m;
	return 0;
out_destroy:
	worker_destroy(&m->w);
out_close:
	close(m->pipefd[0]);
	close(m->pipefd[1]);
out_free:
	free(m);
	return err;
}

void maint_stop(struct maint *m)
{
	if (!m)
		return;
	worker_stop(&m->w);         /* its kick closes the write end */
	worker_destroy(&m->w);
	close(m->pipefd[0]);
	free(m);
}

void maint_set_prefault_limit(struct maint *m, uint64_t limit)
{
	if (m)
		__atomic_store_n(&m->o.prefault_limit, limit, __ATOMIC_RELAXED);
}

int maint_command_fd(const struct maint *m)
{
	return m ? m->pipefd[1] : -1;
}
