/* proto.c - see proto.h and docs/peer-protocol.md.
 *
 * DESIGN: the caps are per type and checked as soon as the 16 header bytes
 * are in, before a single body byte is kept; non-DATA bodies go into a
 * fixed buffer inside the decoder, so decoding allocates nothing at all.
 * Integers are little-endian, written and read byte by byte (no unaligned
 * loads, no host-order assumptions).
 *
 * Sealing is ChaCha20-Poly1305's authentication without its encryption:
 * the bytes are not secret (datasets), their origin is. Poly1305 streams,
 * so a DATA frame is checked as it arrives, never buffered for it.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "cluster/proto.h"

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static const uint8_t magic[8] = { 'E', 'P', 'O', 'C', 'H', 'F', 'S', 0 };

/* Body sizes. */
#define HELLO_LEN (8 + 2 + 2 + 4 + 8 + 4 + PROTO_NONCE)
#define CHALLENGE_LEN (2 + 2 + 4 + PROTO_NONCE + PROTO_MAC)
#define READ_FIXED (8 + 8 + 8 + 4 + 2 + 2)
#define END_LEN (4 + 4 + 8)

void proto_dec_init(struct proto_dec *d, enum proto_role role)
{
	memset(d, 0, offsetof(struct proto_dec, body));
	d->role = role;
}

void proto_dec_open(struct proto_dec *d, const uint8_t *key)
{
	d->open = 1;
	if (key)
		proto_mac_init(&d->mac, key);
}

void proto_session_keys(const uint8_t secret[PROTO_KEY], const uint8_t nc[PROTO_NONCE],
			const uint8_t ns[PROTO_NONCE], uint64_t digest, uint8_t c2s[PROTO_KEY],
			uint8_t s2c[PROTO_KEY])
{
	static const char label[] = "epochfs frames v2";
	uint8_t msg[sizeof(label) + 1 + 2 * PROTO_NONCE + 8], *w = msg;

	memcpy(w, label, sizeof(label));
	w += sizeof(label) + 1;
	memcpy(w, nc, PROTO_NONCE);
	memcpy(w + PROTO_NONCE, ns, PROTO_NONCE);
	put64(w + 2 * PROTO_NONCE, digest);
	msg[sizeof(label)] = 'C';
	crypto_generichash(c2s, PROTO_KEY, msg, sizeof(msg), secret, PROTO_KEY);
	msg[sizeof(label)] = 'S';
	crypto_generichash(s2c, PROTO_KEY, msg, sizeof(msg), secret, PROTO_KEY);
}

void proto_mac_init(struct proto_mac *m, const uint8_t key[PROTO_KEY])
{
	m->on = 1;
	m->seq = 0;
	memcpy(m->key, key, PROTO_KEY);
}

size_t proto_mac_room(const struct proto_mac *m)
{
	return m->on ? PROTO_TAG : 0;
}

/* The Poly1305 state for frame number SEQ under KEY. */
static void frame_auth_init(crypto_onetimeauth_state *st, const uint8_t key[PROTO_KEY], uint64_t seq)
{
	uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = { 0 };
	uint8_t otk[crypto_onetimeauth_KEYBYTES];

	put64(nonce, seq);
	crypto_stream_chacha20_ietf(otk, sizeof(otk), nonce, key);
	crypto_onetimeauth_init(st, otk);
	sodium_memzero(otk, sizeof(otk));
}

int proto_seal(struct proto_mac *m, uint8_t *buf, size_t len)
{
	size_t at = 0;

	if (!m->on)
		return 0;
	while (at < len) {
		crypto_onetimeauth_state st;
		if (len - at < PROTO_HDR + PROTO_TAG)
			return -EINVAL;
		size_t body = get32(buf + at);
		if (len - at - PROTO_HDR - PROTO_TAG < body)
			return -EINVAL;
		frame_auth_init(&st, m->key, m->seq++);
		crypto_onetimeauth_update(&st, buf + at, PROTO_HDR + body);
		crypto_onetimeauth_final(&st, buf + at + PROTO_HDR + body);
		at += PROTO_HDR + body + PROTO_TAG;
	}
	return 0;
}

