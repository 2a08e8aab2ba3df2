/* core.c - see core.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "watch.h"

#define CORE_MAX_SAMPLES 64

static int core_render(void *arg, enum control_file f, char *buf, size_t len)
{
	struct sample v[CORE_MAX_SAMPLES];
	int n = core_samples(arg, v, CORE_MAX_SAMPLES);

	return f == CONTROL_STATS_JSON ? stats_render_json(v, n, buf, len)
				       : stats_render_prom(v, n, buf, len);
}

int core_open(const struct core_opts *o, struct core **out)
{
	struct index_scan_opts so = { .threads = o->scan_threads, .progress = o->progress };
	struct core *c;
	struct stat sb;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->rootfd = -1;
	c->opts = *o;
	c->opts.source = NULL;
	stats_init(&c->stats);
	c->source = realpath(o->source, NULL);
	if (!c->source) {
		err = -errno;
		log_error("%s: %s", o->source, strerror(-err));
		goto fail;
	}
	c->rootfd = open(c->source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->rootfd < 0) {
		err = -errno;
		if (err == -ENOTDIR || (stat(c->source, &sb) == 0 && !S_ISDIR(sb.st_mode)))
			log_error("%s: not a directory", o->source);
		else
			log_error("%s: %s", o->source, strerror(-err));
		goto fail;
	}
	err = index_scan(c->rootfd, &so, &c->ix);
	if (err < 0) {
		log_error("%s: cannot scan: %s", o->source, strerror(-err));
		goto fail;
	}
	err = control_new(core_render, c, &c->ctl);
	if (err < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	core_close(c);
	return err;
}

int core_start(struct core *c)
{
	int err = storage_new(c->rootfd, c->opts.ring_depth, &c->st);

	if (err < 0) {
		log_error("cannot set up io_uring: %s", strerror(-err));
		return err;
	}
	if (c->opts.watch) {
		err = watch_start(c->ix, c->source, &c->watch);
		if (err < 0) {
			log_warn("cannot watch %s for changes (%s); changes are seen only through "
				 "the entry timeout", c->source, strerror(-err));
			c->watch = NULL;
		}
	}
	return 0;
}

void core_close(struct core *c)
{
	if (!c)
		return;
	watch_stop(c->watch);
	storage_free(c->st);
	control_free(c->ctl);
	index_free(c->ix);
	if (c->rootfd >= 0)
		close(c->rootfd);
	free(c->source);
	free(c);
}

struct core_read_ctx {
	struct core *c;
	uint32_t id;
	core_read_fn done;
	void *arg;
};

static void core_read_done(void *arg, ssize_t res, const void *buf)
{
	struct core_read_ctx *x = arg;
	struct core *c = x->c;

	if (res >= 0) {
		stats_add(&c->stats, STAT_READS, 1);
		stats_add(&c->stats, STAT_READ_BYTES, (uint64_t)res);
	} else {
		stats_add(&c->stats, res == -ESTALE ? STAT_STALE_READS : STAT_READ_ERRORS, 1);
	}
	x->done(x->arg, res, buf);
	/* Only after the reply: the refresh may make the adapter notify the
	 * kernel about this very inode. */
	if (res == -ESTALE)
		index_refresh(c->ix, x->id, 0);
	free(x);
}

void core_read(struct core *c, uint32_t id, uint32_t gen, off_t off, size_t len,
	       core_read_fn done, void *arg)
{
	struct core_read_ctx *x;
	struct index_attr a;
	char path[4096];
	int err;

	if (index_get(c->ix, id, &a) < 0 || !S_ISREG(a.mode)) {
		stats_add(&c->stats, STAT_READ_ERRORS, 1);
		done(arg, -EIO, NULL);
		return;
	}
	if (a.gen != gen || a.gone) {
		stats_add(&c->stats, STAT_STALE_READS, 1);
		done(arg, -ESTALE, NULL);
		return;
	}
	if (off < 0 || (uint64_t)off >= a.v.size) {
		stats_add(&c->stats, STAT_READS, 1);
		done(arg, 0, NULL);
		return;
	}
	if (len > a.v.size - (uint64_t)off)
		len = (size_t)(a.v.size - (uint64_t)off);
	err = index_path(c->ix, id, path, sizeof(path));
	x = malloc(sizeof(*x));
	if (err < 0 || !x) {
		free(x);
		stats_add(&c->stats, STAT_READ_ERRORS, 1);
		done(arg, err < 0 ? err : -ENOMEM, NULL);
		return;
	}
	*x = (struct core_read_ctx){ c, id, done, arg };
	storage_read(c->st, path, &a.v, off, len, NULL, core_read_done, x);
}

int core_samples(struct core *c, struct sample *out, int max)
{
	struct index_totals t;
	struct storage_stats ss;
	int n = 0;

	index_totals(c->ix, &t);
	storage_get_stats(c->st, &ss);
#define GAUGE(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_GAUGE, .u = (val) }
#define COUNTER(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_COUNTER, .u = (val) }
	GAUGE("files", "Regular files in the index", t.files);
	GAUGE("dirs", "Directories in the index", t.dirs);
	GAUGE("symlinks", "Symbolic links in the index", t.symlinks);
	GAUGE("bytes_total", "Sum of the sizes of the indexed files", t.bytes);
	GAUGE("index_bytes", "Memory held by the index", index_memory(c->ix));
	GAUGE("watched_dirs", "Directories watched for changes", watch_count(c->watch));
	COUNTER("storage_read_bytes", "Bytes the daemon read from SOURCE", ss.bytes);
	COUNTER("storage_reads", "Reads the daemon issued to SOURCE", ss.reads);
	COUNTER("storage_errors", "Reads of SOURCE that failed", ss.errors);
	COUNTER("storage_inline_reads", "Reads of SOURCE served at once from its page cache", ss.inline_reads);
#undef GAUGE
#undef COUNTER
	n += stats_samples(&c->stats, out + n, max - n);
	if (n < max)
		out[n++] = (struct sample){ .name = "uptime_s", .help = "Seconds since mount",
					    .kind = SAMPLE_GAUGE, .is_float = 1,
					    .d = stats_uptime(&c->stats) };
	if (n < max)
		out[n++] = (struct sample){ .name = "scan_seconds", .help = "Seconds the mount-time scan took",
					    .kind = SAMPLE_GAUGE, .is_float = 1, .d = t.scan_seconds };
	return n;
}
