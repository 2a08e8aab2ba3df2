/* Unit tests of manifests: build, load, check, refusal of bad files, bind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "helpers.h"
#include "store/index.h"
#include "store/manifest.h"

#define CH 4096u

static char *dir;                   /* SOURCE */
static char *out;                   /* where manifests go (outside SOURCE) */
static char mpath[4200];
static struct manifest *m;
static struct index *ix;
static int rootfd = -1;

/* Writes LEN bytes of a pattern seeded by SEED to DIR/REL. */
static void put_file(const char *rel, size_t len, unsigned seed)
{
	char p[4200];
	unsigned char *b = malloc(len ? len : 1);
	uint32_t x = seed * 2654435761u + 1;
	FILE *f;

	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		b[i] = (unsigned char)(x >> 16);
	}
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	cr_assert(f, "cannot write %s", p);
	cr_assert_eq(fwrite(b, 1, len, f), len);
	fclose(f);
	free(b);
}

/* The bytes of DIR/REL, length in *LEN. */
static unsigned char *slurp(const char *root, const char *rel, size_t *len)
{
	char p[4200];
	struct stat st;
	unsigned char *b;
	FILE *f;

	snprintf(p, sizeof(p), "%s%s%s", root, rel[0] ? "/" : "", rel);
	cr_assert_eq(stat(p, &st), 0, "%s", p);
	b = malloc(st.st_size ? (size_t)st.st_size : 1);
	f = fopen(p, "r");
	cr_assert(f);
	cr_assert_eq(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return b;
}

static void spew(const char *p, const void *b, size_t len)
{
	FILE *f = fopen(p, "w");

	cr_assert(f);
	cr_assert_eq(fwrite(b, 1, len, f), len);
	fclose(f);
}

static void setup(void)
{
	cr_assert_geq(sodium_init(), 0);
	dir = th_tmpdir();
	out = th_tmpdir();
	th_mkdir(dir, "d1");
	th_mkdir(dir, "d1/d2");
	put_file("d1/d2/deep", CH * 3 + CH / 2, 1);  /* 3.5 chunks */
	put_file("e", 0, 2);
	put_file("one", CH, 3);
	put_file("plus", CH + 1, 4);
	char p[4200];
	snprintf(p, sizeof(p), "%s/lnk", dir);
	cr_assert_eq(symlink("one", p), 0);
	snprintf(mpath, sizeof(mpath), "%s/t.manifest", out);
	rootfd = open(dir, O_RDONLY | O_DIRECTORY);
}

static void teardown(void)
{
	manifest_free(m);
	m = NULL;
	index_free(ix);
	ix = NULL;
	close(rootfd);
	th_rmrf(dir);
	th_rmrf(out);
	free(dir);
	free(out);
}

TestSuite(manifest, .init = setup, .fini = teardown, .timeout = 60);

/* Builds DIR's manifest with chunk CHUNK, saves it to mpath, loads it into m. */
static void build_save_load(uint32_t chunk)
{
	struct manifest_build_opts o = { .chunk = chunk, .threads = 3 };
	struct manifest_build_stats st;
	struct manifest *b;
	char err[512];

	cr_assert_eq(manifest_build(dir, &o, &st, &b, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(manifest_save(b, mpath, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(st.files, manifest_files(b));
	manifest_free(b);
	cr_assert_eq(manifest_load(mpath, &m, err, sizeof(err)), 0, "%s", err);
}

static const char *const names[] = { "d1/d2/deep", "e", "one", "plus" };
static const uint64_t sizes[] = { CH * 3 + CH / 2, 0, CH, CH + 1 };

Test(manifest, build_lists_regular_files_sorted_with_sizes)
{
	uint64_t size;

	build_save_load(CH);
	cr_expect_eq(manifest_chunk(m), CH);
	cr_assert_eq(manifest_files(m), 4);
	cr_expect_eq(manifest_bytes(m), sizes[0] + sizes[1] + sizes[2] + sizes[3]);
	for (int i = 0; i < 4; i++) {
		const char *p;
		size_t len;

		cr_assert_eq(manifest_record(m, (uint64_t)i, &p, &len, &size, NULL), 0);
		cr_expect(len == strlen(names[i]) && !memcmp(p, names[i], len), "record %d: %.*s", i,
			  (int)len, p);
		cr_expect_eq(size, sizes[i]);
		cr_expect_eq(manifest_find(m, names[i], strlen(names[i]), &size), i);
		cr_expect_eq(size, sizes[i]);
	}
	cr_expect_eq(manifest_record(m, 4, NULL, NULL, NULL, NULL), -ENOENT);
	cr_expect_eq(manifest_find(m, "lnk", 3, NULL), -ENOENT);      /* symlinks: not listed */
	cr_expect_eq(manifest_find(m, "d1", 2, NULL), -ENOENT);
	cr_expect_eq(manifest_find(m, "on", 2, NULL), -ENOENT);
	cr_expect_eq(manifest_find(m, "onex", 4, NULL), -ENOENT);
	cr_expect_eq(manifest_find(m, "one/", 4, NULL), -ENOENT);
}

Test(manifest, hashes_are_blake2b_128_of_each_chunk)
{
	build_save_load(CH);
	for (int i = 0; i < 4; i++) {
		size_t len;
		unsigned char *data = slurp(dir, names[i], &len);
		const uint8_t *h;
		uint64_t size;

		cr_assert_eq(manifest_record(m, (uint64_t)i, NULL, NULL, &size, &h), 0);
		cr_assert_eq(size, len);
		cr_expect_eq(h == NULL, len == 0);
		for (size_t c = 0; c * CH < len; c++) {
			uint8_t want[16];
			size_t n = len - c * CH < CH ? len - c * CH : CH;

			crypto_generichash(want, 16, data + c * CH, n, NULL, 0);
			cr_expect(!memcmp(want, h + 16 * c, 16), "%s chunk %zu", names[i], c);
		}
		free(data);
	}
}

Test(manifest, check_accepts_each_chunk_and_refuses_wrong_bytes)
{
	build_save_load(CH);
	for (uint32_t i = 0; i < 4; i++) {
		size_t len;
		unsigned char *data = slurp(dir, names[i], &len);
		uint32_t nch = (uint32_t)((len + CH - 1) / CH);

		for (uint32_t c = 0; c < nch; c++) {
			unsigned char *p = data + (size_t)c * CH;
			size_t n = len - (size_t)c * CH < CH ? len - (size_t)c * CH : CH;

			cr_expect_eq(manifest_check(m, i, c, p, n), 0, "%s chunk %u", names[i], c);
			p[n / 2] ^= 0x10;
			cr_expect_eq(manifest_check(m, i, c, p, n), -EBADMSG, "%s chunk %u", names[i], c);
			p[n / 2] ^= 0x10;
			cr_expect_eq(manifest_check(m, i, c, p, n - 1), -EINVAL);
			if (c + 1 < nch)
				cr_expect_eq(manifest_check(m, i, c, p, n + 1), -EINVAL);
		}
		cr_expect_eq(manifest_check(m, i, nch, data, 0), -ENOENT, "%s", names[i]);
		cr_expect_eq(manifest_check(m, i, nch, data, len ? 1 : 0), -ENOENT);
		free(data);
	}
	cr_expect_eq(manifest_check(m, 4, 0, "", 0), -ENOENT);
	cr_expect_eq(manifest_check(m, UINT32_MAX, 0, "", 0), -ENOENT);
}

/* Chunks larger than the build's 1 MiB read block, and not a multiple of
 * it: each chunk's hash is fed across blocks. */
Test(manifest, chunks_spanning_read_blocks)
{
	uint32_t chunk = 4096u * 300;       /* 1.17 MiB */
	size_t len;

	put_file("big", (size_t)chunk * 2 + 12345, 9);
	build_save_load(chunk);
	int rec = manifest_find(m, "big", 3, NULL);
	cr_assert_geq(rec, 0);
	unsigned char *data = slurp(dir, "big", &len);
	cr_expect_eq(manifest_check(m, (uint32_t)rec, 0, data, chunk), 0);
	cr_expect_eq(manifest_check(m, (uint32_t)rec, 1, data + chunk, chunk), 0);
	cr_expect_eq(manifest_check(m, (uint32_t)rec, 2, data + 2 * (size_t)chunk, 12345), 0);
	cr_expect_eq(manifest_check(m, (uint32_t)rec, 1, data, chunk), -EBADMSG);
	free(data);
}

/* No regular file (a symlink only: an empty root directory trips a
 * qsort(NULL, 0) in index.c's layout under UBSan). */
Test(manifest, a_tree_without_files_has_an_empty_manifest)
{
	char *e = th_tmpdir(), err[512], p[4200];
	struct manifest *b;

	snprintf(p, sizeof(p), "%s/lnk", e);
	cr_assert_eq(symlink("/etc/passwd", p), 0);
	cr_assert_eq(manifest_build(e, NULL, NULL, &b, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(manifest_files(b), 0);
	cr_expect_eq(manifest_find(b, "x", 1, NULL), -ENOENT);
	cr_assert_eq(manifest_save(b, mpath, err, sizeof(err)), 0, "%s", err);
	manifest_free(b);
	cr_assert_eq(manifest_load(mpath, &m, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(manifest_files(m), 0);
	th_rmrf(e);
	free(e);
}

Test(manifest, build_refuses_bad_arguments)
{
	struct manifest_build_opts o = { .chunk = 1024 };
	struct manifest *b = (struct manifest *)1;
	char err[512], p[4200];

	cr_expect_eq(manifest_build(dir, &o, NULL, &b, err, sizeof(err)), -EINVAL);
	cr_expect_null(b);
	cr_expect(strstr(err, "chunk"), "%s", err);
	snprintf(p, sizeof(p), "%s/one", dir);
	cr_expect_eq(manifest_build(p, NULL, NULL, &b, err, sizeof(err)), -ENOTDIR);
	cr_expect(strstr(err, "not a directory"), "%s", err);
	snprintf(p, sizeof(p), "%s/nope", dir);
	cr_expect_eq(manifest_build(p, NULL, NULL, &b, err, sizeof(err)), -ENOENT);
}

Test(manifest, save_replaces_whole_and_leaves_no_temp)
{
	char err[512], p[4200];

	build_save_load(CH);
	manifest_free(m);
	m = NULL;
	build_save_load(CH);          /* over the first one */
	snprintf(p, sizeof(p), "%s/t.manifest.tmp.%d", out, (int)getpid());
	cr_expect_neq(access(p, F_OK), 0);
	snprintf(p, sizeof(p), "%s/no-such-dir/x.manifest", out);
	cr_expect_eq(manifest_save(m, p, err, sizeof(err)), -ENOENT);
	cr_expect(strstr(err, "no-such-dir"), "%s", err);
}

/* Loads a manifest made of BUF/LEN; returns what manifest_load did. */
static int load_bytes(const void *buf, size_t len, char *err, size_t errlen)
{
	char p[4200];
	struct manifest *x = NULL;
	int ret;

	snprintf(p, sizeof(p), "%s/bad.manifest", out);
	spew(p, buf, len);
	ret = manifest_load(p, &x, err, errlen);
	cr_expect_eq(ret == 0, x != NULL);
	manifest_free(x);
	return ret;
}

/* Rewrites the trailer, so a change is judged by the format's other rules. */
static void reseal(unsigned char *b, size_t len)
{
	crypto_generichash(b + len - 32, 32, b, len - 32, NULL, 0);
}

static void put64le(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

Test(manifest, load_refuses_any_flipped_byte)
{
	char err[512];
	size_t len;

	build_save_load(CH);
	unsigned char *b = slurp(mpath, "", &len);
	cr_assert_gt(len, 100);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), 0, "%s", err);
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			b[i] ^= (unsigned char)(1u << bit);
			int ret = load_bytes(b, len, err, sizeof(err));
			cr_expect(ret == -EBADMSG || ret == -ENOTSUP, "byte %zu bit %d: %d", i, bit, ret);
			cr_expect(!strchr(err, '\n') && strstr(err, "bad.manifest"), "%s", err);
			b[i] ^= (unsigned char)(1u << bit);
		}
	}
	/* One bit of a hash: the checksum says so. */
	b[len - 40] ^= 1;
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "corrupt (checksum mismatch): rebuild it with epochfs-manifest"), "%s",
		  err);
	b[len - 40] ^= 1;
	b[0] ^= 1;
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "not an epochfs manifest"), "%s", err);
	b[0] ^= 1;
	b[8] = 3;                       /* version */
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -ENOTSUP);
	cr_expect(strstr(err, "version 3"), "%s", err);
	/* Format 1 bound files by path and size only: refused, with the fix. */
	b[8] = 1;
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -ENOTSUP);
	cr_expect(strstr(err, "format 1 binds files by path and size only") &&
		  strstr(err, "rebuild it with this epochfs-manifest"), "%s", err);
	free(b);
}

