/* peer.c - see peer.h and docs/peer-protocol.md.
 *
 * DESIGN: one thread, one epoll set, for every socket of both roles: the
 * listening socket, the connections we dialed (one per peer, indexed by
 * rank) and those peers dialed to us. Other threads never touch a socket:
 * a read that needs a peer appends its READ frame to the connection's queue
 * under the connection's mutex and wakes the thread (eventfd); a served
 * reply, made on whatever thread the core answered on, is queued the same
 * way. The thread writes queues out without blocking (EPOLLOUT while bytes
 * wait) and feeds what it receives to proto_feed(). A thread per connection
 * would be less code, but one thread keeps every timeout, state change and
 * callback in one place, and a slow peer cannot pin a thread.
 *
 * Requests are answered in order of their tag on a connection, so the
 * pending list is a FIFO and a reply normally matches its head. The oldest
 * pending request's deadline bounds the wait for any of them: past it, the
 * connection is failed as a whole (a peer that stops answering one request
 * is not trusted with the next).
 *
 * Served replies are one buffer each: the item's bytes copied once from the
 * cache (or the load buffer) between frame headers, so the core's buffer is
 * free the moment the callback returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t on the stack and in structs */
#include <xxhash.h>

#include "cache.h"
#include "log.h"
#include "manifest.h"
#include "owner.h"
#include "peer.h"
#include "proto.h"

#define MAX_PENDING 256             /* requests in flight on one connection */
/* Reply bytes a server holds, being made or queued unsent: per connection
 * and in all (at least 2 and 8 cache items); a READ past them waits (is
 * parked) until replies drain, so a client that asks and never reads
 * holds the daemon's memory at the bound, not at its appetite. */
#define CONN_REPLY_BYTES (16ull << 20)
#define TOTAL_REPLY_BYTES (64ull << 20)
#define MAX_HANDSHAKING 64          /* accepted, not yet authenticated */
#define MAX_CONNS_PER_NODE 4        /* authenticated connections from one node */
#define BACKOFF_MIN 0.5
#define BACKOFF_MAX 30.0
#define MAX_NODE_SAMPLES 64         /* per-node samples for this many nodes */

enum pstate { PS_SELF, PS_UP, PS_CONNECTING, PS_DOWN };     /* shown as numbers */

struct obuf {
	struct obuf *next;
	size_t len, off;
	uint64_t charge;            /* reply budget it holds, given back once sent */
	uint8_t data[];
};

/* A READ waiting for reply budget (server). */
struct parked {
	struct parked *next;
	uint64_t tag;
	struct proto_read rd;       /* rd.path points into path */
	char path[];
};

/* A read we asked a peer for. */
struct preq {
	struct preq *next;
	uint64_t tag;
	uint8_t *buf;
	int own_buf;                /* BUF is ours (the core gave none, or we fetch more) */
	size_t want, got;
	double deadline;
	unsigned level;             /* the asked node's place in the item's ranking */
	off_t off;                  /* what was asked of the peer */
	int file;                   /* the manifest record that checks it, or -1 */
	/* The caller's read, to answer it and to ask again elsewhere: with a
	 * manifest the whole item is fetched (only whole items are checked). */
	uint32_t id;
	off_t req_off;
	size_t req_len;
	void *req_buf;
	struct index_version v;
	char *rel;
	XXH3_state_t h;
	source_done_fn done;
	void *arg;
};

enum role { R_CLIENT, R_SERVER };

/* A server connection's handshake (docs/peer-protocol.md). */
enum sstate { SS_HELLO, SS_AUTH, SS_OPEN };

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
	pthread_t th;
	int started, stop;
	struct conn *out;           /* [n]: the connections we dial, by rank */
	struct conn *servers;       /* accepted ones */
	struct sockaddr_storage *addr;
	socklen_t *alen;
	struct node_stats *ns;
	int *full;                  /* [n] atomic: that node's cache refused an item */
	unsigned inflight;          /* served reads in the core (atomic) */
	uint64_t reply_bytes;       /* reply budget held over all connections (atomic) */
	uint64_t reply_peak;        /* the most it ever was (atomic) */
	uint64_t conn_budget, total_budget;
	unsigned handshaking;       /* server connections before SS_OPEN */
	struct conn *graveyard;     /* closed server connections, freed when idle */
	int lie;                    /* debug: 1 bytes that fail their checksum, 2 consistent lies */
	char lmark, emark;          /* epoll tags of lfd and efd */
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void wake(struct peer *p)
{
	uint64_t one = 1;

	if (write(p->efd, &one, sizeof(one)) < 0) {
		/* The counter is saturated: the thread is awake anyway. */
	}
}

static void set_state(struct peer *p, unsigned rank, enum pstate s)
{
	__atomic_store_n(&p->ns[rank].state, (int)s, __ATOMIC_RELAXED);
}

static void node_error(struct peer *p, int rank)
{
	stats_add(core_stats(p->c), STAT_PEER_ERRORS, 1);
	if (rank >= 0)
		__atomic_add_fetch(&p->ns[rank].errors, 1, __ATOMIC_RELAXED);
}

/* A buffer for CAP bytes to send (len set to CAP), or NULL. */
static struct obuf *obuf_new(size_t cap)
{
	struct obuf *b = malloc(sizeof(*b) + cap);

	if (b)
		*b = (struct obuf){ .len = cap };
	return b;
}

/* Frees a buffer, giving back the reply budget it held (of connection K). */
static void obuf_free(struct conn *k, struct obuf *b)
{
	if (b->charge) {
		__atomic_sub_fetch(&k->reserved, b->charge, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&k->p->reply_bytes, b->charge, __ATOMIC_RELAXED);
	}
	free(b);
}

/* Appends B to a queue. Lock held. */
static void append(struct obuf **head, struct obuf **tail, struct obuf *b)
{
	b->next = NULL;
	if (*tail)
		(*tail)->next = b;
	else
		*head = b;
	*tail = b;
}

/* Appends LEN bytes (copied) to a queue. Lock held. */
static int queue(struct obuf **head, struct obuf **tail, const void *data, size_t len)
{
	struct obuf *b = obuf_new(len);

	if (!b)
		return -ENOMEM;
	memcpy(b->data, data, len);
	append(head, tail, b);
	return 0;
}

static void free_queue(struct conn *k, struct obuf **head, struct obuf **tail)
{
	while (*head) {
		struct obuf *b = *head;
		*head = b->next;
		obuf_free(k, b);
	}
	*tail = NULL;
}

/* Sends B on K's socket now if nothing is queued before it (a thread hop
 * less on the common path); what the socket does not take is queued for
 * the peer thread. Takes B. Lock held. 1: everything went out; 0: some is
 * queued (the caller wakes the thread). */
