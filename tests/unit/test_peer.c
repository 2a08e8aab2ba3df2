/* test_peer.c - real peers over loopback, no mount: two or three cores over
 * one SOURCE, each with its peer layer (peer.h) on 127.0.0.1, read through
 * core_read() and checked byte for byte against the files, and against
 * the counters that say where the bytes came from.
 *
 * Every test must be able to fail: the counters pin down which node read
 * storage and which asked a peer, and the consistent liar without a
 * manifest must hand the reader wrong bytes (else the lie hook proves
 * nothing about the manifest). The nodes' log lines (stderr) are kept in
 * a file, checked where a test expects a line or none, and echoed at the
 * end.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cluster/cluster.h"
#include "cluster/peer.h"
#include "core/core.h"
#include "helpers.h"
#include "store/manifest.h"
#include "util/syncwait.h"

#define CHUNK (256u << 10)
#define NFILES 30
#define BIG_LEN (3 * CHUNK + 50000)     /* four items, the last one short */
#define MAX_NODES 3

struct file {
	char rel[64];
	unsigned char *data;
	size_t len;
};

static char *dir;                   /* the temp dir: src/ and the manifest */
static char src[2048], mpath[2048], logpath[2048];
static int saved_stderr = -1;
static struct file files[NFILES + 1];
static uint64_t total;              /* bytes of every file */
static struct core *cores[MAX_NODES];
static struct peer *peers[MAX_NODES];

/* ---- the dataset ----------------------------------------------------- */

static void put_file(struct file *f, const char *rel, size_t len, uint32_t seed)
{
	char p[4300];
	uint32_t x = seed * 2654435761u + 1;
	FILE *fp;

	snprintf(f->rel, sizeof(f->rel), "%s", rel);
	f->len = len;
	f->data = malloc(len);
	cr_assert(f->data);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		f->data[i] = (unsigned char)x;
	}
	snprintf(p, sizeof(p), "%s/%s", src, rel);
	fp = fopen(p, "w");
	cr_assert(fp, "cannot write %s", p);
	cr_assert_eq(fwrite(f->data, 1, len, fp), len);
	fclose(fp);
	total += len;
}

static void setup(void)
{
	char rel[64];
	uint32_t x = 12345;

	dir = th_tmpdir();
	cr_assert(dir);
	snprintf(src, sizeof(src), "%s/src", dir);
	snprintf(mpath, sizeof(mpath), "%s/manifest", dir);
	cr_assert_eq(mkdir(src, 0755), 0);
	th_mkdir(src, "a");
	th_mkdir(src, "b");
	th_mkdir(src, "b/c");
	total = 0;
	for (unsigned i = 0; i < NFILES; i++) {
		static const char *const sub[] = { "a", "b", "b/c" };
		x = x * 1103515245u + 12345u;
		snprintf(rel, sizeof(rel), "%s/f%02u.bin", sub[i % 3], i);
		put_file(&files[i], rel, 1024 + (x >> 8) % (300u << 10), i + 1);
	}
	put_file(&files[NFILES], "big.bin", BIG_LEN, 999);
	memset(cores, 0, sizeof(cores));
	memset(peers, 0, sizeof(peers));
	snprintf(logpath, sizeof(logpath), "%s/log", dir);
	int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
	cr_assert(fd >= 0);
	saved_stderr = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
}

/* The log so far (malloc'd, NUL-terminated). */
static char *log_text(void)
{
	FILE *f = fopen(logpath, "r");
	char *t = calloc(1, 1 << 20);

	cr_assert(f && t);
	size_t n = fread(t, 1, (1 << 20) - 1, f);
	t[n] = '\0';
	fclose(f);
	return t;
}

/* Whether a line containing S was logged. */
static int logged(const char *s)
{
	char *t = log_text();
	int r = strstr(t, s) != NULL;

	free(t);
	return r;
}

static void teardown(void)
{
	for (unsigned i = 0; i < MAX_NODES; i++)
		core_close(cores[i]);       /* stops and frees its peer too */
	if (saved_stderr >= 0) {
		char *t = log_text();
		dup2(saved_stderr, STDERR_FILENO);
		close(saved_stderr);
		fputs(t, stderr);
		free(t);
	}
	for (unsigned i = 0; i <= NFILES; i++)
		free(files[i].data);
	th_rmrf(dir);
	free(dir);
}

TestSuite(peer, .init = setup, .fini = teardown, .timeout = 60);

