"""The order hook's parts, one at a time, with real torch and torchvision
(skipped without them):

- the timer's interface (set_timer, current_timer): told of every epoch of
  every iterator, persistent workers too, and its next() in place of the
  iterator's __next__;
- _reading_order: its rule (batch b to worker b mod W, the J-th items of a
  round's batches read together) by hand, then against DataLoaders with
  several workers whose items record which worker read them and when: the
  order the hook tells is the order the files are opened in, to within
  the workers' number of places, where the plain batch order is off by
  many more;
- _resolver: the path it gives for an index is the one the dataset's own
  __getitem__ opens, for ImageFolder, DatasetFolder, samples/imgs/files of
  several shapes, Subset (lists and tensors of indices), ConcatDataset and
  their nestings, negative indices included; what it cannot map is None.
"""
import os
import pathlib
import shutil
import tempfile
import time
import types
import unittest
import warnings

try:
    import torch
    from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset, random_split
except ImportError:                     # pragma: no cover
    torch = None
try:
    from torchvision.datasets import DatasetFolder, ImageFolder
except ImportError:                     # pragma: no cover
    ImageFolder = None

from epochfs import _hook

ITEM_S = 0.03           # a worker's time per item: long beside a worker's start and a batch's hand-over


def workers(n):
    """An iterator as _reading_order sees one: its worker count."""
    return types.SimpleNamespace(_num_workers=n)


class ReadingOrderRule(unittest.TestCase):
    def test_one_worker_or_none_reads_in_batch_order(self):
        batches = [[5, 1], [4, 0], [3]]
        for w in (0, 1):
            self.assertEqual(_hook._reading_order(workers(w), batches), [5, 1, 4, 0, 3])
        self.assertEqual(_hook._reading_order(types.SimpleNamespace(), batches), [5, 1, 4, 0, 3])

    def test_rounds_interleaved_item_by_item(self):
        # 3 workers: round 0 is batches 0, 1, 2 (one each), read side by
        # side; round 1 is batches 3 and 4, and worker 2 has none.
        batches = [[0, 1, 2], [10, 11, 12], [20, 21, 22], [30, 31, 32], [40, 41]]
        self.assertEqual(_hook._reading_order(workers(3), batches),
                         [0, 10, 20, 1, 11, 21, 2, 12, 22, 30, 40, 31, 41, 32])

    def test_unbatched_indices_as_they_are(self):
        # batch_size=None: each index is its own "batch", one per worker in
        # turn, which is the order itself.
        self.assertEqual(_hook._reading_order(workers(4), [7, 3, 9, 1, 2]), [7, 3, 9, 1, 2])
        self.assertEqual(_hook._reading_order(workers(4), []), [])

    def test_every_index_once(self):
        batches = [list(range(k, k + 5)) for k in range(0, 53, 5)]
        for w in range(2, 7):
            got = _hook._reading_order(workers(w), batches)
            self.assertEqual(sorted(got), sorted(i for b in batches for i in b), w)


if torch is not None:
    class Stamped(Dataset):
        """N items; each records which worker read it and when it began
        (CLOCK_MONOTONIC: one clock for every process of the machine).
        start() is the loader's worker_init_fn: WORKERS workers begin
        together, so that a worker forked late on a busy machine does not
        read a whole epoch a file behind (what the test checks is the order
        of the reads, not how fast a process starts)."""

        def __init__(self, n, workers):
            import multiprocessing
            self.n = n
            self.together = multiprocessing.get_context("fork").Barrier(workers)

        def start(self, worker_id):
            self.together.wait(timeout=30)

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            t0 = time.monotonic()
            info = torch.utils.data.get_worker_info()
            time.sleep(ITEM_S)
            return i, -1 if info is None else info.id, t0