static int push(struct conn *k, struct obuf *b)
{
	if (!k->out && k->fd >= 0) {
		ssize_t n = send(k->fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			b->off += (size_t)n;
		if (b->off == b->len) {
			obuf_free(k, b);
			return 1;
		}
		/* An error is the peer thread's to find (its recv or flush). */
	}
	append(&k->out, &k->out_tail, b);
	return 0;
}

/* ---- the client side: a source in front of storage ---------------- */

static void free_req(struct preq *r)
{
	if (r->own_buf)
		free(r->buf);
	free(r->rel);
	free(r);
}

static void finish(struct preq *r, ssize_t res)
{
	if (res > 0 && (r->off != r->req_off || r->want != r->req_len)) {
		/* A whole item fetched for a part of it: the part. */
		size_t skip = (size_t)(r->req_off - r->off), n = (size_t)res > skip ? (size_t)res - skip : 0;
		if (n > r->req_len)
			n = r->req_len;
		if (r->req_buf)
			memcpy(r->req_buf, r->buf + skip, n);
		r->done(r->arg, (ssize_t)n, r->req_buf ? r->req_buf : r->buf + skip);
	} else {
		r->done(r->arg, res, res > 0 ? r->buf : NULL);
	}
	free_req(r);
}

static void finish_all(struct preq *list, ssize_t res)
{
	while (list) {
		struct preq *next = list->next;
		finish(list, res);
		list = next;
	}
}

/* Takes a client connection down: every request in flight goes to storage.
 * A peer that said it is shutting down is no fault: logged as information,
 * not counted. Peer thread, lock not held. */
static void client_down(struct conn *k, const char *why, int goodbye)
{
	struct peer *p = k->p;
	struct preq *list;
	int was_up;

	pthread_mutex_lock(&k->lock);
	if (k->fd >= 0) {
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, k->fd, NULL);
		close(k->fd);
		k->fd = -1;
	}
	was_up = k->state == PS_UP;
	k->state = PS_DOWN;
	k->kick = 0;
	k->backoff = k->backoff < BACKOFF_MIN ? BACKOFF_MIN : k->backoff * 2;
	if (k->backoff > BACKOFF_MAX)
		k->backoff = BACKOFF_MAX;
	k->retry_at = now() + k->backoff;
	list = k->pending;
	k->pending = k->pending_tail = NULL;
	k->npending = 0;
	free_queue(k, &k->out, &k->out_tail);
	free_queue(k, &k->held, &k->held_tail);
	k->epout = 0;
	memset(&k->tx, 0, sizeof(k->tx));   /* the next connection has keys of its own */
	proto_dec_init(&k->dec, PROTO_CLIENT);
	pthread_mutex_unlock(&k->lock);
	set_state(p, (unsigned)k->rank, PS_DOWN);
	if (goodbye) {
		log_info("peer %s: shut down; its items are read from storage", p->cl.nodes[k->rank].id);
	} else {
		node_error(p, k->rank);
		if (why)                    /* NULL: the caller logged it its own way */
			log_warn("peer %s: %s; its items are read from storage%s, retry in %.1f s",
				 p->cl.nodes[k->rank].id, why, was_up ? " from now on" : "", k->backoff);
	}
	finish_all(list, -EAGAIN);
}

static void client_fail(struct conn *k, const char *why)
{
	client_down(k, why, 0);
}

/* Asks the node at LEVEL of the item's ranking for the bytes (0: the
 * owner). A node that answers -ENOSPC (full, and without the item) sends
 * the read one level down, at most PROTO_MAX_SPILL times; we skip ourselves when
 * full and this read is not a load into our cache. Each full node is still asked: it may hold the item from before it
 * filled up, and asking the next one instead would load a duplicate. */
static void ask(struct peer *p, uint32_t id, const char *rel, const struct index_version *v,
		off_t off, size_t len, void *buf, source_done_fn done, void *arg, unsigned level)
{
	uint32_t chunk_size = core_chunk(p->c), chunk = (uint32_t)((uint64_t)off / chunk_size);
	size_t plen = strlen(rel);
	unsigned rank[p->cl.n], who, self = p->cl.self;
	int file = -1;

	if (!len || (uint64_t)(off + (off_t)len - 1) / chunk_size != chunk || plen > PROTO_MAX_PATH ||
	    len > PROTO_MAX_READ) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	/* With a manifest, a file it cannot check is never taken from a peer. */
	if (core_manifest(p->c) && (file = core_verifiable(p->c, id, v->size)) < 0) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	owner_ranking(p->own, rel, plen, chunk, rank);
	/* We pass our own turn only for a read we could not keep (no BUF): a
	 * load into our cache (BUF) reads storage, or the node we asked could
	 * ask us back for the very item we are loading, and both would wait. */
	while (level <= PROTO_MAX_SPILL && level < p->cl.n && rank[level] == self && !buf &&
	       core_cache_full(p->c))
		level++;
	if (level > PROTO_MAX_SPILL || level >= p->cl.n || (who = rank[level]) == self) {
		done(arg, -EAGAIN, NULL);   /* storage: ours to keep, if we may, or nobody's */
		return;
	}
	struct conn *k = &p->out[who];
	struct preq *r = malloc(sizeof(*r));
	size_t room = p->insecure ? 0 : PROTO_TAG;
	struct obuf *frame = obuf_new(PROTO_HDR + 32 + plen + room);
	if (!r || !frame) {
		free(r);
		free(frame);
		done(arg, -EAGAIN, NULL);
		return;
	}
	*r = (struct preq){ .buf = buf, .want = len, .done = done, .arg = arg, .level = level,
			    .off = off, .file = file, .id = id, .req_off = off, .req_len = len,
			    .req_buf = buf, .v = *v, .rel = strdup(rel) };
	if (file >= 0) {
		r->off = (off_t)chunk * chunk_size;
		r->want = cache_chunk_len(v->size, chunk_size, chunk);
	}
	if (!buf || r->want != len) {
		r->own_buf = 1;
		r->buf = malloc(r->want);
	}
	if (!r->buf || !r->rel) {
		free_req(r);
		free(frame);
		done(arg, -EAGAIN, NULL);
		return;
	}
	XXH3_64bits_reset(&r->h);
	double t = now();
	pthread_mutex_lock(&k->lock);
	if ((k->state == PS_DOWN && t < k->retry_at) || k->npending >= MAX_PENDING) {
		pthread_mutex_unlock(&k->lock);
		free_req(r);
		free(frame);
		done(arg, -EAGAIN, NULL);
		return;
	}
	r->tag = ++k->next_tag;
	r->deadline = t + p->timeout;
	struct proto_read rd = { .size = v->size, .mtime_ns = v->mtime_ns, .off = (uint64_t)r->off,
				 .len = (uint32_t)r->want, .path_len = (uint16_t)plen, .path = rel,
				 .spill = (uint16_t)level };
	int n = proto_enc_read(frame->data, frame->len, r->tag, &rd), sent = 0;
	if (n < 0) {                /* cannot happen: sized for this path */
		pthread_mutex_unlock(&k->lock);
		free_req(r);
		free(frame);
		done(arg, -EAGAIN, NULL);
		return;
	}
	frame->len = (size_t)n + room;
	if (k->state == PS_UP) {
		proto_seal(&k->tx, frame->data, frame->len);
		sent = push(k, frame);
	} else {
		append(&k->held, &k->held_tail, frame);     /* sealed and sent once READY */
	}
	if (k->pending_tail)
		k->pending_tail->next = r;
	else
		k->pending = r;
	k->pending_tail = r;
	k->npending++;
	if (k->state == PS_DOWN)
		k->kick = 1;
	pthread_mutex_unlock(&k->lock);
	if (sent != 1)
		wake(p);
}

