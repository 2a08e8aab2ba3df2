/* test_httpd.c - the metrics server (fs/util/httpd.c) alone, over
 * loopback: GET and HEAD answered from the render callback, a render that
 * needs a larger buffer gets one, 404 / 405 / 400 for the rest, addresses
 * parsed and refused, the server stops while clients idle. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "util/httpd.h"

static int big;

static int render(void *arg, const char *path, char *buf, size_t len, const char **type)
{
	(void)arg;
	*type = "text/plain";
	if (!strcmp(path, "/small"))
		return snprintf(buf, len, "hello\n");
	if (!strcmp(path, "/big")) {
		size_t want = 300000;
		if (len < want)
			return -ENOSPC;
		memset(buf, 'x', want);
		big++;
		return (int)want;
	}
	return -ENOENT;
}

/* Sends REQ to PORT and reads the whole answer into OUT. */
static size_t ask(int port, const char *req, char *out, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t got = 0;

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	for (ssize_t n; got < len - 1 && (n = read(fd, out + got, len - 1 - got)) > 0;)
		got += (size_t)n;
	out[got] = 0;
	close(fd);
	return got;
}

Test(httpd, answers_and_refuses)
{
	static char out[400000];
	struct httpd *h;
	char err[200];

	cr_assert_eq(httpd_start("127.0.0.1:0", render, NULL, &h, err, sizeof(err)), 0, "%s", err);
	int port = httpd_port(h);
	cr_assert_gt(port, 0);
	ask(port, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof(out));
	cr_expect(!strncmp(out, "HTTP/1.1 200 OK\r\n", 17), "%s", out);
	cr_expect(strstr(out, "Content-Length: 6\r\n") && strstr(out, "\r\n\r\nhello\n"), "%s", out);
	size_t n = ask(port, "GET /big?x=1 HTTP/1.0\r\n\r\n", out, sizeof(out));
	cr_expect(strstr(out, "Content-Length: 300000\r\n"), "%.200s", out);
	cr_expect_gt(n, 300000);
	cr_expect_eq(big, 1);
	ask(port, "HEAD /small HTTP/1.1\r\n\r\n", out, sizeof(out));
	cr_expect(strstr(out, "200 OK") && !strstr(out, "hello"), "%s", out);
	ask(port, "GET /none HTTP/1.1\r\n\r\n", out, sizeof(out));
	cr_expect(!strncmp(out, "HTTP/1.1 404", 12), "%s", out);
	ask(port, "DELETE /small HTTP/1.1\r\n\r\n", out, sizeof(out));
	cr_expect(!strncmp(out, "HTTP/1.1 405", 12), "%s", out);
	ask(port, "nonsense\r\n\r\n", out, sizeof(out));
	cr_expect(!strncmp(out, "HTTP/1.1 400", 12), "%s", out);
	/* An idle client does not hold up the stop. */
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int idle = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(idle, (struct sockaddr *)&a, sizeof(a)), 0);
	httpd_stop(h);
	close(idle);
}

Test(httpd, addresses)
{
	struct httpd *h;
	char err[200];

	cr_expect_eq(httpd_start("nonsense", render, NULL, &h, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "expected HOST:PORT"), "%s", err);
	cr_expect_eq(httpd_start("127.0.0.1:port", render, NULL, &h, err, sizeof(err)), -EINVAL);
	cr_expect_eq(httpd_start("[::1:80", render, NULL, &h, err, sizeof(err)), -EINVAL);
	if (httpd_start("[::1]:0", render, NULL, &h, err, sizeof(err)) == 0)
		httpd_stop(h);              /* IPv6 loopback, where the machine has it */
	cr_assert_eq(httpd_start(":0", render, NULL, &h, err, sizeof(err)), 0, "%s", err);
	httpd_stop(h);
}
