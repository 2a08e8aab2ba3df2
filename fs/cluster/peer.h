/* peer.h - partitioned caching across nodes: the peer client and server.
 *
 * Each node runs one struct peer next to its core. It
 *   - owns the items owner.h assigns it, and admits only those into its RAM
 *     cache (plus remote ones in spare budget with --cache-remote);
 *   - is a source (source.h) in front of storage: a miss on an item another
 *     node owns is asked of that node, which serves it from its cache or
 *     reads storage once, admits it and replies;
 *   - serves other nodes' requests for the items it owns.
 * Transport: TCP, one connection to each peer that we ask things of (opened
 * on first use), pipelined requests, replies streamed in DATA frames; one
 * epoll thread does all socket I/O of both roles (docs/peer-protocol.md).
 * Every connection is authenticated both ways before any request
 * (crypto_auth challenge-response with the shared secret).
 *
 * Faults never reach readers: a peer that is down, refuses us, times out
 * (--peer-timeout), breaks the protocol or sends bytes whose xxh3 does not
 * match is marked down (retried with exponential backoff, 0.5 s to 30 s)
 * and the read goes to storage (-EAGAIN to the core).
 *
 * Threads: peer_source()'s read is called from any thread; its completion
 * runs on the peer thread with no lock held. Lock order: a connection's
 * mutex is a leaf; the core's and cache's locks are never taken under it.
 */
#ifndef EPOCHFS_PEER_H
#define EPOCHFS_PEER_H

#include <stdint.h>

#include "cluster/cluster.h"
#include "core/core.h"
#include "core/stats.h"
#include "store/source.h"

#define PEER_KEY_BYTES 32

struct peer_opts {
	const struct cluster *cl;   /* the nodes and which one we are (copied) */
	const char *listen;         /* ADDR[:PORT] to bind; NULL: all addresses, our port */
	const uint8_t *key;         /* PEER_KEY_BYTES, or NULL with insecure */
	int insecure;               /* no authentication (--insecure-peers) */
	double timeout_s;           /* connect, handshake and each request; 0: 2 s */
	int cache_remote;           /* admit items other nodes own in spare budget */
};

struct peer;

/* Binds the listening socket (so a taken port fails the start, not later),
 * builds the ownership table, and plugs into core C (source, admission,
 * counters). 0 or -errno with ERR set. */
int peer_new(struct core *c, const struct peer_opts *o, struct peer **out, char *err,
	     size_t errlen);
/* Starts the peer thread. 0 or -errno. core_start() calls it. */
int peer_start(struct peer *p);
/* Stops the thread, fails requests in flight (-EAGAIN: to storage), closes
 * every connection. core_close() calls it; the core outlives it. */
void peer_free(struct peer *p);

/* Reads the secret file PATH into a key (KEY, PEER_KEY_BYTES): the file's
 * bytes (16 to 4096, a trailing newline ignored) hashed with BLAKE2b.
 * 0, or -errno with ERR set. Warns (in ERR, returning 1) when the file is
 * readable by group or others. */
int peer_load_secret(const char *path, uint8_t *key, char *err, size_t errlen);

/* Debug hook (tests): makes this node's server flip one bit of every reply
 * it sends from now on. MODE 1 flips it after the reply's checksum (the
 * asker's check sees it); 2 before it, and the frame's seal is made over
 * the flipped bytes too: a node that holds the secret and lies
 * consistently, which only a manifest (--manifest) exposes. 0: honest. */
void peer_debug_lie(struct peer *p, int mode);

#endif
