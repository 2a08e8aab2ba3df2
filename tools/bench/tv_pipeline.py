"""torchvision's standard ImageNet train pipeline over an ImageFolder tree,
in one process with one thread: the baseline of make bench part 5.

    tv_pipeline.py ROOT [--limit N]
prints one JSON line: images, cpu_s (this process), wall_s.
"""
import argparse
import json
import resource
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--limit", type=int, default=0)
a = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
ds = ImageFolder(a.root, transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()]))
n = min(a.limit or len(ds), len(ds))
order = torch.randperm(len(ds))[:n].tolist()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


c0, t0 = cpu(), time.monotonic()
for i in order:
    img, label = ds[i]
c1, t1 = cpu(), time.monotonic()
print(json.dumps({"images": n, "cpu_s": c1 - c0, "wall_s": t1 - t0}))
