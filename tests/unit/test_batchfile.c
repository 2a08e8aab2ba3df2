/* test_batchfile.c - reading batch files from outside the daemon: the
 * header is decoded at the documented offsets, a header batch_layout()
 * writes passes, and every corruption of a field a reader relies on, and
 * every truncated or padded file, gets its own error and a reason. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/batchfile.h"
#include "helpers.h"

static const struct batch_params P = {
	.size = 32, .dtype = BATCH_U8, .layout = BATCH_NCHW, .seed = 9,
	.mean = { 0.485f, 0.456f, 0.406f }, .std = { 0.229f, 0.224f, 0.225f },
};

static void le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* H as docs/prep-format.md's table says, byte by byte. */
static void encode(const struct batch_header *h, uint8_t b[128])
{
	const uint32_t u32[] = { h->version, h->header_bytes, h->n, h->h, h->w, h->c,
				 h->dtype, h->layout, h->epoch, h->bad_samples };
	const uint64_t u64[] = { h->index, h->first, h->seed, h->labels_offset, h->pixels_offset,
				 h->pixels_bytes, h->total_bytes };

	memset(b, 0, 128);
	memcpy(b, h->magic, 8);
	for (int i = 0; i < 10; i++)
		le(b + 8 + 4 * i, u32[i], 4);
	for (int i = 0; i < 7; i++)
		le(b + 48 + 8 * i, u64[i], 8);
	memcpy(b + 104, h->reserved, 24);
}

Test(batchfile, parse_reads_the_documented_offsets)
{
	struct batch_header h, back;
	uint8_t b[128];

	batch_layout(&P, 5, 3, 17, 85, &h);
	h.bad_samples = 2;
	encode(&h, b);
	batchfile_parse(b, &back);
	cr_expect(!memcmp(&h, &back, sizeof(h)), "decoded header differs");
	cr_expect(back.n == 5 && back.epoch == 3 && back.index == 17 && back.first == 85 && back.seed == 9);
	cr_expect(back.bad_samples == 2 && back.pixels_offset == 192 && back.layout == BATCH_NCHW);
}

Test(batchfile, made_headers_pass)
{
	struct batch_params f = P;
	struct batch_header h;
	const char *why = NULL;
	size_t total;

	total = batch_layout(&P, 5, 0, 0, 0, &h);
	cr_expect_eq(batchfile_check(&h, total, &why), 0, "%s", why);
	f.dtype = BATCH_F32;
	f.layout = BATCH_NHWC;
	total = batch_layout(&f, 64, 1, 2, 128, &h);
	cr_expect_eq(batchfile_check(&h, total, &why), 0, "%s", why);
	total = batch_layout(&P, 1, 0, 0, 0, &h);   /* a last, short batch */
	cr_expect_eq(batchfile_check(&h, total, &why), 0, "%s", why);
}

