"""epochfs-analyze's step timer on synthetic DataLoaders with known sleeps:
the data wait and the compute of each step are split as they happened (the
wait against the time __getitem__ took, the compute against the time the
loop's body took, each measured by the test itself, within 5%).
Skipped where torch is not installed."""
import os
import shutil
import tempfile
import time
import unittest

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:                     # pragma: no cover
    torch = None

from epochfs import _hook, _records, _timing

PREP = 0.004        # seconds per item in __getitem__
COMPUTE = 0.010     # seconds per step in the training loop
ITEMS, BATCH = 60, 5


if torch is not None:
    class Files(Dataset):
        """Reads a small file and sleeps PREP per item; keeps how long each
        __getitem__ took (with workers=0, in this process)."""

        def __init__(self, files):
            self.files = files
            self.took = []

        def __len__(self):
            return len(self.files)

        def __getitem__(self, i):
            t0 = time.perf_counter()
            with open(self.files[i], "rb") as f:
                f.read()
            time.sleep(PREP)
            self.took.append(time.perf_counter() - t0)
            # 1s where the item was read from a copy in memory (warm run)
            return torch.full((4,), float(self.files[i].startswith("/dev/shm/"))), i


def _on_tmpfs(path):
    """Whether PATH is on a tmpfs (its pages are the file: nothing to drop)."""
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and os.path.realpath(path).startswith(parts[1].rstrip("/") + "/") \
                    and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind == "tmpfs"


@unittest.skipIf(torch is None, "torch is not installed")
class BatchShape(unittest.TestCase):
    def test_first_tensor_like(self):
        class T:
            shape = (64, 3, 224, 224)
            dtype = "torch.float32"
        self.assertEqual(_timing._batch_shape([T(), [1, 2]]), ([64, 3, 224, 224], "float32"))
        self.assertEqual(_timing._batch_shape({"image": T()}), ([64, 3, 224, 224], "float32"))
        self.assertIsNone(_timing._batch_shape([1, 2]))


@unittest.skipIf(torch is None, "torch is not installed")
class Setter(unittest.TestCase):
    def test_points_the_item_read(self):
        # The warm run's setter changes the file of the very item ds[i]
        # reads, through Subset and ConcatDataset, negative indices too;
        # its label stays.
        from torch.utils.data import ConcatDataset, Subset

        class Leaf(Dataset):
            def __init__(self, tag, n):
                self.samples = [("/%s/%d.jpg" % (tag, k), k) for k in range(n)]

            def __len__(self):
                return len(self.samples)

            def __getitem__(self, i):
                return self.samples[i]
        inner = Subset(ConcatDataset([Leaf("a", 3), Subset(Leaf("b", 4), [3, 1, 0])]), [5, 0, 4, 1])
        ds = ConcatDataset([inner, Leaf("c", 2)])
        put = _timing._setter(ds)
        for i in range(-len(ds), len(ds)):
            label = ds[i][1]
            put(i, "/copy/%d.jpg" % i)
            self.assertEqual(ds[i], ("/copy/%d.jpg" % i, label), i)


class WarmSample(unittest.TestCase):
    def test_spread_across_sizes_within_budget(self):
        with tempfile.TemporaryDirectory() as d:
            pool = []
            for k in range(100):            # sizes 1..100 KB, in a shuffled order
                size = ((k * 37) % 100 + 1) * 1000
                path = os.path.join(d, "f%03d" % k)
                with open(path, "wb") as f:
                    f.write(b"x" * size)
                pool.append((k, path))
            got = _timing._sample_by_size(pool, 10, 1 << 30)
            sizes = sorted(os.path.getsize(p) for _, p in got)
            self.assertEqual(len(got), 10)
            # One from each tenth of the sizes: the mean is the pool's.
            self.assertEqual(sizes, [(10 * j + 6) * 1000 for j in range(10)])
            self.assertEqual([i for i, _ in got], sorted(i for i, _ in got))   # the pool's order kept
            # A budget for about half of them: fewer copies, still spread, within it.
            few = _timing._sample_by_size(pool, 10, 300 * 1000)
            self.assertLessEqual(sum(os.path.getsize(p) for _, p in few), 300 * 1000)
            self.assertGreaterEqual(len(few), 4)
            self.assertEqual(len(_timing._sample_by_size(pool, 10, 1)), 1)    # at least one
            self.assertEqual(_timing._sample_by_size([], 10, 1 << 30), [])


