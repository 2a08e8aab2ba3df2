/* Unit tests of the per-file backings (store/backing.h), alone and inside
 * the RAM cache: a memfd of the file's size at the file's offsets, charged
 * once, handed to the kernel read-only when whole; retired on a change;
 * dropped whole by a give-back, the kernel's copy of the descriptor
 * reading on; the arena's pages skip their ranges. No mount. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/backing.h"
#include "store/cache.h"

#define CHUNK 4096u
#define MB (1ull << 20)

static const struct index_version V1 = { 7, 3 * CHUNK + 100, 10, 10 }, V2 = { 7, 3 * CHUNK + 100, 20, 20 };

/* A budget of CAP bytes handed out from 0 up, as the cache's bump pointer. */
struct budget {
	uint64_t used, cap;
	int calls;
};

static int reserve(void *arg, uint64_t len, uint64_t *off)
{
	struct budget *b = arg;

	b->calls++;
	if (b->used + len > b->cap)
		return -ENOSPC;
	*off = b->used;
	b->used += len;
	return 0;
}

static uint32_t chunks_of(const struct index_version *v)
{
	return (uint32_t)((v->size + CHUNK - 1) / CHUNK);
}

Test(backing, a_claim_makes_one_memfd_of_the_files_size_charged_once)
{
	struct backing_set *s;
	struct backing *b, *b2;
	struct backing_place p, p2;
	struct budget bud = { .cap = 1 * MB };
	struct backing_stats st;

	cr_assert_eq(backing_set_new(16, &s), 0);
	cr_assert_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b, &p), 1);
	cr_expect_eq(p.off, 0);
	cr_expect_eq(p.span, 4 * CHUNK, "whole pages: %llu", (unsigned long long)p.span);
	cr_expect_eq(bud.used, p.span);
	/* The same file and version: the same memfd, charged no more. */
	cr_assert_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b2, &p2), 0);
	cr_expect_eq(b2, b);
	cr_expect_eq(p2.map, p.map);
	cr_expect_eq(bud.calls, 1);
	cr_expect(backing_live(s, 7, &V1));
	cr_expect_not(backing_live(s, 7, &V2));
	cr_expect_not(backing_live(s, 8, &V1));
	backing_get_stats(s, &st);
	cr_expect_eq(st.files, 1);
	cr_expect_eq(st.bytes, V1.size);
	cr_expect_eq(st.space, p.span);
	cr_expect_eq(backing_whole(s), 0);
	backing_set_free(s);
}

Test(backing, no_budget_no_backing)
{
	struct backing_set *s;
	struct backing *b;
	struct backing_place p;
	struct budget bud = { .cap = CHUNK };
	struct backing_stats st;

	cr_assert_eq(backing_set_new(16, &s), 0);
	cr_expect_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b, &p), -ENOSPC);
	cr_expect_not(backing_live(s, 7, &V1));
	backing_get_stats(s, &st);
	cr_expect_eq(st.files, 0);
	cr_expect_eq(st.space, 0);
	backing_set_free(s);
}

Test(backing, at_most_max_files_then_emfile)
{
	struct backing_set *s;
	struct backing *b;
	struct backing_place p;
	struct budget bud = { .cap = 64 * MB };

	cr_assert_eq(backing_set_new(2, &s), 0);
	cr_expect_eq(backing_claim(s, 1, &V1, CHUNK, reserve, &bud, &b, &p), 1);
	cr_expect_eq(backing_claim(s, 2, &V1, CHUNK, reserve, &bud, &b, &p), 1);
	cr_expect_eq(backing_claim(s, 3, &V1, CHUNK, reserve, &bud, &b, &p), -EMFILE);
	backing_set_free(s);
}

