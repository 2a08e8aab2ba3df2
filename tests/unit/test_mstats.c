/* test_mstats.c - the tools' reader of stats.json: the daemon's own
 * rendering round-trips, anything else is refused. */
#include <criterion/criterion.h>
#include <errno.h>

#include "core/stats.h"
#include "mstats.h"

Test(mstats, reads_what_the_daemon_renders)
{
	struct sample v[] = {
		{ .name = "read_bytes", .kind = SAMPLE_COUNTER, .u = 9007199254740991ull },
		{ .name = "cache_items", .kind = SAMPLE_GAUGE, .u = 0 },
		{ .name = "uptime_s", .kind = SAMPLE_GAUGE, .is_float = 1, .d = 12.5 },
		{ .name = "version", .kind = SAMPLE_INFO, .text = "1.2.3-rc1" },
	};
	char buf[512];
	struct mstats m;

	cr_assert_gt(stats_render_json(v, 4, buf, sizeof(buf)), 0);
	cr_assert_eq(mstats_parse(buf, &m), 0);
	cr_expect_eq(m.n, 3);
	cr_expect_eq(m.nt, 1);
	cr_expect_str_eq(mstats_text(&m, "version"), "1.2.3-rc1");
	cr_expect_null(mstats_text(&m, "read_bytes"));
	cr_expect_eq(mstats_get(&m, "version", -3), -3);
	cr_expect_eq(mstats_get(&m, "read_bytes", -1), 9007199254740991.0);
	cr_expect_eq(mstats_get(&m, "cache_items", -1), 0);
	cr_expect_eq(mstats_get(&m, "uptime_s", -1), 12.5);
	cr_expect_eq(mstats_get(&m, "absent", -7), -7);
	cr_expect_eq(mstats_parse("  {}\n", &m), 0);
	cr_expect_eq(m.n, 0);
}

Test(mstats, refuses_other_shapes)
{
	static const char *bad[] = {
		"", "[]", "{", "{\"a\": }", "{\"a\" 1}", "{\"a\": 1,}", "{\"a\": 1", "{a: 1}",
		"{\"a\": \"x}", "{\"a\": \"x\\qy\"}", "{\"a\": \"x\\u00e9\"}", "{\"a\": \"x\" \"b\": 1}", "{\"a\": \"x\",}", "{\"\": 1}",
		"{\"\": \"x\"}", "{\"a\": \"x\ty\"}", "{\"a\": 1 \"b\": 2}",
		"{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 1}",
	};
	struct mstats m;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(mstats_parse(bad[i], &m), -EBADMSG, "accepted '%s'", bad[i]);
}

Test(mstats, read_reports_a_missing_file)
{
	struct mstats m;
	char path[64];

	cr_expect_eq(mstats_read("/nonexistent/stats.json", &m), -ENOENT);
	cr_expect_eq(mstats_find("/nonexistent", path, sizeof(path)), -ENOENT);
	cr_expect_eq(mstats_find("/", path, sizeof(path)), -ENOENT);
}

/* Strings with the escapes the daemon writes (a SOURCE path may hold any byte). */
Test(mstats, strings_with_escapes)
{
	struct mstats m;

	cr_assert_eq(mstats_parse("{\"source\": \"/data/a \\\"b\\\" \\\\c\\u0001\\n\", \"n\": 2}", &m), 0);
	cr_expect_str_eq(mstats_text(&m, "source"), "/data/a \"b\" \\c\001\n");
	cr_expect_eq(mstats_get(&m, "n", -1), 2);
}
