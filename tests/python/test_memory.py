"""epochfs._memory on made-up /proc and /sys/fs/cgroup trees: cgroup v1,
v2, the hybrid layout (v1's memory controller beside an empty v2 line), a
container that sees its own cgroup at the root, no limit, and nothing
readable at all. The figures are small and exact, so each rule shows: the
least of MemAvailable and every limited cgroup's room, file pages no
process maps counted free. The pressure readings (snapshot(): the
cgroup's refaults and major faults, PSI of the job's own v2 cgroup or of
the machine), a process's major faults and resident memory, and whether
the daemon shares the job's cgroup. And the analyzer, which reads memory
through this module, loads neither the timer nor the hook."""
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from epochfs import _memory

MiB = 1 << 20


class Tree(unittest.TestCase):
    """A made-up /proc and /sys/fs/cgroup, and ways to fill them."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="epochfs-memory-")
        self.proc = os.path.join(self.dir, "proc")
        self.root = os.path.join(self.dir, "cgroup")
        os.makedirs(os.path.join(self.proc, "self"))
        os.makedirs(self.root)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def meminfo(self, avail_mib):
        self.write(os.path.join(self.proc, "meminfo"),
                   "MemTotal:       99999999 kB\nMemAvailable:   %d kB\n" % (avail_mib * 1024))

    def self_cgroup(self, *lines):
        self.write(os.path.join(self.proc, "self", "cgroup"), "".join(x + "\n" for x in lines))

    def v1(self, rel, limit, usage, active=0, inactive=0, mapped=0):
        d = os.path.join(self.root, "memory", rel.lstrip("/"))
        self.write(os.path.join(d, "memory.limit_in_bytes"), "%d\n" % limit)
        self.write(os.path.join(d, "memory.usage_in_bytes"), "%d\n" % usage)
        self.write(os.path.join(d, "memory.stat"), "cache 1\ntotal_active_file %d\ntotal_inactive_file %d\n"
                   "total_mapped_file %d\n" % (active, inactive, mapped))

    def v2(self, rel, limit, usage, active=0, inactive=0, mapped=0):
        d = os.path.join(self.root, rel.lstrip("/"))
        self.write(os.path.join(d, "memory.max"), "max\n" if limit is None else "%d\n" % limit)
        self.write(os.path.join(d, "memory.current"), "%d\n" % usage)
        self.write(os.path.join(d, "memory.stat"), "anon 5\nactive_file %d\ninactive_file %d\nfile_mapped %d\n"
                   % (active, inactive, mapped))

    def room(self):
        return _memory.room(self.proc, self.root)


class Room(Tree):
    def test_v2_limit_less_usage_unmapped_files_free(self):
        self.meminfo(10000)
        self.self_cgroup("0::/job.slice/a")
        # 1 GiB limit, 900 MiB used of which 300 MiB file pages, 100 MiB of them mapped.
        self.v2("/job.slice/a", 1024 * MiB, 900 * MiB, active=200 * MiB, inactive=100 * MiB, mapped=100 * MiB)
        self.assertEqual(self.room(), (1024 - 900 + 200) * MiB)
        got = _memory.cgroups(self.proc, self.root)
        self.assertEqual([(c["version"], c["limit"], c["unmapped_file"]) for c in got],
                         [(2, 1024 * MiB, 200 * MiB)])

    def test_v1_and_the_machine_the_least_wins(self):
        self.meminfo(100)
        self.self_cgroup("5:cpu,cpuacct:/x", "4:memory:/job/a", "0::/")
        self.v1("/job/a", 1024 * MiB, 512 * MiB, inactive=64 * MiB)
        self.assertEqual(self.room(), 100 * MiB)            # the machine has less than the cgroup allows
        self.meminfo(10000)
        self.assertEqual(self.room(), (512 + 64) * MiB)     # the hybrid's "0::/" has no memory.max: left out

    def test_no_limit_is_the_machines(self):
        self.meminfo(3000)
        self.self_cgroup("0::/a")
        self.v2("/a", None, 900 * MiB)
        self.assertEqual(self.room(), 3000 * MiB)
        self.self_cgroup("4:memory:/a")
        self.v1("/a", 9223372036854771712, 900 * MiB)      # v1's "no limit"
        self.assertEqual(self.room(), 3000 * MiB)

    def test_container_sees_its_cgroup_at_the_root(self):
        # /proc/self/cgroup names the host's path; the mount shows this
        # cgroup at its root.
        self.meminfo(10000)
        self.self_cgroup("4:memory:/docker/0123abcd")
        self.v1("/", 256 * MiB, 56 * MiB)
        self.assertEqual(self.room(), 200 * MiB)

    def test_nothing_readable(self):
        self.assertEqual(self.room(), _memory.UNKNOWN_ROOM)
        self.self_cgroup("0::/gone")
        self.write(os.path.join(self.root, "gone", "memory.max"), "not a number\n")
        self.assertEqual(_memory.cgroups(self.proc, self.root), [])
        self.assertEqual(self.room(), _memory.UNKNOWN_ROOM)

    def test_this_machine(self):
        # Whatever this machine is: a positive number of bytes, no exception.
        self.assertGreater(_memory.room(), 0)


class Pressure(Tree):
    """snapshot(), faults(), rss() and same_cgroup() on made-up trees: what
    the timer reads at each end of a window."""

    PSI = "some avg10=1.00 avg60=0.50 avg300=0.10 total=%d\nfull avg10=0.20 avg60=0.10 avg300=0.00 total=%d\n"

    def v1_stat(self, rel, majflt, refault_file, refault_anon=None, old_kernel=False):
        d = os.path.join(self.root, "memory", rel.lstrip("/"))
        refaults = ("total_workingset_refault %d\n" % refault_file if old_kernel else
                    "total_workingset_refault_file %d\ntotal_workingset_refault_anon %d\n"
                    % (refault_file, refault_anon or 0))
        self.write(os.path.join(d, "memory.stat"), "cache 1\npgmajfault 1\ntotal_pgmajfault %d\n%s"
                   "total_inactive_file %d\ntotal_active_file 0\ntotal_mapped_file 0\n"
                   % (majflt, refaults, 8 * MiB))

    def test_v1_with_the_machines_pressure(self):
        # cgroup v1 (the job in the v2 root): the cgroup's counters, the
        # machine's PSI.
        self.meminfo(10000)
        self.self_cgroup("4:memory:/job", "0::/")
        self.v1("/job", 700 * MiB, 690 * MiB)
        self.v1_stat("/job", majflt=1084, refault_file=5000, refault_anon=7)
        self.write(os.path.join(self.proc, "pressure", "memory"), self.PSI % (2500000, 400000))
        os.makedirs(os.path.join(self.root, "unified"))
        self.write(os.path.join(self.root, "unified", "cgroup.controllers"), "")
        self.write(os.path.join(self.root, "unified", "memory.pressure"), self.PSI % (1, 1))
        got = _memory.snapshot(self.proc, self.root)
        self.assertEqual((got["version"], got["limit"], got["usage"]), (1, 700 * MiB, 690 * MiB))
        self.assertEqual((got["major_faults"], got["refaults"]), (1084, 5007))
        self.assertEqual(got["room"], (700 - 690 + 8) * MiB)
        self.assertEqual((got["psi_scope"], got["psi_some_us"], got["psi_full_us"]), ("machine", 2500000, 400000))
        # A kernel before 5.9: one refault counter.
        self.v1_stat("/job", majflt=3, refault_file=42, old_kernel=True)
        self.assertEqual(_memory.snapshot(self.proc, self.root)["refaults"], 42)

    def test_hybrid_a_v2_cgroup_of_its_own(self):
        # v1's memory controller, and the job in a cgroup of the unified
        # hierarchy too (tools/bench/stalls.sh does this): its own PSI.
        self.meminfo(10000)
        self.self_cgroup("4:memory:/job", "0::/job")
        self.v1("/job", 700 * MiB, 600 * MiB)
        uni = os.path.join(self.root, "unified")
        self.write(os.path.join(uni, "cgroup.controllers"), "")
        self.write(os.path.join(uni, "job", "memory.pressure"), self.PSI % (300, 100))
        self.write(os.path.join(self.proc, "pressure", "memory"), self.PSI % (9999999, 9999999))
        got = _memory.snapshot(self.proc, self.root)
        self.assertEqual((got["psi_scope"], got["psi_dir"]), ("cgroup", os.path.join(uni, "job")))
        self.assertEqual((got["psi_some_us"], got["psi_full_us"]), (300, 100))

    def test_v2_the_cgroups_pressure(self):
        self.meminfo(10000)
        self.self_cgroup("0::/job.slice/a")
        self.v2("/job.slice/a", 1024 * MiB, 1000 * MiB)
        d = os.path.join(self.root, "job.slice", "a")
        self.write(os.path.join(self.root, "cgroup.controllers"), "memory\n")
        self.write(os.path.join(d, "memory.stat"), "anon 5\nfile_mapped 0\npgmajfault 12\n"
                   "workingset_refault_file 30\nworkingset_refault_anon 2\n")
        self.write(os.path.join(d, "memory.pressure"), self.PSI % (5000, 0))
        got = _memory.snapshot(self.proc, self.root)
        self.assertEqual((got["version"], got["major_faults"], got["refaults"]), (2, 12, 32))
        self.assertEqual((got["psi_scope"], got["psi_some_us"], got["psi_full_us"]), ("cgroup", 5000, 0))
        # No limit: none, and the room is the machine's.
        self.v2("/job.slice/a", None, 1000 * MiB)
        got = _memory.snapshot(self.proc, self.root)
        self.assertIsNone(got["limit"])
        self.assertEqual(got["room"], 10000 * MiB)

    def test_container_sees_its_v2_cgroup_at_the_root(self):
        self.meminfo(10000)
        self.self_cgroup("0::/kubepods/pod1/c1")
        self.v2("/", 512 * MiB, 500 * MiB)
        self.write(os.path.join(self.root, "cgroup.controllers"), "memory\n")
        self.write(os.path.join(self.root, "memory.pressure"), self.PSI % (70, 7))
        got = _memory.snapshot(self.proc, self.root)
        self.assertEqual((got["limit"], got["psi_scope"], got["psi_some_us"]), (512 * MiB, "cgroup", 70))

    def test_nothing_readable(self):
        got = _memory.snapshot(self.proc, self.root)
        self.assertIsNone(got["version"])
        self.assertIsNone(got["psi_scope"])
        self.assertIsNone(_memory.pressure(os.path.join(self.proc, "pressure", "memory")))
        self.write(os.path.join(self.proc, "pressure", "memory"), "garbage\n")
        self.assertIsNone(_memory.pressure(os.path.join(self.proc, "pressure", "memory")))

    def test_faults_rss_and_the_daemons_cgroup(self):
        # /proc/PID/stat: majflt and cmajflt are fields 12 and 13 (a comm
        # with spaces and parentheses in it must not shift them).
        self.write(os.path.join(self.proc, "77", "stat"),
                   "77 (python3 (x) y) S 1 77 77 0 -1 4194560 500 600 31 45 120 30 0 0 20 0 3 0\n")
        self.write(os.path.join(self.proc, "77", "status"), "Name:\tpython3\nVmRSS:\t  204800 kB\n")
        self.assertEqual(_memory.faults(77, self.proc), (31, 45))
        self.assertEqual(_memory.rss(77, self.proc), 200 * MiB)
        self.assertIsNone(_memory.faults(78, self.proc))
        self.assertIsNone(_memory.rss(78, self.proc))
        # The daemon in the job's memory cgroup, then in one of its own.
        self.self_cgroup("4:memory:/job")
        self.write(os.path.join(self.proc, "77", "cgroup"), "4:memory:/job\n")
        self.v1("/job", 700 * MiB, 600 * MiB)
        self.v1("/daemon", 300 * MiB, 200 * MiB)
        self.assertIs(_memory.same_cgroup(77, self.proc, self.root), True)
        self.write(os.path.join(self.proc, "77", "cgroup"), "4:memory:/daemon\n")
        self.assertIs(_memory.same_cgroup(77, self.proc, self.root), False)
        self.assertIsNone(_memory.same_cgroup(79, self.proc, self.root))


class Layering(unittest.TestCase):
    def test_the_analyzer_loads_no_part_of_the_job(self):
        # epochfs-analyze reads memory and records through modules of their
        # own: the timer and the hook, which live in the job, stay out.
        code = "import sys, epochfs.analyze; print(sorted(m for m in sys.modules if m.startswith('epochfs.')))"
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(_memory.__file__))))
        loaded = ast.literal_eval(r.stdout)
        self.assertIn("epochfs._memory", loaded)
        self.assertIn("epochfs._records", loaded)
        self.assertNotIn("epochfs._timing", loaded)
        self.assertNotIn("epochfs._hook", loaded)


if __name__ == "__main__":
    unittest.main()
