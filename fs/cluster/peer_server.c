/* peer_server.c - the connections peers dial to us: the handshake, then
 * their READs served through our core (core_read_peer(): our cache, or
 * one storage load that admits the item) and answered in DATA frames and
 * an END.
 *
 * DESIGN: a served reply is one buffer: the item's bytes copied once from
 * the cache (or the load buffer) between frame headers, on whatever thread
 * the core answered on, so the core's buffer is free the moment the
 * callback returns; it is sealed and queued under the connection's lock,
 * which keeps the seals in the connection's order. Every reply holds reply
 * budget from the READ that asked for it until its last byte is sent: a
 * READ past the budget is parked (taken off the socket, not handed to the
 * core) until replies drain, so a client that asks and never reads holds
 * at most the budget of our memory (and MAX_PENDING requests: one more
 * closes it). A closed connection may still have reads in the core that
 * will answer into it: it waits in the graveyard, its replies dropped,
 * until the last one is done.
 *
 * Threads: served() runs on any thread; everything else on the peer thread.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>
#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "cluster/peer_int.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_HANDSHAKING 64          /* accepted, not yet authenticated */
#define MAX_CONNS_PER_NODE 4        /* authenticated connections from one node */

/* A READ waiting for reply budget. */
struct parked {
	struct parked *next;
	uint64_t tag;
	struct proto_read rd;       /* rd.path points into path */
	char path[];
};

/* A READ in the core: what its reply needs. */
struct sreq {
	struct conn *k;
	uint64_t tag;
	uint64_t charge;            /* reply budget taken for it */
};

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
	struct obuf *b = peer_obuf_new(n + (frames + 1) * (PROTO_HDR + room) + 16);
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
			all_sent = peer_push(k, b);
			b = NULL;
			if (n) {
				stats_add(core_stats(p->c), STAT_PEER_SERVED_BYTES, n);
				if (k->rank >= 0)
					__atomic_add_fetch(&p->ns[k->rank].served_bytes, n, __ATOMIC_RELAXED);
			}
		}
		pthread_mutex_unlock(&k->lock);
		if (b)
			peer_obuf_free(k, b);    /* the connection closed meanwhile */
	} else {
		uncharge(k, s->charge);     /* no memory: the asker times out, storage answers */
	}
	free(s);
	/* The thread writes what the socket did not take, and starts READs
	 * that waited for the budget this reply may have freed. */
	if (!all_sent || __atomic_load_n(&k->nparked, __ATOMIC_RELAXED))
		peer_wake(p);
	/* Last: once these reach 0, K (reap) and P (peer_free) may go. */
	__atomic_sub_fetch(&k->inflight, 1, __ATOMIC_ACQ_REL);
	__atomic_sub_fetch(&p->inflight, 1, __ATOMIC_ACQ_REL);
}

/* on_server_frame()'s context: the connection, and why it failed. */
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
			peer_send(k, buf, (size_t)n);
			x->why = bad;
			return -EPERM;      /* close after the error is written */
		}
		k->rank = (int)h.rank;
		memcpy(k->their, h.nonce, PROTO_NONCE);
		randombytes_buf(k->nonce, PROTO_NONCE);
		struct proto_challenge ch = { .version = PROTO_VERSION, .rank = p->cl.self };
		memcpy(ch.nonce, k->nonce, PROTO_NONCE);
		peer_prove(p, 'S', k->their, k->nonce, ch.mac);
		int n = proto_enc_challenge(buf, sizeof(buf), &ch);
		k->state = SS_AUTH;
		return peer_send(k, buf, (size_t)n);
	}
	case PROTO_AUTH: {
		uint8_t mac[PROTO_MAC];
		if (k->state != SS_AUTH || proto_dec_auth(f, mac)) {
			x->why = "malformed authentication";
			return -EPROTO;
		}
		if (!peer_proof_ok(p, 'C', k->nonce, k->their, mac)) {
			int n = proto_enc_error(buf, sizeof(buf), -EACCES, "authentication failed");
			peer_send(k, buf, (size_t)n);
			x->why = "failed authentication (wrong --secret-file?)";
			return -EACCES;
		}
		int n = proto_enc_ready(buf, sizeof(buf));
		if (!p->insecure)
			proto_session_keys(p->key, k->their, k->nonce, p->digest, k->c2s, k->s2c);
		/* READY goes out as the last frame unsealed; what follows it is. */
		pthread_mutex_lock(&k->lock);
		int r = peer_obuf_queue(&k->out, &k->out_tail, buf, (size_t)n);
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

/* Closes a server connection (peer thread); freed once no reply is in
 * flight. */
static void server_close(struct peer *p, struct conn *k, const char *why)
{
	if (why && k->rank >= 0 && strcmp(why, "closed"))
		log_warn("peer %s: connection dropped: %s", p->cl.nodes[k->rank].id, why);
	else if (why && strcmp(why, "closed"))
		log_warn("peer connection dropped before its hello: %s", why);
	if (why && strcmp(why, "closed"))
		peer_node_error(p, k->rank);
	if (k->state != SS_OPEN)
		p->handshaking--;
	pthread_mutex_lock(&k->lock);
	k->dead = 1;
	k->state = SS_HELLO;
	peer_obuf_drop_all(k, &k->out, &k->out_tail);
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

void ps_accept(struct peer *p)
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
		k->hs_deadline = clock_now() + p->timeout;
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

void ps_event(struct peer *p, struct conn *k, uint32_t ev)
{
	if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		struct sctx x = { .k = k };
		int r = peer_pump(k, on_server_frame, &x);
		if (r == 1) {
			server_close(p, k, "closed");
			return;
		}
		if (r) {
			peer_flush(p, k);    /* a refusal's ERROR frame, if any */
			server_close(p, k, r == -EBADMSG ? "sent a frame that fails its seal (forged or "
				     "altered in transit)" : x.why ? x.why : "protocol error");
			return;
		}
	}
	if (peer_flush(p, k) < 0)
		server_close(p, k, "closed");
	else
		unpark(p, k);
}

void ps_tick(struct peer *p, double t)
{
	for (struct conn *k = p->servers, *next; k; k = next) {
		next = k->next;
		if (k->state != SS_OPEN && t > k->hs_deadline)
			server_close(p, k, "no handshake within --peer-timeout");
		else if (peer_flush(p, k) < 0)
			server_close(p, k, "closed");
		else
			unpark(p, k);
	}
	reap(p);
}

void ps_close_all(struct peer *p)
{
	while (p->servers) {
		struct conn *k = p->servers;
		p->servers = k->next;
		if (k->fd >= 0)
			close(k->fd);
		peer_obuf_drop_all(k, &k->out, &k->out_tail);
		free_parked(k);
		conn_put_server(k);
	}
	reap(p);
}