Test(manifest, load_refuses_every_truncation)
{
	char err[512];
	size_t len;

	build_save_load(CH);
	unsigned char *b = slurp(mpath, "", &len);
	for (size_t n = 0; n < len; n++)
		cr_expect_eq(load_bytes(b, n, err, sizeof(err)), -EBADMSG, "%zu bytes", n);
	cr_expect_eq(load_bytes(b, len / 2, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "truncated"), "%s", err);
	cr_expect_eq(load_bytes(b, len - 1, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "truncated"), "%s", err);
	/* Bytes after the records, sealed: not a manifest this build wrote. */
	unsigned char *g = calloc(1, len + 5);
	memcpy(g, b, len - 32);
	reseal(g, len + 5);
	cr_expect_eq(load_bytes(g, len + 5, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "after the last record"), "%s", err);
	free(g);
	free(b);
}

/* A lying header must be judged by the file's length, never allocated for.
 * Outside ASan (which reserves terabytes of shadow) the address space is
 * capped, so an allocation sized by the header would fail with -ENOMEM. */
Test(manifest, load_refuses_a_lying_header_without_allocating)
{
	char err[512];
	size_t len;

	build_save_load(CH);
	unsigned char *b = slurp(mpath, "", &len);
	manifest_free(m);
	m = NULL;
#ifndef __SANITIZE_ADDRESS__
	struct rlimit rl = { .rlim_cur = 1ull << 30, .rlim_max = RLIM_INFINITY };
	long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f && fscanf(f, "%ld", &pages) == 1)
		rl.rlim_cur = (rlim_t)pages * 4096 + (256ull << 20);
	if (f)
		fclose(f);
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
#endif
	put64le(b + 24, 1ull << 40);    /* files */
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "corrupt"), "%s", err);
	put64le(b + 24, 0x7fffffff);    /* files, within the format's limit */
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG, "%s", err);
	put64le(b + 24, 4);
	put64le(b + 32, 1ull << 62);    /* total bytes */
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG);
	cr_expect(strstr(err, "header says"), "%s", err);
	put64le(b + 32, sizes[0] + sizes[1] + sizes[2] + sizes[3]);
	/* Record 0 ("d1/d2/deep") claims a petabyte: its hashes are not there. */
	put64le(b + 40 + 2 + 10, 1ull << 50);
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG);
	free(b);
}

