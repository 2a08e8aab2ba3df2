/* cluster.c - see cluster.h.
 *
 * DESIGN: SLURM's hostlist syntax is expanded here rather than by calling
 * `scontrol show hostnames`: daemons start on nodes that may not have the
 * SLURM client tools, and the syntax is small (prefix, bracketed ranges and
 * numbers with zero padding kept, suffix, several bracket groups in one name
 * multiply out).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"

#define FAIL(code, ...) do { snprintf(err, errlen, __VA_ARGS__); return (code); } while (0)

static int valid_port(const char *p)
{
	char *end;
	long v;

	if (!*p || strlen(p) > 5)
		return 0;
	for (const char *q = p; *q; q++)
		if (!isdigit((unsigned char)*q))
			return 0;
	v = strtol(p, &end, 10);
	return v >= 1 && v <= 65535;
}

static int valid_host(const char *h, int v6)
{
	if (!*h || strlen(h) > 253)
		return 0;
	for (const char *q = h; *q; q++) {
		unsigned char ch = (unsigned char)*q;
		if (v6 ? !(isxdigit(ch) || ch == ':' || ch == '.' || ch == '%')
		       : !(isalnum(ch) || ch == '-' || ch == '.' || ch == '_'))
			return 0;
	}
	return 1;
}

/* Appends one "host[:port]" entry (S, N bytes). */
static int add_one(struct cluster *c, const char *s, size_t n, const char *dport, char *err,
		   size_t errlen)
{
	char buf[300], *host = buf, *port = NULL;
	int v6 = 0;

	while (n && isspace((unsigned char)*s))
		s++, n--;
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (!n)
		FAIL(-EINVAL, "empty entry in the peer list");
	if (n >= sizeof(buf))
		FAIL(-EINVAL, "peer %.40s...: too long", s);
	memcpy(buf, s, n);
	buf[n] = '\0';
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');
		if (!close || (close[1] && close[1] != ':'))
			FAIL(-EINVAL, "peer %s: expected [IPv6]:port", buf);
		*close = '\0';
		host = buf + 1;
		port = close[1] ? close + 2 : NULL;
		v6 = 1;
	} else if ((port = strchr(buf, ':'))) {
		if (strchr(port + 1, ':'))
			FAIL(-EINVAL, "peer %s: an IPv6 address goes in brackets, [addr]:port", buf);
		*port++ = '\0';
	}
	if (!port)
		port = (char *)dport;
	if (!valid_host(host, v6))
		FAIL(-EINVAL, "peer %s: not a host name or address", buf[0] == '[' ? buf + 1 : buf);
	if (!valid_port(port))
		FAIL(-EINVAL, "peer %s: port %s is not a number from 1 to 65535", host, port);
	if (c->n == CLUSTER_MAX_NODES)
		FAIL(-E2BIG, "more than %d peers", CLUSTER_MAX_NODES);
	struct cluster_node *nodes = realloc(c->nodes, (c->n + 1) * sizeof(*nodes));
	if (!nodes)
		FAIL(-ENOMEM, "out of memory");
	c->nodes = nodes;
	struct cluster_node *nd = &nodes[c->n++];
	snprintf(nd->host, sizeof(nd->host), "%.255s", host);
	snprintf(nd->port, sizeof(nd->port), "%s", port);
	snprintf(nd->id, sizeof(nd->id), v6 ? "[%.255s]:%.7s" : "%.255s:%.7s", host, port);
	return 0;
}

int cluster_add_list(struct cluster *c, const char *list, const char *dport, char *err,
		     size_t errlen)
{
	const char *p = list;

	if (!*list)
		FAIL(-EINVAL, "--peers: empty list");
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		int r = add_one(c, p, n, dport, err, errlen);
		if (r)
			return r;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

int cluster_add_file(struct cluster *c, const char *path, const char *dport, char *err,
		     size_t errlen)
{
	FILE *f = fopen(path, "re");
	char line[512];
	unsigned lineno = 0;

	if (!f)
		FAIL(-errno, "--peers-file %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			FAIL(-EINVAL, "%s:%u: line too long", path, lineno);
		}
		if (hash)
			*hash = '\0';
		size_t n = strlen(line);
		while (n && isspace((unsigned char)line[n - 1]))
			line[--n] = '\0';
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (!*s)
			continue;
		int r = add_one(c, s, strlen(s), dport, err, errlen);
		if (r) {
			char why[256];
			snprintf(why, sizeof(why), "%s", err);
			fclose(f);
			FAIL(r, "%s:%u: %s", path, lineno, why);
		}
	}
	fclose(f);
	if (!c->n)
		FAIL(-EINVAL, "--peers-file %s: no peers in it", path);
	return 0;
}

/* Expands one hostlist name (no top-level commas) into C, recursively over
 * its bracket groups. */
