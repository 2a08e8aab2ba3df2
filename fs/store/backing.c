/* backing.c - per-file memfds for the RAM cache; see backing.h.
 *
 * DESIGN
 * - A memfd per file, not a file in the state directory: nothing to name,
 *   trust or sweep, and the kernel frees it when the last reference goes
 *   (ours, a passthrough open's, a reader's mapping). The price: a restart
 *   keeps none of them (docs/cache.md says which bytes a restart keeps).
 * - Sized with ftruncate, no pages until a load writes them (a load faults
 *   its pages in, as a load into the arena did before the prefaulter);
 *   F_SEAL_GROW and F_SEAL_SHRINK: nobody changes the size the kernel
 *   serves up to.
 * - The kernel gets a read-only descriptor (reopened through /proc/self/fd),
 *   so a passthrough file can never write into the cache's bytes.
 * - One mutex for the registry: it is taken per admission of a large
 *   file's item, per OPEN of a large file and by the cache's background
 *   work, never on a hit (items keep their bytes' address).
 * - How many at most: each backing holds a descriptor and a mapping, so
 *   half the open-file limit and half the mapping limit (the rest is the
 *   daemon's); past that, admissions go to the arena (backing_claim says
 *   -EMFILE).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "store/backing.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif

#define PAGE 4096ull

enum { B_LIVE = 1, B_DYING, B_RETIRED, B_REAPING, B_FREED };

struct backing {
	uint32_t id;
	struct index_version v;
	uint64_t off, span;         /* the charged range */
	uint32_t chunks;            /* items it holds when whole */
	uint32_t ready;             /* atomic: of them ready */
	int state;                  /* set lock; read without it only as a hint */
	int fd;                     /* -1 once freed */
	char *map;                  /* NULL once freed */
	struct backing *hnext;      /* chain of live and dying ones by id, set lock */
	struct backing *older;      /* every charged one, newest first, set lock */
};

struct backing_set {
	pthread_mutex_t lock;
	struct backing **heads;     /* by id, set lock */
	uint64_t mask;
	struct backing *newest;     /* set lock */
	uint64_t max_files;
	uint64_t held;              /* set lock: backings with memory (live, dying, retired) */
	unsigned retired_n;         /* atomic: RETIRED, memory not freed yet */
	uint64_t space;             /* set lock: charged bytes */
	uint64_t live, live_bytes;  /* set lock: live (or dying) backings, their files' bytes */
	uint64_t made, retired, failed;     /* atomic counters */
};

static uint64_t max_from_limits(void)
{
	struct rlimit r;
	uint64_t files = 1024, maps = 65530;
	FILE *f;

	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
		files = r.rlim_cur;
	else if (r.rlim_cur == RLIM_INFINITY)
		files = 1u << 20;
	if ((f = fopen("/proc/sys/vm/max_map_count", "re"))) {
		unsigned long long m;
		if (fscanf(f, "%llu", &m) == 1)
			maps = m;
		fclose(f);
	}
	files /= 2;
	maps /= 2;
	return files < maps ? files : maps;
}

int backing_set_new(uint64_t max_files, struct backing_set **out)
{
	struct backing_set *s = calloc(1, sizeof(*s));
	uint64_t n = 64;

	if (!s)
		return -ENOMEM;
	s->max_files = max_files ? max_files : max_from_limits();
	while (n < s->max_files && n < (1u << 20))
		n <<= 1;
	s->heads = calloc(n, sizeof(*s->heads));
	if (!s->heads) {
		free(s);
		return -ENOMEM;
	}
	s->mask = n - 1;
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

static void drop_memory(struct backing *b)
{
	if (b->map)
		munmap(b->map, b->v.size ? b->v.size : 1);
	if (b->fd >= 0)
		close(b->fd);
	b->map = NULL;
	b->fd = -1;
}

void backing_set_free(struct backing_set *s)
{
	if (!s)
		return;
	for (struct backing *b = s->newest, *next; b; b = next) {
		next = b->older;
		drop_memory(b);
		free(b);
	}
	pthread_mutex_destroy(&s->lock);
	free(s->heads);
	free(s);
}

static struct backing **head_of(struct backing_set *s, uint32_t id)
{
	return &s->heads[(id * 0x9e3779b1u) & s->mask];
}

static void unhash(struct backing_set *s, struct backing *b)
{
	for (struct backing **p = head_of(s, b->id); *p; p = &(*p)->hnext)
		if (*p == b) {
			*p = b->hnext;
			b->hnext = NULL;
			return;
		}
}

static struct backing *find_live(struct backing_set *s, uint32_t id)
{
	for (struct backing *b = *head_of(s, id); b; b = b->hnext)
		if (b->id == id && b->state == B_LIVE)
			return b;
	return NULL;
}

/* Whether version A is older than B: the change time moves with every
 * change the index sees. */
static int older(const struct index_version *a, const struct index_version *b)
{
	return a->ctime_ns < b->ctime_ns || (a->ctime_ns == b->ctime_ns && a->mtime_ns < b->mtime_ns);
}

static void retire_locked(struct backing_set *s, struct backing *b)
{
	if (b->state != B_LIVE && b->state != B_DYING)
		return;
	unhash(s, b);
	s->live--;
	s->live_bytes -= b->v.size;
	__atomic_store_n(&b->state, B_RETIRED, __ATOMIC_RELEASE);
	__atomic_add_fetch(&s->retired_n, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->retired, 1, __ATOMIC_RELAXED);
}

/* A memfd of SIZE bytes, sealed at that size, mapped: 0 or -errno. */
static int make_memfd(uint32_t id, uint64_t size, int *fd, char **map)
{
	char name[32];
	int err;

	snprintf(name, sizeof(name), "epochfs-%u", id);
	*fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0)
		return -errno;
	if (ftruncate(*fd, (off_t)size) < 0)
		goto fail;
	fcntl(*fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK);       /* a hint: no seals, no harm */
	*map = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (*map == MAP_FAILED)
		goto fail;
	return 0;
fail:
	err = -errno;
	close(*fd);
	*fd = -1;
	*map = NULL;
	return err;
}

