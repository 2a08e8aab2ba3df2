/* stat_int.h - what epochfs-stat's files share: stat.c (options and the
 * live table of one mount), stat_list.c (--mounts, --states,
 * --free-states) and stat_file.c (--file). Not for other tools.
 *
 * Every size and rate epochfs-stat prints is in decimal megabytes (MB,
 * 10^6 bytes; MB/s), the unit of storage and network figures, except
 * --file's exact byte counts; --json gives bytes.
 */
#ifndef EPOCHFS_STAT_INT_H
#define EPOCHFS_STAT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* BYTES in MB into BUF, with the decimals that keep a small figure
 * readable: 2 below 100 MB, 1 below 10 GB, none above. */
void stat_mb(char *buf, size_t len, double bytes);

/* USED/CAP in MB, both with CAP's decimals (stat_mb); "off" when CAP is 0. */
void stat_fill(char *buf, size_t len, double used, double cap);

/* S seconds as "4m05s", "2h03m10s" or "3d04h10m". */
void stat_uptime(char *buf, size_t len, double s);

/* S as a JSON string (quoted, escaped) on F; NULL prints null. */
void stat_json_str(FILE *f, const char *s);

/* --mounts: the epochfs mounts of this machine. Exit status: 0, or 1 when
 * one of them does not answer. */
int stat_mounts(int json);

/* --states [ROOT] (FREE 0) and --free-states [ROOT] (FREE 1): the RAM
 * cache states in ROOT, or in the default roots. Exit status: 0, or 1 when
 * something was skipped as untrusted or could not be freed. */
int stat_states(const char *root, int free_them, int json);

/* --file PATH...: where the bytes of each of the N files are. Exit status:
 * 0, or 1 when one of them could not be looked at (the others are still
 * printed). */
int stat_files(char *const *paths, int n, int json);

#endif
