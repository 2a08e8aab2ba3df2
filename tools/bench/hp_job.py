"""One job of a simulated hyperparameter search (make bench part 5, the
end-to-end table of tools/bench/hpsearch.sh): --epochs (1) epochs of
minibatches with a fixed sleep per step standing in for the GPU's training
step.

    hp_job.py tv ROOT [--batch 64] [--workers 1] [--step-ms 15]
        each job its own torchvision pipeline: ImageFolder + RandomResizedCrop
        (224) + RandomHorizontalFlip + ToTensor + Normalize, DataLoader with
        shuffle and W workers;
    hp_job.py prep MOUNT GROUP [--step-ms 15]
        the batches of one shared .prep/ group, read through
        epochfs.prep.torch_batches (uint8 batches turned into float32 in
        [0, 1] by the reader, float32 ones as the daemon made them).

With --touch, every step reads the whole images tensor (its sum, what a
copy from pageable memory to the GPU reads) before the sleep. With --ready
FILE --go FILE, the job creates READY once its imports are done and starts
its first epoch when GO exists: K jobs then start together, and their
interpreters' start-up is left out. Prints one JSON line: batches, images,
t0 and t1 (the first epoch's start and the last one's end, time.time()),
wall_s, cpu_s (the epochs', this process and its children).
"""
import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=("tv", "prep"))
ap.add_argument("root")
ap.add_argument("group", nargs="?")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--workers", type=int, default=1)
ap.add_argument("--step-ms", type=float, default=15.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--touch", action="store_true")
ap.add_argument("--ready")
ap.add_argument("--go")
a = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(a.seed)


def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


if a.mode == "tv":
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = DataLoader(ImageFolder(a.root, transform=tf), batch_size=a.batch, shuffle=True,
                        num_workers=a.workers)

    def batches():
        for _ in range(a.epochs):
            yield from loader           # its workers start with each epoch
else:
    import epochfs.prep as ep
    if not a.group:
        ap.error("prep needs MOUNT GROUP")

    def batches():
        for e in range(a.epochs):
            yield from ep.torch_batches(a.root, a.group, e)

if a.ready:
    open(a.ready, "w").close()
if a.go:
    while not os.path.exists(a.go):
        time.sleep(0.002)
c0, t0, w0 = cpu(), time.monotonic(), time.time()
n = images = 0
check = 0.0
for x, y in batches():
    if a.touch:
        check += float(x.sum())
    time.sleep(a.step_ms / 1000.0)
    n += 1
    images += len(y)
print(json.dumps({"batches": n, "images": images, "t0": w0, "t1": time.time(), "wall_s": time.monotonic() - t0,
                  "cpu_s": cpu() - c0, "check": check}), flush=True)
