/* Unit tests of the control directory's snapshots. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

#include "core/ns/control.h"

static int renders;
static int render(void *arg, enum control_file f, char *buf, size_t len)
{
	(void)arg;
	renders++;
	if (f == CONTROL_METRICS) {
		/* Bigger than the first buffer: exercises the retry. */
		if (len < 40000)
			return -ENOSPC;
		memset(buf, 'm', 40000);
		return 40000;
	}
	return snprintf(buf, len, "{\"n\": %d}\n", renders);
}

Test(control, each_lookup_is_a_fresh_snapshot)
{
	struct control *ct;
	struct control_attr a, b, g;
	char buf[64];

	cr_assert_eq(control_new(render, NULL, &ct), 0);
	cr_assert_eq(control_lookup(ct, CONTROL_DIR_NODE, "stats.json", &a), 0);
	cr_assert_eq(control_lookup(ct, CONTROL_DIR_NODE, "stats.json", &b), 0);
	cr_expect_neq(a.node, b.node);
	cr_expect_eq(ns_of(a.node), NS_CONTROL);
	cr_expect_eq(control_read(ct, a.node, buf, sizeof(buf), 0), (ssize_t)a.size);
	cr_expect_arr_eq(buf, "{\"n\": 1}\n", a.size);
	cr_expect_eq(control_read(ct, b.node, buf, 3, 2), 3);
	cr_expect_arr_eq(buf, "n\":", 3);
	cr_expect_eq(control_read(ct, b.node, buf, 10, 1000), 0);
	cr_expect_eq(control_getattr(ct, a.node, &g), 0);
	cr_expect_eq(g.size, a.size);

	control_forget(ct, a.node, 1);
	cr_expect_eq(control_getattr(ct, a.node, &g), -ENOENT);
	cr_expect_eq(control_read(ct, a.node, buf, 10, 0), -EIO);
	cr_expect_eq(control_getattr(ct, b.node, &g), 0);

	cr_assert_eq(control_lookup(ct, CONTROL_DIR_NODE, "metrics", &a), 0);
	cr_expect_eq(a.size, 40000);
	cr_expect_eq(control_lookup(ct, CONTROL_DIR_NODE, "nope", &a), -ENOENT);
	cr_expect_eq(control_lookup(ct, b.node, "stats.json", &a), -ENOENT);
	cr_expect_str_eq(control_dirent(ct, CONTROL_DIR_NODE, 0), "stats.json");
	cr_expect_null(control_dirent(ct, CONTROL_DIR_NODE, CONTROL__FILES));
	control_free(ct);
}

Test(control, snapshots_are_bounded)
{
	struct control *ct;
	struct control_attr a, first;

	cr_assert_eq(control_new(render, NULL, &ct), 0);
	cr_assert_eq(control_lookup(ct, CONTROL_DIR_NODE, "stats.json", &first), 0);
	for (int i = 0; i < 1100; i++)
		cr_assert_eq(control_lookup(ct, CONTROL_DIR_NODE, "stats.json", &a), 0);
	cr_expect_eq(control_getattr(ct, first.node, &a), -ENOENT);
	control_free(ct);
}
