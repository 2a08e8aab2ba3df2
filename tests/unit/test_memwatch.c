/* Unit tests of the memory watch (fake /proc and /sys trees) and of the
 * pressure policy (made-up samples): kernel copies, pause, give-back. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/memory.h"
#include "helpers.h"
#include "util/memwatch.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

static char *root;

static void setup(void)
{
	root = th_tmpdir();
	th_mkdir(root, "proc");
	th_mkdir(root, "proc/self");
	th_write(root, "proc/meminfo", "MemTotal:       8388608 kB\nMemFree:   100 kB\n"
				       "MemAvailable:   6291456 kB\nCached:    2097152 kB\n"
				       "Mapped:     102400 kB\n");
	th_write(root, "proc/vmstat", "nr_free_pages 1\npgmajfault 77\nworkingset_refault_file 5\n");
}

static void teardown(void)
{
	th_rmrf(root);
	free(root);
}

TestSuite(memwatch, .init = setup, .fini = teardown, .timeout = 10);

static void mkdirs(const char *rel)
{
	char p[4200];

	snprintf(p, sizeof(p), "mkdir -p '%s/%s'", root, rel);
	cr_assert_eq(system(p), 0);
}

Test(memwatch, no_cgroup_means_the_machine)
{
	struct memwatch *m;
	struct mem_sample s;

	th_write(root, "proc/self/cgroup", "0::/\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_expect_eq(memwatch_scope(m), MEM_SYSTEM);
	cr_assert_eq(memwatch_sample(m, &s), 0);
	cr_expect_eq(s.limit, 8 * GIB);
	cr_expect_eq(s.pinned, 2 * GIB);            /* MemTotal - MemAvailable */
	cr_expect_eq(s.mapped, 100 * MIB);
	cr_expect_eq(s.majfaults, 77);
	cr_expect_eq(s.refaults, 5);
	cr_expect_eq(mem_room(&s), 6 * GIB - 100 * MIB);
	memwatch_close(m);
}