Test(backing, the_kernels_descriptor_comes_only_when_whole_and_is_read_only)
{
	struct backing_set *s;
	struct backing *b;
	struct backing_place p;
	struct budget bud = { .cap = 1 * MB };
	struct stat sb;
	char buf[64];

	cr_assert_eq(backing_set_new(16, &s), 0);
	cr_assert_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b, &p), 1);
	memset(p.map, 'x', V1.size);
	for (uint32_t i = 0; i + 1 < chunks_of(&V1); i++) {
		backing_count(b, 1);
		cr_expect_eq(backing_open_fd(s, 7, &V1), -ENOENT, "whole after %u of %u items", i + 1,
			     chunks_of(&V1));
	}
	backing_count(b, 1);
	cr_expect_eq(backing_whole(s), 1);
	cr_expect_eq(backing_open_fd(s, 7, &V2), -ENOENT);
	int fd = backing_open_fd(s, 7, &V1);
	cr_assert_geq(fd, 0);
	cr_expect_eq(fstat(fd, &sb), 0);
	cr_expect_eq((uint64_t)sb.st_size, V1.size, "byte 0 is the file's byte 0, and it ends where it does");
	cr_expect_eq(pread(fd, buf, sizeof(buf), (off_t)V1.size - 10), 10);
	cr_expect_eq(buf[0], 'x');
	cr_expect_eq(write(fd, "y", 1), -1, "the kernel's descriptor cannot write into the cache");
	cr_expect_eq(ftruncate(fd, 0), -1);
	/* One item leaves ready (a give-back would): not whole any more. */
	backing_count(b, -1);
	cr_expect_eq(backing_open_fd(s, 7, &V1), -ENOENT);
	/* The descriptor handed out reads on after the set is gone. */
	backing_set_free(s);
	cr_expect_eq(pread(fd, buf, 1, 0), 1);
	cr_expect_eq(buf[0], 'x');
	close(fd);
}

Test(backing, a_newer_version_retires_the_old_and_an_older_one_is_refused)
{
	struct backing_set *s;
	struct backing *b1, *b2, *b;
	struct backing_place p1, p2, p;
	struct budget bud = { .cap = 1 * MB };
	struct backing_stats st;

	cr_assert_eq(backing_set_new(16, &s), 0);
	cr_assert_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b1, &p1), 1);
	cr_assert_eq(backing_claim(s, 7, &V2, CHUNK, reserve, &bud, &b2, &p2), 1);
	cr_expect_neq(b1, b2);
	cr_expect(backing_retired(b1));
	cr_expect_not(backing_retired(b2));
	cr_expect_gt(p2.off, p1.off, "a new range: the old one stays charged until a cut");
	cr_expect_eq(backing_claim(s, 7, &V1, CHUNK, reserve, &bud, &b, &p), -ESTALE);
	backing_get_stats(s, &st);
	cr_expect_eq(st.files, 1);
	cr_expect_eq(st.retired, 1);
	cr_expect_eq(st.space, p1.span + p2.span);
	/* Reaping: only what was retired when it began; put back, then freed. */
	cr_expect_eq(backing_reap_begin(s), 1);
	cr_expect(backing_reaping(b1));
	cr_expect_eq(backing_reap_end(s, 0), 0);
	cr_expect_not(backing_reaping(b1));
	cr_expect_eq(backing_reap_begin(s), 1);
	cr_expect_eq(backing_reap_end(s, 1), 1);
	cr_expect(backing_retired(b1), "freed counts as retired");
	cr_expect_eq(backing_reap_begin(s), 0);
	backing_set_free(s);
}

Test(backing, a_cut_marks_what_reaches_past_it_and_frees_it_whole)
{
	struct backing_set *s;
	struct backing *b1, *b2;
	struct backing_place p1, p2;
	struct budget bud = { .cap = 1 * MB };
	uint64_t low, start, end;

	cr_assert_eq(backing_set_new(16, &s), 0);
	cr_assert_eq(backing_claim(s, 1, &V1, CHUNK, reserve, &bud, &b1, &p1), 1);
	cr_assert_eq(backing_claim(s, 2, &V1, CHUNK, reserve, &bud, &b2, &p2), 1);
	/* The arena's page work skips both ranges, lowest first. */
	cr_expect_eq(backing_range(s, 0, bud.used, &start, &end), 1);
	cr_expect_eq(start, p1.off);
	cr_expect_eq(end, p1.off + p1.span);
	cr_expect_eq(backing_range(s, end, bud.used, &start, &end), 1);
	cr_expect_eq(start, p2.off);
	cr_expect_eq(backing_range(s, end, UINT64_MAX, &start, &end), 0);
	/* A cut in the middle of the newest: it goes whole, the other stays. */
	low = p2.off + 10;
	cr_expect_eq(backing_mark_past(s, low, &low), 1);
	cr_expect_eq(low, p2.off);
	cr_expect(backing_dying(b2));
	cr_expect_not(backing_live(s, 2, &V1), "a dying backing takes no item");
	backing_unmark(s);
	cr_expect(backing_live(s, 2, &V1), "back when the give-back gives up");
	low = p2.off + 10;
	backing_mark_past(s, low, &low);
	cr_expect_eq(backing_free_dying(s, low), V1.size);
	cr_expect_not(backing_live(s, 2, &V1));
	cr_expect(backing_live(s, 1, &V1));
	cr_expect_eq(backing_range(s, p2.off, UINT64_MAX, &start, &end), 0);
	backing_set_free(s);
}

