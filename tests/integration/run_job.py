"""A small, unmodified-style PyTorch job for t_run.sh: DataLoaders over an
ImageFolder on the mount with every kind of sampler the order hook reads
ahead (RandomSampler with and without a generator of its own, with
replacement, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler,
DistributedSampler with set_epoch, a BatchSampler over a RandomSampler, a
list of indices; shuffled with 2 workers, a Subset/ConcatDataset), and the
kinds it must leave alone: a custom sampler that draws each index from
torch's global stream as it goes, and an infinite one without a length
(the job takes 3 batches of it). Also a dataset the hook cannot map. The
main-process loaders flip images at random (torch's global stream, between
the sampler's draws), and the job draws from a loader's generator between
batches. Prints, as JSON, every batch's indices, labels and pixel sum and
draws from torch's global stream (and the generators) after every epoch:
the run must print the same with and without epochfs-run."""
import json
import sys

import torch
import torchvision
from torch.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, RandomSampler, Sampler,
                              SequentialSampler, Subset, SubsetRandomSampler, WeightedRandomSampler)
from torch.utils.data.distributed import DistributedSampler

root = sys.argv[1]
torch.manual_seed(7)
T = torchvision.transforms
plain_tf = T.Compose([T.Resize((8, 8)), T.PILToTensor()])
flip_tf = T.Compose([T.Resize((8, 8)), T.RandomHorizontalFlip(), T.PILToTensor()])


class Indexed(torchvision.datasets.ImageFolder):
    """ImageFolder whose items also carry their index."""

    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x, y, i


ds = Indexed(root, transform=plain_tf)
flipped = Indexed(root, transform=flip_tf)
out = []


def run(loader, epochs, sampler=None, draw_from=None, steps=None):
    for e in range(epochs):
        if sampler is not None:
            sampler.set_epoch(e)
        for k, (x, y, i) in enumerate(loader):
            out.append([i.tolist(), y.tolist(), int(x.sum())])
            if draw_from is not None:
                out.append(torch.rand(1, generator=draw_from).tolist())
            if steps is not None and k + 1 >= steps:
                break
        out.append(torch.rand(2).tolist())
        if draw_from is not None:
            out.append(torch.rand(1, generator=draw_from).tolist())


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


class LazyGlobal(Sampler):
    """Draws each index from torch's global stream when it is asked for."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(self.n):
            yield int(torch.randint(self.n, (1,)))

    def __len__(self):
        return self.n


class Forever(Sampler):
    """No length, no end, as detectron2's TrainingSampler; a hook that
    drained it would fail at 10,000 indices rather than fill the memory."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(10000):
            yield int(torch.randint(self.n, (1,)))
        raise RuntimeError("Forever was drained")


n = len(ds)
# RandomSampler, its own seed from the global stream (shuffle=True), 2 workers: 2 x 120
run(DataLoader(ds, batch_size=16, shuffle=True, num_workers=2), 2)
# Subset/ConcatDataset: 60 + 40
half = Subset(ds, list(range(0, n, 2)))
third = Subset(ds, list(range(1, n, 3)))
run(DataLoader(ConcatDataset([half, third]), batch_size=8, shuffle=True), 1)
# DistributedSampler, rank 1 of 2: 2 x 60
dist = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
run(DataLoader(ds, batch_size=16, sampler=dist, num_workers=2), 2, dist)
# SequentialSampler: 120
run(DataLoader(flipped, batch_size=16), 1)
# RandomSampler over the DataLoader's generator, drawn from by the job too: 2 x 120
g = gen(11)
run(DataLoader(flipped, batch_size=16, shuffle=True, generator=g), 2, draw_from=g)
# RandomSampler with replacement, its own generator: 50
g = gen(12)
run(DataLoader(flipped, batch_size=8, sampler=RandomSampler(ds, replacement=True, num_samples=50, generator=g)),
    1, draw_from=g)
# SubsetRandomSampler: 40
run(DataLoader(flipped, batch_size=8, sampler=SubsetRandomSampler(list(range(0, n, 3)))), 1)
# WeightedRandomSampler: 30
run(DataLoader(flipped, batch_size=8, sampler=WeightedRandomSampler([1.0 + i % 4 for i in range(n)], 30)), 1)
# BatchSampler over a RandomSampler, as the job's batch_sampler: 12 x 10
run(DataLoader(flipped, batch_sampler=BatchSampler(RandomSampler(ds), 10, drop_last=True)), 1)
# A list of indices: 18
run(DataLoader(flipped, batch_size=8, sampler=list(range(n - 1, -1, -7))), 1)
# Left alone: a custom sampler drawing as it goes; an infinite one, 3 batches.
run(DataLoader(flipped, batch_size=8, sampler=LazyGlobal(n)), 1)
run(DataLoader(flipped, batch_size=8, sampler=Forever(n)), 1, steps=3)


class Numbers(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return i


for b in DataLoader(Numbers(), batch_size=4, shuffle=True):
    out.append(b.tolist())
out.append(torch.rand(3).tolist())
print(json.dumps(out))
