/* Unit tests of the cache's state directory: items recorded by one cache
 * are adopted by the next, and everything that does not check is dropped
 * and counted (changed files, corrupt bytes, torn or corrupt tables, cuts,
 * another SOURCE or chunk size), a second holder is refused, and a state
 * off tmpfs is refused. No mount: the index is a stub table of paths. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "store/cache.h"
#include "store/persist.h"
#include "util/clock.h"

#define CHUNK 16384u       /* every test item is one whole piece of its file */
#define CAP (1u << 20)

/* The stub "index": file i is "d/fI" at version VERS[i]. */
#define NFILES 16
static struct index_version vers[NFILES + 1];
static char src[256], state[256];

static int resolve(void *arg, const char *rel, size_t len, uint32_t *id, struct index_version *v)
{
	(void)arg;
	for (uint32_t i = 1; i <= NFILES; i++) {
		char p[32];
		int n = snprintf(p, sizeof(p), "d/f%u", i);
		if ((size_t)n == len && !memcmp(p, rel, len)) {
			if (!vers[i].ino)
				return -ENOENT;
			*id = i;
			*v = vers[i];
			return 0;
		}
	}
	return -ENOENT;
}

static int path_of(void *arg, uint32_t id, char *buf, size_t len)
{
	(void)arg;
	return snprintf(buf, len, "d/f%u", id);
}

static void setup(void)
{
	snprintf(src, sizeof(src), "/tmp/epochfs-ut-src.XXXXXX");
	cr_assert(mkdtemp(src));
	snprintf(state, sizeof(state), "/dev/shm/epochfs-ut-state.%d", (int)getpid());
	for (uint32_t i = 1; i <= NFILES; i++)
		vers[i] = (struct index_version){ .ino = 100 + i, .size = 1000 + i, .mtime_ns = 5, .ctime_ns = 5 };
}

static void teardown(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", src, state);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(persist, .init = setup, .fini = teardown);

struct daemon {
	struct persist *p;
	struct cache *c;
	struct persist_stats st;
};

/* A "daemon": opens the state, makes a cache on its arena, adopts. */
static int start(struct daemon *d, uint32_t chunk, const char *source)
{
	struct persist_opts po = { .dir = state, .source = source ? source : src, .mountpoint = "/nowhere",
				   .chunk = chunk, .capacity = CAP, .tmpfs = 1, .compact = 1 };
	char err[600];
	int e = persist_open(&po, &d->p, err, sizeof(err));

	if (e < 0)
		return e;
	struct cache_opts co = { .capacity = CAP, .chunk = chunk, .max_items = 1000, .arena_file = 1,
				 .arena_fd = persist_arena_fd(d->p) };
	cr_assert_eq(cache_new(&co, &d->c), 0);
	cr_assert_eq(persist_adopt(d->p, d->c, resolve, path_of, NULL, 2), 0);
	persist_get_stats(d->p, &d->st);
	return 0;
}

static void stop(struct daemon *d)
{
	cache_free(d->c);
	persist_close(d->p);
}

/* Loads file ID's chunk 0 (LEN bytes of value ID + SALT): the file is LEN
 * bytes long now, as the daemon's items are always a whole piece. */
static void load(struct cache *c, uint32_t id, size_t len, int salt)
{
	struct cache_ref ref;
	struct cache_waiter w = { 0 };

	vers[id].size = len;
	cr_assert_eq(cache_get(c, id, 0, &vers[id], len, &w, &ref), CACHE_LOAD);
	memset(ref.data, (int)(id + salt), len);
	cache_loaded(c, &ref, 1);
}

/* 1: a hit with the right bytes; 0: not there. */
static int hit(struct cache *c, uint32_t id, size_t len, int salt)
{
	struct cache_ref ref;
	enum cache_result r = cache_get_ex(c, id, 0, &vers[id], len, NULL, &ref, 0);
	int ok = 0;

	if (r == CACHE_HIT) {
		ok = 1;
		for (size_t i = 0; i < len; i++)
			if (((unsigned char *)ref.data)[i] != (unsigned char)(id + salt))
				ok = -1;
		cache_put(c, &ref);
	}
	cr_assert_neq(ok, -1, "item %u served with wrong bytes", id);
	return ok;
}

Test(persist, adopts_what_the_last_daemon_cached)
{
	struct daemon a, b;
	struct cache_stats cs;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.found, 0);
	for (uint32_t i = 1; i <= 8; i++)
		load(a.c, i, 3000 + i, 0);
	stop(&a);

	cr_assert_eq(start(&b, CHUNK, NULL), 0);
	cr_expect_eq(b.st.found, 1);
	cr_expect_eq(b.st.records, 8);
	cr_expect_eq(b.st.adopted, 8);
	cr_expect_str_empty(b.st.discarded);
	for (uint32_t i = 1; i <= 8; i++)
		cr_expect_eq(hit(b.c, i, 3000 + i, 0), 1, "item %u", i);
	cache_get_stats(b.c, &cs);
	cr_expect_eq(cs.adopted, 8);
	cr_expect_eq(cs.items, 8);
	/* New items land past the adopted ones, and are recorded too. */
	load(b.c, 9, 5000, 0);
	stop(&b);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 9);
	for (uint32_t i = 1; i <= 9; i++)
		cr_expect_eq(hit(a.c, i, i == 9 ? 5000 : 3000 + i, 0), 1, "item %u", i);
	stop(&a);
}

