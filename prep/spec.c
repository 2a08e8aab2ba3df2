/* spec.c - see spec.h. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -EINVAL; } while (0)

static const char *const keys[] = {
	"root", "batch", "size", "jobs", "seed", "epochs", "scale", "ratio", "flip",
	"drop_last", "layout", "dtype", "mean", "std",
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static int parse_u(const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;

	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
}

/* A number, or a fraction A/B. */
static int parse_num(const char *v, double *out)
{
	char *end;
	double a = strtod(v, &end), b = 1;

	if (end == v)
		return -1;
	if (*end == '/') {
		const char *q = end + 1;
		b = strtod(q, &end);
		if (end == q || b == 0)
			return -1;
	}
	if (*end || !isfinite(a / b))
		return -1;
	*out = a / b;
	return 0;
}

/* N comma-separated numbers. */
static int parse_list(const char *v, int n, double *out)
{
	char buf[256], *save = NULL, *tok;
	int i = 0;

	if (strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (i == n || parse_num(tok, &out[i++]))
			return -1;
	}
	return i == n ? 0 : -1;
}

/* Normalizes a relative path: no leading '/', no "..", no empty or "."
 * components. Control characters, and a name that starts or ends with a
 * space or tab, are refused: the spec's own line trimming would change
 * them when the spec is rendered and read back (tests/fuzz/fuzz_text.c
 * found a name ending in '\r'). 0 or -1. */
