/* mstats.h - a mount's counters as the tools see them.
 *
 * The daemon publishes its counters as one flat JSON object of numbers (and
 * a few plain strings, such as "version") in MOUNTPOINT/.epochfs/stats.json (fs/core/stats.c renders it). Tools that watch
 * or benchmark a mount (epochfs-stat, epochfs-bench) read that file through
 * this module instead of each parsing it their own way. It is deliberately
 * not a JSON library: it accepts exactly the flat {"key": number or "text",
 * ...} shape the daemon writes (strings without escapes) and refuses
 * anything else with -EBADMSG.
 */
#ifndef EPOCHFS_MSTATS_H
#define EPOCHFS_MSTATS_H

#include <stddef.h>

#define MSTATS_MAX 640         /* the daemon's samples at most (CORE_MAX_SAMPLES) */
#define MSTATS_NAME 48
#define MSTATS_TEXTS 16         /* string values at most */
#define MSTATS_TEXT 768         /* persist_state names a path and why */

struct mstats {
	int n;
	char name[MSTATS_MAX][MSTATS_NAME];
	double val[MSTATS_MAX];     /* integers below 2^53 are exact */
	int nt;                     /* string values: */
	char tname[MSTATS_TEXTS][MSTATS_NAME];
	char text[MSTATS_TEXTS][MSTATS_TEXT];
};

/* Finds the stats file of the epochfs mount that holds DIR (DIR itself or
 * the nearest parent with a .epochfs/stats.json). 0, or -ENOENT when DIR is
 * not inside an epochfs mount; OUT gets the path. */
int mstats_find(const char *dir, char *out, size_t len);

/* Reads one snapshot of FILE. 0, -errno from open/read, or -EBADMSG when
 * the text is not a flat object of numbers and plain strings. */
int mstats_read(const char *file, struct mstats *s);

/* Parses TEXT (NUL-terminated) into S; 0 or -EBADMSG. */
int mstats_parse(const char *text, struct mstats *s);

/* The value of KEY, or DFLT when the snapshot has no such key. */
double mstats_get(const struct mstats *s, const char *key, double dflt);

/* The string value of KEY, or NULL when the snapshot has no such string. */
const char *mstats_text(const struct mstats *s, const char *key);

#endif