Test(persist, a_changed_or_vanished_file_is_never_served)
{
	struct daemon a;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 4; i++)
		load(a.c, i, 2000, 0);
	stop(&a);
	vers[2].mtime_ns = 99;          /* rewritten while no daemon ran */
	vers[2].ctime_ns = 99;
	vers[3].ino = 0;                /* deleted */
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 2);
	cr_expect_eq(a.st.dropped_changed, 2);
	cr_expect_eq(hit(a.c, 1, 2000, 0), 1);
	cr_expect_eq(hit(a.c, 2, 2000, 0), 0);
	/* The new version loads and is served with its own bytes. */
	load(a.c, 2, 2000, 7);
	cr_expect_eq(hit(a.c, 2, 2000, 7), 1);
	stop(&a);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(hit(a.c, 2, 2000, 7), 1);
	stop(&a);
}

Test(persist, corrupt_bytes_are_dropped_and_counted)
{
	struct daemon a;
	char path[400];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 3000, 0);
	load(a.c, 2, 3000, 0);
	stop(&a);
	/* Flip a byte of the second item in the arena file (it starts at 3008). */
	snprintf(path, sizeof(path), "%s/arena", state);
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	unsigned char b;
	cr_assert_eq(pread(fd, &b, 1, 3008 + 100), 1);
	b ^= 0x10;
	cr_assert_eq(pwrite(fd, &b, 1, 3008 + 100), 1);
	close(fd);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 1);
	cr_expect_eq(a.st.dropped_corrupt, 1);
	cr_expect_eq(hit(a.c, 1, 3000, 0), 1);
	cr_expect_eq(hit(a.c, 2, 3000, 0), 0);
	stop(&a);
}

static void append(const char *name, const void *buf, size_t len)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/%s", state, name);
	int fd = open(path, O_WRONLY | O_APPEND);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static off_t size_of(const char *name)
{
	char path[400];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/%s", state, name);
	cr_assert_eq(stat(path, &sb), 0);
	return sb.st_size;
}

Test(persist, a_torn_table_keeps_what_precedes_the_tear)
{
	struct daemon a;
	char path[400];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 1000, 0);
	load(a.c, 2, 1000, 0);
	load(a.c, 3, 1000, 0);
	stop(&a);
	/* Cut the last record in half, as a kill -9 inside write(2) could. */
	off_t sz = size_of("table");
	snprintf(path, sizeof(path), "%s/table", state);
	cr_assert_eq(truncate(path, sz - 20), 0);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 2);
	cr_expect_gt(a.st.torn_bytes, 0);
	cr_expect_eq(hit(a.c, 3, 1000, 0), 0);
	stop(&a);
	/* The rewritten table is whole again; garbage appended is ignored. */
	append("table", "garbage, not a record, at all........................................"
		 "................................................................", 130);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 2);
	cr_expect_eq(a.st.torn_bytes, 130);
	stop(&a);
}

Test(persist, a_corrupt_header_discards_the_state)
{
	struct daemon a;
	char path[400];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 1000, 0);
	stop(&a);
	snprintf(path, sizeof(path), "%s/table", state);
	int fd = open(path, O_RDWR);
	cr_assert_eq(pwrite(fd, "X", 1, 20), 1);
	close(fd);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.found, 1);
	cr_expect_str_not_empty(a.st.discarded);
	cr_expect_eq(a.st.adopted, 0);
	cr_expect_eq(hit(a.c, 1, 1000, 0), 0);
	stop(&a);
}