Test(manifest, load_refuses_unsorted_and_unnormalized_paths)
{
	static const char *const bad[] = { "zz/d2/deep", "/d/d2/deep", "d1//2/deep", "d1/./deep0",
					   "d1/../deep", "d1/d2/dee/", "d1/d2/dee\0" };
	char err[512];
	size_t len;

	build_save_load(CH);
	unsigned char *b = slurp(mpath, "", &len);
	cr_assert(!memcmp(b + 42, "d1/d2/deep", 10));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(b + 42, bad[i], 10);
		reseal(b, len);
		cr_expect_eq(load_bytes(b, len, err, sizeof(err)), -EBADMSG, "%s", bad[i]);
		cr_expect(strstr(err, "corrupt"), "%s: %s", bad[i], err);
	}
	memcpy(b + 42, "d1/d2/deep", 10);
	reseal(b, len);
	cr_expect_eq(load_bytes(b, len, err, sizeof(err)), 0, "%s", err);
	free(b);
}

Test(manifest, load_names_a_missing_file)
{
	char err[512];

	cr_expect_eq(manifest_load("/nonexistent/x.manifest", &m, err, sizeof(err)), -ENOENT);
	cr_expect_null(m);
	cr_expect(strstr(err, "/nonexistent/x.manifest"), "%s", err);
	cr_expect_eq(manifest_load(dir, &m, err, sizeof(err)), -EINVAL);
}