/* ---- inside the cache ---- */

static struct cache *mk(uint64_t cap, int arena_fd)
{
	struct cache_opts o = { .capacity = cap, .chunk = CHUNK, .max_items = 1000,
				.arena_file = arena_fd >= 0, .arena_fd = arena_fd };
	struct cache *c;

	cr_assert_eq(cache_new(&o, &c), 0);
	cache_set_backing(c, 2 * CHUNK);
	return c;
}

/* Loads every item of file ID at V, byte i of the file being (i * 7 + ID). */
static void load_file(struct cache *c, uint32_t id, const struct index_version *v, enum cache_result want)
{
	for (uint32_t k = 0; k < chunks_of(v); k++) {
		struct cache_ref ref;
		size_t len = cache_chunk_len(v->size, CHUNK, k);
		enum cache_result r = cache_get(c, id, k, v, len, NULL, &ref);
		cr_assert_eq(r, want, "item %u: %d", k, r);
		if (r == CACHE_LOAD) {
			for (size_t i = 0; i < len; i++)
				((unsigned char *)ref.data)[i] = (unsigned char)(((uint64_t)k * CHUNK + i) * 7 + id);
			cache_loaded(c, &ref, 1);
		}
		cache_put(c, &ref);
	}
}

static int file_ok(int fd, uint32_t id, uint64_t size)
{
	unsigned char buf[CHUNK];

	for (uint64_t at = 0; at < size; at += CHUNK) {
		ssize_t n = pread(fd, buf, CHUNK, (off_t)at);
		if (n != (ssize_t)(size - at < CHUNK ? size - at : CHUNK))
			return 0;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != (unsigned char)((at + (uint64_t)i) * 7 + id))
				return 0;
	}
	return 1;
}

Test(backing, a_large_file_cached_whole_is_one_memfd_at_its_own_offsets)
{
	struct cache *c = mk(1 * MB, -1);
	struct cache_stats s;
	static const struct index_version small = { 9, CHUNK, 1, 1 };

	load_file(c, 9, &small, CACHE_LOAD);       /* under the size: the arena */
	cr_expect_eq(cache_backing_fd(c, 9, &small), -ENOENT);
	cr_expect_eq(cache_backing_fd(c, 7, &V1), -ENOENT);
	load_file(c, 7, &V1, CACHE_LOAD);
	load_file(c, 7, &V1, CACHE_HIT);
	cache_get_stats(c, &s);
	cr_expect_eq(s.backed_files, 1);
	cr_expect_eq(cache_backed_whole(c), 1);
	cr_expect_eq(s.items, 1 + chunks_of(&V1));
	cr_expect_eq(s.used, 4 * CHUNK + CHUNK, "the whole file is charged, from a page boundary");
	int fd = cache_backing_fd(c, 7, &V1);
	cr_assert_geq(fd, 0);
	cr_expect(file_ok(fd, 7, V1.size), "the memfd holds the file as the items do");
	close(fd);
	/* The scrubber checks backed items like the others. */
	cr_expect_eq(cache_scrub(c, UINT64_MAX), CHUNK + V1.size);
	cache_get_stats(c, &s);
	cr_expect_eq(s.corrupt, 0);
	cache_free(c);
}

