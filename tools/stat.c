/* stat.c - epochfs-stat: a live view of a mount's counters.
 *
 * One line per interval (default 1 s), like vmstat or `juicefs stats`: the
 * read throughput the daemon served, the share of those bytes the RAM cache
 * answered, what it pulled from storage, and how full the cache is. The
 * first line averages everything since the mount, as vmstat's does. Rates
 * are deltas of .epochfs/stats.json between two snapshots, divided by the
 * time between them on the monotonic clock. --json prints the same per line
 * as an object, for scripts.
 *
 * With peers (peer_nodes > 0) the table adds what came from and went to the
 * other nodes and how many are up; with prep groups (prep_groups > 0), the
 * images the workers made per second and the cores they kept busy (worker
 * CPU-seconds per second: near the worker count, prep is CPU-bound and more
 * cores would buy more; well under it, the consumers are the limit). The
 * With orders (order_streams > 0, or anything prefetched since the mount),
 * the MB/s fetched ahead of the readers, the reads served from staging per
 * second, the late ones (the reader got there first), the MB/s of staged
 * bytes freed unread, the staging in use, and the share of the time the
 * jobs' DataLoaders waited for data (reported by jobs under epochfs-run,
 * "#wait" lines in their orders). With an SSD tier (tier_dirs > 0), the
 * share of the bytes read that the tier answered, its MB/s, how much of it
 * is used and its items. After a restart, one line above the table says
 * what the RAM cache and the tier adopted from the previous daemon and
 * dropped. The header is printed again when a set of columns appears or
 * goes.
 *
 * Reads the kernel answers from its own page cache never reach the daemon,
 * so they are in none of these numbers (docs/design.md, "Counters").
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mstats.h"
#include "options.h"
#include "util/clock.h"
#include "util/version.h"

struct snap {
	struct mstats m;
	double t;                   /* CLOCK_MONOTONIC seconds */
};

static double get(const struct snap *s, const char *k)
{
	return mstats_get(&s->m, k, 0);
}

/* Which optional column sets a snapshot calls for. */
enum { COL_PEERS = 1, COL_PREP = 2, COL_PREFETCH = 4, COL_TIER = 8 };

static int columns(const struct snap *s)
{
	return (get(s, "peer_nodes") > 0 ? COL_PEERS : 0) | (get(s, "prep_groups") > 0 ? COL_PREP : 0) |
	       (get(s, "tier_dirs") > 0 ? COL_TIER : 0) |
	       (get(s, "order_streams") > 0 || get(s, "prefetch_bytes") > 0 ? COL_PREFETCH : 0);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-stat MOUNTPOINT [--interval SEC] [--count N] [--json]\n"
		"\n"
		"Prints what an epochfs mount is doing, one line per interval: MB/s and\n"
		"reads/s the daemon served, the share of those bytes the RAM cache hit,\n"
		"MB/s read from storage, and the cache's fill. The first line averages\n"
		"everything since the mount. With peers: MB/s fetched from and served to\n"
		"other nodes, and how many of them are up. With prep groups: images made\n"
		"per second and the cores the prep workers kept busy. With orders\n"
		"(.epochfs/order/, epochfs-run): MB/s fetched ahead, reads/s served from\n"
		"staging, late reads/s, MB/s wasted, staging MiB. Reads answered by\n"
		"the kernel's page cache never reach the daemon and are not counted.\n"
		"  --interval SEC  seconds between lines (default 1; fractions allowed)\n"
		"  --count N       stop after N lines (default: until interrupted)\n"
		"  --json          one JSON object per line instead of the table\n"
		"  -V, --version   print the version\n");
}

/* The growth of counter K from A to B (A NULL: since the mount). */
static double delta(const struct snap *a, const struct snap *b, const char *k)
{
	return get(b, k) - (a ? get(a, k) : 0);
}

/* Prints the line for the span from A to B (A NULL: since the mount) with
 * the optional columns COLS. */
