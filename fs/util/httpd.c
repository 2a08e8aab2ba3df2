/* httpd.c - the metrics server; see httpd.h.
 *
 * DESIGN: one thread (util/worker.h) and poll(2) rather than a thread a connection: a
 * scraper connects every few seconds and leaves; a slow or silent client
 * costs a slot (16) and at most HTTPD_TIMEOUT_S, never a thread. Reads are
 * non-blocking; the reply is written with a send timeout, so a client that
 * never reads holds the thread 2 s at most. The stop is an eventfd in the
 * poll set.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "util/clock.h"
#include "util/httpd.h"
#include "util/worker.h"

struct conn {
	int fd;
	size_t used;
	double since;
	char req[HTTPD_MAX_REQUEST];
};

struct httpd {
	int lfd, stopfd, port;
	httpd_render_fn render;
	void *arg;
	struct worker w;            /* the thread: it sleeps in poll(), the stop kicks STOPFD */
	struct conn conns[HTTPD_MAX_CONNS];
	char *out;                  /* the rendering buffer, grown as needed */
	size_t outcap;
};

/* "HOST:PORT", "[V6]:PORT", ":PORT" into HOST (empty: any) and PORT. */
static int split_addr(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon;

	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');
		if (!end || end[1] != ':' || (size_t)(end - addr - 1) >= hlen)
			return -EINVAL;
		memcpy(host, addr + 1, (size_t)(end - addr - 1));
		host[end - addr - 1] = 0;
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || (size_t)(colon - addr) >= hlen)
			return -EINVAL;
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = 0;
	}
	if (!colon[1] || strlen(colon + 1) >= plen || strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return -EINVAL;
	snprintf(port, plen, "%s", colon + 1);
	return 0;
}

static void send_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;             /* the client left, or would not read: let it go */
		p += n;
		len -= (size_t)n;
	}
}

static void reply(int fd, int code, const char *status, const char *type, const char *body, size_t len,
		  int head)
{
	char h[256];
	int n = snprintf(h, sizeof(h), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", code, status, type, len);

	send_all(fd, h, (size_t)n);
	if (!head && len)
		send_all(fd, body, len);
}

static void error_reply(int fd, int code, const char *status)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", code, status);

	reply(fd, code, status, "text/plain; charset=utf-8", body, (size_t)n, 0);
}

/* Answers the whole request in C and closes it. */
static void answer(struct httpd *h, struct conn *c)
{
	char method[8], path[1024];
	const char *type = "text/plain; charset=utf-8";
	struct timeval tv = { 2, 0 };
	int fl = fcntl(c->fd, F_GETFL);

	fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c->req[c->used] = 0;
	if (sscanf(c->req, "%7s %1023s HTTP/1.%*d", method, path) != 2 || path[0] != '/') {
		error_reply(c->fd, 400, "Bad Request");
		return;
	}
	int head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET")) {
		error_reply(c->fd, 405, "Method Not Allowed");
		return;
	}
	path[strcspn(path, "?#")] = 0;
	for (;;) {
		int n = h->render(h->arg, path, h->out, h->outcap, &type);
		if (n == -ENOSPC && h->outcap < (64u << 20)) {
			char *bigger = realloc(h->out, h->outcap * 2);
			if (!bigger)
				break;
			h->out = bigger;
			h->outcap *= 2;
			continue;
		}
		if (n >= 0) {
			reply(c->fd, 200, "OK", type, h->out, (size_t)n, head);
			return;
		}
		if (n == -ENOENT) {
			error_reply(c->fd, 404, "Not Found");
			return;
		}
		break;
	}
	error_reply(c->fd, 500, "Internal Server Error");
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	c->fd = -1;
	c->used = 0;
}

static void kick(void *arg)
{
	struct httpd *h = arg;
	uint64_t one = 1;

	if (write(h->stopfd, &one, sizeof(one)) != sizeof(one)) {
		/* an eventfd write fails only on overflow: it is readable then */
	}
}