Test(backing, a_file_the_budget_cannot_hold_whole_goes_to_the_arena_in_pieces)
{
	struct cache *c = mk(2 * CHUNK + 4000, -1);
	struct cache_stats s;
	static const struct index_version small = { 9, 100, 1, 1 };

	/* The arena's first 128 bytes: the file's range would start on the
	 * next page, and its end would pass the budget. */
	load_file(c, 9, &small, CACHE_LOAD);
	load_file(c, 7, &(struct index_version){ 7, 2 * CHUNK, 1, 1 }, CACHE_LOAD);
	cache_get_stats(c, &s);
	cr_expect_eq(s.backed_files, 0, "no room for the whole file from a page boundary");
	cr_expect_eq(s.items, 3);
	cache_free(c);
}

Test(backing, a_changed_file_gets_a_new_memfd_and_the_reaper_frees_the_old)
{
	struct cache *c = mk(1 * MB, -1);
	struct cache_stats s;
	struct cache_ref ref;

	load_file(c, 7, &V1, CACHE_LOAD);
	int old = cache_backing_fd(c, 7, &V1);
	cr_assert_geq(old, 0);
	/* The new version's first item: the old item is stale, the old
	 * backing retired, a new one made. */
	cr_expect_eq(cache_get(c, 7, 0, &V2, CHUNK, NULL, &ref), CACHE_LOAD);
	memset(ref.data, 1, CHUNK);
	cache_loaded(c, &ref, 1);
	cache_get_stats(c, &s);
	cr_expect_eq(s.stale, 1);
	cr_expect_eq(s.backings_retired, 1);
	cr_expect_eq(s.backed_files, 1);
	cr_expect_eq(cache_backing_fd(c, 7, &V1), -ENOENT, "never the old version's bytes");
	cr_expect_eq(cache_reap(c), 1);
	cache_get_stats(c, &s);
	cr_expect_eq(s.items, 1, "the old version's other items went with it");
	/* The old version's items are not served any more. */
	cr_expect_neq(cache_get(c, 7, 1, &V1, CHUNK, NULL, &ref), CACHE_HIT);
	cache_put(c, &ref);
	/* A descriptor the kernel was given still reads the old bytes whole. */
	cr_expect(file_ok(old, 7, V1.size));
	close(old);
	cache_free(c);
}

Test(backing, a_corrupt_item_retires_its_backing)
{
	struct cache *c = mk(1 * MB, -1);
	struct cache_stats s;

	load_file(c, 7, &V1, CACHE_LOAD);
	cr_assert_eq(cache_debug_corrupt(c, 7, 1, 5), 0);
	cache_scrub(c, UINT64_MAX);
	cache_get_stats(c, &s);
	cr_expect_eq(s.corrupt, 1);
	cr_expect_eq(s.backings_retired, 1);
	cr_expect_eq(cache_backing_fd(c, 7, &V1), -ENOENT);
	cache_reap(c);
	/* Read again: a fresh backing, whole again. */
	load_file(c, 7, &V1, CACHE_LOAD);
	int fd = cache_backing_fd(c, 7, &V1);
	cr_assert_geq(fd, 0);
	cr_expect(file_ok(fd, 7, V1.size));
	close(fd);
	cache_free(c);
}

Test(backing, give_back_drops_the_newest_large_file_whole)
{
	struct cache *c = mk(1 * MB, -1);
	struct cache_stats s;
	static const struct index_version a = { 1, 6 * CHUNK, 1, 1 }, b = { 2, 6 * CHUNK, 1, 1 };

	load_file(c, 1, &a, CACHE_LOAD);
	load_file(c, 2, &b, CACHE_LOAD);
	int kept = cache_backing_fd(c, 2, &b);
	cr_assert_geq(kept, 0);
	cache_get_stats(c, &s);
	uint64_t used = s.used;
	/* A little: the newest file goes, whole. */
	cr_expect_geq(cache_give_back(c, 100), 6 * CHUNK);
	cache_get_stats(c, &s);
	cr_expect_eq(s.backed_files, 1);
	cr_expect_eq(s.given_back_items, 6);
	cr_expect_leq(s.used, used - 6 * CHUNK);
	cr_expect_eq(cache_backing_fd(c, 2, &b), -ENOENT);
	cr_expect_geq(cache_backing_fd(c, 1, &a), 0);
	/* A reader the kernel serves from the dropped memfd reads on. */
	cr_expect(file_ok(kept, 2, b.size));
	close(kept);
	cache_free(c);
}

