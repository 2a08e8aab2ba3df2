"""The order hook reads ahead only the samplers it can read without
changing training (issue 29): sampler_job.py runs every kind, with real
torch, once as it is and once with the hook armed, and everything the job
saw (indices, the values its dataset and loop drew from torch's global
stream and from the loaders' generators, the draws after each epoch) must
be the same. The hooked run must also have told, for each epoch of each
sampler the hook knows, the very indices the loader then read, and nothing
for the rest (custom, subclassed, infinite, over the order bound), each
said once on stderr. The sampler rules themselves (sampler_plan) are
checked class by class, and a plan draws nothing. Skipped without torch."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
    from torch.utils.data import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                                  WeightedRandomSampler)
    from torch.utils.data.distributed import DistributedSampler
except ImportError:                     # pragma: no cover
    torch = None

from epochfs import _hook

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

# Cases whose order the hook must tell exactly: every epoch, what was read.
EXACT = ["sequential", "random", "random-replacement", "random-generator", "random-generator-chunks",
         "random-generator-passes", "subset-random", "subset-random-generator", "weighted",
         "weighted-generator", "distributed", "batch-sampler", "batch-sampler-generator",
         "batch-sampler-sequential", "list", "no-batching"]
# Told, but the job draws from the sampler's generator between its chunks:
# the order is a copy's guess; training must not move.
GUESSED = ["random-generator-shared"]
# Told, read by two workers: the same files, interleaved by worker.
INTERLEAVED = ["workers"]
# Never told, never read ahead.
UNTOLD = {"lazy-global": "LazyGlobal: not one of torch's own samplers",
          "subclass": "MyRandom: not one of torch's own samplers",
          "forever": "Forever: it has no length",
          "too-big": "RandomSampler: an epoch of 40 indices is more than an order holds (39)"}


@unittest.skipIf(torch is None, "torch is not installed")
class Identity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="epochfs-samplers-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
        env["PYTHONPATH"] = PKG_ROOT
        cls.runs = {}
        for mode in ("plain", "hooked"):
            r = subprocess.run([sys.executable, os.path.join(HERE, "sampler_job.py"), cls.tmp, mode], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
            cls.runs[mode] = (r.returncode, r.stdout, r.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def result(self, mode):
        rc, out, err = self.runs[mode]
        self.assertEqual(rc, 0, err)
        return json.loads(out), err

    def test_training_unchanged_for_every_sampler(self):
        plain, _ = self.result("plain")
        hooked, _ = self.result("hooked")
        self.assertEqual(sorted(plain["seen"]), sorted(EXACT + GUESSED + INTERLEAVED + list(UNTOLD)))
        for name in plain["seen"]:
            self.assertEqual(plain["seen"][name], hooked["seen"][name], name)

    def test_orders_told_are_the_orders_read(self):
        hooked, _ = self.result("hooked")
        for name in EXACT:
            for e, (got, told) in enumerate(zip(hooked["seen"][name], hooked["orders"][name])):
                self.assertEqual(told, [got["idx"]], "%s, epoch %d" % (name, e))
        for name in INTERLEAVED:
            for got, told in zip(hooked["seen"][name], hooked["orders"][name]):
                self.assertEqual(len(told), 1, name)
                self.assertEqual(sorted(told[0]), sorted(got["idx"]), name)
        for name in GUESSED:
            for got, told in zip(hooked["seen"][name], hooked["orders"][name]):
                self.assertEqual([len(o) for o in told], [len(got["idx"])], name)

    def test_the_rest_untold_and_said_once(self):
        hooked, err = self.result("hooked")
        for name, line in UNTOLD.items():
            self.assertEqual([o for o in hooked["orders"][name] if o], [], name)
            self.assertEqual(err.count(line), 1, (line, err))
        self.assertEqual(hooked["seen"]["forever"][-1], {"drawn": 12})     # 3 batches of 4, nothing ahead
        lines = [x for x in err.split("\n") if x]
        self.assertTrue(all(x.startswith("epochfs-run: ") for x in lines), err)
        self.assertEqual(len(lines), len(UNTOLD) + 1, err)                  # and "orders go to"


@unittest.skipIf(torch is None, "torch is not installed")
class Plans(unittest.TestCase):
    def setUp(self):
        self.ds = list(range(10))

    def plan(self, s):
        return _hook.sampler_plan(s)

    def test_torch_samplers(self):
        ds = self.ds
        g = torch.Generator()
        self.assertEqual(self.plan(SequentialSampler(ds)), ("take", 10))
        self.assertEqual(self.plan(RandomSampler(ds)), ("take", 10))
        self.assertEqual(self.plan(RandomSampler(ds, replacement=True, num_samples=33)), ("take", 33))
        self.assertEqual(self.plan(RandomSampler(ds, generator=g)), ("copy", 10))
        self.assertEqual(self.plan(SubsetRandomSampler([1, 2, 3], generator=g)), ("take", 3))
        self.assertEqual(self.plan(WeightedRandomSampler([1.0] * 10, 4, generator=g)), ("take", 4))
        self.assertEqual(self.plan(DistributedSampler(ds, num_replicas=3, rank=0)), ("take", 4))
        self.assertEqual(self.plan(BatchSampler(RandomSampler(ds), 3, False)), ("take", 10))
        self.assertEqual(self.plan(BatchSampler(RandomSampler(ds, generator=g), 3, True)), ("copy", 10))
        self.assertEqual(self.plan([3, 1, 2]), ("take", 3))
        self.assertEqual(self.plan(range(5)), ("take", 5))

    def test_others_left_alone(self):
        class Custom(Sampler):
            def __iter__(self):
                raise AssertionError("drawn")

            def __len__(self):
                raise AssertionError("asked its length")

        class Endless(Sampler):
            def __iter__(self):
                raise AssertionError("drawn")

        class Sub(SequentialSampler):
            def __len__(self):
                return 3

        class OwnBatches(BatchSampler):
            def __iter__(self):
                raise AssertionError("drawn")

        self.assertEqual(self.plan(Custom(None)), (None, 0))
        self.assertEqual(self.plan(Endless(None)), (None, None))
        self.assertEqual(self.plan(Sub(self.ds)), (None, 0))
        self.assertEqual(self.plan(BatchSampler(Endless(None), 2, False)), (None, None))
        self.assertEqual(self.plan(OwnBatches(RandomSampler(self.ds), 2, False)), (None, 0))
        self.assertEqual(self.plan(iter([1, 2])), (None, None))

    def test_copy_leaves_the_generator_alone(self):
        g = torch.Generator()
        g.manual_seed(11)
        s = BatchSampler(RandomSampler(self.ds, replacement=True, num_samples=70, generator=g), 4, False)
        state = g.get_state()
        told = _hook.copy_order(s)
        self.assertTrue(torch.equal(state, g.get_state()))
        self.assertEqual(told, list(s))                 # the job's own, drawn after
        self.assertFalse(torch.equal(state, g.get_state()))

    def test_a_plan_draws_nothing(self):
        state = torch.get_rng_state()
        for s in (RandomSampler(self.ds), SubsetRandomSampler([1, 2]), WeightedRandomSampler([1.0, 2.0], 5)):
            self.plan(s)
        self.assertTrue(torch.equal(state, torch.get_rng_state()))


if __name__ == "__main__":
    unittest.main()