/* The index path of ID. */
static const char *ipath(uint32_t id)
{
	static char p[4096];

	cr_assert_geq(index_path(ix, id, p, sizeof(p)), 0);
	return p;
}

Test(manifest, bind_matches_the_same_tree)
{
	struct manifest_report r;
	uint32_t bound = 0;

	build_save_load(CH);
	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	cr_expect_eq(manifest_file_of(m, 2), -ENOENT);      /* not bound yet */
	cr_assert_eq(manifest_bind(m, ix, &r), 0);
	cr_expect_eq(r.matched, 4);
	cr_expect_eq(r.missing, 0);
	cr_expect_eq(r.extra, 0);
	cr_expect_eq(r.version_differs, 0);
	cr_expect_str_empty(r.first_missing);
	for (uint32_t id = INDEX_ROOT; id <= index_count(ix); id++) {
		struct index_attr a;
		int rec = manifest_file_of(m, id);

		cr_assert_eq(index_get(ix, id, &a), 0);
		if (!S_ISREG(a.mode)) {
			cr_expect_eq(rec, -ENOENT, "%s", ipath(id));
			continue;
		}
		const char *p;
		size_t len;
		cr_assert_geq(rec, 0, "%s", ipath(id));
		manifest_record(m, (uint64_t)rec, &p, &len, NULL, NULL);
		cr_expect(len == strlen(ipath(id)) && !memcmp(p, ipath(id), len), "%s", ipath(id));
		bound++;
	}
	cr_expect_eq(bound, 4);
	cr_expect_eq(manifest_file_of(m, index_count(ix) + 1), -ENOENT);
	cr_expect_eq(manifest_file_of(m, 0), -ENOENT);
}

