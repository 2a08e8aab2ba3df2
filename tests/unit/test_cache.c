/* Unit tests of the MinIO cache: budget, no eviction, chunks, coalescing,
 * checksums, staleness. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "store/cache.h"

static const struct index_version V1 = { 1, 300, 10, 10 }, V2 = { 1, 300, 20, 20 };

static struct cache *mk(uint64_t cap, int verify)
{
	struct cache_opts o = { .capacity = cap, .chunk = 4096, .max_items = 1000, .verify = verify };
	struct cache *c;

	cr_assert_eq(cache_new(&o, &c), 0);
	return c;
}

/* Admits (id, 0) with LEN bytes of value id, as a loader would. */
static enum cache_result load(struct cache *c, uint32_t id, const struct index_version *v, size_t len)
{
	struct cache_ref ref;
	struct cache_waiter w = { 0 };
	enum cache_result r = cache_get(c, id, 0, v, len, &w, &ref);

	if (r == CACHE_LOAD) {
		memset(ref.data, (int)id, len);
		cache_loaded(c, &ref, 1);
	}
	cache_put(c, &ref);
	return r;
}

Test(cache, chunk_maths_at_boundaries)
{
	cr_expect_eq(cache_chunks(0, 4096), 0);
	cr_expect_eq(cache_chunks(1, 4096), 1);
	cr_expect_eq(cache_chunks(4096, 4096), 1);
	cr_expect_eq(cache_chunks(4097, 4096), 2);
	cr_expect_eq(cache_chunks(10ull << 30, 1u << 20), 10240);
	cr_expect_eq(cache_chunk_len(4097, 4096, 0), 4096);
	cr_expect_eq(cache_chunk_len(4097, 4096, 1), 1);
	cr_expect_eq(cache_chunk_len(4097, 4096, 2), 0);
	cr_expect_eq(cache_chunk_len(8192, 4096, 1), 4096);
	cr_expect_eq(cache_chunk_len(0, 4096, 0), 0);
}

Test(cache, bad_options)
{
	struct cache *c;
	struct cache_opts o = { .capacity = 0, .chunk = 1, .max_items = 1 };

	cr_expect_eq(cache_new(&o, &c), -EINVAL);
	o.capacity = 10;
	o.chunk = 0;
	cr_expect_eq(cache_new(&o, &c), -EINVAL);
}

Test(cache, admission_stops_at_budget_and_nothing_is_evicted)
{
	struct cache *c = mk(1000, 0);
	struct cache_stats s;
	struct cache_ref ref;
	struct cache_waiter w = { 0 };

	/* 300-byte items take 320 aligned: three fit in 1000, the fourth not. */
	for (uint32_t id = 1; id <= 3; id++)
		cr_expect_eq(load(c, id, &V1, 300), CACHE_LOAD);
	for (uint32_t id = 4; id <= 50; id++)
		cr_expect_eq(load(c, id, &V1, 300), CACHE_MISS, "id %u admitted past the budget", id);
	cache_get_stats(c, &s);
	cr_expect_leq(s.used, s.capacity);
	cr_expect_eq(s.items, 3);
	cr_expect_eq(s.full, 47);
	/* Epoch after epoch, the first three and only they hit. */
	for (int epoch = 0; epoch < 3; epoch++)
		for (uint32_t id = 1; id <= 50; id++) {
			enum cache_result r = cache_get(c, id, 0, &V1, 300, &w, &ref);
			if (id <= 3) {
				cr_assert_eq(r, CACHE_HIT);
				cr_expect_eq(ref.len, 300);
				cr_expect_eq(((unsigned char *)ref.data)[299], id);
			} else {
				cr_assert_eq(r, CACHE_MISS);
			}
		}
	/* The tail of the budget still fits a smaller item, exactly. */
	cr_expect_eq(load(c, 99, &V1, 1000 - 960), CACHE_LOAD);
	cache_get_stats(c, &s);
	cr_expect_eq(s.used, 1000);
	cr_expect_eq(load(c, 100, &V1, 1), CACHE_MISS);
	cache_free(c);
}

struct race {
	struct cache *c;
	int loads, waits, hits, called;
	pthread_mutex_t lock;
	pthread_barrier_t go;
	char seen[64];
};

