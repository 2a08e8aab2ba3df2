"""Checks what the hook writes against what the loader reads, for t_run.sh:
run under epochfs-run, with publish_order wrapped to record each order.
With no workers, an epoch's order must be exactly the files in the order
__getitem__ is called; with 2 workers, a permutation of them whose two
workers' subsequences are each in their reading order."""
import os
import sys

import torch
import torchvision
from torch.utils.data import DataLoader

# The hook's own copy of the module, as the boot shim loaded it (not
# importable as epochfs: the job's path has no epochfs on it).
hook = sys.modules["_epochfs_hook._hook"]

root, mnt = sys.argv[1], sys.argv[2]
orders = []
real = hook.publish_order


def record(mount, stream, paths, **kw):
    orders.append(list(paths))
    return real(mount, stream, paths, **kw)


hook.publish_order = record


class Logged(torchvision.datasets.ImageFolder):
    def __getitem__(self, i):
        return os.path.relpath(self.samples[i][0], mnt)


ds = Logged(root)
for workers in (0, 2):
    got = []
    for e in range(2):
        loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers,
                            collate_fn=lambda b: b)
        n0 = len(orders)
        batches = list(loader)
        assert len(orders) == n0 + 1, "no order written for epoch %d" % e
        order = orders[-1]
        flat = [p for b in batches for p in b]
        if workers == 0:
            assert order == flat, "order differs from the reads"
        else:
            assert sorted(order) == sorted(flat) and len(order) == len(flat)
            for w in range(workers):
                mine = [p for k, b in enumerate(batches) if k % workers == w for p in b]
                pos = [order.index(p) for p in mine]
                assert pos == sorted(pos), "worker %d's files out of order" % w
        got.append(order)
    assert got[0] != got[1], "two epochs, one order"
print("ok")
