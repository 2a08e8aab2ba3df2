/* mstats.c - see mstats.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mstats.h"

int mstats_find(const char *dir, char *out, size_t len)
{
	char p[PATH_MAX];

	if (!realpath(dir, p))
		return -errno;
	for (;;) {
		snprintf(out, len, "%s/.epochfs/stats.json", p);
		if (access(out, R_OK) == 0)
			return 0;
		char *slash = strrchr(p, '/');
		if (!slash || slash == p)
			return -ENOENT;
		*slash = '\0';
	}
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

int mstats_parse(const char *text, struct mstats *s)
{
	const char *p = skip_ws(text);

	s->n = 0;
	s->nt = 0;
	if (*p++ != '{')
		return -EBADMSG;
	p = skip_ws(p);
	if (*p == '}')
		return 0;
	for (;;) {
		const char *q;
		char *end;
		size_t len;

		if (*p++ != '"' || !(q = strchr(p, '"')))
			return -EBADMSG;
		len = (size_t)(q - p);
		if (len == 0 || len >= MSTATS_NAME || s->n == MSTATS_MAX)
			return -EBADMSG;
		const char *key = p;
		p = skip_ws(q + 1);
		if (*p++ != ':')
			return -EBADMSG;
		p = skip_ws(p);
		if (*p == '"') {
			/* A string: the escapes the daemon writes (\" \\ \n \u00XX). */
			size_t tl = 0;
			if (s->nt == MSTATS_TEXTS)
				return -EBADMSG;
			for (p++; *p != '"'; p++) {
				char ch = *p;
				if (!ch || (unsigned char)ch < 0x20 || tl + 1 >= MSTATS_TEXT)
					return -EBADMSG;
				if (ch == '\\') {
					ch = *++p;
					if (ch == 'n') {
						ch = '\n';
					} else if (ch == 'u') {
						unsigned v;
						if (sscanf(p + 1, "%4x", &v) != 1 || v > 0x7f)
							return -EBADMSG;
						ch = (char)v;
						p += 4;
					} else if (ch != '"' && ch != '\\' && ch != '/') {
						return -EBADMSG;
					}
				}
				s->text[s->nt][tl++] = ch;
			}
			memcpy(s->tname[s->nt], key, len);
			s->tname[s->nt][len] = '\0';
			s->text[s->nt][tl] = '\0';
			s->nt++;
			p++;
		} else {
			memcpy(s->name[s->n], key, len);
			s->name[s->n][len] = '\0';
			errno = 0;
			s->val[s->n] = strtod(p, &end);
			if (end == p || errno)
				return -EBADMSG;
			s->n++;
			p = end;
		}
		p = skip_ws(p);
		if (*p == '}')
			return 0;
		if (*p++ != ',')
			return -EBADMSG;
		p = skip_ws(p);
	}
}

int mstats_read(const char *file, struct mstats *s)
{
	char buf[65536];
	size_t used = 0;
	ssize_t n;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (used < sizeof(buf) - 1 && (n = read(fd, buf + used, sizeof(buf) - 1 - used)) > 0)
		used += (size_t)n;
	n = n < 0 ? -errno : 0;
	close(fd);
	if (n < 0)
		return (int)n;
	buf[used] = '\0';
	return mstats_parse(buf, s);
}

double mstats_get(const struct mstats *s, const char *key, double dflt)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->name[i], key))
			return s->val[i];
	return dflt;
}

const char *mstats_text(const struct mstats *s, const char *key)
{
	for (int i = 0; i < s->nt; i++)
		if (!strcmp(s->tname[i], key))
			return s->text[i];
	return NULL;
}
