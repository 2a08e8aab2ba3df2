/* Unit tests of peer lists: --peers, --peers-file, SLURM hostlists, ranks. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "helpers.h"

static char err[512];

Test(cluster, lists_and_ports)
{
	struct cluster c = { 0 };

	cr_assert_eq(cluster_add_list(&c, "node1, node2:7100 ,10.0.0.3,[fd00::1]:9", "7070", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.n, 4);
	cr_expect_str_eq(c.nodes[0].id, "node1:7070");
	cr_expect_str_eq(c.nodes[1].id, "node2:7100");
	cr_expect_str_eq(c.nodes[2].host, "10.0.0.3");
	cr_expect_str_eq(c.nodes[3].host, "fd00::1");
	cr_expect_str_eq(c.nodes[3].id, "[fd00::1]:9");
	cr_assert_eq(cluster_finish(&c, 2, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(c.self, 2);
	cr_expect_eq(cluster_finish(&c, 4, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "--rank 4"), "%s", err);
	cluster_free(&c);
}

Test(cluster, bad_entries_are_named)
{
	static const char *const bad[] = { "a,,b", "a:0", "a:70000", "a:x", "fd00::1", "[fd00::1", "a b", "", "a:1:2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cluster c = { 0 };
		cr_expect_lt(cluster_add_list(&c, bad[i], "7070", err, sizeof(err)), 0, "accepted \"%s\"", bad[i]);
		cr_expect(err[0], "no message for \"%s\"", bad[i]);
		cluster_free(&c);
	}
	struct cluster c = { 0 };
	cr_assert_eq(cluster_add_list(&c, "a,b,a", "7070", err, sizeof(err)), 0);
	cr_expect_eq(cluster_finish(&c, 0, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "twice"), "%s", err);
	cluster_free(&c);
}

Test(cluster, hostfile)
{
	char *dir = th_tmpdir(), path[4096];
	struct cluster c = { 0 };

	th_write(dir, "hosts", "# the training nodes\n\ngpu1\n  gpu2:7071   # spare port\ngpu3\n");
	snprintf(path, sizeof(path), "%s/hosts", dir);
	cr_assert_eq(cluster_add_file(&c, path, "7070", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.n, 3);
	cr_expect_str_eq(c.nodes[1].id, "gpu2:7071");
	cluster_free(&c);
	th_write(dir, "bad", "gpu1\ngpu2:port\n");
	snprintf(path, sizeof(path), "%s/bad", dir);
	cr_expect_eq(cluster_add_file(&c, path, "7070", err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, ":2:"), "line number in \"%s\"", err);
	cluster_free(&c);
	cr_expect_lt(cluster_add_file(&c, "/nonexistent/hosts", "7070", err, sizeof(err)), 0);
	cr_expect(strstr(err, "/nonexistent/hosts"), "%s", err);
	cluster_free(&c);
	th_rmrf(dir);
	free(dir);
}

Test(cluster, slurm_hostlists)
{
	struct cluster c = { 0 };
	static const char *const want[] = { "gpu01", "gpu02", "gpu03", "gpu07", "login2", "r1n1", "r1n2",
					    "r2n1", "r2n2", "x009", "x010" };

	cr_assert_eq(cluster_add_slurm(&c, "gpu[01-03,07],login2,r[1-2]n[1-2],x[009-010]", "7070", err,
				       sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.n, sizeof(want) / sizeof(want[0]));
	for (unsigned i = 0; i < c.n; i++)
		cr_expect_str_eq(c.nodes[i].host, want[i]);
	cr_expect_str_eq(c.nodes[0].port, "7070");
	cluster_free(&c);
	cr_expect_lt(cluster_add_slurm(&c, "gpu[3-1]", "7070", err, sizeof(err)), 0);
	cluster_free(&c);
	cr_expect_lt(cluster_add_slurm(&c, "gpu[1-", "7070", err, sizeof(err)), 0);
	cluster_free(&c);
	cr_expect_lt(cluster_add_slurm(&c, "gpu[a-b]", "7070", err, sizeof(err)), 0);
	cluster_free(&c);
	/* Found by tests/fuzz/fuzz_text.c: a number past ULONG_MAX saturated
	 * and the range [ULONG_MAX] looped for ever. */
	cr_expect_lt(cluster_add_slurm(&c, "s[888888888888888888888888888880]", "7070", err, sizeof(err)), 0);
	cr_expect(strstr(err, "bad range"), "%s", err);
	cluster_free(&c);
	cr_expect_lt(cluster_add_slurm(&c, "s[1-18446744073709551615]", "7070", err, sizeof(err)), 0);
	cluster_free(&c);
	/* An empty group is refused: it expanded to nobody while the groups
	 * before it multiplied (fuzz_text: a 13 s hang). */
	cr_expect_eq(cluster_add_slurm(&c, "a[1-400]b[1-400]c[]", "7070", err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "empty range"), "%s", err);
	cluster_free(&c);
	cr_expect_eq(cluster_add_slurm(&c, "a[1-400]b[,]", "7070", err, sizeof(err)), -EINVAL);
	cluster_free(&c);
	/* Products of ranges stop at the node limit, not after a million. */
	cr_expect_eq(cluster_add_slurm(&c, "a[0-999]b[0-999]", "7070", err, sizeof(err)), -E2BIG);
	cluster_free(&c);
}

Test(cluster, rank_from_host_name)
{
	struct cluster c = { 0 };
	char host[256], list[600];

	cr_assert_eq(gethostname(host, sizeof(host)), 0);
	host[strcspn(host, ".")] = '\0';
	snprintf(list, sizeof(list), "other-a,%s,other-b", host);
	cr_assert_eq(cluster_add_list(&c, list, "7070", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cluster_finish(&c, -1, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(c.self, 1);
	cluster_free(&c);
	cr_assert_eq(cluster_add_list(&c, "other-a,other-b", "7070", err, sizeof(err)), 0);
	cr_expect_eq(cluster_finish(&c, -1, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "not in the peer list"), "%s", err);
	cluster_free(&c);
}