int backing_claim(struct backing_set *s, uint32_t id, const struct index_version *v, uint32_t chunk,
		  backing_reserve_fn reserve, void *arg, struct backing **out, struct backing_place *p)
{
	struct backing *b;
	int err;

	pthread_mutex_lock(&s->lock);
	b = find_live(s, id);
	if (b && index_version_eq(&b->v, v))
		goto found;
	if (b && older(v, &b->v)) {
		pthread_mutex_unlock(&s->lock);
		return -ESTALE;
	}
	if (b)
		retire_locked(s, b);
	if (s->held >= s->max_files) {
		pthread_mutex_unlock(&s->lock);
		return -EMFILE;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		pthread_mutex_unlock(&s->lock);
		return -ENOMEM;
	}
	b->id = id;
	b->v = *v;
	b->span = (v->size + PAGE - 1) & ~(PAGE - 1);
	b->chunks = (uint32_t)((v->size + chunk - 1) / chunk);
	if ((err = make_memfd(id, v->size, &b->fd, &b->map)) < 0) {
		__atomic_add_fetch(&s->failed, 1, __ATOMIC_RELAXED);
		goto fail;
	}
	if ((err = reserve(arg, b->span, &b->off)) < 0)
		goto fail;
	__atomic_store_n(&b->state, B_LIVE, __ATOMIC_RELEASE);
	b->hnext = *head_of(s, id);
	*head_of(s, id) = b;
	b->older = s->newest;
	s->newest = b;
	s->held++;
	s->space += b->span;
	s->live++;
	s->live_bytes += v->size;
	__atomic_add_fetch(&s->made, 1, __ATOMIC_RELAXED);
	*out = b;
	*p = (struct backing_place){ .map = b->map, .off = b->off, .span = b->span };
	pthread_mutex_unlock(&s->lock);
	return 1;
found:
	*out = b;
	*p = (struct backing_place){ .map = b->map, .off = b->off, .span = b->span };
	pthread_mutex_unlock(&s->lock);
	return 0;
fail:
	pthread_mutex_unlock(&s->lock);
	drop_memory(b);
	free(b);
	return err;
}

int backing_live(struct backing_set *s, uint32_t id, const struct index_version *v)
{
	pthread_mutex_lock(&s->lock);
	struct backing *b = find_live(s, id);
	int live = b && index_version_eq(&b->v, v);
	pthread_mutex_unlock(&s->lock);
	return live;
}

void backing_count(struct backing *b, int delta)
{
	if (delta > 0)
		__atomic_add_fetch(&b->ready, 1, __ATOMIC_RELAXED);
	else
		__atomic_sub_fetch(&b->ready, 1, __ATOMIC_RELAXED);
}

void backing_retire(struct backing_set *s, struct backing *b)
{
	pthread_mutex_lock(&s->lock);
	retire_locked(s, b);
	pthread_mutex_unlock(&s->lock);
}

int backing_retired(struct backing *b)
{
	int st = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);

	return st == B_RETIRED || st == B_REAPING || st == B_FREED;
}

int backing_dying(struct backing *b)
{
	return __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == B_DYING;
}

