/* batchfile.c - see batchfile.h.
 *
 * DESIGN: the header is decoded field by field from little-endian bytes
 * (not cast onto struct batch_header), so a reader on any host and any
 * alignment sees the format, not the compiler's idea of it. The checks
 * follow the table in docs/prep-format.md, in the order a reader would
 * trip on them; every size is recomputed from n, h, w, c and the dtype
 * with overflow checks, then compared with what the header claims.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/batchfile.h"

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

void batchfile_parse(const void *buf, struct batch_header *h)
{
	const uint8_t *p = buf;
	uint32_t *u32[] = { &h->version, &h->header_bytes, &h->n, &h->h, &h->w, &h->c,
			    &h->dtype, &h->layout, &h->epoch, &h->bad_samples };
	uint64_t *u64[] = { &h->index, &h->first, &h->seed, &h->labels_offset, &h->pixels_offset,
			    &h->pixels_bytes, &h->total_bytes };

	memcpy(h->magic, p, sizeof(h->magic));
	for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++)
		*u32[i] = le32(p + 8 + 4 * i);
	for (size_t i = 0; i < sizeof(u64) / sizeof(u64[0]); i++)
		*u64[i] = le64(p + 48 + 8 * i);
	memcpy(h->reserved, p + 104, sizeof(h->reserved));
}

static int fail(const char **why, const char *msg, int err)
{
	*why = msg;
	return err;
}

int batchfile_check(const struct batch_header *h, uint64_t size, const char **why)
{
	uint64_t px, pixels_offset, total;

	if (size < BATCH_HEADER_BYTES)
		return fail(why, "shorter than a batch header (128 bytes)", -ENODATA);
	if (memcmp(h->magic, BATCH_MAGIC, sizeof(h->magic)))
		return fail(why, "not a batch file (no EPBATCH1 magic)", -EBADMSG);
	if (h->version != BATCH_VERSION || h->header_bytes != BATCH_HEADER_BYTES)
		return fail(why, "a batch format version this reader does not know", -EPROTONOSUPPORT);
	if (h->dtype > BATCH_F32 || h->layout > BATCH_NCHW)
		return fail(why, "unknown dtype or layout code", -EBADMSG);
	if (!h->n || !h->h || !h->w)
		return fail(why, "an empty batch (n, h or w is 0)", -EBADMSG);
	if (h->c != 3)
		return fail(why, "channels is not 3", -EBADMSG);
	if (h->bad_samples > h->n)
		return fail(why, "more substituted samples than samples", -EBADMSG);
	for (size_t i = 0; i < sizeof(h->reserved); i++)
		if (h->reserved[i])
			return fail(why, "reserved header bytes are not zero", -EBADMSG);
	if (h->labels_offset != BATCH_HEADER_BYTES)
		return fail(why, "labels_offset is not 128", -EBADMSG);
	pixels_offset = (BATCH_HEADER_BYTES + 4ull * h->n + 63) & ~63ull;
	if (h->pixels_offset != pixels_offset)
		return fail(why, "pixels_offset is not 128 + 4n rounded up to 64", -EBADMSG);
	if (__builtin_mul_overflow((uint64_t)h->n, (uint64_t)h->h, &px) || __builtin_mul_overflow(px, h->w, &px) ||
	    __builtin_mul_overflow(px, h->c, &px) || __builtin_mul_overflow(px, h->dtype == BATCH_F32 ? 4 : 1, &px) ||
	    __builtin_add_overflow(px, pixels_offset, &total) || total > SIZE_MAX)
		return fail(why, "sizes overflow", -EFBIG);
	if (h->pixels_bytes != px)
		return fail(why, "pixels_bytes is not n x h x w x c x the dtype's size", -EBADMSG);
	if (h->total_bytes != total)
		return fail(why, "total_bytes is not pixels_offset + pixels_bytes", -EBADMSG);
	if (size < total)
		return fail(why, "shorter than its header says (truncated)", -ENODATA);
	if (size > total)
		return fail(why, "longer than its header says", -EBADMSG);
	return 0;
}

int batchfile_read(int fd, void *buf, size_t cap, struct batch_header *h, size_t *len, const char **why)
{
	struct stat st;
	size_t got = 0;

	if (fstat(fd, &st))
		return fail(why, "fstat failed", -errno);
	if ((uint64_t)st.st_size > SIZE_MAX)
		return fail(why, "sizes overflow", -EFBIG);
	*len = (size_t)st.st_size;
	if (*len > cap)
		return fail(why, "larger than the buffer", -ENOBUFS);
	while (got < *len) {
		ssize_t r = pread(fd, (char *)buf + got, *len - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return fail(why, "read failed", -errno);
		if (!r)
			break;
		got += (size_t)r;
	}
	*len = got;
	if (got < BATCH_HEADER_BYTES)
		return fail(why, "shorter than a batch header (128 bytes)", -ENODATA);
	batchfile_parse(buf, h);
	return batchfile_check(h, got, why);
}