static void line(const struct snap *a, const struct snap *b, int json, int cols)
{
	double dt = a ? b->t - a->t : get(b, "uptime_s");
	double rb = delta(a, b, "read_bytes"), rd = delta(a, b, "reads");
	double hb = delta(a, b, "cache_hit_bytes"), sb = delta(a, b, "storage_read_bytes");
	double err = delta(a, b, "read_errors"), bad = delta(a, b, "cache_corrupt");
	double used = get(b, "cache_used_bytes"), cap = get(b, "cache_capacity_bytes");
	double hit = rb > 0 ? hb / rb : NAN;
	double pin = delta(a, b, "peer_read_bytes"), pout = delta(a, b, "peer_served_bytes");
	double perr = delta(a, b, "peer_errors"), up = get(b, "peers_up"), nodes = get(b, "peer_nodes");
	double img = delta(a, b, "prep_images"), cpu = delta(a, b, "prep_cpu_seconds");
	double pfb = delta(a, b, "prefetch_bytes"), pfh = delta(a, b, "prefetch_hits");
	double pfl = delta(a, b, "prefetch_late"), pfw = delta(a, b, "prefetch_wasted_bytes");
	double staged = get(b, "prefetch_staged_bytes"), streams = get(b, "order_streams");
	double jw = delta(a, b, "job_wait_us"), jr = delta(a, b, "job_run_us");
	double wait = jr > 0 ? jw / jr : NAN;
	double tb = delta(a, b, "tier_hit_bytes"), tused = get(b, "tier_used_bytes");
	double tcap = get(b, "tier_capacity_bytes");

	if (dt <= 0)
		dt = 1e-9;
	if (json) {
		char hs[32] = "null", ws[32] = "null", vs[MSTATS_TEXT + 2] = "null";
		const char *ver = mstats_text(&b->m, "version");
		if (ver)
			snprintf(vs, sizeof(vs), "\"%s\"", ver);
		if (!isnan(hit))
			snprintf(hs, sizeof(hs), "%.4f", hit);
		if (!isnan(wait))
			snprintf(ws, sizeof(ws), "%.4f", wait);
		printf("{\"since_mount\": %s, \"daemon_version\": %s, \"seconds\": %.3f, \"read_mb_s\": %.3f, "
		       "\"reads_per_s\": %.1f, \"hit_ratio\": %s, \"storage_mb_s\": %.3f, "
		       "\"cache_used_bytes\": %.0f, \"cache_capacity_bytes\": %.0f, "
		       "\"cache_items\": %.0f, \"read_errors\": %.0f, \"cache_corrupt\": %.0f, "
		       "\"peer_nodes\": %.0f, \"peers_up\": %.0f, \"peer_read_mb_s\": %.3f, "
		       "\"peer_served_mb_s\": %.3f, \"peer_errors\": %.0f, "
		       "\"prep_images_per_s\": %.3f, \"prep_cores\": %.3f, \"order_streams\": %.0f, "
		       "\"prefetch_mb_s\": %.3f, \"prefetch_hits_per_s\": %.1f, "
		       "\"prefetch_late_per_s\": %.1f, \"prefetch_wasted_mb_s\": %.3f, "
		       "\"prefetch_staged_bytes\": %.0f, \"data_wait\": %s, \"tier_hit_ratio\": %.4f, "
		       "\"tier_mb_s\": %.3f, \"tier_used_bytes\": %.0f, \"tier_capacity_bytes\": %.0f, "
		       "\"tier_items\": %.0f, \"ram_adopted\": %.0f, \"ram_dropped_at_mount\": %.0f, "
		       "\"tier_adopted\": %.0f, \"tier_dropped_at_mount\": %.0f}\n",
		       a ? "false" : "true", vs, dt, rb / 1e6 / dt, rd / dt, hs, sb / 1e6 / dt, used, cap,
		       get(b, "cache_items"), err, bad, nodes, up, pin / 1e6 / dt, pout / 1e6 / dt, perr,
		       img / dt, cpu / dt, streams, pfb / 1e6 / dt, pfh / dt, pfl / dt, pfw / 1e6 / dt,
		       staged, ws, rb > 0 ? tb / rb : 0, tb / 1e6 / dt, tused, tcap, get(b, "tier_items"),
		       get(b, "persist_adopted"), get(b, "persist_dropped_changed") + get(b, "persist_dropped_corrupt") +
		       get(b, "persist_dropped_other"), get(b, "tier_adopted"), get(b, "tier_dropped"));
	} else {
		char hs[16] = "     -", fill[16] = "   off";
		if (!isnan(hit))
			snprintf(hs, sizeof(hs), "%5.1f%%", 100 * hit);
		if (cap > 0)
			snprintf(fill, sizeof(fill), "%5.1f%%", 100 * used / cap);
		printf("%-8s %10.1f %9.0f %6s %12.1f %9.2f %6s %9.0f %6.0f %7.0f",
		       a ? "" : "mount", rb / 1e6 / dt, rd / dt, hs, sb / 1e6 / dt, used / 1073741824.0,
		       fill, get(b, "cache_items"), err, bad);
		if (cols & COL_PEERS) {
			char ups[24];
			snprintf(ups, sizeof(ups), "%.0f/%.0f", up, nodes - 1);     /* the other nodes */
			printf(" %9.1f %9.1f %6s %7.0f", pin / 1e6 / dt, pout / 1e6 / dt, ups, perr);
		}
		if (cols & COL_PREP)
			printf(" %9.0f %6.2f", img / dt, cpu / dt);
		if (cols & COL_TIER) {
			char th[16] = "     -", tf[16] = "   off";
			if (rb > 0)
				snprintf(th, sizeof(th), "%5.1f%%", 100 * tb / rb);
			if (tcap > 0)
				snprintf(tf, sizeof(tf), "%5.1f%%", 100 * tused / tcap);
			printf(" %6s %9.1f %8.2f %6s %9.0f", th, tb / 1e6 / dt, tused / 1073741824.0, tf,
			       get(b, "tier_items"));
		}
		if (cols & COL_PREFETCH) {
			char wt[16] = "     -";
			if (!isnan(wait))
				snprintf(wt, sizeof(wt), "%5.1f%%", 100 * wait);
			printf(" %10.1f %8.0f %6.0f %10.1f %9.1f %6s", pfb / 1e6 / dt, pfh / dt, pfl / dt,
			       pfw / 1e6 / dt, staged / 1048576.0, wt);
		}
		putchar('\n');
	}
	fflush(stdout);
}