static void *main_loop(void *arg)
{
	struct httpd *h = arg;
	struct pollfd p[HTTPD_MAX_CONNS + 2];

	while (worker_running(&h->w)) {
		int n = 0, idx[HTTPD_MAX_CONNS];
		p[n++] = (struct pollfd){ .fd = h->stopfd, .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = h->lfd, .events = POLLIN };
		for (int i = 0; i < HTTPD_MAX_CONNS; i++)
			if (h->conns[i].fd >= 0) {
				idx[n - 2] = i;
				p[n++] = (struct pollfd){ .fd = h->conns[i].fd, .events = POLLIN };
			}
		if (poll(p, (nfds_t)n, 1000) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		double now = clock_now();
		for (int k = 2; k < n; k++) {
			struct conn *c = &h->conns[idx[k - 2]];
			if (p[k].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t got = read(c->fd, c->req + c->used, sizeof(c->req) - 1 - c->used);
				if (got <= 0) {
					if (got < 0 && (errno == EAGAIN || errno == EINTR))
						continue;
					conn_close(c);
					continue;
				}
				c->used += (size_t)got;
				c->req[c->used] = 0;
				if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
					answer(h, c);
					conn_close(c);
				} else if (c->used >= sizeof(c->req) - 1) {
					error_reply(c->fd, 431, "Request Header Fields Too Large");
					conn_close(c);
				}
			} else if (now - c->since > HTTPD_TIMEOUT_S) {
				conn_close(c);      /* it never sent a whole request */
			}
		}
		if (p[1].revents & POLLIN) {
			int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0) {
				int i = 0;
				while (i < HTTPD_MAX_CONNS && h->conns[i].fd >= 0)
					i++;
				if (i == HTTPD_MAX_CONNS) {
					close(fd);  /* full: the scraper tries again */
				} else {
					h->conns[i].fd = fd;
					h->conns[i].used = 0;
					h->conns[i].since = clock_now();
				}
			}
		}
	}
	return NULL;
}

int httpd_start(const char *addr, httpd_render_fn render, void *arg, struct httpd **out, char *err, size_t errlen)
{
	char host[256], port[16];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE },
			*res = NULL;
	struct httpd *h;
	int e, one = 1;

	if (split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0) {
		snprintf(err, errlen, "--metrics-addr %s: expected HOST:PORT, [IPV6]:PORT or :PORT", addr);
		return -EINVAL;
	}
	if ((e = getaddrinfo(host[0] ? host : NULL, port, &hints, &res))) {
		snprintf(err, errlen, "--metrics-addr %s: %s", addr, gai_strerror(e));
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	h->render = render;
	h->arg = arg;
	h->stopfd = -1;
	for (int i = 0; i < HTTPD_MAX_CONNS; i++)
		h->conns[i].fd = -1;
	h->lfd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->lfd < 0 || setsockopt(h->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(h->lfd, res->ai_addr, res->ai_addrlen) < 0 || listen(h->lfd, 16) < 0) {
		e = -errno;
		snprintf(err, errlen, "--metrics-addr %s: %s", addr, strerror(-e));
		goto fail;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(h->lfd, (struct sockaddr *)&ss, &sl) == 0)
		h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							 : ((struct sockaddr_in *)&ss)->sin_port);
	h->outcap = 64u << 10;
	h->out = malloc(h->outcap);
	h->stopfd = eventfd(0, EFD_CLOEXEC);
	if (!h->out || h->stopfd < 0) {
		e = h->out ? -errno : -ENOMEM;
		snprintf(err, errlen, "--metrics-addr %s: %s", addr, strerror(-e));
		goto fail;
	}
	if ((e = worker_init(&h->w)) < 0) {
		snprintf(err, errlen, "--metrics-addr %s: %s", addr, strerror(-e));
		goto fail;
	}
	worker_set_kick(&h->w, kick, h);
	if ((e = worker_start(&h->w, 1, main_loop, h)) < 0) {
		worker_destroy(&h->w);
		snprintf(err, errlen, "--metrics-addr %s: cannot start its thread: %s", addr, strerror(-e));
		goto fail;
	}
	freeaddrinfo(res);
	*out = h;
	return 0;
fail:
	freeaddrinfo(res);
	if (h->lfd >= 0)
		close(h->lfd);
	if (h->stopfd >= 0)
		close(h->stopfd);
	free(h->out);
	free(h);
	return e;
}

int httpd_port(const struct httpd *h)
{
	return h->port;
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	worker_stop(&h->w);
	worker_destroy(&h->w);
	for (int i = 0; i < HTTPD_MAX_CONNS; i++)
		if (h->conns[i].fd >= 0)
			close(h->conns[i].fd);
	close(h->lfd);
	close(h->stopfd);
	free(h->out);
	free(h);
}
