"""epochfs._memory on made-up /proc and /sys/fs/cgroup trees: cgroup v1,
v2, the hybrid layout (v1's memory controller beside an empty v2 line), a
container that sees its own cgroup at the root, no limit, and nothing
readable at all. The figures are small and exact, so each rule shows: the
least of MemAvailable and every limited cgroup's room, file pages no
process maps counted free. And the analyzer, which reads memory through
this module, loads neither the timer nor the hook."""
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from epochfs import _memory

MiB = 1 << 20


class Room(unittest.TestCase):
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