Test(backing, the_arena_file_allocates_no_page_under_a_backing)
{
	int fd = memfd_create("arena", 0);
	struct stat sb;

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 8 * MB), 0);
	struct cache *c = mk(8 * MB, fd);
	static const struct index_version big = { 1, 4 * MB, 1, 1 }, small = { 2, CHUNK, 1, 1 };

	load_file(c, 2, &small, CACHE_LOAD);
	load_file(c, 1, &big, CACHE_LOAD);
	load_file(c, 3, &(struct index_version){ 3, CHUNK, 1, 1 }, CACHE_LOAD);
	/* Prefault the rest: past the backing's range, around it. */
	cr_expect_geq(cache_prefault(c, 8 * MB), 0);
	cr_expect_eq(fstat(fd, &sb), 0);
	cr_expect_leq((uint64_t)sb.st_blocks * 512, 8 * MB - 4 * MB + 3 * 4096,
		      "the arena file holds %llu bytes: its pages under the large file's range too",
		      (unsigned long long)sb.st_blocks * 512);
	cr_expect_geq((uint64_t)sb.st_blocks * 512, 8 * MB - 4 * MB - 3 * 4096);
	cache_free(c);
	close(fd);
}

/* Readers copy hit items of large files slowly, checking every byte,
 * while the main thread gives files back (their memfds unmapped) and
 * reads them in again; then changes one (retired, reaped). A reader left
 * inside an unmapped memfd would crash; one inside a reused one would see
 * foreign bytes. */
struct hammer {
	struct cache *c;
	int stop;
	uint64_t hits, bad;
};

#define NFILES 8
static const struct index_version HV = { 1, 5 * CHUNK, 1, 1 };

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	unsigned char copy[CHUNK];

	for (unsigned n = 0; !__atomic_load_n(&h->stop, __ATOMIC_RELAXED); n++) {
		uint32_t id = 1 + n % NFILES, k = (n / NFILES) % 5;
		struct cache_ref ref;
		if (cache_get_ex(h->c, id, k, &HV, CHUNK, NULL, &ref, 0) != CACHE_HIT)
			continue;
		for (size_t i = 0; i < CHUNK; i += 512) {
			memcpy(copy + i, (char *)ref.data + i, 512);
			if (i % 2048 == 0)
				sched_yield();
		}
		cache_put(h->c, &ref);
		h->hits++;
		for (size_t i = 0; i < CHUNK; i++)
			if (copy[i] != (unsigned char)(((uint64_t)k * CHUNK + i) * 7 + id)) {
				h->bad++;
				break;
			}
	}
	return NULL;
}

Test(backing, a_reader_never_sees_a_memfd_given_back_under_it)
{
	struct cache *c = mk(1 * MB, -1);
	struct hammer h = { .c = c };
	pthread_t th[2];
	struct cache_stats s;

	for (uint32_t id = 1; id <= NFILES; id++)
		load_file(c, id, &HV, CACHE_LOAD);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, hammer_main, &h);
	struct timespec t0, t1;
	uint64_t given = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int round = 0;; round++) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (round >= 20 && (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 > 300)
			break;
		given += cache_give_back(c, 3 * 5 * CHUNK);
		cache_set_limit(c, UINT64_MAX);
		for (uint32_t id = 1; id <= NFILES; id++) {
			for (uint32_t k = 0; k < 5; k++) {
				struct cache_ref ref;
				if (cache_get(c, id, k, &HV, CHUNK, NULL, &ref) == CACHE_LOAD) {
					for (size_t i = 0; i < CHUNK; i++)
						((unsigned char *)ref.data)[i] =
							(unsigned char)(((uint64_t)k * CHUNK + i) * 7 + id);
					cache_loaded(c, &ref, 1);
				}
				cache_put(c, &ref);
			}
		}
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cache_get_stats(c, &s);
	cr_expect_gt(h.hits, 0);
	cr_expect_gt(given, 0, "nothing was given back");
	cr_expect_gt(s.backings_made, NFILES, "the files were not read in again");
	cr_expect_eq(h.bad, 0, "%llu hits read bytes that were given back", (unsigned long long)h.bad);
	cache_free(c);
}
