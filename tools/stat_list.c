/* stat_list.c - epochfs-stat's listings of the machine: --mounts (the
 * epochfs mounts, and whether their daemons answer) and --states /
 * --free-states (the RAM cache states left in memory, and freeing those no
 * daemon holds). The store layer finds and judges (store/path.h,
 * store/persist.h); this file only gathers and prints.
 *
 * DESIGN
 * - A mount whose daemon is gone answers ENOTCONN at once, but one whose
 *   daemon hangs would hang a plain read of its stats.json: each mount is
 *   asked from a thread of its own, and one that has not answered within
 *   MOUNT_WAIT seconds is said not to answer. Its thread is left behind;
 *   the process's exit takes it (a FUSE request waits killably).
 * - Rows are gathered first and printed sorted, with the columns as wide
 *   as their longest entry (paths vary too much for fixed widths); the
 *   last column is not padded.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mstats.h"
#include "stat_int.h"
#include "store/path.h"
#include "store/persist.h"

#define MOUNT_WAIT 3                /* seconds a daemon has to answer --mounts */
#define STR_(x) #x
#define STR(x) STR_(x)

/* A growing array of N pointers. */
struct vec {
	void **v;
	size_t n, cap;
};

static int push(struct vec *a, void *p)
{
	if (!p)
		return -ENOMEM;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		void **v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = p;
	return 0;
}

/* Prints CELL padded to WIDTH, or as is when LAST. */
static void col(const char *cell, int width, int last)
{
	if (last)
		printf("%s\n", cell);
	else
		printf("%-*s  ", width, cell);
}

static int widest(int w, const char *s)
{
	int l = (int)strlen(s);

	return l > w ? l : w;
}

/* ---- --mounts ---- */

struct mount_row {
	char *mnt, *src;
	char file[PATH_MAX + 32];
	struct mstats m;
	int err;                    /* 0: it answered; -ETIMEDOUT: not in time */
	int done;                   /* the thread has finished (under mlock) */
	pthread_t t;
	int started;
};

static pthread_mutex_t mlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mcond = PTHREAD_COND_INITIALIZER;

static void *ask(void *arg)
{
	struct mount_row *r = arg;
	struct mstats *m = malloc(sizeof(*m));
	int err = m ? mstats_read(r->file, m) : -ENOMEM;

	pthread_mutex_lock(&mlock);
	if (err == 0)
		r->m = *m;
	r->err = err;
	r->done = 1;
	pthread_cond_broadcast(&mcond);
	pthread_mutex_unlock(&mlock);
	free(m);
	return NULL;
}

static void one_mount(void *arg, const char *mnt, const char *src)
{
	struct vec *rows = arg;
	struct mount_row *r = calloc(1, sizeof(*r));

	if (!r)
		return;
	r->mnt = strdup(mnt);
	r->src = strdup(src);
	if (!r->mnt || !r->src || push(rows, r) < 0) {
		free(r->mnt);
		free(r->src);
		free(r);
		return;
	}
	snprintf(r->file, sizeof(r->file), "%s/.epochfs/stats.json", mnt);
}

static int by_mount(const void *a, const void *b)
{
	return strcmp((*(struct mount_row *const *)a)->mnt, (*(struct mount_row *const *)b)->mnt);
}

static const char *mount_error(int err)
{
	switch (err) {
	case -ENOTCONN: return "its daemon is gone (fusermount3 -u the mount point to clear it)";
	case -ETIMEDOUT: return "its daemon did not answer within " STR(MOUNT_WAIT) " s";
	case -EBADMSG: return "its stats.json is not the format this tool knows";
	default: return strerror(-err);
	}
}

