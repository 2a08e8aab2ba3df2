"""torchvision's standard ImageNet train pipeline over an ImageFolder tree,
in one process with one thread: the baseline of make bench part 5.

    tv_pipeline.py ROOT [--limit N] [--uint8]
prints one JSON line: images, cpu_s (this process), wall_s. With --uint8
the last transform is PILToTensor (a uint8 tensor, no float conversion)
instead of ToTensor: the pipeline a job that converts on the GPU runs.
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
ap.add_argument("--uint8", action="store_true")
a = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
last = T.PILToTensor() if a.uint8 else T.ToTensor()
ds = ImageFolder(a.root, transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), last]))
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
