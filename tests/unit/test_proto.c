/* Unit tests of the peer protocol's frames: round trips fed byte by byte,
 * caps enforced before buffering, phases, path checks, sealed frames
 * (forged, altered, replayed, reordered), random damage. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto.h"

struct seen {
	int frames;
	uint8_t type;
	uint64_t tag;
	uint8_t body[PROTO_MAX_DATA];
	uint32_t len;
};

static int collect(void *arg, const struct proto_frame *f)
{
	struct seen *s = arg;

	if (f->type == PROTO_DATA) {
		memcpy(s->body + f->at, f->body, f->len);
		s->len = f->at + f->len;
		if (f->at + f->len == f->total)
			s->frames++;
	} else {
		memcpy(s->body, f->body, f->len);
		s->len = f->len;
		s->frames++;
	}
	s->type = f->type;
	s->tag = f->tag;
	return 0;
}

/* Feeds N bytes one at a time. */
static int feed_slowly(struct proto_dec *d, const uint8_t *b, size_t n, struct seen *s)
{
	for (size_t i = 0; i < n; i++) {
		int r = proto_feed(d, b + i, 1, collect, s);
		if (r)
			return r;
	}
	return 0;
}

Test(proto, handshake_round_trip)
{
	static struct proto_dec d;
	static struct seen s;
	uint8_t buf[512];
	struct proto_hello h = { .version = PROTO_VERSION, .rank = 7, .digest = 0x1122334455667788ull,
				 .flags = PROTO_F_INSECURE }, h2;

	memset(h.nonce, 0xab, PROTO_NONCE);
	proto_dec_init(&d, PROTO_SERVER);
	int n = proto_enc_hello(buf, sizeof(buf), &h);
	cr_assert_gt(n, 0);
	cr_assert_eq(feed_slowly(&d, buf, (size_t)n, &s), 0);
	cr_assert_eq(s.frames, 1);
	struct proto_frame f = { .type = s.type, .total = s.len, .len = s.len, .body = s.body };
	cr_assert_eq(proto_dec_hello(&f, &h2), 0);
	cr_expect_eq(h2.rank, 7);
	cr_expect_eq(h2.digest, h.digest);
	cr_expect_eq(h2.flags, PROTO_F_INSECURE);
	cr_expect_eq(memcmp(h2.nonce, h.nonce, PROTO_NONCE), 0);

	/* A server in the handshake accepts no request. */
	struct proto_read rd = { .size = 10, .off = 0, .len = 10, .path_len = 3, .path = "a/b" };
	n = proto_enc_read(buf, sizeof(buf), 5, &rd);
	cr_expect_eq(proto_feed(&d, buf, (size_t)n, collect, &s), -EPROTO);
}

Test(proto, read_data_end_round_trip)
{
	static struct proto_dec srv, cli;
	static struct seen s;
	static uint8_t buf[PROTO_HDR + PROTO_MAX_DATA];
	struct proto_read rd = { .size = 1 << 20, .mtime_ns = -5, .off = 4096, .len = 65536,
				 .path_len = 15, .path = "train/c1/x.jpeg" }, r2;

	proto_dec_init(&srv, PROTO_SERVER);
	proto_dec_open(&srv, NULL);
	int n = proto_enc_read(buf, sizeof(buf), 99, &rd);
	cr_assert_eq(feed_slowly(&srv, buf, (size_t)n, &s), 0);
	struct proto_frame f = { .type = s.type, .tag = s.tag, .total = s.len, .len = s.len, .body = s.body };
	cr_assert_eq(proto_dec_read(&f, &r2), 0);
	cr_expect_eq(f.tag, 99);
	cr_expect_eq(r2.mtime_ns, -5);
	cr_expect_eq(r2.off, 4096);
	cr_expect_eq(r2.len, 65536);
	cr_expect_eq(memcmp(r2.path, rd.path, 15), 0);

	/* A DATA frame arrives in pieces, never buffered whole. */
	proto_dec_init(&cli, PROTO_CLIENT);
	proto_dec_open(&cli, NULL);
	memset(&s, 0, sizeof(s));
	proto_put_header(buf, PROTO_DATA, 99, 300000);
	for (int i = 0; i < 300000; i++)
		buf[PROTO_HDR + i] = (uint8_t)(i * 7);
	for (size_t at = 0; at < PROTO_HDR + 300000; at += 4000) {
		size_t m = PROTO_HDR + 300000 - at < 4000 ? PROTO_HDR + 300000 - at : 4000;
		cr_assert_eq(proto_feed(&cli, buf + at, m, collect, &s), 0);
	}
	cr_expect_eq(s.frames, 1);
	cr_expect_eq(s.len, 300000);
	cr_expect_eq(memcmp(s.body, buf + PROTO_HDR, 300000), 0);
	struct proto_end e = { .status = 300000, .xxh3 = 42 }, e2;
	n = proto_enc_end(buf, sizeof(buf), 99, &e);
	cr_assert_eq(proto_feed(&cli, buf, (size_t)n, collect, &s), 0);
	f = (struct proto_frame){ .type = s.type, .total = s.len, .len = s.len, .body = s.body };
	cr_assert_eq(proto_dec_end(&f, &e2), 0);
	cr_expect_eq(e2.status, 300000);
	cr_expect_eq(e2.xxh3, 42);
}

