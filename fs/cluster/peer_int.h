/* peer_int.h - the inside of the peer layer, for its own three files only:
 *
 *   peer.c         the epoll thread, the connections' send queues, set-up,
 *                  teardown and samples;
 *   peer_client.c  the connections we dial: a source in front of storage;
 *   peer_server.c  the connections peers dial to us: serving reads.
 *
 * Everything else sees the opaque struct peer of peer.h. Names: pc_ is
 * exported by peer_client.c, ps_ by peer_server.c, and peer_ names below
 * are peer.c's helpers for the other two (not part of peer.h's API).
 *
 * Threads and locks. The peer thread (peer.c's loop) owns every socket
 * and decoder; other threads touch a connection only to queue frames (a
 * READ we ask, a reply we serve) under its lock, then wake the thread.
 * A connection's lock is a leaf: nothing is locked under it, and callbacks
 * into the core (a fetch's done(), core_read_peer()) run with no
 * connection locked. Fields of struct conn say which rule protects them.
 */
#ifndef EPOCHFS_PEER_INT_H
#define EPOCHFS_PEER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "cluster/cluster.h"
#include "cluster/owner.h"
#include "cluster/peer.h"
#include "cluster/proto.h"
#include "core/core.h"
#include "util/worker.h"

#define MAX_PENDING 256             /* requests in flight on one connection */
/* Reply bytes a server holds, being made or queued unsent: per connection
 * and in all (at least 2 and 8 cache items); a READ past them waits (is
 * parked) until replies drain, so a client that asks and never reads
 * holds the daemon's memory at the bound, not at its appetite. */
#define CONN_REPLY_BYTES (16ull << 20)
#define TOTAL_REPLY_BYTES (64ull << 20)

/* A client connection's state, also each node's state in the samples
 * (shown as numbers: keep the order). */
enum pstate { PS_SELF, PS_UP, PS_CONNECTING, PS_DOWN };

/* A server connection's handshake (docs/peer-protocol.md). */
enum sstate { SS_HELLO, SS_AUTH, SS_OPEN };

enum role { R_CLIENT, R_SERVER };

/* Bytes to send: a frame, or a served reply's frames. */
struct obuf {
	struct obuf *next;
	size_t len, off;
	uint64_t charge;            /* reply budget it holds, given back once sent */
	uint8_t data[];
};

struct preq;                        /* peer_client.c: a read we asked a peer for */
struct parked;                      /* peer_server.c: a READ waiting for reply budget */

struct conn {
	struct peer *p;
	enum role role;
	int fd;                     /* -1: none */
	int rank;                   /* the other side; server: -1 until HELLO */
	pthread_mutex_t lock;       /* a leaf: below it, nothing else is locked */
	/* Under lock: */
	int state;                  /* client: enum pstate; server: enum sstate */
	int kick;                   /* client: a request wants a connection */
	int dead;                   /* server: closed, replies are dropped */
	struct obuf *out, *out_tail;        /* bytes to send */
	struct proto_mac tx;                /* seals what we send once the handshake is done */
	struct obuf *held, *held_tail;      /* client: READs waiting for READY */
	struct preq *pending, *pending_tail;
	unsigned npending;
	double retry_at, backoff;
	uint64_t next_tag;
	/* Peer thread only: */
	struct proto_dec dec;
	uint8_t nonce[PROTO_NONCE], their[PROTO_NONCE];
	int challenged;             /* client: the server proved itself */
	uint8_t c2s[PROTO_KEY], s2c[PROTO_KEY];     /* this connection's frame keys */
	double hs_deadline;
	int epout;                  /* EPOLLOUT registered */
	unsigned inflight;          /* server: replies not queued yet (atomic) */
	uint64_t reserved;          /* server: reply budget held (atomic) */
	struct parked *parked, *parked_tail;        /* server: READs waiting for budget */
	unsigned nparked;
	struct conn *next;          /* server: the list */
};

struct node_stats {
	uint64_t read_bytes, served_bytes, errors, lies;    /* atomic */
	int state;                                  /* enum pstate, atomic */
	int lie_logged;                             /* peer thread */
	char names[5][40];
};

struct peer {
	struct core *c;
	struct cluster cl;
	struct owner *own;
	uint64_t digest;
	uint8_t key[PEER_KEY_BYTES];
	int insecure;
	double timeout;
	int lfd, efd, epfd;
	struct worker w;            /* the peer thread (it sleeps in epoll_wait, kicked by efd) */
	struct conn *out;           /* [n]: the connections we dial, by rank */
	struct conn *servers;       /* accepted ones (peer thread) */
	struct sockaddr_storage *addr;      /* [n]: resolved on first dial (peer thread) */
	socklen_t *alen;
	struct node_stats *ns;
	int *full;                  /* [n] atomic: that node's cache refused an item */
	unsigned inflight;          /* served reads in the core (atomic) */
	uint64_t reply_bytes;       /* reply budget held over all connections (atomic) */
	uint64_t reply_peak;        /* the most it ever was (atomic) */
	uint64_t conn_budget, total_budget;
	unsigned handshaking;       /* server connections before SS_OPEN (peer thread) */
	struct conn *graveyard;     /* closed server connections, freed when idle */
	int lie;                    /* debug: 1 bytes that fail their checksum, 2 consistent lies */
	char lmark, emark;          /* epoll tags of lfd and efd */
};