static void src_read(void *ctx, uint32_t id, const char *rel, const struct index_version *v,
		     off_t off, size_t len, void *buf, source_done_fn done, void *arg)
{
	ask(ctx, id, rel, v, off, len, buf, done, arg, 0);
}

/* Ours to keep: we own it, or every node ranked before us for it is full
 * (within PROTO_MAX_SPILL). */
static int src_owns(void *ctx, const char *rel, uint32_t chunk)
{
	struct peer *p = ctx;
	unsigned rank[p->cl.n];

	owner_ranking(p->own, rel, strlen(rel), chunk, rank);
	for (unsigned j = 0; j <= PROTO_MAX_SPILL && j < p->cl.n; j++) {
		if (rank[j] == p->cl.self)
			return 1;
		if (!__atomic_load_n(&p->full[rank[j]], __ATOMIC_RELAXED))
			return 0;
	}
	return 0;
}

/* The proofs: HMAC (crypto_auth) over a role byte, both nonces (the
 * prover's peer's first) and the table digest. Zero without a secret. */
static void prove(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
		  uint8_t mac[PROTO_MAC])
{
	uint8_t msg[1 + 2 * PROTO_NONCE + 8];

	memset(mac, 0, PROTO_MAC);
	if (p->insecure)
		return;
	msg[0] = (uint8_t)role;
	memcpy(msg + 1, first, PROTO_NONCE);
	memcpy(msg + 1 + PROTO_NONCE, second, PROTO_NONCE);
	for (int i = 0; i < 8; i++)
		msg[1 + 2 * PROTO_NONCE + i] = (uint8_t)(p->digest >> (8 * i));
	crypto_auth(mac, msg, sizeof(msg), p->key);
}

static int proof_ok(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
		    const uint8_t mac[PROTO_MAC])
{
	uint8_t want[PROTO_MAC];

	if (p->insecure)
		return 1;
	prove(p, role, first, second, want);
	return sodium_memcmp(want, mac, PROTO_MAC) == 0;
}

/* Queues bytes on K and makes sure the thread writes them. Peer thread. */
static int send_now(struct conn *k, const void *data, size_t len)
{
	pthread_mutex_lock(&k->lock);
	int r = queue(&k->out, &k->out_tail, data, len);
	pthread_mutex_unlock(&k->lock);
	return r;
}

static int start_connect(struct peer *p, struct conn *k)
{
	const struct cluster_node *nd = &p->cl.nodes[k->rank];

	if (!p->alen[k->rank]) {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
		int e = getaddrinfo(nd->host, nd->port, &hints, &ai);
		if (e)
			return -EHOSTUNREACH;
		memcpy(&p->addr[k->rank], ai->ai_addr, ai->ai_addrlen);
		p->alen[k->rank] = ai->ai_addrlen;
		freeaddrinfo(ai);
	}
	int fd = socket(p->addr[k->rank].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&p->addr[k->rank], p->alen[k->rank]) < 0 &&
	    errno != EINPROGRESS) {
		int e = -errno;
		close(fd);
		return e;
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = k };
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	randombytes_buf(k->nonce, PROTO_NONCE);
	k->challenged = 0;
	proto_dec_init(&k->dec, PROTO_CLIENT);
	uint8_t hello[PROTO_HDR + 64];
	struct proto_hello h = { .version = PROTO_VERSION, .rank = p->cl.self, .digest = p->digest,
				 .flags = p->insecure ? PROTO_F_INSECURE : 0 };
	memcpy(h.nonce, k->nonce, PROTO_NONCE);
	int n = proto_enc_hello(hello, sizeof(hello), &h);
	pthread_mutex_lock(&k->lock);
	k->fd = fd;
	k->state = PS_CONNECTING;
	k->kick = 0;
	k->epout = 1;
	int r = queue(&k->out, &k->out_tail, hello, (size_t)n);
	pthread_mutex_unlock(&k->lock);
	k->hs_deadline = now() + p->timeout;
	set_state(p, (unsigned)k->rank, PS_CONNECTING);
	return r;
}

/* The pending request TAG, or NULL. Lock held. */
static struct preq *find_req(struct conn *k, uint64_t tag)
{
	for (struct preq *r = k->pending; r; r = r->next)
		if (r->tag == tag)
			return r;
	return NULL;
}

/* Takes R off K's pending list. Lock held. */
static void unlink_req(struct conn *k, struct preq *r)
{
	struct preq **pp = &k->pending, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			if (k->pending_tail == r)
				k->pending_tail = prev;
			k->npending--;
			return;
		}
}

/* A frame for a connection we dialed. Peer thread. 0, or -EPROTO with
 * *WHY set (the connection is failed). */
struct cctx {
	struct conn *k;
	const char *why;
	int lie;                    /* the reply failed the manifest (logged once per peer) */
	struct preq *done;          /* completed, to call back unlocked */
	ssize_t res;
};