static void make_manifest(void)
{
	struct manifest_build_opts o = { .chunk = CHUNK, .threads = 2 };
	struct manifest *m;
	char err[512];

	cr_assert_eq(manifest_build(src, &o, NULL, &m, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(manifest_save(m, mpath, err, sizeof(err)), 0, "%s", err);
	manifest_free(m);
}

/* ---- the nodes ------------------------------------------------------- */

/* A port nobody listens on now: bound to port 0, read back, closed. */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

struct node_opts {
	const uint8_t *key;         /* NULL: insecure */
	int manifest;
	int absent;                 /* listed, never started (its port stays closed) */
};

/* Opens N cores over SRC, each with a peer on 127.0.0.1 at a port of its
 * own, and starts them. */
static void start_nodes(unsigned n, const struct node_opts *no)
{
	struct cluster cl = { 0 };
	char list[256] = "", err[512];

	for (unsigned i = 0; i < n; i++) {
		size_t at = strlen(list);
		snprintf(list + at, sizeof(list) - at, "%s127.0.0.1:%u", i ? "," : "", free_port());
	}
	cr_assert_eq(cluster_add_list(&cl, list, CLUSTER_DEFAULT_PORT, err, sizeof(err)), 0, "%s", err);
	for (unsigned i = 0; i < n; i++) {
		struct core_opts co = { .source = src, .cache_size = 32u << 20, .cache_chunk = CHUNK,
					.timeout = 3600, .watch = 0, .prep = 0,
					.manifest = no[i].manifest ? mpath : NULL };
		if (no[i].absent)
			continue;
		cr_assert_eq(cluster_finish(&cl, i, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(core_open(&co, &cores[i]), 0);
		struct peer_opts po = { .cl = &cl, .listen = "127.0.0.1", .key = no[i].key,
					.insecure = !no[i].key, .timeout_s = 0.5 };
		cr_assert_eq(peer_new(cores[i], &po, &peers[i], err, sizeof(err)), 0, "%s", err);
	}
	cluster_free(&cl);
	for (unsigned i = 0; i < n; i++)
		if (cores[i])
			cr_assert_eq(core_start(cores[i]), 0);
}

static const uint8_t key_a[PEER_KEY_BYTES] = { [0 ... PEER_KEY_BYTES - 1] = 0xa5 };
static const uint8_t key_b[PEER_KEY_BYTES] = { [0 ... PEER_KEY_BYTES - 2] = 0xa5, 0x5a };

/* A counter or gauge of node I by name. */
static uint64_t sample(unsigned i, const char *name)
{
	struct sample s[512];
	int n = core_samples(cores[i], s, 512);

	for (int j = 0; j < n; j++)
		if (!strcmp(s[j].name, name))
			return s[j].u;
	cr_assert_fail("no sample %s", name);
	return 0;
}

/* Reads LEN bytes at OFF of file F through node I's core_read(), waits,
 * and checks them. 1 if they are SOURCE's bytes; else 0, and a failure
 * unless wrong bytes are wanted. */
static int read_range(unsigned i, const struct file *f, off_t off, size_t len, int want_right)
{
	static unsigned char buf[BIG_LEN];
	struct sync_wait w = SYNC_WAIT_INIT(buf);
	struct core_attr a;

	cr_assert_eq(core_stat_path(cores[i], f->rel, &a), 0, "%s not indexed", f->rel);
	core_read(cores[i], a.node, off, len, sync_wait_done, &w);
	ssize_t n = sync_wait(&w);
	cr_assert_eq(n, (ssize_t)len, "node %u: %s: %zd", i, f->rel, n);
	if (!memcmp(buf, f->data + off, len))
		return 1;
	cr_expect(!want_right, "node %u: %s at %lld: wrong bytes", i, f->rel, (long long)off);
	return 0;
}

/* Reads every file whole through node I. Returns how many were wrong. */
static unsigned read_all(unsigned i, int want_right)
{
	unsigned wrong = 0;

	for (unsigned f = 0; f <= NFILES; f++)
		wrong += !read_range(i, &files[f], 0, files[f].len, want_right);
	return wrong;
}

/* Reads a part of every item through node I, once: a quarter of it, from
 * a third in. */
static void read_parts(unsigned i)
{
	for (unsigned f = 0; f <= NFILES; f++)
		for (size_t at = 0; at < files[f].len; at += CHUNK) {
			size_t n = files[f].len - at < CHUNK ? files[f].len - at : CHUNK;
			read_range(i, &files[f], (off_t)(at + n / 3), n / 4, 1);
		}
}

#define STORAGE(i) sample(i, "storage_read_bytes")
#define PEER_READ(i) sample(i, "peer_read_bytes")
#define PEER_ERRORS(i) sample(i, "peer_errors")
#define PEER_LIES(i) sample(i, "peer_lies")
#define FELL_BACK(i) sample(i, "peer_fallback_bytes")

/* ---- the tests ------------------------------------------------------- */

Test(peer, items_of_other_nodes_come_from_them)
{
	const struct node_opts no[3] = { { .key = key_a }, { .key = key_a }, { .key = key_a } };

	start_nodes(3, no);
	/* Nodes 1 and 2 load every item once between the three of them. */
	read_all(1, 1);
	read_all(2, 1);
	cr_assert_eq(STORAGE(0) + STORAGE(1) + STORAGE(2), total);
	cr_expect_eq(PEER_READ(2), STORAGE(0) + STORAGE(1), "node 2 read its share only");
	/* Node 0 owns a share, loaded while it served; the rest is the others'. */
	uint64_t own = STORAGE(0);
	cr_assert(own > 0 && own < total, "node 0 loaded %lu of %lu", (unsigned long)own,
		  (unsigned long)total);
	read_all(0, 1);
	cr_expect_eq(STORAGE(0), own, "node 0 read storage for items it does not own");
	cr_expect_eq(PEER_READ(0), total - own);
	cr_expect_eq(STORAGE(0) + STORAGE(1) + STORAGE(2), total, "an item loaded twice");
	cr_expect_eq(sample(0, "peers_up"), 2);
	for (unsigned i = 0; i < 3; i++)
		cr_expect_eq(PEER_ERRORS(i) + FELL_BACK(i), 0, "node %u counted faults", i);
	cr_expect(!logged("warning:") && !logged("error:"), "unexpected complaints (log below)");
}

Test(peer, a_peer_that_shut_down_leaves_its_items_to_storage)
{
	const struct node_opts no[2] = { { .key = key_a }, { .key = key_a } };

	start_nodes(2, no);
	read_all(1, 1);
	read_all(0, 1);
	uint64_t theirs = STORAGE(1), mine = STORAGE(0), fetched = PEER_READ(0);
	cr_assert_eq(fetched, theirs);
	core_close(cores[1]);
	cores[1] = NULL;
	/* Node 1's items now come from storage, every time (not ours to keep). */
	read_all(0, 1);
	cr_expect_eq(PEER_READ(0), fetched);
	cr_expect_eq(STORAGE(0), mine + theirs);
	read_all(0, 1);
	cr_expect_eq(STORAGE(0), mine + 2 * theirs);
	cr_expect_eq(PEER_READ(0), fetched);
	cr_expect_eq(FELL_BACK(0), 2 * theirs, "each read of node 1's items counted once");
	cr_expect(logged("shut down; its items are read from storage"), "no goodbye seen");
}

Test(peer, a_peer_that_never_came_up)
{
	const struct node_opts no[2] = { { .key = key_a }, { .absent = 1 } };

	start_nodes(2, no);
	read_all(0, 1);
	cr_expect_eq(STORAGE(0), total);
	cr_expect_eq(PEER_READ(0), 0);
	cr_expect(PEER_ERRORS(0) > 0, "a refused dial is a fault");
	cr_expect(FELL_BACK(0) > 0 && FELL_BACK(0) < total, "node 1's share, not ours: %lu",
		  (unsigned long)FELL_BACK(0));
	cr_expect(logged("cannot connect"));
}

Test(peer, a_wrong_secret_is_refused)
{
	const struct node_opts no[2] = { { .key = key_a }, { .key = key_b } };

	start_nodes(2, no);
	read_all(1, 1);
	read_all(0, 1);
	cr_expect_eq(PEER_READ(0), 0);
	cr_expect_eq(PEER_READ(1), 0);
	cr_expect_eq(STORAGE(0), total);
	cr_expect_eq(STORAGE(1), total);
	cr_expect(PEER_ERRORS(0) > 0);
	cr_expect(PEER_ERRORS(1) > 0);
	cr_expect_eq(sample(0, "peers_up"), 0);
	/* Refused in the handshake, by the proofs: never up, not just
	 * stopped later by the frames' seals (keyed with the secret too). */
	cr_expect(logged("failed authentication"));
	cr_expect(!logged(": connected"), "a node with another secret was let in");
}

Test(peer, bytes_that_fail_their_checksum_are_refused)
{
	const struct node_opts no[2] = { { .key = key_a }, { .key = key_a } };

	start_nodes(2, no);
	read_all(1, 1);
	peer_debug_lie(peers[1], 1);
	read_all(0, 1);
	cr_expect_eq(PEER_READ(0), 0, "a reply that fails its checksum was counted");
	cr_expect(PEER_ERRORS(0) > 0);
	cr_expect_eq(STORAGE(0), total);
	cr_expect(logged("fail their checksum"));
}

Test(peer, a_consistent_liar_fools_a_node_without_a_manifest)
{
	const struct node_opts no[2] = { { .key = key_a }, { .key = key_a } };

	start_nodes(2, no);
	read_all(1, 1);
	peer_debug_lie(peers[1], 2);
	cr_expect(read_all(0, 0) > 0, "the lie hook lied about nothing");
	cr_expect(PEER_READ(0) > 0);
	cr_expect_eq(PEER_ERRORS(0), 0);
	cr_expect(!logged("warning:"), "the liar was caught without a manifest (log below)");
}

Test(peer, a_manifest_exposes_a_consistent_liar)
{
	const struct node_opts no[2] = { { .key = key_a, .manifest = 1 },
					 { .key = key_a, .manifest = 1 } };

	make_manifest();
	start_nodes(2, no);
	read_all(1, 1);
	peer_debug_lie(peers[1], 2);
	read_all(0, 1);
	cr_expect(PEER_LIES(0) > 0);
	cr_expect(sample(0, "peer_1_lies") > 0);
	cr_expect(PEER_ERRORS(0) > 0, "a lie costs the liar its connection");
	cr_expect_eq(PEER_READ(0), 0, "a lie was counted as read");
	cr_expect_eq(STORAGE(0), total);
	cr_expect(logged("do not match the manifest"));
}

/* With a manifest only whole items are asked for (only they can be
 * checked), and the part a reader wants is cut from the checked whole. */
Test(peer, a_manifest_fetches_whole_items_for_a_part)
{
	const struct node_opts no[2] = { { .key = key_a, .manifest = 1 },
					 { .key = key_a, .manifest = 1 } };

	make_manifest();
	start_nodes(2, no);
	read_all(1, 1);
	read_parts(0);
	cr_expect_eq(PEER_READ(0), STORAGE(1), "node 0 fetched %lu bytes of node 1's %lu",
		     (unsigned long)PEER_READ(0), (unsigned long)STORAGE(1));
	cr_expect_eq(PEER_LIES(0), 0);
	cr_expect_eq(PEER_ERRORS(0), 0);
	cr_expect(!logged("warning:"));
}

Test(peer, without_a_manifest_a_part_is_fetched_as_asked)
{
	const struct node_opts no[2] = { { .key = key_a }, { .key = key_a } };

	start_nodes(2, no);
	read_all(1, 1);
	read_parts(0);
	cr_expect(PEER_READ(0) > 0 && PEER_READ(0) < STORAGE(1), "fetched %lu of %lu",
		  (unsigned long)PEER_READ(0), (unsigned long)STORAGE(1));
	cr_expect_eq(PEER_ERRORS(0), 0);
}

Test(peer, insecure_on_both_sides)
{
	const struct node_opts no[2] = { { 0 }, { 0 } };

	start_nodes(2, no);
	read_all(1, 1);
	read_all(0, 1);
	cr_expect_eq(STORAGE(0) + STORAGE(1), total);
	cr_expect_eq(PEER_READ(0), STORAGE(1));
	cr_expect_eq(PEER_READ(1), STORAGE(0));
	cr_expect(PEER_READ(0) > 0);
	cr_expect_eq(PEER_ERRORS(0), 0);
	cr_expect_eq(PEER_ERRORS(1), 0);
	cr_expect(!logged("warning:") && logged(": connected"));
}

Test(peer, insecure_and_keyed_do_not_talk)
{
	const struct node_opts no[2] = { { 0 }, { .key = key_a } };

	start_nodes(2, no);
	read_all(1, 1);
	read_all(0, 1);
	cr_expect_eq(PEER_READ(0), 0);
	cr_expect_eq(PEER_READ(1), 0);
	cr_expect_eq(STORAGE(0), total);
	cr_expect_eq(STORAGE(1), total);
	cr_expect(PEER_ERRORS(0) > 0);
	cr_expect(PEER_ERRORS(1) > 0);
	cr_expect(logged("without a secret"));
	cr_expect(!logged(": connected"), "an insecure node was let in");
}