Test(persist, another_source_or_chunk_discards_the_state)
{
	struct daemon a;
	char other[300];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 1000, 0);
	stop(&a);
	cr_assert_eq(start(&a, CHUNK * 2, NULL), 0);
	cr_expect(strstr(a.st.discarded, "chunks") != NULL, "%s", a.st.discarded);
	cr_expect_eq(a.st.adopted, 0);
	load(a.c, 1, 1000, 0);
	stop(&a);
	snprintf(other, sizeof(other), "%s/other", src);
	cr_assert_eq(mkdir(other, 0700), 0);
	cr_assert_eq(start(&a, CHUNK * 2, other), 0);
	cr_expect(strstr(a.st.discarded, "SOURCE") != NULL, "%s", a.st.discarded);
	cr_expect_eq(a.st.adopted, 0);
	stop(&a);
}

Test(persist, a_cut_voids_the_items_past_it)
{
	struct daemon a;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 4; i++)
		load(a.c, i, 8192, 0);
	/* Memory pressure: the newest two items go back. */
	cr_expect_geq(cache_give_back(a.c, 2 * 8192), 2 * 8192);
	cache_set_limit(a.c, CAP);      /* the pressure passed */
	load(a.c, 5, 8192, 0);          /* where item 3 was */
	stop(&a);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 3);
	cr_expect_eq(hit(a.c, 1, 8192, 0), 1);
	cr_expect_eq(hit(a.c, 2, 8192, 0), 1);
	cr_expect_eq(hit(a.c, 3, 8192, 0), 0);
	cr_expect_eq(hit(a.c, 4, 8192, 0), 0);
	cr_expect_eq(hit(a.c, 5, 8192, 0), 1);
	stop(&a);
}

Test(persist, one_daemon_per_state)
{
	struct daemon a;
	struct persist *p2;
	struct persist_opts po = { .dir = state, .source = src, .chunk = CHUNK, .capacity = CAP, .tmpfs = 1 };
	char err[600];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(persist_open(&po, &p2, err, sizeof(err)), -EBUSY);
	cr_expect(strstr(err, "in use by another epochfs") != NULL, "%s", err);
	stop(&a);
	cr_assert_eq(persist_open(&po, &p2, err, sizeof(err)), 0);
	persist_close(p2);
}

/* umount returns before the daemon has let go of its state: a daemon
 * started right after waits for it, rather than running without a state. */
Test(persist, a_stopping_daemon_is_waited_for)
{
	char *mnt = th_tmpdir();      /* the holder's mount point: a directory, not mounted */
	struct persist_opts po = { .dir = state, .source = src, .mountpoint = mnt, .chunk = CHUNK,
				   .capacity = CAP, .tmpfs = 1 };
	struct persist *p;
	char err[600];
	int fds[2];

	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct persist *held;
		if (persist_open(&po, &held, err, sizeof(err)) < 0)
			_exit(1);
		if (write(fds[1], "x", 1) != 1)
			_exit(1);
		usleep(300 * 1000);     /* stopping */
		_exit(0);               /* the lock goes with the process */
	}
	char x;
	cr_assert_eq(read(fds[0], &x, 1), 1, "the holder did not start");
	double t0 = clock_now();
	cr_assert_eq(persist_open(&po, &p, err, sizeof(err)), 0, "%s", err);
	cr_expect_geq(clock_now() - t0, 0.2, "it did not wait for the holder");
	persist_close(p);
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fds[0]);
	close(fds[1]);
	th_rmrf(mnt);
	free(mnt);
}

Test(persist, a_state_off_tmpfs_is_refused)
{
	struct persist *p;
	char dir[400], err[600];
	struct persist_opts po = { .dir = dir, .source = src, .chunk = CHUNK, .capacity = CAP, .tmpfs = 1 };

	snprintf(dir, sizeof(dir), "%s/state", src);   /* /tmp: ext4 here, not tmpfs */
	int e = persist_open(&po, &p, err, sizeof(err));
	if (e == 0) {
		persist_close(p);
		cr_skip_test("/tmp is tmpfs on this machine");
	}
	cr_expect_eq(e, -EINVAL);
	cr_expect(strstr(err, "not on tmpfs") != NULL, "%s", err);
}

Test(persist, default_dirs_are_distinct_and_readable)
{
	char a[300], b[300];

	persist_default_dir("/r", "/mnt/imagenet", a, sizeof(a));
	persist_default_dir("/r", "/mnt-imagenet", b, sizeof(b));
	cr_expect(!strncmp(a, "/r/mnt-imagenet-", 16), "%s", a);
	cr_expect_str_neq(a, b);
}

