/* manifest.c - epochfs-manifest: builds, lists and checks dataset manifests.
 *
 * A manifest (format: fs/store/manifest.h) is the trusted list of per-chunk
 * BLAKE2b checksums of every regular file in SOURCE. Build it once, on a
 * machine that reads storage directly and that you trust; a mount given
 * `--manifest FILE` then verifies every byte a peer sends it, and every
 * storage load, against it.
 *
 *   epochfs-manifest SOURCE                build SOURCE's manifest
 *   epochfs-manifest --list FILE           print FILE as text
 *   epochfs-manifest --check FILE SOURCE   rehash SOURCE, report differences
 *
 * All the work is in fs/store/manifest.c; this file is options and printing.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options.h"
#include "store/manifest.h"
#include "util/log.h"
#include "util/version.h"


static void usage(FILE *f)
{
	fprintf(f,
		"usage: epochfs-manifest [OPTIONS] SOURCE             build SOURCE's manifest\n"
		"       epochfs-manifest --list FILE                  print manifest FILE as text\n"
		"       epochfs-manifest --check FILE [OPTIONS] SOURCE  verify SOURCE against FILE\n"
		"\n"
		"Builds the trusted list of BLAKE2b checksums of every chunk of every regular\n"
		"file below SOURCE (symlinks are not followed and not listed). Run it where\n"
		"storage is read directly; a mount given --manifest FILE then verifies every\n"
		"byte it gets from a peer or from storage against it.\n"
		"  -o, --output FILE  where to write (default: BASENAME-OF-SOURCE.manifest in\n"
		"                     the current directory); written whole, then renamed\n"
		"      --chunk SIZE   chunk size, 4K to 1G, with K/M/G (default 256K); it must\n"
		"                     equal the mount's --cache-chunk\n"
		"      --threads N    hashing threads (default: 2 per CPU)\n"
		"  -q, --quiet        no progress line\n"
		"      --list FILE    print FILE: a header line, then one line per file:\n"
		"                     SIZE CHUNKS FIRST-CHUNK-HASH PATH ('-' for no chunk)\n"
		"      --check FILE   rehash SOURCE with FILE's chunk size; print one line per\n"
		"                     difference and exit 1 if there is any:\n"
		"                       differs PATH           size or bytes differ\n"
		"                       version-differs PATH   same bytes, another version (inode,\n"
		"                                              mtime or ctime): the mount reads it\n"
		"                                              from storage only; rebuild\n"
		"                       only-in-manifest PATH  not in SOURCE\n"
		"                       only-in-source PATH    not in the manifest\n"
		"  -h, --help         this text\n"
		"  -V, --version      print the version\n"
		"Exit status: 0 done (or all match), 1 failure (or differences), 2 usage error.\n");
}

/* "<basename of SOURCE>.manifest", in BUF. */
static int default_output(const char *source, char *buf, size_t len)
{
	char real[PATH_MAX];
	const char *base;

	if (!realpath(source, real))
		return -errno;
	base = strrchr(real, '/');
	base = base && base[1] ? base + 1 : "root";
	if ((size_t)snprintf(buf, len, "%s.manifest", base) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* 1 if the file OUTPUT would land inside the directory SOURCE. */
static int inside(const char *output, const char *source)
{
	char src[PATH_MAX], dir[PATH_MAX], copy[PATH_MAX];
	size_t n;

	if (snprintf(copy, sizeof(copy), "%s", output) >= (int)sizeof(copy) ||
	    !realpath(source, src) || !realpath(dirname(copy), dir))
		return 0;
	n = strlen(src);
	if (n == 1)
		return 1;                   /* SOURCE is / */
	return !strncmp(dir, src, n) && (dir[n] == '\0' || dir[n] == '/');
}

static void hex(const uint8_t *h, char *out)
{
	for (unsigned i = 0; i < MANIFEST_HASH_LEN; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

static int list(const char *file)
{
	struct manifest *m;
	char err[512], hx[2 * MANIFEST_HASH_LEN + 1];
	uint32_t chunk;

	if (manifest_load(file, &m, err, sizeof(err)) < 0) {
		log_error("%s", err);
		return 1;
	}
	chunk = manifest_chunk(m);
	printf("# epochfs manifest: chunk %u, %llu files, %llu bytes\n", chunk,
	       (unsigned long long)manifest_files(m), (unsigned long long)manifest_bytes(m));
	for (uint64_t i = 0; i < manifest_files(m); i++) {
		const uint8_t *h;
		const char *p;
		uint64_t size;
		size_t len;

		manifest_record(m, i, &p, &len, &size, &h);
		if (h)
			hex(h, hx);
		else
			strcpy(hx, "-");
		printf("%llu %llu %s %.*s\n", (unsigned long long)size,
		       (unsigned long long)(size / chunk + (size % chunk != 0)), hx, (int)len, p);
	}
	manifest_free(m);
	if (fflush(stdout) == EOF || ferror(stdout)) {
		log_error("cannot write the listing to stdout");
		return 1;
	}
	return 0;
}

/* Records I of A and J of B (same path): 0 the same, 1 size or bytes
 * differ, 2 the same bytes at another version of the file. */
static int compare_records(const struct manifest *a, uint64_t i, const struct manifest *b, uint64_t j)
{
	const uint8_t *ha, *hb;
	struct index_version va, vb;
	uint64_t sa, sb;

	manifest_record(a, i, NULL, NULL, &sa, &ha);
	manifest_record(b, j, NULL, NULL, &sb, &hb);
	if (sa != sb)
		return 1;
	uint64_t nch = sa / manifest_chunk(a) + (sa % manifest_chunk(a) != 0);
	if (nch && memcmp(ha, hb, (size_t)nch * MANIFEST_HASH_LEN))
		return 1;
	manifest_record_version(a, i, &va);
	manifest_record_version(b, j, &vb);
	return index_version_eq(&va, &vb) ? 0 : 2;
}

static int check(const char *file, const char *source, struct manifest_build_opts *o)
{
	struct manifest *want, *got;
	struct manifest_build_stats st;
	uint64_t i = 0, j = 0, differs = 0, only_m = 0, only_s = 0;
	char err[512];

	if (manifest_load(file, &want, err, sizeof(err)) < 0) {
		log_error("%s", err);
		return 1;
	}
	o->chunk = manifest_chunk(want);
	if (manifest_build(source, o, &st, &got, err, sizeof(err)) < 0) {
		log_error("%s", err);
		manifest_free(want);
		return 1;
	}
	/* Both lists are sorted by path: one merge walk. */
	while (i < manifest_files(want) || j < manifest_files(got)) {
		const char *pa = NULL, *pb = NULL;
		size_t la = 0, lb = 0;
		int c;

		if (i < manifest_files(want))
			manifest_record(want, i, &pa, &la, NULL, NULL);
		if (j < manifest_files(got))
			manifest_record(got, j, &pb, &lb, NULL, NULL);
		if (!pa) {
			c = 1;
		} else if (!pb) {
			c = -1;
		} else {
			c = memcmp(pa, pb, la < lb ? la : lb);
			if (!c)
				c = la < lb ? -1 : la > lb;
		}
		if (c < 0) {
			printf("only-in-manifest %.*s\n", (int)la, pa);
			only_m++;
			i++;
		} else if (c > 0) {
			printf("only-in-source %.*s\n", (int)lb, pb);
			only_s++;
			j++;
		} else {
			int d = compare_records(want, i, got, j);
			if (d) {
				printf("%s %.*s\n", d == 1 ? "differs" : "version-differs", (int)la, pa);
				differs++;
			}
			i++;
			j++;
		}
	}
	fflush(stdout);
	manifest_free(want);
	manifest_free(got);
	if (differs || only_m || only_s) {
		log_error("%s does not match %s: %llu differ, %llu only in the manifest, %llu only "
			  "in SOURCE", source, file, (unsigned long long)differs,
			  (unsigned long long)only_m, (unsigned long long)only_s);
		return 1;
	}
	log_info("%s matches %s: %llu files, %.1f MB in %.1f s", source, file,
		 (unsigned long long)st.files, st.bytes / 1e6, st.seconds);
	return 0;
}

static int build(const char *source, const char *output, struct manifest_build_opts *o)
{
	struct manifest_build_stats st;
	struct manifest *m;
	char err[512], def[NAME_MAX + 16];
	int ret;

	if (!output) {
		if ((ret = default_output(source, def, sizeof(def))) < 0) {
			log_error("%s: %s", source, strerror(-ret));
			return 1;
		}
		output = def;
	}
	if (inside(output, source))
		log_warn("%s is inside %s: the next manifest of %s would list it; write it "
			 "elsewhere with -o", output, source, source);
	if (manifest_build(source, o, &st, &m, err, sizeof(err)) < 0) {
		log_error("%s", err);
		return 1;
	}
	ret = manifest_save(m, output, err, sizeof(err));
	manifest_free(m);
	if (ret < 0) {
		log_error("%s", err);
		return 1;
	}
	log_info("%llu files, %.1f MB in %.1f s (%.0f MB/s) -> %s", (unsigned long long)st.files,
		 st.bytes / 1e6, st.seconds, st.seconds > 0 ? st.bytes / 1e6 / st.seconds : 0.0,
		 output);
	return 0;
}

int main(int argc, char **argv)
{
	enum { OPT_CHUNK = 256, OPT_THREADS, OPT_LIST, OPT_CHECK };
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' }, { "chunk", required_argument, NULL, OPT_CHUNK },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "quiet", no_argument, NULL, 'q' },        { "list", required_argument, NULL, OPT_LIST },
		{ "check", required_argument, NULL, OPT_CHECK },
		{ "help", no_argument, NULL, 'h' },         { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct manifest_build_opts o = { .chunk = MANIFEST_DEFAULT_CHUNK, .progress = 1 };
	const char *output = NULL, *list_file = NULL, *check_file = NULL;
	int c, chunk_set = 0;

	log_init("epochfs-manifest", 0);
	opterr = 0;
	while ((c = getopt_long(argc, argv, "o:qhV", lo, NULL)) != -1) {
		uint64_t v;
		switch (c) {
		case 'o': output = optarg; break;
		case OPT_CHUNK:
			if (options_parse_size(optarg, 0, &v) || v < MANIFEST_MIN_CHUNK ||
			    v > MANIFEST_MAX_CHUNK) {
				log_error("--chunk %s: expected a size from 4K to 1G (the mount's "
					  "--cache-chunk)", optarg);
				return 2;
			}
			o.chunk = (uint32_t)v;
			chunk_set = 1;
			break;
		case OPT_THREADS:
			if (options_parse_uint(optarg, 1, 1024, &o.threads)) {
				log_error("--threads %s: expected a number from 1 to 1024", optarg);
				return 2;
			}
			break;
		case 'q': o.progress = 0; break;
		case OPT_LIST: list_file = optarg; break;
		case OPT_CHECK: check_file = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("epochfs-manifest %s\n", EPOCHFS_VERSION); return 0;
		default:
			log_error("%s: unknown option or missing value (see --help)", argv[optind - 1]);
			return 2;
		}
	}
	if (list_file && (check_file || output || chunk_set)) {
		log_error("--list takes no other option (see --help)");
		return 2;
	}
	if (check_file && (output || chunk_set)) {
		log_error("--check uses the manifest's chunk size and writes nothing: drop "
			  "--output and --chunk");
		return 2;
	}
	if (list_file) {
		if (optind != argc) {
			log_error("--list takes no SOURCE (see --help)");
			return 2;
		}
		return list(list_file);
	}
	if (optind != argc - 1) {
		log_error("expected exactly one SOURCE directory (see --help)");
		return 2;
	}
	if (check_file)
		return check(check_file, argv[optind], &o);
	return build(argv[optind], output, &o);
}