Test(memwatch, cgroup_v1_limit_usage_and_the_file_lru)
{
	struct memwatch *m;
	struct mem_sample s;

	th_write(root, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/job/a\n0::/\n");
	mkdirs("sys/fs/cgroup/memory/job/a");
	th_write(root, "sys/fs/cgroup/memory/job/a/memory.limit_in_bytes", "2147483648\n");
	th_write(root, "sys/fs/cgroup/memory/job/a/memory.usage_in_bytes", "2000000000\n");
	/* A parent's tighter limit binds; the file LRU is not pinned. */
	th_write(root, "sys/fs/cgroup/memory/job/a/memory.stat",
		 "cache 5\nrss 6\nhierarchical_memory_limit 1073741824\ntotal_inactive_file 300000000\n"
		 "total_active_file 200000000\ntotal_mapped_file 100000000\ntotal_pgmajfault 9\n"
		 "workingset_refault_file 1\ntotal_workingset_refault_file 42\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_expect_eq(memwatch_scope(m), MEM_CGROUP_V1);
	cr_assert_eq(memwatch_sample(m, &s), 0);
	cr_expect_eq(s.limit, GIB);
	cr_expect_eq(s.pinned, 1500000000);
	cr_expect_eq(s.mapped, 100000000);
	cr_expect_eq(s.file, 500000000);
	cr_expect_eq(s.majfaults, 9);
	cr_expect_eq(s.refaults, 42, "the hierarchy's total, not the cgroup's own");
	cr_expect_eq(mem_room(&s), 0, "more in use than the limit: no room");
	memwatch_close(m);
}

Test(memwatch, shared_memory_counts_once)
{
	struct memwatch *m;
	struct mem_sample s;

	/* A 600 MB tmpfs arena, mapped: in usage (anon LRU) and in
	 * total_mapped_file; only the 100 MB of libraries are reclaimable. */
	th_write(root, "proc/self/cgroup", "4:memory:/job\n");
	mkdirs("sys/fs/cgroup/memory/job");
	th_write(root, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "2000000000\n");
	th_write(root, "sys/fs/cgroup/memory/job/memory.usage_in_bytes", "1000000000\n");
	th_write(root, "sys/fs/cgroup/memory/job/memory.stat",
		 "total_inactive_file 100000000\ntotal_active_file 100000000\n"
		 "total_mapped_file 700000000\ntotal_shmem 600000000\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_assert_eq(memwatch_sample(m, &s), 0);
	cr_expect_eq(s.pinned, 800000000);
	cr_expect_eq(s.mapped, 100000000);
	cr_expect_eq(mem_room(&s), 1100000000, "room %llu", (unsigned long long)mem_room(&s));
	memwatch_close(m);
}

Test(memwatch, cgroup_v2_takes_the_tightest_max_up_the_tree)
{
	struct memwatch *m;
	struct mem_sample s;

	th_write(root, "proc/self/cgroup", "0::/pod/job\n");
	mkdirs("sys/fs/cgroup/pod/job");
	th_write(root, "sys/fs/cgroup/pod/memory.max", "1073741824\n");
	th_write(root, "sys/fs/cgroup/pod/job/memory.max", "max\n");
	th_write(root, "sys/fs/cgroup/pod/job/memory.current", "600000000\n");
	th_write(root, "sys/fs/cgroup/pod/job/memory.stat",
		 "anon 1\nfile 2\nfile_mapped 50000000\ninactive_file 100000000\nactive_file 50000000\n"
		 "pgmajfault 3\nworkingset_refault_file 8\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_expect_eq(memwatch_scope(m), MEM_CGROUP_V2);
	cr_assert_eq(memwatch_sample(m, &s), 0);
	cr_expect_eq(s.limit, GIB);
	cr_expect_eq(s.pinned, 450000000);
	cr_expect_eq(s.mapped, 50000000);
	cr_expect_eq(s.refaults, 8);
	cr_expect_eq(mem_room(&s), GIB - 500000000);
	memwatch_close(m);
}

/* Whose memory the daemon's cgroup holds: a process in it or below it,
 * not one in a cgroup of its own (a job beside a daemon in a systemd
 * unit), nor one gone or unknown; the machine holds everyone. */
Test(memwatch, holds_a_process_in_its_cgroup_or_below)
{
	struct memwatch *m;

	th_write(root, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/job\n0::/\n");
	mkdirs("sys/fs/cgroup/memory/job");
	th_write(root, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "1073741824\n");
	th_write(root, "sys/fs/cgroup/memory/job/memory.usage_in_bytes", "100000000\n");
	th_write(root, "sys/fs/cgroup/memory/job/memory.stat",
		 "total_inactive_file 0\ntotal_active_file 0\ntotal_mapped_file 0\n");
	const char *pids[][2] = { { "11", "4:memory:/job\n" },       { "12", "3:cpu:/y\n4:memory:/job/w0\n" },
				  { "13", "4:memory:/jobx\n0::/job\n" }, { "14", "4:memory:/other\n" },
				  { "15", "0::/job\n" } };
	for (unsigned i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "proc/%s", pids[i][0]);
		th_mkdir(root, rel);
		snprintf(rel, sizeof(rel), "proc/%s/cgroup", pids[i][0]);
		th_write(root, rel, pids[i][1]);
	}
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_assert_eq(memwatch_scope(m), MEM_CGROUP_V1);
	cr_expect_eq(memwatch_holds(m, 11), 1, "the daemon's own cgroup");
	cr_expect_eq(memwatch_holds(m, 12), 1, "a cgroup below it");
	cr_expect_eq(memwatch_holds(m, 13), 0, "a name that only starts alike");
	cr_expect_eq(memwatch_holds(m, 14), 0, "a cgroup of its own");
	cr_expect_eq(memwatch_holds(m, 15), 0, "v2's line where the daemon is watched in v1");
	cr_expect_eq(memwatch_holds(m, 16), 0, "a process gone");
	cr_expect_eq(memwatch_holds(m, 0), 0, "an unknown caller");
	memwatch_close(m);
	th_write(root, "proc/self/cgroup", "0::/\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_assert_eq(memwatch_scope(m), MEM_SYSTEM);
	cr_expect_eq(memwatch_holds(m, 14), 1, "the machine holds every process");
	memwatch_close(m);
}

Test(memwatch, a_cgroup_without_a_limit_is_the_machine)
{
	struct memwatch *m;

	th_write(root, "proc/self/cgroup", "4:memory:/free\n");
	mkdirs("sys/fs/cgroup/memory/free");
	th_write(root, "sys/fs/cgroup/memory/free/memory.limit_in_bytes", "9223372036854771712\n");
	th_write(root, "sys/fs/cgroup/memory/free/memory.usage_in_bytes", "1\n");
	th_write(root, "sys/fs/cgroup/memory/free/memory.stat",
		 "total_inactive_file 0\ntotal_active_file 0\ntotal_mapped_file 0\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_expect_eq(memwatch_scope(m), MEM_SYSTEM);
	memwatch_close(m);
}

Test(memwatch, garbage_is_an_error_not_a_number)
{
	struct memwatch *m;
	struct mem_sample s;

	th_write(root, "proc/self/cgroup", "0::/\n");
	th_write(root, "proc/meminfo", "MemTotal: lots\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_expect_lt(memwatch_sample(m, &s), 0);
	memwatch_close(m);
}

/* ---- the policy ---- */

/* A sample at T: LIMIT, pinned so that ROOM is left, REFAULTS so far. */
static struct memory_in at(double t, uint64_t limit, uint64_t room, uint64_t refaults)
{
	return (struct memory_in){ .t = t, .dataset_bytes = 500 * MIB, .cache_capacity = 256 * MIB,
				     .cache_used = 256 * MIB,
				     .mem = { .limit = limit, .pinned = limit - room, .refaults = refaults } };
}

Test(pressure, kernel_copies_are_kept_while_the_dataset_fits_in_the_room)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in = at(0, 16 * GIB, 8 * GIB, 0);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.drop_copies, 0);
	cr_expect_eq(o.state, MEMORY_CALM);
	in = at(1, 16 * GIB, 400 * MIB, 0);         /* less room than the dataset */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.drop_copies, 1);
	cr_expect(o.changed);
	in = at(2, 16 * GIB, 2 * GIB, 0);           /* over the dataset + the margin (1 GiB) + 10% */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.drop_copies, 0);
	/* Forced either way. */
	memory_policy_init(&p, PAGE_CACHE_KEEP);
	in = at(0, 16 * GIB, 100 * MIB, 0);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.drop_copies, 0);
	memory_policy_init(&p, PAGE_CACHE_DROP);
	in = at(0, 16 * GIB, 8 * GIB, 0);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.drop_copies, 1);
}

Test(pressure, little_room_pauses_then_gives_back_then_calm_admits_again)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t reserve = memory_reserve(GIB);   /* 32 MiB */

	cr_expect_eq(reserve, 32 * MIB);
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in = at(0, GIB, reserve - MIB, 0);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_PAUSED);
	cr_expect_eq(o.give_back, 0);
	in = at(1, GIB, reserve / 2 - MIB, 0);      /* OOM near: give back a step */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_GIVING);
	cr_expect_eq(o.give_back, 16 * MIB);
	in = at(1.5, GIB, reserve / 2 - MIB, 0);    /* not again before 2 s */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.give_back, 0);
	in = at(3.5, GIB, reserve / 2 - MIB, 0);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.give_back, 16 * MIB);
	in = at(4, GIB, reserve, 0);                /* enough not to give, not to admit */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_PAUSED);
	for (double t = 5; t < 5 + CALM_S; t += 1) {
		in = at(t, GIB, 3 * reserve, 0);
		memory_step(&p, &in, &o);
		cr_expect_eq(o.state, MEMORY_PAUSED, "calm too soon at %.0f s", t);
	}
	in = at(5 + CALM_S, GIB, 3 * reserve, 0);
	in.cache_used = 128 * MIB;                  /* what the give-backs left */
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_CALM);
	/* Having given back, it regrows only into the free room above twice
	 * the reserve, not to its capacity: no refill into the same squeeze. */
	cr_expect_eq(o.admit_limit, in.cache_used + reserve);
}