@unittest.skipIf(torch is None, "torch is not installed")
class ReadingOrderOfRealWorkers(unittest.TestCase):
    N, BATCH, WORKERS = 68, 10, 3       # 7 batches: rounds of 3, 3 and 1, the last batch short

    def order(self):
        g = torch.Generator()
        g.manual_seed(5)
        return torch.randperm(self.N, generator=g).tolist()

    def batches(self):
        perm = self.order()
        return [perm[k:k + self.BATCH] for k in range(0, self.N, self.BATCH)]

    def epoch(self, it):
        """(batches as read: [(index, worker, start time)] each)."""
        out = []
        for idx, worker, t0 in it:
            out.append(list(zip(idx.tolist(), worker.tolist(), t0.tolist())))
        return out

    def displacement(self, order, read):
        """How many places, on average, an index's read is from where ORDER
        puts it."""
        pos = {i: k for k, i in enumerate(order)}
        return sum(abs(pos[i] - k) for k, i in enumerate(read)) / len(read)

    def check_epoch(self, it, got):
        batches = self.batches()
        W = self.WORKERS
        self.assertEqual([[i for i, _, _ in b] for b in got], batches)
        # The premise: batch b is worker b mod W's.
        self.assertEqual([{w for _, w, _ in b} for b in got], [{b % W} for b in range(len(batches))])
        read = [i for i, _, _ in sorted((x for b in got for x in b), key=lambda x: x[2])]
        told = _hook._reading_order(it, batches)
        plain = [i for b in batches for i in b]
        off, plain_off = self.displacement(told, read), self.displacement(plain, read)
        # The J-th items of a round are read together, in whatever order the
        # workers happen to run: under a place off on average (1 at most when
        # the machine is calm; a worker kept off a busy CPU for an item lags
        # by W places for a while), where the batches one after another are
        # off by 5 to 7 here (the J-th item of worker K's batch by
        # |J (W - 1) - K (BATCH - 1)|). Averages, so that a busy machine's
        # moment does not fail the test.
        self.assertLessEqual(off, W, (told, read))
        self.assertGreaterEqual(plain_off, off + W, (plain, read))

    def setUp(self):
        # More workers than this machine's CPUs is the point: torch's advice not to is not.
        self.quiet = warnings.catch_warnings()
        self.quiet.__enter__()
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)

    def tearDown(self):
        self.quiet.__exit__(None, None, None)

    def test_the_order_told_is_the_order_read(self):
        ds = Stamped(self.N, self.WORKERS)
        loader = DataLoader(ds, batch_size=self.BATCH, sampler=self.order(), num_workers=self.WORKERS,
                            worker_init_fn=ds.start, multiprocessing_context="fork")
        it = iter(loader)
        self.assertEqual(it._num_workers, self.WORKERS)         # the attribute the hook reads
        self.check_epoch(it, self.epoch(it))

    def test_persistent_workers_start_each_epoch_at_worker_0(self):
        ds = Stamped(self.N, self.WORKERS)
        loader = DataLoader(ds, batch_size=self.BATCH, sampler=self.order(), num_workers=self.WORKERS,
                            worker_init_fn=ds.start, multiprocessing_context="fork", persistent_workers=True)
        for _ in range(2):
            it = iter(loader)
            self.check_epoch(it, self.epoch(it))


