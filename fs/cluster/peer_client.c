/* peer_client.c - the connections we dial: the peer source in front of
 * storage. A miss on an item another node owns becomes a READ on that
 * node's connection (ask()); the reply completes the read on the peer
 * thread, and anything short of a checked reply sends it to storage.
 *
 * DESIGN: requests are answered in order of their tag on a connection, so
 * the pending list is a FIFO and a reply normally matches its head. The
 * oldest pending request's deadline bounds the wait for any of them: past
 * it, the connection is failed as a whole (a peer that stops answering one
 * request is not trusted with the next). A failed connection is retried
 * after a backoff (0.5 s doubling to 30 s) and only when a read wants it,
 * so a dead node costs one refused dial per backoff, not one per read.
 * Reads made while the connection is being set up wait, unsealed, in
 * HELD and are sealed in order once the server is READY.
 *
 * Threads: pc_read() and pc_owns() run on any thread; everything else on
 * the peer thread. A fetch's done() is called with no connection locked.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>
#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t in struct preq */
#include <xxhash.h>

#include "cluster/peer_int.h"
#include "store/cache.h"
#include "store/manifest.h"
#include "util/clock.h"
#include "util/log.h"

#define BACKOFF_MIN 0.5
#define BACKOFF_MAX 30.0

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
	 * manifest the whole item is fetched (only whole items are checked).
	 * IT is the core's, valid until DONE has run. */
	struct source_item *it;
	off_t req_off;
	size_t req_len;
	void *req_buf;
	XXH3_state_t h;
	source_done_fn done;
	void *arg;
};

static void set_state(struct peer *p, unsigned rank, enum pstate s)
{
	__atomic_store_n(&p->ns[rank].state, (int)s, __ATOMIC_RELAXED);
}

static void free_req(struct preq *r)
{
	if (r->own_buf)
		free(r->buf);
	free(r);
}

/* Counts LEN bytes meant for a peer that storage will give instead. */
static void fell_back(struct peer *p, size_t len)
{
	stats_add(core_stats(p->c), STAT_PEER_FALLBACK_BYTES, len);
}

/* Answers R's caller with RES (bytes in R's buffer, or -errno: -EAGAIN
 * sends the read on to storage) and frees R. No connection locked. */
