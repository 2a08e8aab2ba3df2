/* proto.h - the peer protocol's frames: encoding, a streaming decoder, and
 * the checks every field passes before anyone acts on it.
 *
 * docs/peer-protocol.md is the specification; this is its one
 * implementation. A frame is a 16-byte header (body length, type, flags,
 * tag) and a body. The decoder is fed whatever bytes a socket gave and calls
 * back once per frame; it never allocates more than the cap of the frame's
 * type, so a peer cannot make us buffer an oversized frame, and before
 * authentication only the three handshake frames, small, are accepted. Any
 * violation (unknown type, nonzero reserved bits, a length over its cap, a
 * frame not allowed in this phase) is -EPROTO: the caller drops the
 * connection. DATA bodies are handed over piece by piece as they arrive,
 * never buffered whole.
 *
 * No I/O here and no global state: the libFuzzer harness
 * (tests/fuzz/fuzz_proto.c) drives proto_feed() with arbitrary bytes.
 */
#ifndef EPOCHFS_PROTO_H
#define EPOCHFS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#define PROTO_VERSION 2
#define PROTO_HDR 16
#define PROTO_NONCE 32
#define PROTO_MAC 32
#define PROTO_MAX_PATH 4095
#define PROTO_MAX_DATA (1u << 20)           /* one DATA frame's body */
#define PROTO_MAX_READ (64u << 20)          /* one READ's length */
#define PROTO_MAX_SMALL 256                 /* handshake, END, ERROR bodies */
#define PROTO_MAX_SPILL 2                   /* READ's spill: runner-ups asked at most */
#define PROTO_TAG 16                        /* a sealed frame's MAC, after its body */
#define PROTO_KEY 32

enum proto_type {
	PROTO_HELLO = 1,            /* client: who it is, its nonce */
	PROTO_CHALLENGE = 2,        /* server: its nonce, its proof */
	PROTO_AUTH = 3,             /* client: its proof */
	PROTO_READY = 4,            /* server: requests may flow */
	PROTO_READ = 5,             /* client: bytes of an item */
	PROTO_DATA = 6,             /* server: some of those bytes */
	PROTO_END = 7,              /* server: status and checksum of a READ's reply */
	PROTO_ERROR = 8,            /* either: why the connection is closing */
};

/* One frame, or with DATA one piece of one: BODY holds LEN bytes at offset
 * AT of a body TOTAL bytes long (other types: AT 0, LEN == TOTAL). */
struct proto_frame {
	uint8_t type;
	uint64_t tag;
	uint32_t total, at, len;
	const uint8_t *body;
};

/* Returns 0 to go on, or a negative errno to stop the decoder (returned by
 * proto_feed). */
typedef int (*proto_frame_fn)(void *arg, const struct proto_frame *f);

enum proto_role { PROTO_CLIENT, PROTO_SERVER };

/* Frame authentication after the handshake. Each direction has a key of
 * its own (proto_session_keys) and numbers its frames from 0; a sealed
 * frame carries, after its body, PROTO_TAG bytes of Poly1305 over its
 * header and body, keyed for that frame alone by ChaCha20 of (the
 * direction's key, the frame's number). Forging, changing, replaying,
 * dropping or reordering a frame therefore fails the receiver's check:
 * the one-time key of the frame it expects next is not the one any other
 * frame was sealed with. With --insecure-peers there is no key and frames
 * carry no tag. */
struct proto_mac {
	int on;
	uint8_t key[PROTO_KEY];
	uint64_t seq;               /* the number of the next frame */
};

/* The two directions' keys of one connection, from the shared secret's key
 * SECRET, both nonces and the digest: C2S seals what the client sends,
 * S2C what the server sends. */
void proto_session_keys(const uint8_t secret[PROTO_KEY], const uint8_t nc[PROTO_NONCE],
			const uint8_t ns[PROTO_NONCE], uint64_t digest, uint8_t c2s[PROTO_KEY],
			uint8_t s2c[PROTO_KEY]);
void proto_mac_init(struct proto_mac *m, const uint8_t key[PROTO_KEY]);
/* Bytes a frame takes after its body: PROTO_TAG when sealing, else 0. */
size_t proto_mac_room(const struct proto_mac *m);
/* Seals every frame of BUF in order: LEN bytes of consecutive frames, each
 * followed by proto_mac_room() bytes that the tag fills. A no-op when M is
 * off. -EINVAL if BUF is not whole frames laid out so. */
int proto_seal(struct proto_mac *m, uint8_t *buf, size_t len);