/* Writes a state directory NAME under ROOT as a daemon leaves it: 0700,
 * lock and owner 0600, OWNER's text. */
static void fake_state(const char *root, const char *name, const char *owner)
{
	char d[400], cmd[4000];
	FILE *f;

	snprintf(d, sizeof(d), "%s/%s", root, name);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && chmod 700 '%s' '%s' && touch '%s/lock' '%s/arena' && "
		 "chmod 600 '%s/lock' '%s/arena'", d, root, d, d, d, d, d);
	cr_assert_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s/owner", d);
	f = fopen(cmd, "w");
	cr_assert(f);
	fputs(owner, f);
	fclose(f);
	chmod(cmd, 0600);
}

static int exists(const char *root, const char *name)
{
	char d[600];

	snprintf(d, sizeof(d), "%s/%s", root, name);
	return access(d, F_OK) == 0;
}

Test(persist, sweep_frees_orphans_no_restart_will_come_for)
{
	char root[300], text[600], cmd[400];

	snprintf(root, sizeof(root), "%s.sweep", state);
	fake_state(root, "gone", "mountpoint=/nonexistent/epochfs-ut\nsource=/x\n");
	snprintf(text, sizeof(text), "mountpoint=%s\nsource=/x\n", src);
	fake_state(root, "unmounted", text);        /* a plain directory now: nobody restarts it */
	snprintf(text, sizeof(text), "mountpoint=%s\nsource=/x\nkept=1\n", src);
	fake_state(root, "kept", text);             /* --persist always */
	fake_state(root, "mine", "mountpoint=/nonexistent/mine\nsource=/x\n");
	/* Held by a live daemon: never touched. */
	fake_state(root, "held", "mountpoint=/nonexistent/held\nsource=/x\n");
	snprintf(cmd, sizeof(cmd), "%s/held/lock", root);
	int lk = open(cmd, O_RDWR);
	cr_assert_geq(lk, 0);
	cr_assert_eq(flock(lk, LOCK_EX), 0);
	cr_expect_eq(persist_sweep(root, "mine"), 2);
	cr_expect(!exists(root, "gone"));
	cr_expect(!exists(root, "unmounted"));
	cr_expect(exists(root, "kept"));
	cr_expect(exists(root, "mine"), "the state of the mount being made was swept");
	cr_expect(exists(root, "held"));
	close(lk);
	/* A state another user could write is not ours to judge: left alone. */
	snprintf(cmd, sizeof(cmd), "chmod 777 '%s/held'", root);
	cr_assert_eq(system(cmd), 0);
	cr_expect_eq(persist_sweep(root, "mine"), 0);
	cr_expect(exists(root, "held"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	cr_expect_eq(system(cmd), 0);
}

/* What persist_list() and persist_free_states() reported, by name. */
struct seen {
	int n;
	char name[16][64];
	struct persist_state_info s[16];
};

static void collect(void *arg, const struct persist_state_info *s)
{
	struct seen *w = arg;

	cr_assert_lt(w->n, 16);
	snprintf(w->name[w->n], sizeof(w->name[0]), "%s", s->name);
	w->s[w->n++] = *s;
}

static const struct persist_state_info *seen_of(const struct seen *w, const char *name)
{
	for (int i = 0; i < w->n; i++)
		if (!strcmp(w->name[i], name))
			return &w->s[i];
	return NULL;
}

/* A state whose arena holds KB kilobytes of written pages. */
static void fake_state_with(const char *root, const char *name, const char *owner, int kb)
{
	char cmd[1200];

	fake_state(root, name, owner);
	snprintf(cmd, sizeof(cmd), "head -c %dK /dev/urandom > '%s/%s/arena' && truncate -s 1M '%s/%s/arena'", kb,
		 root, name, root, name);
	cr_assert_eq(system(cmd), 0);
}

Test(persist, list_says_what_each_state_is_and_changes_nothing)
{
	char root[300], victim[300], cmd[2400], lk[400];
	struct seen w = { 0 };
	struct stat st;

	snprintf(root, sizeof(root), "%s.list", state);
	snprintf(victim, sizeof(victim), "%s.victim", state);
	fake_state_with(root, "dead", "mountpoint=/mnt/a\nsource=/data/a\n", 256);
	fake_state_with(root, "kept", "mountpoint=/mnt/b\nsource=/data/b\nkept=1\n", 64);
	fake_state(root, "held", "mountpoint=/mnt/c\nsource=/data/c\n");
	snprintf(lk, sizeof(lk), "%s/held/lock", root);
	int held = open(lk, O_RDWR);
	cr_assert_geq(held, 0);
	cr_assert_eq(flock(held, LOCK_EX), 0);
	cr_assert_eq(pwrite(held, "4242\n", 5, 0), 5);
	/* Not states: a link to another user's (or root's) state, a file, a
	 * directory others could write, a state whose lock is a link. */
	fake_state(victim, "v", "mountpoint=/mnt/v\nsource=/data/v\n");
	snprintf(cmd, sizeof(cmd), "ln -s '%s/v' '%s/link' && echo x > '%s/file' && mkdir -m 777 '%s/loose' && "
		 "mkdir -m 700 '%s/badlock' && ln -s '%s/v/lock' '%s/badlock/lock'", victim, root, root, root, root,
		 victim, root);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(chmod(root, 0700), 0);     /* (mkdir -m 777 left it alone; be sure) */

	cr_expect_eq(persist_list(root, collect, &w), 3);
	cr_expect_eq(w.n, 7);
	const struct persist_state_info *d = seen_of(&w, "dead"), *k = seen_of(&w, "kept"), *h = seen_of(&w, "held");
	cr_assert(d && k && h);
	cr_expect(!d->skipped && !d->alive && d->locked && !d->kept && !d->freed);
	cr_expect_str_eq(d->mountpoint, "/mnt/a");
	cr_expect_str_eq(d->source, "/data/a");
	cr_expect_str_eq(d->root, root);
	cr_expect_geq(d->arena_bytes, 256 << 10, "%llu", (unsigned long long)d->arena_bytes);
	cr_expect_lt(d->arena_bytes, 512 << 10, "blocks, not the 1 MiB length: %llu",
		     (unsigned long long)d->arena_bytes);
	cr_expect_eq(d->arena_size, 1 << 20);
	cr_expect_geq(d->bytes, d->arena_bytes);
	cr_expect(k->kept && !k->alive);
	cr_expect(h->alive && h->pid == 4242, "alive %d pid %d", h->alive, h->pid);
	for (const char *const *n = (const char *const[]){ "link", "file", "loose", "badlock", NULL }; *n; n++) {
		const struct persist_state_info *x = seen_of(&w, *n);
		cr_expect(x && x->skipped && x->why[0], "%s", *n);
	}
	cr_expect(strstr(seen_of(&w, "link")->why, "symlink"), "%s", seen_of(&w, "link")->why);
	cr_expect(strstr(seen_of(&w, "loose")->why, "not trusted"), "%s", seen_of(&w, "loose")->why);
	/* The lock was let go at once: a daemon could take "dead" now. */
	snprintf(lk, sizeof(lk), "%s/dead/lock", root);
	int fd = open(lk, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_expect_eq(flock(fd, LOCK_EX | LOCK_NB), 0, "the listing kept a lock");
	close(fd);
	/* Nothing was made: a state without a lock file stays without one. */
	snprintf(cmd, sizeof(cmd), "rm '%s/kept/lock'", root);
	cr_assert_eq(system(cmd), 0);
	w.n = 0;
	cr_expect_eq(persist_list(root, collect, &w), 3);
	cr_expect(!seen_of(&w, "kept")->locked);
	snprintf(lk, sizeof(lk), "%s/kept/lock", root);
	cr_expect_neq(stat(lk, &st), 0, "the listing made a lock file");
	close(held);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, victim);
	cr_expect_eq(system(cmd), 0);
}

Test(persist, free_states_frees_what_no_daemon_holds_and_follows_no_link)
{
	char root[300], victim[300], cmd[2400], lk[400];
	struct seen w = { 0 };
	struct stat st;

	snprintf(root, sizeof(root), "%s.free", state);
	snprintf(victim, sizeof(victim), "%s.victim", state);
	fake_state_with(root, "dead", "mountpoint=/mnt/a\nsource=/data/a\n", 256);
	fake_state_with(root, "kept", "mountpoint=/mnt/b\nsource=/data/b\nkept=1\n", 64);
	fake_state(root, "held", "mountpoint=/mnt/c\nsource=/data/c\n");
	snprintf(lk, sizeof(lk), "%s/held/lock", root);
	int held = open(lk, O_RDWR);
	cr_assert_geq(held, 0);
	cr_assert_eq(flock(held, LOCK_EX), 0);
	/* A link to a dead state elsewhere, and links inside a dead state. */
	fake_state(victim, "v", "mountpoint=/mnt/v\nsource=/data/v\n");
	th_write(victim, "precious", "keep me");
	snprintf(cmd, sizeof(cmd), "ln -s '%s/v' '%s/link' && ln -s '%s/precious' '%s/dead/table' && "
		 "ln -s '%s' '%s/dead/dir'", victim, root, victim, root, victim, root);
	cr_assert_eq(system(cmd), 0);

	cr_expect_eq(persist_free_states(root, collect, &w), 2);
	const struct persist_state_info *d = seen_of(&w, "dead"), *k = seen_of(&w, "kept"), *h = seen_of(&w, "held");
	cr_assert(d && k && h);
	cr_expect(d->freed && d->bytes >= 256 << 10);
	cr_expect(k->freed);
	cr_expect(!h->freed && h->alive);
	cr_expect(seen_of(&w, "link")->skipped && !seen_of(&w, "link")->freed);
	cr_expect(!exists(root, "dead") && !exists(root, "kept"));
	cr_expect(exists(root, "held"), "a state a daemon holds was freed");
	snprintf(lk, sizeof(lk), "%s/held/arena", root);
	cr_expect_eq(stat(lk, &st), 0, "a held state was emptied");
	snprintf(lk, sizeof(lk), "%s/link", root);
	cr_expect_eq(lstat(lk, &st), 0, "the planted link was removed");
	cr_expect(exists(victim, "v/arena") && exists(victim, "v/lock") && exists(victim, "precious"),
		  "freeing followed a link");
	close(held);
	/* Once its daemon is gone, it goes too. */
	w.n = 0;
	cr_expect_eq(persist_free_states(root, collect, &w), 1);
	cr_expect(!exists(root, "held"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, victim);
	cr_expect_eq(system(cmd), 0);
}

Test(persist, an_untrusted_root_is_said_and_left_alone)
{
	char root[300], link[320], cmd[1400];
	struct seen w = { 0 };

	snprintf(root, sizeof(root), "%s.loose", state);
	fake_state(root, "dead", "mountpoint=/mnt/a\nsource=/data/a\n");
	cr_assert_eq(chmod(root, 0777), 0);
	cr_expect_eq(persist_free_states(root, collect, &w), 0);
	cr_expect_eq(w.n, 1);
	cr_expect(w.s[0].skipped && !strcmp(w.name[0], ""), "%s", w.name[0]);
	cr_expect(strstr(w.s[0].why, "writable by group or others"), "%s", w.s[0].why);
	cr_expect(exists(root, "dead"));
	/* A root that is a link is not followed. */
	cr_assert_eq(chmod(root, 0700), 0);
	snprintf(link, sizeof(link), "%s.link", state);
	cr_assert_eq(symlink(root, link), 0);
	w.n = 0;
	cr_expect_eq(persist_free_states(link, collect, &w), 0);
	cr_expect(w.n == 1 && strstr(w.s[0].why, "symlink"), "%s", w.n ? w.s[0].why : "");
	cr_expect(exists(root, "dead"));
	/* A missing root given by name is said too. */
	w.n = 0;
	cr_expect_eq(persist_list("/nonexistent/epochfs-states", collect, &w), 0);
	cr_expect(w.n == 1 && w.s[0].skipped);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, link);
	cr_expect_eq(system(cmd), 0);
}

/* Root looks at other users' roots: PREFIX-N is believed when N owns it. */
Test(persist, root_lists_a_users_root_only_when_that_user_owns_it)
{
	char dir[300], good[400], bad[400], cmd[1600];
	struct seen w = { 0 };

	if (geteuid() != 0)
		cr_skip_test("needs root to make directories of another user");
	snprintf(dir, sizeof(dir), "%s.users", state);
	snprintf(good, sizeof(good), "%s/epochfs-65534", dir);
	snprintf(bad, sizeof(bad), "%s/epochfs-4242", dir);
	fake_state(good, "s", "mountpoint=/mnt/u\nsource=/data/u\n");
	fake_state(bad, "s", "mountpoint=/mnt/x\nsource=/data/x\n");
	snprintf(cmd, sizeof(cmd), "chmod 755 '%s' && chown -R 65534 '%s' '%s'", dir, good, bad);
	cr_assert_eq(system(cmd), 0);
	cr_expect_eq(persist_list(good, collect, &w), 1);
	cr_expect(w.n == 1 && !w.s[0].skipped && w.s[0].uid == 65534, "%s", w.n ? w.s[0].why : "");
	cr_expect_str_eq(w.s[0].mountpoint, "/mnt/u");
	w.n = 0;
	cr_expect_eq(persist_free_states(bad, collect, &w), 0);
	cr_expect(w.n == 1 && strstr(w.s[0].why, "owned by uid 65534, not by 4242"), "%s", w.n ? w.s[0].why : "");
	cr_expect(exists(bad, "s"));
	w.n = 0;
	cr_expect_eq(persist_free_states(good, collect, &w), 1);
	cr_expect(!exists(good, "s"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

Test(persist, kept_items_move_down_over_dropped_ones)
{
	struct daemon a;
	struct cache_stats cs;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 6; i++)
		load(a.c, i, 10000, 0);
	stop(&a);
	vers[2].ctime_ns = 77;          /* the second item's file changed: a hole */
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 5);
	cr_expect_eq(a.st.moved, 4);
	cache_get_stats(a.c, &cs);
	cr_expect_eq(cs.used, 5 * 10048, "used %llu", (unsigned long long)cs.used);
	for (uint32_t i = 1; i <= 6; i++)
		cr_expect_eq(hit(a.c, i, 10000, 0), i != 2, "item %u", i);
	stop(&a);
	/* Moved items were recorded at their new places. */
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 5);
	cr_expect_eq(a.st.moved, 0);
	for (uint32_t i = 1; i <= 6; i++)
		cr_expect_eq(hit(a.c, i, 10000, 0), i != 2, "item %u", i);
	stop(&a);
}

Test(persist, a_smaller_budget_keeps_what_fits)
{
	struct daemon a;
	struct persist_opts po = { .dir = state, .source = src, .mountpoint = "/nowhere", .chunk = CHUNK,
				   .capacity = 3 * 10048, .tmpfs = 1, .compact = 1 };
	char err[600];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 6; i++)
		load(a.c, i, 10000, 0);
	stop(&a);
	cr_assert_eq(persist_open(&po, &a.p, err, sizeof(err)), 0);
	struct cache_opts co = { .capacity = po.capacity, .chunk = CHUNK, .max_items = 100, .arena_file = 1,
				 .arena_fd = persist_arena_fd(a.p) };
	cr_assert_eq(cache_new(&co, &a.c), 0);
	cr_assert_eq(persist_adopt(a.p, a.c, resolve, path_of, NULL, 1), 0);
	persist_get_stats(a.p, &a.st);
	cr_expect_eq(a.st.adopted, 3);
	cr_expect_eq(a.st.dropped_other, 3);
	for (uint32_t i = 1; i <= 3; i++)
		cr_expect_eq(hit(a.c, i, 10000, 0), 1, "item %u", i);
	struct stat sb;
	char path[400];
	snprintf(path, sizeof(path), "%s/arena", state);
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_eq((uint64_t)sb.st_size, po.capacity, "the arena file keeps the budget's length");
	stop(&a);
}

/* Another user's planted links in a state directory that was once
 * writable by others: the state is discarded, nothing is written through
 * them, and the directory is private again. */
Test(persist, a_state_others_could_write_is_discarded_and_writes_no_link)
{
	struct daemon a;
	char cmd[1400], victim[300];
	struct stat st;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 3; i++)
		load(a.c, i, 10000, 0);
	stop(&a);
	snprintf(victim, sizeof(victim), "%s/victim", src);
	th_write(src, "victim", "root-only");
	chmod(victim, 0600);
	snprintf(cmd, sizeof(cmd), "chmod 777 '%s' && rm -f '%s/owner' && ln -s '%s' '%s/owner'", state, state,
		 victim, state);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	cr_expect_eq(a.st.adopted, 0, "adopted from a directory others could write");
	cr_assert_eq(stat(state, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0700);
	char owner[400];
	snprintf(owner, sizeof(owner), "%s/owner", state);
	cr_assert_eq(lstat(owner, &st), 0);
	cr_expect(S_ISREG(st.st_mode), "owner is still a link");
	stop(&a);
	FILE *f = fopen(victim, "r");
	char buf[32] = "";
	cr_assert(f);
	cr_expect(fgets(buf, sizeof(buf), f) != NULL);
	fclose(f);
	cr_expect_str_eq(buf, "root-only", "the daemon wrote through a planted link");
}

/* A planted link in a private directory (root did it, or it survived from
 * a looser past) is removed and the file made anew. */
Test(persist, a_planted_arena_link_is_replaced)
{
	struct daemon a;
	char cmd[1400], victim[300];

	snprintf(victim, sizeof(victim), "%s/victim", src);
	th_write(src, "victim", "precious");
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && chmod 700 '%s' && ln -s '%s' '%s/arena'", state, state, victim,
		 state);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 10000, 0);
	stop(&a);
	struct stat st;
	cr_assert_eq(stat(victim, &st), 0);
	cr_expect_eq(st.st_size, 8, "the victim became the arena");
}