static void race_cb(void *arg, const void *data, size_t len)
{
	struct race *r = arg;

	pthread_mutex_lock(&r->lock);
	r->called++;
	if (!data || len != 100000 || ((const char *)data)[len - 1] != 'x')
		r->seen[0] = 'B';
	pthread_mutex_unlock(&r->lock);
}

static void *racer(void *arg)
{
	struct race *r = arg;
	struct cache_waiter *w = calloc(1, sizeof(*w));
	struct cache_ref ref;

	w->fn = race_cb;
	w->arg = r;
	pthread_barrier_wait(&r->go);
	enum cache_result res = cache_get(r->c, 7, 0, &V1, 100000, w, &ref);
	pthread_mutex_lock(&r->lock);
	if (res == CACHE_LOAD) r->loads++;
	if (res == CACHE_WAIT) r->waits++;
	if (res == CACHE_HIT) r->hits++;
	pthread_mutex_unlock(&r->lock);
	if (res == CACHE_LOAD) {
		memset(ref.data, 'x', ref.len);   /* a slow source */
		for (volatile int i = 0; i < 1000000; i++)
			;
		cache_loaded(r->c, &ref, 1);
	}
	return w;                           /* freed by the test once all ran */
}

Test(cache, concurrent_misses_load_once)
{
	struct race r = { .c = mk(1 << 20, 0), .lock = PTHREAD_MUTEX_INITIALIZER };
	pthread_t t[16];
	void *w[16];

	pthread_barrier_init(&r.go, NULL, 16);
	for (int i = 0; i < 16; i++)
		pthread_create(&t[i], NULL, racer, &r);
	for (int i = 0; i < 16; i++)
		pthread_join(t[i], &w[i]);
	cr_expect_eq(r.loads, 1, "%d loads", r.loads);
	cr_expect_eq(r.loads + r.waits + r.hits, 16);
	cr_expect_eq(r.called, r.waits, "every waiter called once");
	cr_expect_neq(r.seen[0], 'B', "a waiter saw wrong bytes");
	for (int i = 0; i < 16; i++)
		free(w[i]);
	cache_free(r.c);
}

static int failed_calls;
static void fail_cb(void *arg, const void *data, size_t len)
{
	(void)arg, (void)len;
	if (!data)
		failed_calls++;
}

Test(cache, failed_load_wakes_waiters_and_can_be_retried)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref, ref2;
	struct cache_waiter w = { .fn = fail_cb };

	cr_assert_eq(cache_get(c, 3, 0, &V1, 100, &w, &ref), CACHE_LOAD);
	cr_assert_eq(cache_get(c, 3, 0, &V1, 100, &w, &ref2), CACHE_WAIT);
	cache_loaded(c, &ref, 0);
	cr_expect_eq(failed_calls, 1);
	cr_expect_eq(load(c, 3, &V1, 100), CACHE_LOAD);
	cr_expect_eq(load(c, 3, &V1, 100), CACHE_HIT);
	cache_free(c);
}

Test(cache, checksum_mismatch_is_never_served)
{
	struct cache *c = mk(1 << 20, 1);
	struct cache_stats s;

	cr_expect_eq(load(c, 5, &V1, 300), CACHE_LOAD);
	cr_expect_eq(load(c, 5, &V1, 300), CACHE_HIT);
	cr_assert_eq(cache_debug_corrupt(c, 5, 0, 123), 0);
	cr_expect_eq(cache_debug_corrupt(c, 6, 0, 0), -ENOENT);
	/* Detected and dropped; budget remains, so this very read loads a good copy. */
	cr_expect_eq(load(c, 5, &V1, 300), CACHE_LOAD);
	cache_get_stats(c, &s);
	cr_expect_eq(s.corrupt, 1);
	cr_expect_eq(s.items, 1);
	cr_expect_eq(load(c, 5, &V1, 300), CACHE_HIT);
	/* With the budget spent, a corrupt item becomes a plain miss. */
	struct cache *f = mk(300, 1);
	cr_expect_eq(load(f, 5, &V1, 300), CACHE_LOAD);
	cr_assert_eq(cache_debug_corrupt(f, 5, 0, 0), 0);
	cr_expect_eq(load(f, 5, &V1, 300), CACHE_MISS);
	cache_get_stats(f, &s);
	cr_expect_eq(s.corrupt, 1);
	cr_expect_eq(s.items, 0);
	cache_free(f);
	cache_free(c);
}

