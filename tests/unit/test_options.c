/* Unit tests of the command line. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "options.h"

static int parse(struct options *o, char *err, ...)
{
	char *argv[32] = { (char *)"epochfs" };
	int argc = 1;
	va_list ap;
	char *a;

	va_start(ap, err);
	while ((a = va_arg(ap, char *)))
		argv[argc++] = a;
	va_end(ap);
	return options_parse(argc, argv, o, err, 256);
}

Test(options, defaults)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "src", "mnt", NULL), 0);
	cr_expect_str_eq(o.source, "src");
	cr_expect_str_eq(o.mountpoint, "mnt");
	cr_expect_eq(o.threads, OPTIONS_DEFAULT_THREADS);
	cr_expect_eq(o.timeout, OPTIONS_DEFAULT_TIMEOUT);
	cr_expect(o.watch);
	cr_expect(!o.foreground);
	cr_expect_str_eq(o.fuse_opts, "");
}

Test(options, all_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "-d", "-o", "allow_other", "-o", "auto_unmount,max_read=65536",
			   "--threads", "3", "--timeout", "0.5", "--no-watch", "--open",
			   "--scan-threads=5", "--log", "/tmp/l", "s", "m", NULL), 0, "%s", err);
	cr_expect(o.debug && o.foreground);
	cr_expect_str_eq(o.fuse_opts, "allow_other,auto_unmount,max_read=65536");
	cr_expect_eq(o.threads, 3);
	cr_expect_eq(o.scan_threads, 5);
	cr_expect_eq(o.timeout, 0.5);
	cr_expect(!o.watch);
	cr_expect(o.handle_open);
	cr_expect_str_eq(o.log_file, "/tmp/l");
}

Test(options, errors_are_named)
{
	struct options o;
	char err[256];

	cr_expect_eq(parse(&o, err, NULL), -EINVAL);
	cr_expect_str_eq(err, "missing SOURCE and MOUNTPOINT (see --help)");
	cr_expect_eq(parse(&o, err, "s", NULL), -EINVAL);
	cr_expect_str_eq(err, "missing MOUNTPOINT (see --help)");
	cr_expect_eq(parse(&o, err, "s", "m", "x", NULL), -EINVAL);
	cr_expect(strstr(err, "x: unexpected argument"));
	cr_expect_eq(parse(&o, err, "--threads", "0", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--threads 0"));
	cr_expect_eq(parse(&o, err, "--threads", "12x", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--threads", "-1", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--timeout", "nan", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--timeout", "-1", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--bogus", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--bogus: unknown option"), "%s", err);
	cr_expect_eq(parse(&o, err, "-z", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "-z: unknown option"), "%s", err);
	cr_expect_eq(parse(&o, err, "s", "m", "-o", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "-o", NULL), -EINVAL);
	cr_expect(strstr(err, "missing argument"), "%s", err);
	cr_expect_eq(parse(&o, err, "-o", "a,,b", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--state-dir", "/dev/shm/x", "--no-persist", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--state-dir with --persist off (or --no-persist)"), "%s", err);
	cr_expect_eq(parse(&o, err, "--state-dir", "", "s", "m", NULL), -EINVAL);
}

Test(options, persist_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0);
	cr_expect_eq(o.persist_mode, PERSIST_MODE_CRASH, "the cache outlives a crash, not a clean stop, by default");
	cr_expect_null(o.state_dir);
	cr_assert_eq(parse(&o, err, "--state-dir", "/dev/shm/x", "s", "m", NULL), 0);
	cr_expect_str_eq(o.state_dir, "/dev/shm/x");
	cr_assert_eq(parse(&o, err, "--no-persist", "s", "m", NULL), 0);
	cr_expect_eq(o.persist_mode, PERSIST_MODE_OFF);
	cr_assert_eq(parse(&o, err, "--persist", "always", "s", "m", NULL), 0);
	cr_expect_eq(o.persist_mode, PERSIST_MODE_ALWAYS);
	cr_assert_eq(parse(&o, err, "-o", "persist=off", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.persist_mode, PERSIST_MODE_OFF);
	cr_expect_eq(parse(&o, err, "--persist", "sometimes", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--persist sometimes: expected crash, always or off"), "%s", err);
	cr_expect_eq(parse(&o, err, "--persist", "off", "--state-dir", "/dev/shm/x", "s", "m", NULL), -EINVAL);
}

Test(options, tier_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "--cache-dir", "/a", "--cache-dir", "/b", "--cache-dir-size", "10G", "s", "m",
			   NULL), 0);
	cr_expect_eq(o.ncache_dirs, 2);
	cr_expect_str_eq(o.cache_dirs[1], "/b");
	cr_expect_eq(o.ncache_dir_sizes, 1);
	cr_expect_eq(o.cache_dir_sizes[0], 10ull << 30);
	cr_assert_eq(parse(&o, err, "--cache-dir", "/a", "--cache-dir", "/b", "--cache-dir-size", "1G",
			   "--cache-dir-size", "2G", "s", "m", NULL), 0);
	cr_expect_eq(o.cache_dir_sizes[1], 2ull << 30);
	cr_expect_eq(parse(&o, err, "--cache-dir-size", "1G", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--cache-dir-size needs --cache-dir"), "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-dir", "/a", "--cache-dir-size", "1G", "--cache-dir-size", "2G",
			   "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "one per directory"), "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-dir", "/a", "--cache-dir-size", "50%", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--cache-dir", "/a", "--cache-dir-size", "0", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--cache-dir", "", "s", "m", NULL), -EINVAL);
}

Test(options, help_and_version_need_nothing_else)
{
	struct options o;
	char err[256];

	cr_expect_eq(parse(&o, err, "--help", NULL), 0);
	cr_expect(o.help);
	cr_expect_eq(parse(&o, err, "-V", NULL), 0);
	cr_expect(o.version);
}

Test(options, parse_uint_bounds)
{
	unsigned v;

	cr_expect_eq(options_parse_uint("42", 1, 100, &v), 0);
	cr_expect_eq(v, 42);
	cr_expect_eq(options_parse_uint("101", 1, 100, &v), -EINVAL);
	cr_expect_eq(options_parse_uint("", 1, 100, &v), -EINVAL);
	cr_expect_eq(options_parse_uint("+3", 1, 100, &v), -EINVAL);
	cr_expect_eq(options_parse_uint("99999999999999999999", 0, ~0u, &v), -EINVAL);
}

Test(options, sizes)
{
	uint64_t v;

	cr_expect_eq(options_parse_size("0", 0, &v), 0);
	cr_expect_eq(v, 0);
	cr_expect_eq(options_parse_size("4096", 0, &v), 0);
	cr_expect_eq(v, 4096);
	cr_expect_eq(options_parse_size("3K", 0, &v), 0);
	cr_expect_eq(v, 3072);
	cr_expect_eq(options_parse_size("2m", 0, &v), 0);
	cr_expect_eq(v, 2u << 20);
	cr_expect_eq(options_parse_size("5GiB", 0, &v), 0);
	cr_expect_eq(v, 5ull << 30);
	cr_expect_eq(options_parse_size("1T", 0, &v), 0);
	cr_expect_eq(v, 1ull << 40);
	cr_expect_eq(options_parse_size("50%", 1000, &v), 0);
	cr_expect_eq(v, 500);
	cr_expect_eq(options_parse_size("101%", 1000, &v), -EINVAL);
	cr_expect_eq(options_parse_size("5%x", 1000, &v), -EINVAL);
	cr_expect_eq(options_parse_size("1X", 0, &v), -EINVAL);
	cr_expect_eq(options_parse_size("1Kx", 0, &v), -EINVAL);
	cr_expect_eq(options_parse_size("-1", 0, &v), -EINVAL);
	cr_expect_eq(options_parse_size("", 0, &v), -EINVAL);
	cr_expect_eq(options_parse_size("99999999999T", 0, &v), -EINVAL);
}

Test(options, cache_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "--cache-size", "2G", "--cache-chunk", "256K", "--verify", "s", "m", NULL), 0, "%s", err);
	cr_expect(o.cache_size_set);
	cr_expect_eq(o.cache_size, 2ull << 30);
	cr_expect_eq(o.cache_chunk, 256u << 10);
	cr_expect(o.verify);
	cr_expect_eq(parse(&o, err, "--cache-size", "lots", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--cache-size lots"), "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-chunk", "100K", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--cache-chunk", "0", "s", "m", NULL), -EINVAL);
	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0);
	cr_expect(!o.cache_size_set);
	cr_expect_eq(o.cache_chunk, CORE_DEFAULT_CACHE_CHUNK);
	cr_expect_eq(o.scrub_rate, OPTIONS_DEFAULT_SCRUB_RATE);
	cr_expect(!o.keep_source_cache);
	cr_assert_eq(parse(&o, err, "--scrub-rate", "0", "--keep-source-cache", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.scrub_rate, 0);
	cr_expect(o.keep_source_cache);
	cr_assert_eq(parse(&o, err, "--scrub-rate", "1G", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.scrub_rate, 1ull << 30);
	cr_expect_eq(parse(&o, err, "--scrub-rate", "10%", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--scrub-rate 10%"), "%s", err);
	cr_expect_eq(o.prefault_window, OPTIONS_DEFAULT_PREFAULT);
	/* A cache lives in RAM: a budget larger than RAM is refused up front,
	 * not found out by the OOM killer when the arena is made resident. */
	cr_expect_eq(parse(&o, err, "--cache-size", "100000T", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "more than this machine's RAM"), "%s", err);
	cr_assert_eq(parse(&o, err, "--prefault", "0", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.prefault_window, 0);
	cr_assert_eq(parse(&o, err, "--prefault", "64M", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.prefault_window, 64ull << 20);
	cr_expect_eq(parse(&o, err, "--prefault", "-1", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prefault -1"), "%s", err);
}

Test(options, prep_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.prep_ahead, 0);
	cr_expect_eq(o.prep_timeout, OPTIONS_DEFAULT_PREP_TIMEOUT);
	cr_assert_eq(parse(&o, err, "--prep-ahead", "16", "--prep-threads", "3", "--prep-timeout", "9", "s", "m",
			   NULL), 0, "%s", err);
	cr_expect_eq(o.prep_ahead, 16);
	cr_expect_eq(o.prep_threads, 3);
	cr_expect_eq(o.prep_timeout, 9);
	cr_expect_eq(parse(&o, err, "--prep-ahead", "0", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prep-ahead 0"), "%s", err);
	cr_expect_eq(parse(&o, err, "--prep-mem", "0", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prep-mem 0"), "%s", err);
}

Test(options, o_spellings_and_mount_helper_order)
{
	struct options o;
	char err[256];

	/* What mount.fuse3 runs for `mount -t fuse.epochfs s m -o ...`. */
	cr_assert_eq(parse(&o, err, "s", "m", "-o", "rw,cache_size=64M,no_persist,_netdev,noauto,"
			   "x-systemd.requires=network.target,allow_other,threads=4,comment=x", NULL), 0, "%s", err);
	cr_expect_str_eq(o.source, "s");
	cr_expect_str_eq(o.mountpoint, "m");
	cr_expect_eq(o.cache_size, 64ull << 20);
	cr_expect_eq(o.persist_mode, PERSIST_MODE_OFF);
	cr_expect_eq(o.threads, 4);
	cr_expect_str_eq(o.fuse_opts, "rw,allow_other", "FUSE keeps its own; mount's are dropped");
	cr_assert_eq(parse(&o, err, "-ostate_dir=/dev/shm/q,cache_dir=/a,cache_dir=/b", "s", "m", NULL), 0, "%s", err);
	cr_expect_str_eq(o.state_dir, "/dev/shm/q");
	cr_expect_eq(o.ncache_dirs, 2);
	cr_assert_eq(parse(&o, err, "s", "--cache-size", "1G", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.cache_size, 1ull << 30);
	cr_assert_eq(parse(&o, err, "-f", "--", "-s", "m", NULL), 0, "%s", err);
	cr_expect_str_eq(o.source, "-s");
	/* Refused with one line. */
	cr_expect_eq(parse(&o, err, "s", "m", "-o", "cache_size", NULL), -EINVAL);
	cr_expect(strstr(err, "expected cache_size=VALUE"), "%s", err);
	cr_expect_eq(parse(&o, err, "s", "m", "-o", "no_persist=1", NULL), -EINVAL);
	cr_expect(strstr(err, "takes no value"), "%s", err);
	cr_expect_eq(parse(&o, err, "s", "m", "-o", "cache_size=lots", NULL), -EINVAL);
	cr_expect(strstr(err, "--cache-size lots"), "%s", err);
}

/* Sizes the machine cannot hold are refused: the daemon's memory is one
 * budget (--prep-mem 1T was taken before). */
Test(options, sizes_larger_than_the_machine)
{
	struct options o;
	char err[256];

	if (!core_ram_bytes())
		cr_skip_test("no RAM figure here");
	cr_expect_eq(parse(&o, err, "--prefetch-mem", "1T", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prefetch-mem: ") && strstr(err, "more than this machine's memory"), "%s", err);
	cr_expect_eq(parse(&o, err, "--prep-mem", "1T", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prep-mem: "), "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-size", "60%", "--prep-mem", "50%", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "they share one budget"), "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-size", "50%", "--prep-mem", "10%", "--prefetch-mem", "1%", "s", "m",
			   NULL), 0, "%s", err);
	/* Staging lives inside a RAM cache's budget: it adds nothing to it
	 * (part 3's cgroup of D/2 + 20 MiB holds --cache-size D/2 with the
	 * default --prefetch-mem). */
	cr_expect_eq(parse(&o, err, "--cache-size", "90%", "--prefetch-mem", "20%", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-size", "0", "--prefetch-mem", "60%", "--prep-mem", "50%", "s", "m",
			   NULL), -EINVAL);
	cr_expect(strstr(err, "--prefetch-mem and --prep-mem come to"), "%s", err);
}

/* A budget given as a bare number under 1 MiB is a slip (50 for 50% or
 * 50G): refused with the spellings that were likely meant; "B" says bytes. */
Test(options, small_bare_budgets_are_refused_with_a_hint)
{
	struct options o;
	char err[256];
	uint64_t v;

	cr_expect_eq(parse(&o, err, "--cache-size", "50", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--cache-size 50: ") && strstr(err, "did you mean 50%, 50M or 50G?") &&
		  strstr(err, "50B"), "%s", err);
	cr_expect_eq(parse(&o, err, "-o", "cache_size=50", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "50%, 50M or 50G"), "%s", err);
	cr_expect_eq(parse(&o, err, "--prefetch-mem", "4096", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--prefetch-mem 4096: ") && strstr(err, "4096K or 4096M"), "%s", err);
	cr_expect_eq(parse(&o, err, "--prep-mem", "1048575", "s", "m", NULL), -EINVAL);
	cr_expect_eq(parse(&o, err, "--cache-dir", "d", "--cache-dir-size", "64", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--cache-dir-size 64: "), "%s", err);
	/* Said in bytes, 0, or 1 MiB and over: taken as given. */
	cr_expect_eq(parse(&o, err, "--cache-size", "50B", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.cache_size, 50);
	cr_expect_eq(parse(&o, err, "--cache-size", "0", "--prefetch-mem", "0", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(parse(&o, err, "--cache-size", "1048576", "s", "m", NULL), 0, "%s", err);
	cr_expect_eq(o.cache_size, 1u << 20);
	cr_expect_eq(options_parse_size("7b", 0, &v), 0);
	cr_expect_eq(v, 7);
	cr_expect_eq(options_parse_size("7Bx", 0, &v), -EINVAL);
	cr_expect_eq(options_small_bare("50", 50), 1);
	cr_expect_eq(options_small_bare("50B", 50), 0);
	cr_expect_eq(options_small_bare("0", 0), 0);
}

Test(options, passthrough_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0);
	cr_expect_eq(o.passthrough, CORE_PT_AUTO, "auto by default");
	cr_assert_eq(parse(&o, err, "--passthrough", "on", "s", "m", NULL), 0);
	cr_expect_eq(o.passthrough, CORE_PT_ON);
	cr_assert_eq(parse(&o, err, "s", "m", "-o", "passthrough=off", NULL), 0, "%s", err);
	cr_expect_eq(o.passthrough, CORE_PT_OFF);
	cr_expect_eq(parse(&o, err, "--passthrough", "yes", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--passthrough yes: expected auto, on or off"), "%s", err);
}

Test(options, fuse_uring_options)
{
	struct options o;
	char err[256];

	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0);
	cr_expect_eq(o.fuse_uring, OPTIONS_URING_AUTO, "auto by default");
	cr_assert_eq(parse(&o, err, "--fuse-uring", "on", "s", "m", NULL), 0);
	cr_expect_eq(o.fuse_uring, OPTIONS_URING_ON);
	cr_assert_eq(parse(&o, err, "s", "m", "-o", "fuse_uring=off", NULL), 0, "%s", err);
	cr_expect_eq(o.fuse_uring, OPTIONS_URING_OFF);
	cr_assert_eq(parse(&o, err, "--fuse-uring", "auto", "s", "m", NULL), 0);
	cr_expect_eq(o.fuse_uring, OPTIONS_URING_AUTO);
	cr_expect_eq(parse(&o, err, "--fuse-uring", "1", "s", "m", NULL), -EINVAL);
	cr_expect(strstr(err, "--fuse-uring 1: expected auto, on or off"), "%s", err);
}

/* An option of two words (FLAG, or -o ONAME=): none gives 0; SET gives 1,
 * CLEAR 0, the last one wins, and BAD is refused saying EXPECTED. FIELD
 * reads the flag parsed. */
static void two_words(const char *flag, const char *oname, const char *set, const char *clear,
		      const char *bad, const char *expected, int (*field)(const struct options *))
{
	struct options o;
	char err[256], oarg[64], want[128];

	cr_assert_eq(parse(&o, err, "s", "m", NULL), 0);
	cr_expect_eq(field(&o), 0, "%s: 0 by default", flag);
	cr_assert_eq(parse(&o, err, flag, set, "s", "m", NULL), 0);
	cr_expect_eq(field(&o), 1, "%s %s", flag, set);
	snprintf(oarg, sizeof(oarg), "%s=%s", oname, set);
	cr_assert_eq(parse(&o, err, "s", "m", "-o", oarg, NULL), 0, "%s", err);
	cr_expect_eq(field(&o), 1, "-o %s", oarg);
	cr_assert_eq(parse(&o, err, flag, set, flag, clear, "s", "m", NULL), 0);
	cr_expect_eq(field(&o), 0, "%s: the last one wins", flag);
	cr_expect_eq(parse(&o, err, flag, bad, "s", "m", NULL), -EINVAL);
	snprintf(want, sizeof(want), "%s %s: expected %s", flag, bad, expected);
	cr_expect(strstr(err, want), "%s", err);
}

static int no_stand_aside(const struct options *o) { return o->no_stand_aside; }
static int spread(const struct options *o) { return o->spread; }

Test(options, stand_aside_options)
{
	two_words("--stand-aside", "stand_aside", "off", "auto", "on", "auto or off", no_stand_aside);
}

Test(options, spread_options)
{
	two_words("--spread", "spread", "on", "off", "auto", "on or off", spread);
}