static int on_client_frame(void *arg, const struct proto_frame *f)
{
	struct cctx *x = arg;
	struct conn *k = x->k;
	struct peer *p = k->p;

	switch (f->type) {
	case PROTO_CHALLENGE: {
		struct proto_challenge ch;
		uint8_t buf[PROTO_HDR + PROTO_MAC];
		if (proto_dec_challenge(f, &ch) || ch.version != PROTO_VERSION) {
			x->why = "speaks another protocol version";
			return -EPROTO;
		}
		if (ch.rank != (uint32_t)k->rank) {
			x->why = "answered with another rank (are the peer lists the same?)";
			return -EPROTO;
		}
		if (!proof_ok(p, 'S', k->nonce, ch.nonce, ch.mac)) {
			x->why = "failed authentication (is --secret-file the same on both?)";
			return -EPROTO;
		}
		uint8_t mac[PROTO_MAC];
		k->challenged = 1;
		if (!p->insecure)
			proto_session_keys(p->key, k->nonce, ch.nonce, p->digest, k->c2s, k->s2c);
		prove(p, 'C', ch.nonce, k->nonce, mac);
		int n = proto_enc_auth(buf, sizeof(buf), mac);
		return send_now(k, buf, (size_t)n);
	}
	case PROTO_READY:
		if (!k->challenged) {       /* never trust a server that skipped its proof */
			x->why = "skipped authentication";
			return -EPROTO;
		}
		__atomic_store_n(&p->full[k->rank], 0, __ATOMIC_RELAXED);  /* maybe restarted, empty */
		pthread_mutex_lock(&k->lock);
		k->state = PS_UP;
		k->backoff = 0;
		if (!p->insecure)
			proto_mac_init(&k->tx, k->c2s);
		while (k->held) {           /* requests made while we connected */
			struct obuf *b = k->held;
			k->held = b->next;
			proto_seal(&k->tx, b->data, b->len);
			append(&k->out, &k->out_tail, b);
		}
		k->held_tail = NULL;
		pthread_mutex_unlock(&k->lock);
		proto_dec_open(&k->dec, p->insecure ? NULL : k->s2c);
		set_state(p, (unsigned)k->rank, PS_UP);
		log_info("peer %s: connected", p->cl.nodes[k->rank].id);
		return 0;
	case PROTO_DATA: {
		pthread_mutex_lock(&k->lock);
		struct preq *r = find_req(k, f->tag);
		int ok = r && r->got + f->len <= r->want;
		if (ok) {
			memcpy(r->buf + r->got, f->body, f->len);
			XXH3_64bits_update(&r->h, f->body, f->len);
			r->got += f->len;
		}
		pthread_mutex_unlock(&k->lock);
		if (!ok) {
			x->why = "sent bytes nobody asked for";
			return -EPROTO;
		}
		return 0;
	}
	case PROTO_END: {
		struct proto_end e;
		if (proto_dec_end(f, &e)) {
			x->why = "sent a malformed reply";
			return -EPROTO;
		}
		pthread_mutex_lock(&k->lock);
		struct preq *r = find_req(k, f->tag);
		if (r)
			unlink_req(k, r);
		pthread_mutex_unlock(&k->lock);
		if (!r) {
			x->why = "answered a request nobody made";
			return -EPROTO;
		}
		if (e.status >= 0 && ((size_t)e.status != r->got || XXH3_64bits_digest(&r->h) != e.xxh3)) {
			/* Finished by the caller once the connection is down. */
			r->next = NULL;
			x->done = r;
			x->res = -EAGAIN;
			x->why = "sent bytes that fail their checksum (lying or broken peer)";
			return -EPROTO;
		}
		if (e.status > 0 && r->file >= 0 &&
		    manifest_check(core_manifest(p->c), (uint32_t)r->file,
				   (uint32_t)((uint64_t)r->off / core_chunk(p->c)), r->buf, r->got)) {
			/* Sealed by a node that holds the secret, checksum right,
			 * and still not the dataset's bytes: a liar. */
			stats_add(core_stats(p->c), STAT_PEER_LIES, 1);
			__atomic_add_fetch(&p->ns[k->rank].lies, 1, __ATOMIC_RELAXED);
			if (!p->ns[k->rank].lie_logged++)
				log_warn("peer %s: sent bytes of %s that do not match the manifest (a lying "
					 "node); its replies are checked and refused, its items read from "
					 "storage", p->cl.nodes[k->rank].id, r->rel);
			r->next = NULL;
			x->done = r;
			x->res = -EAGAIN;
			x->lie = 1;
			return -EPROTO;
		}
		if (e.status > 0) {
			stats_add(core_stats(p->c), STAT_PEER_READ_BYTES, (uint64_t)e.status);
			__atomic_add_fetch(&p->ns[k->rank].read_bytes, (uint64_t)e.status, __ATOMIC_RELAXED);
		}
		if (e.status == -ENOSPC) {
			/* That node is full (for good: it never evicts). Ask the
			 * next one, with the same buffer and callback. */
			__atomic_store_n(&p->full[k->rank], 1, __ATOMIC_RELAXED);
			ask(p, r->id, r->rel, &r->v, r->req_off, r->req_len, r->req_buf, r->done, r->arg,
			    r->level + 1);
			free_req(r);
			return 0;
		}
		/* A refusal (the file is another version there, gone, ...) is
		 * no fault: storage gives the definite answer. */
		finish(r, e.status >= 0 ? e.status : -EAGAIN);
		return 0;
	}
	case PROTO_ERROR: {
		static __thread char msg[128];
		int32_t code;
		proto_dec_error(f, &code, msg, sizeof(msg));
		x->why = msg;
		return code == -ESHUTDOWN ? -ESHUTDOWN : -EPROTO;
	}
	}
	x->why = "sent an unexpected frame";
	return -EPROTO;
}

/* ---- the server side ---------------------------------------------- */

struct sreq {
	struct conn *k;
	uint64_t tag;
	uint64_t charge;            /* reply budget taken for it */
};

static void conn_put_server(struct conn *k);

/* Gives back reply budget CHARGE of connection K. */
static void uncharge(struct conn *k, uint64_t charge)
{
	__atomic_sub_fetch(&k->reserved, charge, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&k->p->reply_bytes, charge, __ATOMIC_RELAXED);
}

/* A served read's answer, on any thread: one buffer of frames (each with
 * room for its seal), sealed in the connection's order under its lock. */
static void served(void *arg, ssize_t res, const void *buf)
{
	struct sreq *s = arg;
	struct conn *k = s->k;
	struct peer *p = k->p;
	size_t n = res > 0 ? (size_t)res : 0, frames = n ? (n + PROTO_MAX_DATA - 1) / PROTO_MAX_DATA : 0;
	size_t room = p->insecure ? 0 : PROTO_TAG;
	struct obuf *b = obuf_new(n + (frames + 1) * (PROTO_HDR + room) + 16);
	int lie = __atomic_load_n(&p->lie, __ATOMIC_RELAXED), all_sent = 0;

	if (b) {
		uint8_t *w = b->data;
		struct proto_end e = { .status = res < -4095 || res > INT32_MAX ? -EIO : (int32_t)res };
		XXH3_state_t h;
		XXH3_64bits_reset(&h);
		for (size_t at = 0; at < n; at += PROTO_MAX_DATA) {
			size_t m = n - at < PROTO_MAX_DATA ? n - at : PROTO_MAX_DATA;
			uint8_t *body = w + PROTO_HDR;
			proto_put_header(w, PROTO_DATA, s->tag, (uint32_t)m);
			memcpy(body, (const uint8_t *)buf + at, m);
			/* Debug (peer_debug_lie): 1 flips a bit after the checksum,
			 * which the asker's check catches; 2 before it, a liar only
			 * a manifest can expose. */
			if (!at && lie == 2)
				body[m / 2] ^= 0x10;
			XXH3_64bits_update(&h, body, m);
			if (!at && lie == 1)
				body[m / 2] ^= 0x10;
			w += PROTO_HDR + m + room;
		}
		e.xxh3 = XXH3_64bits_digest(&h);
		w += proto_enc_end(w, PROTO_HDR + 16, s->tag, &e) + room;
		b->len = (size_t)(w - b->data);
		b->charge = s->charge;
		pthread_mutex_lock(&k->lock);
		if (!k->dead) {
			proto_seal(&k->tx, b->data, b->len);
			all_sent = push(k, b);
			b = NULL;
			if (n) {
				stats_add(core_stats(p->c), STAT_PEER_SERVED_BYTES, n);
				if (k->rank >= 0)
					__atomic_add_fetch(&p->ns[k->rank].served_bytes, n, __ATOMIC_RELAXED);
			}
		}
		pthread_mutex_unlock(&k->lock);
		if (b)
			obuf_free(k, b);    /* the connection closed meanwhile */
	} else {
		uncharge(k, s->charge);     /* no memory: the asker times out, storage answers */
	}
	free(s);
	/* The thread writes what the socket did not take, and starts READs
	 * that waited for the budget this reply may have freed. */
	if (!all_sent || __atomic_load_n(&k->nparked, __ATOMIC_RELAXED))
		wake(p);
	/* Last: once these reach 0, K (reap) and P (peer_free) may go. */
	__atomic_sub_fetch(&k->inflight, 1, __ATOMIC_ACQ_REL);
	__atomic_sub_fetch(&p->inflight, 1, __ATOMIC_ACQ_REL);
}

