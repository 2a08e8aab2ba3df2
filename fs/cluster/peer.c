/* peer.c - see peer.h and docs/peer-protocol.md. The peer thread and what
 * both sides share: connections' send queues, the handshake's proofs, the
 * loop, set-up and teardown, samples. The sides are peer_client.c (what
 * we ask) and peer_server.c (what we serve); peer_int.h holds their
 * common structs and lock rules.
 *
 * DESIGN: one thread, one epoll set, for every socket of both roles: the
 * listening socket, the connections we dialed (one per peer, indexed by
 * rank) and those peers dialed to us. Other threads never touch a socket
 * but to try one send with nothing queued before it (peer_push()): a read
 * that needs a peer appends its READ frame to the connection's queue
 * under the connection's mutex and wakes the thread (eventfd); a served
 * reply, made on whatever thread the core answered on, is queued the same
 * way. The thread writes queues out without blocking (EPOLLOUT while bytes
 * wait) and feeds what it receives to proto_feed(). A thread per
 * connection would be less code, but one thread keeps every timeout, state
 * change and callback in one place, and a slow peer cannot pin a thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
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

#include "cluster/peer_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sched.h"
#include "util/trust.h"
#include "util/worker.h"

#define MAX_NODE_SAMPLES 64         /* per-node samples for this many nodes */

void peer_wake(struct peer *p)
{
	uint64_t one = 1;

	if (write(p->efd, &one, sizeof(one)) < 0) {
		/* The counter is saturated: the thread is awake anyway. */
	}
}

void peer_node_error(struct peer *p, int rank)
{
	stats_add(core_stats(p->c), STAT_PEER_ERRORS, 1);
	if (rank >= 0)
		__atomic_add_fetch(&p->ns[rank].errors, 1, __ATOMIC_RELAXED);
}

/* ---- send queues -------------------------------------------------- */

struct obuf *peer_obuf_new(size_t cap)
{
	struct obuf *b = malloc(sizeof(*b) + cap);

	if (b)
		*b = (struct obuf){ .len = cap };
	return b;
}

void peer_obuf_free(struct conn *k, struct obuf *b)
{
	if (b->charge) {
		__atomic_sub_fetch(&k->reserved, b->charge, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&k->p->reply_bytes, b->charge, __ATOMIC_RELAXED);
	}
	free(b);
}

void peer_obuf_append(struct obuf **head, struct obuf **tail, struct obuf *b)
{
	b->next = NULL;
	if (*tail)
		(*tail)->next = b;
	else
		*head = b;
	*tail = b;
}

int peer_obuf_queue(struct obuf **head, struct obuf **tail, const void *data, size_t len)
{
	struct obuf *b = peer_obuf_new(len);

	if (!b)
		return -ENOMEM;
	memcpy(b->data, data, len);
	peer_obuf_append(head, tail, b);
	return 0;
}

void peer_obuf_drop_all(struct conn *k, struct obuf **head, struct obuf **tail)
{
	while (*head) {
		struct obuf *b = *head;
		*head = b->next;
		peer_obuf_free(k, b);
	}
	*tail = NULL;
}