Test(manifest, bind_reports_missing_extra_and_version_changes)
{
	struct manifest_report r;
	char p[4200];
	uint64_t size;

	build_save_load(CH);
	put_file("d1/new", 10, 7);                 /* in SOURCE, not in the manifest */
	snprintf(p, sizeof(p), "%s/e", dir);
	cr_assert_eq(unlink(p), 0);                /* in the manifest, not in SOURCE */
	put_file("plus", CH + 2, 4);               /* size differs */
	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	cr_assert_eq(manifest_bind(m, ix, &r), 0);
	cr_expect_eq(r.matched, 2);
	cr_expect_eq(r.missing, 1);
	cr_expect_str_eq(r.first_missing, "d1/new");
	cr_expect_eq(r.extra, 1);
	cr_expect_str_eq(r.first_extra, "e");
	cr_expect_eq(r.version_differs, 1);
	cr_expect_str_eq(r.first_version, "plus");
	/* The changed file stays bound, and unverified: its version is not the record's. */
	uint32_t plus = index_lookup(ix, INDEX_ROOT, "plus"), f;
	int rec = manifest_file_of(m, plus);
	cr_assert_eq(rec, manifest_find(m, "plus", 4, &size));
	cr_expect_eq(size, CH + 1);
	struct index_attr a;
	cr_assert_eq(index_get(ix, plus, &a), 0);
	cr_expect_eq(manifest_verifiable(m, plus, &a.v, &f), 0);
	uint32_t one = index_lookup(ix, INDEX_ROOT, "one");
	cr_assert_eq(index_get(ix, one, &a), 0);
	cr_expect_eq(manifest_verifiable(m, one, &a.v, &f), 1);
	cr_expect_eq(f, (uint32_t)manifest_find(m, "one", 3, NULL));
	uint32_t nw = index_lookup(ix, index_lookup(ix, INDEX_ROOT, "d1"), "new");
	cr_assert_neq(nw, 0);
	cr_expect_eq(manifest_file_of(m, nw), -ENOENT);
}

/* A file rewritten in place with the same size and its mtime copied back:
 * format 1 still "verified" the old bytes a lying peer sent. Its ctime
 * moved, so its record no longer vouches for it. */
Test(manifest, a_rewrite_with_the_old_mtime_is_unverified)
{
	struct manifest_report r;
	struct index_attr a;
	struct timespec ts[2];
	struct stat st;
	char p[4200];
	uint32_t f;

	build_save_load(CH);
	snprintf(p, sizeof(p), "%s/one", dir);
	cr_assert_eq(stat(p, &st), 0);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	struct timespec pause = { 0, 20 * 1000 * 1000 };
	nanosleep(&pause, NULL);                    /* a ctime tick apart */
	put_file("one", CH, 99);                    /* same size, other bytes */
	cr_assert_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	cr_assert_eq(index_scan(rootfd, NULL, &ix), 0);
	cr_assert_eq(manifest_bind(m, ix, &r), 0);
	cr_expect_eq(r.version_differs, 1);
	cr_expect_str_eq(r.first_version, "one");
	uint32_t one = index_lookup(ix, INDEX_ROOT, "one");
	cr_assert_eq(index_get(ix, one, &a), 0);
	cr_expect_eq(a.v.mtime_ns, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	cr_expect_eq(manifest_verifiable(m, one, &a.v, &f), 0, "a file at another version was verifiable");
	cr_expect_neq(manifest_id(m), 0);
}