class Timing(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="epochfs-timing-")
        self.files = []
        for i in range(ITEMS):
            p = os.path.join(self.dir, "f%03d" % i)
            with open(p, "wb") as f:
                f.write(os.urandom(1000))
            self.files.append(p)
        self.out = os.path.join(self.dir, "rec.jsonl")
        import torch.utils.data.dataloader as dl
        _hook.install(publish=False)
        _hook._patch(dl)

    def tearDown(self):
        if getattr(self, "timer", None) is not None:
            self.timer._clean()
        _hook.set_timer(None)
        shutil.rmtree(self.dir, ignore_errors=True)

    def job(self, mode, workers=0, run_epochs=3, crowd=0, first_extra=0.0, **kw):
        timer = self.timer = _timing.Timer(self.out, mode, exit_when_done=False, workers=crowd, **kw)
        _hook.set_timer(timer)
        ds = self.ds = Files(list(self.files))
        loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers)
        seen = []
        self.flags = []
        self.body = []              # what each step's training took, as measured here
        for _ in range(run_epochs):
            for x, y in loader:
                t0 = time.perf_counter()
                seen.extend(y.tolist())
                self.flags.append(float(x.min()))
                time.sleep(COMPUTE + (first_extra if len(self.body) == 0 else 0.0))
                self.body.append(time.perf_counter() - t0)
        _hook.set_timer(None)
        # Every line the timer wrote is a record of the schema.
        recs, bad = _records.read(self.out)
        self.assertEqual(bad, [])
        return ds, recs, seen

    def window(self, recs):
        w = _records.of_kind(recs, _records.WINDOW)
        self.assertEqual(len(w), 1, recs)
        return w[0]

    def test_as_is_split(self):
        ds, recs, seen = self.job("as-is", warmup=1, epochs=1)
        w = self.window(recs)
        steps = ITEMS // BATCH
        self.assertEqual(w["steps"], steps)
        self.assertEqual(w["items"], ITEMS)
        # epoch 1's items took what __getitem__ measured; the wait holds it
        # and none of the training step. What else it holds (collation, the
        # sampler) is overhead whose size depends on how busy the machine is
        # (24.5 ms for 12 steps on a loaded CI machine), so the bound is half
        # the steps' compute: a wait that took in the step (+120 ms) or
        # counted prep twice (+240 ms) still fails it, noise does not.
        prep = sum(ds.took[ITEMS:2 * ITEMS])
        self.assertGreater(w["wait"], 0.98 * prep, (w, prep))
        self.assertLess(w["wait"] - prep, 0.5 * steps * COMPUTE, (w, prep))
        body = sum(self.body[steps:2 * steps])
        self.assertLess(abs(w["compute"] - body) / body, 0.05, (w, body))
        self.assertGreater(w["compute"], steps * COMPUTE)
        self.assertEqual(sorted(seen[:ITEMS]), list(range(ITEMS)))
        ep = _records.of_kind(recs, _records.EPOCH)
        self.assertFalse(ep[0]["measured"])
        self.assertTrue(ep[1]["measured"])

    def test_first_step_compute(self):
        # A job whose very first step is slow (a GPU's one-time start): the
        # warm run, measured in the process's first epoch, records it; the
        # as-is run's warm-up epoch keeps it out of its window.
        extra = 0.2
        _, recs, _ = self.job("warm", run_epochs=1, first_extra=extra, warm_bytes=20 * 1000)
        w = self.window(recs)
        self.assertEqual(w["first_epoch"], 0)
        self.assertLess(abs(w["first_step_compute"] - self.body[0]) / self.body[0], 0.05, (w, self.body[0]))
        self.assertGreater(w["first_step_compute"], extra)
        os.remove(self.out)
        self.timer._clean()
        _, recs, _ = self.job("as-is", warmup=1, epochs=1, first_extra=extra)
        w = self.window(recs)
        self.assertEqual(w["first_epoch"], 1)
        self.assertLess(w["first_step_compute"], extra / 2)

    def test_steps_window(self):
        _, recs, _ = self.job("as-is", warmup=0, steps=7)
        w = self.window(recs)
        self.assertEqual(w["steps"], 7)
        self.assertFalse(any(r["epoch"] > 0 and r["measured"] for r in _records.of_kind(recs, _records.EPOCH)))

    def test_compute_replays(self):
        ds, recs, seen = self.job("compute", run_epochs=2, replay=2)
        w = self.window(recs)
        # Only the replay batches were fetched; then steps cost compute only.
        self.assertEqual(len(ds.took), 2 * BATCH)
        self.assertLess(w["wait"], 0.1 * w["seconds"], w)
        # Steps 3..12 of epoch 0 were replayed and measured, and no more:
        # the window stays in the epoch whose batches it replays.
        self.assertEqual(w["steps"], ITEMS // BATCH - 2)
        body = sum(self.body[2:2 + w["steps"]])
        # The steps are sleeps, which only overshoot, by up to a
        # millisecond each on a loaded machine (5.04% over 10 steps once,
        # where the bound was 5% both ways).
        self.assertGreater(w["compute"], 0.97 * body, (w, body))
        self.assertLess(w["compute"], 1.05 * body + 0.001 * w["steps"], (w, body))
        # The job's epochs still have their length.
        self.assertEqual(len(seen), 2 * ITEMS)

    def test_compute_stops_the_workers(self):
        # With workers, the replay batches taken, the workers are stopped:
        # nothing more is prepared, and their memory is given back.
        from unittest import mock
        alive = []
        stop = _timing.Timer._stop_workers

        def spy(*its):
            stop(*its)
            for it in its:
                alive.extend(w.is_alive() for w in getattr(it, "_workers", None) or [])
        with mock.patch.object(_timing.Timer, "_stop_workers", staticmethod(spy)):
            self.job("compute", workers=2, run_epochs=1, replay=2)
        self.assertEqual(alive, [False, False])

    def test_warm_points_the_window_at_copies(self):
        _, recs, _ = self.job("warm", run_epochs=1, warm_bytes=20 * 1000)
        warm = _records.of_kind(recs, _records.WARM)[0]
        self.assertTrue(warm["mapped"])
        if warm["method"] != "tmpfs":
            self.skipTest("no /dev/shm here")
        self.assertEqual(warm["files"], 20)                # 20 files x 1,000 bytes fit
        self.assertEqual(warm["bytes"], 20 * 1000)
        self.assertEqual(warm["steps"], ITEMS // BATCH)    # the whole epoch is measured
        self.assertEqual(self.window(recs)["steps"], ITEMS // BATCH)
        # Every item now reads one of the 20 copies; labels are untouched.
        self.assertTrue(all(p.startswith("/dev/shm/") for p in self.ds.files))
        self.assertEqual(len(set(self.ds.files)), 20)
        self.assertEqual(self.flags, [1.0] * (ITEMS // BATCH))
        self.timer._clean()
        self.assertFalse([d for d in os.listdir("/dev/shm") if d.startswith("epochfs-analyze-warm-")])

    def test_warm_reaches_the_workers(self):
        # The copies are made before the workers are forked: they read them.
        _, recs, seen = self.job("warm", workers=2, run_epochs=1, warm_bytes=20 * 1000)
        warm = _records.of_kind(recs, _records.WARM)[0]
        if warm["method"] != "tmpfs":
            self.skipTest("no /dev/shm here")
        self.assertEqual(self.flags, [1.0] * (ITEMS // BATCH))
        self.assertEqual(sorted(seen), list(range(ITEMS)))

    def test_crowd_gives_the_loader_more_workers(self):
        # The warm run with 3 workers for the loader's 1; its items and
        # labels as in any warm run; a worker's memory is recorded.
        _, recs, seen = self.job("crowd", workers=1, run_epochs=1, warm_bytes=20 * 1000, crowd=3)
        start = _records.of_kind(recs, _records.START)[0]
        self.assertEqual((start["mode"], start["workers"], start["workers_asked"]), ("crowd", 3, 1))
        w = self.window(recs)
        self.assertEqual((w["mode"], w["steps"]), ("crowd", ITEMS // BATCH))
        self.assertGreater(w["worker_private_bytes"], 1 << 20)
        self.assertEqual(sorted(seen), list(range(ITEMS)))
        self.assertTrue(_records.of_kind(recs, _records.WARM))

    def test_crowd_alternates_cpus(self):
        # The crowd run's steps alternate between all CPUs and CPU 0 (blocks
        # of 3 here): both phases are timed, and the job ends on all CPUs.
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            self.skipTest("one CPU: nothing to alternate")
        block, settle = _timing.ALT_BLOCK, _timing.ALT_SETTLE
        _timing.ALT_BLOCK, _timing.ALT_SETTLE = 3, 1
        seen_pinned = []
        real_pin = _timing._pin

        def pin(pids, to):
            seen_pinned.append(list(to))
            real_pin(pids, to)
        _timing._pin = pin
        try:
            _, recs, _ = self.job("crowd", workers=2, run_epochs=1, warm_bytes=20 * 1000, crowd=2,
                                  pin_cpus=[cpus[0]])
        finally:
            _timing.ALT_BLOCK, _timing.ALT_SETTLE = block, settle
            _timing._pin = real_pin
        alt = self.window(recs)["alternate"]
        self.assertEqual((alt["cpus_full"], alt["cpus_pinned"]), (len(cpus), 1))
        self.assertGreater(alt["full_steps"], 0)
        self.assertGreater(alt["pinned_steps"], 0)
        self.assertIn([cpus[0]], seen_pinned)
        self.assertEqual(seen_pinned[-1], cpus)             # all CPUs again at the end
        self.assertEqual(sorted(os.sched_getaffinity(0)), cpus)

    def test_crowd_within_memory(self):
        # No memory for one more worker of this size: the loader keeps its own;
        # a loader without workers is never given any.
        _, recs, _ = self.job("crowd", workers=1, run_epochs=1, crowd=3, worker_bytes=1 << 60)
        start = _records.of_kind(recs, _records.START)[0]
        self.assertEqual((start["workers"], start["workers_asked"]), (1, 1))
        self.timer._clean()
        os.unlink(self.out)
        _, recs, _ = self.job("crowd", workers=0, run_epochs=1, crowd=3)
        start = _records.of_kind(recs, _records.START)[0]
        self.assertEqual(start["workers"], 0)

    def test_workers_cpu_counted(self):
        _, recs, _ = self.job("as-is", workers=2, warmup=0, epochs=1)
        w = self.window(recs)
        self.assertEqual(w["steps"], ITEMS // BATCH)
        self.assertGreater(w["worker_cpu"], 0.0)
        start = _records.of_kind(recs, _records.START)[0]
        self.assertEqual(start["workers"], 2)
        self.assertEqual(start["steps_per_epoch"], ITEMS // BATCH)
        self.assertEqual(len(start["files"]), min(_timing.SAMPLE_FILES, ITEMS))

    def test_memory_readings(self):
        # Each end of the window reads the job's memory; the major faults
        # of its workers count, reaped ones too: every item maps a page of
        # its file that is not in memory (dropped first), a major fault in
        # the worker that touches it.
        class Faulting(Files):
            def __getitem__(self, i):
                import mmap
                with open(self.files[i], "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                        m[0]
                return torch.zeros(4), i
        for p in self.files:            # clean pages only can be dropped
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        timer = self.timer = _timing.Timer(self.out, "as-is", warmup=0, epochs=1, exit_when_done=False)
        _hook.set_timer(timer)
        for _ in DataLoader(Faulting(self.files), batch_size=BATCH, num_workers=2):
            pass
        _hook.set_timer(None)
        recs, bad = _records.read(self.out)
        self.assertEqual(bad, [])
        w = self.window(recs)
        for k in ("memory_before", "memory_after"):
            m = w[k]
            self.assertGreater(m["room"], 0)
            self.assertIn(m["psi_scope"], ("cgroup", "machine", None))
        self.assertGreater(w["memory_room_min"], 0)
        self.assertLessEqual(w["memory_room_min"], min(w["memory_before"]["room"], w["memory_after"]["room"]))
        # A file system that keeps its pages (tmpfs) faults less: at least
        # not more than an item each, and none where the pages stay.
        self.assertGreaterEqual(w["major_faults"], 0)
        self.assertLessEqual(w["major_faults"], 4 * ITEMS + 200)
        if not _on_tmpfs(self.dir):
            self.assertGreaterEqual(w["major_faults"], ITEMS // 2, w)
        self.assertIsNone(w["daemon_rss_bytes"])               # no mount

    def test_crowd_constants_match_the_analyzer(self):
        from epochfs import analyze
        self.assertEqual((analyze.CROWD_BLOCK, analyze.CROWD_SETTLE), (_timing.ALT_BLOCK, _timing.ALT_SETTLE))

    def test_same_batches_as_without(self):
        torch.manual_seed(3)
        ds = Files(self.files)
        plain = [y.tolist() for _ in range(2) for _, y in DataLoader(ds, batch_size=BATCH, shuffle=True)]
        after_plain = torch.rand(1).item()
        torch.manual_seed(3)
        _hook.set_timer(_timing.Timer(self.out, "as-is", warmup=1, epochs=1, exit_when_done=False))
        timed = [y.tolist() for _ in range(2) for _, y in DataLoader(ds, batch_size=BATCH, shuffle=True)]
        self.assertEqual(plain, timed)
        self.assertEqual(after_plain, torch.rand(1).item())


if __name__ == "__main__":
    unittest.main()
