/* watch.h - notices changes made to SOURCE while it is mounted.
 *
 * One inotify watch per indexed directory and one thread that turns events
 * into index_refresh() calls; the index then bumps the entry's generation and
 * runs its change callback (the adapter drops the kernel's caches there). A
 * write seen by inotify counts as a change even if the writer restored the
 * mtime. Local changes are seen within milliseconds; changes inotify cannot
 * see (another NFS client) are caught by the storage path's version check or
 * when the kernel's entry timeout runs out.
 */
#ifndef EPOCHFS_WATCH_H
#define EPOCHFS_WATCH_H

#include "store/index.h"

struct watch;

/* SOURCE is the absolute path of the indexed root. Starts the thread. When
 * the system's watch limit is reached, warns once and watches what it could.
 * Returns 0 and *OUT, or -errno. */
int watch_start(struct index *ix, const char *source, struct watch **out);
void watch_stop(struct watch *w);
/* Number of directories being watched. */
unsigned watch_count(const struct watch *w);

#endif
