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

struct snap {
	struct mstats m;
	double t;                   /* CLOCK_MONOTONIC seconds */
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double get(const struct snap *s, const char *k)
{
	return mstats_get(&s->m, k, 0);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-stat MOUNTPOINT [--interval SEC] [--count N] [--json]\n"
		"\n"
		"Prints what an epochfs mount is doing, one line per interval: MB/s and\n"
		"reads/s the daemon served, the share of those bytes the RAM cache hit,\n"
		"MB/s read from storage, and the cache's fill. The first line averages\n"
		"everything since the mount. Reads answered by the kernel's page cache\n"
		"never reach the daemon and are not counted.\n"
		"  --interval SEC  seconds between lines (default 1; fractions allowed)\n"
		"  --count N       stop after N lines (default: until interrupted)\n"
		"  --json          one JSON object per line instead of the table\n");
}

/* Prints the line for the span from A to B (A NULL: since the mount). */
static void line(const struct snap *a, const struct snap *b, int json)
{
	double dt = a ? b->t - a->t : get(b, "uptime_s");
	double rb = get(b, "read_bytes") - (a ? get(a, "read_bytes") : 0);
	double rd = get(b, "reads") - (a ? get(a, "reads") : 0);
	double hb = get(b, "cache_hit_bytes") - (a ? get(a, "cache_hit_bytes") : 0);
	double sb = get(b, "storage_read_bytes") - (a ? get(a, "storage_read_bytes") : 0);
	double err = get(b, "read_errors") - (a ? get(a, "read_errors") : 0);
	double bad = get(b, "cache_corrupt") - (a ? get(a, "cache_corrupt") : 0);
	double used = get(b, "cache_used_bytes"), cap = get(b, "cache_capacity_bytes");
	double hit = rb > 0 ? hb / rb : NAN;

	if (dt <= 0)
		dt = 1e-9;
	if (json) {
		char hs[32] = "null";
		if (!isnan(hit))
			snprintf(hs, sizeof(hs), "%.4f", hit);
		printf("{\"since_mount\": %s, \"seconds\": %.3f, \"read_mb_s\": %.3f, "
		       "\"reads_per_s\": %.1f, \"hit_ratio\": %s, \"storage_mb_s\": %.3f, "
		       "\"cache_used_bytes\": %.0f, \"cache_capacity_bytes\": %.0f, "
		       "\"cache_items\": %.0f, \"read_errors\": %.0f, \"cache_corrupt\": %.0f}\n",
		       a ? "false" : "true", dt, rb / 1e6 / dt, rd / dt, hs, sb / 1e6 / dt, used, cap,
		       get(b, "cache_items"), err, bad);
	} else {
		char hs[16] = "     -", fill[16] = "   off";
		if (!isnan(hit))
			snprintf(hs, sizeof(hs), "%5.1f%%", 100 * hit);
		if (cap > 0)
			snprintf(fill, sizeof(fill), "%5.1f%%", 100 * used / cap);
		printf("%-8s %10.1f %9.0f %6s %12.1f %9.2f %6s %9.0f %6.0f %7.0f\n",
		       a ? "" : "mount", rb / 1e6 / dt, rd / dt, hs, sb / 1e6 / dt, used / 1073741824.0,
		       fill, get(b, "cache_items"), err, bad);
	}
	fflush(stdout);
}

static void header(void)
{
	printf("%-8s %10s %9s %6s %12s %9s %6s %9s %6s %7s\n", "", "read MB/s", "reads/s", "hit",
	       "storage MB/s", "cache GiB", "fill", "items", "errors", "corrupt");
}

static int take(const char *file, const char *mnt, struct snap *s)
{
	int err = mstats_read(file, &s->m);

	s->t = mono();
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
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1;
	unsigned count = 0;
	int c, json = 0;
	char file[PATH_MAX + 32];
	struct snap prev, cur;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
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
	if (!json)
		header();
	line(NULL, &prev, json);
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (unsigned n = 1; !count || n < count; n++) {
		long long ns = (long long)next.tv_nsec + (long long)(interval * 1e9);
		next.tv_sec += ns / 1000000000;
		next.tv_nsec = ns % 1000000000;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		if (take(file, mnt, &cur) < 0)
			return 1;
		if (!json && n % 24 == 0)
			header();
		line(&prev, &cur, json);
		prev = cur;
	}
	return 0;
}