Test(pressure, paused_the_cache_grows_a_step_whenever_there_is_room)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t reserve = memory_reserve(GIB);   /* 32 MiB */

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in = at(0, GIB, reserve - MIB, 0);          /* paused early, 40 MiB held */
	in.cache_used = 40 * MIB;
	memory_step(&p, &in, &o);
	cr_assert_eq(o.state, MEMORY_PAUSED);
	cr_expect_eq(o.admit_limit, 0, "no room: the limit stays");
	/* A moment of room: one step (16 MiB) more, not the capacity. */
	in = at(1, GIB, 2 * reserve + 100 * MIB, 0);
	in.cache_used = 40 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_PAUSED, "calm needs CALM_S");
	cr_expect_eq(o.admit_limit, 56 * MIB);
	/* Less room than a step: only what there is. */
	in = at(2, GIB, 2 * reserve + 4 * MIB, 0);
	in.cache_used = 56 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.admit_limit, 60 * MIB);
	/* Never past the capacity. */
	in = at(3, GIB, 2 * reserve + 100 * MIB, 0);
	in.cache_used = in.cache_capacity - MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.admit_limit, in.cache_capacity);
}

Test(pressure, a_tight_cgroup_that_refaults_a_little_is_left_alone)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t refaults = 0;

	/* 40 MiB of room (over the 32 MiB reserve) and 700 refaults a second,
	 * as part 7's job in good health: the cache keeps admitting up to its
	 * capacity and gives nothing back, however long it lasts. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	for (int t = 0; t < 60; t++) {
		refaults += 700;
		in = at(t, GIB, 40 * MIB, refaults);
		memory_step(&p, &in, &o);
		cr_expect_eq(o.state, MEMORY_CALM, "at %d s", t);
		cr_expect_eq(o.give_back, 0, "gave back at %d s", t);
	}
	cr_expect_eq(o.admit_limit, in.cache_capacity, "it never gave back: its whole capacity");
}

Test(pressure, a_squeezed_job_pauses_the_cache_then_gets_memory_back)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t refaults = 0;

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	/* Room for neither the dataset nor much else, but above the reserve
	 * (32 MiB): only the refaults tell that the job is being squeezed. */
	in = at(0, GIB, 50 * MIB, refaults);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_CALM);
	cr_expect_eq(o.drop_copies, 1);
	int paused_at = -1, gave_at = -1;
	for (int t = 1; t <= 20; t++) {
		refaults += 3000;                   /* 3,000 pages a second come back */
		in = at(t, GIB, 50 * MIB, refaults);
		memory_step(&p, &in, &o);
		if (o.state == MEMORY_PAUSED && paused_at < 0)
			paused_at = t;
		if (o.give_back && gave_at < 0)
			gave_at = t;
	}
	cr_expect(paused_at > 0 && paused_at <= 3, "paused at %d s", paused_at);
	cr_expect(gave_at >= paused_at + (int)SQUEEZE_GIVE_S, "gave back at %d s", gave_at);
	/* The same refaults with 300 MiB of room are the kernel's own churn:
	 * giving the cache back would not help. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	refaults = 0;
	for (int t = 0; t <= 20; t++) {
		refaults += 3000;
		in = at(t, GIB, 300 * MIB, refaults);
		memory_step(&p, &in, &o);
		cr_expect_eq(o.state, MEMORY_CALM, "not calm at %d s with room", t);
	}
	/* One burst (a library loaded at import) is not a squeeze. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in = at(0, GIB, 100 * MIB, 0);
	memory_step(&p, &in, &o);
	in = at(0.5, GIB, 100 * MIB, 100);
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_CALM);
}

Test(pressure, for_room_alone_the_cache_gives_at_most_half)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t given = 0;

	uint64_t refaults = 0;

	/* No room, counting 200 MiB of mapped pages, but they come back
	 * slowly (20 a second): the kernel trims cold library pages, which
	 * costs the job nothing. Paused, nothing given back. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	for (int t = 0; t < 60; t++) {
		refaults += 20;
		in = at(t, GIB, 0, refaults);
		in.mem.pinned = GIB - 200 * MIB;
		in.mem.mapped = 200 * MIB;
		memory_step(&p, &in, &o);
		cr_expect_eq(o.give_back, 0, "gave back at %d s for a cheap trim", t);
		cr_expect_neq(o.state, MEMORY_CALM);
	}
	/* The same with the job's pages coming back at 1,000 a second (under
	 * the squeeze threshold, over the critical one), mapped pages growing
	 * into whatever is freed: half the capacity (128 MiB) goes, then no
	 * more. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	refaults = 0;
	for (int t = 0; t < 120; t++) {
		refaults += 1000;
		in = at(t, GIB, 0, refaults);
		in.mem.pinned = GIB - 200 * MIB;
		in.mem.mapped = 200 * MIB;
		in.cache_used = 256 * MIB - given;
		memory_step(&p, &in, &o);
		given += o.give_back;
	}
	cr_expect_eq(given, 128 * MIB, "gave back %llu MiB", (unsigned long long)(given / MIB));
	/* Nothing reclaimable left either: the OOM killer is next, more goes. */
	in.mem.mapped = 0;
	in.mem.pinned = GIB - 8 * MIB;
	in.t += 3;
	memory_step(&p, &in, &o);
	cr_expect_gt(o.give_back, 0);
}

