/* control.c - snapshots behind the control files; see control.h.
 *
 * DESIGN: a small list, not a hash: a handful of snapshots live at a time
 * (one per reader in flight), and a runaway reader that never lets the kernel
 * forget is bounded by CONTROL_MAX_SNAPSHOTS, past which the oldest goes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/ns/control.h"

#define CONTROL_MAX_SNAPSHOTS 1024
#define CONTROL_RENDER_MAX (1u << 20)

static const char *const control_names[CONTROL__FILES] = {
	[CONTROL_STATS_JSON] = "stats.json",
	[CONTROL_METRICS] = "metrics",
};

struct snapshot {
	uint64_t node;
	uint64_t nlookup;
	size_t len;
	struct snapshot *next;      /* newest first */
	char data[];
};

struct control {
	control_render_fn render;
	void *arg;
	pthread_mutex_t lock;
	struct snapshot *snaps;     /* lock */
	unsigned nsnaps;            /* lock */
	uint64_t next_node;         /* lock */
};

int control_new(control_render_fn render, void *arg, struct control **out)
{
	struct control *ct = calloc(1, sizeof(*ct));

	if (!ct)
		return -ENOMEM;
	ct->render = render;
	ct->arg = arg;
	ct->next_node = 16;
	pthread_mutex_init(&ct->lock, NULL);
	*out = ct;
	return 0;
}

void control_free(struct control *ct)
{
	if (!ct)
		return;
	while (ct->snaps) {
		struct snapshot *s = ct->snaps;
		ct->snaps = s->next;
		free(s);
	}
	pthread_mutex_destroy(&ct->lock);
	free(ct);
}

static struct snapshot *render(struct control *ct, enum control_file f)
{
	size_t cap = 16384;

	for (;;) {
		struct snapshot *s = malloc(sizeof(*s) + cap);
		int n;

		if (!s)
			return NULL;
		n = ct->render(ct->arg, f, s->data, cap);
		if (n >= 0) {
			s->len = (size_t)n;
			return s;
		}
		free(s);
		if (n != -ENOSPC || cap >= CONTROL_RENDER_MAX)
			return NULL;
		cap *= 4;
	}
}

int control_lookup(struct control *ct, uint64_t dir, const char *name, struct control_attr *a)
{
	struct snapshot *s;
	int f;

	if (dir != CONTROL_DIR_NODE)
		return -ENOENT;
	for (f = 0; f < CONTROL__FILES; f++)
		if (!strcmp(name, control_names[f]))
			break;
	if (f == CONTROL__FILES)
		return -ENOENT;
	s = render(ct, (enum control_file)f);
	if (!s)
		return -ENOMEM;
	s->nlookup = 1;

	pthread_mutex_lock(&ct->lock);
	s->node = NS_BIT_VIRTUAL | ct->next_node++;
	s->next = ct->snaps;
	ct->snaps = s;
	if (++ct->nsnaps > CONTROL_MAX_SNAPSHOTS) {
		struct snapshot **pp = &ct->snaps;
		while ((*pp)->next)
			pp = &(*pp)->next;
		free(*pp);
		*pp = NULL;
		ct->nsnaps--;
	}
	a->node = s->node;
	a->is_dir = 0;
	a->size = s->len;
	pthread_mutex_unlock(&ct->lock);
	return 0;
}

static struct snapshot *find_locked(struct control *ct, uint64_t node, struct snapshot ***prev)
{
	struct snapshot **pp;

	for (pp = &ct->snaps; *pp; pp = &(*pp)->next)
		if ((*pp)->node == node) {
			if (prev)
				*prev = pp;
			return *pp;
		}
	return NULL;
}

int control_getattr(struct control *ct, uint64_t node, struct control_attr *a)
{
	struct snapshot *s;
	int err = 0;

	a->node = node;
	if (node == CONTROL_DIR_NODE) {
		a->is_dir = 1;
		a->size = 0;
		return 0;
	}
	pthread_mutex_lock(&ct->lock);
	s = find_locked(ct, node, NULL);
	if (s) {
		a->is_dir = 0;
		a->size = s->len;
	} else {
		err = -ENOENT;
	}
	pthread_mutex_unlock(&ct->lock);
	return err;
}

ssize_t control_read(struct control *ct, uint64_t node, void *buf, size_t len, off_t off)
{
	struct snapshot *s;
	ssize_t n = -EIO;           /* a node the kernel still reads but we dropped */

	pthread_mutex_lock(&ct->lock);
	s = find_locked(ct, node, NULL);
	if (s) {
		if (off < 0 || (size_t)off >= s->len) {
			n = 0;
		} else {
			n = (ssize_t)(s->len - (size_t)off < len ? s->len - (size_t)off : len);
			memcpy(buf, s->data + off, (size_t)n);
		}
	}
	pthread_mutex_unlock(&ct->lock);
	return n;
}

void control_forget(struct control *ct, uint64_t node, uint64_t nlookup)
{
	struct snapshot *s, **pp;

	pthread_mutex_lock(&ct->lock);
	s = find_locked(ct, node, &pp);
	if (s && (s->nlookup <= nlookup)) {
		*pp = s->next;
		ct->nsnaps--;
		free(s);
	} else if (s) {
		s->nlookup -= nlookup;
	}
	pthread_mutex_unlock(&ct->lock);
}

const char *control_dirent(const struct control *ct, uint64_t dir, unsigned pos)
{
	(void)ct;
	if (dir != CONTROL_DIR_NODE || pos >= CONTROL__FILES)
		return NULL;
	return control_names[pos];
}