void proto_put_header(uint8_t *out, uint8_t type, uint64_t tag, uint32_t len)
{
	put32(out, len);
	out[4] = type;
	out[5] = 0;
	put16(out + 6, 0);
	put64(out + 8, tag);
}

/* The cap on a body of TYPE sent to D's role in D's phase; 0: not allowed. */
static uint32_t cap_of(const struct proto_dec *d, uint8_t type)
{
	if (type == PROTO_ERROR)
		return PROTO_MAX_SMALL;
	if (d->role == PROTO_SERVER) {
		if (!d->open)
			return type == PROTO_HELLO ? HELLO_LEN : type == PROTO_AUTH ? PROTO_MAC : 0;
		return type == PROTO_READ ? READ_FIXED + PROTO_MAX_PATH : 0;
	}
	if (!d->open)
		return type == PROTO_CHALLENGE ? CHALLENGE_LEN : type == PROTO_READY ? 1 : 0;
	return type == PROTO_DATA ? PROTO_MAX_DATA : type == PROTO_END ? END_LEN : 0;
}

/* A whole frame is in (and its tag checked): hands it over, but for DATA,
 * whose pieces went as they came. */
static int deliver(struct proto_dec *d, proto_frame_fn fn, void *arg)
{
	if (d->cur.type == PROTO_DATA)
		return 0;
	d->cur.body = d->body;
	d->cur.at = 0;
	d->cur.len = d->cur.total;
	return fn(arg, &d->cur);
}

/* The body is complete: checks the tag next, or delivers now. */
static int body_done(struct proto_dec *d, proto_frame_fn fn, void *arg)
{
	d->in_body = 0;
	if (d->mac.on && d->open) {
		d->in_tag = 1;
		d->tag_have = 0;
		return 0;
	}
	return deliver(d, fn, arg);
}

/* Moves up to WANT - *HAVE bytes from *P (*N left) into DST; 1 once DST
 * holds WANT bytes. */
static int gather(uint8_t *dst, uint32_t *have, uint32_t want, const uint8_t **p, size_t *n)
{
	size_t take = want - *have < *n ? want - *have : *n;

	memcpy(dst + *have, *p, take);
	*have += (uint32_t)take;
	*p += take;
	*n -= take;
	return *have == want;
}

int proto_feed(struct proto_dec *d, const void *buf, size_t n, proto_frame_fn fn, void *arg)
{
	const uint8_t *p = buf;
	int r;

	while (n) {
		if (d->in_tag) {
			if (!gather(d->tag, &d->tag_have, PROTO_TAG, &p, &n))
				return 0;
			uint8_t want[PROTO_TAG];
			crypto_onetimeauth_final(&d->st, want);
			d->in_tag = 0;
			if (crypto_verify_16(want, d->tag))
				return -EBADMSG;
			if ((r = deliver(d, fn, arg)))
				return r;
			continue;
		}
		if (!d->in_body) {
			if (!gather(d->hdr, &d->have, PROTO_HDR, &p, &n))
				return 0;
			d->have = 0;
			uint32_t len = get32(d->hdr), cap = cap_of(d, d->hdr[4]);
			if (!cap || len > cap || d->hdr[5] || get16(d->hdr + 6))
				return -EPROTO;
			d->cur = (struct proto_frame){ .type = d->hdr[4], .tag = get64(d->hdr + 8), .total = len };
			d->in_body = 1;
			if (d->mac.on && d->open) {
				frame_auth_init(&d->st, d->mac.key, d->mac.seq++);
				crypto_onetimeauth_update(&d->st, d->hdr, PROTO_HDR);
			}
			if (len == 0 && (r = body_done(d, fn, arg)))
				return r;
			continue;
		}
		/* In a body: DATA streams, the rest is gathered. */
		uint32_t left = d->cur.total - d->cur.at;
		size_t take = left < n ? left : n;
		if (d->mac.on && d->open)
			crypto_onetimeauth_update(&d->st, p, take);
		if (d->cur.type == PROTO_DATA) {
			d->cur.body = p;
			d->cur.len = (uint32_t)take;
			if ((r = fn(arg, &d->cur)))
				return r;
		} else {
			memcpy(d->body + d->cur.at, p, take);
		}
		d->cur.at += (uint32_t)take;
		p += take;
		n -= take;
		if (d->cur.at == d->cur.total && (r = body_done(d, fn, arg)))
			return r;
	}
	return 0;
}

