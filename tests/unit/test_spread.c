/* Unit tests of the cache's spread through large files (fs/store/spread.h):
 * the share, chunks admitted evenly through every file (within one of the
 * share over any run), the files' stripes starting at different chunks,
 * small files untouched, and the dataset's total near the cache's size. */
#include <criterion/criterion.h>

#include "store/spread.h"

TestSuite(spread, .timeout = 10);

Test(spread, share)
{
	cr_assert_eq(spread_share(100, 100), 0, "a cache that holds it all spreads nothing");
	cr_assert_eq(spread_share(200, 100), 0);
	cr_assert_eq(spread_share(100, 0), 0);
	cr_assert_eq(spread_share(50, 100), SPREAD_ONE / 2);
	cr_assert_eq(spread_share(1, 1ull << 40), 1, "never 0 (which means no spreading)");
	cr_assert_eq(spread_share(0, 100), 1);
	uint64_t s = spread_share(3ull << 40, 4ull << 40);      /* no overflow at terabytes */
	cr_assert_eq(s, SPREAD_ONE / 4 * 3);
}

Test(spread, off_and_small_files_admit_everything)
{
	for (uint32_t k = 0; k < 10; k++) {
		cr_assert(spread_admits(0, 7, k, 10), "share 0: no spreading");
		cr_assert(spread_admits(SPREAD_ONE, 7, k, 10));
	}
	for (uint32_t id = 1; id < 100; id++)
		for (uint32_t k = 0; k < SPREAD_MIN_CHUNKS - 1; k++)
			cr_assert(spread_admits(1, id, k, SPREAD_MIN_CHUNKS - 1), "small files come whole");
}

/* Over every run of chunks of a file, the admitted ones are within one of
 * the share times the run's length. */
static void check_even(uint64_t share, uint32_t id, uint32_t n)
{
	double f = (double)share / (double)SPREAD_ONE;

	for (uint32_t a = 0; a < n; a++) {
		uint32_t got = 0;
		for (uint32_t b = a; b < n; b++) {
			got += (uint32_t)spread_admits(share, id, b, n);
			double want = f * (double)(b - a + 1);
			cr_assert(got + 1.0 >= want && got <= want + 1.0,
				  "file %u, chunks %u..%u: %u admitted, share %.3f", id, a, b, got, f);
		}
	}
}

Test(spread, even_through_each_file)
{
	const uint64_t shares[] = { SPREAD_ONE / 2, SPREAD_ONE / 3, SPREAD_ONE / 10 * 9, SPREAD_ONE / 50, 12345678 };

	for (unsigned i = 0; i < sizeof(shares) / sizeof(shares[0]); i++)
		for (uint32_t id = 1; id <= 20; id++)
			check_even(shares[i], id, 240);
	/* A half: every other chunk, exactly. */
	for (uint32_t id = 1; id <= 50; id++)
		for (uint32_t k = 0; k + 1 < 240; k++)
			cr_assert_neq(spread_admits(SPREAD_ONE / 2, id, k, 240),
				      spread_admits(SPREAD_ONE / 2, id, k + 1, 240), "file %u chunk %u", id, k);
}

Test(spread, files_start_at_different_chunks)
{
	/* With a tenth, which of the first ten chunks a file caches depends on
	 * its id: 200 files use at least 8 of the 10 places. */
	unsigned seen[10] = { 0 }, places = 0;

	for (uint32_t id = 1; id <= 200; id++)
		for (uint32_t k = 0; k < 10; k++)
			if (spread_admits(SPREAD_ONE / 10, id, k, 100)) {
				seen[k]++;
				break;
			}
	for (unsigned k = 0; k < 10; k++)
		places += seen[k] > 0;
	cr_assert_geq(places, 8, "stripes start at %u places of 10", places);
}

Test(spread, total_near_the_cache)
{
	/* 97 files of 37..336 chunks: what is admitted is the share of the
	 * total, within a chunk a file. */
	uint64_t share = SPREAD_ONE / 100 * 37, total = 0, admitted = 0;
	uint32_t files = 0;

	for (uint32_t id = 3; id < 100; id++, files++) {
		uint32_t n = 37 + id * 3;
		total += n;
		for (uint32_t k = 0; k < n; k++)
			admitted += (uint64_t)spread_admits(share, id, k, n);
	}
	double want = 0.37 * (double)total;
	cr_assert((double)admitted <= want + files && (double)admitted + files >= want,
		  "%llu admitted of %llu, want %.0f", (unsigned long long)admitted, (unsigned long long)total, want);
}
