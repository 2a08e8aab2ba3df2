"""A torchvision job for t_analyze.sh: ImageFolder on ROOT, shuffled, W
workers, a small training step (a matrix product per batch); with --die-at
E it raises in epoch E after 2 steps, as a failing job would."""
import argparse

import torch
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=1)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--die-at", type=int, default=-1)
a = ap.parse_args()
torch.manual_seed(1)
tf = torchvision.transforms.Compose([torchvision.transforms.RandomResizedCrop(32),
                                     torchvision.transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=a.workers)
w = torch.randn(32 * 32 * 3, 64)
for e in range(a.epochs):
    for i, (x, y) in enumerate(dl):
        if e == a.die_at and i == 2:
            raise SystemExit("analyze_job: dying in epoch %d as asked" % e)
        (x.flatten(1) @ w).relu().sum()
print("analyze_job: done")