Test(cache, stale_version_is_never_served)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_stats s;
	struct cache_ref ref;
	struct cache_waiter w = { 0 };

	cr_expect_eq(load(c, 9, &V1, 300), CACHE_LOAD);
	cr_expect_eq(cache_get(c, 9, 0, &V2, 300, &w, &ref), CACHE_LOAD);
	memset(ref.data, 2, 300);
	cache_loaded(c, &ref, 1);
	cache_get_stats(c, &s);
	cr_expect_eq(s.stale, 1);
	cr_expect_eq(s.items, 1);
	cr_expect_eq(cache_get(c, 9, 0, &V2, 300, &w, &ref), CACHE_HIT);
	cr_expect_eq(((char *)ref.data)[0], 2);
	/* Asking for the old version again does not resurrect it. */
	cr_expect_neq(cache_get(c, 9, 0, &V1, 300, &w, &ref), CACHE_HIT);
	cache_free(c);
}

Test(cache, chunks_of_one_file_are_separate_items)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref;
	struct cache_waiter w = { 0 };

	cr_assert_eq(cache_get(c, 1, 0, &V1, 4096, &w, &ref), CACHE_LOAD);
	cache_loaded(c, &ref, 1);
	cr_expect_eq(cache_get(c, 1, 1, &V1, 10, &w, &ref), CACHE_LOAD);
	cache_loaded(c, &ref, 1);
	cr_expect_eq(cache_get(c, 1, 0, &V1, 4096, &w, &ref), CACHE_HIT);
	cr_expect_eq(ref.len, 4096);
	cr_expect_eq(cache_get(c, 1, 1, &V1, 10, &w, &ref), CACHE_HIT);
	cr_expect_eq(ref.len, 10);
	cache_free(c);
}

Test(cache, null_waiter_only_reports_a_load)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref, ref2;
	struct cache_stats s0, s1;

	cr_assert_eq(cache_get(c, 2, 0, &V1, 100, NULL, &ref), CACHE_LOAD);
	cache_get_stats(c, &s0);
	cr_expect_eq(cache_get(c, 2, 0, &V1, 100, NULL, &ref2), CACHE_WAIT);
	cache_get_stats(c, &s1);
	cr_expect_eq(s1.hits, s0.hits);
	memset(ref.data, 1, 100);
	cache_loaded(c, &ref, 1);
	cr_expect_eq(cache_get(c, 2, 0, &V1, 100, NULL, &ref2), CACHE_HIT);
	cache_free(c);
}

Test(cache, scrubber_finds_a_flipped_bit_without_verify)
{
	struct cache *c = mk(1 << 20, 0);       /* no --verify: only the scrubber checks */
	struct cache_stats s;
	uint32_t id = 0, chunk = 9;
	uint64_t total = 0;

	for (uint32_t i = 1; i <= 20; i++)
		cr_assert_eq(load(c, i, &V1, 300), CACHE_LOAD);
	cr_assert_eq(cache_debug_corrupt_any(c, 0, &id, &chunk), 0);
	cr_expect(id >= 1 && id <= 20 && chunk == 0);
	/* Without verify a hit does not notice... */
	cr_expect_eq(load(c, id, &V1, 300), CACHE_HIT);
	/* ...the scrubber does, a little at a time, and then it is never served. */
	for (int i = 0; i < 200; i++)
		total += cache_scrub(c, 600);   /* two items per call */
	cache_get_stats(c, &s);
	cr_expect_eq(s.corrupt, 1);
	cr_expect_eq(s.items, 19);
	cr_expect(s.scrub_passes >= 1, "passes %llu", (unsigned long long)s.scrub_passes);
	cr_expect_eq(s.scrubbed_bytes, total);
	cr_expect(total >= 20 * 300);
	cr_expect_eq(load(c, id, &V1, 300), CACHE_LOAD);   /* dropped; admitted anew */
	/* An intact cache scrubs clean. */
	cr_expect_eq(load(c, id, &V1, 300), CACHE_HIT);
	for (int i = 0; i < 50; i++)
		cache_scrub(c, 1 << 20);
	cache_get_stats(c, &s);
	cr_expect_eq(s.corrupt, 1);
	cache_free(c);
}