int stat_mounts(int json)
{
	struct vec rows = { 0 };
	int n = path_epochfs_mounts("/proc/self/mountinfo", one_mount, &rows), rc = 0;
	struct timespec until;

	if (n < 0) {
		fprintf(stderr, "epochfs-stat: error: /proc/self/mountinfo: %s\n", strerror(-n));
		return 1;
	}
	qsort(rows.v, rows.n, sizeof(*rows.v), by_mount);
	for (size_t i = 0; i < rows.n; i++) {
		struct mount_row *r = rows.v[i];
		r->started = pthread_create(&r->t, NULL, ask, r) == 0;
		if (r->started)
			pthread_detach(r->t);
		else
			r->err = -EAGAIN, r->done = 1;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += MOUNT_WAIT;
	pthread_mutex_lock(&mlock);
	for (size_t i = 0; i < rows.n; i++) {
		struct mount_row *r = rows.v[i];
		while (!r->done && pthread_cond_timedwait(&mcond, &mlock, &until) != ETIMEDOUT)
			;
		if (!r->done) {
			r->done = 2;            /* given up on: its thread may still write err */
			r->err = -ETIMEDOUT;
		}
	}
	/* Rows stay under the lock: a late thread must not change them now. */
	int wm = (int)strlen("MOUNT POINT"), ws = (int)strlen("SOURCE");
	for (size_t i = 0; i < rows.n; i++) {
		struct mount_row *r = rows.v[i];
		wm = widest(wm, r->mnt);
		ws = widest(ws, r->src);
		if (r->err)
			rc = 1;
	}
	if (!json && !rows.n)
		printf("no epochfs mounts\n");
	if (!json && rows.n) {
		printf("%-*s  %-*s  %-10s  %-10s  %15s  %6s\n", wm, "MOUNT POINT", ws, "SOURCE", "DAEMON", "UPTIME",
		       "CACHE MB", "HIT%");
	}
	for (size_t i = 0; i < rows.n; i++) {
		struct mount_row *r = rows.v[i];
		const struct mstats *m = &r->m;
		double rb = mstats_get(m, "read_bytes", 0), hb = mstats_get(m, "cache_hit_bytes", 0);
		double used = mstats_get(m, "cache_used_bytes", 0), cap = mstats_get(m, "cache_capacity_bytes", 0);
		double up = mstats_get(m, "uptime_s", 0), pid = mstats_get(m, "daemon_pid", 0);
		char d[32], u[32], f[64], h[16];
		if (json) {
			printf("{\"mountpoint\": ");
			stat_json_str(stdout, r->mnt);
			printf(", \"source\": ");
			stat_json_str(stdout, r->src);
			printf(", \"answers\": %s, \"error\": ", r->err ? "false" : "true");
			stat_json_str(stdout, r->err ? mount_error(r->err) : NULL);
			if (r->err)
				printf(", \"daemon_pid\": null, \"uptime_s\": null, \"cache_used_bytes\": null, "
				       "\"cache_capacity_bytes\": null, \"hit_ratio\": null}\n");
			else if (rb > 0)
				printf(", \"daemon_pid\": %.0f, \"uptime_s\": %.3f, \"cache_used_bytes\": %.0f, "
				       "\"cache_capacity_bytes\": %.0f, \"hit_ratio\": %.4f}\n", pid, up, used, cap, hb / rb);
			else
				printf(", \"daemon_pid\": %.0f, \"uptime_s\": %.3f, \"cache_used_bytes\": %.0f, "
				       "\"cache_capacity_bytes\": %.0f, \"hit_ratio\": null}\n", pid, up, used, cap);
			continue;
		}
		if (r->err) {
			snprintf(d, sizeof(d), "%s", r->err == -ETIMEDOUT ? "no answer" : r->err == -ENOTCONN ? "gone" : "?");
			printf("%-*s  %-*s  %-10s  %-10s  %15s  %6s\n", wm, r->mnt, ws, r->src, d, "-", "-", "-");
			continue;
		}
		if (pid > 0)
			snprintf(d, sizeof(d), "pid %.0f", pid);
		else
			snprintf(d, sizeof(d), "answers");
		stat_uptime(u, sizeof(u), up);
		stat_fill(f, sizeof(f), used, cap);
		if (rb > 0)
			snprintf(h, sizeof(h), "%.1f", 100 * hb / rb);
		else
			snprintf(h, sizeof(h), "-");
		printf("%-*s  %-*s  %-10s  %-10s  %15s  %6s\n", wm, r->mnt, ws, r->src, d, u, f, h);
	}
	if (!json) {
		for (size_t i = 0; i < rows.n; i++) {
			struct mount_row *r = rows.v[i];
			if (r->err)
				printf("%s: %s\n", r->mnt, mount_error(r->err));
		}
	}
	fflush(stdout);
	/* Rows given up on stay allocated: their threads may still finish. */
	size_t kept = 0;
	for (size_t i = 0; i < rows.n; i++) {
		struct mount_row *r = rows.v[i];
		if (r->done == 2) {
			kept++;
			continue;
		}
		free(r->mnt);
		free(r->src);
		free(r);
	}
	if (!kept)
		free(rows.v);
	pthread_mutex_unlock(&mlock);
	return rc;
}

/* ---- --states, --free-states ---- */

struct state_row {
	char *path;                 /* ROOT/NAME, or ROOT for a root skipped */
	char *mnt, *src, *why;
	struct persist_state_info s;    /* its numbers and flags (strings not kept) */
};

static void one_state(void *arg, const struct persist_state_info *s)
{
	struct vec *rows = arg;
	struct state_row *r = calloc(1, sizeof(*r));
	char path[PATH_MAX * 2];

	if (!r)
		return;
	snprintf(path, sizeof(path), "%s%s%s", s->root, *s->name ? "/" : "", s->name);
	r->path = strdup(path);
	r->mnt = strdup(s->mountpoint);
	r->src = strdup(s->source);
	r->why = strdup(s->why);
	r->s.uid = s->uid;
	r->s.skipped = s->skipped;
	r->s.kept = s->kept;
	r->s.locked = s->locked;
	r->s.alive = s->alive;
	r->s.pid = s->pid;
	r->s.bytes = s->bytes;
	r->s.arena_bytes = s->arena_bytes;
	r->s.arena_size = s->arena_size;
	r->s.freed = s->freed;
	if (!r->path || !r->mnt || !r->src || !r->why || push(rows, r) < 0) {
		free(r->path);
		free(r->mnt);
		free(r->src);
		free(r->why);
		free(r);
	}
}

/* UID's login name, or its number. */
static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);

	if (pw)
		snprintf(buf, len, "%s", pw->pw_name);
	else
		snprintf(buf, len, "%u", (unsigned)uid);
	return buf;
}