Test(proto, caps_and_reserved_bits)
{
	static struct proto_dec d;
	static struct seen s;
	uint8_t buf[64];

	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, NULL);
	proto_put_header(buf, PROTO_DATA, 1, PROTO_MAX_DATA + 1);
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "oversized DATA");
	proto_dec_init(&d, PROTO_CLIENT);
	proto_put_header(buf, PROTO_CHALLENGE, 0, 0xffffffffu);
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "oversized challenge");
	proto_dec_init(&d, PROTO_CLIENT);
	proto_put_header(buf, PROTO_DATA, 0, 4);
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "DATA before the handshake");
	proto_dec_init(&d, PROTO_SERVER);
	proto_put_header(buf, PROTO_HELLO, 0, 0);
	buf[5] = 1;
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "flags set");
	proto_dec_init(&d, PROTO_SERVER);
	proto_put_header(buf, 200, 0, 0);
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "unknown type");
	proto_dec_init(&d, PROTO_SERVER);
	proto_dec_open(&d, NULL);
	proto_put_header(buf, PROTO_READ, 0, 40000);
	cr_expect_eq(proto_feed(&d, buf, PROTO_HDR, collect, &s), -EPROTO, "READ over its cap");
}

Test(proto, unsafe_reads_are_refused)
{
	static const char *const bad[] = { "/etc/passwd", "../x", "a/../../b", "a//b", "./a", "a/.", "", "a/" };
	static const char *const good[] = { "a", "a/b.jpg", "...", "a/..b/.c" };
	uint8_t buf[PROTO_HDR + 64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(proto_check_path(bad[i], strlen(bad[i])), -EINVAL, "accepted \"%s\"", bad[i]);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		cr_expect_eq(proto_check_path(good[i], strlen(good[i])), 0, "refused \"%s\"", good[i]);
	cr_expect_eq(proto_check_path("a\0b", 3), -EINVAL);
	/* A READ naming one of them fails to decode. */
	struct proto_read rd = { .size = 10, .len = 1, .path_len = 5, .path = "../ab" }, r2;
	int n = proto_enc_read(buf, sizeof(buf), 1, &rd);
	struct proto_frame f = { .type = PROTO_READ, .total = (uint32_t)n - PROTO_HDR,
				 .len = (uint32_t)n - PROTO_HDR, .body = buf + PROTO_HDR };
	cr_expect_eq(proto_dec_read(&f, &r2), -EPROTO);
	rd.path = "ok/ab";
	rd.off = 11;                    /* past the size it claims */
	n = proto_enc_read(buf, sizeof(buf), 1, &rd);
	cr_expect_eq(proto_dec_read(&f, &r2), -EPROTO);
	rd.off = 0;
	rd.spill = PROTO_MAX_SPILL + 1;  /* the protocol asks two runner-ups at most */
	n = proto_enc_read(buf, sizeof(buf), 1, &rd);
	cr_expect_eq(proto_dec_read(&f, &r2), -EPROTO);
	rd.spill = PROTO_MAX_SPILL;
	n = proto_enc_read(buf, sizeof(buf), 1, &rd);
	cr_expect_eq(proto_dec_read(&f, &r2), 0);
}

/* Three sealed frames of one direction: END, DATA (300000 bytes), END. */
static size_t sealed_stream(uint8_t *buf, const uint8_t key[PROTO_KEY])
{
	struct proto_mac m;
	struct proto_end e = { .status = 3, .xxh3 = 7 };
	size_t at = 0;

	proto_mac_init(&m, key);
	at += (size_t)proto_enc_end(buf + at, 64, 1, &e) + PROTO_TAG;
	proto_put_header(buf + at, PROTO_DATA, 2, 300000);
	for (int i = 0; i < 300000; i++)
		buf[at + PROTO_HDR + i] = (uint8_t)(i * 13);
	at += PROTO_HDR + 300000 + PROTO_TAG;
	at += (size_t)proto_enc_end(buf + at, 64, 2, &e) + PROTO_TAG;
	cr_assert_eq(proto_seal(&m, buf, at), 0);
	cr_assert_eq(m.seq, 3);
	return at;
}

static int feed_all(struct proto_dec *d, const uint8_t *b, size_t n, struct seen *s)
{
	for (size_t at = 0; at < n; at += 1000) {
		int r = proto_feed(d, b + at, n - at < 1000 ? n - at : 1000, collect, s);
		if (r)
			return r;
	}
	return 0;
}

Test(proto, sealed_frames_check_and_forgeries_fail)
{
	static uint8_t buf[400000], copy[400000];
	static struct proto_dec d;
	static struct seen s;
	uint8_t secret[PROTO_KEY], nc[PROTO_NONCE], ns[PROTO_NONCE], c2s[PROTO_KEY], s2c[PROTO_KEY];
	uint8_t c2s_b[PROTO_KEY], s2c_b[PROTO_KEY];

	memset(secret, 1, sizeof(secret));
	memset(nc, 2, sizeof(nc));
	memset(ns, 3, sizeof(ns));
	proto_session_keys(secret, nc, ns, 99, c2s, s2c);
	cr_expect(memcmp(c2s, s2c, PROTO_KEY), "one key for both directions");
	ns[0] ^= 1;                     /* another connection: other keys */
	proto_session_keys(secret, nc, ns, 99, c2s_b, s2c_b);
	cr_expect(memcmp(s2c, s2c_b, PROTO_KEY), "a key outlived its connection");

	size_t n = sealed_stream(buf, s2c);
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, s2c);
	memset(&s, 0, sizeof(s));
	cr_expect_eq(feed_all(&d, buf, n, &s), 0, "an honest stream");
	cr_expect_eq(s.frames, 3);

	/* One byte changed anywhere (header, body, tag) fails that frame. */
	size_t where[] = { 3, 16 + 2, 48 + 8, 48 + 16 + 150000, 48 + 16 + 300000 + 3, n - 1 };
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		memcpy(copy, buf, n);
		copy[where[i]] ^= 0x20;
		proto_dec_init(&d, PROTO_CLIENT);
		proto_dec_open(&d, s2c);
		int r = feed_all(&d, copy, n, &s);
		cr_expect(r == -EBADMSG || r == -EPROTO, "byte %zu changed: %d", where[i], r);
	}
	/* The wrong key (the other direction's) fails the first frame. */
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, c2s);
	cr_expect_eq(feed_all(&d, buf, n, &s), -EBADMSG);
	/* A replay: the first frame twice. */
	const size_t end = PROTO_HDR + 16 + PROTO_TAG;     /* a sealed END */
	memcpy(copy, buf, end);
	memcpy(copy + end, buf, end);
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, s2c);
	cr_expect_eq(feed_all(&d, copy, 2 * end, &s), -EBADMSG, "a replayed frame passed");
	/* Reordered: the last END before the DATA. */
	memcpy(copy, buf, end);
	memcpy(copy + end, buf + n - end, end);
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, s2c);
	cr_expect_eq(feed_all(&d, copy, 2 * end, &s), -EBADMSG, "a reordered frame passed");
	/* A dropped frame: the first END missing. */
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, s2c);
	cr_expect_eq(feed_all(&d, buf + end, n - end, &s), -EBADMSG, "a dropped frame went unseen");
	/* Unsealed frames to a sealed decoder fail. */
	struct proto_end e = { .status = 0 };
	int m = proto_enc_end(copy, 64, 9, &e);
	memset(copy + m, 0, 64);
	proto_dec_init(&d, PROTO_CLIENT);
	proto_dec_open(&d, s2c);
	cr_expect_eq(feed_all(&d, copy, (size_t)m + 64, &s), -EBADMSG);
}

/* Damaged streams never crash the decoder (the fuzz target does this at
 * length; see tests/fuzz/fuzz_proto.c). */
Test(proto, random_damage)
{
	static struct proto_dec d;
	static struct seen s;
	uint8_t buf[512];
	uint64_t x = 12345;

	for (int round = 0; round < 20000; round++) {
		proto_dec_init(&d, round & 1 ? PROTO_CLIENT : PROTO_SERVER);
		if (round & 2)
			proto_dec_open(&d, NULL);
		struct proto_hello h = { .version = 1 };
		int n = proto_enc_hello(buf, sizeof(buf), &h);
		for (int k = 0; k < 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[x % (uint64_t)n] ^= (uint8_t)(x >> 32);
		}
		proto_feed(&d, buf, (size_t)n, collect, &s);
	}
}