Test(cache, scrub_of_an_empty_cache_returns)
{
	struct cache *c = mk(1 << 20, 0);
	uint32_t id, chunk;

	cr_expect_eq(cache_scrub(c, 1 << 20), 0);
	cr_expect_eq(cache_debug_corrupt_any(c, 0, &id, &chunk), -ENOENT);
	cache_free(c);
}

Test(cache, prefault_makes_the_arena_resident_within_the_budget)
{
	struct cache *c = mk(8 << 20, 0);
	struct cache_stats s;
	int64_t r;

	r = cache_prefault(c, 1 << 20);
	if (r == -EINVAL)
		cr_skip_test("kernel has no MADV_POPULATE_WRITE");
	cr_assert_eq(r, 1 << 20);
	cr_expect_eq(cache_prefault(c, 1 << 20), 0);            /* already that far */
	cr_expect_eq(cache_prefault(c, 4096), 0);               /* never backwards */
	for (uint32_t i = 1; i <= 10; i++)                      /* 10 x 300 KB used */
		cr_assert_eq(load(c, i, &V1, 300 << 10), CACHE_LOAD);
	cache_get_stats(c, &s);
	/* A window past the fill, as the background thread asks for. */
	cr_expect_eq(cache_prefault(c, s.used + (1 << 20)), (int64_t)s.used);
	cr_expect_gt(cache_prefault(c, 64 << 20), 0);           /* clamped to the capacity */
	cache_get_stats(c, &s);
	cr_expect_eq(s.prefaulted, 8 << 20);
	cr_expect_eq(cache_prefault(c, 64 << 20), 0);
	/* Prefaulting changed no cached byte. */
	for (uint32_t i = 1; i <= 10; i++) {
		struct cache_ref ref;
		const unsigned char *d;
		cr_assert_eq(cache_get(c, i, 0, &V1, 300 << 10, NULL, &ref), CACHE_HIT);
		d = ref.data;
		cr_expect(d[0] == i && d[ref.len / 2] == i && d[ref.len - 1] == i, "item %u", i);
	}
	cache_free(c);
}

/* Regression: a target inside a page left the cursor unaligned, and the
 * next madvise failed with EINVAL, which turned prefaulting off for good. */
Test(cache, prefault_targets_need_not_be_page_aligned)
{
	struct cache *c = mk((8 << 20) + 100, 0);
	int64_t r = cache_prefault(c, 1000);

	if (r == -EINVAL)
		cr_skip_test("kernel has no MADV_POPULATE_WRITE");
	cr_expect_eq(r, 4096);
	cr_expect_eq(cache_prefault(c, 5000), 4096);
	cr_expect_eq(cache_prefault(c, 12345), 8192);            /* up to 16384 */
	cr_expect_eq(cache_prefault(c, 1ull << 40), (8 << 20) + 4096 - 16384);   /* to the last page */
	cache_free(c);
}

Test(cache, a_lowered_limit_stops_admission_and_keeps_what_is_cached)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref;
	struct cache_stats s;

	for (uint32_t id = 1; id <= 4; id++)
		cr_expect_eq(load(c, id, &V1, 1000), CACHE_LOAD);
	cache_get_stats(c, &s);
	cache_set_limit(c, s.used);
	cr_expect_eq(load(c, 5, &V1, 1000), CACHE_MISS, "admitted past a lowered limit");
	for (uint32_t id = 1; id <= 4; id++) {
		cr_expect_eq(cache_get(c, id, 0, &V1, 1000, NULL, &ref), CACHE_HIT);
		cache_put(c, &ref);
	}
	cache_set_limit(c, UINT64_MAX);     /* back to the capacity */
	cache_get_stats(c, &s);
	cr_expect_eq(s.limit, 1 << 20);
	cr_expect_eq(load(c, 5, &V1, 1000), CACHE_LOAD);
	cache_free(c);
}

