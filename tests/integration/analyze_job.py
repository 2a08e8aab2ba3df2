"""A torchvision job for t_analyze.sh: ImageFolder on ROOT, shuffled, W
workers, a small training step (a matrix product per batch); with --die-at
E it raises in epoch E after 2 steps, as a failing job would. With
--forever its sampler has no length and no end (detectron2's kind), and
each "epoch" is 6 steps of it; it fails at once if anyone drains it."""
import argparse
import os
import sys

import torch
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=1)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--die-at", type=int, default=-1)
ap.add_argument("--forever", action="store_true")
a = ap.parse_args()


class Forever(torch.utils.data.Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(10000):
            yield int(torch.randint(self.n, (1,)))
        # Drained: the hook's own errors are caught, an exit is not.
        sys.stderr.write("analyze_job: the infinite sampler was drained\n")
        os._exit(3)


torch.manual_seed(1)
tf = torchvision.transforms.Compose([torchvision.transforms.RandomResizedCrop(32),
                                     torchvision.transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
if a.forever:
    dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=Forever(len(ds)), num_workers=a.workers)
else:
    dl = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=a.workers)
w = torch.randn(32 * 32 * 3, 64)
for e in range(a.epochs):
    for i, (x, y) in enumerate(dl):
        if e == a.die_at and i == 2:
            raise SystemExit("analyze_job: dying in epoch %d as asked" % e)
        if a.forever and i == 6:
            break
        (x.flatten(1) @ w).relu().sum()
print("analyze_job: done")