/* ---- peer.c: helpers for both sides ------------------------------- */

/* Wakes the peer thread (it writes queues out, runs timeouts). Any thread. */
void peer_wake(struct peer *p);
/* Counts a fault of node RANK (-1: not known yet) in peer_errors. */
void peer_node_error(struct peer *p, int rank);

/* The handshake's proofs: HMAC (crypto_auth) over ROLE ('S' or 'C'), both
 * nonces (the prover's peer's first) and the table digest; zero without a
 * secret. peer_proof_ok() checks one in constant time (1: good). */
void peer_prove(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
		uint8_t mac[PROTO_MAC]);
int peer_proof_ok(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
		  const uint8_t mac[PROTO_MAC]);

/* Send queues. An obuf is owned by whoever holds it, then by the queue it
 * is appended to; the queue functions run under the connection's lock. */
/* A buffer for CAP bytes to send (len set to CAP), or NULL. */
struct obuf *peer_obuf_new(size_t cap);
/* Frees B, giving back the reply budget it held (of connection K). */
void peer_obuf_free(struct conn *k, struct obuf *b);
/* Appends B to the queue HEAD/TAIL. Lock held. */
void peer_obuf_append(struct obuf **head, struct obuf **tail, struct obuf *b);
/* Appends LEN bytes (copied) to a queue. Lock held. 0 or -ENOMEM. */
int peer_obuf_queue(struct obuf **head, struct obuf **tail, const void *data, size_t len);
/* Frees every buffer of a queue (their budget given back). Lock held, or
 * the connection no longer shared. */
void peer_obuf_drop_all(struct conn *k, struct obuf **head, struct obuf **tail);

/* Sends B on K's socket now if nothing is queued before it (a thread hop
 * less on the common path); what the socket does not take is queued for
 * the peer thread. Takes B. Lock held. 1: everything went out; 0: some is
 * queued (the caller wakes the thread). */
int peer_push(struct conn *k, struct obuf *b);
/* Queues LEN bytes (copied) on K under its lock; the peer thread writes
 * them on its next flush. Peer thread. 0 or -ENOMEM. */
int peer_send(struct conn *k, const void *data, size_t len);
/* Writes what K has queued without blocking, and asks epoll for EPOLLOUT
 * while bytes wait. Peer thread. 0, or -errno (broken). */
int peer_flush(struct peer *p, struct conn *k);
/* Reads what K's socket holds and feeds it to K's decoder with FN. Peer
 * thread. 0: all read; 1: closed or broken; else the decoder's (FN's)
 * error. */
int peer_pump(struct conn *k, proto_frame_fn fn, void *arg);

/* ---- peer_client.c ------------------------------------------------ */

/* The peer source's read (struct source) and the core's admission hook
 * (core_peer_hooks.owns); see peer_client.c. Any thread. */
void pc_read(void *ctx, struct source_item *it, off_t off,
	     size_t len, void *buf, source_done_fn done, void *arg);
int pc_owns(void *ctx, struct source_item *it);
int pc_keeper(void *ctx, struct source_item *it, char *name, size_t len);
/* Epoll events EV on client connection K. Peer thread. */
void pc_event(struct peer *p, struct conn *k, uint32_t ev);
/* Dials wanted connections, fails those past their deadline (time T),
 * writes what is queued. Peer thread, once per loop turn. */
void pc_tick(struct peer *p, double t);
/* Closes client connection K for good: its requests go to storage, its
 * queues and lock are freed. After the peer thread stopped. */
void pc_close(struct conn *k);

/* ---- peer_server.c ------------------------------------------------ */

/* Accepts what waits on the listening socket. Peer thread. */
void ps_accept(struct peer *p);
/* Epoll events EV on server connection K. Peer thread. */
void ps_event(struct peer *p, struct conn *k, uint32_t ev);
/* Handshake deadlines, queued replies, parked READs, and frees closed
 * connections no reply is in flight for (time T). Peer thread, once per
 * loop turn. */
void ps_tick(struct peer *p, double t);
/* Closes every server connection and frees those no served read is in
 * flight for (peer_free() waits for them first, bounded). After the peer
 * thread stopped. */
void ps_close_all(struct peer *p);

#endif