static void header(int cols)
{
	printf("%-8s %10s %9s %6s %12s %9s %6s %9s %6s %7s", "", "read MB/s", "reads/s", "hit",
	       "storage MB/s", "cache GiB", "fill", "items", "errors", "corrupt");
	if (cols & COL_PEERS)
		printf(" %9s %9s %6s %7s", "peer MB/s", "served", "up", "perr");
	if (cols & COL_PREP)
		printf(" %9s %6s", "prep im/s", "cores");
	if (cols & COL_TIER)
		printf(" %6s %9s %8s %6s %9s", "tier", "tier MB/s", "tier GiB", "fill", "items");
	if (cols & COL_PREFETCH)
		printf(" %10s %8s %6s %10s %9s %6s", "ahead MB/s", "staged/s", "late", "waste MB/s", "stage MiB",
		       "wait");
	putchar('\n');
}

static int take(const char *file, const char *mnt, struct snap *s)
{
	int err = mstats_read(file, &s->m);

	s->t = clock_now();
	if (err < 0)
		fprintf(stderr, "epochfs-stat: error: %s: cannot read its counters: %s\n", mnt,
			err == -EBADMSG ? "not the stats format this tool knows" : strerror(-err));
	return err;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "interval", required_argument, NULL, 'i' }, { "count", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },           { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1;
	unsigned count = 0;
	int c, json = 0;
	char file[PATH_MAX + 32];
	struct snap prev, cur;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'i':
			errno = 0;
			interval = strtod(optarg, &end);
			if (errno || *end || !(interval >= 0.05 && interval <= 86400)) {
				fprintf(stderr, "epochfs-stat: error: --interval %s: expected seconds "
					"between 0.05 and 86400\n", optarg);
				return 2;
			}
			break;
		case 'c':
			if (options_parse_uint(optarg, 1, 4000000000u, &count)) {
				fprintf(stderr, "epochfs-stat: error: --count %s: expected a positive "
					"number\n", optarg);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("epochfs-stat %s\n", EPOCHFS_VERSION); return 0;
		default:
			fprintf(stderr, "epochfs-stat: error: %s: unknown option or missing value "
				"(see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "epochfs-stat: error: expected exactly one MOUNTPOINT (see --help)\n");
		return 2;
	}
	const char *mnt = argv[optind];
	int err = mstats_find(mnt, file, sizeof(file));
	if (err < 0) {
		fprintf(stderr, "epochfs-stat: error: %s: %s\n", mnt,
			err == -ENOENT ? "not inside an epochfs mount (no .epochfs/stats.json)"
				       : strerror(-err));
		return 1;
	}
	if (take(file, mnt, &prev) < 0)
		return 1;
	int cols = columns(&prev);
	if (!json && (get(&prev, "persist_found") > 0 || get(&prev, "tier_adopted") > 0 ||
		      get(&prev, "tier_dropped") > 0)) {
		/* What a restart kept: once, above the table. */
		double dr = get(&prev, "persist_dropped_changed") + get(&prev, "persist_dropped_corrupt") +
			    get(&prev, "persist_dropped_other");
		printf("at mount: the RAM cache adopted %.0f items (%.2f GB), dropped %.0f%s", get(&prev, "persist_adopted"),
		       get(&prev, "persist_adopted_bytes") / 1e9, dr,
		       get(&prev, "persist_discarded") > 0 ? " (its state was discarded)" : "");
		if (get(&prev, "tier_dirs") > 0)
			printf("; the SSD tier adopted %.0f items (%.2f GB), dropped %.0f", get(&prev, "tier_adopted"),
			       get(&prev, "tier_adopted_bytes") / 1e9, get(&prev, "tier_dropped"));
		printf("\n");
	}
	if (!json)
		header(cols);
	line(NULL, &prev, json, cols);
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (unsigned n = 1; !count || n < count; n++) {
		clock_add(&next, interval);         /* from the last due time: no drift */
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		if (take(file, mnt, &cur) < 0)
			return 1;
		int now_cols = columns(&cur);
		if (!json && (n % 24 == 0 || now_cols != cols))
			header(now_cols);
		cols = now_cols;
		line(&prev, &cur, json, cols);
		prev = cur;
	}
	return 0;
}