struct sctx {
	struct conn *k;
	const char *why;
};

/* Authenticated server connections from node RANK. Peer thread. */
static unsigned conns_of(struct peer *p, int rank)
{
	unsigned n = 0;

	for (struct conn *k = p->servers; k; k = k->next)
		n += k->rank == rank && k->state == SS_OPEN;
	return n;
}

/* Reply budget for a READ of LEN bytes: the item bytes (at most a cache
 * chunk) and their frames. */
static uint64_t charge_of(const struct peer *p, uint32_t len)
{
	uint64_t chunk = core_chunk(p->c), n = len < chunk ? len : chunk;

	return n + (n / PROTO_MAX_DATA + 2) * (PROTO_HDR + PROTO_TAG) + sizeof(struct obuf);
}

/* Takes CHARGE of K's budget and the total, if both have room; a
 * connection with nothing reserved may always take one reply. */
static int budget_take(struct peer *p, struct conn *k, uint64_t charge)
{
	uint64_t mine = __atomic_add_fetch(&k->reserved, charge, __ATOMIC_RELAXED);
	uint64_t all = __atomic_add_fetch(&p->reply_bytes, charge, __ATOMIC_RELAXED);

	if (mine == charge || (mine <= p->conn_budget && all <= p->total_budget)) {
		uint64_t peak = __atomic_load_n(&p->reply_peak, __ATOMIC_RELAXED);
		while (all > peak && !__atomic_compare_exchange_n(&p->reply_peak, &peak, all, 1,
								  __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		return 1;
	}
	uncharge(k, charge);
	return 0;
}

/* Hands a READ (budget taken) to the core. Peer thread. */
static void start_read(struct peer *p, struct conn *k, uint64_t tag, const struct proto_read *rd,
		       uint64_t charge)
{
	char path[PROTO_MAX_PATH + 1];
	struct sreq *s = malloc(sizeof(*s));

	if (!s) {
		uncharge(k, charge);        /* unanswered: the asker times out, storage answers */
		return;
	}
	*s = (struct sreq){ .k = k, .tag = tag, .charge = charge };
	memcpy(path, rd->path, rd->path_len);
	path[rd->path_len] = '\0';
	if (rd->spill) {
		/* The nodes ranked before us are full: we may keep it. */
		unsigned rank[p->cl.n];
		uint32_t chunk = (uint32_t)(rd->off / core_chunk(p->c));
		owner_ranking(p->own, path, rd->path_len, chunk, rank);
		for (unsigned j = 0; j < rd->spill && j < p->cl.n; j++)
			if (rank[j] != p->cl.self)
				__atomic_store_n(&p->full[rank[j]], 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&k->inflight, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&p->inflight, 1, __ATOMIC_ACQ_REL);
	core_read_peer(p->c, path, rd->size, rd->mtime_ns, (off_t)rd->off, rd->len, served, s);
}

/* Starts the parked READs the budget has room for now. Peer thread. */
static void unpark(struct peer *p, struct conn *k)
{
	while (k->parked && !k->dead) {
		struct parked *q = k->parked;
		uint64_t charge = charge_of(p, q->rd.len);
		if (!budget_take(p, k, charge))
			return;
		k->parked = q->next;
		if (!k->parked)
			k->parked_tail = NULL;
		__atomic_sub_fetch(&k->nparked, 1, __ATOMIC_RELAXED);
		start_read(p, k, q->tag, &q->rd, charge);
		free(q);
	}
}

static void free_parked(struct conn *k)
{
	while (k->parked) {
		struct parked *q = k->parked;
		k->parked = q->next;
		free(q);
	}
	k->parked_tail = NULL;
	k->nparked = 0;
}

static int on_server_frame(void *arg, const struct proto_frame *f)
{
	struct sctx *x = arg;
	struct conn *k = x->k;
	struct peer *p = k->p;
	uint8_t buf[PROTO_HDR + 128];

	switch (f->type) {
	case PROTO_HELLO: {
		struct proto_hello h;
		const char *bad = NULL;
		if (k->state != SS_HELLO || proto_dec_hello(f, &h))
			bad = "malformed hello";
		else if (h.version != PROTO_VERSION)
			bad = "protocol version differs";
		else if (h.digest != p->digest)
			bad = "peer list or --cache-chunk differs";
		else if (!!(h.flags & PROTO_F_INSECURE) != p->insecure)
			bad = p->insecure ? "we run without a secret, it has one"
					  : "it runs without a secret (--insecure-peers), we have one";
		else if (h.rank >= p->cl.n || h.rank == p->cl.self)
			bad = "bad rank";
		else if (conns_of(p, (int)h.rank) >= MAX_CONNS_PER_NODE)
			bad = "too many connections from that node";
		if (bad) {
			int n = proto_enc_error(buf, sizeof(buf), -EPERM, bad);
			send_now(k, buf, (size_t)n);
			x->why = bad;
			return -EPERM;      /* close after the error is written */
		}
		k->rank = (int)h.rank;
		memcpy(k->their, h.nonce, PROTO_NONCE);
		randombytes_buf(k->nonce, PROTO_NONCE);
		struct proto_challenge ch = { .version = PROTO_VERSION, .rank = p->cl.self };
		memcpy(ch.nonce, k->nonce, PROTO_NONCE);
		prove(p, 'S', k->their, k->nonce, ch.mac);
		int n = proto_enc_challenge(buf, sizeof(buf), &ch);
		k->state = SS_AUTH;
		return send_now(k, buf, (size_t)n);
	}
	case PROTO_AUTH: {
		uint8_t mac[PROTO_MAC];
		if (k->state != SS_AUTH || proto_dec_auth(f, mac)) {
			x->why = "malformed authentication";
			return -EPROTO;
		}
		if (!proof_ok(p, 'C', k->nonce, k->their, mac)) {
			int n = proto_enc_error(buf, sizeof(buf), -EACCES, "authentication failed");
			send_now(k, buf, (size_t)n);
			x->why = "failed authentication (wrong --secret-file?)";
			return -EACCES;
		}
		int n = proto_enc_ready(buf, sizeof(buf));
		if (!p->insecure)
			proto_session_keys(p->key, k->their, k->nonce, p->digest, k->c2s, k->s2c);
		/* READY goes out as the last frame unsealed; what follows it is. */
		pthread_mutex_lock(&k->lock);
		int r = queue(&k->out, &k->out_tail, buf, (size_t)n);
		if (!p->insecure)
			proto_mac_init(&k->tx, k->s2c);
		pthread_mutex_unlock(&k->lock);
		k->state = SS_OPEN;
		p->handshaking--;
		proto_dec_open(&k->dec, p->insecure ? NULL : k->c2s);
		return r;
	}
	case PROTO_READ: {
		struct proto_read rd;
		if (proto_dec_read(f, &rd)) {
			x->why = "malformed or unsafe read request";
			return -EPROTO;
		}
		/* An honest client has at most MAX_PENDING requests unanswered. */
		if (__atomic_load_n(&k->inflight, __ATOMIC_ACQUIRE) + k->nparked >= MAX_PENDING) {
			x->why = "too many requests in flight";
			return -EPROTO;
		}
		uint64_t charge = charge_of(p, rd.len);
		if (!k->parked && budget_take(p, k, charge)) {
			start_read(p, k, f->tag, &rd, charge);
			return 0;
		}
		/* Over budget: wait until replies drain (unpark). */
		struct parked *q = malloc(sizeof(*q) + rd.path_len);
		if (!q) {
			x->why = "out of memory";
			return -ENOMEM;
		}
		q->next = NULL;
		q->tag = f->tag;
		q->rd = rd;
		memcpy(q->path, rd.path, rd.path_len);
		q->rd.path = q->path;
		if (k->parked_tail)
			k->parked_tail->next = q;
		else
			k->parked = q;
		k->parked_tail = q;
		__atomic_add_fetch(&k->nparked, 1, __ATOMIC_RELAXED);
		return 0;
	}
	case PROTO_ERROR:
		x->why = "closed";      /* a goodbye or a refusal: no fault of ours */
		return -EPROTO;
	}
	x->why = "unexpected frame";
	return -EPROTO;
}

/* Closes a server connection (peer thread); freed once no reply is in
 * flight. */
static void server_close(struct peer *p, struct conn *k, const char *why)
{
	if (why && k->rank >= 0 && strcmp(why, "closed"))
		log_warn("peer %s: connection dropped: %s", p->cl.nodes[k->rank].id, why);
	else if (why && strcmp(why, "closed"))
		log_warn("peer connection dropped before its hello: %s", why);
	if (why && strcmp(why, "closed"))
		node_error(p, k->rank);
	if (k->state != SS_OPEN)
		p->handshaking--;
	pthread_mutex_lock(&k->lock);
	k->dead = 1;
	k->state = SS_HELLO;
	free_queue(k, &k->out, &k->out_tail);
	pthread_mutex_unlock(&k->lock);
	free_parked(k);
	if (k->fd >= 0) {
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, k->fd, NULL);
		close(k->fd);
		k->fd = -1;
	}
	for (struct conn **pp = &p->servers; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	conn_put_server(k);
}

/* A closed server connection waits in the graveyard until its last reply
 * is done; reap() frees it then. Peer thread. */
static void conn_put_server(struct conn *k)
{
	k->next = k->p->graveyard;
	k->p->graveyard = k;
}

static void reap(struct peer *p)
{
	for (struct conn **pp = &p->graveyard; *pp;) {
		struct conn *k = *pp;
		if (__atomic_load_n(&k->inflight, __ATOMIC_ACQUIRE)) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		pthread_mutex_destroy(&k->lock);
		free(k);
	}
}

/* ---- the loop ----------------------------------------------------- */

/* Writes what K has queued, without blocking. 0, or -errno (broken). */
static int flush(struct peer *p, struct conn *k)
{
	int r = 0;

	pthread_mutex_lock(&k->lock);
	while (k->out && k->fd >= 0) {
		struct obuf *b = k->out;
		ssize_t n = send(k->fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				r = -errno;
			break;
		}
		b->off += (size_t)n;
		if (b->off == b->len) {
			k->out = b->next;
			if (!k->out)
				k->out_tail = NULL;
			obuf_free(k, b);
		}
	}
	int want = k->out != NULL;
	if (k->fd >= 0 && r == 0 && want != k->epout) {
		struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = k };
		epoll_ctl(p->epfd, EPOLL_CTL_MOD, k->fd, &ev);
		k->epout = want;
	}
	pthread_mutex_unlock(&k->lock);
	return r;
}

static void on_accept(struct peer *p)
{
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		int fd = accept4(p->lfd, (struct sockaddr *)&from, &fl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (p->handshaking >= MAX_HANDSHAKING) {
			/* Connections that never authenticate cost a decoder each
			 * until --peer-timeout: at most this many at once. */
			char host[NI_MAXHOST] = "?";
			getnameinfo((struct sockaddr *)&from, fl, host, sizeof(host), NULL, 0, NI_NUMERICHOST);
			log_warn("peer port: %u connections already in their handshake; refused one from %s",
				 p->handshaking, host);
			close(fd);
			continue;
		}
		struct conn *k = calloc(1, sizeof(*k));
		if (!k) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		k->p = p;
		k->role = R_SERVER;
		k->fd = fd;
		k->rank = -1;
		pthread_mutex_init(&k->lock, NULL);
		proto_dec_init(&k->dec, PROTO_SERVER);
		k->hs_deadline = now() + p->timeout;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = k };
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			pthread_mutex_destroy(&k->lock);
			free(k);
			continue;
		}
		k->next = p->servers;
		p->servers = k;
		p->handshaking++;
	}
}