static int by_path(const void *a, const void *b)
{
	return strcmp((*(struct state_row *const *)a)->path, (*(struct state_row *const *)b)->path);
}

static void state_json(const struct state_row *r)
{
	printf("{\"state\": ");
	stat_json_str(stdout, r->path);
	printf(", \"skipped\": %s, \"why\": ", r->s.skipped ? "true" : "false");
	stat_json_str(stdout, *r->why ? r->why : NULL);
	if (r->s.skipped) {
		printf("}\n");
		return;
	}
	printf(", \"uid\": %u, \"mountpoint\": ", (unsigned)r->s.uid);
	stat_json_str(stdout, *r->mnt ? r->mnt : NULL);
	printf(", \"source\": ");
	stat_json_str(stdout, *r->src ? r->src : NULL);
	printf(", \"daemon_alive\": %s, \"pid\": ", r->s.alive ? "true" : "false");
	if (r->s.pid > 0)
		printf("%d", r->s.pid);
	else
		printf("null");
	printf(", \"kept\": %s, \"bytes\": %llu, \"arena_bytes\": %llu, \"arena_size\": %llu, \"freed\": %s}\n",
	       r->s.kept ? "true" : "false", (unsigned long long)r->s.bytes, (unsigned long long)r->s.arena_bytes,
	       (unsigned long long)r->s.arena_size, r->s.freed ? "true" : "false");
}

static void free_states(struct vec *rows)
{
	for (size_t i = 0; i < rows->n; i++) {
		struct state_row *r = rows->v[i];
		free(r->path);
		free(r->mnt);
		free(r->src);
		free(r->why);
		free(r);
	}
	free(rows->v);
}