/* Staging is the first to go: none while the cache is paused or giving
 * back; calm, carved out of the cache's budget (a quarter at most) while
 * the cache cannot hold the dataset, so the two together never pass
 * --cache-size. */
Test(pressure, staging_goes_first_and_is_carved_out_of_the_cache)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t reserve = memory_reserve(GIB);

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in = at(0, GIB, 600 * MIB, 0);
	in.cache_used = 100 * MIB;
	in.cache_need = 520 * MIB;
	in.staging_max = 64 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_CALM);
	cr_expect_eq(o.staging_limit, 64 * MIB);
	cr_expect_eq(o.admit_limit, 256 * MIB, "the policy's limit is the capacity; the reserve is the cache's");
	in.orders = 1;
	in.t = 1;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 64 * MIB);
	/* A cache that can hold the whole dataset: no carve, and staging what
	 * the cache does not hold. */
	in.cache_need = 200 * MIB;
	in.t = 2;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.admit_limit, 256 * MIB);
	cr_expect_eq(o.staging_limit, 64 * MIB);
	in.cache_used = 220 * MIB;
	in.t = 2.5;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 36 * MIB);
	in.cache_used = 100 * MIB;
	/* At most a quarter of the cache is carved, and staging gets only
	 * that: cache + staging stay within --cache-size. */
	in.cache_need = 520 * MIB;
	in.staging_max = 200 * MIB;
	in.t = 3;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 64 * MIB);
	/* A cache that filled before the order came (it never evicts):
	 * staging gets what is left, here nothing. */
	in.cache_used = 256 * MIB;
	in.t = 3.5;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 0);
	in.cache_used = 240 * MIB;
	in.t = 3.6;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 16 * MIB);
	/* No cache: --prefetch-mem is the budget. */
	in.cache_capacity = 0;
	in.cache_used = 0;
	in.t = 3.7;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.staging_limit, 200 * MIB);
	cr_expect_eq(memory_staging_share(256 * MIB, 520 * MIB, 64 * MIB), 64 * MIB);
	cr_expect_eq(memory_staging_share(256 * MIB, 520 * MIB, 200 * MIB), 64 * MIB);
	cr_expect_eq(memory_staging_share(256 * MIB, 200 * MIB, 64 * MIB), 0);
	cr_expect_eq(memory_staging_share(0, 200 * MIB, 64 * MIB), 0);
	/* Pressure: staging goes, before the cache does. */
	in = at(4, GIB, reserve - MIB, 0);
	in.staging_max = 64 * MIB;
	in.orders = 1;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_PAUSED);
	cr_expect_eq(o.staging_limit, 0);
	cr_expect_eq(o.give_back, 0);
}

