/* libFuzzer harness for the peer protocol's decoder: every byte stream, in
 * every role and phase, split at arbitrary points, and the parsers of every
 * frame it yields. `make test` runs it for a few seconds, `make fuzz` longer.
 * The first input byte picks the role, phase (with or without sealed
 * frames, under a fixed key) and split size. */
#include <stddef.h>
#include <stdint.h>

#include "cluster/proto.h"

static int on_frame(void *arg, const struct proto_frame *f)
{
	char msg[64];
	int32_t code;
	union {
		struct proto_hello h;
		struct proto_challenge c;
		struct proto_read r;
		struct proto_end e;
		uint8_t mac[PROTO_MAC];
	} u;

	(void)arg;
	if (f->len != f->total && f->type != PROTO_DATA)
		__builtin_trap();       /* whole frames only, except DATA */
	switch (f->type) {
	case PROTO_HELLO: proto_dec_hello(f, &u.h); break;
	case PROTO_CHALLENGE: proto_dec_challenge(f, &u.c); break;
	case PROTO_AUTH: proto_dec_auth(f, u.mac); break;
	case PROTO_READ:
		if (proto_dec_read(f, &u.r) == 0 && proto_check_path(u.r.path, u.r.path_len))
			__builtin_trap();   /* a decoded READ always names a safe path */
		break;
	case PROTO_END: proto_dec_end(f, &u.e); break;
	case PROTO_ERROR: proto_dec_error(f, &code, msg, sizeof(msg)); break;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct proto_dec d;

	if (!size)
		return 0;
	static const uint8_t key[PROTO_KEY] = { 7 };
	uint8_t mode = data[0];
	size_t step = (size_t)(mode >> 3) + 1;
	proto_dec_init(&d, mode & 1 ? PROTO_CLIENT : PROTO_SERVER);
	if (mode & 2)
		proto_dec_open(&d, mode & 4 ? key : NULL);
	data++, size--;
	for (size_t at = 0; at < size; at += step)
		if (proto_feed(&d, data + at, size - at < step ? size - at : step, on_frame, NULL))
			break;
	return 0;
}