Test(batchfile, every_corruption_has_its_error)
{
	struct batch_header good, h;
	const char *why;
	size_t total = batch_layout(&P, 5, 0, 0, 0, &good);
	struct { const char *what; int err; } cases[] = {
		{ "magic", -EBADMSG },          { "version", -EPROTONOSUPPORT }, { "header_bytes", -EPROTONOSUPPORT },
		{ "dtype", -EBADMSG },          { "layout", -EBADMSG },          { "n", -EBADMSG },
		{ "h", -EBADMSG },              { "c", -EBADMSG },               { "bad_samples", -EBADMSG },
		{ "reserved", -EBADMSG },       { "labels_offset", -EBADMSG },   { "pixels_offset", -EBADMSG },
		{ "pixels_bytes", -EBADMSG },   { "total_bytes", -EBADMSG },     { "overflow", -EFBIG },
		{ "truncated", -ENODATA },      { "padded", -EBADMSG },          { "tiny", -ENODATA },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *w = cases[i].what;
		uint64_t size = total;
		h = good;
		if (!strcmp(w, "magic"))
			h.magic[7] = '2';
		else if (!strcmp(w, "version"))
			h.version = 2;
		else if (!strcmp(w, "header_bytes"))
			h.header_bytes = 256;
		else if (!strcmp(w, "dtype"))
			h.dtype = 2;
		else if (!strcmp(w, "layout"))
			h.layout = 7;
		else if (!strcmp(w, "n"))
			h.n = 0;
		else if (!strcmp(w, "h"))
			h.h = 0;
		else if (!strcmp(w, "c"))
			h.c = 4;
		else if (!strcmp(w, "bad_samples"))
			h.bad_samples = 6;
		else if (!strcmp(w, "reserved"))
			h.reserved[23] = 1;
		else if (!strcmp(w, "labels_offset"))
			h.labels_offset = 0;
		else if (!strcmp(w, "pixels_offset"))
			h.pixels_offset = 128;
		else if (!strcmp(w, "pixels_bytes"))
			h.pixels_bytes -= 1;
		else if (!strcmp(w, "total_bytes"))
			h.total_bytes += 64, size += 64;
		else if (!strcmp(w, "overflow"))
			h.n = UINT32_MAX, h.h = h.w = UINT32_MAX, h.pixels_offset = (128 + 4ull * h.n + 63) & ~63ull;
		else if (!strcmp(w, "truncated"))
			size -= 1;
		else if (!strcmp(w, "padded"))
			size += 1;
		else if (!strcmp(w, "tiny"))
			size = 100;
		why = NULL;
		cr_expect_eq(batchfile_check(&h, size, &why), cases[i].err, "%s: got another error (%s)", w, why);
		cr_expect(why && *why, "%s: no reason", w);
	}
}

static void put(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

static int read_path(const char *path, void *buf, size_t cap, struct batch_header *h, size_t *len,
		     const char **why)
{
	int fd = open(path, O_RDONLY), err;

	cr_assert(fd >= 0);
	err = batchfile_read(fd, buf, cap, h, len, why);
	close(fd);
	return err;
}

Test(batchfile, files_are_read_whole_and_checked)
{
	char *dir = th_tmpdir(), p[4200];
	struct batch_header h, got;
	const char *why = NULL;
	size_t total = batch_layout(&P, 3, 0, 4, 12, &h), len;
	uint8_t *file = calloc(1, total + 1), *buf = malloc(total + 1);

	encode(&h, file);
	for (size_t i = 128; i < total; i++)
		file[i] = (uint8_t)i;
	snprintf(p, sizeof(p), "%s/b", dir);
	put(p, file, total);
	cr_expect_eq(read_path(p, buf, 100, &got, &len, &why), -ENOBUFS);
	cr_expect_eq(len, total, "-ENOBUFS says how large: %zu", len);
	cr_expect_eq(read_path(p, buf, total, &got, &len, &why), 0, "%s", why);
	cr_expect(len == total && !memcmp(buf, file, total) && got.index == 4 && got.first == 12);
	put(p, file, total - 1);
	cr_expect_eq(read_path(p, buf, total, &got, &len, &why), -ENODATA);
	cr_expect(strstr(why, "truncated"), "%s", why);
	put(p, file, total + 1);
	cr_expect_eq(read_path(p, buf, total + 1, &got, &len, &why), -EBADMSG);
	put(p, "", 0);
	cr_expect_eq(read_path(p, buf, total, &got, &len, &why), -ENODATA);
	put(p, "P6\n32 32\n255\n", 13);
	cr_expect_eq(read_path(p, buf, total, &got, &len, &why), -ENODATA);
	memset(file, 'x', 128);
	put(p, file, total);
	cr_expect_eq(read_path(p, buf, total, &got, &len, &why), -EBADMSG);
	cr_expect(strstr(why, "not a batch"), "%s", why);
	free(file);
	free(buf);
	th_rmrf(dir);
	free(dir);
}
