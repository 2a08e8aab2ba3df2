/* Unit tests of the counters and their JSON / Prometheus renderings. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "core/stats.h"

Test(stats, counters_render_in_both_formats)
{
	struct stats s;
	struct sample v[64];
	char buf[8192];
	int n;

	stats_init(&s);
	stats_add(&s, STAT_READS, 3);
	stats_add(&s, STAT_READ_BYTES, 12345);
	n = stats_samples(&s, v, 64);
	cr_assert_eq(n, STAT__COUNT);
	v[n++] = (struct sample){ .name = "uptime_s", .help = "h", .kind = SAMPLE_GAUGE,
				  .is_float = 1, .d = 1.5 };
	v[n++] = (struct sample){ .name = "version", .help = "Release", .kind = SAMPLE_INFO, .text = "0.9.1" };
	cr_assert_gt(stats_render_json(v, n, buf, sizeof(buf)), 0);
	cr_expect(strstr(buf, "\"reads\": 3"));
	cr_expect(strstr(buf, "\"read_bytes\": 12345"));
	cr_expect(strstr(buf, "\"uptime_s\": 1.500, \"version\": \"0.9.1\"}"));
	cr_expect_eq(buf[0], '{');
	cr_assert_gt(stats_render_prom(v, n, buf, sizeof(buf)), 0);
	cr_expect(strstr(buf, "# TYPE epochfs_reads_total counter\nepochfs_reads_total 3\n"));
	cr_expect(strstr(buf, "# TYPE epochfs_uptime_s gauge\nepochfs_uptime_s 1.500\n"));
	cr_expect(strstr(buf, "# TYPE epochfs_version_info gauge\nepochfs_version_info{version=\"0.9.1\"} 1\n"));
}

Test(stats, too_small_buffer_is_enospc)
{
	struct stats s;
	struct sample v[64];
	char buf[16];
	int n;

	stats_init(&s);
	n = stats_samples(&s, v, 64);
	cr_expect_eq(stats_render_json(v, n, buf, sizeof(buf)), -ENOSPC);
	cr_expect_eq(stats_render_prom(v, n, buf, sizeof(buf)), -ENOSPC);
	cr_expect_eq(stats_samples(&s, v, 2), 2);
}

/* A string sample holding quotes, backslashes and control bytes renders as
 * valid JSON and a valid Prometheus label value. */
Test(stats, strings_are_escaped)
{
	struct sample v[1] = { { .name = "source", .help = "SOURCE", .kind = SAMPLE_INFO,
				 .text = "/d/a\"b\\c\nd\001" } };
	char buf[512];

	cr_assert_gt(stats_render_json(v, 1, buf, sizeof(buf)), 0);
	cr_expect(strstr(buf, "\"source\": \"/d/a\\\"b\\\\c\\u000ad\\u0001\"") ||
		  strstr(buf, "\"source\": \"/d/a\\\"b\\\\c\\nd\\u0001\""), "%s", buf);
	cr_assert_gt(stats_render_prom(v, 1, buf, sizeof(buf)), 0);
	cr_expect(strstr(buf, "epochfs_source_info{source=\"/d/a\\\"b\\\\c\\nd?\"} 1"), "%s", buf);
}
