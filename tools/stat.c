/* stat.c - epochfs-stat: what an epochfs mount is doing, and where the
 * bytes are.
 *
 * With a MOUNTPOINT, a live table like vmstat or `juicefs stats`: one row
 * per interval (default 1 s), each row the deltas of two snapshots of
 * .epochfs/stats.json divided by the time between them on the monotonic
 * clock: the MB/s the daemon served, the share the RAM cache answered,
 * what it read from storage, how full the cache is, and column sets for
 * peers, prep groups, the SSD tier and orders. What happened before the
 * tool started is said once, in a labelled line above the header, never
 * as a row. --json prints one object per line for scripts (the first
 * covers the time since the mount, "since_mount": true).
 *
 * The other modes are one-shot listings: --mounts (stat_list.c), --states
 * and --free-states (stat_list.c, over store/persist.h), --file
 * (stat_file.c, over user.epochfs.where and mincore).
 *
 * DESIGN
 * - Units: decimal MB and MB/s everywhere (stat_int.h), in the header, the
 *   rows and --help alike; the cache's fill is used/capacity in MB with
 *   the decimals a small cache needs.
 * - A stable header: the column sets are decided at the start, from
 *   --columns or from what the first snapshot shows configured or used
 *   (peers and a tier are configured; prep and orders show once used). A
 *   set that comes into use later is added, the header printed again, and
 *   it stays: a row never changes shape because a stream ended.
 * - One table of columns (cols[]) feeds the header, the rows and --help,
 *   so the three cannot disagree.
 * - Reads the kernel answers from its own page cache never reach the
 *   daemon, so they are in none of these numbers (docs/design.md,
 *   "Counters").
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mstats.h"
#include "options.h"
#include "stat_int.h"
#include "util/clock.h"
#include "util/version.h"

#define HEADER_EVERY 24             /* rows between headers on a terminal */

struct snap {
	struct mstats m;
	double t;                   /* CLOCK_MONOTONIC seconds */
};

static double get(const struct snap *s, const char *k)
{
	return mstats_get(&s->m, k, 0);
}

/* ---- shared helpers (stat_int.h) ---- */

void stat_mb(char *buf, size_t len, double bytes)
{
	double mb = bytes / 1e6;

	snprintf(buf, len, "%.*f", fabs(mb) < 100 ? 2 : fabs(mb) < 10000 ? 1 : 0, mb);
}

void stat_fill(char *buf, size_t len, double used, double cap)
{
	double mb = cap / 1e6;
	int prec = mb < 100 ? 2 : mb < 10000 ? 1 : 0;

	if (cap <= 0)
		snprintf(buf, len, "off");
	else
		snprintf(buf, len, "%.*f/%.*f", prec, used / 1e6, prec, mb);
}

