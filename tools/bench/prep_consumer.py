"""One consumer of a prep group, as a training loop would be: every batch of
an epoch, in order, as float32 torch tensors (uint8 batches are turned into
[0, 1] floats here, what ToTensor gives), or only the batch files' bytes
with --raw (read as every reader does, epochfs.prep.read_batch).

    prep_consumer.py MOUNT NAME EPOCH [--raw]
prints one JSON line: batches, images, bytes, cpu_s (this process), wall_s.
"""
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import epochfs.prep as ep  # noqa: E402
import torch  # noqa: E402  (imported before timing, as tv_pipeline.py does)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


mount, name, epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = "--raw" in sys.argv
c0, t0 = cpu(), time.monotonic()
batches = images = nbytes = 0
buf = out = None
d = os.path.join(mount, ".prep", name, "epoch-%04d" % epoch)
for f in sorted(os.listdir(d)):
    b = ep.read_batch(os.path.join(d, f), buf)   # O_DIRECT into one recycled buffer
    buf = b.pixels.obj
    if raw:
        batches += 1
        nbytes += len(b.pixels)
        continue
    x, y = b.torch()
    if b.dtype == "uint8":                  # ToTensor's x / 255, into one recycled array
        out = b.float01(out)
        x = torch.from_numpy(out)
    batches += 1
    images += b.n
    nbytes += len(b.pixels)
c1, t1 = cpu(), time.monotonic()
print(json.dumps({"batches": batches, "images": images, "bytes": nbytes, "cpu_s": c1 - c0, "wall_s": t1 - t0}))
