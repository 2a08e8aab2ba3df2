/* libFuzzer harness for the cache state a daemon adopts at start
 * (fs/store/persist.c): the table of item and cut records that the RAM
 * cache and the SSD tier leave in their state directories. The input
 * drives a first daemon's life through persist's own writer (records of
 * items with any offset, length, chunk, version and checksum, cuts, an
 * arena of chosen bytes), then flips chosen bytes of the table it left, as
 * a torn write, a bad disk or a hand would, and lets a second daemon adopt
 * it, compacting (the RAM cache) or not (the tier), at the same or another
 * capacity. Beyond "no crash, no leak": every item handed to the store lies
 * inside the arena, items never overlap, and what is adopted is what the
 * resolver says exists at that version.
 * The state lives on tmpfs (/dev/shm), as the daemon's must; the daemon's
 * own one-line messages stay on (they are rate-limited per call site). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/persist.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NFILES 8
#define CHUNK 4096u
static char dir[128], src[128];
static struct index_version vers[NFILES + 1];

/* Reads the input front to back; zeros once it runs out. */
struct in {
	const uint8_t *p;
	size_t n;
};

static uint64_t take(struct in *in, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++) {
		v |= (uint64_t)(in->n ? *in->p : 0) << (8 * i);
		if (in->n) {
			in->p++;
			in->n--;
		}
	}
	return v;
}

static int resolve(void *arg, const char *rel, size_t len, uint32_t *id, struct index_version *v)
{
	(void)arg;
	if (len < 2 || len > 3 || rel[0] != 'f')
		return -ENOENT;
	unsigned n = (unsigned)(rel[1] - '0');
	if (len == 3 || n < 1 || n > NFILES)
		return -ENOENT;
	*id = n;
	*v = vers[n];
	return 0;
}

static int path_of(void *arg, uint32_t id, char *buf, size_t len)
{
	(void)arg;
	return snprintf(buf, len, "f%u", id);
}

struct seen {
	uint64_t cap;
	uint64_t start[256], end[256];
	unsigned n;
};

/* The store's side of adoption: what persist hands over must be sane. */
static int adopt(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v, uint64_t off, size_t len,
		 uint64_t xxh)
{
	struct seen *s = arg;

	(void)chunk, (void)xxh;
	if (id < 1 || id > NFILES || v->ino != vers[id].ino || v->size != vers[id].size)
		__builtin_trap();               /* not what the resolver said */
	if (!len || off % 64 || off + len < off)
		__builtin_trap();
	if (s->n < 256) {
		s->start[s->n] = off;
		s->end[s->n] = off + len;
		s->n++;
	}
	return (xxh & 7) == 0 ? -EBADMSG : 0;   /* some fail their check, as corrupt bytes would */
}

/* The state and the source go with the process (libFuzzer ends by exit()). */
static void cleanup(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, src);
	if (system(cmd) != 0) {
		/* nothing more to do at exit */
	}
}

static void setup_once(void)
{
	static int done;

	if (done)
		return;
	done = 1;
	log_init("fuzz_state", 0);
	snprintf(dir, sizeof(dir), "/dev/shm/epochfs-fuzz-state.%d", (int)getpid());
	snprintf(src, sizeof(src), "/tmp/epochfs-fuzz-src.%d", (int)getpid());
	mkdir(src, 0700);
	atexit(cleanup);
	for (unsigned i = 1; i <= NFILES; i++)
		vers[i] = (struct index_version){ .ino = 10 + i, .size = 1000 * i, .mtime_ns = 7, .ctime_ns = 7 };
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct persist *p;
	struct persist_opts po = { .dir = dir, .source = src, .mountpoint = "/nowhere", .chunk = CHUNK,
				   .tmpfs = 1 };
	char err[800], cmd[300];
	uint64_t used = 0;
	struct seen s = { 0 };

	setup_once();
	snprintf(cmd, sizeof(cmd), "%s/table", dir);
	po.capacity = 4096 * (1 + take(&in, 1) % 64);
	if (persist_open(&po, &p, err, sizeof(err)) < 0)
		return 0;
	persist_adopt_items(p, adopt, &s, resolve, path_of, NULL, 1, &used);
	/* The first daemon: records and cuts as the input says. */
	unsigned nrec = (unsigned)take(&in, 1) % 48;
	for (unsigned i = 0; i < nrec; i++) {
		unsigned kind = (unsigned)take(&in, 1);
		if (kind % 9 == 0) {
			persist_record_cut(p, take(&in, 3));
			continue;
		}
		uint32_t id = 1 + (uint32_t)(take(&in, 1) % NFILES);
		struct index_version v = vers[id];
		if (kind & 0x80)
			v.ctime_ns++;               /* a record of an older version */
		uint64_t off = take(&in, 3) & ~(uint64_t)((kind & 0x40) ? 0 : 63);
		size_t len = (size_t)take(&in, 2);
		uint32_t chunk = (uint32_t)take(&in, 1);
		if (kind & 0x20) {                  /* a plausible record: the file's one piece */
			len = (size_t)v.size;
			chunk = 0;
			off %= po.capacity;
		}
		persist_record(p, id, chunk, &v, off, len, take(&in, 1));
	}
	/* Its arena: a few bytes written where the input says. */
	int afd = persist_arena_fd(p);
	for (unsigned i = (unsigned)take(&in, 1) % 8; i > 0; i--) {
		uint8_t b = (uint8_t)take(&in, 1);
		if (pwrite(afd, &b, 1, (off_t)(take(&in, 3) % po.capacity)) < 0)
			break;
	}
	persist_close(p);
	/* What the disk, a crash or a hand did to its table. */
	int tfd = open(cmd, O_RDWR);
	if (tfd >= 0) {
		struct stat st;
		if (fstat(tfd, &st) == 0 && st.st_size > 0) {
			unsigned flips = (unsigned)take(&in, 1) % 6;
			for (unsigned i = 0; i < flips; i++) {
				off_t at = (off_t)(take(&in, 2) % (uint64_t)st.st_size);
				uint8_t b;
				if (pread(tfd, &b, 1, at) == 1) {
					b ^= (uint8_t)take(&in, 1);
					if (pwrite(tfd, &b, 1, at) != 1)
						break;
				}
			}
			uint64_t cut = take(&in, 1);
			if (cut & 1)
				ftruncate(tfd, (off_t)(cut % (uint64_t)st.st_size));
		}
		close(tfd);
	}
	/* The second daemon: compacting or not, at this or another capacity. */
	uint64_t mode = take(&in, 1);
	po.compact = (int)(mode & 1);
	po.keep_held = (int)((mode >> 1) & 1) && !po.compact;
	if (mode & 4)
		po.capacity = 4096 * (1 + take(&in, 1) % 64);
	if (persist_open(&po, &p, err, sizeof(err)) < 0)
		return 0;
	s.n = 0;
	s.cap = persist_capacity(p);
	persist_adopt_items(p, adopt, &s, resolve, path_of, NULL, 1 + (unsigned)((mode >> 3) & 1), &used);
	uint64_t cap = persist_capacity(p);
	for (unsigned i = 0; i < s.n; i++) {
		if (s.end[i] > cap && !po.keep_held)
			__builtin_trap();           /* outside the arena */
		for (unsigned j = 0; j < i; j++)
			if (s.start[i] < s.end[j] && s.start[j] < s.end[i])
				__builtin_trap();   /* two items share bytes */
	}
	if (used > cap)
		__builtin_trap();
	persist_remove(p);
	return 0;
}
