"""A WebDataset-style training input pipeline over tar shards, timed per
epoch: the shard job of make bench part 7 (tools/bench/stalls.sh with
STALL_SHARDS=K; shards made by tools/bench/wds_pack.py).

    wds_train.py DIR [--workers W] [--epochs E] [--batch B] [--seed S]
                 [--shuffle-buffer N] [--shuffle-initial M] [--tell-order]

What the webdataset library does for `WebDataset(urls, shardshuffle=True)
.shuffle(N).decode("pil").to_tuple("jpg", "cls").map_tuple(transform,
int)`, written with the standard library and torch alone (Debian has no
webdataset package): each epoch the shard list DIR/*.tar is shuffled with
one seed for the whole job, worker w of W takes shards w, w + W, ...,
reads each one front to back as a tar stream, groups its members by key,
passes the samples through a shuffle buffer of N raw samples, decodes the
JPEG (PIL) and applies the transforms of tools/bench/tv_train.py:
RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize.
DataLoader batches of 64 (non-persistent workers). Prints one JSON line per
epoch as tv_train.py does: epoch, seconds, images, waited (the time spent
in next(), the stall), shards.

The shuffle buffer behaves as webdataset's (tools/bench/wds_shuffle.py):
it hands out samples once it holds M (--shuffle-initial, 100), and takes
two from the shards for each it hands out until it holds N
(--shuffle-buffer, 1000), then one for one. Until 2026-11-28 this job
filled all N before handing out any: N = 1000 of the 2,000 samples a
worker has here is half its epoch read with nothing decoded.

--tell-order: DIR is an epochfs mount, and each worker writes its shards
for the epoch, in the order it will read them, to its own stream of the
order channel (DIR/.epochfs/order/wds-PID-wN) before it reads them, and
removes it at the end: what docs/prefetch.md shows a shard job doing.
"""
import argparse
import glob
import io
import json
import os
import random
import tarfile
import time

import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from wds_shuffle import shuffled

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--shuffle-buffer", type=int, default=1000)
ap.add_argument("--shuffle-initial", type=int, default=100)
ap.add_argument("--tell-order", action="store_true")
a = ap.parse_args()
torch.manual_seed(a.seed)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
urls = sorted(glob.glob(os.path.join(a.root, "*.tar")))
if not urls:
    raise SystemExit("wds_train: no *.tar in %s" % a.root)


def samples(url):
    """(key, {ext: bytes}) for each sample of one tar shard, read in order."""
    key, cur = None, {}
    with open(url, "rb") as f, tarfile.open(fileobj=f, mode="r|") as t:
        for m in t:
            if not m.isfile():
                continue
            k, _, ext = m.name.rpartition(".")
            if k != key and cur:
                yield key, cur
                cur = {}
            key = k
            cur[ext] = t.extractfile(m).read()
    if cur:
        yield key, cur


class Shards(IterableDataset):
    def __init__(self, urls):
        self.urls = urls
        self.epoch = 0

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        order = list(self.urls)
        random.Random(a.seed * 1000003 + self.epoch).shuffle(order)
        rng = random.Random((a.seed * 1000003 + self.epoch) * 64 + wid)
        mine = order[wid::nw]
        stream = None
        if a.tell_order and mine:
            stream = os.path.join(a.root, ".epochfs/order", "wds-%d-w%d" % (os.getppid(), wid))
            with open(stream, "w") as o:
                o.write("".join(os.path.relpath(u, a.root) + "\n" for u in mine))
        src = (s for url in mine for _, s in samples(url) if "jpg" in s and "cls" in s)
        for s in shuffled(src, a.shuffle_buffer, a.shuffle_initial, rng):
            yield self.decode(s)
        if stream:
            os.unlink(stream)

    @staticmethod
    def decode(s):
        img = Image.open(io.BytesIO(s["jpg"])).convert("RGB")
        return tf(img), int(s["cls"])


ds = Shards(urls)
dl = DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
for e in range(a.epochs):
    ds.epoch = e       # the workers start anew each epoch and take it with them
    t0 = time.monotonic()
    n = 0
    waited = 0.0
    it = iter(dl)
    while True:
        w0 = time.monotonic()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waited += time.monotonic() - w0
        n += len(y)
    print(json.dumps({"epoch": e, "seconds": time.monotonic() - t0, "images": n, "waited": waited,
                      "shards": len(urls)}), flush=True)