Test(persist, a_state_directory_of_another_user_is_refused)
{
	struct persist *p;
	struct persist_opts po = { .dir = state, .source = src, .chunk = CHUNK, .capacity = CAP, .tmpfs = 1 };
	char err[600];

	if (geteuid() != 0)
		cr_skip_test("needs root to make a directory of another user");
	cr_assert_eq(mkdir(state, 0700), 0);
	cr_assert_eq(chown(state, 65534, 65534), 0);
	cr_expect_eq(persist_open(&po, &p, err, sizeof(err)), -EPERM);
	cr_expect(strstr(err, "not trusted") && strstr(err, "owned by uid 65534"), "%s", err);
}

static uint32_t reject_id;

static int check_all_but(void *arg, uint32_t id, uint32_t chunk, const struct index_version *v, const void *data,
			 size_t len)
{
	(void)arg, (void)chunk, (void)v, (void)len;
	/* The bytes handed over are the item's. */
	cr_expect_eq(((const unsigned char *)data)[0], (unsigned char)id);
	return id == reject_id;
}

/* Items made without the --manifest now in force are checked one by one
 * (the RAM cache) or the state is discarded (a store that cannot). */
Test(persist, a_state_made_under_another_manifest_is_checked_or_discarded)
{
	struct daemon a;
	struct persist_opts po = { .dir = state, .source = src, .mountpoint = "/nowhere", .chunk = CHUNK,
				   .capacity = CAP, .tmpfs = 1, .compact = 1, .manifest_id = 42,
				   .check = check_all_but };
	char err[600];

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	for (uint32_t i = 1; i <= 4; i++)
		load(a.c, i, 10000, 0);
	stop(&a);
	reject_id = 3;
	cr_assert_eq(persist_open(&po, &a.p, err, sizeof(err)), 0, "%s", err);
	struct cache_opts co = { .capacity = CAP, .chunk = CHUNK, .max_items = 100, .arena_file = 1,
				 .arena_fd = persist_arena_fd(a.p) };
	cr_assert_eq(cache_new(&co, &a.c), 0);
	cr_assert_eq(persist_adopt(a.p, a.c, resolve, path_of, NULL, 1), 0);
	persist_get_stats(a.p, &a.st);
	cr_expect_eq(a.st.adopted, 3);
	cr_expect_eq(a.st.dropped_unverified, 1);
	cr_expect_eq(hit(a.c, 3, 10000, 0), 0, "an item the manifest refused was adopted");
	stop(&a);
	/* Made under manifest 42 now: a restart under it checks nothing. */
	reject_id = 1;
	cr_assert_eq(persist_open(&po, &a.p, err, sizeof(err)), 0, "%s", err);
	co.arena_fd = persist_arena_fd(a.p);
	cr_assert_eq(cache_new(&co, &a.c), 0);
	cr_assert_eq(persist_adopt(a.p, a.c, resolve, path_of, NULL, 1), 0);
	persist_get_stats(a.p, &a.st);
	cr_expect_eq(a.st.adopted, 3, "items checked under this manifest were checked again");
	stop(&a);
	/* Under manifest 43, without a checker: discarded whole, in one line. */
	po.manifest_id = 43;
	po.check = NULL;
	po.compact = 0;
	cr_assert_eq(persist_open(&po, &a.p, err, sizeof(err)), 0, "%s", err);
	persist_get_stats(a.p, &a.st);
	cr_expect(strstr(a.st.discarded, "made under another --manifest"), "%s", a.st.discarded);
	persist_close(a.p);
}

Test(persist, remove_gives_everything_back)
{
	struct daemon a;
	struct stat st;

	cr_assert_eq(start(&a, CHUNK, NULL), 0);
	load(a.c, 1, 10000, 0);
	cache_free(a.c);
	persist_remove(a.p);
	cr_expect_neq(stat(state, &st), 0, "the state directory outlived a clean stop");
}

Test(persist, headroom_keeps_a_quarter_and_half_of_a_small_fs)
{
	cr_expect_eq(persist_headroom(64ull << 20), 32ull << 20);
	cr_expect_eq(persist_headroom(256ull << 20), 128ull << 20);
	cr_expect_eq(persist_headroom(2ull << 30), 1ull << 30);
	cr_expect_eq(persist_headroom(24ull << 30), 6ull << 30);
}