Test(cache, a_reserve_keeps_room_under_the_capacity_whatever_the_limit)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref;
	uint32_t id = 1;

	/* Room for a prefetcher's staging: admissions stop 700000 bytes short
	 * of the 1 MiB budget, under a limit at the capacity. */
	cache_set_reserve(c, 700000);
	while (load(c, id, &V1, 100000) == CACHE_LOAD)
		id++;
	cr_expect_eq(id - 1, 3, "%u items of 100000 bytes admitted under a 348576-byte room", id - 1);
	for (uint32_t i = 1; i < id; i++) {
		cr_expect_eq(cache_get(c, i, 0, &V1, 100000, NULL, &ref), CACHE_HIT, "reserve dropped item %u", i);
		cache_put(c, &ref);
	}
	/* The job's order ended: the cache takes the rest of its budget. */
	cache_set_reserve(c, 0);
	cr_expect_eq(load(c, id, &V1, 100000), CACHE_LOAD);
	/* A reserve over the capacity stops every admission. */
	cache_set_reserve(c, 2 << 20);
	cr_expect_eq(load(c, id + 1, &V1, 10), CACHE_MISS);
	cache_free(c);
}

Test(cache, give_back_drops_the_newest_items_whole_and_frees_their_pages)
{
	struct cache *c = mk(4 << 20, 0);
	struct cache_ref ref;
	struct cache_stats s;

	/* 64 items of 40,000 bytes: about 2.5 MB. */
	for (uint32_t id = 1; id <= 64; id++)
		cr_assert_eq(load(c, id, &V1, 40000), CACHE_LOAD);
	cache_get_stats(c, &s);
	uint64_t before = s.used;
	uint64_t freed = cache_give_back(c, 1 << 20);
	cache_get_stats(c, &s);
	cr_expect_geq(freed, 1 << 20);
	cr_expect_lt(freed, (1 << 20) + 40064 + 4096);
	cr_expect_eq(s.used, before - freed);
	cr_expect_eq(s.limit, s.used, "admission goes on after a give-back");
	cr_expect_eq(s.given_back, freed);
	cr_expect_eq(s.items + s.given_back_items, 64);
	/* The oldest items stay and hit with their bytes; the newest are gone
	 * and are not admitted again while the limit holds. */
	uint32_t kept = (uint32_t)s.items;
	for (uint32_t id = 1; id <= 64; id++) {
		enum cache_result r = cache_get(c, id, 0, &V1, 40000, NULL, &ref);
		if (id <= kept) {
			cr_assert_eq(r, CACHE_HIT, "id %u", id);
			cr_expect_eq(((unsigned char *)ref.data)[39999], id);
			cache_put(c, &ref);
		} else {
			cr_expect_eq(r, CACHE_MISS, "id %u", id);
		}
	}
	/* Lifting the limit lets them back in, into the space given back. */
	cache_set_limit(c, UINT64_MAX);
	cr_expect_eq(load(c, 64, &V1, 40000), CACHE_LOAD);
	cr_expect_eq(cache_get(c, 64, 0, &V1, 40000, NULL, &ref), CACHE_HIT);
	cr_expect_eq(((unsigned char *)ref.data)[0], 64);
	cache_put(c, &ref);
	cache_free(c);
}

Test(cache, give_back_returns_the_empty_prefaulted_arena_before_any_item)
{
	struct cache *c = mk(4 << 20, 0);
	struct cache_ref ref;
	struct cache_stats s;

	/* 8 items of 40,000 bytes in an arena made resident to 4 MiB. */
	for (uint32_t id = 1; id <= 8; id++)
		cr_assert_eq(load(c, id, &V1, 40000), CACHE_LOAD);
	cr_assert_gt(cache_prefault(c, 4 << 20), 0);
	cache_get_stats(c, &s);
	uint64_t used = s.used, empty = (used + 4095) & ~(uint64_t)4095;
	cr_assert_eq(s.prefaulted, 4 << 20);
	/* Asked for 64 KiB: the empty pages above the fill go, all of them,
	 * and no item. */
	cr_expect_eq(cache_give_back(c, 64 << 10), (4 << 20) - empty);
	cache_get_stats(c, &s);
	cr_expect_eq(s.items, 8);
	cr_expect_eq(s.given_back_items, 0);
	cr_expect_eq(s.used, used);
	cr_expect_eq(s.prefaulted, empty);
	cr_expect_eq(s.limit, used, "nothing more is admitted meanwhile");
	for (uint32_t id = 1; id <= 8; id++) {
		cr_assert_eq(cache_get(c, id, 0, &V1, 40000, NULL, &ref), CACHE_HIT, "id %u", id);
		cr_expect_eq(((unsigned char *)ref.data)[39999], id);
		cache_put(c, &ref);
	}
	/* Nothing empty is left: the next call drops the newest items. */
	uint64_t none = cache_give_back(c, 0);
	cr_expect_eq(none, 0, "asked for nothing");
	uint64_t freed = cache_give_back(c, 64 << 10);
	cr_expect_geq(freed, 64 << 10);
	cache_get_stats(c, &s);
	cr_expect_gt(s.given_back_items, 0);
	cr_expect_lt(s.items, 8);
	cache_free(c);
}

