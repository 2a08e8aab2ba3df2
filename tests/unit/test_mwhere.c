/* test_mwhere.c - epochfs-stat --file's reader of user.epochfs.where: the
 * daemon's text (fs/core/where.c) parses, a line it must have that is
 * missing or malformed is refused, and lines it does not know are skipped. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "mwhere.h"

static int parse(const char *t, struct mwhere *w)
{
	return mwhere_parse(t, strlen(t), w);
}

Test(mwhere, reads_the_daemons_text)
{
	static struct mwhere w;
	const char *t = "size 600000\nitem 262144\nitems 3\nram 1 262144\nstaging 0 0\ntier 0 0\n"
			"peer 1 262144\nstorage 1 75712\nnode b:7070\nmap RP.\n";

	cr_assert_eq(parse(t, &w), 0);
	cr_expect_eq(w.size, 600000);
	cr_expect_eq(w.item, 262144);
	cr_expect_eq(w.items, 3);
	cr_expect_eq(w.n[MWHERE_RAM], 1);
	cr_expect_eq(w.bytes[MWHERE_PEER], 262144);
	cr_expect_eq(w.bytes[MWHERE_STORAGE], 75712);
	cr_expect_eq(w.nodes, 1);
	cr_expect_str_eq(w.node[0], "b:7070");
	cr_expect_str_eq(w.map, "RP.");
	cr_expect_eq(w.map_more, 0);
	cr_expect_str_eq(mwhere_key(MWHERE_TIER), "tier");
}

Test(mwhere, a_long_map_and_unknown_lines)
{
	static struct mwhere w;
	const char *t = "size 1\nitems 20000\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\n"
			"newkey whatever it says\nmap RRS+19997";

	cr_assert_eq(parse(t, &w), 0);
	cr_expect_str_eq(w.map, "RRS");
	cr_expect_eq(w.map_more, 19997);
}

Test(mwhere, refuses_what_is_not_the_text)
{
	static struct mwhere w;
	static const char *bad[] = {
		"",
		"size 1\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nmap .\n",             /* no storage */
		"size x\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .\n",
		"size 1\nitems 1\nram 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .\n",
		"size 1\nitems 1\nram 0 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .\n",
		"size 1\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .X\n",
		"size 1\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .+\n",
		"size 99999999999999999999999\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\nmap .\n",
		"size 1\nitems 1\nram 0 0\nstaging 0 0\ntier 0 0\npeer 0 0\nstorage 1 1\n",     /* no map */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(parse(bad[i], &w), -EBADMSG, "accepted: %s", bad[i]);
}
