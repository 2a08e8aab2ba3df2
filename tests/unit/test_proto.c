/* Unit tests of the peer protocol's frames: round trips fed byte by byte,
 * caps enforced before buffering, phases, path checks, random damage. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

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
	proto_dec_open(&srv);
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
	proto_dec_open(&cli);
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
	proto_dec_open(&d);
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
	proto_dec_open(&d);
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
			proto_dec_open(&d);
		struct proto_hello h = { .version = 1 };
		int n = proto_enc_hello(buf, sizeof(buf), &h);
		for (int k = 0; k < 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[x % (uint64_t)n] ^= (uint8_t)(x >> 32);
		}
		proto_feed(&d, buf, (size_t)n, collect, &s);
	}
}