int peer_push(struct conn *k, struct obuf *b)
{
	if (!k->out && k->fd >= 0) {
		ssize_t n = send(k->fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			b->off += (size_t)n;
		if (b->off == b->len) {
			peer_obuf_free(k, b);
			return 1;
		}
		/* An error is the peer thread's to find (its recv or flush). */
	}
	peer_obuf_append(&k->out, &k->out_tail, b);
	return 0;
}

int peer_send(struct conn *k, const void *data, size_t len)
{
	pthread_mutex_lock(&k->lock);
	int r = peer_obuf_queue(&k->out, &k->out_tail, data, len);
	pthread_mutex_unlock(&k->lock);
	return r;
}

int peer_flush(struct peer *p, struct conn *k)
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
			peer_obuf_free(k, b);
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

/* ---- the handshake's proofs --------------------------------------- */

void peer_prove(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
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

int peer_proof_ok(const struct peer *p, char role, const uint8_t *first, const uint8_t *second,
		  const uint8_t mac[PROTO_MAC])
{
	uint8_t want[PROTO_MAC];

	if (p->insecure)
		return 1;
	peer_prove(p, role, first, second, want);
	return sodium_memcmp(want, mac, PROTO_MAC) == 0;
}

/* ---- the loop ----------------------------------------------------- */

int peer_pump(struct conn *k, proto_frame_fn fn, void *arg)
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

/* Timeouts and wanted connections; once per loop turn. */
static void tick(struct peer *p)
{
	double t = clock_now();

	pc_tick(p, t);
	ps_tick(p, t);
}

static void *loop(void *arg)
{
	struct peer *p = arg;
	struct epoll_event evs[64];

	pthread_setname_np(pthread_self(), "epochfs-peer");
	(void)sched_slice_for_requests();   /* a fetch's reply finishes a read */
	while (worker_running(&p->w)) {
		int n = epoll_wait(p->epfd, evs, 64, 50);
		for (int i = 0; i < n; i++) {
			void *tag = evs[i].data.ptr;
			if (tag == &p->lmark) {
				ps_accept(p);
			} else if (tag == &p->emark) {
				uint64_t v;
				if (read(p->efd, &v, sizeof(v)) < 0) {
					/* nothing to drain */
				}
			} else {
				struct conn *k = tag;
				if (k->role == R_CLIENT)
					pc_event(p, k, evs[i].events);
				else if (k->fd >= 0)
					ps_event(p, k, evs[i].events);
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

/* ---- set-up and teardown ------------------------------------------ */

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

/* The worker's kick: the peer thread sleeps in epoll_wait(), not on the
 * worker's condvar. */
static void kick(void *arg)
{
	peer_wake(arg);
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
	if ((e = worker_init(&p->w)) < 0) {
		free(p);
		return e;
	}
	worker_set_kick(&p->w, kick, p);
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
	for (unsigned i = 0; p->out && i < p->cl.n; i++) {
		/* Before anything can fail: peer_free() closes and destroys these. */
		p->out[i].fd = -1;
		pthread_mutex_init(&p->out[i].lock, NULL);
	}
	if (!p->cl.nodes || !p->out || !p->ns || !p->addr || !p->alen || !p->full || !ids)
		goto fail;
	memcpy(p->cl.nodes, o->cl->nodes, p->cl.n * sizeof(*p->cl.nodes));
	for (unsigned i = 0; i < p->cl.n; i++) {
		ids[i] = p->cl.nodes[i].id;
		struct conn *k = &p->out[i];
		k->p = p;
		k->role = R_CLIENT;
		k->rank = (int)i;
		k->state = i == p->cl.self ? PS_SELF : PS_DOWN;
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

	struct core_peer_hooks h = { .ctx = p, .owns = pc_owns, .keeper = pc_keeper, .samples = samples,
				     .start = start_hook, .stop = stop_hook };
	if (o->cache_remote) {
		uint64_t cap = core_cache_capacity(c), mine = core_owned_bytes(c, pc_owns, p);
		h.remote_budget = cap > mine ? cap - mine : 0;
	}
	struct source s = { .name = "peer", .ctx = p, .read = pc_read };
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
	int e = worker_start(&p->w, 1, loop, p);

	if (e < 0)
		return e;
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
	worker_stop(&p->w);         /* its kick wakes the thread's epoll_wait() */
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
	for (unsigned i = 0; p->out && i < p->cl.n; i++)
		pc_close(&p->out[i]);
	ps_close_all(p);
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
	worker_destroy(&p->w);
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
	char why[400];
	int fd = trust_file(path, why, sizeof(why)), warn = 0;
	ssize_t n;

	/* Whoever can change the secret can join the cluster. */
	if (fd < 0) {
		snprintf(err, errlen, "--secret-file %s: %s", path, why);
		return fd;
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
