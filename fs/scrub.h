/* scrub.h - the background scrubber: re-checks cached items at a steady rate.
 *
 * RAM goes bad silently (no ECC on many training nodes, or a stray write
 * through a bug). --verify re-hashes every hit, which costs a full pass of
 * xxh3 per read; the scrubber instead walks the whole cache in the
 * background at RATE bytes per second (default 32 MB/s, well under 1% of one
 * core), so a flipped bit is found within one pass (capacity / RATE seconds)
 * and the item is dropped before it is served again. A mismatch is counted in
 * cache_corrupt, exactly as a --verify hit is.
 *
 * The same thread carries out debug commands (scrub_command()): they come
 * from a signal handler, so the request is one byte written to a pipe.
 */
#ifndef EPOCHFS_SCRUB_H
#define EPOCHFS_SCRUB_H

#include <stdint.h>

#include "cache.h"

struct scrub;

/* Called on the scrub thread for each command byte CMD. */
typedef void (*scrub_cmd_fn)(void *arg, char cmd);

/* Starts the thread. RATE 0 scrubs nothing (commands still work). Returns 0
 * and *OUT, or -errno. */
int scrub_start(struct cache *c, uint64_t rate, scrub_cmd_fn fn, void *arg, struct scrub **out);
/* Stops and joins the thread; NULL is fine. */
void scrub_stop(struct scrub *s);
/* The write end of the command pipe: writing one byte there runs the command
 * callback on the thread. write(2) is async-signal-safe, so a signal handler
 * may do it. */
int scrub_command_fd(const struct scrub *s);

#endif