int backing_open_fd(struct backing_set *s, uint32_t id, const struct index_version *v)
{
	char path[64];
	int fd = -ENOENT;

	pthread_mutex_lock(&s->lock);
	struct backing *b = find_live(s, id);
	if (b && index_version_eq(&b->v, v) && __atomic_load_n(&b->ready, __ATOMIC_ACQUIRE) == b->chunks) {
		/* Read-only for the kernel; the same pages. */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", b->fd);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)      /* no /proc: the kernel opens it read-only anyway */
			fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			fd = -errno;
	}
	pthread_mutex_unlock(&s->lock);
	return fd;
}

unsigned backing_mark_past(struct backing_set *s, uint64_t cut, uint64_t *low)
{
	unsigned n = 0;

	pthread_mutex_lock(&s->lock);
	for (struct backing *b = s->newest; b && b->off + b->span > cut; b = b->older) {
		if (b->state == B_LIVE) {
			__atomic_store_n(&b->state, B_DYING, __ATOMIC_RELEASE);
			n++;
		}
		if (b->off < *low)
			*low = b->off;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

void backing_unmark(struct backing_set *s)
{
	pthread_mutex_lock(&s->lock);
	for (struct backing *b = s->newest; b; b = b->older)
		if (b->state == B_DYING)
			__atomic_store_n(&b->state, B_LIVE, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->lock);
}

uint64_t backing_free_dying(struct backing_set *s, uint64_t low)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&s->lock);
	while (s->newest && s->newest->off + s->newest->span > low) {
		struct backing *b = s->newest;
		s->newest = b->older;
		if (b->state == B_DYING || b->state == B_LIVE) {
			unhash(s, b);
			s->live--;
			s->live_bytes -= b->v.size;
		}
		if (b->state == B_RETIRED || b->state == B_REAPING)
			__atomic_sub_fetch(&s->retired_n, 1, __ATOMIC_RELAXED);
		if (b->state != B_FREED) {
			s->held--;
			freed += b->v.size;
		}
		s->space -= b->span;
		drop_memory(b);
		free(b);
	}
	pthread_mutex_unlock(&s->lock);
	return freed;
}

unsigned backing_reap_begin(struct backing_set *s)
{
	unsigned n = 0;

	if (!__atomic_load_n(&s->retired_n, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&s->lock);
	for (struct backing *b = s->newest; b; b = b->older)
		if (b->state == B_RETIRED) {
			__atomic_store_n(&b->state, B_REAPING, __ATOMIC_RELEASE);
			n++;
		}
	pthread_mutex_unlock(&s->lock);
	return n;
}

int backing_reaping(struct backing *b)
{
	return __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == B_REAPING;
}

unsigned backing_reap_end(struct backing_set *s, int free)
{
	unsigned n = 0;

	pthread_mutex_lock(&s->lock);
	for (struct backing *b = s->newest; b; b = b->older) {
		if (b->state != B_REAPING)
			continue;
		if (!free) {
			__atomic_store_n(&b->state, B_RETIRED, __ATOMIC_RELEASE);
			continue;
		}
		drop_memory(b);
		__atomic_store_n(&b->state, B_FREED, __ATOMIC_RELEASE);
		__atomic_sub_fetch(&s->retired_n, 1, __ATOMIC_RELAXED);
		s->held--;
		n++;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

int backing_range(struct backing_set *s, uint64_t from, uint64_t to, uint64_t *start, uint64_t *end)
{
	int found = 0;

	pthread_mutex_lock(&s->lock);
	/* Newest first, so the lowest one ending past FROM is the last seen. */
	for (struct backing *b = s->newest; b && b->off + b->span > from; b = b->older)
		if (b->off < to) {
			*start = b->off;
			*end = b->off + b->span;
			found = 1;
		}
	pthread_mutex_unlock(&s->lock);
	return found;
}

void backing_get_stats(struct backing_set *s, struct backing_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&s->lock);
	st->files = s->live;
	st->bytes = s->live_bytes;
	st->space = s->space;
	pthread_mutex_unlock(&s->lock);
	st->made = __atomic_load_n(&s->made, __ATOMIC_RELAXED);
	st->retired = __atomic_load_n(&s->retired, __ATOMIC_RELAXED);
	st->failed = __atomic_load_n(&s->failed, __ATOMIC_RELAXED);
}

uint64_t backing_whole(struct backing_set *s)
{
	uint64_t n = 0;

	pthread_mutex_lock(&s->lock);
	for (struct backing *b = s->newest; b; b = b->older)
		n += b->state == B_LIVE && __atomic_load_n(&b->ready, __ATOMIC_RELAXED) == b->chunks;
	pthread_mutex_unlock(&s->lock);
	return n;
}
