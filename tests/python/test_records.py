"""epochfs._records, the step timer's record schema: lines written by the
timer before the schema had a module still read the same (they are kept
here as the timer wrote them); make() refuses what the timer must never
write; parse() and read() refuse a malformed line and say what is wrong with
it; and epochfs-analyze leaves such a line out, saying so, while the rest of
the run's records count. No torch needed."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from epochfs import _records, analyze

# Written by the timer of epochfs 0.2.0 (before _records.py), one of each
# kind and variant; only the sample of file names is shortened.
OLD_LINES = [
    '{"batch_size": 4, "cpus": 2, "dataset": "Files", "dataset_items": 40, "epochs": 1, "ev": "start", "files": '
    '["/tmp/data/f000.bin", "/tmp/data/f001.bin"], "items_per_epoch": 40, "mapped": true, "mean_file_bytes": '
    '1000.0, "mode": "as-is", "persistent_workers": false, "pid": 6022, "steps": 0, "steps_per_epoch": 10, '
    '"warmup": 1, "workers": 2, "workers_asked": null}',
    '{"bytes": 40000, "ev": "warm", "files": 40, "items": 40, "mapped": true, "method": "tmpfs", "of_steps": 10, '
    '"pid": 5935, "seconds": 0.0017815979999795672, "steps": 10}',
    '{"bytes": 0, "ev": "warm", "files": 0, "mapped": false, "pid": 6044, "seconds": 0.0, "steps": 0}',
    '{"complete": true, "compute": 0.03882448000013028, "epoch": 1, "ev": "epoch", "items": 40, "measured": true, '
    '"pid": 6022, "seconds": 0.06614308299958793, "startup": 0.020824357999572385, "steps": 10, '
    '"wait": 0.027318602999457653}',
    '{"complete": true, "compute": 0.04186579300039739, "epoch": 1, "ev": "epoch", "items": 0, "measured": false, '
    '"pid": 6577, "seconds": 0.04186579300039739, "startup": null, "steps": 0, "wait": 0.0}',
    '{"alternate": null, "batch_dtype": "float32", "batch_shape": [4, 3, 4, 4], "complete": true, "compute": '
    '0.03882448000013028, "daemon_cpu": null, "epochs_complete": 1, "ev": "window", "first_epoch": 1, '
    '"first_step_compute": 0.0052111640002294735, "items": 40, "main_cpu": 0.020000000000000018, "mode": "as-is", '
    '"pid": 6022, "seconds": 0.06614308299958793, "skip": 2, "startup_seconds": 0.027311625999573153, '
    '"stats_after": null, "stats_before": null, "steady_seconds": 0.03883145700001478, "steady_steps": 8, '
    '"steps": 10, "wait": 0.027318602999457653, "worker_cpu": 0.04, "worker_private_bytes": 6000640.0}',
    '{"alternate": {"cpus_full": 2, "cpus_pinned": 1, "full_seconds": 0.011855477000153769, "full_steps": 3, '
    '"pinned_seconds": 0.0, "pinned_steps": 0}, "batch_dtype": "float32", "batch_shape": [4, 3, 4, 4], '
    '"complete": true, "compute": 0.030818780999652517, "daemon_cpu": null, "epochs_complete": 0, "ev": "window", '
    '"first_epoch": 0, "first_step_compute": 0.005996668000079808, "items": 40, "main_cpu": 0.020000000000000018, '
    '"mode": "crowd", "pid": 5935, "seconds": 0.07686063400024068, "skip": 3, "startup_seconds": '
    '0.048756836999928055, "stats_after": null, "stats_before": null, "steady_seconds": 0.028103797000312625, '
    '"steady_steps": 7, "steps": 10, "wait": 0.04604185300058816, "worker_cpu": 0.02, '
    '"worker_private_bytes": 6362453.333333333}',
]


def fields_of(line):
    """The fields of an old line, for make(): all but its kind."""
    rec = json.loads(line)
    del rec["ev"]
    return rec


class OldFiles(unittest.TestCase):
    def test_old_lines_read_as_written(self):
        for line in OLD_LINES:
            self.assertEqual(_records.parse(line), json.loads(line), line)

    def test_make_writes_them_again_to_the_byte(self):
        # The timer's format is unchanged: the same fields give the same line.
        for line in OLD_LINES:
            kind = _records.KINDS[json.loads(line)["ev"]]
            self.assertEqual(_records.dumps(kind.make(**fields_of(line))), line + "\n")

    def test_a_mount_windows_counters_and_unknown_fields(self):
        # stats.json's objects as they are; a field a later timer adds is kept.
        w = dict(json.loads(OLD_LINES[5]), stats_before={"reads": 1}, stats_after={"reads": 9}, daemon_cpu=0.5,
                 added_later=[1])
        self.assertEqual(_records.parse(json.dumps(w))["added_later"], [1])


class Make(unittest.TestCase):
    BASE = {"start": 0, "warm": 1, "epoch": 3, "window": 5}        # an old line of each kind

    def make(self, kind, **change):
        """An old line's record of KIND made again with CHANGE (a field
        given as ... is left out)."""
        base = dict(fields_of(OLD_LINES[self.BASE[kind.name]]), **change)
        return kind.make(**{k: v for k, v in base.items() if v is not Ellipsis})

    def assertRefused(self, kind, words, **change):
        with self.assertRaises(_records.RecordError) as e:
            self.make(kind, **change)
        for w in words:
            self.assertIn(w, str(e.exception))

    def test_pid_is_the_writers(self):
        self.assertEqual(self.make(_records.EPOCH, pid=Ellipsis)["pid"], os.getpid())

    def test_refuses_what_the_timer_must_not_write(self):
        self.assertRefused(_records.EPOCH, ["epoch record", "no field 'wait'"], wait=Ellipsis)
        self.assertRefused(_records.EPOCH, ["unknown field 'wiat'"], wiat=0.1)
        self.assertRefused(_records.EPOCH, ["field 'ev' is \"window\""], ev="window")
        self.assertRefused(_records.EPOCH, ["field 'steps' is str", "expected an integer"], steps="10")
        self.assertRefused(_records.EPOCH, ["field 'measured' is int"], measured=1)
        self.assertRefused(_records.EPOCH, ["field 'steps' is bool"], steps=True)
        self.assertRefused(_records.EPOCH, ["field 'seconds' is null"], seconds=None)
        self.assertRefused(_records.START, ["field 'mode' is \"cold\"", "as-is, warm, compute, crowd"], mode="cold")
        self.assertRefused(_records.WINDOW, ["field 'alternate' has no field 'pinned_seconds'"],
                           alternate={"cpus_full": 2, "cpus_pinned": 1, "full_steps": 3, "full_seconds": 1.0,
                                      "pinned_steps": 3})
        # Null where the field allows it, ints for numbers, optional fields left out.
        self.make(_records.EPOCH, startup=None, seconds=2)
        self.make(_records.WINDOW, steady_seconds=Ellipsis, steady_steps=Ellipsis, startup_seconds=Ellipsis)

    def test_every_field_says_what_it_means(self):
        for kind in list(_records.KINDS.values()) + [_records.ALTERNATE]:
            self.assertTrue(kind.meaning)
            for f in kind.fields.values():
                self.assertGreater(len(f.meaning), 6, (kind.name, f.name))


class Malformed(unittest.TestCase):
    def refused(self, line):
        with self.assertRaises(_records.RecordError) as e:
            _records.parse(line)
        return str(e.exception)

    def test_each_fault_named(self):
        self.assertIn("not JSON", self.refused('{"ev": "epoch", '))
        self.assertIn("not a JSON object but list", self.refused('[1, 2]'))
        self.assertIn('no "ev" field', self.refused('{"steps": 3}'))
        self.assertIn('"ev" is "lap"', self.refused('{"ev": "lap"}'))
        self.assertIn("kinds: start, warm, epoch, window", self.refused('{"ev": 3}'))
        epoch = json.loads(OLD_LINES[3])
        del epoch["wait"], epoch["items"]
        msg = self.refused(json.dumps(dict(epoch, steps="ten")))
        self.assertEqual(msg, "epoch record: no fields 'wait', 'items'; field 'steps' is str (\"ten\"), "
                              "expected an integer")

    def test_read_keeps_the_good_and_names_the_bad_lines(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            with open(path, "w") as f:
                f.write(OLD_LINES[0] + "\n\n" + '{"ev": "window"}\n' + OLD_LINES[3] + "\n" + OLD_LINES[5][:50])
            recs, bad = _records.read(path)
            self.assertEqual([r["ev"] for r in recs], ["start", "epoch"])
            self.assertEqual(len(bad), 2)
            self.assertTrue(bad[0].startswith("line 3: window record: no fields 'pid', 'mode', 'complete'"), bad)
            self.assertTrue(bad[1].startswith("line 5: not JSON"), bad)
            self.assertEqual(_records.read(os.path.join(d, "none")), ([], []))
        self.assertIs(_records.first(recs, _records.EPOCH), recs[1])
        self.assertIsNone(_records.first(recs, _records.WARM))
        self.assertEqual(_records.of_kind(recs, _records.START), recs[:1])


class AnalyzerReads(unittest.TestCase):
    def test_run_mode_leaves_a_bad_line_out_and_says_so(self):
        # A job whose timer wrote one good record and one cut short: the
        # analyzer keeps the good one and names the other, even with -q.
        job = ("import os; f = open(os.environ['EPOCHFS_ANALYZE_OUT'], 'a'); "
               "f.write(%r + '\\n' + %r)" % (OLD_LINES[0], OLD_LINES[5][:40]))
        opts = {"warmup": 1, "epochs": 1, "steps": 0, "warm_mb": 1, "order": False,
                "command": [sys.executable, "-c", job]}
        r = subprocess.run([sys.executable, "-c", "import sys, json; from epochfs import analyze; "
                            "rc, recs = analyze.run_mode(json.loads(sys.argv[1]), 'as-is', None, {}, lambda s: None); "
                            "print(rc, [r['ev'] for r in recs])", json.dumps(opts)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(analyze.__file__))))
        self.assertEqual(r.stdout, "0 ['start']\n", r.stderr)
        self.assertRegex(r.stderr, r"^epochfs-analyze: the as-is run's records, line 2: not JSON \(.*\); "
                                   r"line left out\n$")


if __name__ == "__main__":
    unittest.main()
