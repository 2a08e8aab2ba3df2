/* Unit tests of the io_uring helper: many reads through a ring whose
 * bound is smaller than what is submitted (exact bytes, and no more in
 * flight than the bound), a read across end of file, a short read carried
 * on to the end (a pipe: regular files give none on demand), MIN,
 * errors, a read asked again by its callback, and a free that waits. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "util/uring.h"

#define FILE_LEN (1u << 20)
#define PIECE 4096u

static char *dir, path[4200];
static unsigned char *data;

static void setup(void)
{
	dir = th_tmpdir();
	snprintf(path, sizeof(path), "%s/f", dir);
	data = malloc(FILE_LEN);
	for (unsigned i = 0; i < FILE_LEN; i++)
		data[i] = (unsigned char)(i * 7 + i / 4093);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_eq(write(fd, data, FILE_LEN), (ssize_t)FILE_LEN);
	close(fd);
}

static void teardown(void)
{
	th_rmrf(dir);
	free(dir);
	free(data);
}

TestSuite(uring, .init = setup, .fini = teardown, .timeout = 20);

static void nap(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	nanosleep(&ts, NULL);
}

/* A read the tests wait for. */
struct rd {
	struct uring_req u;
	pthread_mutex_t m;
	pthread_cond_t c;
	int calls;                  /* DONE called */
	ssize_t res;
	int again;                  /* DONE asks for one more read, with FIX_FD */
	int fix_fd;
};

static int rd_done(struct uring_req *u, ssize_t res)
{
	struct rd *r = (struct rd *)u;

	pthread_mutex_lock(&r->m);
	r->calls++;
	r->res = res;
	int again = r->again;
	if (again) {
		r->again = 0;
		u->fd = r->fix_fd;
	}
	pthread_cond_broadcast(&r->c);
	pthread_mutex_unlock(&r->m);
	return again;
}

static void rd_init(struct rd *r, int fd, void *buf, size_t len, off_t off)
{
	memset(r, 0, sizeof(*r));
	r->u = (struct uring_req){ .fd = fd, .buf = buf, .len = len, .off = off, .done = rd_done };
	pthread_mutex_init(&r->m, NULL);
	pthread_cond_init(&r->c, NULL);
}

/* Waits for R's CALLS-th DONE; its result. */
static ssize_t rd_wait(struct rd *r, int calls)
{
	pthread_mutex_lock(&r->m);
	while (r->calls < calls)
		pthread_cond_wait(&r->c, &r->m);
	ssize_t res = r->res;
	pthread_mutex_unlock(&r->m);
	return res;
}

static void rd_destroy(struct rd *r)
{
	pthread_mutex_destroy(&r->m);
	pthread_cond_destroy(&r->c);
}

/* ---- many reads, a small bound ---- */

#define DEPTH 4
#define NREADS 64

struct many {
	struct uring *u;
	int fd;
	struct slot {
		struct uring_req u;
		struct many *m;
		unsigned i;
		unsigned char buf[PIECE + 100];
		ssize_t res;
	} s[NREADS];
	pthread_mutex_t m;
	pthread_cond_t c;
	int gate;                   /* m: the first DONE waits until it is open */
	unsigned submitted;         /* atomic: uring_read() calls returned */
	unsigned done;              /* m */
};

static int many_done(struct uring_req *u, ssize_t res)
{
	struct slot *s = (struct slot *)u;
	struct many *m = s->m;

	s->res = res;
	pthread_mutex_lock(&m->m);
	while (!m->gate)            /* hold the completion thread, and its room */
		pthread_cond_wait(&m->c, &m->m);
	m->done++;
	pthread_cond_broadcast(&m->c);
	pthread_mutex_unlock(&m->m);
	return 0;
}

/* Reads pieces of the file at odd offsets, one after another. */
static void *submitter(void *arg)
{
	struct many *m = arg;

	for (unsigned i = 0; i < NREADS; i++) {
		struct slot *s = &m->s[i];
		s->m = m;
		s->i = i;
		off_t off = (off_t)i * (FILE_LEN / NREADS) + i * 13;
		s->u = (struct uring_req){ .fd = m->fd, .buf = s->buf, .len = PIECE + i, .off = off,
					   .done = many_done };
		uring_read(m->u, &s->u);
		__atomic_add_fetch(&m->submitted, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

Test(uring, more_reads_than_the_bound_wait_for_room_and_read_exact_bytes)
{
	struct many *m = calloc(1, sizeof(*m));
	pthread_t th;

	pthread_mutex_init(&m->m, NULL);
	pthread_cond_init(&m->c, NULL);
	m->fd = open(path, O_RDONLY);
	cr_assert_geq(m->fd, 0);
	cr_assert_eq(uring_new(DEPTH, &m->u), 0);
	pthread_create(&th, NULL, submitter, m);
	/* The first DONE holds the completion thread: DEPTH reads get room,
	 * the next submitter waits for it. */
	nap(0.3);
	unsigned stuck = __atomic_load_n(&m->submitted, __ATOMIC_ACQUIRE);
	cr_expect_eq(stuck, DEPTH, "%u reads submitted with %u of room and none done", stuck, DEPTH);
	pthread_mutex_lock(&m->m);
	m->gate = 1;
	pthread_cond_broadcast(&m->c);
	while (m->done < NREADS)
		pthread_cond_wait(&m->c, &m->m);
	pthread_mutex_unlock(&m->m);
	pthread_join(th, NULL);
	for (unsigned i = 0; i < NREADS; i++) {
		struct slot *s = &m->s[i];
		cr_expect_eq(s->res, (ssize_t)(PIECE + i), "read %u: %zd", i, s->res);
		cr_expect(!memcmp(s->buf, data + s->u.off, PIECE + i), "read %u: wrong bytes", i);
	}
	uring_free(m->u);
	close(m->fd);
	pthread_mutex_destroy(&m->m);
	pthread_cond_destroy(&m->c);
	free(m);
}

Test(uring, a_read_across_end_of_file_returns_what_is_there)
{
	struct uring *u;
	struct rd r;
	unsigned char buf[3 * PIECE];
	int fd = open(path, O_RDONLY);

	cr_assert_eq(uring_new(8, &u), 0);
	rd_init(&r, fd, buf, sizeof(buf), FILE_LEN - 1000);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), 1000);
	cr_expect(!memcmp(buf, data + FILE_LEN - 1000, 1000));
	/* At the end: nothing, not an error. */
	rd_destroy(&r);
	rd_init(&r, fd, buf, sizeof(buf), FILE_LEN);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), 0);
	cr_expect_eq(r.calls, 1);
	uring_free(u);
	rd_destroy(&r);
	close(fd);
}