@unittest.skipIf(torch is None, "torch is not installed")
class Timer(unittest.TestCase):
    class Recorder:
        """A timer that records the calls and leaves every batch as it is."""

        def __init__(self):
            self.calls = []

        def epoch_start(self, it, loader):
            self.calls.append(("epoch", id(it), loader))

        def next(self, it, orig):
            try:
                b = orig(it)
            except StopIteration:
                self.calls.append(("end", id(it)))
                raise
            self.calls.append(("next", id(it)))
            return b

    def setUp(self):
        _hook.install(publish=False)

    def tearDown(self):
        _hook.set_timer(None)

    def test_set_and_current(self):
        a, b = self.Recorder(), self.Recorder()
        self.assertIsNone(_hook.set_timer(a))
        self.assertIs(_hook.current_timer(), a)
        self.assertIs(_hook.set_timer(b), a)
        self.assertIs(_hook.set_timer(None), b)
        self.assertIsNone(_hook.current_timer())
        _hook.install(publish=False, timer=a)
        self.assertIs(_hook.current_timer(), a)

    def test_told_of_every_epoch_and_step(self):
        data = list(range(10))
        for kw in ({"num_workers": 0}, {"num_workers": 2, "persistent_workers": True}):
            t = self.Recorder()
            _hook.set_timer(t)
            loader = DataLoader(data, batch_size=4, **kw)
            seen = [[x.tolist() for x in loader] for _ in range(2)]
            self.assertEqual(seen, [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]] * 2, kw)
            epochs = [c for c in t.calls if c[0] == "epoch"]
            self.assertEqual(len(epochs), 2, kw)
            self.assertTrue(all(c[2] is loader for c in epochs))
            if kw.get("persistent_workers"):
                self.assertEqual(epochs[0][1], epochs[1][1])     # one iterator, started again
            self.assertEqual([c[0] for c in t.calls], ["epoch", "next", "next", "next", "end"] * 2, kw)
        # Disarmed: nothing is told.
        _hook.set_timer(None)
        self.assertEqual([x.tolist() for x in DataLoader(data, batch_size=5)], [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
        self.assertEqual(len(t.calls), 10)


class TimerFailures(unittest.TestCase):
    """A timer that fails is the hook's failure, never the job's: it is
    disarmed with one line on stderr and every batch still comes, in
    order; torch's own exceptions and a timer's StopIteration pass as
    they are."""

    class Failing:
        def __init__(self, where, after=0):
            self.where, self.after, self.steps = where, after, 0

        def epoch_start(self, it, loader):
            if self.where == "start":
                raise OSError(28, "No space left on device")

        def next(self, it, orig):
            self.steps += 1
            if self.where == "before" and self.steps > self.after:
                raise ValueError("before the fetch")
            b = orig(it)
            if self.where == "after" and self.steps > self.after:
                raise KeyError("after the fetch")
            return b

    def setUp(self):
        _hook.install(publish=False)
        _hook._reported.clear()

    def tearDown(self):
        _hook.set_timer(None)

    def run_loader(self, timer, **kw):
        import contextlib
        import io
        _hook.set_timer(timer)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            seen = [[x.tolist() for x in DataLoader(list(range(10)), batch_size=4, **kw)] for _ in range(2)]
        return seen, err.getvalue()

    @unittest.skipIf(torch is None, "needs torch")
    def test_every_batch_comes_whatever_the_timer_does(self):
        want = [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]] * 2
        for where, after in (("start", 0), ("before", 1), ("after", 0), ("after", 2)):
            for kw in ({}, {"num_workers": 2}):
                t = self.Failing(where, after)
                _hook._reported.clear()
                seen, err = self.run_loader(t, **kw)
                self.assertEqual(seen, want, (where, after, kw))
                self.assertIsNone(_hook.current_timer(), "a failed timer is disarmed")
                self.assertEqual(err.count("the step timer failed"), 1, err)

    @unittest.skipIf(torch is None, "needs torch")
    def test_torch_errors_and_the_timers_stop_pass_through(self):
        class Bad(Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                raise RuntimeError("the dataset's own")

        class Passing:
            def epoch_start(self, it, loader):
                pass

            def next(self, it, orig):
                return orig(it)

        _hook.set_timer(Passing())
        with self.assertRaisesRegex(RuntimeError, "the dataset's own"):
            next(iter(DataLoader(Bad(), batch_size=2)))
        self.assertIsNotNone(_hook.current_timer(), "the job's error is not the timer's")

        class Short(Passing):
            def next(self, it, orig):
                if it._num_yielded >= 1:
                    raise StopIteration     # a replayed epoch ends here
                return orig(it)

        _hook.set_timer(Short())
        self.assertEqual([x.tolist() for x in DataLoader(list(range(10)), batch_size=4)], [[0, 1, 2, 3]])
        self.assertIsNotNone(_hook.current_timer())


@unittest.skipIf(torch is None or ImageFolder is None, "torch or torchvision is not installed")
class Resolver(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="epochfs-resolver-")
        for cls_name, n in (("cat", 3), ("dog", 4), ("eel", 2)):
            os.makedirs(os.path.join(cls.root, "a", cls_name))
            for k in range(n):
                open(os.path.join(cls.root, "a", cls_name, "%d.jpg" % k), "wb").close()
        os.makedirs(os.path.join(cls.root, "b", "x"))
        for k in range(5):
            open(os.path.join(cls.root, "b", "x", "%d.npy" % k), "wb").close()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def folder(self, sub="a"):
        # The loader returns the path it is given: ds[i][0] is the file
        # __getitem__ opens.
        return ImageFolder(os.path.join(self.root, sub), loader=lambda p: p)

    def assertResolvesAsRead(self, ds):
        """For every index, negative ones too, the path the resolver gives
        is the one ds[i] reads."""
        resolve = _hook._resolver(ds)
        self.assertIsNotNone(resolve, type(ds).__name__)
        n = len(ds)
        self.assertGreater(n, 0)
        for i in range(-n, n):
            self.assertEqual(resolve(i), ds[i][0], "%s[%d]" % (type(ds).__name__, i))
        return resolve

    def test_image_and_dataset_folder(self):
        self.assertResolvesAsRead(self.folder())
        npy = DatasetFolder(os.path.join(self.root, "b"), loader=lambda p: p, extensions=(".npy",))
        self.assertResolvesAsRead(npy)

    def test_samples_imgs_files_of_every_shape(self):
        class Leaf(Dataset):
            def __init__(self, attr, entries):
                setattr(self, attr, entries)
                self.entries = entries

            def __len__(self):
                return len(self.entries)

            def __getitem__(self, i):
                e = self.entries[i]
                p = e if isinstance(e, (str, bytes, os.PathLike)) else e[0]
                return os.fsdecode(p), 0
        paths = ["/d/%d.jpg" % k for k in range(4)]
        for attr in ("samples", "imgs", "files"):
            for entries in (paths, [(p, 1) for p in paths], [[p, 1] for p in paths], tuple(paths),
                            [os.fsencode(p) for p in paths], [pathlib.Path(p) for p in paths]):
                resolve = self.assertResolvesAsRead(Leaf(attr, entries))
                self.assertEqual(resolve(2), "/d/2.jpg")
                self.assertIsInstance(resolve(2), str)

    def test_what_it_cannot_map(self):
        class Numbers(Dataset):
            samples = [(1, 0), (2, 0)]

            def __len__(self):
                return 2

        class Empty(Dataset):
            samples = []

        class Nothing(Dataset):
            pass
        for ds in (Numbers(), Empty(), Nothing(), list(range(3))):
            self.assertIsNone(_hook._resolver(ds), ds)
        # A part that cannot be mapped: the whole cannot.
        self.assertIsNone(_hook._resolver(ConcatDataset([self.folder(), Numbers()])))
        self.assertIsNone(_hook._resolver(Subset(Nothing(), [0])))

    def test_subset(self):
        ds = self.folder()
        self.assertResolvesAsRead(Subset(ds, [8, 0, 3, 3]))
        self.assertResolvesAsRead(Subset(ds, torch.tensor([2, 7, 1])))          # a tensor of indices
        g = torch.Generator().manual_seed(1)
        for part in random_split(ds, [6, 3], generator=g):
            self.assertResolvesAsRead(part)

    def test_concat_and_nestings(self):
        a, b = self.folder("a"), DatasetFolder(os.path.join(self.root, "b"), loader=lambda p: p,
                                               extensions=(".npy",))
        cat = ConcatDataset([a, b, Subset(a, [4, 5])])
        self.assertResolvesAsRead(cat)
        self.assertEqual(_hook._resolver(cat)(len(a)), b.samples[0][0])       # the boundary
        self.assertResolvesAsRead(Subset(cat, [0, len(a) - 1, len(a), len(cat) - 1, -1]))
        self.assertResolvesAsRead(ConcatDataset([Subset(cat, list(range(len(cat)))[::-1]), cat]))


if __name__ == "__main__":
    unittest.main()


class StreamNames(unittest.TestCase):
    """The order directory is shared by every user (1777): a stream name
    another user holds (EACCES) gives way to one of our own, kept for the
    later epochs."""

    class Loader:
        pass

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.dir, ".epochfs", "order"))
        self.opened = []
        self.real = _hook.publish_order

        def publish(mnt, name, rels, keep=False):
            self.opened.append(name)
            if name == self.taken:
                raise PermissionError(13, "Permission denied")
            return self.real(mnt, name, rels, keep=keep)
        _hook.publish_order = publish
        self.taken = None

    def tearDown(self):
        _hook.publish_order = self.real
        shutil.rmtree(self.dir)

    def publish(self, loader):
        it = workers(0)
        _hook._publish(it, loader, [0, 1], lambda i: os.path.join(self.dir, "f%d" % i),
                       lambda p: (self.dir, os.path.relpath(p, self.dir)))

    def test_a_name_held_by_another_user_gives_way(self):
        loader = self.Loader()
        self.taken = _hook._stream_name(loader)
        self.publish(loader)
        self.assertEqual(self.opened[0], self.taken)
        own = self.opened[1]
        self.assertTrue(own.startswith(self.taken[:40] + "-u%d-" % os.getuid()), own)
        with open(os.path.join(self.dir, ".epochfs", "order", own)) as f:
            self.assertEqual(f.read(), "f0\nf1\n")
        self.publish(loader)                    # the next epoch: straight to our own name
        self.assertEqual(self.opened[2:], [own])
        for fd in _hook._meter_of(loader)["fds"].values():
            os.close(fd)
        _hook._meter_of(loader)["fds"].clear()


