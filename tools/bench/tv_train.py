"""An unmodified torchvision training input pipeline, timed per epoch: the
job of make bench part 7 (tools/bench/stalls.sh).

    tv_train.py ROOT [--workers W] [--epochs E] [--batch B] [--seed S]
                [--world N --rank R] [--model resnet18|resnet50] [--trace N]

ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize, DataLoader(batch 64, shuffle, W workers), each epoch iterated to
the end (the GPU is left out: what remains is the data loading a training
step waits for). Prints one JSON line per epoch: epoch, seconds, images,
and the time spent waiting in next() (the stall). With --world N, the job
is rank R of N reading its shard through torch's DistributedSampler
(set_epoch each epoch), as a DDP rank would, with no process group. With
--model (make bench's GPU part, tools/bench/gpu.sh), each batch also trains
that torchvision model on the GPU as a usual script does: pinned batches
copied non_blocking, forward and backward under bf16 autocast, an SGD step,
loss.item() for the log (which waits for the step). --trace N adds each
epoch's first N steps to its line: [wait, step] seconds each.
"""
import argparse
import json
import time

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--world", type=int, default=1)
ap.add_argument("--rank", type=int, default=0)
ap.add_argument("--model", choices=("resnet18", "resnet50"))
ap.add_argument("--trace", type=int, default=0)
a = ap.parse_args()
torch.manual_seed(a.seed)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = ImageFolder(a.root, transform=tf)
sampler = None
if a.world > 1:
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(ds, num_replicas=a.world, rank=a.rank, shuffle=True, seed=a.seed)
step = None
if a.model:
    import torchvision.models
    dev = torch.device("cuda")
    net = getattr(torchvision.models, a.model)(num_classes=len(ds.classes))
    net = net.to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        x = x.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
dl = DataLoader(ds, batch_size=a.batch, shuffle=sampler is None, sampler=sampler,
                num_workers=a.workers, pin_memory=bool(a.model))
for e in range(a.epochs):
    if sampler is not None:
        sampler.set_epoch(e)
    t0 = time.monotonic()
    n = 0
    waited = 0.0
    trace = []
    it = iter(dl)
    while True:
        w0 = time.monotonic()
        try:
            x, y = next(it)
        except StopIteration:
            break
        w1 = time.monotonic()
        waited += w1 - w0
        n += len(y)
        if step:
            step(x, y)
        if len(trace) < a.trace:
            trace.append([round(w1 - w0, 4), round(time.monotonic() - w1, 4)])
    rec = {"epoch": e, "seconds": time.monotonic() - t0, "images": n, "waited": waited}
    if a.trace:
        rec["first_steps"] = trace
    print(json.dumps(rec), flush=True)