struct proto_dec {
	enum proto_role role;       /* which frames we accept: those the other side sends */
	int open;                   /* past the handshake: requests allowed */
	uint8_t hdr[PROTO_HDR];
	uint32_t have;              /* header bytes so far */
	struct proto_frame cur;
	int in_body;
	struct proto_mac mac;       /* on: every frame after the handshake is sealed */
	crypto_onetimeauth_state st;
	uint8_t tag[PROTO_TAG];
	uint32_t tag_have;
	int in_tag;
	uint8_t body[PROTO_MAX_SMALL + 32 + PROTO_MAX_PATH];  /* non-DATA bodies; last */
};

/* A decoder for frames sent to ROLE. */
void proto_dec_init(struct proto_dec *d, enum proto_role role);
/* Allows request frames (after authentication). With KEY (the sender's
 * direction key), every frame from now on must be sealed with it; NULL:
 * frames are not sealed (--insecure-peers). */
void proto_dec_open(struct proto_dec *d, const uint8_t *key);
/* Feeds N bytes; calls FN per frame (per piece for DATA). 0, -EPROTO (a
 * malformed frame), -EBADMSG (a sealed frame whose tag does not check:
 * forged, altered, replayed or out of order), or FN's error. A whole frame
 * reaches FN only once its tag checked; DATA pieces arrive as they come,
 * before their frame's tag, so they are provisional: act on a reply only at
 * its END, which comes after them (any failed check ends the connection
 * first). After an error the decoder must not be fed again. */
int proto_feed(struct proto_dec *d, const void *buf, size_t n, proto_frame_fn fn, void *arg);

/* Writes a header into OUT (PROTO_HDR bytes). */
void proto_put_header(uint8_t *out, uint8_t type, uint64_t tag, uint32_t len);

struct proto_hello {
	uint16_t version;
	uint32_t rank;
	uint64_t digest;            /* owner_digest(): both sides must agree */
	uint32_t flags;             /* PROTO_F_INSECURE */
	uint8_t nonce[PROTO_NONCE];
};
#define PROTO_F_INSECURE 1u     /* no shared secret: MACs are all zero */

struct proto_challenge {
	uint16_t version;
	uint32_t rank;
	uint8_t nonce[PROTO_NONCE];
	uint8_t mac[PROTO_MAC];
};

struct proto_read {
	uint64_t size;              /* the version the reader expects */
	int64_t mtime_ns;
	uint64_t off;
	uint32_t len;
	uint16_t path_len;
	uint16_t spill;             /* 0: asked as the owner; J: as the item's J-th
				     * runner-up, the J nodes ranked before being full */
	const char *path;           /* not NUL-terminated; checked by proto_check_path */
};

struct proto_end {
	int32_t status;             /* bytes sent, or -errno (then no DATA came) */
	uint64_t xxh3;              /* of every DATA byte of this reply */
};

/* Encoders: the whole frame into OUT (room for CAP bytes); its length, or
 * -ENOSPC. */
int proto_enc_hello(uint8_t *out, size_t cap, const struct proto_hello *h);
int proto_enc_challenge(uint8_t *out, size_t cap, const struct proto_challenge *c);
int proto_enc_auth(uint8_t *out, size_t cap, const uint8_t mac[PROTO_MAC]);
int proto_enc_ready(uint8_t *out, size_t cap);
int proto_enc_read(uint8_t *out, size_t cap, uint64_t tag, const struct proto_read *r);
int proto_enc_end(uint8_t *out, size_t cap, uint64_t tag, const struct proto_end *e);
int proto_enc_error(uint8_t *out, size_t cap, int32_t code, const char *msg);

/* Parsers of a whole body: 0 or -EPROTO. */
int proto_dec_hello(const struct proto_frame *f, struct proto_hello *h);
int proto_dec_challenge(const struct proto_frame *f, struct proto_challenge *c);
int proto_dec_auth(const struct proto_frame *f, uint8_t mac[PROTO_MAC]);
int proto_dec_read(const struct proto_frame *f, struct proto_read *r);
int proto_dec_end(const struct proto_frame *f, struct proto_end *e);
/* ERROR: the code, and the message copied (NUL-terminated, printable) into MSG. */
int proto_dec_error(const struct proto_frame *f, int32_t *code, char *msg, size_t msglen);

/* 0 if PATH (LEN bytes) is a normalized relative path: not empty, no NUL,
 * no leading '/', no empty, "." or ".." component, at most
 * PROTO_MAX_PATH bytes. Else -EINVAL. */
int proto_check_path(const char *path, size_t len);

#endif
