/* test_nodes.c - the namespaces behind one table (fs/core/nodes.c, ns.h)
 * without a mount: node numbers tell the namespaces apart; .epochfs and
 * .prep are found by name in the root but never listed there (ImageFolder
 * would take them for classes), order/ is listed in .epochfs; each
 * namespace takes the writes it should and no other (the dataset is
 * read-only); removed entries go; virtual files are never cached. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "core/core_int.h"
#include "helpers.h"
#include "util/syncwait.h"

static char *dir;
static struct core *core;

static void setup(void)
{
	struct core_opts o = { .cache_size = 1 << 20, .timeout = 3600, .prep = 1, .prep_mem = 64 << 20,
			       .no_mem_watch = 1 };

	dir = th_tmpdir();
	th_mkdir(dir, "cls");
	th_write(dir, "cls/x.txt", "x");
	th_write(dir, "top.txt", "top");
	o.source = dir;
	cr_assert_eq(core_open(&o, &core), 0);
	cr_assert_eq(core_start(core), 0);
}

static void teardown(void)
{
	core_close(core);
	th_rmrf(dir);
	free(dir);
}

TestSuite(nodes, .init = setup, .fini = teardown, .timeout = 30);

static int listed(uint64_t node, const char *name)
{
	struct core_dirent d;
	uint64_t pos = 0;
	int found = 0;

	while (core_readdir(core, node, &pos, &d) == 1) {
		found |= !strcmp(d.name, name);
		pos++;
	}
	return found;
}

Test(nodes, the_namespaces_and_where_they_appear)
{
	struct core_attr ctl, order, prep, a;

	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".prep", &prep), 0);
	cr_assert_eq(core_lookup(core, ctl.node, "order", &order), 0);
	cr_expect_eq(ns_of(ctl.node), NS_CONTROL);
	cr_expect_eq(ns_of(order.node), NS_ORDER);
	cr_expect_eq(ns_of(prep.node), NS_PREP);
	cr_expect_eq(ns_of(CORE_ROOT_NODE), NS_DATA);
	cr_expect(S_ISDIR(ctl.mode) && S_ISDIR(order.mode) && S_ISDIR(prep.mode));
	cr_expect_gt(ctl.valid, 0, "a namespace's root is cached like a directory of the dataset");
	/* Listed where they belong, hidden in the root. */
	cr_expect(listed(CORE_ROOT_NODE, "cls") && listed(CORE_ROOT_NODE, "top.txt"));
	cr_expect(!listed(CORE_ROOT_NODE, ".epochfs") && !listed(CORE_ROOT_NODE, ".prep"));
	cr_expect(listed(ctl.node, "stats.json") && listed(ctl.node, "order"));
	/* Virtual files: a new node per lookup, never cached. */
	struct core_attr s1, s2;
	cr_assert_eq(core_lookup(core, ctl.node, "stats.json", &s1), 0);
	cr_assert_eq(core_lookup(core, ctl.node, "stats.json", &s2), 0);
	cr_expect_neq(s1.node, s2.node);
	cr_expect_eq(s1.valid, 0);
	cr_expect(s1.flags & CORE_F_DIRECT_IO);
	cr_expect_eq(core_lookup(core, ctl.node, "nope", &a), -ENOENT);
	cr_expect_eq(core_lookup(core, CORE_ROOT_NODE, "nope", &a), -ENOENT);
	/* A name of a namespace's root elsewhere is just a name. */
	struct core_attr cls;
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, "cls", &cls), 0);
	cr_expect_eq(core_lookup(core, cls.node, ".epochfs", &a), -ENOENT);
	cr_expect_eq(core_lookup(core, cls.node, "order", &a), -ENOENT);
}

Test(nodes, writes_go_where_they_are_taken)
{
	struct core_attr ctl, order, prep, st, top, a;

	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
	cr_assert_eq(core_lookup(core, ctl.node, "order", &order), 0);
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".prep", &prep), 0);
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, "top.txt", &top), 0);
	/* The dataset is read-only. */
	cr_expect_eq(core_access(core, top.node, W_OK), -EROFS);
	cr_expect_eq(core_open_check(core, top.node, O_WRONLY, &a), -EROFS);
	cr_expect_eq(core_open_check(core, top.node, O_RDONLY | O_TRUNC, &a), -EROFS);
	cr_expect_eq(core_open_check(core, top.node, O_RDONLY, &a), 0);
	cr_expect_eq(core_write(core, top.node, "x", 1, 0), -EROFS);
	cr_expect_eq(core_create(core, CORE_ROOT_NODE, "new", NULL, &a), -EROFS);
	cr_expect_eq(core_unlink(core, CORE_ROOT_NODE, "top.txt", NULL), -EROFS);
	cr_expect_eq(core_truncate(core, top.node, 0, &a), -EROFS);
	/* .epochfs: read-only; order/: streams; .prep: specs. */
	cr_expect_eq(core_access(core, ctl.node, W_OK), -EROFS);
	cr_expect_eq(core_create(core, ctl.node, "x", NULL, &a), -EROFS);
	cr_expect_eq(core_access(core, order.node, W_OK), 0);
	cr_assert_eq(core_create(core, order.node, "job", NULL, &st), 0);
	cr_expect_eq(ns_of(st.node), NS_ORDER);
	cr_expect_eq(core_write(core, st.node, "top.txt\n", 8, 0), 8);
	cr_expect_eq(core_open_check(core, st.node, O_WRONLY, &a), 0);
	cr_expect(listed(order.node, "job"));
	cr_expect_eq(core_truncate(core, st.node, 0, &a), 0);
	cr_expect_eq(core_unlink(core, order.node, "job", NULL), 0);
	cr_expect(!listed(order.node, "job"));
	cr_expect_eq(core_access(core, prep.node, W_OK), 0);
	cr_assert_eq(core_create(core, prep.node, "g.spec", NULL, &a), 0);
	cr_expect_eq(ns_of(a.node), NS_PREP);
	cr_expect_eq(core_create(core, prep.node, "not-a-spec", NULL, &a), -EROFS);
}

Test(nodes, reads_of_every_namespace)
{
	struct core_attr ctl, s, top;
	static char buf[65536];
	struct sync_wait w = SYNC_WAIT_INIT(buf);

	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, ".epochfs", &ctl), 0);
	cr_assert_eq(core_lookup(core, ctl.node, "stats.json", &s), 0);
	core_read(core, s.node, 0, sizeof(buf), sync_wait_done, &w);
	ssize_t n = sync_wait(&w);
	cr_assert_gt(n, 0);
	cr_expect_eq(buf[0], '{');
	cr_assert_eq(core_lookup(core, CORE_ROOT_NODE, "top.txt", &top), 0);
	struct sync_wait w2 = SYNC_WAIT_INIT(buf);
	core_read(core, top.node, 0, 100, sync_wait_done, &w2);
	cr_expect_eq(sync_wait(&w2), 3);
	cr_expect(!memcmp(buf, "top", 3));
	char link[16];
	cr_expect_eq(core_readlink(core, ctl.node, link, sizeof(link)), -EINVAL);
	core_forget(core, s.node, 1);       /* the snapshot goes */
	struct core_attr gone;
	cr_expect_eq(core_getattr(core, s.node, &gone), -ENOENT);
}
