/* httpd.h - a very small HTTP/1.1 server for the daemon's metrics, so
 * Prometheus can scrape a mount as it scrapes everything else
 * (--metrics-addr HOST:PORT; JuiceFS serves :9567/metrics the same way).
 *
 * One thread, poll(2) over the listening socket and at most HTTPD_MAX_CONNS
 * connections; a request is GET or HEAD of a path, answered once and the
 * connection closed (Connection: close). What a path returns comes from
 * the RENDER callback, so this file knows nothing of the daemon.
 *
 * Untrusted input: requests are capped at HTTPD_MAX_REQUEST bytes and
 * HTTPD_TIMEOUT_S seconds to arrive whole; anything else gets 400, 404,
 * 405 or 431 and the connection is closed. Nothing is ever read from disk.
 */
#ifndef EPOCHFS_HTTPD_H
#define EPOCHFS_HTTPD_H

#include <stddef.h>

#define HTTPD_MAX_CONNS 16
#define HTTPD_MAX_REQUEST 4096
#define HTTPD_TIMEOUT_S 5.0

struct httpd;

/* Renders PATH ("/metrics", ...) into BUF (LEN bytes): its length, -ENOENT
 * (404), or -ENOSPC (BUF too small: called again with a larger one). *TYPE
 * is set to the Content-Type. Runs on the server's thread. */
typedef int (*httpd_render_fn)(void *arg, const char *path, char *buf, size_t len, const char **type);

/* Listens on ADDR ("HOST:PORT", "[V6]:PORT" or ":PORT" for all addresses)
 * and starts the thread. 0 and *OUT, or -errno with one line in ERR. */
int httpd_start(const char *addr, httpd_render_fn render, void *arg, struct httpd **out, char *err, size_t errlen);
/* The port it listens on (for ADDR port 0: the one the kernel chose). */
int httpd_port(const struct httpd *h);
/* Stops the thread and closes every connection. NULL is fine. */
void httpd_stop(struct httpd *h);

#endif
