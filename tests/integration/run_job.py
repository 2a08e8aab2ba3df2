"""A small, unmodified-style PyTorch job for t_run.sh: DataLoaders over an
ImageFolder on the mount (shuffled, 2 workers), a Subset/ConcatDataset, a
DistributedSampler with set_epoch, and a dataset the hook cannot map.
Prints, as JSON, every batch's labels and pixel sum and a draw from torch's
global random stream at the end: the run must print the same with and
without epochfs-run."""
import json
import sys

import torch
import torchvision
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

root = sys.argv[1]
torch.manual_seed(7)
tf = torchvision.transforms.Compose([torchvision.transforms.Resize((8, 8)),
                                     torchvision.transforms.PILToTensor()])
ds = torchvision.datasets.ImageFolder(root, transform=tf)
out = []


def run(loader, epochs, sampler=None):
    for e in range(epochs):
        if sampler is not None:
            sampler.set_epoch(e)
        for x, y in loader:
            out.append([y.tolist(), int(x.sum())])


run(DataLoader(ds, batch_size=16, shuffle=True, num_workers=2), 2)
half = Subset(ds, list(range(0, len(ds), 2)))
third = Subset(ds, list(range(1, len(ds), 3)))
run(DataLoader(ConcatDataset([half, third]), batch_size=8, shuffle=True), 1)
dist = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
run(DataLoader(ds, batch_size=16, sampler=dist, num_workers=2), 2, dist)


class Numbers(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return i


for b in DataLoader(Numbers(), batch_size=4, shuffle=True):
    out.append(b.tolist())
out.append(torch.rand(3).tolist())
print(json.dumps(out))
