/* stats.c - see stats.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/stats.h"
#include "util/clock.h"

static const struct {
	const char *name, *help;
} stat_info[STAT__COUNT] = {
	[STAT_READS] = { "reads", "Read requests answered by the daemon" },
	[STAT_READ_BYTES] = { "read_bytes", "Bytes returned to readers by the daemon" },
	[STAT_READ_ERRORS] = { "read_errors", "Read requests answered with an error" },
	[STAT_STALE_READS] = { "stale_reads", "Reads refused because the backing file changed" },
	[STAT_LOOKUPS] = { "lookups", "Name lookups answered" },
	[STAT_CHANGES] = { "changes", "Backing entries seen changed or removed" },
	[STAT_CACHE_HIT_BYTES] = { "cache_hit_bytes", "Bytes returned to readers from the RAM cache" },
	[STAT_CACHE_MISS_BYTES] = { "cache_miss_bytes", "Bytes returned to readers not from the RAM cache (storage or a peer)" },
	[STAT_PEER_READ_BYTES] = { "peer_read_bytes", "Bytes fetched from peer nodes, checksum verified" },
	[STAT_PEER_SERVED_BYTES] = { "peer_served_bytes", "Bytes sent to peer nodes" },
	[STAT_PEER_ERRORS] = { "peer_errors", "Peer faults: refused, timed out, broken or lying; each read fell back to storage" },
	[STAT_PEER_LIES] = { "peer_lies", "Peer replies whose bytes did not match the manifest (read from storage instead)" },
	[STAT_PEER_FALLBACK_BYTES] = { "peer_fallback_bytes", "Bytes meant for another node that were read from storage instead: that node down or backing off after a fault, too busy, timed out, refusing, or lying" },
	[STAT_MANIFEST_MISMATCHES] = { "manifest_mismatches", "Storage loads whose bytes did not match the manifest (served, never cached)" },
	[STAT_COPIES_DROPPED] = { "page_cache_drops", "Files whose copy in the kernel's page cache was dropped once read (memory too tight to keep the dataset there)" },
	[STAT_OPENS] = { "opens", "Opens answered by the daemon (with kernel passthrough, or --open)" },
	[STAT_PT_OPENS] = { "passthrough_opens", "Opens answered with a backing file: the kernel reads the file from the RAM cache itself" },
	[STAT_PT_REGISTERED] = { "passthrough_registered", "Backing files registered with the kernel (one per file while it is open)" },
	[STAT_PT_SOURCE_OPENS] = { "passthrough_source_opens", "Opens of a file no store held, while the RAM cache had no room for it, answered with the file in SOURCE: the kernel reads it there itself" },
	[STAT_PT_SOURCE_BYTES] = { "passthrough_source_bytes", "The sizes of the files opened so: at most what the kernel read from SOURCE for them" },
	[STAT_URING_READS] = { "fuse_uring_reads", "Read requests the kernel sent over FUSE's io_uring "
			       "(--fuse-uring), not through /dev/fuse" },
	[STAT_PT_PREP_OPENS] = { "prep_passthrough_opens", "Opens of .prep/ batches answered with the batch's file: the kernel reads it, the daemon copies nothing" },
	[STAT_PT_PREP_BYTES] = { "prep_passthrough_bytes", "The sizes of the batches opened so" },
	[STAT_PT_BUSY] = { "passthrough_busy", "Opens of a file the RAM cache holds whole that went through the daemon, because an open of it already did" },
	[STAT_PT_ERRORS] = { "passthrough_errors", "Backing files the kernel refused (the file was read through the daemon)" },
};

void stats_init(struct stats *s)
{
	memset(s, 0, sizeof(*s));
	s->start = clock_now();
}

uint64_t stats_get(const struct stats *s, enum stat_id id)
{
	return __atomic_load_n(&s->c[id], __ATOMIC_RELAXED);
}

double stats_uptime(const struct stats *s)
{
	return clock_now() - s->start;
}

int stats_samples(const struct stats *s, struct sample *out, int max)
{
	int n = 0;

	for (int i = 0; i < STAT__COUNT && n < max; i++, n++) {
		out[n] = (struct sample){ .name = stat_info[i].name, .help = stat_info[i].help,
					  .kind = SAMPLE_COUNTER,
					  .u = stats_get(s, (enum stat_id)i) };
	}
	return n;
}

struct out {
	char *buf;
	size_t len, used;
	int full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->used, o->len - o->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->len - o->used)
		o->full = 1;
	else
		o->used += (size_t)n;
}

/* TEXT as a JSON string (PROM 0) or a Prometheus label value (PROM 1),
 * quotes included: '"' and '\\' escaped; control bytes as \\uXXXX (JSON)
 * or '?' (a label value takes \\n only). */
static void put_string(struct out *o, const char *text, int prom)
{
	put(o, "\"");
	for (const char *p = text ? text : ""; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		/* A run of plain bytes at once: one put() a byte made a
		 * stats.json of 1-2 KB of text cost ~1,500 vsnprintf calls. */
		size_t run = strcspn(p, "\"\\\n\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0b\x0c\x0d\x0e\x0f"
				      "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f");
		if (run) {
			put(o, "%.*s", (int)run, p);
			p += run - 1;
			continue;
		}
		if (ch == '"' || ch == '\\')
			put(o, "\\%c", ch);
		else if (ch == '\n')
			put(o, "\\n");
		else
			put(o, prom ? "?" : "\\u%04x", ch);      /* the other control bytes */
	}
	put(o, "\"");
}

static void put_value(struct out *o, const struct sample *v)
{
	if (v->kind == SAMPLE_INFO)
		put_string(o, v->text, 0);
	else if (v->is_float)
		put(o, "%.3f", v->d);
	else
		put(o, "%llu", (unsigned long long)v->u);
}

int stats_render_json(const struct sample *v, int n, char *buf, size_t len)
{
	struct out o = { buf, len, 0, len == 0 };

	put(&o, "{");
	for (int i = 0; i < n; i++) {
		put(&o, "%s\"%s\": ", i ? ", " : "", v[i].name);
		put_value(&o, &v[i]);
	}
	put(&o, "}\n");
	return o.full ? -ENOSPC : (int)o.used;
}

int stats_render_prom(const struct sample *v, int n, char *buf, size_t len)
{
	struct out o = { buf, len, 0, len == 0 };

	for (int i = 0; i < n; i++) {
		if (v[i].kind == SAMPLE_INFO) {
			put(&o, "# HELP epochfs_%s_info %s\n", v[i].name, v[i].help);
			put(&o, "# TYPE epochfs_%s_info gauge\n", v[i].name);
			put(&o, "epochfs_%s_info{%s=", v[i].name, v[i].name);
			put_string(&o, v[i].text, 1);
			put(&o, "} 1\n");
			continue;
		}
		const char *sfx = v[i].kind == SAMPLE_COUNTER ? "_total" : "";
		put(&o, "# HELP epochfs_%s%s %s\n", v[i].name, sfx, v[i].help);
		put(&o, "# TYPE epochfs_%s%s %s\n", v[i].name, sfx,
		    v[i].kind == SAMPLE_COUNTER ? "counter" : "gauge");
		put(&o, "epochfs_%s%s ", v[i].name, sfx);
		put_value(&o, &v[i]);
		put(&o, "\n");
	}
	return o.full ? -ENOSPC : (int)o.used;
}