Test(cache, an_empty_cache_gives_back_its_prefaulted_arena)
{
	struct cache *c = mk(4 << 20, 0);
	struct cache_stats s;

	cr_assert_eq(cache_prefault(c, 1 << 20), 1 << 20);
	cr_expect_eq(cache_give_back(c, 4096), 1 << 20, "the empty arena stayed resident");
	cache_get_stats(c, &s);
	cr_expect_eq(s.prefaulted, 0);
	cr_expect_eq(s.limit, 0);
	cr_expect_eq(cache_give_back(c, 4096), 0, "nothing left to give");
	cache_free(c);
}

Test(cache, give_back_waits_while_an_item_there_is_loading)
{
	struct cache *c = mk(1 << 20, 0);
	struct cache_ref ref;

	cr_assert_eq(load(c, 1, &V1, 5000), CACHE_LOAD);
	cr_assert_eq(cache_get(c, 2, 0, &V1, 5000, NULL, &ref), CACHE_LOAD);
	cr_expect_eq(cache_give_back(c, 4096), 0, "gave back an item being loaded");
	memset(ref.data, 2, 5000);
	cache_loaded(c, &ref, 1);
	cr_expect_gt(cache_give_back(c, 4096), 0);
	cache_free(c);
}

/* Readers that hit items 1-32 in a loop and check every byte of each. */
struct hammer {
	struct cache *c;
	int stop;
	uint64_t hits, bad;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct cache_ref ref;

	while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED)) {
		for (uint32_t id = 1; id <= 32; id++) {
			/* Look up only: a reader that admitted would leave the
			 * item LOADING, and the giver would find it busy. */
			if (cache_get_ex(h->c, id, 0, &V1, 20000, NULL, &ref, 0) != CACHE_HIT)
				continue;
			/* A slow copy: the giver has time to act meanwhile. */
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
			for (size_t i = 0; i < ref.len; i++)
				if (((unsigned char *)ref.data)[i] != id) {
					h->bad++;
					break;
				}
			h->hits++;
			cache_put(h->c, &ref);
		}
	}
	return NULL;
}

Test(cache, a_reader_never_sees_bytes_given_back_under_it)
{
	struct cache *c = mk(1 << 20, 0);
	struct hammer h = { .c = c };
	pthread_t th[2];

	for (uint32_t id = 1; id <= 32; id++)
		cr_assert_eq(load(c, id, &V1, 20000), CACHE_LOAD);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, hammer_main, &h);
	/* Give back and re-admit, over and over, under the readers. */
	/* For 0.3 s (at least 20 rounds): long enough that, without the
	 * read sections, the readers do see foreign bytes. */
	struct timespec t0, t1;
	uint64_t given = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int round = 0;; round++) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (round >= 20 && (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 > 300)
			break;
		given += cache_give_back(c, 100000);
		cache_set_limit(c, UINT64_MAX);
		/* Back in the other order each round: the space given back
		 * goes to other ids. */
		for (uint32_t k = 1; k <= 32; k++)
			load(c, round % 2 ? k : 33 - k, &V1, 20000);
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_expect_gt(h.hits, 0);
	cr_expect_gt(given, 0, "nothing was given back");
	cr_expect_eq(h.bad, 0, "%llu hits read bytes that were given back", (unsigned long long)h.bad);
	cache_free(c);
}