/* Reads what K's socket holds and feeds it to K's decoder with FN. 0: all
 * read; 1: closed or broken; else the decoder's (FN's) error. */
static int pump(struct conn *k, proto_frame_fn fn, void *arg)
{
	uint8_t buf[65536];

	for (;;) {
		ssize_t n = recv(k->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0)
			return 1;
		int r = proto_feed(&k->dec, buf, (size_t)n, fn, arg);
		if (r)
			return r;
	}
}

static void on_client_event(struct peer *p, struct conn *k, uint32_t ev)
{
	if (k->fd < 0)
		return;
	if (k->state == PS_CONNECTING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		int err = 0;
		socklen_t l = sizeof(err);
		getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err) {
			char why[160];
			snprintf(why, sizeof(why), "cannot connect: %s", strerror(err));
			client_fail(k, why);
			return;
		}
	}
	if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		struct cctx x = { .k = k };
		int r = pump(k, on_client_frame, &x);
		if (r == 1) {
			client_fail(k, "closed the connection");
			return;
		}
		if (r) {
			const char *why = r == -EBADMSG ? "sent a frame that fails its seal (forged or "
							  "altered in transit)" : x.why ? x.why : "broke the protocol";
			char copy[200];
			snprintf(copy, sizeof(copy), "%s", why);    /* x.why may be the frame's text */
			client_down(k, x.lie ? NULL : copy, r == -ESHUTDOWN);
			if (x.done)
				finish(x.done, x.res);
			return;
		}
	}
	if (flush(p, k) < 0)
		client_fail(k, "connection broken");
}

static void on_server_event(struct peer *p, struct conn *k, uint32_t ev)
{
	if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		struct sctx x = { .k = k };
		int r = pump(k, on_server_frame, &x);
		if (r == 1) {
			server_close(p, k, "closed");
			return;
		}
		if (r) {
			flush(p, k);    /* a refusal's ERROR frame, if any */
			server_close(p, k, r == -EBADMSG ? "sent a frame that fails its seal (forged or "
				     "altered in transit)" : x.why ? x.why : "protocol error");
			return;
		}
	}
	if (flush(p, k) < 0)
		server_close(p, k, "closed");
	else
		unpark(p, k);
}