/* Step 4 with the job's word: a loader that says it may hold 294 MiB of
 * batches at once (4 workers x 2 of 38.5 MB) is counted at its memory
 * without the shared memory it holds now plus that, before any sample
 * has seen it there (part 7, W = 4, 942 MiB: all eight in flight came
 * between two samples and the OOM killer took the daemon). */
Test(pressure, the_batches_a_job_says_it_may_hold_count_in_its_peak)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t lim = 942 * MIB, reserve = memory_reserve(lim);

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	/* The job at 520 MiB, 120 of it batches in shared memory; the daemon
	 * 250 MiB (its arena anonymous: no shared memory of its own). */
	in = (struct memory_in){ .t = 0, .dataset_bytes = 452 * MIB, .cache_capacity = 226 * MIB,
				 .cache_used = 220 * MIB, .cache_need = 452 * MIB,
				 .mem = { .limit = lim, .pinned = 770 * MIB, .shmem = 120 * MIB, .own = 250 * MIB } };
	memory_step(&p, &in, &o);
	cr_expect_eq(o.ceiling, lim - 520 * MIB - reserve / 4, "nothing said: the peak seen");
	cr_expect_eq(o.guard, 0);
	/* The loader says 294 MiB: the peak is 520 - 120 + 294 = 694 MiB, the
	 * ceiling 240 MiB under it, and the daemon, 10 MiB over, gives back
	 * at once, before the batches come. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in.job_batches = 294 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.ceiling, lim - 694 * MIB - reserve / 4);
	cr_expect_eq(o.guard, 1);
	cr_expect_gt(o.give_back, 0);
	/* The daemon's own shared memory (a persistent arena) is not the
	 * job's: with 100 MiB of it in the cgroup's 220, the job still holds
	 * 120. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in.mem.shmem = 220 * MIB;
	in.mem.own_shmem = 100 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.ceiling, lim - 694 * MIB - reserve / 4);
	/* A job whose real peak passed what it said keeps the real one. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in.job_batches = 10 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.ceiling, lim - 520 * MIB - reserve / 4);
}

Test(memwatch, own_memory_is_rss_anon_and_shmem)
{
	struct memwatch *m;
	struct mem_sample s;

	th_write(root, "proc/self/cgroup", "0::/\n");
	th_write(root, "proc/self/status", "Name:\tepochfs\nVmRSS:\t  300000 kB\nRssAnon:\t  200000 kB\n"
					   "RssFile:\t   90000 kB\nRssShmem:\t   10000 kB\n");
	cr_assert_eq(memwatch_open(root, &m), 0);
	cr_assert_eq(memwatch_sample(m, &s), 0);
	cr_expect_eq(s.own, 210000ull * 1024, "RssAnon + RssShmem, not the mapped files");
	th_write(root, "proc/self/status", "Name:\tepochfs\n");
	cr_assert_eq(memwatch_sample(m, &s), 0, "no own figure is no error");
	cr_expect_eq(s.own, 0);
	memwatch_close(m);
}

/* Step 4: the job beside the daemon jumps (part 7 at 4 workers: the
 * daemon's 231 MiB and the job's 735 MiB met a 942 MiB limit between two
 * samples). The daemon keeps itself under the limit less the job's peak
 * and a margin; over it, it gives the excess back at once, staging first,
 * down to MEMORY_GUARD_SLACK under the ceiling. */
