/* mwhere.c - see mwhere.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mwhere.h"

static const char *const keys[MWHERE__N] = { "ram", "staging", "tier", "peer", "storage" };

const char *mwhere_key(enum mwhere_place p)
{
	return (unsigned)p < MWHERE__N ? keys[p] : "?";
}

/* One unsigned decimal number at *P, then a space or the end. */
static int number(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (s == end || *s < '0' || *s > '9')
		return -EBADMSG;
	while (s < end && *s >= '0' && *s <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -EBADMSG;
		v = v * 10 + (uint64_t)(*s++ - '0');
	}
	if (s < end && *s != ' ')
		return -EBADMSG;
	while (s < end && *s == ' ')
		s++;
	*p = s;
	*out = v;
	return 0;
}

int mwhere_parse(const char *text, size_t len, struct mwhere *w)
{
	const char *p = text, *end = text + len;
	unsigned seen = 0;              /* bit per required line */
	enum { SIZE = 1 << MWHERE__N, ITEMS = SIZE << 1, MAP = ITEMS << 1 };

	memset(w, 0, sizeof(*w));
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
		const char *sp = memchr(p, ' ', (size_t)(le - p));
		size_t kl = sp ? (size_t)(sp - p) : (size_t)(le - p);
		const char *v = sp ? sp + 1 : le;
		int place = -1;

		for (int i = 0; i < MWHERE__N; i++)
			if (strlen(keys[i]) == kl && !memcmp(p, keys[i], kl))
				place = i;
		if (place >= 0) {
			if (number(&v, le, &w->n[place]) || number(&v, le, &w->bytes[place]) || v != le)
				return -EBADMSG;
			seen |= 1u << place;
		} else if (kl == 4 && !memcmp(p, "size", 4)) {
			if (number(&v, le, &w->size) || v != le)
				return -EBADMSG;
			seen |= SIZE;
		} else if (kl == 5 && !memcmp(p, "items", 5)) {
			if (number(&v, le, &w->items) || v != le)
				return -EBADMSG;
			seen |= ITEMS;
		} else if (kl == 4 && !memcmp(p, "item", 4)) {
			if (number(&v, le, &w->item) || v != le)
				return -EBADMSG;
		} else if (kl == 4 && !memcmp(p, "node", 4)) {
			size_t nl2 = (size_t)(le - v);
			if (!nl2 || nl2 >= sizeof(w->node[0]))
				return -EBADMSG;
			if (w->nodes < MWHERE_NODES) {
				memcpy(w->node[w->nodes], v, nl2);
				w->node[w->nodes++][nl2] = 0;
			}
		} else if (kl == 3 && !memcmp(p, "map", 3)) {
			size_t ml = 0;
			while (v + ml < le && v[ml] && memchr(MWHERE_LETTERS, v[ml], 5))
				ml++;
			if (ml > MWHERE_MAP)
				return -EBADMSG;
			memcpy(w->map, v, ml);
			w->map[ml] = 0;
			v += ml;
			if (v < le) {
				if (*v++ != '+' || number(&v, le, &w->map_more) || v != le)
					return -EBADMSG;
			}
			seen |= MAP;
		}
		p = nl ? nl + 1 : end;
	}
	if (seen != (((1u << MWHERE__N) - 1) | SIZE | ITEMS | MAP))
		return -EBADMSG;
	return 0;
}