/* Timeouts and wanted connections; once per loop turn. */
static void tick(struct peer *p)
{
	double t = now();

	for (unsigned i = 0; i < p->cl.n; i++) {
		struct conn *k = &p->out[i];
		if (i == p->cl.self)
			continue;
		pthread_mutex_lock(&k->lock);
		int state = k->state, kick = k->kick;
		double oldest = k->pending ? k->pending->deadline : 0;
		pthread_mutex_unlock(&k->lock);
		if (state == PS_DOWN && kick) {
			int e = start_connect(p, k);
			if (e < 0) {
				char why[160];
				snprintf(why, sizeof(why), "cannot connect: %s", strerror(-e));
				client_fail(k, why);
			}
			continue;
		}
		if (state == PS_CONNECTING && t > k->hs_deadline)
			client_fail(k, "timed out connecting");
		else if (state == PS_UP && oldest && t > oldest)
			client_fail(k, "timed out (no reply within --peer-timeout)");
		else if (state == PS_UP && flush(p, k) < 0)
			client_fail(k, "connection broken");
	}
	for (struct conn *k = p->servers, *next; k; k = next) {
		next = k->next;
		if (k->state != SS_OPEN && t > k->hs_deadline)
			server_close(p, k, "no handshake within --peer-timeout");
		else if (flush(p, k) < 0)
			server_close(p, k, "closed");
		else
			unpark(p, k);
	}
	reap(p);
}

static void *loop(void *arg)
{
	struct peer *p = arg;
	struct epoll_event evs[64];

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		int n = epoll_wait(p->epfd, evs, 64, 50);
		for (int i = 0; i < n; i++) {
			void *tag = evs[i].data.ptr;
			if (tag == &p->lmark) {
				on_accept(p);
			} else if (tag == &p->emark) {
				uint64_t v;
				if (read(p->efd, &v, sizeof(v)) < 0) {
					/* nothing to drain */
				}
			} else {
				struct conn *k = tag;
				if (k->role == R_CLIENT)
					on_client_event(p, k, evs[i].events);
				else if (k->fd >= 0)
					on_server_event(p, k, evs[i].events);
			}
		}
		tick(p);
	}
	return NULL;
}

/* ---- samples ------------------------------------------------------ */

static int samples(void *ctx, struct sample *out, int max)
{
	struct peer *p = ctx;
	int n = 0, up = 0;

	for (unsigned i = 0; i < p->cl.n; i++)
		up += __atomic_load_n(&p->ns[i].state, __ATOMIC_RELAXED) == PS_UP;
#define ADD(nm, hp, kd, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = kd, .u = (val) }
	ADD("peer_nodes", "Nodes in the peer list", SAMPLE_GAUGE, p->cl.n);
	ADD("peer_rank", "This node's rank in the peer list", SAMPLE_GAUGE, p->cl.self);
	ADD("peers_up", "Peers with a connection up now", SAMPLE_GAUGE, (uint64_t)up);
	ADD("peer_reply_bytes", "Reply bytes held for peers now (made or queued unsent)", SAMPLE_GAUGE,
	    __atomic_load_n(&p->reply_bytes, __ATOMIC_RELAXED));
	ADD("peer_reply_peak_bytes", "The most reply bytes held for peers at once", SAMPLE_GAUGE,
	    __atomic_load_n(&p->reply_peak, __ATOMIC_RELAXED));
	for (unsigned i = 0; i < p->cl.n && i < MAX_NODE_SAMPLES; i++) {
		struct node_stats *s = &p->ns[i];
		ADD(s->names[0], "Peer state: 0 this node, 1 up, 2 connecting, 3 down", SAMPLE_GAUGE,
		    (uint64_t)__atomic_load_n(&s->state, __ATOMIC_RELAXED));
		ADD(s->names[1], "Bytes fetched from this peer", SAMPLE_COUNTER,
		    __atomic_load_n(&s->read_bytes, __ATOMIC_RELAXED));
		ADD(s->names[2], "Bytes sent to this peer", SAMPLE_COUNTER,
		    __atomic_load_n(&s->served_bytes, __ATOMIC_RELAXED));
		ADD(s->names[3], "Faults of this peer", SAMPLE_COUNTER,
		    __atomic_load_n(&s->errors, __ATOMIC_RELAXED));
		ADD(s->names[4], "Replies of this peer that did not match the manifest", SAMPLE_COUNTER,
		    __atomic_load_n(&s->lies, __ATOMIC_RELAXED));
	}
#undef ADD
	return n;
}

/* ---- set-up ------------------------------------------------------- */

static int bind_listener(struct peer *p, const char *listen_at, char *err, size_t errlen)
{
	const struct cluster_node *me = &p->cl.nodes[p->cl.self];
	char host[300] = "", port[16];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *ai, *a;

	snprintf(port, sizeof(port), "%s", me->port);
	if (listen_at) {
		struct cluster tmp = { 0 };
		if (cluster_add_list(&tmp, listen_at, me->port, err, errlen) < 0) {
			cluster_free(&tmp);
			return -EINVAL;
		}
		snprintf(host, sizeof(host), "%s", tmp.nodes[0].host);
		snprintf(port, sizeof(port), "%s", tmp.nodes[0].port);
		cluster_free(&tmp);
	}
	int e = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (e) {
		snprintf(err, errlen, "peer port %s:%s: %s", *host ? host : "*", port, gai_strerror(e));
		return -EINVAL;
	}
	int last = 0;
	for (a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
			p->lfd = fd;
			break;
		}
		last = errno;
		close(fd);
	}
	freeaddrinfo(ai);
	if (p->lfd < 0) {
		snprintf(err, errlen, "cannot listen for peers on %s:%s: %s", *host ? host : "*", port,
			 strerror(last ? last : EADDRNOTAVAIL));
		return -(last ? last : EADDRNOTAVAIL);
	}
	return 0;
}

static int start_hook(void *ctx)
{
	return peer_start(ctx);
}

static void stop_hook(void *ctx)
{
	peer_free(ctx);
}

