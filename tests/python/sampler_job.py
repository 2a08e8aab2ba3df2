"""A job for test_samplers.py: DataLoaders over every kind of sampler the
order hook knows, and a few it must leave alone, each for two epochs (the
infinite one for three batches). The dataset draws from torch's global
stream in every __getitem__ (an augmentation in the main process), some
loaders' generators are drawn from by the job between batches, and after
each epoch the job draws from the global stream (and the loader's own
generator): any draw the hook moved, added or took away shows.

    python3 sampler_job.py ROOT plain|hooked

prints one JSON object: "seen" (what the job saw: per case and epoch, the
indices and values of its batches and the draws after), and with "hooked"
"orders" (per case and epoch, the orders the hook wrote, as indices). The
hooked run arms the hook by hand with ROOT taken for an epochfs mount: its
orders go to ROOT/.epochfs/order/ as plain files."""
import json
import os
import sys

import torch
from torch.utils.data import (BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler,
                              SubsetRandomSampler, WeightedRandomSampler)
from torch.utils.data.distributed import DistributedSampler

ROOT, MODE = sys.argv[1], sys.argv[2]
N = 40
orders = []

if MODE == "hooked":
    from epochfs import _hook
    os.makedirs(os.path.join(ROOT, ".epochfs", "order"), exist_ok=True)
    _hook.mounts = lambda: [ROOT]
    real_publish = _hook.publish_order

    def record(mount, stream, paths, **kw):
        paths = list(paths)
        orders.append(paths)
        return real_publish(mount, stream, paths, **kw)
    _hook.publish_order = record
    _hook.install(publish=True)


class Files(Dataset):
    """N files in ROOT (never opened); each item draws from the global stream."""

    def __init__(self):
        self.samples = [(os.path.join(ROOT, "c", "f%03d.jpg" % i), 0) for i in range(N)]

    def __len__(self):
        return N

    def __getitem__(self, i):
        return i, torch.rand(1)


class LazyGlobal(Sampler):
    """Draws each index from the global stream as it is asked for."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(self.n):
            yield int(torch.randint(self.n, (1,)))

    def __len__(self):
        return self.n


class MyRandom(RandomSampler):
    """A subclass with its own __iter__: not torch's."""

    def __iter__(self):
        for i in super().__iter__():
            yield (i * 7) % len(self.data_source)


class Forever(Sampler):
    """No length, no end (detectron2's TrainingSampler, mmengine's
    InfiniteSampler): draws from the global stream per index. Raises after
    DRAIN_LIMIT indices, so a hook that drained it fails at once rather than
    filling the memory."""
    DRAIN_LIMIT = 1000

    def __init__(self, n):
        self.n = n
        self.drawn = 0

    def __iter__(self):
        while True:
            self.drawn += 1
            if self.drawn > self.DRAIN_LIMIT:
                raise RuntimeError("Forever was drained")
            yield int(torch.randint(self.n, (1,)))


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


ds = Files()
path_index = {p: i for i, (p, _) in enumerate(ds.samples)}
weights = [1.0 + (i % 5) for i in range(N)]
seen = {}
told = {}


def flat(batch):
    idx, val = batch
    if torch.is_tensor(idx):
        return idx.reshape(-1).tolist(), val.reshape(-1).tolist()
    return [int(idx)], val.reshape(-1).tolist()


def case(name, loader, epochs=2, draw_from=None, set_epoch=None, steps=None):
    torch.manual_seed(sum(map(ord, name)))       # the same in every process (no str hash)
    out, mine = [], []
    for e in range(epochs):
        if set_epoch is not None:
            set_epoch(e)
        n0 = len(orders)
        got = {"idx": [], "val": []}
        for k, b in enumerate(loader):
            i, v = flat(b)
            got["idx"] += i
            got["val"] += v
            if draw_from is not None:        # the job uses the loader's generator too
                got["val"] += torch.rand(1, generator=draw_from).tolist()
            if steps is not None and k + 1 >= steps:
                break
        got["after"] = torch.rand(2).tolist()
        if draw_from is not None:
            got["after"] += torch.rand(1, generator=draw_from).tolist()
        out.append(got)
        mine.append([[path_index[os.path.join(ROOT, p)] for p in o] for o in orders[n0:]])
    seen[name] = out
    told[name] = mine


case("sequential", DataLoader(ds, batch_size=4))
case("random", DataLoader(ds, batch_size=4, shuffle=True))
case("random-replacement", DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, replacement=True, num_samples=70)))
g = gen(1)
case("random-generator", DataLoader(ds, batch_size=4, shuffle=True, generator=g), draw_from=g)
case("random-generator-chunks",
     DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, replacement=True, num_samples=70, generator=gen(2))))
g = gen(3)
case("random-generator-shared",
     DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, replacement=True, num_samples=70, generator=g)),
     draw_from=g)
case("random-generator-passes", DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, num_samples=100,
                                                                                    generator=gen(4))))
case("subset-random", DataLoader(ds, batch_size=4, sampler=SubsetRandomSampler(list(range(0, N, 3)))))
case("subset-random-generator",
     DataLoader(ds, batch_size=4, sampler=SubsetRandomSampler(list(range(1, N, 3)), generator=gen(5))))
case("weighted", DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler(weights, 30)))
case("weighted-generator",
     DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler(weights, 30, replacement=False, generator=gen(6))))
dist = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
case("distributed", DataLoader(ds, batch_size=4, sampler=dist), set_epoch=dist.set_epoch)
case("batch-sampler", DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 6, drop_last=True)))
case("batch-sampler-generator",
     DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds, generator=gen(7)), 6, drop_last=False)))
case("batch-sampler-sequential", DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 7, False)))
case("list", DataLoader(ds, batch_size=4, sampler=list(range(N - 1, -1, -3))))
case("no-batching", DataLoader(ds, batch_size=None, shuffle=True))
case("workers", DataLoader(ds, batch_size=4, shuffle=True, num_workers=2))
case("lazy-global", DataLoader(ds, batch_size=4, sampler=LazyGlobal(N)))
case("subclass", DataLoader(ds, batch_size=4, sampler=MyRandom(ds)))
forever = Forever(N)
case("forever", DataLoader(ds, batch_size=4, sampler=forever), epochs=1, steps=3)
seen["forever"].append({"drawn": forever.drawn})
if MODE == "hooked":
    _hook.MAX_ORDER = N - 1              # one index too many for an order
case("too-big", DataLoader(ds, batch_size=4, shuffle=True))
print(json.dumps({"seen": seen, "orders": told}))