static void finish(struct peer *p, struct preq *r, ssize_t res)
{
	if (res == -EAGAIN)
		fell_back(p, r->req_len);
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

static void finish_all(struct peer *p, struct preq *list, ssize_t res)
{
	while (list) {
		struct preq *next = list->next;
		finish(p, list, res);
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
	k->retry_at = clock_now() + k->backoff;
	list = k->pending;
	k->pending = k->pending_tail = NULL;
	k->npending = 0;
	peer_obuf_drop_all(k, &k->out, &k->out_tail);
	peer_obuf_drop_all(k, &k->held, &k->held_tail);
	k->epout = 0;
	memset(&k->tx, 0, sizeof(k->tx));   /* the next connection has keys of its own */
	proto_dec_init(&k->dec, PROTO_CLIENT);
	pthread_mutex_unlock(&k->lock);
	set_state(p, (unsigned)k->rank, PS_DOWN);
	if (goodbye) {
		log_info("peer %s: shut down; its items are read from storage", p->cl.nodes[k->rank].id);
	} else {
		peer_node_error(p, k->rank);
		if (why)                    /* NULL: the caller logged it its own way */
			log_warn("peer %s: %s; its items are read from storage%s, retry in %.1f s",
				 p->cl.nodes[k->rank].id, why, was_up ? " from now on" : "", k->backoff);
	}
	finish_all(p, list, -EAGAIN);
}

static void client_fail(struct conn *k, const char *why)
{
	client_down(k, why, 0);
}

/* Asks the node at LEVEL of the item's ranking for the bytes (0: the
 * owner). A node that answers -ENOSPC (full, and without the item) sends
 * the read one level down, at most PROTO_MAX_SPILL times; we skip
 * ourselves when full and this read is not a load into our cache. Each
 * full node is still asked: it may hold the item from before it filled up,
 * and asking the next one instead would load a duplicate. */
/* IT's ranking: its first SOURCE_RANKS nodes, worked out once a read. */
static const uint16_t *ranking(struct peer *p, struct source_item *it)
{
	if (!it->ranked) {
		owner_top(p->own, it->rel, it->rel_len, it->chunk,
			  p->cl.n < SOURCE_RANKS ? p->cl.n : SOURCE_RANKS, it->rank);
		it->ranked = 1;
	}
	return it->rank;
}

static void ask(struct peer *p, struct source_item *it, off_t off, size_t len, void *buf,
		source_done_fn done, void *arg, unsigned level)
{
	uint32_t chunk_size = core_chunk(p->c), chunk = it->chunk;
	const struct index_version *v = &it->v;
	const char *rel = it->rel;
	size_t plen = it->rel_len;
	unsigned who, self = p->cl.self;
	int file = -1;

	if (!len || cache_span((uint64_t)off, len, chunk_size, NULL) != 1 || plen > PROTO_MAX_PATH ||
	    len > PROTO_MAX_READ) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	/* With a manifest, a file it cannot check is never taken from a peer. */
	if (core_manifest(p->c) && (file = core_verifiable(p->c, it->id, v)) < 0) {
		done(arg, -EAGAIN, NULL);
		return;
	}
	const uint16_t *rank = ranking(p, it);
	/* We pass our own turn only for a read we could not keep (no BUF): a
	 * load into our cache (BUF) reads storage, or the node we asked could
	 * ask us back for the very item we are loading, and both would wait. */
	while (level < SOURCE_RANKS && level < p->cl.n && rank[level] == self && !buf &&
	       core_cache_full(p->c))
		level++;
	if (level >= SOURCE_RANKS || level >= p->cl.n || (who = rank[level]) == self) {
		done(arg, -EAGAIN, NULL);   /* storage: ours to keep, if we may, or nobody's */
		return;
	}
	struct conn *k = &p->out[who];
	struct preq *r = malloc(sizeof(*r));
	size_t room = p->insecure ? 0 : PROTO_TAG;
	struct obuf *frame = peer_obuf_new(PROTO_HDR + 32 + plen + room);
	if (!r || !frame) {
		free(r);
		free(frame);
		fell_back(p, len);
		done(arg, -EAGAIN, NULL);
		return;
	}
	*r = (struct preq){ .buf = buf, .want = len, .done = done, .arg = arg, .level = level,
			    .off = off, .file = file, .it = it, .req_off = off, .req_len = len,
			    .req_buf = buf };
	if (file >= 0) {
		r->off = (off_t)chunk * chunk_size;
		r->want = cache_chunk_len(v->size, chunk_size, chunk);
	}
	if (!buf || r->want != len) {
		r->own_buf = 1;
		r->buf = malloc(r->want);
	}
	if (!r->buf) {
		free_req(r);
		free(frame);
		done(arg, -EAGAIN, NULL);
		return;
	}
	XXH3_64bits_reset(&r->h);
	double t = clock_now();
	pthread_mutex_lock(&k->lock);
	if ((k->state == PS_DOWN && t < k->retry_at) || k->npending >= MAX_PENDING) {
		pthread_mutex_unlock(&k->lock);
		fell_back(p, len);
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
		sent = peer_push(k, frame);
	} else {
		peer_obuf_append(&k->held, &k->held_tail, frame);  /* sealed and sent once READY */
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
		peer_wake(p);
}

void pc_read(void *ctx, struct source_item *it, off_t off, size_t len, void *buf,
	     source_done_fn done, void *arg)
{
	ask(ctx, it, off, len, buf, done, arg, 0);
}

/* Ours to keep: we own it, or every node ranked before us for it is full
 * (within the owner and its runner-ups). */
int pc_owns(void *ctx, struct source_item *it)
{
	struct peer *p = ctx;
	const uint16_t *rank = ranking(p, it);

	for (unsigned j = 0; j < SOURCE_RANKS && j < p->cl.n; j++) {
		if (rank[j] == p->cl.self)
			return 1;
		if (!__atomic_load_n(&p->full[rank[j]], __ATOMIC_RELAXED))
			return 0;
	}
	return 0;
}

/* The node a miss of IT goes to first: the first in its ranking that is
 * not full (within the owner and its runner-ups), else the owner. */
int pc_keeper(void *ctx, struct source_item *it, char *name, size_t len)
{
	struct peer *p = ctx;
	const uint16_t *rank = ranking(p, it);
	unsigned who = rank[0], n = p->cl.n < SOURCE_RANKS ? p->cl.n : SOURCE_RANKS;

	for (unsigned j = 0; j < n; j++)
		if (rank[j] == p->cl.self || !__atomic_load_n(&p->full[rank[j]], __ATOMIC_RELAXED)) {
			who = rank[j];
			break;
		}
	snprintf(name, len, "%s", p->cl.nodes[who].id);
	return who == p->cl.self;
}

/* Dials K (the address resolved once, then kept) and queues its HELLO
 * with a fresh nonce. Peer thread. 0 or -errno. */
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
	int r = peer_obuf_queue(&k->out, &k->out_tail, hello, (size_t)n);
	pthread_mutex_unlock(&k->lock);
	k->hs_deadline = clock_now() + p->timeout;
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
		if (!peer_proof_ok(p, 'S', k->nonce, ch.nonce, ch.mac)) {
			x->why = "failed authentication (is --secret-file the same on both?)";
			return -EPROTO;
		}
		uint8_t mac[PROTO_MAC];
		k->challenged = 1;
		if (!p->insecure)
			proto_session_keys(p->key, k->nonce, ch.nonce, p->digest, k->c2s, k->s2c);
		peer_prove(p, 'C', ch.nonce, k->nonce, mac);
		int n = proto_enc_auth(buf, sizeof(buf), mac);
		return peer_send(k, buf, (size_t)n);
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
			peer_obuf_append(&k->out, &k->out_tail, b);
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
					 "storage", p->cl.nodes[k->rank].id, r->it->rel);
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
			ask(p, r->it, r->req_off, r->req_len, r->req_buf, r->done, r->arg,
			    r->level + 1);
			free_req(r);
			return 0;
		}
		/* A refusal (the file is another version there, gone, ...) is
		 * no fault: storage gives the definite answer. */
		finish(p, r, e.status >= 0 ? e.status : -EAGAIN);
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

void pc_event(struct peer *p, struct conn *k, uint32_t ev)
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
		int r = peer_pump(k, on_client_frame, &x);
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
				finish(p, x.done, x.res);
			return;
		}
	}
	if (peer_flush(p, k) < 0)
		client_fail(k, "connection broken");
}

void pc_tick(struct peer *p, double t)
{
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
		else if (state == PS_UP && peer_flush(p, k) < 0)
			client_fail(k, "connection broken");
	}
}

void pc_close(struct conn *k)
{
	if (k->fd >= 0)
		close(k->fd);
	finish_all(k->p, k->pending, -EAGAIN);
	peer_obuf_drop_all(k, &k->out, &k->out_tail);
	peer_obuf_drop_all(k, &k->held, &k->held_tail);
	pthread_mutex_destroy(&k->lock);
}