static int norm_root(const char *v, char *out, size_t len)
{
	char buf[SPEC_ROOT_MAX], *save = NULL, *tok;
	size_t used = 0;

	if (*v == '/' || strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	out[0] = '\0';
	for (tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, ".."))
			return -1;
		size_t tl = strlen(tok);
		if (tok[0] == ' ' || tok[0] == '\t' || tok[tl - 1] == ' ' || tok[tl - 1] == '\t')
			return -1;
		for (size_t i = 0; i < tl; i++)
			if ((unsigned char)tok[i] < 0x20 || tok[i] == 0x7f)
				return -1;
		int n = snprintf(out + used, len - used, "%s%s", used ? "/" : "", tok);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

static void defaults(struct prep_spec *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->batch = 64;
	sp->jobs = 1;
	sp->epochs = 1;
	sp->p = (struct batch_params){
		.size = 224, .scale = { 0.08, 1.0 }, .ratio = { 3.0 / 4.0, 4.0 / 3.0 }, .flip = 0.5,
		.dtype = BATCH_U8, .layout = BATCH_NCHW,
		.mean = { 0.485f, 0.456f, 0.406f }, .std = { 0.229f, 0.224f, 0.225f },
		.max_pixels = JPEG_MAX_PIXELS_DEFAULT,
	};
}

int spec_parse(const char *text, size_t len, struct prep_spec *sp, char *err, size_t errlen)
{
	unsigned seen = 0;
	int lineno = 0;
	const char *p = text, *end = text + len;

	defaults(sp);
	err[0] = '\0';
	if (len > SPEC_MAX_BYTES)
		FAIL("spec is %zu bytes, at most %d", len, SPEC_MAX_BYTES);
	if (memchr(text, '\0', len))
		FAIL("spec contains a NUL byte; expected text");
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		char line[512], *k, *v, *eq;
		lineno++;
		if (n >= sizeof(line))
			FAIL("line %d: longer than %zu characters", lineno, sizeof(line) - 1);
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (nl != NULL);
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		for (k = line; *k == ' ' || *k == '\t'; k++)
			;
		for (char *t = k + strlen(k); t > k && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r');)
			*--t = '\0';
		if (!*k)
			continue;
		eq = strchr(k, '=');
		if (!eq)
			FAIL("line %d: expected key=value, got '%s'", lineno, k);
		*eq = '\0';
		v = eq + 1;
		for (char *t = eq; t > k && (t[-1] == ' ' || t[-1] == '\t');)
			*--t = '\0';
		while (*v == ' ' || *v == '\t')
			v++;
		unsigned ki = 0;
		while (ki < NKEYS && strcmp(keys[ki], k))
			ki++;
		if (ki == NKEYS)
			FAIL("line %d: unknown key '%s' (known: root batch size jobs seed epochs scale ratio "
			     "flip drop_last layout dtype mean std)", lineno, k);
		if (seen & (1u << ki))
			FAIL("line %d: '%s' given twice", lineno, k);
		seen |= 1u << ki;

		uint64_t u;
		double d[3];
		if (!strcmp(k, "root")) {
			if (norm_root(v, sp->root, sizeof(sp->root)))
				FAIL("line %d: root=%s: expected a relative path inside the dataset (no '..', "
				     "no control characters, no name starting or ending with a space)",
				     lineno, v);
		} else if (!strcmp(k, "batch")) {
			if (parse_u(v, 1, 65536, &u))
				FAIL("line %d: batch=%s: expected a whole number from 1 to 65536", lineno, v);
			sp->batch = (uint32_t)u;
		} else if (!strcmp(k, "size")) {
			if (parse_u(v, 8, 2048, &u))
				FAIL("line %d: size=%s: expected a side in pixels from 8 to 2048", lineno, v);
			sp->p.size = (uint32_t)u;
		} else if (!strcmp(k, "jobs")) {
			if (parse_u(v, 1, 64, &u))
				FAIL("line %d: jobs=%s: expected the number of consumers, 1 to 64", lineno, v);
			sp->jobs = (uint32_t)u;
		} else if (!strcmp(k, "seed")) {
			if (parse_u(v, 0, UINT64_MAX, &u))
				FAIL("line %d: seed=%s: expected a whole number", lineno, v);
			sp->p.seed = u;
		} else if (!strcmp(k, "epochs")) {
			if (parse_u(v, 1, 1000000, &u))
				FAIL("line %d: epochs=%s: expected 1 to 1000000", lineno, v);
			sp->epochs = (uint32_t)u;
		} else if (!strcmp(k, "scale")) {
			if (parse_list(v, 2, d) || !(d[0] > 0 && d[0] <= d[1] && d[1] <= 1))
				FAIL("line %d: scale=%s: expected MIN,MAX with 0 < MIN <= MAX <= 1", lineno, v);
			sp->p.scale[0] = d[0], sp->p.scale[1] = d[1];
		} else if (!strcmp(k, "ratio")) {
			if (parse_list(v, 2, d) || !(d[0] > 0 && d[0] <= d[1] && d[1] < 1000))
				FAIL("line %d: ratio=%s: expected MIN,MAX aspect ratios with 0 < MIN <= MAX, "
				     "e.g. 3/4,4/3", lineno, v);
			sp->p.ratio[0] = d[0], sp->p.ratio[1] = d[1];
		} else if (!strcmp(k, "flip")) {
			if (parse_num(v, d) || !(d[0] >= 0 && d[0] <= 1))
				FAIL("line %d: flip=%s: expected a probability from 0 to 1", lineno, v);
			sp->p.flip = d[0];
		} else if (!strcmp(k, "drop_last")) {
			if (parse_u(v, 0, 1, &u))
				FAIL("line %d: drop_last=%s: expected 0 or 1", lineno, v);
			sp->drop_last = (int)u;
		} else if (!strcmp(k, "layout")) {
			if (!strcmp(v, "nchw"))
				sp->p.layout = BATCH_NCHW;
			else if (!strcmp(v, "nhwc"))
				sp->p.layout = BATCH_NHWC;
			else
				FAIL("line %d: layout=%s: expected nchw or nhwc", lineno, v);
		} else if (!strcmp(k, "dtype")) {
			if (!strcmp(v, "uint8"))
				sp->p.dtype = BATCH_U8;
			else if (!strcmp(v, "float32"))
				sp->p.dtype = BATCH_F32;
			else
				FAIL("line %d: dtype=%s: expected uint8 or float32", lineno, v);
		} else {                /* mean, std */
			int is_std = !strcmp(k, "std");
			if (parse_list(v, 3, d) || (is_std && !(d[0] > 0 && d[1] > 0 && d[2] > 0)))
				FAIL("line %d: %s=%s: expected three numbers (R,G,B)%s", lineno, k, v,
				     is_std ? ", all above 0" : "");
			for (int c = 0; c < 3; c++)
				(is_std ? sp->p.std : sp->p.mean)[c] = (float)d[c];
		}
	}
	if (sp->p.dtype == BATCH_U8 && (seen & (3u << 12)))
		FAIL("mean and std apply to dtype=float32 only");
	return 0;
}

int spec_render(const struct prep_spec *sp, char *buf, size_t len)
{
	const struct batch_params *p = &sp->p;
	int n = snprintf(buf, len,
			 "root=%s\nbatch=%u\nsize=%u\njobs=%u\nseed=%llu\nepochs=%u\nscale=%.17g,%.17g\n"
			 "ratio=%.17g,%.17g\nflip=%.17g\ndrop_last=%d\nlayout=%s\ndtype=%s\n",
			 sp->root[0] ? sp->root : ".", sp->batch, p->size, sp->jobs,
			 (unsigned long long)p->seed, sp->epochs, p->scale[0], p->scale[1], p->ratio[0],
			 p->ratio[1], p->flip, sp->drop_last, p->layout == BATCH_NCHW ? "nchw" : "nhwc",
			 p->dtype == BATCH_F32 ? "float32" : "uint8");
	if (n >= 0 && (size_t)n < len && p->dtype == BATCH_F32)
		n += snprintf(buf + n, len - (size_t)n, "mean=%.9g,%.9g,%.9g\nstd=%.9g,%.9g,%.9g\n",
			      p->mean[0], p->mean[1], p->mean[2], p->std[0], p->std[1], p->std[2]);
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}