int peer_new(struct core *c, const struct peer_opts *o, struct peer **out, char *err,
	     size_t errlen)
{
	struct peer *p = calloc(1, sizeof(*p));
	const char **ids = NULL;
	int e = -ENOMEM;

	err[0] = '\0';
	if (!p)
		return -ENOMEM;
	p->lfd = p->efd = p->epfd = -1;
	if (sodium_init() < 0) {
		snprintf(err, errlen, "libsodium failed to initialize");
		free(p);
		return -EIO;
	}
	p->c = c;
	p->insecure = o->insecure || !o->key;
	if (o->key)
		memcpy(p->key, o->key, PEER_KEY_BYTES);
	p->timeout = o->timeout_s > 0 ? o->timeout_s : 2.0;
	p->conn_budget = CONN_REPLY_BYTES > 2ull * core_chunk(c) ? CONN_REPLY_BYTES : 2ull * core_chunk(c);
	p->total_budget = TOTAL_REPLY_BYTES > 8ull * core_chunk(c) ? TOTAL_REPLY_BYTES : 8ull * core_chunk(c);
	p->cl.n = o->cl->n;
	p->cl.self = o->cl->self;
	p->cl.nodes = calloc(p->cl.n, sizeof(*p->cl.nodes));
	p->out = calloc(p->cl.n, sizeof(*p->out));
	p->ns = calloc(p->cl.n, sizeof(*p->ns));
	p->addr = calloc(p->cl.n, sizeof(*p->addr));
	p->alen = calloc(p->cl.n, sizeof(*p->alen));
	p->full = calloc(p->cl.n, sizeof(*p->full));
	ids = calloc(p->cl.n, sizeof(*ids));
	if (!p->cl.nodes || !p->out || !p->ns || !p->addr || !p->alen || !p->full || !ids)
		goto fail;
	memcpy(p->cl.nodes, o->cl->nodes, p->cl.n * sizeof(*p->cl.nodes));
	for (unsigned i = 0; i < p->cl.n; i++) {
		ids[i] = p->cl.nodes[i].id;
		struct conn *k = &p->out[i];
		k->p = p;
		k->role = R_CLIENT;
		k->fd = -1;
		k->rank = (int)i;
		k->state = i == p->cl.self ? PS_SELF : PS_DOWN;
		pthread_mutex_init(&k->lock, NULL);
		proto_dec_init(&k->dec, PROTO_CLIENT);
		p->ns[i].state = i == p->cl.self ? PS_SELF : PS_DOWN;
		static const char *const what[5] = { "state", "read_bytes", "served_bytes", "errors", "lies" };
		for (int j = 0; j < 5; j++)
			snprintf(p->ns[i].names[j], sizeof(p->ns[i].names[j]), "peer_%u_%s", i, what[j]);
	}
	if ((e = owner_new(ids, p->cl.n, &p->own)) < 0) {
		snprintf(err, errlen, "peer list: two entries name the same node");
		goto fail;
	}
	p->digest = owner_digest(p->own, core_chunk(c));
	if ((e = bind_listener(p, o->listen, err, errlen)) < 0)
		goto fail;
	p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->efd < 0 || p->epfd < 0) {
		e = -errno;
		snprintf(err, errlen, "peer set-up: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &p->lmark };
	epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->lfd, &ev);
	ev.data.ptr = &p->emark;
	epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->efd, &ev);

	struct core_peer_hooks h = { .ctx = p, .owns = src_owns, .samples = samples,
				     .start = start_hook, .stop = stop_hook };
	if (o->cache_remote) {
		uint64_t cap = core_cache_capacity(c), mine = core_owned_bytes(c, src_owns, p);
		h.remote_budget = cap > mine ? cap - mine : 0;
	}
	struct source s = { .name = "peer", .ctx = p, .read = src_read };
	if ((e = core_add_source(c, &s)) < 0) {
		snprintf(err, errlen, "no room for another source");
		goto fail;
	}
	core_set_peer_hooks(c, &h);
	free(ids);
	*out = p;
	return 0;
fail:
	free(ids);
	peer_free(p);
	return e;
}

int peer_start(struct peer *p)
{
	int e = pthread_create(&p->th, NULL, loop, p);

	if (e)
		return -e;
	p->started = 1;
	/* Peers are dialed on first use, not now: nodes start in any order,
	 * and a refused early dial would only cost a backoff. */
	return 0;
}

/* Sends K a sealed ERROR(-ESHUTDOWN) if its socket takes it now. After the
 * peer thread stopped. */
static void goodbye(struct conn *k)
{
	uint8_t bye[PROTO_HDR + 64 + PROTO_TAG];
	int n = proto_enc_error(bye, sizeof(bye) - PROTO_TAG, -ESHUTDOWN, "shutting down");
	size_t len = (size_t)n + proto_mac_room(&k->tx);

	pthread_mutex_lock(&k->lock);       /* a reply may be sealed on another thread */
	if (!k->out) {                      /* else mid-frame: a goodbye would corrupt it */
		proto_seal(&k->tx, bye, len);
		(void)!send(k->fd, bye, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	pthread_mutex_unlock(&k->lock);
}

void peer_free(struct peer *p)
{
	if (!p)
		return;
	if (p->started) {
		__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
		wake(p);
		pthread_join(p->th, NULL);
	}
	/* Say goodbye, so peers log a shutdown, not a fault (best effort). */
	for (unsigned i = 0; p->out && i < p->cl.n; i++)
		if (p->out[i].fd >= 0 && p->out[i].state == PS_UP)
			goodbye(&p->out[i]);
	for (struct conn *k = p->servers; k; k = k->next)
		if (k->fd >= 0 && k->state == SS_OPEN)
			goodbye(k);
	/* Served reads still in the core answer into their connections: wait
	 * for them (storage reads end; bounded anyway). */
	for (int i = 0; i < 1000 && __atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE); i++)
		usleep(5000);
	for (unsigned i = 0; p->out && i < p->cl.n; i++) {
		struct conn *k = &p->out[i];
		if (k->fd >= 0)
			close(k->fd);
		finish_all(k->pending, -EAGAIN);
		free_queue(k, &k->out, &k->out_tail);
		free_queue(k, &k->held, &k->held_tail);
		pthread_mutex_destroy(&k->lock);
	}
	while (p->servers) {
		struct conn *k = p->servers;
		p->servers = k->next;
		if (k->fd >= 0)
			close(k->fd);
		free_queue(k, &k->out, &k->out_tail);
		free_parked(k);
		conn_put_server(k);
	}
	reap(p);
	if (p->lfd >= 0)
		close(p->lfd);
	if (p->efd >= 0)
		close(p->efd);
	if (p->epfd >= 0)
		close(p->epfd);
	owner_free(p->own);
	free(p->cl.nodes);
	free(p->out);
	free(p->ns);
	free(p->addr);
	free(p->alen);
	free(p->full);
	free(p);
}

void peer_debug_lie(struct peer *p, int mode)
{
	__atomic_store_n(&p->lie, mode, __ATOMIC_RELAXED);
}

int peer_load_secret(const char *path, uint8_t *key, char *err, size_t errlen)
{
	uint8_t data[4097];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC), warn = 0;
	ssize_t n;

	if (fd < 0) {
		snprintf(err, errlen, "--secret-file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 077)) {
		snprintf(err, errlen, "--secret-file %s: readable by group or others (chmod 600 it)", path);
		warn = 1;
	}
	n = read(fd, data, sizeof(data));
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "--secret-file %s: %s", path, strerror(errno));
		return -EIO;
	}
	if (n > 0 && data[n - 1] == '\n')
		n--;
	if (n < 16 || n > 4096) {
		snprintf(err, errlen, "--secret-file %s: expected 16 to 4096 bytes of secret, found %zd",
			 path, n);
		return -EINVAL;
	}
	crypto_generichash(key, PEER_KEY_BYTES, data, (unsigned long long)n, NULL, 0);
	sodium_memzero(data, sizeof(data));
	return warn;
}