int proto_enc_hello(uint8_t *out, size_t cap, const struct proto_hello *h)
{
	if (cap < PROTO_HDR + HELLO_LEN)
		return -ENOSPC;
	proto_put_header(out, PROTO_HELLO, 0, HELLO_LEN);
	uint8_t *b = out + PROTO_HDR;
	memcpy(b, magic, 8);
	put16(b + 8, h->version);
	put16(b + 10, 0);
	put32(b + 12, h->rank);
	put64(b + 16, h->digest);
	put32(b + 24, h->flags);
	memcpy(b + 28, h->nonce, PROTO_NONCE);
	return PROTO_HDR + HELLO_LEN;
}

int proto_dec_hello(const struct proto_frame *f, struct proto_hello *h)
{
	const uint8_t *b = f->body;

	if (f->type != PROTO_HELLO || f->total != HELLO_LEN || memcmp(b, magic, 8) || get16(b + 10))
		return -EPROTO;
	h->version = get16(b + 8);
	h->rank = get32(b + 12);
	h->digest = get64(b + 16);
	h->flags = get32(b + 24);
	if (h->flags & ~PROTO_F_INSECURE)
		return -EPROTO;
	memcpy(h->nonce, b + 28, PROTO_NONCE);
	return 0;
}

int proto_enc_challenge(uint8_t *out, size_t cap, const struct proto_challenge *c)
{
	if (cap < PROTO_HDR + CHALLENGE_LEN)
		return -ENOSPC;
	proto_put_header(out, PROTO_CHALLENGE, 0, CHALLENGE_LEN);
	uint8_t *b = out + PROTO_HDR;
	put16(b, c->version);
	put16(b + 2, 0);
	put32(b + 4, c->rank);
	memcpy(b + 8, c->nonce, PROTO_NONCE);
	memcpy(b + 8 + PROTO_NONCE, c->mac, PROTO_MAC);
	return PROTO_HDR + CHALLENGE_LEN;
}

int proto_dec_challenge(const struct proto_frame *f, struct proto_challenge *c)
{
	const uint8_t *b = f->body;

	if (f->type != PROTO_CHALLENGE || f->total != CHALLENGE_LEN || get16(b + 2))
		return -EPROTO;
	c->version = get16(b);
	c->rank = get32(b + 4);
	memcpy(c->nonce, b + 8, PROTO_NONCE);
	memcpy(c->mac, b + 8 + PROTO_NONCE, PROTO_MAC);
	return 0;
}

int proto_enc_auth(uint8_t *out, size_t cap, const uint8_t mac[PROTO_MAC])
{
	if (cap < PROTO_HDR + PROTO_MAC)
		return -ENOSPC;
	proto_put_header(out, PROTO_AUTH, 0, PROTO_MAC);
	memcpy(out + PROTO_HDR, mac, PROTO_MAC);
	return PROTO_HDR + PROTO_MAC;
}

int proto_dec_auth(const struct proto_frame *f, uint8_t mac[PROTO_MAC])
{
	if (f->type != PROTO_AUTH || f->total != PROTO_MAC)
		return -EPROTO;
	memcpy(mac, f->body, PROTO_MAC);
	return 0;
}

int proto_enc_ready(uint8_t *out, size_t cap)
{
	if (cap < PROTO_HDR + 1)
		return -ENOSPC;
	proto_put_header(out, PROTO_READY, 0, 1);
	out[PROTO_HDR] = PROTO_VERSION;
	return PROTO_HDR + 1;
}

