/* Unit tests of rendezvous ownership: agreement, balance, minimal movement. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

#include "cluster/owner.h"

static const char *const three[] = { "10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070" };

Test(owner, same_answer_from_every_copy)
{
	struct owner *a, *b;
	char key[64];

	cr_assert_eq(owner_new(three, 3, &a), 0);
	cr_assert_eq(owner_new(three, 3, &b), 0);
	for (int i = 0; i < 2000; i++) {
		int n = snprintf(key, sizeof(key), "train/class_%03d/img_%06d.jpg", i % 17, i);
		cr_assert_eq(owner_of(a, key, (size_t)n, 0), owner_of(b, key, (size_t)n, 0));
		cr_assert_lt(owner_of(a, key, (size_t)n, (uint32_t)i), 3u);
	}
	cr_expect_eq(owner_digest(a, 262144), owner_digest(b, 262144));
	cr_expect_neq(owner_digest(a, 262144), owner_digest(a, 131072), "chunk size is part of the digest");
	owner_free(a);
	owner_free(b);
}

Test(owner, balanced_and_chunks_spread)
{
	struct owner *o;
	unsigned count[3] = { 0 }, chunk_owners[3] = { 0 };
	char key[64];
	const int n = 30000;

	cr_assert_eq(owner_new(three, 3, &o), 0);
	for (int i = 0; i < n; i++) {
		int len = snprintf(key, sizeof(key), "img_%06d.jpg", i);
		count[owner_of(o, key, (size_t)len, 0)]++;
	}
	for (int i = 0; i < 3; i++)
		cr_expect(count[i] > n / 3 * 0.96 && count[i] < n / 3 * 1.04, "node %d owns %u of %d", i,
			  count[i], n);
	for (uint32_t c = 0; c < 300; c++)  /* one large file: its chunks spread too */
		chunk_owners[owner_of(o, "shard-0000.tar", 14, c)]++;
	for (int i = 0; i < 3; i++)
		cr_expect(chunk_owners[i] > 70, "node %d owns %u of 300 chunks", i, chunk_owners[i]);
	owner_free(o);
}

Test(owner, a_node_leaving_moves_only_its_items)
{
	static const char *const two[] = { "10.0.0.1:7070", "10.0.0.3:7070" };
	struct owner *before, *after;
	char key[64];
	int moved = 0;

	cr_assert_eq(owner_new(three, 3, &before), 0);
	cr_assert_eq(owner_new(two, 2, &after), 0);
	for (int i = 0; i < 20000; i++) {
		int len = snprintf(key, sizeof(key), "f%d", i);
		unsigned b = owner_of(before, key, (size_t)len, 0), a = owner_of(after, key, (size_t)len, 0);
		const char *was = three[b], *now = two[a];
		if (b != 1)
			cr_assert_str_eq(was, now, "item %s moved from %s though that node stayed", key, was);
		else
			moved++;
	}
	cr_expect(moved > 6000 && moved < 7400, "%d items moved", moved);
	owner_free(before);
	owner_free(after);
}

Test(owner, refuses_bad_tables)
{
	static const char *const dup[] = { "a:1", "b:1", "a:1" };
	struct owner *o;

	cr_expect_eq(owner_new(dup, 3, &o), -EINVAL);
	cr_expect_eq(owner_new(dup, 0, &o), -EINVAL);
	cr_assert_eq(owner_new(dup, 1, &o), 0);
	cr_expect_eq(owner_of(o, "x", 1, 5), 0u);
	owner_free(o);
}

/* Each node of an item's ranking is the owner of the table without the
 * nodes ranked before it: spilling goes where the item would move if its
 * owner (and the next ones) left. The ranking's head is owner_of(). */
Test(owner, ranking_is_the_owner_after_departures)
{
	static const char *const four[] = { "a:1", "b:1", "c:1", "d:1" };
	struct owner *all;
	char key[32];

	cr_assert_eq(owner_new(four, 4, &all), 0);
	for (int i = 0; i < 1000; i++) {
		int len = snprintf(key, sizeof(key), "k%d", i);
		unsigned rank[4], seen = 0;
		owner_ranking(all, key, (size_t)len, 7, rank);
		cr_assert_eq(rank[0], owner_of(all, key, (size_t)len, 7));
		for (int j = 0; j < 4; j++)
			seen |= 1u << rank[j];
		cr_assert_eq(seen, 15u, "not a permutation");
		for (int j = 1; j < 4; j++) {
			const char *rest[4];
			unsigned n = 0;
			for (unsigned x = 0; x < 4; x++) {
				int gone = 0;
				for (int g = 0; g < j; g++)
					gone |= rank[g] == x;
				if (!gone)
					rest[n++] = four[x];
			}
			struct owner *without;
			cr_assert_eq(owner_new(rest, n, &without), 0);
			cr_assert_str_eq(rest[owner_of(without, key, (size_t)len, 7)], four[rank[j]]);
			owner_free(without);
		}
	}
	owner_free(all);
}

/* owner_top() is the head of owner_ranking(), for every K, however many
 * nodes (ties included: two nodes of one name cannot be, so equal weights
 * only come from the mix; the order of the rest is still compared). */
Test(owner, top_k_is_the_head_of_the_ranking)
{
	const char *ids[9];
	char names[9][16];
	struct owner *o;
	char key[32];

	for (int i = 0; i < 9; i++) {
		snprintf(names[i], sizeof(names[i]), "node%d:7070", i);
		ids[i] = names[i];
	}
	for (unsigned n = 1; n <= 9; n++) {
		cr_assert_eq(owner_new(ids, n, &o), 0);
		for (int i = 0; i < 500; i++) {
			int len = snprintf(key, sizeof(key), "train/c%d/%d.jpg", i % 7, i);
			unsigned rank[9];
			uint16_t top[9];
			owner_ranking(o, key, (size_t)len, (uint32_t)i % 3, rank);
			for (unsigned k = 1; k <= n; k++) {
				owner_top(o, key, (size_t)len, (uint32_t)i % 3, k, top);
				for (unsigned j = 0; j < k; j++)
					cr_assert_eq(top[j], rank[j], "n=%u k=%u key=%s: place %u", n, k, key, j);
			}
		}
		owner_free(o);
	}
}