/* A pipe returns what it holds: the first read of 300 bytes gets 100,
 * and the rest comes when it is written. */
Test(uring, a_short_read_is_carried_on_to_the_end)
{
	struct uring *u;
	struct rd r;
	unsigned char buf[300];
	int p[2];

	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(uring_new(8, &u), 0);
	cr_assert_eq(write(p[1], data, 100), 100);
	rd_init(&r, p[0], buf, sizeof(buf), 0);
	uring_read(u, &r.u);
	nap(0.1);
	cr_expect_eq(r.calls, 0, "done after %zd bytes of 300", r.res);
	cr_assert_eq(write(p[1], data + 100, 200), 200);
	cr_expect_eq(rd_wait(&r, 1), 300);
	cr_expect(!memcmp(buf, data, 300));
	cr_expect_eq(r.u.got, 300);
	uring_free(u);
	rd_destroy(&r);
	close(p[0]);
	close(p[1]);
}

Test(uring, a_read_is_done_once_min_bytes_are_in)
{
	struct uring *u;
	struct rd r;
	unsigned char buf[300];
	int p[2];

	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(uring_new(8, &u), 0);
	cr_assert_eq(write(p[1], data, 100), 100);
	rd_init(&r, p[0], buf, sizeof(buf), 0);
	r.u.min = 100;              /* the tier's O_DIRECT read: the item, not its padding */
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), 100);
	cr_expect(!memcmp(buf, data, 100));
	uring_free(u);
	rd_destroy(&r);
	close(p[0]);
	close(p[1]);
}

Test(uring, errors_come_back_as_negative_errno)
{
	struct uring *u;
	struct rd r;
	unsigned char buf[64];
	int fd = open(path, O_RDONLY);

	cr_assert_eq(uring_new(2, &u), 0);
	close(fd);                  /* a closed descriptor */
	rd_init(&r, fd, buf, sizeof(buf), 0);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), -EBADF);
	rd_destroy(&r);
	rd_init(&r, open(dir, O_RDONLY | O_DIRECTORY), buf, sizeof(buf), 0);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), -EISDIR);
	close(r.u.fd);
	rd_destroy(&r);
	int wr = open(path, O_WRONLY);
	rd_init(&r, wr, buf, sizeof(buf), 0);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), -EBADF);
	close(wr);
	uring_free(u);
	rd_destroy(&r);
}

/* Storage reads again without RWF_DONTCACHE where it is refused: DONE
 * changes the request and asks for one more read. */
Test(uring, done_may_ask_to_read_again_as_it_now_says)
{
	struct uring *u;
	struct rd r;
	unsigned char buf[PIECE];
	int fd = open(path, O_RDONLY);

	cr_assert_eq(uring_new(1, &u), 0);
	rd_init(&r, -1, buf, sizeof(buf), PIECE);
	r.again = 1;
	r.fix_fd = fd;
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 2), (ssize_t)PIECE);
	cr_expect_eq(r.calls, 2);
	cr_expect(!memcmp(buf, data + PIECE, PIECE));
	/* The read kept its room: with a depth of 1, another read goes through. */
	rd_destroy(&r);
	rd_init(&r, fd, buf, 10, 0);
	uring_read(u, &r.u);
	cr_expect_eq(rd_wait(&r, 1), 10);
	uring_free(u);
	rd_destroy(&r);
	close(fd);
}

struct freer {
	struct uring *u;
	int freed;                  /* atomic */
};

static void *do_free(void *arg)
{
	struct freer *f = arg;

	uring_free(f->u);
	__atomic_store_n(&f->freed, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(uring, free_waits_for_the_reads_in_flight)
{
	struct freer f = { 0 };
	struct rd r;
	unsigned char buf[50];
	int p[2];
	pthread_t th;

	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(uring_new(4, &f.u), 0);
	rd_init(&r, p[0], buf, sizeof(buf), 0);
	uring_read(f.u, &r.u);
	pthread_create(&th, NULL, do_free, &f);
	nap(0.2);
	cr_expect_eq(__atomic_load_n(&f.freed, __ATOMIC_ACQUIRE), 0, "freed with a read in flight");
	cr_assert_eq(write(p[1], data, 50), 50);
	pthread_join(th, NULL);
	cr_expect_eq(r.calls, 1);
	cr_expect_eq(r.res, 50);
	rd_destroy(&r);
	close(p[0]);
	close(p[1]);
}