int proto_enc_read(uint8_t *out, size_t cap, uint64_t tag, const struct proto_read *r)
{
	size_t len = READ_FIXED + r->path_len;

	if (cap < PROTO_HDR + len || r->path_len > PROTO_MAX_PATH)
		return -ENOSPC;
	proto_put_header(out, PROTO_READ, tag, (uint32_t)len);
	uint8_t *b = out + PROTO_HDR;
	put64(b, r->size);
	put64(b + 8, (uint64_t)r->mtime_ns);
	put64(b + 16, r->off);
	put32(b + 24, r->len);
	put16(b + 28, r->path_len);
	put16(b + 30, r->spill);
	memcpy(b + READ_FIXED, r->path, r->path_len);
	return (int)(PROTO_HDR + len);
}

int proto_dec_read(const struct proto_frame *f, struct proto_read *r)
{
	const uint8_t *b = f->body;

	if (f->type != PROTO_READ || f->total < READ_FIXED)
		return -EPROTO;
	r->spill = get16(b + 30);
	r->size = get64(b);
	r->mtime_ns = (int64_t)get64(b + 8);
	r->off = get64(b + 16);
	r->len = get32(b + 24);
	r->path_len = get16(b + 28);
	r->path = (const char *)b + READ_FIXED;
	if (f->total != READ_FIXED + (uint32_t)r->path_len || !r->len || r->len > PROTO_MAX_READ ||
	    r->off > r->size || r->spill > PROTO_MAX_SPILL || proto_check_path(r->path, r->path_len))
		return -EPROTO;
	return 0;
}

int proto_enc_end(uint8_t *out, size_t cap, uint64_t tag, const struct proto_end *e)
{
	if (cap < PROTO_HDR + END_LEN)
		return -ENOSPC;
	proto_put_header(out, PROTO_END, tag, END_LEN);
	put32(out + PROTO_HDR, (uint32_t)e->status);
	put32(out + PROTO_HDR + 4, 0);
	put64(out + PROTO_HDR + 8, e->xxh3);
	return PROTO_HDR + END_LEN;
}

int proto_dec_end(const struct proto_frame *f, struct proto_end *e)
{
	if (f->type != PROTO_END || f->total != END_LEN || get32(f->body + 4))
		return -EPROTO;
	e->status = (int32_t)get32(f->body);
	e->xxh3 = get64(f->body + 8);
	if (e->status < -4095)
		return -EPROTO;
	return 0;
}

int proto_enc_error(uint8_t *out, size_t cap, int32_t code, const char *msg)
{
	size_t n = strlen(msg);

	if (n > PROTO_MAX_SMALL - 4)
		n = PROTO_MAX_SMALL - 4;
	if (cap < PROTO_HDR + 4 + n)
		return -ENOSPC;
	proto_put_header(out, PROTO_ERROR, 0, (uint32_t)(4 + n));
	put32(out + PROTO_HDR, (uint32_t)code);
	memcpy(out + PROTO_HDR + 4, msg, n);
	return (int)(PROTO_HDR + 4 + n);
}

int proto_dec_error(const struct proto_frame *f, int32_t *code, char *msg, size_t msglen)
{
	size_t n, i;

	if (f->type != PROTO_ERROR || f->total < 4 || !msglen)
		return -EPROTO;
	*code = (int32_t)get32(f->body);
	n = f->total - 4 < msglen - 1 ? f->total - 4 : msglen - 1;
	for (i = 0; i < n; i++) {
		char ch = (char)f->body[4 + i];
		msg[i] = ch >= 0x20 && ch < 0x7f ? ch : '?';
	}
	msg[i] = '\0';
	return 0;
}

int proto_check_path(const char *path, size_t len)
{
	size_t start = 0;

	if (!len || len > PROTO_MAX_PATH || path[0] == '/' || memchr(path, '\0', len))
		return -EINVAL;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		size_t n = i - start;
		if (!n || (n == 1 && path[start] == '.') ||
		    (n == 2 && path[start] == '.' && path[start + 1] == '.'))
			return -EINVAL;
		start = i + 1;
	}
	return 0;
}