Test(pressure, the_daemon_stays_under_the_jobs_peak_and_gives_the_excess_at_once)
{
	struct memory_policy p;
	struct memory_out o;
	struct memory_in in;
	uint64_t lim = 942 * MIB, reserve = memory_reserve(lim);
	uint64_t cap = 184 * MIB;

	memory_policy_init(&p, PAGE_CACHE_AUTO);
	/* The job at 500 MiB, the daemon at 100 MiB (60 of cache): plenty of
	 * room. The cache may fill to its capacity; samples at the slow pace. */
	in = (struct memory_in){ .t = 0, .dataset_bytes = 368 * MIB, .cache_capacity = cap,
				 .cache_used = 60 * MIB, .cache_need = 368 * MIB,
				 .mem = { .limit = lim, .pinned = 600 * MIB, .own = 100 * MIB } };
	memory_step(&p, &in, &o);
	cr_expect_eq(o.state, MEMORY_CALM);
	cr_expect_eq(o.guard, 0);
	cr_expect_eq(o.ceiling, lim - 500 * MIB - reserve / 4);
	cr_expect_eq(o.admit_limit, cap);
	cr_expect(o.period == MEMORY_PERIOD_S);
	/* The job grows by 240 MiB in half a second: the ceiling comes down by
	 * that and by the jump it could make in one fast period (seen at the
	 * slow pace, scaled to it); the cache may fill only up to it, and the
	 * thread samples fast. */
	in.t = 0.5;
	in.mem.pinned = 840 * MIB;
	memory_step(&p, &in, &o);
	double jump = 240.0 * MIB * MEMORY_FAST_S / 0.5;
	uint64_t ceil = lim - 740 * MIB - reserve / 4 - (uint64_t)jump;
	cr_expect_eq(o.ceiling, ceil);
	cr_expect_eq(o.guard, 0);
	cr_expect_eq(o.admit_limit, in.cache_used + (ceil - in.mem.own - MEMORY_GUARD_SLACK));
	cr_expect(o.period == MEMORY_FAST_S);
	/* The daemon filled to 231 MiB (184 of cache, 20 staged) and the job
	 * reached 700: over the ceiling. The excess goes at once: staging's
	 * 20 MiB first, the rest from the cache, rounded up to a MiB. */
	in.t = 0.55;
	in.cache_used = 184 * MIB;
	in.staging_used = 20 * MIB;
	in.staging_max = 64 * MIB;
	in.orders = 1;
	in.mem.own = 231 * MIB;
	in.mem.pinned = 931 * MIB;
	memory_step(&p, &in, &o);
	ceil = o.ceiling;
	cr_expect_lt(ceil, lim - 740 * MIB);
	cr_expect_eq(o.guard, 1);
	cr_expect_eq(o.staging_limit, 0, "staging goes first");
	uint64_t excess = 231 * MIB - ceil + MEMORY_GUARD_SLACK;   /* to the slack under it */
	cr_expect_eq(o.give_back, (excess - 20 * MIB + MIB - 1) / MIB * MIB);
	/* Again 50 ms later, still over (the pages not back yet): it gives
	 * again, with no 2 s spacing. */
	in.t = 0.6;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.guard, 1);
	cr_expect_gt(o.give_back, 0);
	/* Back under the ceiling: no more give-backs, and the cache admits
	 * only up to the slack under the ceiling. */
	in.t = 0.65;
	in.cache_used = 110 * MIB;
	in.staging_used = 0;
	in.mem.own = 137 * MIB;
	in.mem.pinned = 837 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.guard, 0);
	cr_expect_eq(o.give_back, 0);
	cr_expect_gt(o.admit_limit, in.cache_used, "room again: it may grow");
	cr_expect_leq(o.admit_limit, o.ceiling > in.mem.own + MEMORY_GUARD_SLACK ?
		     in.cache_used + o.ceiling - in.mem.own - MEMORY_GUARD_SLACK : 1);
	cr_expect_leq(o.staging_limit, o.ceiling - in.mem.own - MEMORY_GUARD_SLACK);
	/* The job's peak decays slowly: four minutes after the job went back
	 * to 500 MiB, the ceiling has risen by about limit / 4096 a second. */
	for (double t = 1; t <= 241; t += 0.5) {
		in.t = t;
		in.mem.pinned = 500 * MIB + in.mem.own;
		memory_step(&p, &in, &o);
		cr_expect_eq(o.guard, 0, "at %.1f s", t);
	}
	cr_expect_gt(o.ceiling, ceil + 50 * MIB);
	cr_expect_lt(o.ceiling, lim - 500 * MIB - reserve / 4 - MIB);
	/* A daemon with no own figure (memwatch could not read it) has no
	 * ceiling: steps 1-3 alone. */
	memory_policy_init(&p, PAGE_CACHE_AUTO);
	in.mem.own = 0;
	in.mem.pinned = 931 * MIB;
	memory_step(&p, &in, &o);
	cr_expect_eq(o.guard, 0);
	cr_expect_eq(o.ceiling, 0);
}