class DeclaredBatches(unittest.TestCase):
    """The loader's word to the daemon: workers x prefetch_factor x a
    batch's bytes, once, on every stream it writes orders to."""

    def meter_with_pipe(self):
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        loader = types.SimpleNamespace(_epochfs_meter={"fds": {"/m": w}})
        return r, loader

    @unittest.skipIf(torch is None, "needs torch")
    def test_batch_bytes_counts_nested_tensors(self):
        x = torch.zeros(64, 3, 224, 224)
        y = torch.zeros(64, dtype=torch.int64)
        self.assertEqual(_hook.batch_bytes((x, y)), 64 * 3 * 224 * 224 * 4 + 64 * 8)
        self.assertEqual(_hook.batch_bytes({"a": [x], "b": "text", "c": 3}), 64 * 3 * 224 * 224 * 4)

    def test_said_once_with_workers_and_prefetch(self):
        r, loader = self.meter_with_pipe()
        batch = (types.SimpleNamespace(nbytes=1000), [types.SimpleNamespace(nbytes=24)])
        it = types.SimpleNamespace(_epochfs_loader=loader, _num_workers=4, _prefetch_factor=3)
        _hook._declare_batches(it, batch)
        _hook._declare_batches(it, batch)
        os.close(loader._epochfs_meter["fds"].pop("/m"))
        self.assertEqual(os.read(r, 100), b"#batches 12288\n")
        self.assertEqual(loader._epochfs_meter["batches"], 12288)

    def test_what_it_cannot_size_counts_nothing(self):
        class Raising:
            @property
            def nbytes(self):
                raise RuntimeError("a lazy tensor of the job's own")

        loop = []
        loop.append(loop)
        deep = [types.SimpleNamespace(nbytes=5)]
        for _ in range(20):
            deep = [deep]
        self.assertEqual(_hook.batch_bytes((Raising(), "text", 3, None, loop, deep)), 0)
        self.assertEqual(_hook.batch_bytes([types.SimpleNamespace(nbytes=5)] * 3), 15)

    def test_a_failing_report_ends_the_reports_not_the_step(self):
        import contextlib
        import io
        r, loader = self.meter_with_pipe()
        w = loader._epochfs_meter["fds"]["/m"]
        # A loader of the job's own making whose prefetch_factor is no
        # number: the figure cannot be written (ValueError, not OSError).
        it = types.SimpleNamespace(_epochfs_loader=loader, _num_workers=2, _prefetch_factor="two")
        _hook._reported.clear()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            _hook._guarded(_hook._declare_batches, it, (types.SimpleNamespace(nbytes=10),))
        self.assertEqual(loader._epochfs_meter["fds"], {}, "the loader's reports end")
        self.assertIn("stopped reporting to the mount (ValueError", err.getvalue())
        with self.assertRaises(OSError):
            os.fstat(w)                     # its descriptor closed
        self.assertEqual(os.read(r, 100), b"")

    def test_nothing_without_workers(self):
        r, loader = self.meter_with_pipe()
        it = types.SimpleNamespace(_epochfs_loader=loader, _num_workers=0)
        _hook._declare_batches(it, (types.SimpleNamespace(nbytes=1000),))
        os.close(loader._epochfs_meter["fds"].pop("/m"))
        self.assertEqual(os.read(r, 100), b"")
        self.assertEqual(loader._epochfs_meter["batches"], 0)