static int expand(struct cluster *c, const char *prefix, const char *rest, const char *dport,
		  char *err, size_t errlen)
{
	const char *open = strchr(rest, '[');
	char name[512];

	if (!open) {
		int n = snprintf(name, sizeof(name), "%s%s", prefix, rest);
		if (n < 0 || (size_t)n >= sizeof(name))
			FAIL(-EINVAL, "SLURM host name too long");
		return add_one(c, name, strlen(name), dport, err, errlen);
	}
	const char *close = strchr(open, ']');
	if (!close)
		FAIL(-EINVAL, "SLURM_JOB_NODELIST: unbalanced '['");
	char head[512], ranges[512];
	int hn = snprintf(head, sizeof(head), "%s%.*s", prefix, (int)(open - rest), rest);
	if (hn < 0 || (size_t)hn >= sizeof(head) || (size_t)(close - open - 1) >= sizeof(ranges))
		FAIL(-EINVAL, "SLURM host name too long");
	memcpy(ranges, open + 1, (size_t)(close - open - 1));
	ranges[close - open - 1] = '\0';
	/* A group with no range ("[]", "[,]") names nobody. Left to the loop
	 * below it expanded to nothing, silently, and the groups before it
	 * multiplied: "a[1-400]b[1-400]c[]" ran 160,000 empty expansions
	 * (tests/fuzz/fuzz_text.c). With every group naming someone, each
	 * expansion adds a node, and CLUSTER_MAX_NODES bounds the work. */
	if (strspn(ranges, ",") == strlen(ranges))
		FAIL(-EINVAL, "SLURM_JOB_NODELIST: empty range [%s]", ranges);
	char *save = NULL;
	for (char *r = strtok_r(ranges, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(r, '-'), *end;
		const char *lo_s = r;
		if (dash)
			*dash = '\0';
		/* Digits only, and at most 9 of them: strtoul saturates on longer
		 * numbers, and a range ending at ULONG_MAX never ended. */
		if (!*lo_s || strspn(lo_s, "0123456789") != strlen(lo_s) || strlen(lo_s) > 9 ||
		    (dash && (!dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1) ||
			      strlen(dash + 1) > 9)))
			FAIL(-EINVAL, "SLURM_JOB_NODELIST: bad range [%s]", open + 1);
		unsigned long lo = strtoul(lo_s, &end, 10), hi = dash ? strtoul(dash + 1, &end, 10) : lo;
		int width = (int)strlen(lo_s);
		if (hi < lo || hi - lo >= CLUSTER_MAX_NODES)
			FAIL(-EINVAL, "SLURM_JOB_NODELIST: bad range %s-%s", lo_s, dash ? dash + 1 : lo_s);
		for (unsigned long v = lo; v <= hi; v++) {
			char p2[600];
			snprintf(p2, sizeof(p2), "%s%0*lu", head, width, v);
			int e = expand(c, p2, close + 1, dport, err, errlen);
			if (e)
				return e;
		}
	}
	return 0;
}

int cluster_add_slurm(struct cluster *c, const char *nodelist, const char *dport, char *err,
		      size_t errlen)
{
	const char *p = nodelist;

	if (!*p)
		FAIL(-EINVAL, "SLURM_JOB_NODELIST is empty");
	while (*p) {
		/* The next top-level name: commas inside brackets belong to it. */
		const char *q = p;
		int depth = 0;
		while (*q && (depth || *q != ',')) {
			depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
			q++;
		}
		char one[512];
		if ((size_t)(q - p) >= sizeof(one) || q == p)
			FAIL(-EINVAL, "SLURM_JOB_NODELIST: bad entry near \"%.40s\"", p);
		memcpy(one, p, (size_t)(q - p));
		one[q - p] = '\0';
		int e = expand(c, "", one, dport, err, errlen);
		if (e)
			return e;
		p = *q ? q + 1 : q;
	}
	return 0;
}

int cluster_finish(struct cluster *c, long rank, char *err, size_t errlen)
{
	if (!c->n)
		FAIL(-EINVAL, "no peers given");
	for (unsigned i = 0; i < c->n; i++)
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(c->nodes[i].id, c->nodes[j].id))
				FAIL(-EINVAL, "peer %s is listed twice", c->nodes[i].id);
	if (rank >= 0) {
		if ((unsigned long)rank >= c->n)
			FAIL(-EINVAL, "--rank %ld: the peer list has %u nodes (ranks 0 to %u)", rank, c->n,
			     c->n - 1);
		c->self = (unsigned)rank;
		return 0;
	}
	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1))
		FAIL(-EINVAL, "no --rank given, and this machine has no host name");
	size_t shortlen = strcspn(host, ".");
	int found = -1;
	for (unsigned i = 0; i < c->n; i++) {
		const char *h = c->nodes[i].host;
		if (!strcmp(h, host) || (strlen(h) == shortlen && !strncmp(h, host, shortlen)) ||
		    (strcspn(h, ".") == shortlen && !strncmp(h, host, shortlen) && h[shortlen] == '.')) {
			if (found >= 0)
				FAIL(-EINVAL, "no --rank given, and host %s is listed more than once", host);
			found = (int)i;
		}
	}
	if (found < 0)
		FAIL(-EINVAL, "no --rank given, and this host (%s) is not in the peer list", host);
	c->self = (unsigned)found;
	return 0;
}

void cluster_free(struct cluster *c)
{
	free(c->nodes);
	c->nodes = NULL;
	c->n = 0;
}
