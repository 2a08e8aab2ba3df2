"""One reader thread, whole files in a fresh shuffled order each epoch: the
fio-style job of make bench part 7 (tools/bench/stalls.sh).

    order_reader.py ROOT [--epochs E] [--order] [--seed S]

With --order, each epoch's order is written to the epochfs mount ROOT is on
(.epochfs/order/, through the epochfs package) before the reads. Prints one
JSON line per epoch: epoch, seconds, files, bytes, waited (all of it: a
single reader waits for every byte).
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import epochfs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--order", action="store_true")
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
root = os.path.realpath(a.root)
files = sorted(os.path.relpath(os.path.join(d, f), root)
               for d, _, fs in os.walk(root) for f in fs if not f.startswith("."))
mount = epochfs.mount_of(root) if a.order else None
if a.order and mount is None:
    sys.exit("order_reader: %s is on no epochfs mount" % root)
rng = random.Random(a.seed)
for e in range(a.epochs):
    order = files[:]
    rng.shuffle(order)
    t0 = time.monotonic()
    if mount:
        prefix = mount[1] + "/" if mount[1] else ""
        epochfs.publish_order(mount[0], "order-reader", [prefix + p for p in order])
    n = 0
    for rel in order:
        with open(os.path.join(root, rel), "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
    dt = time.monotonic() - t0
    print(json.dumps({"epoch": e, "seconds": dt, "files": len(order), "bytes": n, "waited": dt}),
          flush=True)