void stat_uptime(char *buf, size_t len, double s)
{
	unsigned long t = s > 0 ? (unsigned long)s : 0;

	if (t >= 86400)
		snprintf(buf, len, "%lud%02luh%02lum", t / 86400, t / 3600 % 24, t / 60 % 60);
	else if (t >= 3600)
		snprintf(buf, len, "%luh%02lum%02lus", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%lum%02lus", t / 60, t % 60);
}

void stat_json_str(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* ---- the live table ---- */

/* The optional column sets. */
enum { SET_BASE = 0, SET_PEERS = 1, SET_PREP = 2, SET_TIER = 4, SET_ORDERS = 8, SET_ALL = 15 };

static const struct {
	const char *name;
	int bit;
	const char *help;
} sets[] = {
	{ "peers", SET_PEERS, "shown when the mount has peers (--peers)" },
	{ "prep", SET_PREP, "shown once a prep group exists (.prep/)" },
	{ "tier", SET_TIER, "shown when the mount has an SSD tier (--cache-dir)" },
	{ "orders", SET_ORDERS, "shown once a job wrote an order (.epochfs/order/, epochfs-run)" },
};

/* One interval's figures, from the deltas of two snapshots. */
struct row {
	double dt;
	double rb, rd, hb, sb, err, bad, used, cap, items;
	double pin, pout, perr, up, nodes;
	double img, cpu;
	double tb, tused, tcap, titems;
	double pfb, pfh, pfl, pfw, staged, jw, jr;
};

enum col_id {
	C_READ, C_READS, C_HIT, C_STORAGE, C_CACHE, C_ITEMS, C_ERRORS, C_CORRUPT,
	C_PEER, C_SERVED, C_UP, C_PERR,
	C_PREP, C_CORES,
	C_THIT, C_TMB, C_TFILL, C_TITEMS,
	C_AHEAD, C_STAGED, C_LATE, C_WASTE, C_STAGE, C_JOBWAIT,
};

static const struct col {
	enum col_id id;
	int set, width;
	const char *head, *help;
} cols[] = {
	{ C_READ, SET_BASE, 9, "read MB/s", "MB/s the daemon served to readers" },
	{ C_READS, SET_BASE, 8, "reads/s", "read requests per second" },
	{ C_HIT, SET_BASE, 6, "hit%", "share of the bytes read that the RAM cache answered (-: none read)" },
	{ C_STORAGE, SET_BASE, 12, "storage MB/s", "MB/s read from SOURCE" },
	{ C_CACHE, SET_BASE, 15, "cache MB", "the RAM cache's fill: MB used/MB it may use (off: no cache)" },
	{ C_ITEMS, SET_BASE, 8, "items", "items in the RAM cache" },
	{ C_ERRORS, SET_BASE, 6, "errors", "reads answered with an error in the interval" },
	{ C_CORRUPT, SET_BASE, 7, "corrupt", "cached items that failed their checksum in the interval (read again)" },
	{ C_PEER, SET_PEERS, 9, "peer MB/s", "MB/s fetched from other nodes' caches" },
	{ C_SERVED, SET_PEERS, 11, "served MB/s", "MB/s served to other nodes" },
	{ C_UP, SET_PEERS, 5, "up", "other nodes answering/other nodes" },
	{ C_PERR, SET_PEERS, 5, "perr", "failed peer fetches in the interval (storage answered)" },
	{ C_PREP, SET_PREP, 9, "prep im/s", "images the prep workers made per second" },
	{ C_CORES, SET_PREP, 5, "cores", "CPU-seconds per second the prep workers used" },
	{ C_THIT, SET_TIER, 9, "tier hit%", "share of the bytes read that the SSD tier answered" },
	{ C_TMB, SET_TIER, 9, "tier MB/s", "MB/s read from the SSD tier" },
	{ C_TFILL, SET_TIER, 15, "tier MB", "the tier's fill: MB used/MB it may use" },
	{ C_TITEMS, SET_TIER, 10, "tier items", "items in the tier" },
	{ C_AHEAD, SET_ORDERS, 10, "ahead MB/s", "MB/s fetched ahead of the readers, following their orders" },
	{ C_STAGED, SET_ORDERS, 8, "staged/s", "reads per second served from what was fetched ahead" },
	{ C_LATE, SET_ORDERS, 6, "late/s", "reads per second that came before their fetch ahead was done" },
	{ C_WASTE, SET_ORDERS, 10, "waste MB/s", "MB/s fetched ahead and dropped unread" },
	{ C_STAGE, SET_ORDERS, 8, "stage MB", "MB held fetched ahead, waiting for their readers" },
	{ C_JOBWAIT, SET_ORDERS, 8, "jobwait%",
	  "share of the interval the jobs' DataLoaders waited for data, as jobs under epochfs-run report "
	  "it (#wait lines in their orders); -: no job reported" },
};
#define NCOLS (sizeof(cols) / sizeof(cols[0]))

static void figures(const struct snap *a, const struct snap *b, struct row *r)
{
#define D(k) (get(b, k) - get(a, k))
	r->dt = b->t - a->t > 0 ? b->t - a->t : 1e-9;
	r->rb = D("read_bytes"), r->rd = D("reads"), r->hb = D("cache_hit_bytes");
	r->sb = D("storage_read_bytes"), r->err = D("read_errors"), r->bad = D("cache_corrupt");
	r->used = get(b, "cache_used_bytes"), r->cap = get(b, "cache_capacity_bytes");
	r->items = get(b, "cache_items");
	r->pin = D("peer_read_bytes"), r->pout = D("peer_served_bytes"), r->perr = D("peer_errors");
	r->up = get(b, "peers_up"), r->nodes = get(b, "peer_nodes");
	r->img = D("prep_images"), r->cpu = D("prep_cpu_seconds");
	r->tb = D("tier_hit_bytes"), r->tused = get(b, "tier_used_bytes"), r->tcap = get(b, "tier_capacity_bytes");
	r->titems = get(b, "tier_items");
	r->pfb = D("prefetch_bytes"), r->pfh = D("prefetch_hits"), r->pfl = D("prefetch_late");
	r->pfw = D("prefetch_wasted_bytes"), r->staged = get(b, "prefetch_staged_bytes");
	r->jw = D("job_wait_us"), r->jr = D("job_run_us");
#undef D
}

/* A share NUM/DEN in percent, or "-" when DEN is 0. */
static void pct(char *buf, size_t len, double num, double den)
{
	if (den > 0)
		snprintf(buf, len, "%.1f", 100 * num / den);
	else
		snprintf(buf, len, "-");
}

static void cell(enum col_id id, const struct row *r, char *buf, size_t len)
{
	double dt = r->dt;

	switch (id) {
	case C_READ: snprintf(buf, len, "%.1f", r->rb / 1e6 / dt); break;
	case C_READS: snprintf(buf, len, "%.0f", r->rd / dt); break;
	case C_HIT: pct(buf, len, r->hb, r->rb); break;
	case C_STORAGE: snprintf(buf, len, "%.1f", r->sb / 1e6 / dt); break;
	case C_CACHE: stat_fill(buf, len, r->used, r->cap); break;
	case C_ITEMS: snprintf(buf, len, "%.0f", r->items); break;
	case C_ERRORS: snprintf(buf, len, "%.0f", r->err); break;
	case C_CORRUPT: snprintf(buf, len, "%.0f", r->bad); break;
	case C_PEER: snprintf(buf, len, "%.1f", r->pin / 1e6 / dt); break;
	case C_SERVED: snprintf(buf, len, "%.1f", r->pout / 1e6 / dt); break;
	case C_UP:
		if (r->nodes > 0)
			snprintf(buf, len, "%.0f/%.0f", r->up, r->nodes - 1);     /* the other nodes */
		else
			snprintf(buf, len, "-");
		break;
	case C_PERR: snprintf(buf, len, "%.0f", r->perr); break;
	case C_PREP: snprintf(buf, len, "%.0f", r->img / dt); break;
	case C_CORES: snprintf(buf, len, "%.2f", r->cpu / dt); break;
	case C_THIT: pct(buf, len, r->tb, r->rb); break;
	case C_TMB: snprintf(buf, len, "%.1f", r->tb / 1e6 / dt); break;
	case C_TFILL: stat_fill(buf, len, r->tused, r->tcap); break;
	case C_TITEMS: snprintf(buf, len, "%.0f", r->titems); break;
	case C_AHEAD: snprintf(buf, len, "%.1f", r->pfb / 1e6 / dt); break;
	case C_STAGED: snprintf(buf, len, "%.0f", r->pfh / dt); break;
	case C_LATE: snprintf(buf, len, "%.0f", r->pfl / dt); break;
	case C_WASTE: snprintf(buf, len, "%.1f", r->pfw / 1e6 / dt); break;
	case C_STAGE: stat_mb(buf, len, r->staged); break;
	case C_JOBWAIT: pct(buf, len, r->jw, r->jr); break;
	}
}

static void header(int set)
{
	const char *sep = "";

	for (size_t i = 0; i < NCOLS; i++) {
		if (cols[i].set && !(cols[i].set & set))
			continue;
		printf("%s%*s", sep, cols[i].width, cols[i].head);
		sep = " ";
	}
	putchar('\n');
}

static void table_row(const struct row *r, int set)
{
	const char *sep = "";
	char buf[64];

	for (size_t i = 0; i < NCOLS; i++) {
		if (cols[i].set && !(cols[i].set & set))
			continue;
		cell(cols[i].id, r, buf, sizeof(buf));
		printf("%s%*s", sep, cols[i].width, buf);
		sep = " ";
	}
	putchar('\n');
	fflush(stdout);
}

/* The sets a snapshot calls for: features configured (peers, a tier), or
 * in use since the mount (prep groups, orders). */
static int sets_of(const struct snap *s)
{
	return (get(s, "peer_nodes") > 0 ? SET_PEERS : 0) | (get(s, "tier_dirs") > 0 ? SET_TIER : 0) |
	       (get(s, "prep_groups") > 0 || get(s, "prep_images") > 0 ? SET_PREP : 0) |
	       (get(s, "order_streams") > 0 || get(s, "prefetch_bytes") > 0 || get(s, "job_run_us") > 0
			? SET_ORDERS : 0);
}

/* One JSON object for the span from A to B (A NULL: since the mount). The
 * keys are a stable interface (tests/integration/t_stat.sh, docs). */
static void json_row(const struct snap *a, const struct snap *b)
{
	static const struct snap zero;
	const struct snap *from = a ? a : &zero;
	struct row r;
	char hs[32] = "null", ws[32] = "null";

	figures(from, b, &r);
	if (!a)
		r.dt = get(b, "uptime_s") > 0 ? get(b, "uptime_s") : 1e-9;
	double dt = r.dt;
	if (r.rb > 0)
		snprintf(hs, sizeof(hs), "%.4f", r.hb / r.rb);
	if (r.jr > 0)
		snprintf(ws, sizeof(ws), "%.4f", r.jw / r.jr);
	printf("{\"since_mount\": %s, \"daemon_version\": ", a ? "false" : "true");
	stat_json_str(stdout, mstats_text(&b->m, "version"));
	printf(", \"seconds\": %.3f, \"read_mb_s\": %.3f, "
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
	       dt, r.rb / 1e6 / dt, r.rd / dt, hs, r.sb / 1e6 / dt, r.used, r.cap, r.items, r.err, r.bad,
	       r.nodes, r.up, r.pin / 1e6 / dt, r.pout / 1e6 / dt, r.perr, r.img / dt, r.cpu / dt,
	       get(b, "order_streams"), r.pfb / 1e6 / dt, r.pfh / dt, r.pfl / dt, r.pfw / 1e6 / dt, r.staged, ws,
	       r.rb > 0 ? r.tb / r.rb : 0, r.tb / 1e6 / dt, r.tused, r.tcap, r.titems, get(b, "persist_adopted"),
	       get(b, "persist_dropped_changed") + get(b, "persist_dropped_corrupt") + get(b, "persist_dropped_other"),
	       get(b, "tier_adopted"), get(b, "tier_dropped"));
	fflush(stdout);
}

/* What happened before the table: a restart's adoption, and the totals
 * since the mount, each once, labelled, above the header. */
static void preamble(const struct snap *s, int set)
{
	char up[32], a[32], b[32], hit[16];

	if (get(s, "persist_found") > 0 || get(s, "tier_adopted") > 0 || get(s, "tier_dropped") > 0) {
		double dr = get(s, "persist_dropped_changed") + get(s, "persist_dropped_corrupt") +
			    get(s, "persist_dropped_other");
		stat_mb(a, sizeof(a), get(s, "persist_adopted_bytes"));
		printf("at mount: the RAM cache adopted %.0f items (%s MB), dropped %.0f%s", get(s, "persist_adopted"),
		       a, dr, get(s, "persist_discarded") > 0 ? " (its state was discarded)" : "");
		if (get(s, "tier_dirs") > 0) {
			stat_mb(a, sizeof(a), get(s, "tier_adopted_bytes"));
			printf("; the SSD tier adopted %.0f items (%s MB), dropped %.0f", get(s, "tier_adopted"), a,
			       get(s, "tier_dropped"));
		}
		printf("\n");
	}
	stat_uptime(up, sizeof(up), get(s, "uptime_s"));
	if (get(s, "read_bytes") <= 0 && get(s, "peer_served_bytes") <= 0 && get(s, "prep_images") <= 0) {
		printf("since mount (%s ago): nothing read yet\n", up);
		return;
	}
	stat_mb(a, sizeof(a), get(s, "read_bytes"));
	stat_mb(b, sizeof(b), get(s, "storage_read_bytes"));
	pct(hit, sizeof(hit), get(s, "cache_hit_bytes"), get(s, "read_bytes"));
	printf("since mount (%s ago): %s MB read in %.0f reads, %s%s of it from the RAM cache, %s MB from storage",
	       up, a, get(s, "reads"), hit, strcmp(hit, "-") ? "%" : "", b);
	if (set & SET_TIER) {
		pct(hit, sizeof(hit), get(s, "tier_hit_bytes"), get(s, "read_bytes"));
		printf(", %s%s from the SSD tier", hit, strcmp(hit, "-") ? "%" : "");
	}
	if (set & SET_PEERS) {
		stat_mb(a, sizeof(a), get(s, "peer_read_bytes"));
		printf(", %s MB from peers", a);
	}
	if (set & SET_PREP)
		printf(", %.0f images made", get(s, "prep_images"));
	if (set & SET_ORDERS) {
		stat_mb(a, sizeof(a), get(s, "prefetch_bytes"));
		pct(hit, sizeof(hit), get(s, "job_wait_us"), get(s, "job_run_us"));
		printf(", %s MB fetched ahead, jobs waited for data %s%s of the time", a, hit, strcmp(hit, "-") ? "%" : "");
	}
	printf(", %.0f read errors\n", get(s, "read_errors"));
}

/* "  HEAD  HELP", HELP wrapped at 79 columns under itself. */
static void help_line(FILE *f, const char *head, const char *help)
{
	const int at = 16, width = 79;
	int col = fprintf(f, "  %-13s", head);

	while (*help) {
		size_t w = strcspn(help, " ");
		if (col > at && col + 1 + (int)w > width)
			col = fprintf(f, "\n%*s", at - 1, "") - 1;
		col += fprintf(f, " %.*s", (int)w, help);
		help += w;
		help += strspn(help, " ");
	}
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-stat MOUNTPOINT [--interval SEC] [--count N] [--columns SETS] [--json]\n"
		"       epochfs-stat --mounts [--json]\n"
		"       epochfs-stat --states [ROOT] [--json]\n"
		"       epochfs-stat --free-states [ROOT] [--json]\n"
		"       epochfs-stat --file PATH... [--json]\n"
		"\n"
		"With a MOUNTPOINT, prints what the epochfs mount is doing: a line of totals\n"
		"since the mount, a header, then one row per interval, each row covering that\n"
		"interval only. Sizes are decimal megabytes (1 MB = 10^6 bytes), rates MB/s.\n"
		"Reads the kernel answers from its page cache never reach the daemon and are\n"
		"in no column.\n"
		"  --interval SEC  seconds between rows (default 1; fractions allowed)\n"
		"  --count N       stop after N rows (default: until interrupted)\n"
		"  --columns SETS  the optional column sets, comma-separated, fixed for the run:\n"
		"                  peers, prep, tier, orders, all or none. Default: those the\n"
		"                  mount is configured or used for at the start; a set that\n"
		"                  comes into use later is added (the header printed again)\n"
		"                  and stays\n"
		"  --json          one JSON object per line instead of the table, values in\n"
		"                  bytes and MB/s; the first covers the time since the mount\n"
		"                  (\"since_mount\": true), and --count counts it\n"
		"\n"
		"Columns:\n");
	for (size_t i = 0; i < NCOLS; i++) {
		if (i == 0 || cols[i].set != cols[i - 1].set) {
			for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
				if (sets[k].bit == cols[i].set)
					fprintf(f, "The %s set, %s:\n", sets[k].name, sets[k].help);
		}
		help_line(f, cols[i].head, cols[i].help);
	}
	fprintf(f,
		"\n"
		"Other modes (one-shot):\n"
		"  --mounts        the epochfs mounts of this machine: mount point, SOURCE,\n"
		"                  whether the daemon answers, its RAM cache's fill in MB, the\n"
		"                  share of bytes read the RAM cache answered since the mount.\n"
		"                  Exit 1 when a mount does not answer (its daemon is gone)\n"
		"  --states [ROOT] the RAM cache states left in memory (default root\n"
		"                  /dev/shm/epochfs-UID; as root, every user's): the state\n"
		"                  directory, whether a daemon holds it, the memory it holds\n"
		"                  (MB), kept on purpose or not, its mount point and SOURCE.\n"
		"                  Entries that cannot be trusted (links, other owners, loose\n"
		"                  modes) are named and skipped, never followed\n"
		"  --free-states [ROOT]  frees the states no daemon holds, saying what each gave\n"
		"                  back; a state a daemon holds is never touched\n"
		"  --file PATH...  for each file of a mount: how many of its bytes the next read\n"
		"                  finds in the RAM cache, the prefetch staging, the SSD tier, on\n"
		"                  a peer (named), or must fetch from storage; and how many the\n"
		"                  kernel's page cache holds above the daemon (mincore)\n"
		"  -V, --version   print the version\n"
		"\n"
		"Exit status: 0; 1 when a mount cannot be read, a mount does not answer, a state\n"
		"was skipped or not freed, or a file could not be looked at; 2 on a usage error.\n");
}

/* --columns SETS into *OUT; 0 or -EINVAL. */
static int parse_sets(const char *arg, int *out)
{
	char buf[128], *save = NULL;
	int set = 0;

	if (strlen(arg) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, arg);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int bit = -1;
		if (!strcmp(t, "all"))
			bit = SET_ALL;
		else if (!strcmp(t, "none") || !strcmp(t, "base"))
			bit = 0;
		for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
			if (!strcmp(t, sets[k].name))
				bit = sets[k].bit;
		if (bit < 0)
			return -EINVAL;
		set |= bit;
	}
	*out = set;
	return 0;
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

static int live(const char *mnt, double interval, unsigned count, int json, int fixed)
{
	char file[PATH_MAX + 32];
	struct snap *prev = malloc(sizeof(*prev)), *cur = malloc(sizeof(*cur));
	int err = mstats_find(mnt, file, sizeof(file)), rc = 1;

	if (!prev || !cur) {
		fprintf(stderr, "epochfs-stat: error: %s\n", strerror(ENOMEM));
		goto out;
	}
	if (err < 0) {
		fprintf(stderr, "epochfs-stat: error: %s: %s\n", mnt,
			err == -ENOENT ? "not inside an epochfs mount (no .epochfs/stats.json)" : strerror(-err));
		goto out;
	}
	if (take(file, mnt, prev) < 0)
		goto out;
	int set = fixed >= 0 ? fixed : sets_of(prev);
	int tty = isatty(STDOUT_FILENO);
	unsigned rows = 0;
	if (json) {
		json_row(NULL, prev);
	} else {
		preamble(prev, set);
		header(set);
		fflush(stdout);
	}
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	/* JSON: COUNT objects, the since-mount one included; table: COUNT rows. */
	for (unsigned n = json ? 1 : 0; !count || n < count; n++) {
		struct row r;
		clock_add(&next, interval);         /* from the last due time: no drift */
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		if (take(file, mnt, cur) < 0)
			goto out;
		if (json) {
			json_row(prev, cur);
		} else {
			int grown = fixed >= 0 ? set : set | sets_of(cur);
			if (grown != set || (tty && rows && rows % HEADER_EVERY == 0))
				header(grown);
			set = grown;
			figures(prev, cur, &r);
			table_row(&r, set);
			rows++;
		}
		struct snap *t = prev;
		prev = cur;
		cur = t;
	}
	rc = 0;
out:
	free(prev);
	free(cur);
	return rc;
}

int main(int argc, char **argv)
{
	enum { OPT_INTERVAL = 256, OPT_COUNT, OPT_JSON, OPT_COLUMNS, OPT_MOUNTS, OPT_STATES, OPT_FREE, OPT_FILE };
	static const struct option lo[] = {
		{ "interval", required_argument, NULL, OPT_INTERVAL }, { "count", required_argument, NULL, OPT_COUNT },
		{ "columns", required_argument, NULL, OPT_COLUMNS },   { "json", no_argument, NULL, OPT_JSON },
		{ "mounts", no_argument, NULL, OPT_MOUNTS },           { "states", no_argument, NULL, OPT_STATES },
		{ "free-states", no_argument, NULL, OPT_FREE },        { "file", no_argument, NULL, OPT_FILE },
		{ "help", no_argument, NULL, 'h' },                  { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1;
	unsigned count = 0;
	int c, json = 0, fixed = -1, mode = 0, live_opt = 0;
	const char *mode_name = NULL;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		char *end;
		switch (c) {
		case OPT_INTERVAL:
			errno = 0;
			interval = strtod(optarg, &end);
			if (errno || *end || !(interval >= 0.05 && interval <= 86400)) {
				fprintf(stderr, "epochfs-stat: error: --interval %s: expected seconds "
					"between 0.05 and 86400\n", optarg);
				return 2;
			}
			live_opt = 1;
			break;
		case OPT_COUNT:
			if (options_parse_uint(optarg, 1, 4000000000u, &count)) {
				fprintf(stderr, "epochfs-stat: error: --count %s: expected a positive "
					"number\n", optarg);
				return 2;
			}
			live_opt = 1;
			break;
		case OPT_COLUMNS:
			if (parse_sets(optarg, &fixed)) {
				fprintf(stderr, "epochfs-stat: error: --columns %s: expected sets among peers, "
					"prep, tier, orders, all, none, separated by commas\n", optarg);
				return 2;
			}
			live_opt = 1;
			break;
		case OPT_JSON: json = 1; break;
		case OPT_MOUNTS: case OPT_STATES: case OPT_FREE: case OPT_FILE:
			if (mode && mode != c) {
				fprintf(stderr, "epochfs-stat: error: %s and %s: one mode at a time (see --help)\n",
					mode_name, argv[optind - 1]);
				return 2;
			}
			mode = c;
			mode_name = argv[optind - 1];
			break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("epochfs-stat %s\n", EPOCHFS_VERSION); return 0;
		default:
			fprintf(stderr, "epochfs-stat: error: %s: unknown option or missing value "
				"(see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	int nargs = argc - optind;
	if (mode && live_opt) {
		fprintf(stderr, "epochfs-stat: error: --interval, --count and --columns are for the live "
			"table of a MOUNTPOINT, not %s\n", mode_name);
		return 2;
	}
	switch (mode) {
	case OPT_MOUNTS:
		if (nargs) {
			fprintf(stderr, "epochfs-stat: error: --mounts takes no argument\n");
			return 2;
		}
		return stat_mounts(json);
	case OPT_STATES:
	case OPT_FREE:
		if (nargs > 1) {
			fprintf(stderr, "epochfs-stat: error: %s takes one ROOT at most\n", mode_name);
			return 2;
		}
		return stat_states(nargs ? argv[optind] : NULL, mode == OPT_FREE, json);
	case OPT_FILE:
		if (!nargs) {
			fprintf(stderr, "epochfs-stat: error: --file needs a PATH (see --help)\n");
			return 2;
		}
		return stat_files(argv + optind, nargs, json);
	}
	if (nargs != 1) {
		fprintf(stderr, "epochfs-stat: error: expected exactly one MOUNTPOINT (see --help)\n");
		return 2;
	}
	return live(argv[optind], interval, count, json, fixed);
}