/* Prints what the walk gathered; the exit status. */
static int print_states(struct vec *rows, const char *root, const char *where, int free_them, int json)
{
	/* Every user's roots (root, no ROOT): say whose each state is. */
	int rc = 0, states = 0, alive = 0, freed = 0, root_user = geteuid() == 0 && !root;
	int wu = (int)strlen("USER");
	double bytes = 0, freed_bytes = 0;
	char mb[32];

	qsort(rows->v, rows->n, sizeof(*rows->v), by_path);
	int wp = (int)strlen("STATE"), wm = (int)strlen("MOUNT POINT");
	for (size_t i = 0; i < rows->n; i++) {
		struct state_row *r = rows->v[i];
		if (r->s.skipped) {
			rc = 1;
			continue;
		}
		states++;
		alive += r->s.alive;
		bytes += (double)r->s.bytes;
		if (r->s.freed) {
			freed++;
			freed_bytes += (double)r->s.bytes;
		} else if (free_them && !r->s.alive) {
			rc = 1;             /* it should have gone and did not */
		}
		wp = widest(wp, r->path);
		wm = widest(wm, *r->mnt ? r->mnt : "?");
	}
	for (size_t i = 0; i < rows->n; i++) {
		struct state_row *r = rows->v[i];
		if (json) {
			state_json(r);
		} else if (r->s.skipped) {
			fprintf(stderr, "epochfs-stat: %s%s%s (skipped)\n", strstr(r->why, r->path) ? "" : r->path,
				strstr(r->why, r->path) ? "" : ": ", r->why);
		}
	}
	if (json) {
		fflush(stdout);
		return rc;
	}
	if (!states) {
		printf("no cache states in %s\n", where);
		return rc;
	}
	if (free_them) {
		for (size_t i = 0; i < rows->n; i++) {
			struct state_row *r = rows->v[i];
			if (r->s.skipped)
				continue;
			stat_mb(mb, sizeof(mb), (double)r->s.bytes);
			if (r->s.freed)
				printf("freed %s: %s MB given back (mount point %s, SOURCE %s%s)\n", r->path, mb,
				       *r->mnt ? r->mnt : "?", *r->src ? r->src : "?", r->s.kept ? ", kept on purpose" : "");
			else if (r->s.alive)
				printf("left  %s: its daemon (pid %d) is alive (mount point %s)\n", r->path, r->s.pid,
				       *r->mnt ? r->mnt : "?");
			else
				fprintf(stderr, "epochfs-stat: %s: not freed: %s\n", r->path, r->why);
		}
		stat_mb(mb, sizeof(mb), freed_bytes);
		printf("freed %d state%s, %s MB; %d left to %s live daemon%s\n", freed, freed == 1 ? "" : "s", mb, alive,
		       alive == 1 ? "its" : "their", alive == 1 ? "" : "s");
		return rc;
	}
	if (root_user) {
		for (size_t i = 0; i < rows->n; i++) {
			struct state_row *r = rows->v[i];
			if (!r->s.skipped)
				wu = widest(wu, user_name(r->s.uid, mb, sizeof(mb)));
		}
		col("USER", wu, 0);
	}
	col("STATE", wp, 0);
	printf("%-10s  %10s  %-4s  ", "DAEMON", "MB", "KEPT");
	col("MOUNT POINT", wm, 0);
	col("SOURCE", 0, 1);
	for (size_t i = 0; i < rows->n; i++) {
		struct state_row *r = rows->v[i];
		char d[32], who[64];
		if (r->s.skipped)
			continue;
		if (r->s.alive)
			snprintf(d, sizeof(d), "pid %d", r->s.pid);
		else
			snprintf(d, sizeof(d), "none");
		stat_mb(mb, sizeof(mb), (double)r->s.bytes);
		if (root_user)
			col(user_name(r->s.uid, who, sizeof(who)), wu, 0);
		col(r->path, wp, 0);
		printf("%-10s  %10s  %-4s  ", d, mb, r->s.kept ? "yes" : "no");
		col(*r->mnt ? r->mnt : "?", wm, 0);
		col(*r->src ? r->src : "?", 0, 1);
	}
	stat_mb(mb, sizeof(mb), bytes);
	printf("%d state%s, %s MB; %d held by a live daemon%s\n", states, states == 1 ? "" : "s", mb, alive,
	       states - alive ? " (epochfs-stat --free-states frees the others)" : "");
	return rc;
}

int stat_states(const char *root, int free_them, int json)
{
	struct vec rows = { 0 };
	int n = free_them ? persist_free_states(root, one_state, &rows) : persist_list(root, one_state, &rows);
	char where[PATH_MAX + 16];

	if (root)
		snprintf(where, sizeof(where), "%s", root);
	else if (geteuid() == 0)
		snprintf(where, sizeof(where), "%s-*", PERSIST_ROOT_PREFIX);
	else
		persist_default_root(where, sizeof(where));
	if (n < 0) {
		fprintf(stderr, "epochfs-stat: error: %s: %s\n", where, strerror(-n));
		free_states(&rows);
		return 1;
	}
	int rc = print_states(&rows, root, where, free_them, json);
	free_states(&rows);
	return rc;
}
